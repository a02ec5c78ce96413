"""The run log, <logdir>/log.jsonl: one JSON object per line, the record of a training run.

Written by the run's monitor (monitoring.Monitor); read by the population driver (a member's
episodes and frames), PBT's learning curves across ancestors (pbt.reconstruct_curve) and the
benchmarks. TensorFlow-free, so a driver or a plotting tool reads it without loading it.

Records, by their "kind":
  START     one per (re)start of training: time, frames (the frame count it starts from: a
            resumed run starts at its checkpoint's).
  EPISODE   one per finished episode: frames (the learner's frame count when the episode
            ended: monitoring.Monitor.record_episode; older logs have the count of the write
            that logged it), level, episode_return, episode_length.
  PROGRESS  one per monitor write (every --log_secs): time, frames, progress, rates, counts
            and the learner's latest scalars; "not measured yet" is null.
  ENVIRONMENT_FAILURE  one per environment replaced after it failed (its process died, its
            step() or reset() raised, its output broke its spec): time, frames, level,
            error (the message, naming the step and episode), error_type, and where (the
            file, line and function of the environment's own code that raised, or null).
  ACTOR_PROCESS  one per change in a cluster learner's actor processes: time, frames, task,
            event ("joined": its first trajectory; "silent": nothing for `seconds`, stopped,
            frozen or cut off; "sending again": after `seconds` of silence), seconds.
"""
import contextlib
import json
import math
import os
import time

LOG_FILE = "log.jsonl"
START = "start"
EPISODE = "episode"
PROGRESS = "progress"
ENVIRONMENT_FAILURE = "environment_failure"
ACTOR_PROCESS = "actor_process"


def log_path(logdir):
  return os.path.join(logdir, LOG_FILE)


class Writer:
  """Appends records to a run's log.jsonl (a resumed run appends to the same file).

  Only whole lines stay in the file: a write that fails (a full disk) is cut back to the last
  complete line before the error is raised, and a line left without its end (a process
  killed mid-line, a disk full before) is cut off when the next attempt opens the file.
  """

  def __init__(self, logdir):
    os.makedirs(logdir, exist_ok=True)
    self.path = log_path(logdir)
    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    self._size = _cut_to_complete_lines(self.path, self._fd)
    self._pending = []

  def write(self, record):
    """Appends one record (a dict with "kind"); NaN floats are written as null (strict JSON).
    Call `flush` to write it (and make it visible to readers)."""
    record = {k: None if isinstance(v, float) and math.isnan(v) else v
              for k, v in record.items()}
    self._pending.append(json.dumps(record) + "\n")

  def start(self, frames):
    """Logs (and flushes) the START record of an attempt starting at `frames`."""
    self.write(dict(kind=START, time=time.time(), frames=int(frames)))
    self.flush()

  def episode(self, frames, level, episode_return, episode_length):
    self.write(dict(kind=EPISODE, frames=int(frames), level=level,
                    episode_return=episode_return, episode_length=episode_length))

  def environment_failure(self, frames, level, error, error_type, where):
    self.write(dict(kind=ENVIRONMENT_FAILURE, time=time.time(), frames=int(frames),
                    level=level, error=error, error_type=error_type, where=where))

  def actor_process(self, frames, task, event, seconds):
    self.write(dict(kind=ACTOR_PROCESS, time=time.time(), frames=int(frames), task=int(task),
                    event=event, seconds=seconds))

  def flush(self):
    """Writes the records since the last flush.

    Raises:
      OSError: naming the file (its errno: ENOSPC for a full disk); the file is cut back to
        the records written before, and these records are dropped.
    """
    data, self._pending = "".join(self._pending).encode(), []
    view = memoryview(data)
    try:
      while view:
        view = view[os.write(self._fd, view):]
    except OSError as error:
      with contextlib.suppress(OSError):  # Never a line without its end.
        os.ftruncate(self._fd, self._size)
      raise OSError(error.errno, error.strerror, self.path) from error
    self._size += len(data)

  def close(self):
    """Writes what was not flushed (OSError as flush's), then closes the file."""
    if self._fd is None:
      return
    try:
      self.flush()
    finally:
      os.close(self._fd)
      self._fd = None


