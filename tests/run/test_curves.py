"""Learning curves (issue 33, point 1): every training run draws logdir/learning_curve.png from
its log.jsonl at each checkpoint and at the stop (learning_curve.CurveWriter, runfiles/plot.py);
the plot command overlays several logdirs; each episode carries its own frame count."""
import dataclasses
import os
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

from scalable_agent_tf2.runfiles import plot
from scalable_agent_tf2.runfiles import runlog

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
  """(width, height) of a complete PNG file; fails on anything else (signature, a chunk's CRC,
  a missing IEND: a file cut short)."""
  with open(path, "rb") as f:
    data = f.read()
  assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
  offset, chunks = 8, []
  while offset < len(data):
    length, kind = struct.unpack(">I4s", data[offset:offset + 8])
    body = data[offset + 8:offset + 8 + length]
    crc, = struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])
    assert zlib.crc32(kind + body) == crc, f"{path}: chunk {kind} is damaged"
    chunks.append((kind, body))
    offset += 12 + length
  assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", f"{path} is cut short"
  return struct.unpack(">II", chunks[0][1][:8])


def write_log(logdir, levels, episodes_per_level=30, scores=False, start_time=1000.0):
  """A log.jsonl like a run's: START, then per 100 frames an episode of each level (frames
  never go back: runlog.read_trained_records) and a PROGRESS record 10 s later (with suites'
  human-normalised scores when `scores`)."""
  writer = runlog.Writer(str(logdir))
  writer.write(dict(kind=runlog.START, time=start_time, frames=0))
  for step in range(1, episodes_per_level + 1):
    for index, level in enumerate(levels):
      writer.episode(100 * (step - 1) + 10 * index + 5, level, float(step + index), 10)
    record = dict(kind=runlog.PROGRESS, time=start_time + 10 * step, frames=100 * step,
                  updates=step)
    if scores:
      record.update(human_normalized_mean_capped=float(step), human_normalized_median=step / 2)
    writer.write(record)
  writer.close()


def run_plot(*args):
  return subprocess.run([sys.executable, "-m", "scalable_agent_tf2.runfiles.plot", *args],
                        cwd=REPO_DIR, capture_output=True, text=True, timeout=300)


def test_the_plot_command_overlays_two_logdirs_with_labels(tmp_path):
  write_log(tmp_path / "a", ["toy/lit_side"])
  write_log(tmp_path / "b", ["toy/lit_side"], episodes_per_level=10)
  output = tmp_path / "ab.png"
  result = run_plot(str(tmp_path / "a"), str(tmp_path / "b"), "--labels=fast,slow",
                    f"--output={output}")
  assert result.returncode == 0, result.stderr
  # One level: one row, against frames and against hours.
  assert png_size(output) == plot.figure_pixels(1) == (1300, 400)
  assert "fast: toy/lit_side: 30 episodes, 2,905 frames" in result.stdout
  assert "slow: toy/lit_side: 10 episodes, 905 frames" in result.stdout
  assert not os.path.exists(tmp_path / "ab_levels.png")


def test_the_plot_command_draws_a_suites_score_and_a_grid_of_its_levels(tmp_path):
  levels = [f"atari/game_{i}" for i in range(plot.MAX_LEVEL_ROWS + 3)]
  write_log(tmp_path / "suite", levels, scores=True)
  result = run_plot(str(tmp_path / "suite"))  # One logdir, no --output: its own files.
  assert result.returncode == 0, result.stderr
  assert png_size(tmp_path / "suite" / plot.CURVE_FILE) == plot.figure_pixels(1)  # The score.
  assert png_size(tmp_path / "suite" / "learning_curve_levels.png") == plot.grid_pixels(
      len(levels)) == (1800, 440)
  runs = [plot.read_run(str(tmp_path / "suite"))]
  assert plot.layout(runs) == (["score"], sorted(levels))
  assert list(runs[0].scores) == ["mean capped", "median"]


