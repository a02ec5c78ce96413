"""The launcher (python -m scalable_agent_tf2.run.launch) with real processes."""
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest


def _pids(pattern):
  found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
  return [int(pid) for pid in found.split()]


def _commands(pids):
  return subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(map(str, pids)) or "0"],
                        capture_output=True, text=True).stdout


def _cluster_pids(logdir, drawing_secs=60.0):
  """The processes of the cluster in `logdir` still running once the launcher returned. The
  learner's final learning curve is drawn by a process of its own (run/learning_curve.py),
  which finishes after a learner killed while closing (docs/CLUSTERS.md): it gets
  `drawing_secs` to end by itself, and counts as left behind only if it does not."""
  deadline = time.monotonic() + drawing_secs
  while _pids(f"runfiles.plot {logdir}") and time.monotonic() < deadline:
    time.sleep(0.5)
  return _pids(logdir)


@contextlib.contextmanager
def _training_cluster(tmp_path):
  """Starts a launcher (a learner and one actor process) and yields (launcher, logdir, lines)
  once the learner trains (the console lines read so far in `lines`); leaves no process of
  the cluster behind, whatever the test saw."""
  logdir = str(tmp_path / "run")
  launcher = subprocess.Popen(
      [sys.executable, "-m", "scalable_agent_tf2.run.launch", "--num_actor_processes=1", "--",
       "--level_name=toy/lit_side", "--num_actors=2", "--total_environment_frames=100000000",
       f"--logdir={logdir}"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines = []
  try:
    _read_until(launcher, "[learner] frames", lines)  # Training: a console line.
    yield launcher, logdir, lines
  finally:
    if launcher.poll() is None:
      launcher.kill()
    for pid in _pids(logdir):
      os.kill(pid, signal.SIGKILL)


def _read_until(process, marker, lines):
  for line in process.stdout:
    lines.append(line)
    if marker in line:
      return
  raise AssertionError("launcher ended before %r:\n%s" % (marker, "".join(lines[-50:])))


# Slow tier (a whole cluster to start, 25 s): the default tier keeps
# test_sigint_is_answered_at_once_and_the_cluster_stops_with_a_checkpoint for the launcher's
# supervision of its processes, and tests/transport/test_cluster_security.py's
# test_a_killed_learner_is_reported_within_seconds for a learner killed under its actors.
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_learner_is_reported_at_once_and_the_actors_stop(tmp_path):
  with _training_cluster(tmp_path) as (launcher, logdir, lines):
    learner_pids = _pids(f"job_name=learner.*{logdir}|{logdir}.*job_name=learner")
    assert len(learner_pids) == 1, learner_pids
    killed_at = time.monotonic()
    os.kill(learner_pids[0], signal.SIGKILL)
    rest, _ = launcher.communicate(timeout=60)
    stopped_within = time.monotonic() - killed_at
    output = "".join(lines) + rest
    assert launcher.returncode != 0, output[-3000:]
    assert "[launch] the learner was killed by SIGKILL; stopping the actors" in output
    assert "Its last lines:\n  " in output
    # The actors were stopped, not left to wait out their reconnection window (300 s).
    assert stopped_within < 60
    left = _cluster_pids(logdir)
    assert left == [], _commands(left) + output[-3000:]


@pytest.mark.timeout(300)
def test_sigint_is_answered_at_once_and_the_cluster_stops_with_a_checkpoint(tmp_path):
  with _training_cluster(tmp_path) as (launcher, logdir, lines):
    launcher.send_signal(signal.SIGINT)
    _read_until(launcher, "[launch] SIGINT: stopping", lines)
    rest, _ = launcher.communicate(timeout=120)
    output = "".join(lines) + rest
    assert launcher.returncode == 0, output[-3000:]
    assert os.listdir(os.path.join(logdir, "checkpoints")), output[-3000:]
    left = _cluster_pids(logdir)
    assert left == [], _commands(left) + output[-3000:]


def test_bad_flags_are_reported_once_before_any_process_starts(capfd):
  from scalable_agent_tf2.run import launch
  code = launch.main(["--num_actor_processes=2", "--", "--level_name=atari/pongg",
                      "--logdir=/tmp/unused_launch_logdir"])
  captured = capfd.readouterr()
  assert code == 2
  assert captured.err.count("Unknown level name 'atari/pongg'") == 1
  assert "[learner]" not in captured.out and "[actor" not in captured.out
