"""One training run's supervisor: its parts, the learner thread, and what stops the run.

`training.train` builds a Run (`build`: the monitor, the batched policy, the actors, the
learner's input) and supervises it: `start` starts the actor threads and the learner thread;
`watch`, on the main thread, writes the console line, TensorBoard and the run log every
--log_secs and a checkpoint every --checkpoint_secs, and stops the run when an actor fails,
levels cannot run, an environment keeps hanging, a thread of the learner dies, or nothing
progresses for --stall_secs; `stop` ends the threads and writes the final checkpoint (never of
diverged parameters: the last healthy one stays the newest); `report` prints the trajectory
accounts and the `Stopped:` line; `raise_failure` raises what stopped the run early
(run_failures.py). Checkpoints never see half an update (`update_lock`).

The learner thread (`learn`) runs the compiled update (learner.py) on the input pipeline's
batches. An update whose loss or gradient norm is not finite is skipped (parameters and frame
count unchanged), and --max_nonfinite_updates of them in a row stop the run; the parameters'
global norm is checked after every update (--max_parameter_norm: finite but huge parameters
make every actor's output NaN, so no update would be skipped again).
"""
import dataclasses
import os
import threading
import time
from typing import Optional

import tensorflow as tf

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.run import actor_process
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import checkpoints
from scalable_agent_tf2.run import console_pace
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.run.local_actors import LocalActors
from scalable_agent_tf2.run.run_failures import Diverged
from scalable_agent_tf2.run.run_failures import LevelsCannotRun
from scalable_agent_tf2.run.run_failures import LogWriteFailed
from scalable_agent_tf2.run.run_failures import NonFiniteUpdates
from scalable_agent_tf2.run.run_failures import ParametersDiverged
from scalable_agent_tf2.run.run_failures import RunFailed
from scalable_agent_tf2.run.run_failures import Stalled
from scalable_agent_tf2.run.training_result import TrainResult
from scalable_agent_tf2.run.training_result import TrajectoryAccounts
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.utils import profiling

# How long the supervisor keeps collecting levels that cannot run once one is reported, while
# other actors have not yet delivered a first trajectory nor failed (their environments may
# still be starting: DMLab-30 compiles maps for about a minute on a small machine).
LEVEL_CHECK_SECS = 300.0
# Seconds a stop waits, in all, for the learner's and the actors' threads to end before the
# final checkpoint: a thread stuck in an environment call (watchdog.py) never ends, and SIGTERM
# must stop a run within 10 s whatever an environment is doing.
STOP_JOIN_SECS = 3.0
# Environment calls that hang before a level is given up (the run stops with an error): a
# level whose every environment hangs would otherwise leave a stuck thread per replacement.
MAX_HANGS_PER_LEVEL = 3
# Attempts (restarts) an actor's environments may make before their seeds would repeat a
# replacement actor's (assembly.actor_loop_factory's attempt_offset).
REPLACEMENT_ATTEMPTS = 1_000


