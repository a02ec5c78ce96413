"""A cluster's faults as its learner and launcher see them, with real processes
(python -m scalable_agent_tf2.run.launch): an actor process frozen by SIGSTOP (a hung
machine) is recorded by the learner and never holds up a stop; a stop signal sent twice to an
actor process (GNU `timeout` sends its signal to the process and to its group) stops it once,
with its own report."""
import os
import signal
import subprocess
import sys
import time

import pytest

from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog
from tests.gym_user_package import slow_close
from tests.run.test_launch import _pids

TOY = ["--level_name=toy/lit_side", "--num_actors=2"]


def _start_cluster(logdir, num_actor_processes, flags, env=None):
  return subprocess.Popen(
      [sys.executable, "-m", "scalable_agent_tf2.run.launch",
       f"--num_actor_processes={num_actor_processes}", "--", *flags,
       "--total_environment_frames=100000000", f"--logdir={logdir}"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _wait_for(process, marker, lines, since=0):
  """Reads the launcher's lines until one (from lines[since] on) holds `marker` (a string, or
  a tuple of which any will do)."""
  markers = (marker,) if isinstance(marker, str) else marker
  if any(m in line for line in lines[since:] for m in markers):
    return
  for line in process.stdout:
    lines.append(line)
    if any(m in line for m in markers):
      return
  raise AssertionError(f"launcher ended before {marker!r}:\n" + "".join(lines[-60:]))


def _actor_pid(logdir, task):
  pids = _pids(f"{logdir} --job_name=actor --task={task}")
  assert len(pids) == 1, pids
  return pids[0]


def _subsequence(wanted, events):
  remaining = iter(events)
  return all(any(event == step for event in remaining) for step in wanted)


def _kill_what_is_left(launcher, logdir):
  """A failed test leaves no launcher and none of the cluster's processes running."""
  if launcher.poll() is None:
    launcher.kill()
  for pid in _pids(logdir):
    os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_a_frozen_actor_process_is_recorded_by_the_learner_and_never_holds_up_the_stop(
    tmp_path):
  """The learner recorded nothing of a frozen or dead actor process, its header said
  "2 actors" for 2 processes of 2, and the launcher's stop waited 120 s, then 10 s, for it."""
  logdir = str(tmp_path / "run")
  # Its environments' steps may take 3 s: an actor process silent for longer is recorded.
  launcher = _start_cluster(logdir, 2, TOY + ["--env_step_timeout_secs=3"])
  lines = []
  try:
    for task in (0, 1):
      _wait_for(launcher, f"[learner] Actor process {task}: first trajectory received", lines)
    assert "[learner]   impala: actor processes of 2 actors each (as many as connect)" in (
        "".join(lines))
    frozen = _actor_pid(logdir, 1)
    os.kill(frozen, signal.SIGSTOP)
    since = len(lines)
    _wait_for(launcher, "[learner] Actor process 1 has sent nothing for", lines, since)
    os.kill(frozen, signal.SIGCONT)
    _wait_for(launcher, "[learner] Actor process 1 sends again", lines, since)
    os.kill(frozen, signal.SIGSTOP)
    launcher.send_signal(signal.SIGTERM)
    # Seconds (the learner's checkpoint, then 5 s): a timeout here is the stop waiting for
    # the frozen process.
    rest, _ = launcher.communicate(timeout=90)
  finally:
    _kill_what_is_left(launcher, logdir)
  output = "".join(lines) + rest
  assert launcher.returncode == 0, output[-3000:]
  assert ("[launch] actor 1 did not stop within 5 s of the stop signal (frozen or hung); "
          "killing it.") in output, output[-3000:]
  assert checkpoints.latest_checkpoint(logdir) is not None
  records = runlog.of_kind(runlog.read_log(logdir), runlog.ACTOR_PROCESS)
  events = [record["event"] for record in records if record["task"] == 1]
  assert _subsequence(["joined", "silent", "sending again"], events), records
  assert [record["event"] for record in records if record["task"] == 0][0] == "joined"


@pytest.mark.timeout(300)
def test_a_second_sigterm_while_an_actor_process_stops_keeps_its_report(tmp_path):
  """The second SIGTERM raised Stopping again wherever the actor process's stop was: in its
  threads' joins it printed "Stopped: interrupted (SIGTERM) before acting started." instead
  of its count of trajectories; in the closing of its environments (here: its close() takes
  seconds), a traceback."""
  logdir = str(tmp_path / "run")
  markers = tmp_path / "closing"
  markers.mkdir()
  env = dict(os.environ, USER_CLOSE_MARKER_DIR=str(markers))
  launcher = _start_cluster(
      logdir, 1, ["--level_name=gym:tests.gym_user_package.slow_close:UserSlowClose-v0",
                  "--num_actors=1"], env=env)
  lines = []
  try:
    _wait_for(launcher, "[actor 0] Actor process 0: first trajectory delivered", lines)
    actor = _actor_pid(logdir, 0)
    # The level's description (its step's cost, measured before acting) stepped and closed an
    # environment already, which left its marker: only a marker written after the signal says
    # the process is in its stop (else the two signals can arrive as one).
    for marker in markers.iterdir():
      marker.unlink()
    os.kill(actor, signal.SIGTERM)
    while not os.listdir(markers):  # Its environment is closing: the process is stopping.
      assert os.path.exists(f"/proc/{actor}"), "".join(lines[-60:])
      time.sleep(0.05)
    # The close waits for the release file (slow_close.py), so this signal always finds the
    # process in its stop.
    os.kill(actor, signal.SIGTERM)
    _wait_for(launcher, ("[actor 0] still stopping", "[actor 0] Actor process stopped",
                         "[actor 0] Stopped:"), lines)
    (markers / slow_close.RELEASE_FILE).write_text("go\n")
    _wait_for(launcher, ("[actor 0] Actor process stopped", "[actor 0] Stopped:"), lines)
    launcher.send_signal(signal.SIGTERM)
    rest, _ = launcher.communicate(timeout=90)
  finally:
    _kill_what_is_left(launcher, logdir)
  output = "".join(lines) + rest
  actor_lines = "".join(line for line in output.splitlines(True) if "[actor 0]" in line)
  assert "[actor 0] Actor process stopped: interrupted (SIGTERM); " in actor_lines, actor_lines
  assert "trajectories sent." in actor_lines.split("[actor 0] Actor process stopped")[1]
  assert "before acting started" not in actor_lines, actor_lines
  assert "Traceback" not in actor_lines, actor_lines
  assert "[actor 0] still stopping ... (SIGTERM 1 more time(s) quits at once)" in actor_lines, (
      actor_lines)
