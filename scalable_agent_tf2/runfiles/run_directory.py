"""The run directory (--logdir): checked before any work, and held by one process at a time.

TensorFlow-free, so a bad --logdir is reported before TensorFlow loads and environments start.

Two trainings on one logdir overwrite each other's checkpoints (both write `ckpt-N` at the
same N) and interleave `log.jsonl`; two tests, each other's results; a test beside a training
restores a checkpoint while the training replaces them. `hold(logdir, role)` takes an exclusive `flock` on
`<logdir>/.lock` for the life of the process and writes who holds it there. The kernel releases
an flock when its process ends, however it ends (kill -9 included), so a lock file left by a
dead process never blocks the next run: only a live holder does.
"""
import datetime
import errno
import fcntl
import json
import os
import socket
import sys

LOCK_FILE = ".lock"

# Held locks by logdir: a lock lives until release() or the process's end, even when the
# caller drops its reference (a garbage-collected file object would release the flock).
_held = {}


class RunDirectoryError(ValueError):
  """The logdir cannot be used: not a directory, not writable, or held by another process.

  A ValueError, so entry points report it like any other bad setting (`error:` line, exit 2).
  """


def check_path(logdir):
  """Checks what the path alone says (empty, or a file), touching nothing.

  Raises:
    RunDirectoryError: with what is wrong and what to do.
  """
  if not logdir:
    raise RunDirectoryError("--logdir is empty; give a directory for checkpoints and logs.")
  if os.path.exists(logdir) and not os.path.isdir(logdir):
    raise RunDirectoryError(f"--logdir={logdir} is a file, not a directory; choose another "
                            "path.")


def _probe_writing(directory):
  """Writes and removes a file in `directory` (OSError if it cannot be written)."""
  probe = os.path.join(directory, f".write_check.{os.getpid()}")
  with open(probe, "w") as f:
    f.write("ok")
  os.remove(probe)


def _cannot_write(logdir, error):
  reason = error.strerror or str(error)
  return RunDirectoryError(f"--logdir={logdir} cannot be written ({reason}); choose a "
                           "writable directory.")


def check_usable(logdir):
  """Creates `logdir` if needed and checks that files can be written in it.

  Raises:
    RunDirectoryError: with what is wrong and what to do.
  """
  check_path(logdir)
  try:
    os.makedirs(logdir, exist_ok=True)
    _probe_writing(logdir)
  except OSError as error:
    raise _cannot_write(logdir, error) from error


def check_creatable(path):
  """Checks, creating nothing, that directory `path` could be made and written: it is a
  writable directory, or its nearest existing ancestor is one (test mode's evaluation/ is
  checked so before TensorFlow loads, and made only when the results are written).

  Raises:
    RunDirectoryError: with what is wrong and what to do (check_usable's words).
  """
  check_path(path)
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise RunDirectoryError(f"--logdir={path}: {existing} is a file, not a directory; choose "
                            "another path.")
  try:
    _probe_writing(existing)
  except OSError as error:
    raise _cannot_write(path, error) from error


class RunDirectoryLock:
  """An exclusive hold on a logdir by this process; `release()` (or process exit) ends it."""

  def __init__(self, logdir, file_object):
    self.logdir = logdir
    self._file = file_object

  def release(self):
    _held.pop(os.path.realpath(self.logdir), None)
    if self._file is not None:
      fcntl.flock(self._file, fcntl.LOCK_UN)
      self._file.close()
      self._file = None

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.release()


def _holder(lock_path):
  """(who holds the logdir, in words; its role or None when its details cannot be read)."""
  try:
    with open(lock_path) as f:
      holder = json.loads(f.read() or "{}")
  except (OSError, ValueError):
    return "another process (its details could not be read)", None
  return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
          f"({holder.get('role', '?')}, started {holder.get('started', '?')}: "
          f"{holder.get('command', '?')})"), holder.get("role")


def _clash(role, holder_role):
  """What two processes on one logdir would do to each other, from their roles ("train of
  ...", "test of ..."; None: not known): a training writes checkpoints and log.jsonl, a test
  its results files and no checkpoint."""
  if holder_role is None:
    return ("Two runs on one logdir write over each other's files (a training's checkpoints "
            "and log.jsonl, a test's results)")
  tests = [r.startswith("test") for r in (role, holder_role)]
  if all(tests):
    return ("Two tests on one logdir write over each other's results (evaluation/"
            "results.json and results.csv)")
  if any(tests):
    return ("A test beside a training on one logdir would restore a checkpoint while the "
            "training writes new ones and deletes old ones")
  return ("Two trainings on one logdir overwrite each other's checkpoints (both write "
          "ckpt-N at the same N) and interleave its log.jsonl")


def hold(logdir, role):
  """Checks the logdir and takes it for this process (training, test or population member).

  Args:
    logdir: the run's directory.
    role: what this process does there, shown to a second process that is refused.

  Returns:
    A RunDirectoryLock held until `release()` or this process ends.

  Raises:
    RunDirectoryError: unusable logdir, or another live process holds it (named).
  """
  check_usable(logdir)
  lock_path = os.path.join(logdir, LOCK_FILE)
  lock_file = open(lock_path, "a+")  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as error:
    lock_file.close()
    if error.errno not in (errno.EAGAIN, errno.EACCES):
      raise RunDirectoryError(f"--logdir={logdir}: cannot lock {lock_path} ({error.strerror})."
                              ) from error
    holder, holder_role = _holder(lock_path)
    raise RunDirectoryError(
        f"--logdir={logdir} is in use by {holder}. {_clash(role, holder_role)}: stop that "
        "process or choose another --logdir.") from None
  holder = dict(pid=os.getpid(), host=socket.gethostname(), role=role,
                started=datetime.datetime.now().isoformat(timespec="seconds"),
                command=" ".join(sys.argv))
  lock_file.seek(0)
  lock_file.truncate()
  lock_file.write(json.dumps(holder))
  lock_file.flush()
  lock = RunDirectoryLock(logdir, lock_file)
  _held[os.path.realpath(logdir)] = lock
  return lock
