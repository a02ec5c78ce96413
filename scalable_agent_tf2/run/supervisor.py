"""One training run's supervisor: the training loop's shape.

`training.train` makes a Run and supervises it: `build` builds its parts (run_parts.py: the
monitor, the batched policy, the actors, the learner's input); `start` starts the actor threads
and the learner thread; `watch`, on the main thread, writes the console line, TensorBoard and
the run log every --log_secs and a checkpoint every --checkpoint_secs, until the failure policy
(failure_policy.py) stops the run; `stop` ends the threads and writes the final checkpoint
(checkpoint_policy.py: when, and never of diverged parameters); `report` prints the trajectory
accounts and the `Stopped:` line (training_result.py); `raise_failure` raises what stopped the
run early. Checkpoints never see half an update (`update_lock`).

The learner thread (`learn`) runs the compiled update (learner.py) on the input pipeline's
batches. An update whose loss or gradient norm is not finite is skipped (parameters and frame
count unchanged); the failure policy stops the run at --max_nonfinite_updates of them in a row
and checks the parameters' global norm after every update (--max_parameter_norm).
"""
import dataclasses
import threading
import time

import tensorflow as tf

from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import checkpoint_policy
from scalable_agent_tf2.run import failure_policy
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.run import run_parts
from scalable_agent_tf2.run import training_result
from scalable_agent_tf2.run.run_failures import LogWriteFailed
from scalable_agent_tf2.run.training_result import TrainResult
from scalable_agent_tf2.run.training_result import TrajectoryAccounts
from scalable_agent_tf2.utils import profiling

# Seconds a stop waits, in all, for the learner's and the actors' threads to end before the
# final checkpoint: a thread stuck in an environment call (watchdog.py) never ends, and SIGTERM
# must stop a run within 10 s whatever an environment is doing.
STOP_JOIN_SECS = 3.0


@dataclasses.dataclass
class Progress:
  """What the learner thread counts; actors and the supervisor read it."""
  num_updates: int = 0
  trained: int = 0  # New trajectories trained on (not replayed, not used again by IMPACT).
  skipped_updates: int = 0  # Non-finite loss or gradient norm: nothing changed (learner.py).
  skipped_in_a_row: int = 0