@dataclasses.dataclass(frozen=True)
class ClusterAccess:
  """Who may call this run's services: train's cluster_secret and insecure_open_cluster."""
  secret: Optional[bytes] = None
  insecure_open_cluster: bool = False


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
    self.checkpointer = checkpointer
    self.print = print_fn
    self.device = assembly.learner_device()
    self.stop_event = threading.Event()
    self.progress = Progress()
    self.update_lock = threading.Lock()  # Checkpoints never see half an update.
    self.learner_error = None
    # What stopped the run that is neither an actor's nor the learner thread's error: a
    # checkpoint or log that could not be written, a dead thread of the learner's (RunFailed).
    self.failure = None
    self.stop_reason = "frame budget reached"
    self.last_checkpoint = checkpointer.latest
    self.accounts = None
    self.cannot_run = {}  # Level name -> environments.LevelCannotRun from actors.
    self._cannot_run_since = None
    self.learner_thread = threading.Thread(target=self.learn, name="learner", daemon=True)
    self.progress_watch = None  # Made at start (its clock starts with the actors).
    # The watches' clock: the time the process ran (progress_watch.RunningClock).
    self.clock = progress_watch.RunningClock()

  def build(self, cleanup, environment_constructor, first_env, first_env_owner,
            listen_address, shared_replay, agent_tag, access=ClusterAccess()):
    """The monitor, the policy, the actors and the learner's input; `cleanup` (an ExitStack)
    closes them when train returns."""
    config = self.config
    self.monitor = monitoring.Monitor(config.logdir, sorted(set(config.levels)),
                                      config.total_environment_frames, print_fn=self.print)
    cleanup.push(self._close_monitor)
    self.monitor.watch_activity(lambda: console_pace.activity_of(
        self.actors, assembly.environment_group_size(config)))
    self.policy = assembly.make_policy(config, self.agent, self.device)
    cleanup.callback(self.policy.close)
    self.input = input_pipeline.LearnerInput(config, self.stop_event, self.print)
    signature = assembly.trajectory_signature(self.agent.config, config.unroll_length,
                                              self.policy)
    if listen_address is None:
      threads, clocks = zip(*[self._actor_thread(i, environment_constructor, first_env)
                              for i in range(config.num_actors)])
      self.actors = LocalActors(
          list(threads), first_env_owner, list(clocks),
          replace=lambda index, replacement: self._actor_thread(
              index, environment_constructor, None, replacement))
    else:
      first_env_owner.close()  # A cluster's learner steps no environment: the spec's goes.
      self.actors = actor_process.RemoteActors(
          config, self.agent, signature, listen_address, self.input.put_trajectory,
          self.monitor, self.print, secret=access.secret,
          insecure_open_cluster=access.insecure_open_cluster)
      cleanup.callback(self.actors.close)
    self.dataset = self.input.dataset(self.agent, signature, shared_replay, agent_tag,
                                      self.device, self.print, secret=access.secret)

  def _close_monitor(self, exc_type, unused_error, unused_traceback):
    """Closes the monitor's files (its final curve drawn); one that cannot be written there
    fails the run, after its `Stopped:` line, unless the run is failing already."""
    try:
      self.monitor.close()
    except LogWriteFailed as error:
      if exc_type is not None:
        self.print(f"Also: {error}")
        return False
      raise LogWriteFailed(f"{error}{self._kept()}") from error
    return False

  def _actor_thread(self, index, environment_constructor, first_env, replacement=0):
    """(actor thread `index`, its watchdog.CallClock); replacement n > 0: the n-th actor that
    replaces a hung one (new environments, seeded apart from the ones replaced)."""
    config = self.config
    clock = watchdog.CallClock(self.clock)
    make_loop = assembly.actor_loop_factory(
        config, index, self.policy, environment_constructor, first_env,
        0 if replacement == 0 else -1, self.monitor.record_episode,
        self.monitor.record_restart, call_clock=clock,
        attempt_offset=replacement * REPLACEMENT_ATTEMPTS)
    size = assembly.environment_group_size(config)
    thread = actor_lib.ActorThread(index, make_loop, config.unroll_length,
                                   self.input.put_trajectory,
                                   lambda: self.progress.num_updates, self.stop_event,
                                   first_stream=index * size,
                                   actor_turn=self.input.actor_turn(index))
    thread.level_name = config.levels[index % len(config.levels)]
    return thread, clock

  def _hung_environments(self, now):
    """Whether hung environment calls stop the run (a level that keeps hanging); hung ones
    are reported and their actors replaced (LocalActors.hung)."""
    if not hasattr(self.actors, "hung"):
      return False  # Actor processes: their environments have their own timeouts.

    def limits_of(level):
      step, reset = assembly.environment_timeouts(self.config, level)
      return {watchdog.STEP: step, watchdog.RESET: reset}
    for level, call, line in self.actors.hung(now, limits_of):
      self.monitor.record_restart(level, watchdog.Abandoned(line))  # Counted and printed.
      if self.actors.hangs[level] >= MAX_HANGS_PER_LEVEL:
        self.failure = RunFailed(
            f"{level}: its environments hung {self.actors.hangs[level]} times; the last "
            f"{call}() ran past --env_{call}_timeout_secs={limits_of(level)[call]:g}. Fix the "
            f"environment's {call}(), or raise that limit if it is only slow.")
        return True
    return False

  def frames(self):
    return int(self.learner.num_env_frames.numpy())

  def learn(self):
    """The learner thread: updates until the frame budget or the stop event."""
    profiling.name_this_thread("learner")
    try:
      with tf.device(self.device):
        for policy_versions, batch, num_new in input_pipeline.learner_steps(
            self.dataset, self.learner, self.config):
          if self.stop_event.is_set():
            break  # A batch that came after the stop: the final checkpoint may be written.
          stats = self._update(batch, num_new)
          if stats is None:
            continue  # Skipped: non-finite (see _update).
          self.actors.publish_version(self.progress.num_updates)
          self.monitor.record_update(
              stats, self.progress.num_updates - 1 - policy_versions.numpy())
          if self.config.repeatable:  # Losses and parameters, update by update.
            self.print(repeatable.update_line(self.progress.num_updates, stats,
                                              self.agent.trainable_variables))
          if (stats["num_env_frames"] >= self.config.total_environment_frames
              or self.stop_event.is_set()):
            break
    except BaseException as error:  # pylint: disable=broad-except
      self.learner_error = error
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
        self._check_parameters(f"after update {self.progress.num_updates}",
                               norm=float(stats["parameter_norm"]))
        return stats
      self.progress.skipped_updates += 1
      self.progress.skipped_in_a_row += 1
    in_a_row, limit = self.progress.skipped_in_a_row, self.config.max_nonfinite_updates
    self.print(f"Skipped a learner update: loss {stats['total_loss']:.3g}, gradient norm "
               f"{stats['grad_norm']:.3g} (not finite); parameters unchanged ({in_a_row} in a "
               f"row, the run stops at {limit}).")
    if in_a_row >= limit:
      raise NonFiniteUpdates(
          f"{in_a_row} learner updates in a row had a non-finite loss or gradient norm "
          f"(--max_nonfinite_updates={limit}): training has diverged. Lower --learning_rate "
          f"(or set --max_grad_norm), then resume from the last checkpoint.")
    return None

  def _parameter_norm(self):
    return float(tf.linalg.global_norm(self.agent.trainable_variables).numpy())

  def _check_parameters(self, when, norm):
    """Raises ParametersDiverged when the parameters' global norm (the update's
    parameter_norm) is not finite or above --max_parameter_norm (finite but huge parameters
    make every actor output NaN, so no update would ever be skipped as non-finite
    again)."""
    limit = self.config.max_parameter_norm
    if not progress_watch.parameters_healthy(norm, limit):
      raise ParametersDiverged(
          f"The parameters' global norm is {norm:.3g} {when} (--max_parameter_norm="
          f"{limit:g}): training has diverged. Lower --learning_rate (or set "
          f"--max_grad_norm), then {self._resume_advice()}.")

  def start(self):
    self.monitor.start(self.frames())
    self.progress_watch = progress_watch.ProgressWatch(
        self.config.stall_secs, self.config.batch_size, self.clock())
    self.actors.publish_version(self.progress.num_updates)
    self.actors.start()
    self.learner_thread.start()

  def watch(self):
    """Until the run stops: actors' health, remote actors' episodes, and logs and
    checkpoints when they are due."""
    config = self.config
    next_log = self.clock.tick() + config.log_secs
    next_checkpoint = self.clock() + config.checkpoint_secs
    while not self.stop_event.wait(min(0.5, config.log_secs)):
      now = self.clock.tick()
      if (self._actors_stop_the_run(now) or self._a_thread_died()
          or self._hung_environments(now) or self._stalled(now)):
        return
      self.actors.poll()
      if now >= next_log:
        try:
          self.monitor.write(self.frames(), self.input.queues.fill())
        except LogWriteFailed as error:  # A full disk, a read-only or deleted logdir.
          self.failure = error
          return
        next_log = now + config.log_secs
      if now >= next_checkpoint:
        if not self.save():
          return
        self.print(f"Checkpoint {self.last_checkpoint}")
        self.monitor.checkpointed()  # Redraws the learning curve.
        next_checkpoint = now + config.checkpoint_secs

  def _stalled(self, now):
    """Whether the run has made no progress for --stall_secs (progress_watch): `failure`
    then says what was seen."""
    alive = any(t.is_alive() for t in getattr(self.actors, "threads", ())) or not hasattr(
        self.actors, "threads")
    counters = progress_watch.Counters(
        produced=self.actors.delivered()["produced"],
        dropped=self.input.dropped_trajectories, num_updates=self.progress.num_updates,
        actors_alive=alive, skipped_in_a_row=self.progress.skipped_in_a_row)
    stall = self.progress_watch.observe(counters, now, self.input.dropped_fields)
    if stall is None:
      return False
    if self.progress_watch.stall_diverged:
      self.failure = ParametersDiverged(
          f"{stall}. Lower --learning_rate (or set --max_grad_norm), then "
          f"{self._resume_advice()}.")
    else:
      self.failure = Stalled(f"No progress for --stall_secs={self.config.stall_secs:g}: "
                             f"{stall}.")
    return True

  def _resume_advice(self):
    if self.last_checkpoint is None:
      return "start again in a new logdir (no checkpoint was written before the divergence)"
    return (f"resume from the newest checkpoint, {self.last_checkpoint}, written before the "
            f"divergence")

  def _healthy_to_save(self):
    """None when the parameters may be checkpointed, else why not (a sentence)."""
    norm, limit = self._parameter_norm(), self.config.max_parameter_norm
    if not progress_watch.parameters_healthy(norm, limit):
      return (f"the parameters' global norm is {norm:.3g} (--max_parameter_norm={limit:g}): "
              f"training has diverged")
    if self.progress_watch is not None and self.progress_watch.diverged:
      return "every trajectory since the last one trained on carried non-finite behaviour " \
             "outputs: the parameters have diverged"
    return None

  def save(self):
    """Writes a checkpoint (never half an update, never of diverged parameters); False, with
    `failure` set, when it could not be written (the previous checkpoint stays the newest:
    checkpoints.py)."""
    try:
      with self.update_lock:
        unhealthy = self._healthy_to_save()
        if unhealthy is not None:
          if self.failure is None:
            self.failure = ParametersDiverged(
                f"Not saving a checkpoint: {unhealthy}. Lower --learning_rate (or set "
                f"--max_grad_norm), then {self._resume_advice()}.")
          return False
        self.last_checkpoint = self.checkpointer.save(self.frames())
      return True
    except checkpoints.CheckpointError as error:  # Non-finite parameters, a full disk, ...
      if self.failure is None:
        self.failure = RunFailed(str(error))
      return False

  def _a_thread_died(self):
    """Whether a thread of the learner's (a cluster's trajectory pump) died: the run stops
    (an actor's failure is _actors_stop_the_run's; the learner thread's, learner_error)."""
    dead = self.actors.failed_thread()
    if dead is None:
      return False
    name, error = dead
    self.failure = RunFailed(f"The learner's {name} thread died: {type(error).__name__}: "
                             f"{error}")
    return True

  def _actors_stop_the_run(self, now):
    """Whether actors' failures stop the run now: an error at once; levels that cannot run
    once every actor has delivered a first trajectory or failed (or after LEVEL_CHECK_SECS),
    so that one message names them all."""
    failed = self.actors.failed()
    if failed is None:
      return False
    threads = [t for t in getattr(self.actors, "threads", ()) if t.error is not None]
    other = next((t for t in [failed] + threads
                  if not isinstance(t.error, LevelCannotRun)), None)
    if other is not None:
      self.stop_reason = f"{other.name} failed"
      return True
    self.cannot_run = {t.error.level_name: t.error for t in threads}
    if self._cannot_run_since is None:
      self._cannot_run_since = now
      self.print(f"Level(s) cannot run: {', '.join(sorted(self.cannot_run))}; waiting for "
                 "every actor's first trajectory to find all such levels ...")
    settled = all(t.num_trajectories > 0 or t.error is not None or not t.is_alive()
                  for t in self.actors.threads)
    if settled or now - self._cannot_run_since >= LEVEL_CHECK_SECS:
      self.stop_reason = f"level(s) cannot run: {', '.join(sorted(self.cannot_run))}"
      return True
    return False

  def stop(self):
    """Stops every thread (those started) and writes the final checkpoint."""
    if self.input.lost_replay:
      self.stop_reason = "the shared replay service was lost"
    self.stop_event.set()
    self.policy.close()  # Wakes actors waiting for an action.
    self.actors.close()
    # The learner may wait for a batch that never comes; an update in progress holds the
    # update lock, which the save below waits for, and no update starts after the stop.
    deadline = time.monotonic() + STOP_JOIN_SECS
    if self.learner_thread.ident is not None:  # Started.
      self.learner_thread.join(STOP_JOIN_SECS)
    self.actors.join(max(0.0, deadline - time.monotonic()))
    if isinstance(self.learner_error, Diverged) or isinstance(self.failure, Diverged):
      # Diverged parameters are not worth a checkpoint: the last one stays the newest.
      return
    if self._levels_failed_before_any_update():
      # A checkpoint would hold only what the run started from (fresh parameters, or the
      # checkpoint it resumed): none is written, so that the same command, once the
      # environment is fixed, starts as it would have (even with another observation shape).
      return
    self.save()

  def _levels_failed_before_any_update(self):
    """Levels that could not start, or kept failing (LevelCannotRun, LevelKeepsFailing),
    stopped the run before its first update."""
    return self.progress.num_updates == 0 and any(
        isinstance(t.error, LevelCannotRun) for t in getattr(self.actors, "threads", ()))

  def report(self):
    """The final log record and console lines: trajectory accounts, why the run stopped."""
    try:
      self.monitor.write(self.frames(), self.input.queues.fill())
    except LogWriteFailed as error:  # The disk filled at the stop.
      self.failure = self.failure or error
    self.accounts = TrajectoryAccounts.count(trained=self.progress.trained,
                                             online_fill=self.input.online_fill,
                                             dropped=self.input.dropped_trajectories,
                                             **self.actors.delivered())
    for line in self.accounts.lines():
      self.print(line)
    if self.progress.skipped_updates:
      self.print(f"Learner updates skipped (non-finite loss or gradient norm): "
                 f"{self.progress.skipped_updates}.")
    if self.input.dropped_trajectories:
      self.print(f"Trajectories dropped (non-finite numbers): "
                 f"{self.input.dropped_trajectories}.")
    for line in self.actors.refusal_lines():  # A cluster's learner: refused credentials.
      self.print(line)
    if self.monitor.num_restarts:
      self.print(f"Environments restarted after a failure: {self.monitor.num_restarts} (the "
                 f"episodes they were playing dropped; {runlog.LOG_FILE}'s "
                 f"{runlog.ENVIRONMENT_FAILURE} records say why).")
    failure = self.failure or self.learner_error
    if isinstance(failure, RunFailed):
      self.stop_reason = f"{failure}"
      kept = (f"Checkpoint {self.last_checkpoint} kept as the newest."
              if self._last_checkpoint_exists() else self._kept().strip())
      self.print(f"Stopped: {self.stop_reason} {kept}")
    else:
      checkpoint = (f"Checkpoint {self.last_checkpoint} at {self.frames():,} frames."
                    if self.last_checkpoint else "Nothing trained, no checkpoint written.")
      self.print(f"Stopped: {self.stop_reason}. {checkpoint}")
    self.actors.farewell()

  def raise_failure(self):
    """Raises what stopped the run early: a failed actor, a lost replay service, the
    learner's error (all after the final checkpoint)."""
    saved = (f" Training stopped; the checkpoint {self.last_checkpoint} holds its state."
             if self.last_checkpoint else " Nothing was trained; no checkpoint was written.")
    failed = self.actors.failed()
    if failed is not None and isinstance(failed.error, LevelCannotRun):
      threads = getattr(self.actors, "threads", ())
      self.cannot_run.update({t.error.level_name: t.error for t in threads
                              if isinstance(t.error, LevelCannotRun)})
      raise LevelsCannotRun.of(self.cannot_run.values(), self.config, saved) from failed.error
    if failed is not None:
      raise actor_lib.ActorFailed.of(failed, saved) from failed.error
    if self.input.lost_replay:
      lost = self.input.lost_replay[0]
      raise type(lost)(f"{lost}{saved}") from lost
    if self.failure is not None:
      kind = type(self.failure) if isinstance(self.failure, RunFailed) else RunFailed
      raise kind(f"{self.failure}{self._kept()}") from self.failure
    if isinstance(self.learner_error, RunFailed):
      raise type(self.learner_error)(f"{self.learner_error}{self._kept()}") from (
          self.learner_error)
    if self.learner_error is not None and not isinstance(self.learner_error,
                                                         tf.errors.CancelledError):
      error = self.learner_error
      raise RunFailed(f"The learner thread failed: {type(error).__name__}: {error}"
                      f"{self._kept()}") from error

  def _last_checkpoint_exists(self):
    return self.last_checkpoint is not None and os.path.exists(self.last_checkpoint + ".index")

  def _kept(self):
    if self.last_checkpoint is None:
      return " No checkpoint was written."
    if not self._last_checkpoint_exists():  # The logdir was deleted or moved during the run.
      return (f" Training stopped; its last checkpoint, {self.last_checkpoint}, no longer "
              f"exists (was the logdir deleted or moved?): nothing of this run is left to "
              f"resume from.")
    return f" Training stopped; the checkpoint {self.last_checkpoint} holds its last good state."

  def result(self):
    return TrainResult(num_env_frames=self.frames(), num_updates=self.progress.num_updates,
                       recent_returns=self.monitor.recent_returns(),
                       checkpoint=self.last_checkpoint, trajectories=self.accounts,
                       replay=self.input.replay_accounts(self.print))
