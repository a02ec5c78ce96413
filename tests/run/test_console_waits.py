"""The console while nothing moves, and its time to go (issue 33, point 5): what a run waits
for (environments starting, the first unroll, the first update, an overdue update) instead of
"frames 0 (0.0%) | 0 fps" lines; the time to go from the recent rate, never shown while the
rate is unknown; test mode's from the episodes done since the first."""
import math

import pytest

from scalable_agent_tf2.run import console_pace
from scalable_agent_tf2.run import evaluation_episodes
from scalable_agent_tf2.run import monitoring


class _Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_waiting_message_says_what_the_run_waits_for():
  starting = console_pace.Activity(environments=48, environments_ready=12, unrolls=0)
  assert (console_pace.waiting_message(12.4, 0, None, starting)
          == "starting 48 environments: 12 ready (12 s)")
  started = console_pace.Activity(environments=48, environments_ready=48, unrolls=0)
  assert console_pace.waiting_message(30, 0, None, started) == "waiting for the first unroll (30 s)"
  delivered = console_pace.Activity(environments=48, environments_ready=48, unrolls=40)
  assert (console_pace.waiting_message(45, 0, None, delivered)
          == "waiting for the first update: 40 unrolls delivered (45 s)")
  # A cluster's learner knows only the unrolls its actor processes delivered.
  assert (console_pace.waiting_message(20, 0, None, console_pace.Activity(unrolls=0))
          == "waiting for the first unroll (20 s)")
  assert console_pace.waiting_message(20, 0, None) == "waiting for the first update (20 s)"
  # Once updates come, nothing is said until one is overdue.
  assert console_pace.waiting_message(500, 10, console_pace.STALL_SECS - 1, delivered) is None
  assert (console_pace.waiting_message(500, 10, console_pace.STALL_SECS + 5, delivered)
          == f"no update for {console_pace.STALL_SECS + 5:.0f} s")


def test_activity_of_local_actor_threads_and_of_a_clusters_actor_processes():
  class Thread:  # acting.actor.ActorThread's counts.
    def __init__(self, ready, trajectories):
      self.num_envs_ready, self.num_trajectories = ready, trajectories

  class LocalActors:
    threads = [Thread(24, 3), Thread(0, 0)]

  assert console_pace.activity_of(LocalActors(), group_size=24) == console_pace.Activity(
      environments=48, environments_ready=24, unrolls=3)

  class RemoteActors:  # run/actor_process.RemoteActors: no threads here.
    def delivered(self):
      return dict(produced=7, by_actor_process={0: 7}, duplicates={})

  assert console_pace.activity_of(RemoteActors(), group_size=24) == console_pace.Activity(unrolls=7)


def test_console_lines_of_a_starting_run_name_the_wait_with_seconds_elapsed(tmp_path):
  clock, lines = _Clock(), []
  monitor = monitoring.Monitor(str(tmp_path), ["atari/pong"], total_frames=10**6,
                               print_fn=lines.append, clock=clock)
  activity = [console_pace.Activity(environments=48, environments_ready=0, unrolls=0)]
  monitor.watch_activity(lambda: activity[0])
  monitor.start(0)
  clock.now = 5.0
  monitor.write(0, queue_fill=0.0)
  activity[0] = console_pace.Activity(environments=48, environments_ready=48, unrolls=0)
  clock.now = 10.0
  monitor.write(0, queue_fill=0.0)
  activity[0] = console_pace.Activity(environments=48, environments_ready=48, unrolls=96)
  clock.now = 15.0
  monitor.write(0, queue_fill=0.5)
  assert lines == ["frames 0 (0.0%) | starting 48 environments: 0 ready (5 s)",
                   "frames 0 (0.0%) | waiting for the first unroll (10 s)",
                   "frames 0 (0.0%) | waiting for the first update: 96 unrolls delivered (15 s)"]
  clock.now = 20.0
  monitor.record_update({"num_env_frames": 2560, "total_loss": 1.0}, [0])
  monitor.write(2560, queue_fill=0.5)
  assert "fps" in lines[-1] and "waiting" not in lines[-1]
  clock.now = 20.0 + console_pace.STALL_SECS + 10  # The learner stops updating.
  monitor.write(2560, queue_fill=1.0)
  assert f"episodes 0 | no update for {console_pace.STALL_SECS + 10:.0f} s" in lines[-1]
  monitor.close()