def test_the_plot_command_prints_the_curve_as_a_table_at_every_count(tmp_path):
  # Episodes end at frames 5, 105, ..., 2905 with returns 1, 2, ..., 30; a progress record
  # every 100 frames, 10 s apart.
  write_log(tmp_path / "a", ["toy/lit_side"])
  result = run_plot(str(tmp_path / "a"), "--table_every=1000", "--window=3")
  assert result.returncode == 0, result.stderr
  table = result.stdout.split("# a: every 1,000 frames\n")[1].splitlines()
  # At 1,000 frames the last 3 episodes are those of returns 8-10 (mean 9), after 100 s; the
  # run has not passed 3,000 frames.
  assert table == ["level,frames,hours,mean_return", "toy/lit_side,1000,0.028,9.0",
                   "toy/lit_side,2000,0.056,19.0"]
  assert run_plot(str(tmp_path / "a"), "--table_every=0").returncode != 0


def test_the_plot_command_names_what_is_wrong(tmp_path):
  result = run_plot(str(tmp_path / "nothing"))
  assert result.returncode != 0 and "has no log.jsonl" in result.stderr
  write_log(tmp_path / "a", ["toy/lit_side"])
  result = run_plot(str(tmp_path / "a"), str(tmp_path / "a"), "--labels=x",
                    f"--output={tmp_path / 'x.png'}")
  assert result.returncode != 0 and "one label per LOGDIR" in result.stderr
  result = run_plot(str(tmp_path / "a"), str(tmp_path / "a"))
  assert result.returncode != 0 and "need --output" in result.stderr


def test_importing_the_plot_module_loads_neither_matplotlib_nor_tensorflow():
  # (The monitor's process loads matplotlib anyway: TensorFlow's Keras imports it.)
  code = "import sys; from scalable_agent_tf2.runfiles import plot; print(sorted(sys.modules))"
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr
  assert "'tensorflow'" not in result.stdout and "'matplotlib'" not in result.stdout


def test_a_drawing_that_fails_leaves_the_previous_file_whole(tmp_path, monkeypatch):
  write_log(tmp_path, ["toy/lit_side"])
  path = plot.write_run_curves(str(tmp_path))[0]
  before = open(path, "rb").read()
  plt = plot._pyplot()  # pylint: disable=protected-access

  def fail_halfway(self, filename, **kwargs):
    with open(filename, "wb") as f:
      f.write(PNG_SIGNATURE)  # Half a file, then the disk is full.
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(plt.Figure, "savefig", fail_halfway)
  with pytest.raises(OSError):
    plot.write_run_curves(str(tmp_path))
  assert open(path, "rb").read() == before
  assert sorted(os.listdir(tmp_path)) == [plot.CURVE_FILE, runlog.LOG_FILE]  # No temporary.


def test_a_curve_that_cannot_be_drawn_is_reported_once_and_the_run_goes_on(tmp_path):
  from scalable_agent_tf2.run import learning_curve  # pylint: disable=import-outside-toplevel
  lines = []
  curves = learning_curve.CurveWriter(str(tmp_path), lines.append)
  curves._command = lambda nice: [sys.executable, "-c",
                                  "import sys; sys.exit('no display: boom')"]
  for _ in range(3):
    curves.request()
    while curves.poll():
      time.sleep(0.05)
  curves.finish()
  assert len(lines) == 1, lines
  assert lines[0].startswith("Learning curve not drawn: its drawing ended with exit code 1: "
                             "no display: boom. Training goes on")


def test_checkpoints_draw_at_low_priority_and_the_stop_at_the_runs(tmp_path):
  from scalable_agent_tf2.run import learning_curve  # pylint: disable=import-outside-toplevel
  asked = []
  curves = learning_curve.CurveWriter(str(tmp_path), print)
  curves._command = lambda nice: asked.append(nice) or [sys.executable, "-c", "pass"]
  curves.request()
  curves.finish()
  assert asked == [learning_curve.CURVE_NICE, 0] and learning_curve.CURVE_NICE > 0
  assert "--nice=10" in learning_curve.CurveWriter(str(tmp_path), print)._command(10)


def test_a_curve_that_takes_too_long_at_the_stop_is_stopped(tmp_path):
  from scalable_agent_tf2.run import learning_curve  # pylint: disable=import-outside-toplevel
  lines = []
  curves = learning_curve.CurveWriter(str(tmp_path), lines.append, timeout_secs=0.5)
  curves._command = lambda nice: [sys.executable, "-c", "import time; time.sleep(60)"]
  started = time.monotonic()
  curves.finish()
  assert time.monotonic() - started < 30
  assert len(lines) == 1 and "took more than 0.5 s and was stopped" in lines[0]


