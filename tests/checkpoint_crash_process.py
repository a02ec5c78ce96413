"""Processes that checkpoint until killed, for test_checkpoint_safety.py's crash tests (run
from the repository root, unbuffered: python -u -m tests.checkpoint_crash_process MODE LOGDIR).

MODE saver: restores the newest checkpoint with checkpoints.Checkpointer, checks that every
  value is the one saved at its frames and prints "restored <frames>", then saves without end,
  three times at each frame count (a run that has not trained since its last checkpoint saves
  under the same name), printing "saving <frames>" before each save and "saved <frames>"
  after. A failed restore prints
  "error: ..." and exits 1. The environment variable CHECKPOINTS_PY names another
  checkpoints.py to run instead (the code before issue 30, to show that it fails).
MODE train: a toy training (tests/run/test_training.py's) that checkpoints every 0.5 s; the
  console's start banner says where it resumes from, "Checkpoint <path>" each save.
With SAVE_PAUSE_VARIABLE=<phase>:<seconds>, in either mode, every save prints "checkpoint save
paused at <phase>: <path>" and sleeps there, for a kill at that moment (_pause_saves).

Everything is imported under __main__: the toy's environment processes start by "spawn" and
re-import this module, and must not import TensorFlow.
"""
import os
import sys

# Like a network's variables and their optimizer slots: many tensors (a long index file to
# merge and write, where TensorFlow's own saves were open to a kill), a few MiB in all.
VARIABLES = int(os.environ.get("CRASH_VARIABLES", "100"))
VALUES = 8192
SAVE_PAUSE_VARIABLE = "SCALABLE_AGENT_SAVE_PAUSE"
# The moments of a save (runfiles/checkpoints.py, Checkpointer._save), in order: written,
# synced and read back in its temporary directory; a data file moved in; its .index moved in;
# the state file naming it replaced.
SAVE_PHASES = ("written", "data_moved", "index_moved", "state_written")


def _pause_saves():
  """A test double of os.replace, the call each phase of a save ends with, that pauses the
  save at the phase SAVE_PAUSE_VARIABLE names (nothing without it)."""
  wanted, _, seconds = os.environ.get(SAVE_PAUSE_VARIABLE, "").partition(":")
  if not wanted:
    return
  import time  # pylint: disable=import-outside-toplevel

  from scalable_agent_tf2.runfiles import checkpoints  # pylint: disable=import-outside-toplevel
  real_replace, started, moved_in = os.replace, set(), []

  def pause(phase, path):
    if phase == wanted:
      print(f"checkpoint save paused at {phase}: {path}", flush=True)
      time.sleep(float(seconds or 60))

  def replace(source, target, *args, **kwargs):
    source, target = os.fspath(source), os.fspath(target)
    saving_dir = os.path.dirname(source)
    from_a_save = os.path.basename(saving_dir).startswith(checkpoints.SAVING_PREFIX)
    path = os.path.splitext(target)[0]
    if from_a_save and saving_dir not in started:
      started.add(saving_dir)
      pause("written", path)
    real_replace(source, target, *args, **kwargs)
    if from_a_save and target.endswith(".index"):
      moved_in.append(path)
      pause("index_moved", path)
    elif from_a_save:
      pause("data_moved", path)
    elif os.path.basename(target) == checkpoints.STATE_FILE and moved_in:
      pause("state_written", moved_in.pop())
  os.replace = replace


def _checkpoints_module():
  path = os.environ.get("CHECKPOINTS_PY")
  if not path:
    from scalable_agent_tf2.runfiles import checkpoints  # pylint: disable=import-outside-toplevel
    return checkpoints
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location("checkpoints_under_test", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def saver(logdir):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  checkpoints = _checkpoints_module()
  frames = tf.Variable(0, dtype=tf.int64)
  values = [tf.Variable(tf.zeros([VALUES])) for _ in range(VARIABLES)]
  checkpointer = checkpoints.Checkpointer(logdir, {"torso": "shallow"}, frames=frames,
                                          values=values)
  try:
    checkpointer.restore()
  except checkpoints.CheckpointError as error:
    print(f"error: {error}", flush=True)
    sys.exit(1)
  start = int(frames.numpy())
  if not all(bool(tf.reduce_all(v == float(start))) for v in values):
    print(f"error: the values restored at {start} frames are not the ones saved", flush=True)
    sys.exit(1)
  print(f"restored {start}", flush=True)
  step = 0
  while True:
    if step % 3 == 0:
      frames.assign(start + 10 * (step // 3))
      for v in values:
        v.assign(tf.fill([VALUES], float(frames.numpy())))
    print(f"saving {int(frames.numpy())}", flush=True)
    checkpointer.save(int(frames.numpy()))
    print(f"saved {int(frames.numpy())}", flush=True)
    step += 1


def train(logdir):
  from tests.run.test_training import toy_config  # pylint: disable=import-outside-toplevel
  from tests.run.test_training import train_toy  # pylint: disable=import-outside-toplevel
  train_toy(toy_config(logdir, total_frames=100_000_000, num_actors=2, log_secs=1.0,
                       checkpoint_secs=0.5))


if __name__ == "__main__":
  _pause_saves()
  {"saver": saver, "train": train}[sys.argv[1]](sys.argv[2])
