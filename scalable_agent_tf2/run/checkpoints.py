"""Checkpoints under --logdir: the agent's parameters, the optimizer's slots and the frame count
(which fixes the learning-rate position), plus the run's settings to check a resume against.
The files' names and layout are checkpoint_files.py's.

A checkpoint that cannot be read, or that belongs to a different network, is an error that
says what to do; it is never silently replaced by a fresh start. A kill or a power loss at any
moment leaves the newest complete checkpoint restorable (Checkpointer.save says how),
and a corrupt newest one names the intact older one to resume from (--restore_checkpoint).
"""
import contextlib
import errno
import gc
import json
import logging
import os
import re
import shutil
import time

import tensorflow as tf

from scalable_agent_tf2.runfiles import checkpoint_files
from scalable_agent_tf2.runfiles import checkpoint_leftovers

# Settings that fix the shapes of the checkpointed variables (checkpoint_files.py, which
# compares them without TensorFlow too).
SHAPE_SETTINGS = checkpoint_files.SHAPE_SETTINGS


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be used for this run, or cannot be written."""


class NonFiniteState(CheckpointError):
  """The state to save holds NaN or Inf: nothing was written, the newest checkpoint stays."""


class CheckpointSaveError(CheckpointError):
  """A save failed on an OSError (disk full, read-only filesystem, directory deleted,
  permission): nothing of it is left, the newest complete checkpoint stays the newest."""


# The test hook (tests/run/test_checkpoint_safety.py kills saves at each phase): with
# SCALABLE_AGENT_SAVE_PAUSE=<phase>:<seconds> every save prints
# "checkpoint save paused at <phase>: <path>" and sleeps there. The phases, in order: the new
# checkpoint written, synced and verified in its temporary directory; its data files moved into
# place; its .index moved in (complete, not yet the newest); the state file naming it (older
# ones not yet deleted).
SAVE_PAUSE_VARIABLE = "SCALABLE_AGENT_SAVE_PAUSE"
SAVE_PHASES = ("written", "data_moved", "index_moved", "state_written")


def _pause(phase, path):
  wanted, _, seconds = os.environ.get(SAVE_PAUSE_VARIABLE, "").partition(":")
  if wanted == phase:
    print(f"checkpoint save paused at {phase}: {path}", flush=True)
    time.sleep(float(seconds or 60))


# What TensorFlow logs when a failed restore's bookkeeping is deleted: after a CheckpointError
# (which says what is wrong and what to do) they only repeat the checkpoint's variable names.
_UNRESTORED_VALUE_WARNINGS = ("Detecting that an object or model or tf.train.Checkpoint is "
                              "being deleted with unrestored values",
                              "Value in checkpoint could not be found in the restored object")


class _DropUnrestoredValueWarnings(logging.Filter):

  def filter(self, record):
    return not str(record.getMessage()).startswith(_UNRESTORED_VALUE_WARNINGS)


@contextlib.contextmanager
def _without_unrestored_value_warnings():
  """TensorFlow's logger drops the unrestored-value warnings while this is active.

  Set TF_CPP_MIN_LOG_LEVEL=0 to see them (debugging a partial restore).
  """
  if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
    yield
    return
  logger = tf.get_logger()
  quiet = _DropUnrestoredValueWarnings()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def _read_every_value(path):
  """Reads every tensor of checkpoint `path` (tf.errors.OpError if a file is corrupt).

  A restore that fails half-way leaves bookkeeping that TensorFlow reports as "unrestored
  values" when it is deleted (at exit, after our error); a corrupt file is caught here first.
  """
  reader = tf.train.load_checkpoint(path)
  for name in reader.get_variable_to_shape_map():
    reader.get_tensor(name)


def _intact(path):
  """Whether checkpoint `path` is complete and every tensor of it reads back."""
  if not os.path.exists(path + ".index"):
    return False
  try:
    _read_every_value(path)
  except (tf.errors.OpError, ValueError):
    return False
  return True


def _describe(error):
  """An OSError or TensorFlow error in one line."""
  if isinstance(error, tf.errors.OpError):  # Without the op's internal names around it.
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "", error.message)
    return f"{type(error).__name__}: {message}"
  return str(error)


class Checkpointer:
  """Saves and restores one run's state under logdir/checkpoints (keeps the newest
  checkpoint_files.MAX_TO_KEEP).

  Creating one cleans what saves cut short left in the directory
  (checkpoint_leftovers.clean_leftovers).

  Attributes:
    set_aside: path prefixes of the checkpoints this one moved to set_aside/ (never deleted):
      complete ones the state file did not list (at creation), those newer than
      restore(restore_from=...), one in the way of a save; set_aside_note says it in a line.
    removed: names of the leftovers of interrupted saves it deleted at creation.
    adopted: names of the checkpoints it made the newest at creation: complete, but their
      save was killed before it named them in the state file (checkpoint_leftovers.clean_leftovers).
  """

  def __init__(self, logdir, settings, **trackables):
    """Args:
      logdir: the run's directory.
      settings: dict of the run's settings (JSON-serialisable); stored next to the
        checkpoints and compared at restore on SHAPE_SETTINGS.
      **trackables: what to save, e.g. agent=..., learner=...
    """
    self._logdir = logdir
    self._settings = settings
    self._directory = checkpoint_files.checkpoint_dir(logdir)
    self._checkpoint = tf.train.Checkpoint(**trackables)
    # A directory that existed (or that a save made) and is gone was deleted: a save says so
    # rather than start a new one that hides the loss.
    self._directory_existed = os.path.isdir(self._directory)
    self.set_aside = []
    self.removed = []
    self.adopted = []
    try:
      self.removed, self.set_aside, self.adopted = checkpoint_leftovers.clean_leftovers(logdir)
    except OSError:
      pass  # A read-only logdir (testing a copied run): nothing to clean that a save needs.

  @property
  def latest(self):
    """Path prefix of the newest checkpoint (named by the state file), or None."""
    state = checkpoint_files.read_state(self._directory)
    return None if state is None else os.path.join(self._directory, state[0])

  def set_aside_note(self):
    """A line naming the checkpoints in set_aside, for the caller to print; None if none."""
    if not self.set_aside:
      return None
    return (f"Set aside (not deleted) in {checkpoint_files.set_aside_dir(self._logdir)}: "
            + ", ".join(os.path.basename(path) for path in self.set_aside) + ".")

  def _check_settings(self):
    """settings.json against this run's settings (checkpoint_files.check_settings)."""
    settings = {**checkpoint_files.SETTINGS_BEFORE_THEY_WERE_STORED, **self._settings}
    current = {k: settings.get(k) for k in SHAPE_SETTINGS}  # Every one compared.
    try:
      checkpoint_files.check_settings(self._logdir, current)
    except checkpoint_files.UnusableCheckpoint as error:
      raise CheckpointError(str(error)) from error.__cause__

  def restore(self, required=False, restore_from="", make_newest=True):
    """Restores the newest checkpoint, or the one named `restore_from`, if any.

    Args:
      required: raise when there is none (test mode).
      restore_from: the name of a checkpoint in the directory (--restore_checkpoint, e.g.
        "ckpt-80000"); empty: the newest. It becomes the newest: the state file is rewritten
        and newer checkpoints are moved to set_aside/ (listed in `set_aside`), so that later
        saves never meet them.
      make_newest: False: restore_from is only read, the directory is left as it is (a
        reader that never saves: policy.load_policy).

    Returns:
      The restored checkpoint's path, or None when there was none (a fresh start).

    Raises:
      CheckpointError: unreadable (naming the newest intact older checkpoint to pass as
        --restore_checkpoint), incompatible, or (required) missing checkpoint; an unknown
        restore_from.
    """
    self._check_settings()
    if restore_from:
      path = self._named(restore_from)
    else:
      state = checkpoint_files.read_state(self._directory)
      if state is None:
        if checkpoint_files.has_checkpoint_files(self._logdir):
          older = self._newest_intact()
          advice = (f" The newest intact checkpoint there is {older}: rerun with "
                    f"--restore_checkpoint={older} to resume from it." if older else "")
          raise CheckpointError(
              f"{self._directory} holds checkpoint files but no readable "
              f"'{checkpoint_files.STATE_FILE}' index file; not starting over it.{advice}")
        if required:
          raise CheckpointError(checkpoint_files.no_checkpoint_message(self._logdir))
        return None
      path = os.path.join(self._directory, state[0])
    corrupt, failure = self._restore(path)
    if failure is not None:
      raise self._restore_error(path, corrupt, failure)
    if restore_from and make_newest:
      self._make_newest(restore_from)
    self._directory_existed = True
    return path

  def _named(self, name):
    """The path of checkpoint `name` of this run's directory (a name, not a path)."""
    if name not in checkpoint_files.complete_checkpoints(self._directory):
      raise CheckpointError(checkpoint_files.unknown_checkpoint_message(self._logdir, name))
    return os.path.join(self._directory, name)

  def _restore(self, path):
    """(corrupt, failure): failure None when checkpoint `path` was restored; corrupt when
    its files cannot be read (as opposed to not matching the network)."""
    if not os.path.exists(path + ".index"):
      return True, f"its {os.path.basename(path)}.index file is missing"
    failure = None
    with _without_unrestored_value_warnings():
      try:
        _read_every_value(path)  # A corrupt file fails here, before restore() starts.
      except (tf.errors.OpError, ValueError) as error:
        return True, f"{type(error).__name__}: {error}"
      status = None
      try:
        status = self._checkpoint.restore(path)
        status.assert_existing_objects_matched()
        # Every object of the run got its values; what else the checkpoint holds (an older
        # agent's agent/_sampler) stays unread, without a warning when the run ends.
        status.expect_partial()
      except (tf.errors.OpError, ValueError, AssertionError, IndexError) as error:
        failure = f"{type(error).__name__}: {error}"
        if status is not None:
          status.expect_partial()
      # The failed restore's bookkeeping, freed now that the error (and its frames) is gone.
      status = None
      gc.collect()
    return False, failure

  def _restore_error(self, path, corrupt, failure):
    if not corrupt:
      return CheckpointError(
          f"Cannot restore checkpoint {path}: {failure}\n"
          f"The checkpoint comes from a different network. Rerun with the settings it was "
          f"trained with ({checkpoint_files.settings_path(self._logdir)}), or point --logdir "
          f"elsewhere.")
    name = os.path.basename(path)
    older = self._newest_intact(before=checkpoint_files.checkpoint_number(name))
    if older is None:
      advice = (f"No older checkpoint in {self._directory} is intact: move it away to start "
                f"over, or point --logdir elsewhere.")
    else:
      advice = (f"The newest intact older checkpoint is {older} "
                f"({checkpoint_files.checkpoint_number(older):,} frames): rerun with "
                f"--restore_checkpoint={older} to resume from it (the newer ones are then moved "
                f"to {checkpoint_files.set_aside_dir(self._logdir)}, not deleted).")
    return CheckpointError(f"Cannot restore checkpoint {path}: {failure}\n"
                           f"Its files are corrupt or incomplete. {advice}")

  def _newest_intact(self, before=None):
    """The name of the newest checkpoint (with fewer frames than `before`) whose every tensor
    reads back, or None."""
    for name in reversed(checkpoint_files.complete_checkpoints(self._directory)):
      if before is None or checkpoint_files.checkpoint_number(name) < before:
        if _intact(os.path.join(self._directory, name)):
          return name
    return None

  def _make_newest(self, name):
    """Makes the restored checkpoint `name` the newest: the state file names it first, then
    the newer ones move to set_aside/ (a kill between leaves them unlisted, and the next start
    sets them aside)."""
    number = checkpoint_files.checkpoint_number(name)
    try:
      with checkpoint_files.locked(self._directory):
        state = checkpoint_files.read_state(self._directory)
        older = [n for n in (state[1] if state else ())
                 if (checkpoint_files.checkpoint_number(n) or 0) < number
                 and os.path.exists(os.path.join(self._directory, n + ".index"))]
        if state is None or state[1] != older + [name]:
          checkpoint_files.write_state(self._directory, older + [name])
        for newer in checkpoint_files.complete_checkpoints(self._directory):
          if checkpoint_files.checkpoint_number(newer) > number:
            self.set_aside.append(checkpoint_files.set_aside(self._logdir, newer))
    except OSError as error:
      raise CheckpointError(f"Restored {name}, but cannot make it the newest checkpoint in "
                            f"{self._directory}: {error}") from error

  def _kept(self):
    """What a failed save leaves: the newest complete checkpoint, in words."""
    try:
      state = checkpoint_files.read_state(self._directory)
    except OSError:
      state = None
    if state is not None and os.path.exists(os.path.join(self._directory, state[0] + ".index")):
      frames = checkpoint_files.checkpoint_number(state[0])
      return (f"the newest complete checkpoint is still "
              f"{os.path.join(self._directory, state[0])} at {frames or 0:,} frames")
    if state is None and not self._directory_existed:
      return "no checkpoint was written yet"
    return f"no complete checkpoint is left in {self._directory}"

  def _check_finite(self, path):
    """Raises NonFiniteState when a floating-point variable to save holds NaN or Inf."""
    variables = [v for v in tf.train.TrackableView(self._checkpoint).descendants()
                 if isinstance(v, tf.Variable) and v.dtype.is_floating]
    bad = [v for v in variables if not bool(tf.reduce_all(tf.math.is_finite(v)))]
    if bad:
      names = ", ".join(v.name for v in bad[:3]) + (", ..." if len(bad) > 3 else "")
      raise NonFiniteState(
          f"Not saving checkpoint {path}: {len(bad)} of {len(variables)} floating-point "
          f"variables hold NaN or Inf ({names}). Nothing was written; {self._kept()}.")

  def save(self, step):
    """Writes checkpoint ckpt-<step> (and the settings file) and makes it the newest; returns
    its path.

    No kill, power loss or failed write at any moment leaves the run without a restorable
    checkpoint: the new one is written in a temporary directory inside the checkpoint
    directory, synced and read back whole; its data files, then its .index, are moved into
    place; only then does the state file (replaced atomically) name it the newest, and only
    then are checkpoints beyond MAX_TO_KEEP deleted. Until that moment the previous newest is
    untouched, and no save ever writes over an existing checkpoint's files.

    A save at the frames of the newest checkpoint, intact, writes nothing and returns its path:
    checkpoints are numbered by frames, which grow with every update (see _save).

    Raises:
      NonFiniteState: a floating-point variable holds NaN or Inf (nothing written).
      CheckpointSaveError: an OSError (or TensorFlow's error for one) stopped the save; its
        temporary files are removed and the previous newest checkpoint stays the newest.
    """
    name = f"{checkpoint_files.PREFIX}-{int(step)}"
    path = os.path.join(self._directory, name)
    self._check_finite(path)
    try:
      if not os.path.isdir(self._directory):
        if self._directory_existed:
          raise FileNotFoundError(errno.ENOENT, "The checkpoint directory was deleted",
                                  self._directory)
        os.makedirs(self._directory)
      self._directory_existed = True
      with checkpoint_files.locked(self._directory):
        self._save(name, path)
    except (OSError, tf.errors.OpError) as error:
      raise CheckpointSaveError(f"Cannot save checkpoint {path}: {_describe(error)}. "
                                f"Nothing of it was kept; {self._kept()}.") from error
    return path

  def _save(self, name, path):
    """save's work, under the directory's lock."""
    directory = self._directory
    settings_path = checkpoint_files.settings_path(self._logdir)
    if not os.path.exists(settings_path):
      checkpoint_files.write_atomically(
          settings_path, json.dumps(self._settings, indent=2, sort_keys=True))
    state = checkpoint_files.read_state(directory)
    names = [n for n in (state[1] if state else ())
             if n != name and os.path.exists(os.path.join(directory, n + ".index"))]
    if os.path.exists(path + ".index"):
      if state is not None and state[0] == name and _intact(path):
        # The newest checkpoint has these frames: the frame count grows with every update,
        # so no update happened since it was written and it holds this state already (the
        # flags' hyperparameters are applied again at every start). Writing it again would
        # only put the run's newest checkpoint at risk.
        return
      # Not the newest, or corrupt: out of the way, never written over.
      self.set_aside.append(checkpoint_files.set_aside(self._logdir, name))
    # As tf.train.CheckpointManager did: checkpoints hold the same variables as before.
    self._checkpoint.save_counter.assign_add(1)
    temp_dir = os.path.join(directory, checkpoint_files.saving_dir_name(name))
    os.mkdir(temp_dir)
    placed = []  # Files moved into the directory: removed unless the checkpoint became newest.
    newest = False
    try:
      self._checkpoint.write(os.path.join(temp_dir, name))
      files = sorted(f for f in os.listdir(temp_dir) if f.startswith(name + "."))
      for file_name in files:
        checkpoint_files.sync_file(os.path.join(temp_dir, file_name))
      checkpoint_files.sync_directory(temp_dir)
      _read_every_value(os.path.join(temp_dir, name))  # What a restore reads, before it counts.
      _pause("written", path)
      index = name + ".index"
      for file_name in [f for f in files if f != index] + [index]:
        os.replace(os.path.join(temp_dir, file_name), os.path.join(directory, file_name))
        placed.append(file_name)
        # Data files before the .index, even after a power loss: an .index means complete.
        checkpoint_files.sync_directory(directory)
        _pause("data_moved" if file_name != index else "index_moved", path)
      checkpoint_files.write_state(directory, (names + [name])[-checkpoint_files.MAX_TO_KEEP:])
      newest = True
    finally:
      if not newest:
        with contextlib.suppress(OSError):  # The state file was replaced, then a sync failed.
          newest = (checkpoint_files.read_state(directory) or ("",))[0] == name
      if not newest:
        for file_name in reversed(placed):  # The .index first: never one without its data.
          with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, file_name))
      shutil.rmtree(temp_dir, ignore_errors=True)
    _pause("state_written", path)
    try:
      for old in names[:max(0, len(names) + 1 - checkpoint_files.MAX_TO_KEEP)]:
        checkpoint_files.remove_checkpoint(directory, old)
      checkpoint_files.sync_directory(directory)
    except OSError:
      pass  # The new checkpoint is the newest; the next start deletes these (clean_leftovers).
