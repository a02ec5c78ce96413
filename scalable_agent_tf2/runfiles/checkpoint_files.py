"""The checkpoint files under a run's logdir, TensorFlow-free.

    <logdir>/checkpoints/checkpoint          the state file (text, tf.train.CheckpointManager's
                                             format): model_checkpoint_path: "ckpt-<frames>"
                                             then all_model_checkpoint_paths, oldest first
    <logdir>/checkpoints/ckpt-<frames>.index and .data-*   one checkpoint, numbered by the
                                             learner's environment frames
    <logdir>/checkpoints/settings.json       the run's settings, checked on resume
    <logdir>/checkpoints/set_aside/          checkpoints moved out of the way, never deleted:
                                             newer than a --restore_checkpoint, or found
                                             complete but not in the state file

checkpoints.Checkpointer writes and restores them with TensorFlow; the population driver
finds a member's newest checkpoint and copies it into another member (PBT's exploit step,
IMPALA Appendix F) with this module alone. What can be known about a restore from the files
alone (no checkpoint to test, a --restore_checkpoint that is not there, a checkpoint trained
with other settings) is known here too: experiment.py says it before TensorFlow loads
(check_before_restore), with the words Checkpointer.restore would use.

A kill at any moment leaves a restorable checkpoint: a checkpoint is written in a
temporary directory (SAVING_PREFIX) and moved into place, data files before the .index, and
only then named in the state file, which is replaced atomically. An .index thus means a complete
checkpoint; data files without one, and the temporary files, are leftovers of a save cut short,
which checkpoint_leftovers.clean_leftovers removes at the next start.
"""
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil

try:
  import fcntl
except ImportError:  # Not on Windows: saves are then not locked against a cleaner.
  fcntl = None

CHECKPOINT_SUBDIR = "checkpoints"
# tf.train.CheckpointManager's names: its state file, and its checkpoints' prefix.
STATE_FILE = "checkpoint"
PREFIX = "ckpt"
SETTINGS_FILE = "settings.json"
# Checkpoints kept (the newest ones); a copy relies on the newest surviving a few more saves.
MAX_TO_KEEP = 5
SET_ASIDE_SUBDIR = "set_aside"
# A save's temporary directory inside the checkpoint directory (the same filesystem, so moving
# its files into place is a rename): saving_dir_name(). The name does not start with PREFIX:
# has_checkpoint_files and copy_checkpoint pass it by.
SAVING_PREFIX = ".saving-"
# Temporary files replaced onto the state and settings files: <name>.tmp<hex> (TensorFlow's
# CheckpointManager names its own the same way).
TEMP_SUFFIX = ".tmp"
_NAME = re.compile(rf"{PREFIX}-(\d+)")
# Settings that fix the shapes of the checkpointed variables: resuming with other values
# cannot work. Everything else (learning rate, number of actors, ...) may change on resume.
# The algorithm fixes which variables exist (IMPACT's target network).
SHAPE_SETTINGS = ("level_name", "torso", "width", "height", "algorithm", "popart")
# Settings stored beside SHAPE_SETTINGS but never compared (a resume may change them): what
# else shapes a gymnasium level's network (its --env_kwargs, --value_torso) and the
# environment the policy acted in, so that a policy loaded outside its run (policy.py)
# rebuilds both from the folder alone. A folder without them had the defaults.
POLICY_SETTINGS = ("env_kwargs", "value_torso", "sticky_actions", "num_action_repeats")
# What a settings file written before a setting was stored means by its absence (runs written
# before PopArt existed trained without it).
SETTINGS_BEFORE_THEY_WERE_STORED = {"algorithm": "impala", "popart": False}


class UnusableCheckpoint(ValueError):
  """What the checkpoint files alone show a restore cannot use (the message says what to do).

  A ValueError, so entry points report it like a bad setting (`error:` line, exit 2);
  checkpoints.Checkpointer raises its CheckpointError with the same words.
  """