class Run:
  """One training run: its parts (built by `build`) and the state its threads share."""

  def __init__(self, config, agent, learner, checkpointer, print_fn):
    self.config = config
    self.agent = agent
    self.learner = learner
    self.print = print_fn
    self.device = assembly.learner_device()
    self.stop_event = threading.Event()
    self.progress = Progress()
    self.update_lock = threading.Lock()  # Checkpoints never see half an update.
    self.checkpoints = checkpoint_policy.CheckpointPolicy(config, agent, checkpointer,
                                                          self.update_lock, self.frames)
    self.failures = failure_policy.FailurePolicy(config, print_fn, self.checkpoints)
    self.accounts = None
    self.parts = None  # Made by build.
    self.learner_thread = threading.Thread(target=self.learn, name="learner", daemon=True)
    self.progress_watch = None  # Made at start (its clock starts with the actors).
    # The watches' clock: the time the process ran (progress_watch.RunningClock).
    self.clock = progress_watch.RunningClock()

  @property
  def last_checkpoint(self):
    return self.checkpoints.last

  @property
  def monitor(self):
    return self.parts.monitor

  def build(self, cleanup, environment_constructor, first_env, first_env_owner,
            listen_address, shared_replay, agent_tag, access=run_parts.ClusterAccess()):
    """The run's parts (run_parts.build); `cleanup` (an ExitStack) closes them when train
    returns."""
    config = self.config
    shared = run_parts.Shared(self.stop_event, lambda: self.progress.num_updates, self.clock,
                              self.device, self.print)
    self.parts = run_parts.build(config, self.agent, shared, cleanup, environment_constructor,
                                 first_env, first_env_owner, listen_address, shared_replay,
                                 agent_tag, access, kept=self.checkpoints.kept)

  def frames(self):
    return int(self.learner.num_env_frames.numpy())

  def learn(self):
    """The learner thread: updates until the frame budget or the stop event."""
    profiling.name_this_thread("learner")
    parts = self.parts
    try:
      with tf.device(self.device):
        for policy_versions, batch, num_new in input_pipeline.learner_steps(
            parts.dataset, self.learner, self.config):
          if self.stop_event.is_set():
            break  # A batch that came after the stop: the final checkpoint may be written.
          stats = self._update(batch, num_new)
          if stats is None:
            continue  # Skipped: non-finite (see _update).
          parts.actors.publish_version(self.progress.num_updates)
          parts.monitor.record_update(
              stats, self.progress.num_updates - 1 - policy_versions.numpy())
          if self.config.repeatable:  # Losses and parameters, update by update.
            self.print(repeatable.update_line(self.progress.num_updates, stats,
                                              self.agent.trainable_variables))
          if (stats["num_env_frames"] >= self.config.total_environment_frames
              or self.stop_event.is_set()):
            break
    except BaseException as error:  # pylint: disable=broad-except
      self.failures.learner_error = error
    finally:
      self.stop_event.set()

  def _update(self, batch, num_new):
    """One learner update; its statistics (numpy), or None when the learner skipped it
    (non-finite loss or gradient norm: parameters, optimizer and frames unchanged)."""
    with self.update_lock:
      stats = self.learner.update(**batch, num_new_trajectories=num_new)
      stats = {k: v.numpy() for k, v in stats.items()}
      if not stats.pop("update_skipped"):
        self.progress.num_updates += 1
        self.progress.trained += num_new
        self.progress.skipped_in_a_row = 0
        self.failures.check_parameters(f"after update {self.progress.num_updates}",
                                       norm=float(stats["parameter_norm"]))
        return stats
      self.progress.skipped_updates += 1
      self.progress.skipped_in_a_row += 1
    self.failures.skipped_update(stats, self.progress.skipped_in_a_row)
    return None

  def start(self):
    self.parts.monitor.start(self.frames())
    self.progress_watch = progress_watch.ProgressWatch(
        self.config.stall_secs, self.config.batch_size, self.clock())
    self.parts.actors.publish_version(self.progress.num_updates)
    self.parts.actors.start()
    self.learner_thread.start()

  def watch(self):
    """Until the run stops: actors' health, remote actors' episodes, and logs and
    checkpoints when they are due."""
    config, parts = self.config, self.parts
    next_log = self.clock.tick() + config.log_secs
    next_checkpoint = self.clock() + config.checkpoint_secs
    while not self.stop_event.wait(min(0.5, config.log_secs)):
      now = self.clock.tick()
      if self.failures.stops_the_run(parts.actors, parts.input, parts.monitor,
                                     self.progress.num_updates,
                                     self.progress.skipped_in_a_row, self.progress_watch, now):
        return
      parts.actors.poll()
      if now >= next_log:
        try:
          parts.monitor.write(self.frames(), parts.input.queues.fill())
        except LogWriteFailed as error:  # A full disk, a read-only or deleted logdir.
          self.failures.fail(error)
          return
        next_log = now + config.log_secs
      if now >= next_checkpoint:
        if not self.save():
          return
        self.print(f"Checkpoint {self.last_checkpoint}")
        parts.monitor.checkpointed()  # Redraws the learning curve.
        next_checkpoint = now + config.checkpoint_secs

  def save(self):
    """Writes a checkpoint (checkpoint_policy.py); False, with the failure recorded, when it
    could not be written (the previous checkpoint stays the newest)."""
    failure = self.checkpoints.save(self.progress_watch)
    if failure is not None:
      self.failures.fail(failure)
    return failure is None

  def stop(self, reason=None):
    """Stops every thread (those started) and writes the final checkpoint. reason: why, when
    the caller knows better than the run (a signal)."""
    parts = self.parts
    if reason is not None:
      self.failures.stop_reason = reason
    if parts.input.lost_replay:
      self.failures.stop_reason = "the shared replay service was lost"
    self.stop_event.set()
    parts.policy.close()  # Wakes actors waiting for an action.
    parts.actors.close()
    # The learner may wait for a batch that never comes; an update in progress holds the
    # update lock, which the save below waits for, and no update starts after the stop.
    deadline = time.monotonic() + STOP_JOIN_SECS
    if self.learner_thread.ident is not None:  # Started.
      self.learner_thread.join(STOP_JOIN_SECS)
    parts.actors.join(max(0.0, deadline - time.monotonic()))
    if self.checkpoints.wants_final(self.failures.errors(),
                                    self.failures.levels_failed_before_any_update(
                                        parts.actors, self.progress.num_updates)):
      self.save()

  def report(self):
    """The final log record and console lines: trajectory accounts, why the run stopped."""
    parts = self.parts
    try:
      parts.monitor.write(self.frames(), parts.input.queues.fill())
    except LogWriteFailed as error:  # The disk filled at the stop.
      self.failures.fail(error)
    self.accounts = TrajectoryAccounts.count(trained=self.progress.trained,
                                             online_fill=parts.input.online_fill,
                                             dropped=parts.input.dropped_trajectories,
                                             **parts.actors.delivered())
    for line in training_result.report_lines(
        self.accounts, self.progress.skipped_updates, parts.input.dropped_trajectories,
        parts.actors.refusal_lines(), parts.monitor.num_restarts):
      self.print(line)
    self.print(self.checkpoints.stopped_line(self.failures.stop_reason,
                                             self.failures.stopped_by(), self.frames()))
    parts.actors.farewell()

  def raise_failure(self):
    """Raises what stopped the run early (failure_policy.py), after the final checkpoint."""
    self.failures.raise_failure(self.parts.actors, self.parts.input)

  def result(self):
    return TrainResult(num_env_frames=self.frames(), num_updates=self.progress.num_updates,
                       recent_returns=self.parts.monitor.recent_returns(),
                       checkpoint=self.last_checkpoint, trajectories=self.accounts,
                       replay=self.parts.input.replay_accounts(self.print))
