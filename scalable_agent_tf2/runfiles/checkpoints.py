"""A run's checkpoints in <logdir>/checkpoints, tf.train.CheckpointManager's layout (the state
file `checkpoint` naming the newest ckpt-<frames>, numbered by the learner's frames; the others
kept), beside settings.json (compared on resume), policy_only.json (a policy-only folder) and
set_aside/ (checkpoints moved away, never deleted).

Each guarantee in one place. Kill-safety (Checkpointer.save, then clean_leftovers): a kill, a
power loss or a failed write at any moment leaves the newest complete checkpoint restorable.
Fallback (Checkpointer.restore): an unreadable checkpoint, or one of another network, is an
error saying what to do, never a silent fresh start; a corrupt newest one names the newest intact
older one. Policy-only folders (run_checkpointer): test mode plays them, training refuses them.
What the files alone show a restore refuses is said before TensorFlow loads (check_before_restore):
TensorFlow-free when imported (the population driver and the command line read files alone).
"""
import contextlib
import errno
import gc
import json
import os
import re
import shutil

from scalable_agent_tf2.runfiles import durable_files
from scalable_agent_tf2.utils import quiet_tensorflow

STATE_FILE, PREFIX = "checkpoint", "ckpt"  # tf.train.CheckpointManager's names.
SETTINGS_FILE, POLICY_ONLY_FILE = "settings.json", "policy_only.json"
# Checkpoints kept (the newest ones); a copy relies on the newest surviving a few more saves.
MAX_TO_KEEP = 5
# A save's temporary directory, beside the checkpoints (moving its files in is a rename).
SAVING_PREFIX = ".saving-"
_NAME = re.compile(rf"{PREFIX}-(\d+)")
# What fixes the checkpointed variables' shapes (the algorithm: which exist, IMPACT's target
# network; log_std: a layer's outputs or a vector): a resume cannot change them, the rest may.
SHAPE_SETTINGS = ("level_name", "torso", "width", "height", "algorithm", "popart", "log_std")
# Stored, never compared, for a policy loaded outside its run (policy.py; absent: the defaults):
# what else shapes a gymnasium level's network and environment, and a suite's levels left out.
POLICY_SETTINGS = ("env_kwargs", "value_torso", "sticky_actions", "num_action_repeats",
                   "excluded_levels")
TASKS_SETTING = "popart_tasks"  # Per-task PopArt's levels in their tasks' order (no flag).
COMPARED_SETTINGS = (*SHAPE_SETTINGS, TASKS_SETTING)
# What a settings file written before a setting was stored means by its absence.
SETTINGS_BEFORE_THEY_WERE_STORED = {"algorithm": "impala", "popart": False, TASKS_SETTING: None}
# A gymnasium level's Box-action head then: its algorithm's (IMPACT: the policy layer's second
# half; IMPALA: one free vector), whatever the gym family's presets say now.
LOG_STD_BEFORE_IT_WAS_STORED = {"impact": "state", "impala": "free"}
# Logged when a failed restore's bookkeeping is deleted: after our error, only noise.
_UNRESTORED_VALUES = ("Detecting that an object or model or tf.train.Checkpoint is being deleted "
                      "with unrestored values", "Value in checkpoint could not be found in the "
                      "restored object")


def popart_tasks(config):
  """Per-task PopArt's levels (--popart on a suite: config.levels), or None (one task)."""
  return list(config.levels) if config.popart and config.is_multi_task else None


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be used for this run, or cannot be written."""


class UnusableCheckpoint(CheckpointError, ValueError):
  """What the files alone show a restore refuses (a ValueError: exit 2, as a bad setting)."""


class NonFiniteState(CheckpointError):
  """The state to save holds NaN or Inf: nothing was written, the newest checkpoint stays."""


class CheckpointSaveError(CheckpointError):
  """A save failed on an OSError (full disk, ...): nothing of it is left, the newest stays."""


def checkpoint_dir(logdir):
  return os.path.join(logdir, "checkpoints")


def _in_checkpoint_dir(name):
  return lambda logdir: os.path.join(checkpoint_dir(logdir), name)


settings_path = _in_checkpoint_dir(SETTINGS_FILE)  # callable(logdir) -> its settings.json.
set_aside_dir = _in_checkpoint_dir("set_aside")
policy_only_path = _in_checkpoint_dir(POLICY_ONLY_FILE)


def checkpoint_number(name):
  """The frames in a checkpoint's name ("ckpt-1200" -> 1200), or None for another name."""
  match = _NAME.fullmatch(name)
  return int(match.group(1)) if match else None


