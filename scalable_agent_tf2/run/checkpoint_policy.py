"""When a training run writes checkpoints, and what its newest one holds in the run's words.

The supervisor (supervisor.py) saves every --checkpoint_secs and once at the stop. A save never
sees half an update (the supervisor's update lock, held for the save), is never of diverged
parameters (their global norm over --max_parameter_norm, or every trajectory since the last one
trained on carrying non-finite behaviour outputs: the last healthy checkpoint stays the newest),
and there is no final one after a divergence or when levels failed before the first update
(`wants_final`). How a checkpoint is written and read is checkpoints.py's.
"""
import os

import tensorflow as tf

from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run.run_failures import Diverged
from scalable_agent_tf2.run.run_failures import ParametersDiverged
from scalable_agent_tf2.run.run_failures import RunFailed
from scalable_agent_tf2.runfiles import checkpoints


class CheckpointPolicy:
  """The run's saves. `last`: the path of its newest checkpoint (restored or written), or None.
  """

  def __init__(self, config, agent, checkpointer, update_lock, frames):
    """frames: callable() -> the learner's frame count (what a checkpoint is numbered by)."""
    self._config = config
    self._agent = agent
    self._checkpointer = checkpointer
    self._update_lock = update_lock
    self._frames = frames
    self.last = checkpointer.latest

  def save(self, watch):
    """Writes a checkpoint; None, or the failure (a RunFailed) that kept it from being written
    (the previous checkpoint stays the newest). watch: the run's progress_watch.ProgressWatch
    (None before the run starts)."""
    try:
      with self._update_lock:
        unhealthy = self._unhealthy(watch)
        if unhealthy is not None:
          return ParametersDiverged(
              f"Not saving a checkpoint: {unhealthy}. Lower --learning_rate (or set "
              f"--max_grad_norm), then {self.resume_advice()}.")
        self.last = self._checkpointer.save(self._frames())
      return None
    except checkpoints.CheckpointError as error:  # Non-finite parameters, a full disk, ...
      return RunFailed(str(error))

  def _unhealthy(self, watch):
    """None when the parameters may be checkpointed, else why not (a sentence)."""
    norm = float(tf.linalg.global_norm(self._agent.trainable_variables).numpy())
    limit = self._config.max_parameter_norm
    if not progress_watch.parameters_healthy(norm, limit):
      return (f"the parameters' global norm is {norm:.3g} (--max_parameter_norm={limit:g}): "
              f"training has diverged")
    if watch is not None and watch.diverged:
      return "every trajectory since the last one trained on carried non-finite behaviour " \
             "outputs: the parameters have diverged"
    return None

  @staticmethod
  def wants_final(errors, levels_failed_before_any_update):
    """Whether the stop writes a final checkpoint. errors: what stopped the run (None for
    none)."""
    if any(isinstance(error, Diverged) for error in errors):
      # Diverged parameters are not worth a checkpoint: the last one stays the newest.
      return False
    # After levels that failed before the first update, a checkpoint would hold only what the
    # run started from (fresh parameters, or the checkpoint it resumed): none is written, so
    # that the same command, once the environment is fixed, starts as it would have (even with
    # another observation shape).
    return not levels_failed_before_any_update

  def resume_advice(self):
    """What a diverged run's user resumes from."""
    if self.last is None:
      return "start again in a new logdir (no checkpoint was written before the divergence)"
    return f"resume from the newest checkpoint, {self.last}, written before the divergence"

  def exists(self):
    return self.last is not None and os.path.exists(self.last + ".index")

  def kept(self):
    """What a failed run leaves to resume from, as the end of its message."""
    if self.last is None:
      return " No checkpoint was written."
    if not self.exists():  # The logdir was deleted or moved during the run.
      return (f" Training stopped; its last checkpoint, {self.last}, no longer exists (was "
              f"the logdir deleted or moved?): nothing of this run is left to resume from.")
    return f" Training stopped; the checkpoint {self.last} holds its last good state."

  def saved(self):
    """What a run stopped by its actors or its replay leaves, as the end of its message."""
    if self.last:
      return f" Training stopped; the checkpoint {self.last} holds its state."
    return " Nothing was trained; no checkpoint was written."

  def stopped_line(self, stop_reason, failure, frames):
    """The run's last console line: why it stopped (a RunFailed's message, when one stopped
    it) and its newest checkpoint."""
    if isinstance(failure, RunFailed):
      kept = (f"Checkpoint {self.last} kept as the newest." if self.exists()
              else self.kept().strip())
      return f"Stopped: {failure} {kept}"
    checkpoint = (f"Checkpoint {self.last} at {frames:,} frames." if self.last
                  else "Nothing trained, no checkpoint written.")
    return f"Stopped: {stop_reason}. {checkpoint}"