def _run_at(monitor, clock, rate_per_update, seconds, frames, updates, every=5.0):
  """Writes every `every` s for `seconds`, an update of `rate_per_update` frames at each;
  returns (frames, updates, records)."""
  records = []
  for _ in range(int(seconds / every)):
    clock.now += every
    frames += rate_per_update
    updates += 1
    monitor.record_update({"num_env_frames": frames, "total_loss": 1.0}, [0])
    records.append(monitor.write(frames, queue_fill=0.0))
  return frames, updates, records


def _started_monitor(tmp_path, level, total):
  """(a started Monitor of `total` frames on a fake clock, the clock, its printed lines)."""
  clock, lines = _Clock(), []
  monitor = monitoring.Monitor(str(tmp_path), [level], total_frames=total,
                               print_fn=lines.append, clock=clock)
  monitor.start(0)
  return monitor, clock, lines


def test_the_time_to_go_follows_the_recent_rate(tmp_path):
  total = 2_000_000
  monitor, clock, lines = _started_monitor(tmp_path, "atari/pong", total)
  # 10 minutes at 1,000 frames/s, then 3 minutes at 100 frames/s.
  frames, updates, fast = _run_at(monitor, clock, 5000, 600, 0, 0)
  assert fast[-1]["eta_seconds"] == pytest.approx((total - frames) / 1000, rel=0.02)
  frames, updates, slow = _run_at(monitor, clock, 500, 180, frames, updates)
  # The mean rate since the start (760 frames/s) would say about 27 minutes.
  assert slow[-1]["eta_seconds"] == pytest.approx((total - frames) / 100, rel=0.02)
  assert "h to go" in lines[-1]
  monitor.close()


def test_no_time_to_go_before_the_rate_is_known_and_never_zero_before_the_end(tmp_path):
  total = 100_000
  monitor, clock, lines = _started_monitor(tmp_path, "toy/lit_side", total)
  clock.now = 30.0  # A slow start (the first update's compilation), then 1,000 frames/s.
  monitor.write(0, queue_fill=0.0)
  frames, updates, records = _run_at(monitor, clock, 1000, 100, 0, 0, every=1.0)
  first_known = next(i for i, r in enumerate(records) if not math.isnan(r["eta_seconds"]))
  assert first_known >= console_pace.RATE_WINDOW_UPDATES - 1
  assert all("to go" not in line for line in lines[:first_known + 1])
  # From there on, the time left at 1,000 frames/s (the start-up's 30 s are not in it), in
  # seconds under two minutes: never "0 min to go" halfway through a short run.
  for record, line in zip(records[first_known:], lines[first_known + 1:]):
    left = (total - record["frames"]) / 1000
    assert record["eta_seconds"] == pytest.approx(left, abs=1.5)
    assert "min to go" not in line
    if left >= 1:
      assert f"{left:.0f} s to go" in line
  assert "to go" not in lines[-1]  # The budget is reached.
  monitor.close()


def test_the_countdown_gives_way_to_the_rate_when_the_run_slows_down(tmp_path):
  clock, lines = _Clock(), []
  monitor = monitoring.Monitor(str(tmp_path), ["toy/lit_side"], total_frames=200_000,
                               print_fn=lines.append, clock=clock)
  monitor.start(0)
  frames, _, records = _run_at(monitor, clock, 1000, 100, 0, 0, every=1.0)  # 100 s to go.
  assert records[-1]["eta_seconds"] == pytest.approx(100, abs=1.5)
  for _ in range(110):  # Then nothing for 110 s: no "0 s to go", a growing estimate.
    clock.now += 1.0
    record = monitor.write(frames, queue_fill=0.0)
    assert record["eta_seconds"] >= 1
  assert record["eta_seconds"] > 200
  assert "min to go" in lines[-1]
  for _ in range(40):  # At 150 s the update is overdue: said instead of a time to go.
    clock.now += 1.0
    monitor.write(frames, queue_fill=0.0)
  assert "no update for 150 s" in lines[-1] and "to go" not in lines[-1]
  monitor.close()


@pytest.mark.parametrize("seconds, text", [
    (float("nan"), ""), (0.0, ""), (28.4, ", 28 s to go"), (0.3, ", 1 s to go"),
    (119.0, ", 119 s to go"), (150.0, ", 2 min to go"), (5400.0, ", 1.5 h to go")])
def test_format_eta(seconds, text):
  assert console_pace.format_eta(seconds) == text


