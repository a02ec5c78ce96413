"""A full disk under each writer of a run (log.jsonl, TensorBoard's events file, the learning
curve, test mode's videos): the run ends in its `error:` line naming the file, the newest
checkpoint intact, and log.jsonl holds whole lines only (a resume cuts a line left without its
end).

The disk fills at the exact write: a test double of that write (os.write on log.jsonl's file,
the events writer's flush, the curve child's savefig through a sitecustomize on its path, a
video writer), and, in the slow tier, a small tmpfs as the logdir (root only).
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import plot
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.runfiles import videos
from tests.run.test_curves import write_log
from tests.run.test_training import REPO_DIR
from tests.run.test_training import toy_config
from tests.run.test_training import train_toy

FULL = os.strerror(errno.ENOSPC)  # "No space left on device"


def _full_at_the_nth_write_of(fd_of, nth=1):
  """An os.write that writes half of the `nth` write (and every later one) to the file
  descriptor fd_of() gives, then fails as a full disk does."""
  real_write = os.write
  calls = []

  def write(fd, data):
    if fd != fd_of():
      return real_write(fd, data)
    calls.append(len(data))
    if len(calls) < nth:
      return real_write(fd, data)
    if len(calls) == nth and len(data) > 1:
      return real_write(fd, bytes(data[:len(data) // 2]))
    raise OSError(errno.ENOSPC, FULL)
  return write


def _whole_lines(path):
  with open(path, "rb") as f:
    data = f.read()
  assert not data or data.endswith(b"\n"), data[-200:]
  return [json.loads(line) for line in data.decode().splitlines()]


def test_a_log_write_on_a_full_disk_names_the_file_and_leaves_whole_lines(tmp_path,
                                                                          monkeypatch):
  """log.jsonl kept a torn line (`{"kind": "episode", "frames": 5680, "level":`)."""
  writer = runlog.Writer(str(tmp_path))
  writer.start(0)
  monkeypatch.setattr(os, "write", _full_at_the_nth_write_of(lambda: writer._fd))  # pylint: disable=protected-access
  writer.episode(5680, "toy/lit_side", 3.0, 10)
  writer.episode(5690, "toy/lit_side", 4.0, 10)
  with pytest.raises(OSError) as raised:
    writer.flush()
  monkeypatch.undo()
  writer.close()
  assert raised.value.errno == errno.ENOSPC and raised.value.filename == runlog.log_path(
      str(tmp_path)), raised.value
  assert [r["kind"] for r in _whole_lines(runlog.log_path(str(tmp_path)))] == [runlog.START]


def test_a_resume_cuts_off_a_line_left_without_its_end_and_readers_skip_it(tmp_path):
  """The torn line stayed after the resume (ended by a newline, a line of its own)."""
  path = runlog.log_path(str(tmp_path))
  with open(path, "w") as f:
    f.write(json.dumps(dict(kind=runlog.START, time=0.0, frames=0)) + "\n")
    f.write('{"kind": "episode", "frames": 5680, "level":')
  assert [r["kind"] for r in runlog.read_log(str(tmp_path))] == [runlog.START]
  writer = runlog.Writer(str(tmp_path))
  writer.start(5000)
  writer.close()
  assert [(r["kind"], r["frames"]) for r in _whole_lines(path)] == [
      (runlog.START, 0), (runlog.START, 5000)]


def test_the_plot_command_on_a_full_disk_says_so_and_exits_with_its_code(tmp_path, monkeypatch,
                                                                          capsys):
  write_log(tmp_path, ["toy/lit_side"])
  plt = plot._pyplot()  # pylint: disable=protected-access

  def full(self, filename, **kwargs):
    raise OSError(errno.ENOSPC, FULL, filename)
  monkeypatch.setattr(plt.Figure, "savefig", full)
  with pytest.raises(SystemExit) as raised:
    plot.main([str(tmp_path)])
  assert raised.value.code == plot.WRITE_FAILED
  assert (f"error: cannot write {tmp_path}/{plot.CURVE_FILE}: [Errno 28] {FULL}"
          in capsys.readouterr().err)


class _FullEventsWriter:
  """TensorBoard's file writer on a disk that is full from its second flush on."""

  def __init__(self, writer, logdir):
    self._writer = writer
    self._logdir = logdir
    self._flushes = 0

  def as_default(self, step=None):
    return self._writer.as_default(step=step)

  def flush(self):
    self._flushes += 1
    if self._flushes > 1:
      raise tf.errors.ResourceExhaustedError(
          None, None, "{{function_node __wrapped__FlushSummaryWriter}} "
          f"{self._logdir}/events.out.tfevents.0; {FULL}\n\tFailed to flush 1 events")
    self._writer.flush()

  def close(self):
    self._writer.close()