def checkpoint_dir(logdir):
  return os.path.join(logdir, CHECKPOINT_SUBDIR)


def settings_path(logdir):
  return os.path.join(checkpoint_dir(logdir), SETTINGS_FILE)


def set_aside_dir(logdir):
  return os.path.join(checkpoint_dir(logdir), SET_ASIDE_SUBDIR)


def checkpoint_number(name):
  """The frames in a checkpoint's name ("ckpt-1200" -> 1200), or None for another name."""
  match = _NAME.fullmatch(name)
  return int(match.group(1)) if match else None


def read_state(directory):
  """(newest, names) from the state file in `directory`: the newest checkpoint's name and all
  it lists, oldest first, the newest last; None when the file is missing or names none."""
  try:
    with open(os.path.join(directory, STATE_FILE)) as f:
      text = f.read()
  except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
    return None
  match = re.search(r'^model_checkpoint_path: "([^"]+)"', text, re.M)
  if match is None:
    return None
  newest = os.path.basename(match.group(1))  # Old TensorFlow versions wrote absolute paths.
  names = [os.path.basename(path) for path in
           re.findall(r'^all_model_checkpoint_paths: "([^"]+)"', text, re.M)]
  return newest, [name for name in names if name != newest] + [newest]


def latest_checkpoint(logdir):
  """(file-name prefix, frames) of a run's newest checkpoint ("ckpt-1200", 1200), or None.

  Reads the state file; the number after the prefix is the frame count (Checkpointer.save
  numbers checkpoints by frames).
  """
  state = read_state(checkpoint_dir(logdir))
  if state is None:
    return None
  prefix = state[0]
  number = re.search(r"-(\d+)$", prefix)
  return prefix, int(number.group(1)) if number else 0


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


def write_state(directory, names):
  """Makes names[-1] the newest checkpoint; the state file lists `names` (oldest first) in
  tf.train.CheckpointManager's format, so tf.train.latest_checkpoint reads it too."""
  write_atomically(os.path.join(directory, STATE_FILE),
                   f'model_checkpoint_path: "{names[-1]}"\n'
                   + "".join(f'all_model_checkpoint_paths: "{name}"\n' for name in names))


def complete_checkpoints(directory):
  """Names of the numbered checkpoints in `directory` with an .index (a save moves the .index
  in last, so it means the data files are there), oldest (fewest frames) first."""
  try:
    names = os.listdir(directory)
  except (FileNotFoundError, NotADirectoryError):
    return []
  found = (name[:-len(".index")] for name in names if name.endswith(".index"))
  return sorted((name for name in found if checkpoint_number(name) is not None),
                key=checkpoint_number)


def _files_of(directory, name):
  """Checkpoint `name`'s files in `directory`: its data files, then its .index if there."""
  names = os.listdir(directory)
  data = sorted(n for n in names if n.startswith(name + ".data-"))
  return data + [name + ".index"] * (name + ".index" in names)


def remove_checkpoint(directory, name):
  """Deletes checkpoint `name`: the .index first, so that a kill half-way leaves data files
  without one (leftovers clean_leftovers removes), never an .index without its data."""
  files = _files_of(directory, name)
  for file_name in files[-1:] + files[:-1]:
    os.remove(os.path.join(directory, file_name))


def set_aside(logdir, name):
  """Moves checkpoint `name` of the run into set_aside/ (never deleted); returns its path
  prefix there.

  It keeps its name unless set_aside/ holds a complete one of that name ("ckpt-80_1", ...).
  The data files move first: a move cut short leaves the .index, which the next move of that
  checkpoint brings to its data under the same name.
  """
  directory = checkpoint_dir(logdir)
  target_dir = set_aside_dir(logdir)
  os.makedirs(target_dir, exist_ok=True)
  target, number = name, 0
  while os.path.exists(os.path.join(target_dir, target + ".index")):
    number += 1
    target = f"{name}_{number}"
  for file_name in _files_of(directory, name):
    os.replace(os.path.join(directory, file_name),
               os.path.join(target_dir, target + file_name[len(name):]))
  sync_directory(target_dir)
  sync_directory(directory)
  return os.path.join(target_dir, target)


