"""Progress is watched, not assumed (issue 41, item 1): a run that stops making progress stops
with an error naming what was seen, and diverged parameters are never checkpointed.

The rules (run/progress_watch.py) on a fake clock first, then whole runs: the toy level at a
learning rate of 1e9, which on 3aedbe9 sat at 80 frames with every trajectory dropped until it
was killed (the norm check stops it at its first update; with the check lifted, the watch).
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from tests.run.test_training import toy_config
from tests.run.test_training import train_toy

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
Counters = progress_watch.Counters


def _watch(stall_secs=60, batch_size=8):
  return progress_watch.ProgressWatch(stall_secs, batch_size, now=0.0)


def test_steady_progress_is_never_a_stall():
  watch = _watch()
  for second in range(1, 600):
    counters = Counters(produced=second * 4, dropped=0, num_updates=second // 2,
                        actors_alive=True)
    assert watch.observe(counters, float(second)) is None
  assert not watch.diverged


def test_every_trajectory_dropped_for_the_stall_time_is_divergence():
  watch = _watch(stall_secs=60)
  assert watch.observe(Counters(16, 0, 2, True), 10.0) is None  # Trained on until 10 s.
  fields = ["agent_outputs/policy_params (30)", "agent_outputs/baseline (10)"]
  stall = None
  for second in range(11, 80):  # From 11 s on every trajectory is dropped.
    produced = 16 + (second - 10) * 4
    stall = watch.observe(Counters(produced, produced - 16, 2, True), float(second), fields)
    if stall:
      break
  assert second == 70, second  # 60 s after the last trajectory trained on.
  assert stall.startswith("every trajectory for 60 s (240 of them) carried non-finite "
                          "behaviour outputs (agent_outputs/policy_params (30)")
  assert "the parameters have diverged" in stall
  assert watch.diverged


def test_dropped_environment_numbers_are_named_as_the_environment_s():
  watch = _watch(stall_secs=5)
  stall = None
  for second in range(1, 10):
    stall = stall or watch.observe(Counters(second, second, 0, True), float(second),
                                   ["env_outputs/observation/frame (3)"])
  assert "non-finite numbers from the environment" in stall and "returns NaN" in stall
  assert not watch.diverged  # The parameters are not to blame: checkpoints go on.


def test_an_occasional_dropped_trajectory_is_no_stall():
  watch = _watch(stall_secs=5)
  for second in range(1, 100):  # One in ten dropped (a NaN observation on 5% of steps).
    dropped = second // 10
    assert watch.observe(Counters(second, dropped, second, True), float(second),
                         ["env_outputs/observation/frame (1)"]) is None


def test_a_learner_that_gets_batches_and_makes_no_update_is_stuck():
  watch = _watch(stall_secs=30, batch_size=8)
  assert watch.observe(Counters(8, 0, 1, True), 1.0) is None
  stall = None
  for second in range(2, 60):  # Trajectories keep coming, no update after the first.
    stall = watch.observe(Counters(8 + second, 0, 1, True), float(second))
    if stall:
      break
  assert second == 31, second
  assert stall.startswith("no learner update for 30 s although 39 trajectories arrived since "
                          "the last one (a batch is 8): the learner is stuck"), stall


def test_a_learner_that_skips_every_batch_as_non_finite_has_diverged_not_stuck():
  stuck, skipping = _watch(stall_secs=30), _watch(stall_secs=30)
  for watch, skipped in ((stuck, 0), (skipping, 4)):
    watch.observe(Counters(8, 0, 1, True), 1.0)
    for second in range(2, 32):
      stall = watch.observe(Counters(8 + second, 0, 1, True, skipped), float(second))
  assert stall.endswith("(a batch is 8): the last 4 updates were skipped for a non-finite "
                        "loss or gradient norm, training has diverged"), stall
  assert skipping.stall_diverged and not stuck.stall_diverged


def test_the_first_update_may_take_long_it_compiles():
  watch = _watch(stall_secs=30, batch_size=8)
  for second in range(1, 300):  # Batches arrive while the first update is traced/compiled.
    assert watch.observe(Counters(second, 0, 0, True), float(second)) is None


def test_fewer_trajectories_than_a_batch_are_no_learner_stall():
  # A slow environment: a batch takes longer than the stall time to fill; not the learner.
  watch = _watch(stall_secs=30, batch_size=64)
  for second in range(1, 200, 20):
    assert watch.observe(Counters(second // 20 + 1, 0, 0, True), float(second)) is None


def test_actors_that_deliver_nothing_while_alive_are_stuck_after_their_first_trajectory():
  watch = _watch(stall_secs=30)
  # Before the first trajectory: environments may still be starting (DMLab's map compiler).
  assert watch.observe(Counters(0, 0, 0, True), 500.0) is None
  watch = _watch(stall_secs=30)
  assert watch.observe(Counters(3, 0, 0, True), 1.0) is None
  assert watch.observe(Counters(3, 0, 0, True), 30.0) is None
  stall = watch.observe(Counters(3, 0, 0, True), 31.0)
  assert stall.startswith("no trajectory from the actors for 30 s while they are alive")
  # Actors that all ended are the actors' failure to report, not a stall.
  watch = _watch(stall_secs=30)
  watch.observe(Counters(3, 0, 0, True), 1.0)
  assert watch.observe(Counters(3, 0, 0, False), 100.0) is None


class _FakeTime:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_time_the_process_was_suspended_is_not_a_stall():
  """A process stopped (SIGSTOP, Ctrl-Z) or a machine paused for longer than --stall_secs:
  nothing ran, so nothing stalled. Seen: a run suspended for 18 minutes stopped at once after
  SIGCONT with "no learner update for 1118 s". The supervisor's watches read the RunningClock,
  which leaves the gap out; a stall after the resume is still found, on the running time."""
  time_now = _FakeTime()
  clock = progress_watch.RunningClock(time_now)
  watch = progress_watch.ProgressWatch(300, 8, now=clock())

  def observe(second, counters):
    time_now.now = float(second)
    return watch.observe(counters, clock.tick())
  for second in range(1, 11):  # Steady training, observed every second.
    assert observe(second, Counters(second * 8, 0, second, True)) is None
  # Suspended from second 10 to 1128: the first observation after it sees the same counters.
  assert observe(1128, Counters(80, 0, 10, True)) is None
  # Trajectories arrive again but the learner makes no update: stuck after 300 s of running.
  stall = None
  for second in range(1129, 1500):
    stall = observe(second, Counters(80 + (second - 1128), 0, 10, True))
    if stall:
      break
  assert second == 1428, second  # 300 s of running since the last update, not 1,418.
  assert stall.startswith("no learner update for 300 s"), stall
  # The gap below SUSPENSION_SECS is the supervisor's own delay and counts as running time.
  time_now = _FakeTime()
  clock = progress_watch.RunningClock(time_now)
  watch = progress_watch.ProgressWatch(30, 8, now=clock())
  time_now.now = 1.0
  watch.observe(Counters(8, 0, 1, True), clock.tick())
  time_now.now = 1.0 + progress_watch.SUSPENSION_SECS - 1
  assert watch.observe(Counters(20, 0, 1, True), clock.tick()) is None
  time_now.now = 1.0 + progress_watch.SUSPENSION_SECS
  assert watch.observe(Counters(21, 0, 1, True), clock.tick()) is not None


def test_an_environment_call_across_a_suspension_is_not_overdue():
  """The environment watchdog reads the same clock (supervisor.Run gives it to every actor's
  CallClock): a step under way when the process was stopped is not a hung step after it (the
  suspended Breakout run had an actor replaced as hung at its resume)."""
  time_now = _FakeTime()
  clock = progress_watch.RunningClock(time_now)
  call_clock = watchdog.CallClock(clock)
  limits = {watchdog.STEP: 60.0, watchdog.RESET: 600.0}
  with call_clock.timing(watchdog.STEP):
    time_now.now = 0.5
    assert call_clock.overdue(clock.tick(), limits) is None
    time_now.now = 1200.0  # Suspended for 20 minutes mid-step.
    assert call_clock.overdue(clock.tick(), limits) is None
    overdue = None
    while overdue is None:  # Then a step that really hangs: the supervisor ticks on.
      time_now.now += 1.0
      overdue = call_clock.overdue(clock.tick(), limits)
    assert time_now.now == 1260.0  # Overdue after 60.5 s of running, not at the resume.
    assert overdue[0] == watchdog.STEP and 60.0 < overdue[1] <= 61.0


def test_parameters_are_healthy_only_finite_and_within_the_limit():
  assert progress_watch.parameters_healthy(31.6, 1e6)
  assert not progress_watch.parameters_healthy(3.78e10, 1e6)
  assert not progress_watch.parameters_healthy(float("nan"), 1e6)
  assert not progress_watch.parameters_healthy(float("inf"), 1e6)


def _newest_checkpoint_is_healthy(logdir, limit=1e6):
  prefix, frames = checkpoints.latest_checkpoint(str(logdir))
  reader = tf.train.load_checkpoint(os.path.join(checkpoints.checkpoint_dir(str(logdir)),
                                                 prefix))
  squares = 0.0
  for name in reader.get_variable_to_shape_map():
    value = np.asarray(reader.get_tensor(name))
    if value.dtype.kind == "f":
      assert np.isfinite(value).all(), name
      if "agent" in name and "optimizer" not in name.lower():
        squares += float(np.sum(np.square(value.astype(np.float64))))
  assert squares ** 0.5 <= limit
  return frames


@pytest.mark.timeout(240)
def test_exploding_parameters_stop_the_run_and_the_last_healthy_checkpoint_stays_newest(
    tmp_path):
  train_toy(toy_config(tmp_path, total_frames=800))  # A healthy checkpoint first.
  _, healthy_frames = checkpoints.latest_checkpoint(str(tmp_path))
  lines = []
  config = toy_config(tmp_path, total_frames=10_000_000, learning_rate=1e9,
                      checkpoint_secs=1.0)
  with pytest.raises(training.ParametersDiverged,
                     match=r"global norm is .* \(--max_parameter_norm=1e\+06\): training has "
                           r"diverged.*resume from the newest checkpoint, .*ckpt-"):
    train_toy(config, lines=lines)
  assert _newest_checkpoint_is_healthy(tmp_path) == healthy_frames


@pytest.mark.timeout(240)
def test_diverged_outputs_below_the_norm_limit_are_caught_by_the_watch(tmp_path):
  """With the norm check lifted, parameters that are finite but make every actor output NaN
  (the issue's run: 28,298 of 28,356 trajectories dropped) stop the run by the watch, and no
  checkpoint of them becomes the newest."""
  train_toy(toy_config(tmp_path, total_frames=800))
  _, healthy_frames = checkpoints.latest_checkpoint(str(tmp_path))
  lines = []
  config = toy_config(tmp_path, total_frames=10_000_000, learning_rate=1e9,
                      max_parameter_norm=1e38, max_nonfinite_updates=10_000, stall_secs=5.0,
                      checkpoint_secs=3600.0)
  start = time.monotonic()
  with pytest.raises(training.RunFailed, match="diverged") as raised:
    train_toy(config, lines=lines)
  assert time.monotonic() - start < 120
  assert isinstance(raised.value, training.ParametersDiverged), raised.value
  assert _newest_checkpoint_is_healthy(tmp_path, limit=1e38) == healthy_frames


# Slow tier (a whole experiment.py run): the default tier keeps
# test_exploding_parameters_stop_the_run_and_the_last_healthy_checkpoint_stays_newest for the
# same stop in this process, and test_stopping_and_faults.py's end-to-end error lines.
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_issue_s_diverged_command_exits_1_by_itself_within_3_minutes(tmp_path):
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, "experiment.py", "--mode=train", "--level_name=toy/lit_side",
       "--learning_rate=1e9", "--total_environment_frames=3000000", f"--logdir={tmp_path}"],
      cwd=REPO_DIR, capture_output=True, text=True, timeout=200)
  assert time.monotonic() - start < 180
  assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
  assert "error: The parameters' global norm is" in result.stderr
  assert "Traceback" not in result.stdout + result.stderr
  if checkpoints.latest_checkpoint(str(tmp_path)) is not None:
    _newest_checkpoint_is_healthy(tmp_path)