def test_test_modes_time_to_go_leaves_the_start_up_out():
  clock, lines = _Clock(), []
  # 100 episodes; environments take 30 s to start, then 48 play at once (3 s an episode).
  progress = evaluation_episodes.TestProgress(["toy/lit_side"], 100, lines.append,
                                              every_secs=5, clock=clock)
  clock.now = 33.0
  progress.record("toy/lit_side")
  assert lines == ["test: 1/100 episodes (toy/lit_side 1/100)"]  # No rate yet: no guess.
  for episode in range(2, 41):
    clock.now = 33.0 + 0.1 * episode
    progress.record("toy/lit_side")
  clock.now = 38.5
  progress.record("toy/lit_side")  # 41 done, 40 of them in the 5.5 s since the first.
  assert lines[-1] == "test: 41/100 episodes (toy/lit_side 41/100), about 8 s to go"
  # From the start instead: 38.5 s for 41 episodes said about 55 s for the 59 left.


_STAGES = ("starting ", "waiting for the first unroll", "waiting for the first update")


@pytest.mark.timeout(600)
def test_a_short_runs_first_lines_say_what_it_waits_for(tmp_path):
  from tests.run import test_training  # pylint: disable=import-outside-toplevel
  lines = []
  config = test_training.toy_config(tmp_path, total_frames=4_000, log_secs=0.2)
  test_training.train_toy(config, lines=lines)
  console = [line for line in lines if line.startswith("frames ")]
  moving = next(i for i, line in enumerate(console)
                if "updates/s" in line or "measuring fps" in line)
  assert moving > 0, console  # The start-up takes seconds: writes every 0.2 s see it.
  stages = []
  for line in console[:moving]:
    stage = next((i for i, stage in enumerate(_STAGES) if stage in line), None)
    assert stage is not None and (line.endswith(" s)") or " s) | episodes " in line), line
    stages.append(stage)
  assert stages == sorted(stages), console[:moving]  # Each wait follows the one before.
  assert not [line for line in console if "| 0 fps" in line]


def test_frames_per_second_never_count_the_start_ups_wait(tmp_path):
  monitor, clock, lines = _started_monitor(tmp_path, "atari/pong", 10**7)
  for _ in range(12):  # A minute of start-up: environments, the first unroll and update.
    clock.now += 5.0
    monitor.write(0, queue_fill=0.0)
  clock.now += 5.0
  monitor.record_update({"num_env_frames": 2560, "total_loss": 1.0}, [0])
  first = monitor.write(2560, queue_fill=0.0)
  # One update says nothing of the rate yet: none is shown (not 0, not 2,560 / 65 s).
  assert math.isnan(first["frames_per_second"]) and math.isnan(first["updates_per_second"])
  assert "measuring fps" in lines[-1] and " fps |" not in lines[-1].replace("measuring fps", "")
  # Then 2,560 frames every 5 s: 512 frames/s from the first update on (the mean since the
  # start, 7,680 frames in 75 s, would say 102).
  _, _, records = _run_at(monitor, clock, 2560, 10, 2560, 1)
  assert records[-1]["frames_per_second"] == pytest.approx(512)
  assert records[-1]["updates_per_second"] == pytest.approx(0.2)
  assert "512 fps" in lines[-1] and "measuring" not in lines[-1]
  monitor.close()


def test_the_episode_count_goes_on_after_a_resume(tmp_path):
  monitor, clock, lines = _started_monitor(tmp_path, "atari/pong", 10**7)
  for frames in (1000, 2000, 3000):
    clock.now += 5.0
    monitor.record_update({"num_env_frames": frames, "total_loss": 1.0}, [0])
    for _ in range(2):
      monitor.record_episode("atari/pong", 1.0, 10)
    monitor.write(frames, queue_fill=0.0)
  monitor.close()  # 6 episodes, the last two at 3,000 frames; the checkpoint at 2,000.
  clock, lines = _Clock(), []
  resumed = monitoring.Monitor(str(tmp_path), ["atari/pong"], total_frames=10**7,
                               print_fn=lines.append, clock=clock)
  resumed.start(2000)  # The 2 episodes logged beyond the checkpoint were played by lost
  clock.now = 5.0      # parameters: they do not count (runlog.read_trained_records).
  resumed.record_update({"num_env_frames": 3000, "total_loss": 1.0}, [0])
  resumed.record_episode("atari/pong", 2.0, 10)
  assert resumed.write(3000, queue_fill=0.0)["episodes"] == 5
  assert "episodes 5" in lines[-1]
  resumed.close()
