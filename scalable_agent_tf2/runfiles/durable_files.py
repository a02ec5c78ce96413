"""Files that a kill or a power loss never leaves half written: synced, then renamed into place.

Checkpoints (checkpoints.py: the state file, the settings) and the results files of test mode
(run/evaluation.py) are written with these; `locked` keeps two processes' saves apart.
"""
import contextlib
import errno
import fcntl
import os
import secrets

# Temporary files renamed onto their targets: <name>.tmp<hex> (TensorFlow's CheckpointManager
# names its own the same way, so one rule tidies both: checkpoints.clean_leftovers).
TEMP_SUFFIX = ".tmp"


def sync_file(path):
  """Forces `path`'s contents to disk (a power loss after this cannot lose them)."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def sync_directory(path):
  """Forces the renames, creations and removals in directory `path` to disk."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  except OSError as error:
    if error.errno not in (errno.EINVAL, errno.ENOTSUP):  # Filesystems that cannot sync one.
      raise
  finally:
    os.close(fd)


def write_atomically(path, text):
  """Replaces file `path` with `text`: after a kill or a power loss it holds the old text or
  the new, never a part (a temporary file is synced, then renamed onto it)."""
  write_files_atomically([(path, text)])


def write_files_atomically(files):
  """Replaces each file of `files` ([(path, text)]) as write_atomically does, every text
  written and synced before the first rename: a failed write (a full disk) or a kill while
  writing leaves every file as it was, and only a kill between the renames (microseconds
  apart) can leave some replaced and the rest old, each file whole."""
  temps = []
  try:
    for path, text in files:
      temps.append(f"{path}{TEMP_SUFFIX}{secrets.token_hex(4)}")
      with open(temps[-1], "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    for temp, (path, _) in zip(temps, files):
      os.replace(temp, path)
  except BaseException:
    for temp in temps:
      with contextlib.suppress(OSError):
        os.remove(temp)
    raise
  for directory in dict.fromkeys(os.path.dirname(os.path.abspath(path)) for path, _ in files):
    sync_directory(directory)


@contextlib.contextmanager
def locked(directory, wait=True):
  """Holds `directory`'s flock (released if the process dies); yields whether it holds it."""
  fd = os.open(directory, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
      held = True
    except BlockingIOError:
      held = False
    yield held
  finally:
    os.close(fd)
