"""The Table 1 benchmark's rate: timed from update to update, not a median of short intervals."""
import pytest

from benchmarks.speed.throughput import parse_args
from benchmarks.speed.training_rate import level_config
from benchmarks.speed.training_rate import produced_frames
from benchmarks.speed.training_rate import steady_rate
from benchmarks.speed.training_rate import training_samples


def test_updates_every_few_seconds_give_their_true_rate():
  # One update of 12,800 frames every 8 s (a DMLab run at 1,600 frames/s), sampled every second:
  # most 1-second intervals carry no frames, so a median of intervals would say 0.
  samples = [(float(t), 12_800 * (t // 8)) for t in range(81)]
  assert steady_rate(samples, warmup=10) == pytest.approx(1_600.0)


def test_a_steady_count_gives_its_mean_rate_after_the_warmup():
  samples = [(0.0, 0), (5.0, 100), (10.0, 1_000), (15.0, 6_000), (20.0, 11_000)]
  assert steady_rate(samples, warmup=5) == pytest.approx(1_000.0)  # 1,000 -> 11,000 in 10 s.


def test_fewer_than_two_updates_after_the_warmup_is_an_error_naming_the_fix():
  samples = [(float(t), 12_800 * (t // 30)) for t in range(40)]
  with pytest.raises(RuntimeError, match="raise --seconds"):
    steady_rate(samples, warmup=5)


def test_frames_waiting_in_the_queue_count_as_produced():
  config = level_config("atari/pong", "shallow", num_actors=2)
  # Half of the 128-unroll queue full: 64 x 20 steps x 4 frames = 5,120 frames delivered.
  progress = dict(frames=12_800, queue_fill=0.5)
  assert produced_frames(progress, config) == 12_800 + 5_120
  # A learner draining a full queue trains faster than the actors produce; produced frames
  # then move only by what the actors add.
  full, drained = dict(frames=0, queue_fill=1.0), dict(frames=10_240, queue_fill=0.0)
  assert produced_frames(drained, config) == produced_frames(full, config)


def test_samples_run_from_the_first_update_to_the_stop():
  config = level_config("atari/pong", "shallow", num_actors=2)
  progress = [dict(time=0.0, frames=0, queue_fill=0.0),     # Start-up: no update yet.
              dict(time=40.0, frames=0, queue_fill=0.5),
              dict(time=41.0, frames=2_560, queue_fill=0.5),  # The first update.
              dict(time=42.0, frames=5_120, queue_fill=0.5),
              dict(time=43.0, frames=5_120, queue_fill=0.0)]  # After the stop: queue dropped.
  assert training_samples(progress, config, stopped_at=42.5) == [
      (41.0, 2_560 + 5_120), (42.0, 5_120 + 5_120)]


def test_an_unknown_variant_is_refused_before_anything_runs(capsys):
  with pytest.raises(SystemExit):
    parse_args(["--variants=a,e", "--levels=atari/pong"])
  assert "--variants: unknown e" in capsys.readouterr().err
