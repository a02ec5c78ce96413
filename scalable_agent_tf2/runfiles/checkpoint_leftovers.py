"""What a save cut short leaves in a run's checkpoint directory, and how the next start tidies it.

A kill at any moment leaves a restorable checkpoint (checkpoint_files.py: a save
writes in a temporary directory, moves the files in, the .index last, then names the checkpoint
in the state file). What a kill can leave besides is tidied here when the run starts again
(checkpoints.Checkpointer): temporary files and directories, data files without an .index, and
complete checkpoints the state file does not name: the one a save moved in but was killed
before naming is adopted, others are set aside, never deleted unless the run itself would have.
TensorFlow-free, like checkpoint_files.py.
"""
import os
import shutil

from scalable_agent_tf2.runfiles import checkpoint_files


def is_leftover(directory, name, names):
  """Whether file or directory `name` is what an interrupted save left behind."""
  prefix = checkpoint_files.PREFIX + "-"
  if os.path.isdir(os.path.join(directory, name)):
    # Ours, and TensorFlow's shards before it merges them (ckpt-N_temp/).
    return name.startswith(checkpoint_files.SAVING_PREFIX) or (name.startswith(prefix)
                                                               and "_temp" in name)
  if name.startswith((checkpoint_files.STATE_FILE + checkpoint_files.TEMP_SUFFIX,
                      checkpoint_files.SETTINGS_FILE + checkpoint_files.TEMP_SUFFIX)):
    return True
  if name.startswith(prefix) and ".tempstate" in name:  # TensorFlow's file writer's.
    return True
  return (name.startswith(prefix) and ".data-" in name
          and name.split(".data-")[0] + ".index" not in names)


def clean_leftovers(logdir):
  """Tidies a run's checkpoint directory after saves cut short (at the next start).

  A save killed after moving its checkpoint in but before naming it in the state file left
  its complete checkpoint and its temporary directory, which names it
  (checkpoint_files.saving_dir_name): that checkpoint is adopted, made the newest, when it is
  newer than every other. This is safe: the save read every tensor of it back and synced its files before moving them in, its .index
  last (an .index there before the save began would have been set aside or, as the newest, not
  saved again, so this one is the save's own).

  Then deletes temporary files and directories and data files without an .index (incomplete
  checkpoints). Moves other complete checkpoints that the state file does not list into
  set_aside/ (files someone put there): they might be someone's, so they are kept, out of the
  way of later saves. Only those older than every listed one while the list is full are
  deleted: the run itself deletes them (MAX_TO_KEEP) right after writing the state file, and a
  kill came between. Without a state file nothing complete is touched (Checkpointer.restore
  asks which to resume from).

  Does nothing while another process holds the directory's lock (it is saving: its
  temporary files are no leftovers).

  Returns:
    (names deleted, paths of the checkpoints moved to set_aside/, names adopted).
  """
  directory = checkpoint_files.checkpoint_dir(logdir)
  removed, moved, adopted = [], [], []
  if not os.path.isdir(directory):
    return removed, moved, adopted
  with checkpoint_files.locked(directory, wait=False) as held:
    if not held:
      return removed, moved, adopted
    names = os.listdir(directory)
    adopted = _adopt_unnamed(directory, names)
    for name in sorted(names):
      if is_leftover(directory, name, names):
        path = os.path.join(directory, name)
        if os.path.isdir(path):
          shutil.rmtree(path)
        else:
          os.remove(path)
        removed.append(name)
    state = checkpoint_files.read_state(directory)
    if state is not None:
      removed_unlisted, moved = _tidy_unlisted(logdir, directory, state[1])
      removed += removed_unlisted
    if removed:
      checkpoint_files.sync_directory(directory)
  return removed, moved, adopted


def _adopt_unnamed(directory, names):
  """Adopts the checkpoint a save moved in but was killed before naming in the state file (its
  temporary directory, among `names`, says which: checkpoint_files.saving_dir_name): names it
  there when it is the newest complete checkpoint (without a state file: the only one).
  Returns the names adopted."""
  adopted = []
  state = checkpoint_files.read_state(directory)
  complete = checkpoint_files.complete_checkpoints(directory)
  for name in sorted(names):
    saving = (name[len(checkpoint_files.SAVING_PREFIX):].partition(".")[2]
              if name.startswith(checkpoint_files.SAVING_PREFIX) else "")
    # The newest complete checkpoint, unlisted; without a state file, the only one.
    if (saving and complete and saving == complete[-1]
        and (saving not in state[1] if state else complete == [saving])):
      checkpoint_files.write_state(
          directory, ((state[1] if state else []) + [saving])[-checkpoint_files.MAX_TO_KEEP:])
      adopted.append(saving)
      state = checkpoint_files.read_state(directory)
  return adopted


def _tidy_unlisted(logdir, directory, listed):
  """The complete checkpoints the state file does not list (`listed`): deleted when older than
  every listed one while the list is full (the run deletes those itself, MAX_TO_KEEP), else
  moved to set_aside/. Returns (names deleted, paths set aside)."""
  removed, moved = [], []
  numbers = [checkpoint_files.checkpoint_number(name) for name in listed]
  oldest = min((n for n in numbers if n is not None), default=None)
  for name in checkpoint_files.complete_checkpoints(directory):
    if name in listed:
      continue
    if (len(listed) >= checkpoint_files.MAX_TO_KEEP and oldest is not None
        and checkpoint_files.checkpoint_number(name) < oldest):
      checkpoint_files.remove_checkpoint(directory, name)
      removed.append(name)
    else:
      moved.append(checkpoint_files.set_aside(logdir, name))
  return removed, moved