def read_state(directory):
  """(newest, names: all it lists, the newest last) from the state file, or None."""
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


def write_state(directory, names):
  """Makes names[-1] the newest checkpoint; the state file lists `names` (oldest first)."""
  durable_files.write_atomically(
      os.path.join(directory, STATE_FILE), f'model_checkpoint_path: "{names[-1]}"\n'
      + "".join(f'all_model_checkpoint_paths: "{name}"\n' for name in names))


def latest_checkpoint(logdir):
  """(name, frames) of the newest checkpoint by the state file ("ckpt-1200", 1200), or None."""
  state = read_state(checkpoint_dir(logdir))
  return state and (state[0], checkpoint_number(state[0]) or 0)


def _indexed(directory):
  """The checkpoints in `directory` with an .index (a save moves it in last), numbered or not."""
  try:
    return [name[:-len(".index")] for name in os.listdir(directory) if name.endswith(".index")]
  except (FileNotFoundError, NotADirectoryError):
    return []


def complete_checkpoints(directory):
  """The numbered checkpoints with an .index, fewest frames first."""
  numbered = (name for name in _indexed(directory) if checkpoint_number(name) is not None)
  return sorted(numbered, key=checkpoint_number)


def has_checkpoint_files(logdir):
  """Whether the checkpoint directory holds any checkpoint (an .index), readable or not."""
  return bool(_indexed(checkpoint_dir(logdir)))


def _files_of(directory, name):
  """Checkpoint `name`'s files: its data files, then its .index if there."""
  names = os.listdir(directory)
  return sorted(n for n in names if n.startswith(name + ".data-")) + [
      name + ".index"] * (name + ".index" in names)


def remove_checkpoint(directory, name):
  """Deletes checkpoint `name`, its .index first: never an .index without its data."""
  for file_name in reversed(_files_of(directory, name)):
    os.remove(os.path.join(directory, file_name))


def set_aside(logdir, name):
  """Moves checkpoint `name` into set_aside/ (as ckpt-N_1, ... if taken), its data first."""
  directory, target_dir = checkpoint_dir(logdir), set_aside_dir(logdir)
  os.makedirs(target_dir, exist_ok=True)
  target, number = name, 0
  while os.path.exists(os.path.join(target_dir, target + ".index")):
    number += 1
    target = f"{name}_{number}"
  for file_name in _files_of(directory, name):
    os.replace(os.path.join(directory, file_name),
               os.path.join(target_dir, target + file_name[len(name):]))
  durable_files.sync_directory(target_dir)
  durable_files.sync_directory(directory)
  return os.path.join(target_dir, target)


def saving_dir_name(name):
  """A save's temporary directory, naming its checkpoint (which clean_leftovers may adopt)."""
  return f"{SAVING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}.{name}"


def read_settings(logdir):
  """The stored settings (with what an absence means: SETTINGS_BEFORE_THEY_WERE_STORED,
  LOG_STD_BEFORE_IT_WAS_STORED), or None without a file."""
  path = settings_path(logdir)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      stored = {**SETTINGS_BEFORE_THEY_WERE_STORED, **json.load(f)}
  except (OSError, ValueError) as error:
    raise UnusableCheckpoint(f"Cannot read {path} ({error}). Fix or delete that file.") from error
  head = LOG_STD_BEFORE_IT_WAS_STORED.get(stored["algorithm"])  # Another: compared, refused.
  if head and "action_size" in stored and str(stored.get("level_name")).startswith("gym:"):
    stored.setdefault("log_std", head)
  return stored


