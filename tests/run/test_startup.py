"""experiment.py's start is one layer (experiment_main.run, issue 44): it alone installs the
stop-signal handler, and the run's configuration is resolved once.

Each start runs in a process of its own (absl's flags, the logdir's lock and the signal
handlers are per process), under a script that counts the calls to the resolver
(config.explain, which config.resolve calls too) and records every handler set for SIGINT and
SIGTERM.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.run.test_training import REPO_DIR

RECORD = "RECORD "
# Runs experiment_main.run() with sys.argv[1:]; prints what it saw as RECORD + JSON: the
# mode of each config resolved, and (signal name, handler's owner, owner's id) for each
# handler set for SIGINT or SIGTERM other than the one the process started with (a restore).
_RECORDING_START = textwrap.dedent("""
    import json, signal, sys
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    installed = []
    set_handler = signal.signal
    def recording_set_handler(signum, handler):
      if signum in before and handler is not before[signum]:
        owner = getattr(handler, "__self__", None)
        installed.append([signal.Signals(signum).name,
                          type(owner).__name__ if owner is not None else repr(handler),
                          id(owner)])
      return set_handler(signum, handler)
    signal.signal = recording_set_handler
    from scalable_agent_tf2.configuration import config as config_lib
    explain = config_lib.explain
    resolved = []
    def counting_explain(config):
      resolved.append(config.mode)
      return explain(config)
    config_lib.explain = counting_explain
    from scalable_agent_tf2.run import experiment_main
    sys.argv = ["experiment.py"] + sys.argv[1:]
    try:
      experiment_main.run()
    finally:
      print("RECORD " + json.dumps(dict(resolved=resolved, installed=installed)), flush=True)
""")
TOY = ("--level_name=toy/lit_side", "--num_actors=2")


def _start(*flags):
  """(exit code, output, the RECORD's dict) of one recorded start."""
  run = subprocess.run([sys.executable, "-c", _RECORDING_START, *TOY, *flags], cwd=REPO_DIR,
                       capture_output=True, text=True, timeout=280,
                       # As a terminal gives it (an ignored SIGINT would be inherited).
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  output = run.stdout + run.stderr
  records = [line for line in run.stdout.splitlines() if line.startswith(RECORD)]
  assert len(records) == 1, output[-3000:]
  return run.returncode, output, json.loads(records[0][len(RECORD):])


@pytest.fixture(scope="module")
def starts(tmp_path_factory):
  """A training of the toy level, then a test of its checkpoint: {mode: start}."""
  logdir = str(tmp_path_factory.mktemp("startup") / "run")
  trained = _start("--mode=train", f"--logdir={logdir}", "--total_environment_frames=160")
  assert trained[0] == 0 and "Stopped: frame budget reached." in trained[1], trained[1][-3000:]
  tested = _start("--mode=test", f"--logdir={logdir}", "--test_num_episodes=2")
  assert tested[0] == 0 and os.path.isdir(os.path.join(logdir, "evaluation")), tested[1][-3000:]
  return {"train": trained, "test": tested}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["train", "test"])
def test_the_config_is_resolved_once_per_run(starts, mode):
  _, output, record = starts[mode]
  assert record["resolved"] == [mode], output[-3000:]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["train", "test"])
def test_one_installer_owns_the_stop_signals_from_start_to_end(starts, mode):
  """The start's StopRequest is the only handler set: training and the test use it as it is
  (no StopRequest of train's own, no SigtermRaises of the test's), and it is set once."""
  _, output, record = starts[mode]
  installed = record["installed"]
  assert sorted(name for name, _, _ in installed) == ["SIGINT", "SIGTERM"], installed
  assert {(owner, owner_id) for _, owner, owner_id in installed} == {
      ("StopRequest", installed[0][2])}, output[-3000:]