@contextlib.contextmanager
def locked(directory, wait=True):
  """Holds the lock of `directory` (flock on the directory itself): one process at a time
  saves, sets aside or cleans there. Yields whether it holds it (False with wait=False while
  another process does). The kernel releases it when its process dies, even by kill -9."""
  if fcntl is None:
    yield True
    return
  fd = os.open(directory, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
      held = False
    else:
      held = True
    yield held
  finally:
    os.close(fd)  # Releases the lock.


def saving_dir_name(name):
  """The name of the temporary directory of a save of checkpoint `name`: it says which
  checkpoint was being saved (clean_leftovers adopts it when only the state file is missing)."""
  return f"{SAVING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.{name}"


# A logdir that holds a policy only (run/export_policy.py: the agent's weights and the frame
# count, no optimizer state), for test mode: this file beside the checkpoints says so, with
# where it came from.
POLICY_ONLY_FILE = "policy_only.json"


def policy_only_path(logdir):
  return os.path.join(checkpoint_dir(logdir), POLICY_ONLY_FILE)


def read_policy_only(logdir):
  """The export record of a policy-only logdir (dict), or None for a run's own logdir."""
  try:
    with open(policy_only_path(logdir)) as f:
      return json.load(f)
  except FileNotFoundError:
    return None


def read_settings(logdir):
  """The run's stored settings (settings.json, with SETTINGS_BEFORE_THEY_WERE_STORED filled
  in), or None when there is no such file.

  Raises:
    UnusableCheckpoint: the file cannot be read or parsed.
  """
  path = settings_path(logdir)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError) as error:
    raise UnusableCheckpoint(f"Cannot read {path} ({error}). Fix or delete that file.") from error
  return {**SETTINGS_BEFORE_THEY_WERE_STORED, **stored}


def check_settings(logdir, current):
  """Raises UnusableCheckpoint when the run's stored settings differ from `current` on a
  setting of SHAPE_SETTINGS that both name (a checkpoint of another network cannot be
  restored). `current` may leave out a setting it cannot know yet (the torso of a network
  that the first environment's spec chooses): it is then not compared.
  """
  stored = read_settings(logdir)
  if stored is None:
    return
  current = {**SETTINGS_BEFORE_THEY_WERE_STORED, **current}  # Same defaults.
  different = {k: (stored.get(k), current.get(k)) for k in SHAPE_SETTINGS
               if k in stored and k in current and stored.get(k) != current.get(k)}
  if different:
    details = ", ".join(f"--{k}: checkpoint {old!r}, now {new!r}"
                        for k, (old, new) in different.items())
    raise UnusableCheckpoint(
        f"The checkpoint in {checkpoint_dir(logdir)} was trained with different settings "
        f"({details}). Rerun with the checkpoint's values, or use another --logdir.")


def no_checkpoint_message(logdir):
  """What a test (a restore that requires a checkpoint) says when there is none."""
  return f"No checkpoint in {checkpoint_dir(logdir)}: train first (--mode=train --logdir={logdir})."


def unknown_checkpoint_message(logdir, name):
  """What --restore_checkpoint=name says when the run's directory has no such checkpoint."""
  available = complete_checkpoints(checkpoint_dir(logdir))
  return (f"--restore_checkpoint={name}: no such checkpoint in {checkpoint_dir(logdir)} (give "
          f"the name of one there); available: {', '.join(available) or 'none'}.")