def no_checkpoint_message(logdir):
  return f"No checkpoint in {checkpoint_dir(logdir)}: train first (--mode=train --logdir={logdir})."


def unknown_checkpoint_message(logdir, name):
  return (f"--restore_checkpoint={name}: no such checkpoint in {checkpoint_dir(logdir)} (give "
          f"the name of one there); available: "
          f"{', '.join(complete_checkpoints(checkpoint_dir(logdir))) or 'none'}.")


def check_before_restore(logdir, current, required=False, restore_from=""):
  """Raises UnusableCheckpoint for what restore refuses that the files alone show, in order:
  stored settings other than `current` on a COMPARED_SETTINGS both name (`current` may lack
  one not known yet), a --restore_checkpoint not there, none where one is `required`."""
  stored = read_settings(logdir) or {}
  current = {**SETTINGS_BEFORE_THEY_WERE_STORED, **current}
  named = lambda k: "per-task PopArt's levels" if k == TASKS_SETTING else f"--{k}"
  different = [f"{named(k)}: checkpoint {stored[k]!r}, now {current[k]!r}"
               for k in COMPARED_SETTINGS
               if k in stored and k in current and stored[k] != current[k]]
  if different:
    raise UnusableCheckpoint(
        f"The checkpoint in {checkpoint_dir(logdir)} was trained with different settings "
        f"({', '.join(different)}). Rerun with the checkpoint's values, or use another --logdir.")
  if restore_from and restore_from not in complete_checkpoints(checkpoint_dir(logdir)):
    raise UnusableCheckpoint(unknown_checkpoint_message(logdir, restore_from))
  elif (required and read_state(checkpoint_dir(logdir)) is None
        and not has_checkpoint_files(logdir)):
    raise UnusableCheckpoint(no_checkpoint_message(logdir))


def clean_leftovers(logdir):
  """Tidies what saves cut short left, unless another process holds the lock (it is saving);
  returns (deleted, set aside, adopted). A save killed before naming its checkpoint left a
  temporary directory naming it: newer than every other, it is the save's own (read back whole):
  adopted as the newest. Temporary files and data files without an .index go. Unlisted ones are
  set aside (someone's), but those older than every listed one while the list is full (the run
  deletes them after the state file) go. No state file: nothing complete."""
  directory = checkpoint_dir(logdir)
  removed, moved, adopted = [], [], []
  if not os.path.isdir(directory):
    return removed, moved, adopted
  with durable_files.locked(directory, wait=False) as held:
    names = sorted(os.listdir(directory)) if held else []
    state, complete = read_state(directory), complete_checkpoints(directory)
    for name in names:
      saving = name[len(SAVING_PREFIX):].partition(".")[2] * name.startswith(SAVING_PREFIX)
      if (saving and complete and saving == complete[-1]
          and (saving not in state[1] if state else complete == [saving])):
        write_state(directory, ((state[1] if state else []) + [saving])[-MAX_TO_KEEP:])
        adopted.append(saving)
        state = read_state(directory)
    for name in (n for n in names if _is_leftover(directory, n, names)):
      path = os.path.join(directory, name)
      shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
      removed.append(name)
    listed = state[1] if held and state else []
    oldest = min((n for n in map(checkpoint_number, listed) if n is not None), default=None)
    for name in (n for n in complete_checkpoints(directory) if listed and n not in listed):
      if len(listed) >= MAX_TO_KEEP and oldest is not None and checkpoint_number(name) < oldest:
        remove_checkpoint(directory, name)
        removed.append(name)
      else:
        moved.append(set_aside(logdir, name))
    if removed:
      durable_files.sync_directory(directory)
  return removed, moved, adopted


