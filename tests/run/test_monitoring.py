"""The console's rates and time to go at DMLab's pace (an update every ~20 s)."""
import math

import pytest

from scalable_agent_tf2.run import console_pace
from scalable_agent_tf2.run import monitoring


def test_windowed_rates_span_the_window_and_several_updates():
  # Writes every 5 s; an update of 3,200 frames every 20 s.
  samples = [(t, 3200 * (t // 20), t // 20) for t in range(0, 200, 5)]
  now, frames, updates = 200, 3200 * 10, 10
  fps, ups = console_pace.windowed_rates(samples, now, frames, updates, window_secs=60,
                                       window_updates=4)
  # The newest sample at least 60 s and 4 updates back: t=135 (6 updates, 19,200 frames).
  assert fps == pytest.approx((32_000 - 19_200) / 65)
  assert ups == pytest.approx(4 / 65)


def test_windowed_rates_reach_back_to_the_oldest_sample_early_on():
  fps, ups = console_pace.windowed_rates([(0, 0, 0), (5, 0, 0)], 10, 3200, 1)
  assert fps == pytest.approx(320) and ups == pytest.approx(0.1)
  assert console_pace.windowed_rates([], 10, 3200, 1) == (0.0, 0.0)


class _Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_console_rates_do_not_drop_to_zero_between_slow_updates(tmp_path):
  clock = _Clock()
  lines = []
  monitor = monitoring.Monitor(str(tmp_path), ["seekavoid_arena_01"], total_frames=10**9,
                               print_fn=lines.append, clock=clock)
  monitor.start(0)
  frames, records = 0, []
  for step in range(1, 61):  # 5 minutes of writes every 5 s.
    clock.now = 5.0 * step
    if step % 4 == 0:  # An update of 32 x 100 x 4 frames every 20 s.
      frames += 12_800
      monitor.record_update({"total_loss": 1.0}, [1])
    records.append(monitor.write(frames, queue_fill=0.0))
  monitor.close()
  steady = records[20:]
  assert all(r["frames_per_second"] == pytest.approx(640, rel=0.25) for r in steady)
  assert all(r["updates_per_second"] > 0 for r in steady)
  etas = [r["eta_seconds"] for r in steady]
  # The time to go moves smoothly: no write changes it by more than 10%.
  assert all(abs(b - a) / a < 0.1 for a, b in zip(etas, etas[1:]))
  assert math.isnan(records[0]["eta_seconds"])  # No estimate before a few updates.
  assert "0 fps" not in lines[-1]
