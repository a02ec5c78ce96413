"""A run that cannot go on stops with one error naming what happened and the checkpoint kept:
a checkpoint that cannot be written (a full disk), parameters gone non-finite, a dead thread of
the learner's (issue 30, points 2, 4 and 6)."""
import os

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.transport import learner_service
from tests.run.test_training import toy_config
from tests.run.test_training import train_toy
from tests.transport import test_distributed as td


@pytest.mark.timeout(240)
def test_a_checkpoint_that_cannot_be_written_stops_the_run_and_keeps_the_last_one(
    tmp_path, monkeypatch):
  saves = []
  real_save = checkpoints.Checkpointer.save

  def full_after_the_first(self, step):
    saves.append(step)
    if len(saves) == 1:
      return real_save(self, step)
    raise checkpoints.CheckpointSaveError(
        f"Cannot save checkpoint {self._directory}/ckpt-{step}: [Errno 28] No space left on "
        f"device. Nothing of it was kept; the newest complete checkpoint is still "
        f"{self.latest}.")
  monkeypatch.setattr(checkpoints.Checkpointer, "save", full_after_the_first)
  lines = []
  with pytest.raises(training.RunFailed) as raised:
    train_toy(toy_config(tmp_path, total_frames=10_000_000, checkpoint_secs=2.0), lines=lines)
  message = str(raised.value)
  first = os.path.join(checkpoints.checkpoint_dir(str(tmp_path)), f"ckpt-{saves[0]}")
  assert "No space left on device" in message and f"still {first}" in message
  assert f"the checkpoint {first} holds its last good state" in message
  assert checkpoints.latest_checkpoint(str(tmp_path))[0] == f"ckpt-{saves[0]}"
  assert any(line.startswith("Stopped: Cannot save checkpoint") for line in lines), lines


@pytest.mark.timeout(240)
def test_non_finite_parameters_are_never_checkpointed_and_stop_the_run(tmp_path, monkeypatch):
  """Parameters that turned non-finite without a non-finite loss (written by hand here) are
  refused at the next checkpoint: the run stops, the newest checkpoint stays finite."""
  real_save = checkpoints.Checkpointer.save
  poisoned = []

  def poison_then_save(self, step):
    if poisoned:  # Every save after the first finds a NaN parameter.
      variable = self._checkpoint.agent.trainable_variables[0]
      variable.assign(tf.fill(variable.shape, np.nan))
    poisoned.append(step)
    return real_save(self, step)
  monkeypatch.setattr(checkpoints.Checkpointer, "save", poison_then_save)
  with pytest.raises(training.RunFailed, match=r"hold NaN or Inf.*Nothing was written"):
    train_toy(toy_config(tmp_path, total_frames=10_000_000, checkpoint_secs=2.0))
  prefix, _ = checkpoints.latest_checkpoint(str(tmp_path))
  reader = tf.train.load_checkpoint(os.path.join(checkpoints.checkpoint_dir(
      str(tmp_path)), prefix))
  for name in reader.get_variable_to_shape_map():
    value = np.asarray(reader.get_tensor(name))
    assert value.dtype.kind != "f" or np.isfinite(value).all(), name


@pytest.mark.timeout(240)
def test_a_dead_pump_stops_a_cluster_learner_with_an_error_after_its_checkpoint(
    tmp_path, monkeypatch):
  def dequeue(self):
    raise MemoryError("no memory for the next message")
  monkeypatch.setattr(learner_service.TrajectoryServer, "dequeue", dequeue)
  config = toy_config(tmp_path, total_frames=10_000_000, unroll_length=td.UNROLL_LENGTH)
  lines = []
  with pytest.raises(training.RunFailed,
                     match=r"trajectory-pump thread died: MemoryError: no memory"):
    training.train(config, print_fn=lines.append,
                   listen_address=f"localhost:{td.free_port()}")
  assert checkpoints.latest_checkpoint(str(tmp_path)) is not None  # Written at the stop.


@pytest.mark.timeout(240)
def test_a_logdir_deleted_mid_run_is_not_named_as_holding_a_checkpoint(tmp_path, monkeypatch):
  """Issue 41, item 7: the message named a checkpoint that no longer existed."""
  import shutil  # pylint: disable=g-import-not-at-top
  real_save = checkpoints.Checkpointer.save
  saves = []

  def delete_the_logdir_after_the_first(self, step):
    saves.append(step)
    if len(saves) == 2:
      # The run's other writers (summaries, the metrics file) may add a file
      # while the tree is removed ("Directory not empty"): remove until gone.
      for _ in range(100):
        shutil.rmtree(tmp_path, ignore_errors=True)
        if not tmp_path.exists():
          break
      assert not tmp_path.exists(), f"could not delete {tmp_path}"
    return real_save(self, step)
  monkeypatch.setattr(checkpoints.Checkpointer, "save", delete_the_logdir_after_the_first)
  lines = []
  with pytest.raises(training.RunFailed) as raised:
    train_toy(toy_config(tmp_path, total_frames=10_000_000, checkpoint_secs=2.0), lines=lines)
  message = str(raised.value)
  first = os.path.join(checkpoints.checkpoint_dir(str(tmp_path)), f"ckpt-{saves[0]}")
  assert "holds its last good state" not in message and "still " + first not in message
  assert f"its last checkpoint, {first}, no longer exists" in message, message
  stopped = [line for line in lines if line.startswith("Stopped:")]
  assert stopped and "kept as the newest" not in stopped[0], stopped