def test_episodes_are_stamped_with_the_learners_frames_when_they_end(tmp_path):
  from scalable_agent_tf2.run import monitoring  # pylint: disable=import-outside-toplevel
  now = [0.0]
  monitor = monitoring.Monitor(str(tmp_path), ["toy"], total_frames=10_000,
                               print_fn=lambda line: None, clock=lambda: now[0])
  monitor.start(0)
  for update in range(1, 6):  # An update of 80 frames, then an episode, in each second.
    now[0] = float(update)
    monitor.record_update({"num_env_frames": 80 * update, "total_loss": 1.0}, [0])
    monitor.record_episode("toy", float(update), 10)
  monitor.write(400, queue_fill=0.0)  # One write for all five.
  monitor._curve_data = False  # pylint: disable=protected-access  (no drawing here)
  monitor.close()
  episodes = runlog.of_kind(runlog.read_log(str(tmp_path)), runlog.EPISODE)
  assert [e["frames"] for e in episodes] == [80, 160, 240, 320, 400]


def test_the_monitor_draws_the_curve_when_asked_at_a_checkpoint_and_at_close(tmp_path):
  from scalable_agent_tf2.run import monitoring  # pylint: disable=import-outside-toplevel
  now = [0.0]
  monitor = monitoring.Monitor(str(tmp_path), ["toy"], total_frames=10_000,
                               print_fn=print, clock=lambda: now[0])
  monitor.start(0)
  path = tmp_path / plot.CURVE_FILE
  monitor.checkpointed()  # Nothing logged yet: nothing to draw.
  assert not monitor._curves.poll()  # pylint: disable=protected-access
  for update in range(1, 11):
    now[0] = float(update)
    monitor.record_update({"num_env_frames": 80 * update}, [0])
    monitor.record_episode("toy", float(update), 10)
    monitor.write(80 * update, queue_fill=0.0)
  monitor.checkpointed()
  deadline = time.monotonic() + 300
  while monitor._curves.poll() and time.monotonic() < deadline:  # pylint: disable=protected-access
    time.sleep(0.1)
  assert png_size(path) == plot.figure_pixels(1)
  at_checkpoint = path.read_bytes()
  monitor.record_episode("toy", 50.0, 10)
  monitor.write(880, queue_fill=0.0)
  monitor.close()  # The stop: waits for the final drawing.
  assert png_size(path) == plot.figure_pixels(1) and path.read_bytes() != at_checkpoint


@dataclasses.dataclass
class _Watch:
  """What the test's print function saw of the curve after the run's first checkpoint that
  followed its first episodes (a checkpoint before them has nothing to draw)."""
  path: str
  episodes_logged: bool = False
  checkpointed: bool = False
  at_checkpoint: bytes = None

  def print(self, line):
    print(line)
    if self.checkpointed and self.at_checkpoint is None:
      # The line after the checkpoint's: the drawing (a child process) has been asked for.
      deadline = time.monotonic() + 180
      while not os.path.exists(self.path) and time.monotonic() < deadline:
        time.sleep(0.2)
      self.at_checkpoint = open(self.path, "rb").read() if os.path.exists(self.path) else b""
    if line.startswith("frames ") and "| episodes 0" not in line and "episodes " in line:
      self.episodes_logged = True
    if line.startswith("Checkpoint ") and self.episodes_logged:
      self.checkpointed = True