_FULL_AT_SAVEFIG = textwrap.dedent(f"""
    import errno, os
    import matplotlib.figure
    def savefig(self, filename, **kwargs):
      with open(filename, "wb") as f:
        f.write(b"half a PNG")
      raise OSError(errno.ENOSPC, {FULL!r}, filename)
    matplotlib.figure.Figure.savefig = savefig
""")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("writer", ["log.jsonl", "tensorboard", "learning curve"])
def test_a_full_disk_under_each_writer_of_training_stops_it_with_its_error(
    tmp_path, monkeypatch, writer):
  """TensorBoard's ResourceExhaustedError, then an OSError in the log's close, ended the run
  in a traceback without an `error:` or `Stopped:` line; a curve that could not be written
  was printed as "not drawn" and the run went on."""
  logdir = tmp_path / "run"
  config = toy_config(logdir, total_frames=10_000_000, log_secs=1.0, checkpoint_secs=2.0)
  if writer == "log.jsonl":
    monitors = []
    real_init = monitoring.Monitor.__init__

    def init(self, *args, **kwargs):
      real_init(self, *args, **kwargs)
      monitors.append(self)
    monkeypatch.setattr(monitoring.Monitor, "__init__", init)
    monkeypatch.setattr(os, "write", _full_at_the_nth_write_of(
        lambda: monitors[0]._log._fd if monitors else None, nth=3))  # pylint: disable=protected-access
    named = f"Cannot write the run's log: [Errno 28] {FULL}: '{logdir}/log.jsonl'"
  elif writer == "tensorboard":
    real_create = tf.summary.create_file_writer
    monkeypatch.setattr(tf.summary, "create_file_writer",
                        lambda path: _FullEventsWriter(real_create(path), path))
    named = f"Cannot write TensorBoard's events file in {logdir}: "
  else:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_FULL_AT_SAVEFIG)
    monkeypatch.setenv("PYTHONPATH", str(site))  # The curve's child process finds it.
    named = (f"Cannot write the learning curve: cannot write {logdir}/{plot.CURVE_FILE}: "
             f"[Errno 28] {FULL}")
  lines = []
  with pytest.raises(training.RunFailed) as raised:
    train_toy(config, lines=lines)
  message = str(raised.value)
  assert named in message and FULL in message, message
  newest = checkpoints.latest_checkpoint(str(logdir))
  assert newest is not None and os.path.exists(os.path.join(
      checkpoints.checkpoint_dir(str(logdir)), newest[0] + ".index"))
  assert "holds its last good state" in message, message
  stopped = [line for line in lines if line.startswith("Stopped: ")]
  assert stopped and "Cannot write" in stopped[0], lines[-5:]
  monkeypatch.undo()
  _whole_lines(runlog.log_path(str(logdir)))


class _FullVideoWriter(videos.GifWriter):
  """A video file on a disk that is full from its third frame on."""

  def _write(self, frame):
    if self.num_frames >= 2:
      raise OSError(errno.ENOSPC, FULL, self.path)
    super()._write(frame)


@pytest.mark.timeout(300)
def test_videos_on_a_full_disk_end_the_test_with_an_error_after_its_results(tmp_path,
                                                                           monkeypatch):
  """The test printed "is not recorded" and ended as if nothing were wrong (exit 0)."""
  from tests.run.test_videos import _toy_config  # pylint: disable=g-import-not-at-top
  from tests.run.test_videos import _toy_logdir  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(videos, "choose_format", lambda: (videos.GIF, None))
  monkeypatch.setitem(videos.WRITERS, videos.GIF, _FullVideoWriter)
  logdir = _toy_logdir(tmp_path)
  lines = []
  with pytest.raises(evaluation.VideosNotWritten) as raised:
    evaluation.evaluate(_toy_config(logdir, "--num_actors=1", "--test_num_episodes=2",
                                    "--record_video_episodes=2"), print_fn=lines.append)
  directory = os.path.join(logdir, "evaluation", "videos")
  assert (f"could not write the videos of toy/lit_side in {directory} ([Errno 28] {FULL}): "
          "the results above were written") in str(raised.value)
  with open(os.path.join(logdir, "evaluation", "results.json")) as f:
    assert json.load(f)["levels"][0]["episodes"] == 2
  assert any(line.startswith("Results: ") for line in lines)


@pytest.fixture
def small_tmpfs(tmp_path):
  """A 4 MB tmpfs (unmounted at the end); skipped where it cannot be mounted."""
  mount_point = tmp_path / "tmpfs"
  mount_point.mkdir()
  if os.geteuid() != 0 or shutil.which("mount") is None:
    pytest.skip("mounting a tmpfs needs root")
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                           capture_output=True, text=True)
  if mounted.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
  try:
    yield mount_point
  finally:
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _train(logdir, frames):
  return subprocess.run(
      [sys.executable, "experiment.py", "--mode=train", "--level_name=toy/lit_side",
       "--num_actors=2", f"--total_environment_frames={frames}", "--log_secs=0.5",
       f"--logdir={logdir}"], capture_output=True, text=True, cwd=REPO_DIR, timeout=400)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_training_on_a_tmpfs_that_fills_stops_with_its_error_and_resumes(small_tmpfs):
  logdir = small_tmpfs / "run"
  first = _train(logdir, 800)
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
  kept = checkpoints.latest_checkpoint(str(logdir))
  # The disk is full but for 64 KB: the resumed run's log and events fill it in seconds.
  free = os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize
  with open(small_tmpfs / "filler", "wb") as f:
    f.write(b"\0" * max(0, free - 64 * 1024))
  full = _train(logdir, 100_000_000)
  assert full.returncode == 1, full.stdout[-2000:] + full.stderr[-2000:]
  assert "Traceback" not in full.stderr, full.stderr[-3000:]
  errors = [line for line in full.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and FULL in errors[0], full.stderr[-3000:]
  assert "Stopped: " in full.stdout, full.stdout[-2000:]
  assert checkpoints.latest_checkpoint(str(logdir)) == kept  # Intact, still the newest.
  assert os.path.exists(os.path.join(checkpoints.checkpoint_dir(str(logdir)),
                                     kept[0] + ".index"))
  _whole_lines(runlog.log_path(str(logdir)))
  os.remove(small_tmpfs / "filler")
  resumed = _train(logdir, kept[1] + 800)
  assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
  assert f"Resumed from {checkpoints.checkpoint_dir(str(logdir))}/{kept[0]}" in (
      resumed.stdout)
  _whole_lines(runlog.log_path(str(logdir)))
