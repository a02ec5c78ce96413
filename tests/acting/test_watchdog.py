"""Every environment call has a watchdog (issue 41, item 3): a step or reset that hangs is
reported with its level, its environments replaced, and the run goes on; a level that keeps
hanging stops the run with an `error:` line; SIGTERM stops a run within 10 s whatever an
environment is doing. On 3aedbe9 a hung step() was a silent stall and SIGTERM took minutes."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANGS = "--level_name=gym:tests.gym_user_package.hanging:UserHangs-v0"
HANGS_ONCE = "--level_name=gym:tests.gym_user_package.hanging:UserHangsOnce-v0"
LIMITS = {watchdog.STEP: 60.0, watchdog.RESET: 600.0}


class _FakeClock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


class _Env:
  def __init__(self, on_step=None):
    self.on_step = on_step
    self.closed = False

  def initial(self):
    return "first"

  def step(self, action):
    if self.on_step:
      self.on_step()
    return action

  def close(self):
    self.closed = True


def test_a_call_is_overdue_only_past_its_own_limit():
  time_now = _FakeClock()
  clock = watchdog.CallClock(time_now)
  seen = []
  env = watchdog.timed(_Env(on_step=lambda: seen.append(clock.overdue(time_now.now + 61, LIMITS))),
                       clock)
  assert env.step(3) == 3 and env.initial() == "first"
  assert seen == [(watchdog.STEP, 61.0)]
  assert clock.overdue(1000.0, LIMITS) is None  # No call in progress.
  env.close()  # Everything else is the environment's own.
  assert env.closed
  # A reset may take longer than a step.
  resetting = watchdog.CallClock(time_now)
  with resetting.timing(watchdog.RESET):
    assert resetting.overdue(500.0, LIMITS) is None
    assert resetting.overdue(601.0, LIMITS) == (watchdog.RESET, 601.0)


def test_a_list_stays_a_list_of_timed_environments_and_a_group_keeps_its_attributes():
  clock = watchdog.CallClock()
  envs = watchdog.timed([_Env(), _Env()], clock)
  assert isinstance(envs, list) and len(envs) == 2
  group = _Env()
  group.finished_games = list
  assert hasattr(watchdog.timed(group, clock), "finished_games")  # actor.as_group's test.


def test_an_abandoned_call_ends_its_thread_when_it_returns():
  clock = watchdog.CallClock()
  release = threading.Event()
  env = watchdog.timed(_Env(on_step=release.wait), clock)
  outcome = []

  def actor():
    try:
      env.step(0)
      outcome.append("delivered")
    except watchdog.Abandoned as error:
      outcome.append(str(error))
  thread = threading.Thread(target=actor)
  thread.start()
  clock.abandon()
  release.set()
  thread.join(10)
  assert outcome == ["the environment's step() returned after the actor was replaced"]


def test_the_limits_of_a_level():
  config = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong"))
  assert assembly.environment_timeouts(config, "atari/pong") == (60.0, 600.0)
  # DeepMind Lab resets inside a step at an episode's end, compiling a new map.
  assert assembly.environment_timeouts(config, "rooms_collect_good_objects_train") == (
      600.0, 600.0)


def _train(*flags, timeout=200):
  return subprocess.run([sys.executable, "experiment.py", "--mode=train", *flags],
                        cwd=REPO_DIR, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(240)
def test_a_hung_environment_is_replaced_and_training_goes_on(tmp_path):
  result = _train(HANGS_ONCE, f"--logdir={tmp_path}", "--env_step_timeout_secs=1",
                  "--total_environment_frames=2000", "--num_actors=2")
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  # The first environments made hang (one actor's group, built first); their replacements
  # do not.
  assert re.search(r"actor-\d's environment has not returned from step\(\) for \d+ s",
                   result.stdout), result.stdout[-3000:]
  assert "Stopped: frame budget reached." in result.stdout
  assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.timeout(240)
def test_a_level_whose_environments_keep_hanging_stops_the_run_with_an_error(tmp_path):
  start = time.monotonic()
  result = _train(HANGS, f"--logdir={tmp_path}", "--env_step_timeout_secs=1",
                  "--total_environment_frames=200000")
  assert time.monotonic() - start < 150
  assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
  assert "error: gym:tests.gym_user_package.hanging:UserHangs-v0: its environments hung " in (
      result.stderr)
  assert "--env_step_timeout_secs=1" in result.stderr
  assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.timeout(240)
def test_sigterm_stops_a_run_with_a_hung_environment_within_10_s_with_its_checkpoint(
    tmp_path):
  process = subprocess.Popen([sys.executable, "-u", "experiment.py", "--mode=train", HANGS,
                              f"--logdir={tmp_path}", "--total_environment_frames=200000"],
                             cwd=REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
  try:
    for line in process.stdout:  # Until the actors are stepping (then they hang).
      if line.startswith("frames "):
        break
    time.sleep(3)
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stopped = None  # Seconds until the `Stopped:` line: the final checkpoint is written.
    lines = []
    for line in process.stdout:
      lines.append(line)
      if line.startswith("Stopped:"):
        stopped = time.monotonic() - start
    err = process.stderr.read()
    process.wait(60)
  finally:
    if process.poll() is None:
      process.kill()
  out = "".join(lines)
  assert process.returncode == 0, out[-2000:] + err[-2000:]
  assert "Stopped: interrupted (SIGTERM). Checkpoint " in out, out[-2000:]
  assert os.path.exists(tmp_path / "checkpoints")
  # The stop waits 3 s at most for threads (supervisor.STOP_JOIN_SECS); about 3 s on an idle
  # 2-core machine, and then the final curve is drawn (about 3 s more before the exit).
  assert stopped is not None and stopped < 10, stopped