def _is_leftover(directory, name, names):
  """Whether file or directory `name` is what an interrupted save left behind."""
  if os.path.isdir(os.path.join(directory, name)):  # Ours; TensorFlow's shards (ckpt-N_temp/).
    return name.startswith(SAVING_PREFIX) or (name.startswith(PREFIX + "-") and "_temp" in name)
  if name.startswith(tuple(f + durable_files.TEMP_SUFFIX for f in (STATE_FILE, SETTINGS_FILE))):
    return True
  return name.startswith(PREFIX + "-") and (".tempstate" in name or (  # TensorFlow's writer's.
      ".data-" in name and name.split(".data-")[0] + ".index" not in names))


def _tf():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf


def _unreadable(path):
  """Why checkpoint `path` cannot be read, or None: every tensor reads back (before a restore)."""
  if not os.path.exists(path + ".index"):
    return f"its {os.path.basename(path)}.index file is missing"
  try:
    reader = _tf().train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (_tf().errors.OpError, ValueError) as error:
    return f"{type(error).__name__}: {error}"
  return None


class Checkpointer:
  """Saves and restores one run's state; creating one tidies what saves cut short left.
  set_aside: the checkpoints it moved to set_aside/ (unlisted, newer than a restore_from)."""

  def __init__(self, logdir, settings, **trackables):
    """settings: the run's (JSON, stored; compared at restore); trackables: agent=..., ..."""
    self._logdir, self._settings = logdir, settings
    self._directory = checkpoint_dir(logdir)
    self._checkpoint = _tf().train.Checkpoint(**trackables)
    # One that existed (or a save made) and is gone was deleted: a save says so, hides nothing.
    self._directory_existed = os.path.isdir(self._directory)
    self.removed, self.set_aside, self.adopted = [], [], []
    with contextlib.suppress(OSError):  # A read-only logdir (testing a copied run).
      self.removed, self.set_aside, self.adopted = clean_leftovers(logdir)

  @property
  def latest(self):  # The newest checkpoint's path prefix (by the state file), or None.
    latest = latest_checkpoint(self._logdir)
    return latest and os.path.join(self._directory, latest[0])

  def set_aside_note(self):
    """A line naming the checkpoints in set_aside, for the caller to print; None if none."""
    return self.set_aside and (f"Set aside (not deleted) in {set_aside_dir(self._logdir)}: "
                               + ", ".join(map(os.path.basename, self.set_aside)) + ".") or None

  def restore(self, required=False, restore_from="", make_newest=True):
    """Restores the newest checkpoint, or `restore_from` (--restore_checkpoint) made the newest
    (newer ones set aside) unless make_newest=False (policy.py); returns its path or None (a fresh
    start). CheckpointError: unreadable, of another network, or check_before_restore's refusal."""
    settings = {**SETTINGS_BEFORE_THEY_WERE_STORED, **self._settings}
    check_before_restore(self._logdir, {k: settings.get(k) for k in COMPARED_SETTINGS},
                         required, restore_from)
    state = read_state(self._directory)
    if not restore_from and state is None:
      if not has_checkpoint_files(self._logdir):
        return None
      older = self._newest_intact()
      advice = (f" The newest intact checkpoint there is {older}: rerun with "
                f"--restore_checkpoint={older} to resume from it." if older else "")
      raise CheckpointError(f"{self._directory} holds checkpoint files but no readable "
                            f"'{STATE_FILE}' index file; not starting over it.{advice}")
    path = os.path.join(self._directory, restore_from or state[0])
    with quiet_tensorflow.without_log_messages(_tf(), _UNRESTORED_VALUES):
      failure = self._restore(path)
    if failure is not None:
      raise CheckpointError(f"Cannot restore checkpoint {path}: {failure}")
    if restore_from and make_newest:
      self._make_newest(restore_from)
    self._directory_existed = True
    return path

  def _restore(self, path):
    """None when checkpoint `path` was restored, else what is wrong and what to do."""
    unreadable = _unreadable(path)
    if unreadable is not None:
      older = self._newest_intact(before=checkpoint_number(os.path.basename(path)))
      advice = (f"No older checkpoint in {self._directory} is intact: move it away to start "
                f"over, or point --logdir elsewhere." if older is None else
                f"The newest intact older checkpoint is {older} ({checkpoint_number(older):,} "
                f"frames): rerun with --restore_checkpoint={older} to resume from it (the newer "
                f"ones are then moved to {set_aside_dir(self._logdir)}, not deleted).")
      return f"{unreadable}\nIts files are corrupt or incomplete. {advice}"
    tf, failure, status = _tf(), None, None
    try:
      status = self._checkpoint.restore(path)
      status.assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, AssertionError, IndexError) as error:
      failure = (f"{type(error).__name__}: {error}\nThe checkpoint comes from a different "
                 f"network. Rerun with the settings it was trained with "
                 f"({settings_path(self._logdir)}), or point --logdir elsewhere.")
    if status is not None:  # What else it holds (an old agent's _sampler) stays unread.
      status.expect_partial()
    # The failed restore's bookkeeping, freed now that the error (and its frames) is gone.
    status = None
    gc.collect()
    return failure

  def _newest_intact(self, before=None):
    """The newest checkpoint (with fewer frames than `before`) whose every tensor reads back."""
    return next((name for name in reversed(complete_checkpoints(self._directory))
                 if (before is None or checkpoint_number(name) < before)
                 and _unreadable(os.path.join(self._directory, name)) is None), None)

  def _make_newest(self, name):
    """Names restored `name` the newest, then sets newer ones aside (or the next start will)."""
    number = checkpoint_number(name)
    try:
      with durable_files.locked(self._directory):
        state = read_state(self._directory)
        older = [n for n in (state[1] if state else ()) if (checkpoint_number(n) or 0) < number
                 and os.path.exists(os.path.join(self._directory, n + ".index"))]
        if state is None or state[1] != older + [name]:
          write_state(self._directory, older + [name])
        self.set_aside += [set_aside(self._logdir, newer)
                           for newer in complete_checkpoints(self._directory)
                           if checkpoint_number(newer) > number]
    except OSError as error:
      raise CheckpointError(f"Restored {name}, but cannot make it the newest checkpoint in "
                            f"{self._directory}: {error}") from error

  def _kept(self):
    """What a failed save leaves: the newest complete checkpoint, in words."""
    with contextlib.suppress(OSError):
      latest = latest_checkpoint(self._logdir)
      if latest and os.path.exists(os.path.join(self._directory, latest[0] + ".index")):
        return f"the newest complete checkpoint is still {self.latest} at {latest[1]:,} frames"
      if latest is None and not self._directory_existed:
        return "no checkpoint was written yet"
    return f"no complete checkpoint is left in {self._directory}"

  def save(self, step):
    """Writes ckpt-<step> (and the settings file) as the newest; returns its path. No kill, power
    loss or failed write leaves no restorable checkpoint: written in a temporary directory, synced,
    read back whole; data files, then the .index, move in; the state file (replaced atomically)
    names it; those beyond MAX_TO_KEEP go. Nothing is written over, nor at the newest intact
    one's frames. NonFiniteState: NaN or Inf; CheckpointSaveError: an OSError (the newest stays)."""
    tf, name = _tf(), f"{PREFIX}-{int(step)}"
    path = os.path.join(self._directory, name)
    variables = [v for v in tf.train.TrackableView(self._checkpoint).descendants()
                 if isinstance(v, tf.Variable) and v.dtype.is_floating]
    bad = [v.name for v in variables if not bool(tf.reduce_all(tf.math.is_finite(v)))]
    if bad:
      raise NonFiniteState(
          f"Not saving checkpoint {path}: {len(bad)} of {len(variables)} floating-point "
          f"variables hold NaN or Inf ({', '.join(bad[:3])}{', ...' * (len(bad) > 3)}). "
          f"Nothing was written; {self._kept()}.")
    try:
      if not os.path.isdir(self._directory) and self._directory_existed:
        raise FileNotFoundError(errno.ENOENT, "The checkpoint directory was deleted",
                                self._directory)
      os.makedirs(self._directory, exist_ok=True)
      self._directory_existed = True
      with durable_files.locked(self._directory):
        self._save(name, path)
    except (OSError, tf.errors.OpError) as error:
      described = (f"{type(error).__name__}: " + re.sub(  # Without the op's internal names.
          r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "", error.message)
                   if isinstance(error, tf.errors.OpError) else str(error))
      raise CheckpointSaveError(f"Cannot save checkpoint {path}: {described}. Nothing of it "
                                f"was kept; {self._kept()}.") from error
    return path

  def _save(self, name, path):
    """save's work, under the directory's lock."""
    directory = self._directory
    if not os.path.exists(settings_path(self._logdir)):
      durable_files.write_atomically(settings_path(self._logdir),
                                     json.dumps(self._settings, indent=2, sort_keys=True))
    state = read_state(directory)
    names = [n for n in (state[1] if state else ())
             if n != name and os.path.exists(os.path.join(directory, n + ".index"))]
    if os.path.exists(path + ".index"):
      if state is not None and state[0] == name and _unreadable(path) is None:
        return  # The newest, intact, at these frames: writing it again would only risk it.
      self.set_aside.append(set_aside(self._logdir, name))  # Never written over.
    self._checkpoint.save_counter.assign_add(1)  # As tf.train.CheckpointManager's saves do.
    temp_dir = os.path.join(directory, saving_dir_name(name))
    os.mkdir(temp_dir)
    placed, newest = [], False  # Files moved in: removed unless it became the newest.
    try:
      self._checkpoint.write(os.path.join(temp_dir, name))
      files = sorted(f for f in os.listdir(temp_dir) if f.startswith(name + "."))
      for file_name in files:
        durable_files.sync_file(os.path.join(temp_dir, file_name))
      durable_files.sync_directory(temp_dir)
      unreadable = _unreadable(os.path.join(temp_dir, name))  # As a restore reads it.
      if unreadable is not None:
        raise OSError(errno.EIO, f"what was written does not read back ({unreadable})")
      for file_name in sorted(files, key=lambda f: f == name + ".index"):  # The .index last.
        os.replace(os.path.join(temp_dir, file_name), os.path.join(directory, file_name))
        placed.append(file_name)
        # Data files before the .index, even after a power loss: an .index means complete.
        durable_files.sync_directory(directory)
      write_state(directory, (names + [name])[-MAX_TO_KEEP:])
      newest = True
    finally:
      with contextlib.suppress(OSError):  # The state file was replaced, then a sync failed.
        newest = newest or (read_state(directory) or ("",))[0] == name
      for file_name in reversed(placed if not newest else []):  # The .index first.
        with contextlib.suppress(OSError):
          os.remove(os.path.join(directory, file_name))
      shutil.rmtree(temp_dir, ignore_errors=True)
    with contextlib.suppress(OSError):  # Else the next start deletes them (clean_leftovers).
      for old in names[:max(0, len(names) + 1 - MAX_TO_KEEP)]:
        remove_checkpoint(directory, old)
      durable_files.sync_directory(directory)


def policy_trackables(agent, num_env_frames):
  """A policy-only checkpoint's: the agent, and the learner's frame count alone (its names)."""
  learner = _tf().Module(name="learner")
  learner.num_env_frames = num_env_frames
  return dict(agent=agent, learner=learner)


def run_checkpointer(logdir, settings, agent, learner, test_mode):
  """The Checkpointer of a run's agent and learner (optimizer slots, frame count; IMPACT's target
  network). A policy-only folder (policy_only.json, run/export_policy.py) refuses training."""
  if not os.path.exists(policy_only_path(logdir)):
    return Checkpointer(logdir, settings, agent=agent, learner=learner)
  if not test_mode:
    raise CheckpointError(
        f"{logdir} holds a policy only (exported for test mode: {POLICY_ONLY_FILE}), no "
        f"optimizer state to train on. Test it with --mode=test, or train in another --logdir.")
  return Checkpointer(logdir, settings, **policy_trackables(agent, learner.num_env_frames))