def _cut_to_complete_lines(path, fd):
  """Cuts the file (open as fd) after its last newline; returns its size."""
  size = os.fstat(fd).st_size
  with open(path, "rb") as f:
    end = size
    while end > 0:
      start = max(0, end - 65536)
      f.seek(start)
      newline = f.read(end - start).rfind(b"\n")
      if newline >= 0:
        end = start + newline + 1
        break
      end = start
  if end < size:
    os.ftruncate(fd, end)
  return end


def read_records(path, start=0, end=None):
  """The records of a log file between byte offsets `start` and `end` (None: its end).

  Only complete lines count: a last line without its newline is being written and is left
  for the next read. A line that is not JSON (cut short by a killed process) is skipped.

  Returns:
    (records, offset): the records (dicts) in logged order, and the offset just after the
    last complete line read (where the next read starts). A missing file has no records.
  """
  try:
    with open(path, "rb") as f:
      f.seek(start)
      data = f.read() if end is None else f.read(max(end - start, 0))
  except FileNotFoundError:
    return [], start
  complete = data.rfind(b"\n") + 1
  records = []
  for line in data[:complete].decode(errors="replace").splitlines():
    try:
      record = json.loads(line)
    except ValueError:
      continue
    if isinstance(record, dict):
      records.append(record)
  return records, start + complete


def read_log(logdir):
  """Every record of a run's log.jsonl, in logged order ([] before it logged anything)."""
  return read_records(log_path(logdir))[0]


def of_kind(records, kind):
  """The records of one kind (START, EPISODE, PROGRESS, ENVIRONMENT_FAILURE, ACTOR_PROCESS),
  in order."""
  return [r for r in records if r.get("kind") == kind]


class LogTail:
  """Reads the records appended to a log file since the last read."""

  def __init__(self, path, offset=0):
    self.path = path
    self.offset = offset

  def read(self):
    """New records (dicts); a last line still being written waits for the next call."""
    records, self.offset = read_records(self.path, self.offset)
    return records


def read_trained_records(logdir, records=None):
  """The EPISODE and PROGRESS records of a run's log that lead to its parameters.

  `records`: the log's records when the caller has read them already (read_log(logdir));
  a long run's log is tens of megabytes, read once.

  A run resumed from a checkpoint logs frame counts from the checkpoint's on (its START
  record names that count): what the interrupted attempt logged beyond it was played and
  trained by parameters that were lost, and is dropped, so frames never decrease. Logs
  written before START records existed are cut where frames go back. Each progress record
  gains "total_updates": updates summed over attempts (the monitor counts from 0 in each
  process; an attempt contributes up to its last record kept, within one log interval of
  its checkpoint).

  Returns:
    (episodes, progress): lists of records, in logged order.
  """
  episodes, progress = [], []
  offset, previous_updates = 0, None

  def drop_beyond(frames):
    for kept in (episodes, progress):
      while kept and kept[-1]["frames"] > frames:
        kept.pop()
  for record in read_log(logdir) if records is None else records:
    kind = record.get("kind")
    if kind == START:
      drop_beyond(record["frames"])
      offset = progress[-1]["total_updates"] if progress else 0
      previous_updates = None
    elif kind == EPISODE:
      drop_beyond(record["frames"])
      episodes.append(record)
    elif kind == PROGRESS:
      updates = record.get("updates", 0)
      drop_beyond(record["frames"])
      if previous_updates is not None and updates < previous_updates:
        # A new attempt in a log without START records.
        offset = progress[-1]["total_updates"] if progress else 0
      previous_updates = updates
      progress.append(dict(record, total_updates=offset + updates))
  return episodes, progress