def check_before_restore(logdir, current, required=False, restore_from=""):
  """What Checkpointer.restore (checkpoints.py) would refuse, decided from the files alone,
  in its order and words: settings.json against `current` (check_settings), a
  --restore_checkpoint that is not there, no checkpoint at all where one is required. A
  checkpoint that is there but may be corrupt is left to the restore (reading its tensors
  needs TensorFlow).

  Nothing is created or changed, even when `logdir` does not exist.

  Raises:
    UnusableCheckpoint: with what is wrong and what to do.
  """
  check_settings(logdir, current)
  if restore_from:
    if restore_from not in complete_checkpoints(checkpoint_dir(logdir)):
      raise UnusableCheckpoint(unknown_checkpoint_message(logdir, restore_from))
  elif (required and read_state(checkpoint_dir(logdir)) is None
        and not has_checkpoint_files(logdir)):
    raise UnusableCheckpoint(no_checkpoint_message(logdir))


def has_checkpoint_files(logdir):
  """Whether the checkpoint directory holds any checkpoint (an .index file), readable or not."""
  try:
    return any(name.endswith(".index") for name in os.listdir(checkpoint_dir(logdir)))
  except (FileNotFoundError, NotADirectoryError):
    return False


class CopyError(RuntimeError):
  """A checkpoint could not be copied intact."""


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _stage(source_dir, prefix, staging):
  """Copies checkpoint `prefix` (and the settings file) into `staging`, each file verified.
  Returns the file names; raises CopyError or OSError."""
  shutil.rmtree(staging, ignore_errors=True)
  os.makedirs(staging)
  names = sorted(n for n in os.listdir(source_dir) if n.startswith(prefix + "."))
  if not any(n.endswith(".index") for n in names):
    raise CopyError(f"{prefix}.index missing")
  if os.path.exists(os.path.join(source_dir, SETTINGS_FILE)):
    names.append(SETTINGS_FILE)
  for name in names:
    source = os.path.join(source_dir, name)
    shutil.copyfile(source, os.path.join(staging, name))
    if _sha256(source) != _sha256(os.path.join(staging, name)):
      raise CopyError(f"{name} changed while it was copied")
  return names


def _replace(target_dir, staging, names, prefix):
  """Replaces the checkpoints in target_dir with the staged files; the state file last."""
  os.makedirs(target_dir, exist_ok=True)
  for name in os.listdir(target_dir):
    path = os.path.join(target_dir, name)
    if os.path.isdir(path) and name.startswith(PREFIX + "-"):  # A save cut short (*_temp).
      shutil.rmtree(path)
    elif name.startswith(PREFIX + "-") or name == STATE_FILE:
      os.remove(path)
  for name in names:
    os.replace(os.path.join(staging, name), os.path.join(target_dir, name))
  os.rmdir(staging)
  for name in names:
    sync_file(os.path.join(target_dir, name))
  sync_directory(target_dir)
  write_state(target_dir, [prefix])


def copy_checkpoint(source_logdir, target_logdir, attempts=3):
  """Replaces the target run's checkpoints with the source run's newest one, verified.

  The source may be training (and checkpointing) meanwhile: the files named by its state file
  are complete (TensorFlow writes the state file last) and survive several more saves
  (MAX_TO_KEEP). The files are copied to a staging directory and every one's SHA-256 is
  checked against its source before the target's own checkpoints are replaced, so a failed
  copy leaves the target as it was.

  Returns:
    The copied checkpoint's frames.

  Raises:
    CopyError: no checkpoint in the source, or no intact copy after `attempts`.
  """
  source_dir = checkpoint_dir(source_logdir)
  target_dir = checkpoint_dir(target_logdir)
  staging = target_dir + ".incoming"
  error = None
  for _ in range(attempts):
    latest = latest_checkpoint(source_logdir)
    if latest is None:
      raise CopyError(f"No checkpoint in {source_dir} to copy.")
    prefix, frames = latest
    try:
      names = _stage(source_dir, prefix, staging)
    except (OSError, CopyError) as failure:  # E.g. deleted by the source's manager meanwhile.
      error = failure
      continue
    _replace(target_dir, staging, names, prefix)
    return frames
  shutil.rmtree(staging, ignore_errors=True)
  raise CopyError(f"Could not copy the checkpoint of {source_dir} intact: {error}.")
