"""experiment.py's cluster flags: a learner that would accept anyone is refused at the start;
a secret file it cannot use is an error line (issue 30, point 3)."""
import json
import subprocess
import sys

import pytest

from dynamic_batching import build
from tests.run.test_training import REPO_DIR


def _learner(tmp_path, address, *flags):
  return subprocess.run(
      [sys.executable, "experiment.py", "--level_name=toy/lit_side", f"--logdir={tmp_path}",
       "--job_name=learner", f"--cluster={json.dumps({'learner': [address]})}", *flags],
      cwd=REPO_DIR, capture_output=True, text=True, timeout=240,
      # No secret from this environment; the op's cache kept (a fresh HOME would compile the
      # dynamic_batching op again: 30 s of g++ per test).
      env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           build.CACHE_DIR_ENV: build.default_cache_dir()})


def test_a_learner_on_a_network_address_without_a_secret_is_refused(tmp_path):
  result = _learner(tmp_path, "0.0.0.0:8123", "--total_environment_frames=1")
  assert result.returncode == 2, result.stdout + result.stderr
  assert result.stderr.startswith("error: ") and "--cluster_secret_file" in result.stderr
  assert "--insecure_open_cluster" in result.stderr and "Traceback" not in result.stderr


# Slow tier (a whole experiment.py start): the default tier keeps the test above for this
# command's refusal as an error line, and tests/transport/test_cluster_security.py's
# test_cluster_secret_from_a_file_else_the_environment for the empty file's ClusterError.
@pytest.mark.slow
def test_an_empty_secret_file_is_an_error_line(tmp_path):
  secret = tmp_path / "secret"
  secret.write_text("")
  result = _learner(tmp_path, "localhost:8124", f"--cluster_secret_file={secret}")
  assert result.returncode == 2, result.stdout + result.stderr
  assert result.stderr.startswith(f"error: The cluster secret file {secret} is empty")