@pytest.mark.timeout(600)
def test_a_training_run_draws_its_curve_at_a_checkpoint_and_at_the_stop(tmp_path,
                                                                       monkeypatch):
  from scalable_agent_tf2.run import learning_curve  # pylint: disable=import-outside-toplevel
  from tests.run import test_training  # pylint: disable=import-outside-toplevel
  # The test machine is shared with other work: a drawing at low priority could take minutes.
  monkeypatch.setattr(learning_curve, "CURVE_NICE", 0)
  config = test_training.toy_config(tmp_path, total_frames=24_000, log_secs=0.5,
                                    checkpoint_secs=2.0)
  watch = _Watch(os.path.join(str(tmp_path), plot.CURVE_FILE))
  test_training.train_toy(config, lines=_Lines(watch.print))
  assert watch.at_checkpoint, "no curve was drawn at a checkpoint after the first episodes"
  final = watch.path
  assert png_size(final) == plot.figure_pixels(1)
  assert open(final, "rb").read() != watch.at_checkpoint  # Redrawn at the stop, with more.
  checkpoint_copy = tmp_path / "at_checkpoint.png"
  checkpoint_copy.write_bytes(watch.at_checkpoint)
  assert png_size(checkpoint_copy) == plot.figure_pixels(1)
  assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]

  # Each episode's own frame count: not the staircase of the PROGRESS records' counts.
  episodes, progress = runlog.read_trained_records(str(tmp_path))
  stamps = [e["frames"] for e in episodes]
  assert stamps == sorted(stamps)
  logged = {p["frames"] for p in progress}
  own = [frames for frames in stamps if frames not in logged]
  assert len(own) > len(stamps) / 2, (len(own), len(stamps))
  assert len(set(stamps)) > 2 * len(logged)


class _Lines(list):
  """A list that test_training.train_toy appends console lines to, passed on to `print_fn`."""

  def __init__(self, print_fn):
    super().__init__()
    self._print_fn = print_fn

  def append(self, line):
    super().append(line)
    self._print_fn(line)


def _drawn_axes(monkeypatch, draw):
  """[(x label, (x min, x max))] of every panel of the figures `draw()` saves (a test double
  at the write: Figure.savefig records the axes instead of writing)."""
  plt = plot._pyplot()  # pylint: disable=protected-access
  drawn = []

  def record(self, filename, **kwargs):
    del kwargs
    drawn.extend((axes.get_xlabel(), axes.get_xlim()) for axes in self.axes if axes.lines)
    with open(filename, "wb") as f:
      f.write(PNG_SIGNATURE)
  monkeypatch.setattr(plt.Figure, "savefig", record)
  draw()
  return drawn


def test_a_short_runs_axes_read_in_frames_and_seconds_a_long_ones_in_millions_and_hours(
    tmp_path, monkeypatch):
  # 30 episodes up to 2,905 frames in 300 s: thousands and minutes (not 0.003 million and
  # 0.08 hours).
  write_log(tmp_path / "short", ["toy/lit_side"])
  axes = _drawn_axes(monkeypatch, lambda: plot.write_run_curves(str(tmp_path / "short")))
  assert [label for label, _ in axes] == ["environment frames (thousands)",
                                          "minutes of training"]
  assert 2 < axes[0][1][1] < 4 and 4 < axes[1][1][1] < 7
  # 1,500 frames in 90 s: frames and seconds.
  brief = plot.Curve(np.array([100.0, 1_500.0]), np.array([0.001, 0.025]), np.zeros(2))
  assert plot.axis_unit([brief], "frames") == (1, "environment frames")
  assert plot.axis_unit([brief], "hours") == (1, "seconds of training")
  # 25,000 frames in 23 s, as the one-minute check's toy run: thousands, seconds.
  run = plot.Curve(np.linspace(100, 25_000, 50), np.linspace(0.0015, 0.0065, 50),
                   np.zeros(50), dots=np.zeros(50))
  assert plot.axis_unit([run], "frames") == (1e3, "environment frames (thousands)")
  assert plot.axis_unit([run], "hours") == (1, "seconds of training")
  # 200M frames in 40 h: millions and hours.
  long = plot.Curve(np.array([1e6, 2e8]), np.array([0.2, 40.0]), np.zeros(2))
  assert plot.axis_unit([long], "frames") == (1e6, "environment frames (millions)")
  assert plot.axis_unit([long], "hours") == (3600, "hours of training")
  # A suite's grid of levels takes the unit too.
  levels = [f"atari/game_{i}" for i in range(plot.MAX_LEVEL_ROWS + 1)]
  write_log(tmp_path / "suite", levels)
  axes = _drawn_axes(monkeypatch, lambda: plot.write_run_curves(str(tmp_path / "suite")))
  assert axes and all(label == "" and 2 < high < 4 for label, (_, high) in axes)
