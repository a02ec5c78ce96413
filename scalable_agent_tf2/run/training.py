"""--mode=train: the training supervisor (start, watch, stop, checkpoint).

    actor threads (--num_actors), each with its environment in a subprocess
      -> one batched forward pass for all of them (dynamic_batching, learner's device)
      -> unrolls of --unroll_length into the learner's input (input_pipeline.py: queues,
         replay, tf.data, IMPACT's circular buffer)
      -> the learner's compiled update (learner.py)
    (a cluster's learner has no actor threads: actor processes send their unrolls over RPC,
    actor_process.py)

Threads: actor threads; a learner thread running updates; the main thread supervises (console,
TensorBoard and JSONL every --log_secs, checkpoints every --checkpoint_secs, actor health,
SIGINT/SIGTERM). Training stops at --total_environment_frames, at a signal, or when an actor
fails with an error other than an environment crash (those are restarted and logged), or when
levels cannot run (environments.LevelCannotRun: all such levels are collected, then named in
one LevelsCannotRun), or when a shared replay service is lost for longer than
--shared_replay_connect_secs; a checkpoint is written in every case.

Signals (stop_signals.StopRequest): SIGINT and SIGTERM only record a stop request and wake the
supervisor, which stops the threads and writes the checkpoint; nothing is raised in the code the
main thread happens to run. While the run is being built (before any update) a signal stops
the build at once: the checkpoint the run would resume from stays as it is.
"""
import contextlib
import dataclasses
import os
import threading
import time
from typing import Optional

import tensorflow as tf

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.run import actor_process
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.runfiles import checkpoint_files
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.run import checkpoints
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.learning import batch_loss
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.utils import profiling
from scalable_agent_tf2.utils import stop_signals
from scalable_agent_tf2.configuration import suites
from scalable_agent_tf2.environments import LevelCannotRun, LevelKeepsFailing
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments.families import base as families_base
from scalable_agent_tf2.learning import laser

# How long the supervisor keeps collecting levels that cannot run once one is reported, while
# other actors have not yet delivered a first trajectory nor failed (their environments may
# still be starting: DMLab-30 compiles maps for about a minute on a small machine).
LEVEL_CHECK_SECS = 300.0
# Seconds a stop waits, in all, for the learner's and the actors' threads to end before the
# final checkpoint: a thread stuck in an environment call (watchdog.py) never ends, and SIGTERM
# must stop a run within 10 s whatever an environment is doing (issue 41).
STOP_JOIN_SECS = 3.0
# Environment calls that hang before a level is given up (the run stops with an error): a
# level whose every environment hangs would otherwise leave a stuck thread per replacement.
MAX_HANGS_PER_LEVEL = 3
# Attempts (restarts) an actor's environments may make before their seeds would repeat a
# replacement actor's (assembly.actor_loop_factory's attempt_offset).
REPLACEMENT_ATTEMPTS = 1_000


@dataclasses.dataclass(frozen=True)
class TrajectoryAccounts:
  """Where a run's trajectories went.

  produced: delivered to the learner's queues (by local actors, or admitted from actor
    processes). trained: in this run's updates. dropped: of the produced, refused for
    non-finite numbers (input_pipeline.non_finite_fields; never trained on). untrained:
    produced - trained - dropped - online_fill (queued or prefetched at the stop, never
    counted as frames). online_fill: LASER's
    replayed places filled with online trajectories (laser.EpisodeMixer): trained on
    (unless prefetched at the stop) but not counted as frames (docs/LASER.md, "Departures").
    by_actor_process, duplicates (a cluster's learner only): actor process -> trajectories
    admitted, and -> repeated messages dropped.
  """
  produced: int
  trained: int
  untrained: int
  dropped: int = 0
  online_fill: int = 0
  by_actor_process: Optional[dict] = None
  duplicates: Optional[dict] = None

  @classmethod
  def count(cls, produced, trained, online_fill=0, dropped=0, **by_process):
    return cls(produced=produced, trained=trained,
               untrained=produced - trained - dropped - online_fill, dropped=dropped,
               online_fill=online_fill, **by_process)

  def lines(self):
    """The console's account."""
    dropped = (f"{self.dropped} dropped (non-finite numbers), " if self.dropped else "")
    lines = [f"Trajectories: {self.produced} delivered, {self.trained} trained on, {dropped}"
             f"{self.untrained} not trained on (queued or prefetched at the stop; not "
             f"counted as frames)."]
    if self.online_fill:
      lines.append(f"  {self.online_fill} filled replayed places while the replay held no "
                   f"complete episode (not counted as frames).")
    for task in sorted(self.by_actor_process or {}):
      line = f"  actor process {task}: {self.by_actor_process[task]} trajectories"
      if self.duplicates.get(task):
        line += f", {self.duplicates[task]} repeated messages dropped"
      lines.append(line)
    return lines


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """What `train` did.

  recent_returns: level -> mean of recent episode returns. checkpoint: path of the last
  checkpoint written. replay: with --laser_replay, input_pipeline.ReplayAccounts.
  """
  num_env_frames: int
  num_updates: int
  recent_returns: dict
  checkpoint: str
  trajectories: TrajectoryAccounts
  replay: Optional[input_pipeline.ReplayAccounts] = None


def train(config, environment_constructor=None, network_config=None, print_fn=print,
          listen_address=None, shared_replay=None, agent_tag=None, cluster_secret=None,
          insecure_open_cluster=False, stop_request=None):
  """Trains until config.total_environment_frames; resumes from logdir's checkpoint.

  Args:
    config: a resolved config.ExperimentConfig.
    environment_constructor: callable(level_name, seed, test_mode) -> (constructor, kwargs);
      default: the paper's environments (environments.environment_constructor).
    network_config: overrides config.network_config(num_actions) (tests use small frames).
    print_fn: where console lines go.
    listen_address: None: actor threads in this process (one machine). "host:port": the
      learner of a cluster: no local actors; actor processes (actor_process.py) send
      trajectories to a learner_service.TrajectoryServer on this address.
    shared_replay: with --laser_replay, a laser.EpisodeReplay shared with other agents'
      runs (LASER section 5.4; shared_replay_runs.py), or a replay_client.ReplayClient
      (agents in other processes); None: the replay service of --shared_replay_address if
      set, else a replay of this run's own (--replay_capacity unrolls).
    agent_tag: this run's tag on its episodes in the replay; default: --agent_tag, else the
      logdir's name.
    cluster_secret: bytes (distributed.cluster_secret) that every call to this learner's
      address and to a shared replay service must prove; None: nothing is checked, and the
      learner listens on a loopback address only unless insecure_open_cluster.
    stop_request: the stop_signals.StopRequest installed by the command that runs this
      training (experiment_main.py's, installed before anything loaded), handed over as it
      is: it raises Stopping while the run is built, then only wakes the supervisor. None (a
      library caller: tests, shared_replay_runs.py): train installs one for its call.

  Returns:
    TrainResult.

  Raises:
    checkpoints.CheckpointError: unusable checkpoint (nothing is started).
    actor.ActorFailed: an actor thread hit an error (a checkpoint is written first).
    replay_service.ReplayServiceUnavailable: the shared replay service did not answer at the
      start, or was lost during training (a checkpoint is written first).
    distributed.PeerRejected: the shared replay service refused this agent's layout or
      secret.
    distributed.ClusterError: a non-loopback listen_address without a cluster_secret nor
      insecure_open_cluster.
  """
  if config.repeatable:
    repeatable.check_run(listen_address, shared_replay)
  owns_stop_request = stop_request is None
  if owns_stop_request:
    stop_request = stop_signals.StopRequest(print_fn).install()
  deterministic_ops = repeatable.DeterministicOps(config.repeatable)  # Off again at the end.
  try:
    return _build_and_supervise(config, environment_constructor, network_config, print_fn,
                                listen_address, shared_replay, agent_tag, stop_request,
                                _ClusterAccess(cluster_secret, insecure_open_cluster))
  except stop_signals.Stopping as interrupt:
    latest = checkpoint_files.latest_checkpoint(config.logdir)
    checkpoint, frames = ((os.path.join(checkpoint_files.checkpoint_dir(config.logdir),
                                        latest[0]), latest[1]) if latest else (None, 0))
    print_fn(f"Stopped: interrupted ({interrupt}) before training started; "
             + (f"checkpoint {checkpoint} unchanged at {frames:,} frames." if checkpoint
                else "nothing trained, nothing to save."))
    return TrainResult(num_env_frames=frames, num_updates=0, recent_returns={},
                       checkpoint=checkpoint,
                       trajectories=TrajectoryAccounts.count(produced=0, trained=0))
  except LevelCannotRun as error:  # The first environment (build_agent's) cannot start.
    raise LevelsCannotRun.of([error], config, " Nothing was trained.") from error
  finally:
    if owns_stop_request:  # The command's stays installed until the command ends.
      stop_request.restore()
    deterministic_ops.restore()


@dataclasses.dataclass(frozen=True)
class _ClusterAccess:
  """Who may call this run's services: train's cluster_secret and insecure_open_cluster."""
  secret: Optional[bytes] = None
  insecure_open_cluster: bool = False


def _build_and_supervise(config, environment_constructor, network_config, print_fn,
                         listen_address, shared_replay, agent_tag, stop_request, access):
  """train's work: builds the run (a signal raises Stopping here) and supervises it."""
  # Threads and several learners' devices: set up before TensorFlow initialises them.
  assembly.configure_threads(config, print_fn)
  strategy = distributed.learner_strategy(config.num_learners)
  environment_constructor = assembly.checked_environment_constructor(
      config, environment_constructor)
  agent, first_env = assembly.build_agent(config, environment_constructor, network_config,
                                          strategy)
  with contextlib.ExitStack() as cleanup:
    first_env_owner = cleanup.enter_context(contextlib.ExitStack())  # Until actor 0 takes it.
    first_env_owner.callback(first_env.close)
    learner = assembly.make_learner(config, agent, strategy)
    checkpointer = assembly.make_checkpointer(config, agent, learner)
    restored = checkpointer.restore(restore_from=config.restore_checkpoint)
    if checkpointer.set_aside_note():
      print_fn(checkpointer.set_aside_note())
    # The flags' learning rate, entropy cost and RMSProp epsilon win over the checkpoint's
    # (population-based training restarts members with changed ones, IMPALA Appendix F).
    learner.use_config_hyperparameters()
    for line in monitoring.start_banner(config, agent.config, assembly.learner_device(),
                                        learner.jit_compile, restored,
                                        int(learner.num_env_frames.numpy())):
      print_fn(line)
    if shared_replay is not None and not config.laser_replay:
      raise ValueError("shared_replay is LASER's: it needs --laser_replay.")
    run = _Run(config, agent, learner, checkpointer, print_fn)
    run.build(cleanup, environment_constructor, first_env, first_env_owner, listen_address,
              shared_replay, agent_tag or config.agent_tag
              or os.path.basename(os.path.normpath(config.logdir)), access)
    return _supervise(run, stop_request)


class RunFailed(RuntimeError):
  """The run stopped on a failure of its own (not a bad flag): updates that stay non-finite,
  a thread of the learner that died, a checkpoint or log that could not be written. The
  message says what happened and which checkpoint holds the run's state."""


class Diverged(RunFailed):
  """Training has diverged: the parameters at the stop are not worth a checkpoint (the last
  healthy one stays the newest)."""


class NonFiniteUpdates(Diverged):
  """--max_nonfinite_updates updates in a row had a non-finite loss or gradient norm."""


class ParametersDiverged(Diverged):
  """An update left the parameters' global norm non-finite or above --max_parameter_norm, or
  every trajectory carries non-finite behaviour outputs."""


class Stalled(RunFailed):
  """No progress for --stall_secs (progress_watch.ProgressWatch)."""


class LevelsCannotRun(RuntimeError):
  """Levels whose environments cannot start or reset here, or keep failing while they run
  (environments.LevelCannotRun, LevelKeepsFailing, from one or more actors), named together
  with what to do (their families' how_to_fix).

  Attributes:
    reasons: dict level name -> reason.
    keep_failing: the levels whose environments started, then kept failing (a crash loop).
    exit_code: 1 when some level kept failing while it ran (a failure of the run, as
      RunFailed's), 2 when levels only could not start (this machine's set-up, as bad flags).
  """

  def __init__(self, reasons, config, consequence="", keep_failing=()):
    self.reasons = dict(reasons)
    self.keep_failing = frozenset(keep_failing)
    self.exit_code = 1 if self.keep_failing else 2
    names = sorted(self.reasons)
    lines = [f"{len(names)} level(s) cannot run here:"]
    # A reason from an environment's death already starts with its level's name.
    lines += [f"  {reason}" if reason.startswith(f"{name}: ") else f"  {name}: {reason}"
              for name, reason in ((name, self.reasons[name]) for name in names)]
    fix = _how_to_fix(names)
    if suites.is_suite(config.level_name):
      excluded = sorted(set(config.excluded_level_names) | set(names))
      remaining = len(config.levels) - len(set(names) & set(config.levels))
      lines.append(f"{fix}, or run without them with "
                   f"--excluded_levels={','.join(excluded)} ({config.level_name}'s score then "
                   f"covers {remaining} of {len(families.level_names(config.level_name))} "
                   f"levels).")
    else:
      lines.append(f"{fix} or choose another level.")
    super().__init__("\n".join(lines) + consequence)

  @classmethod
  def of(cls, errors, config, consequence=""):
    """From the LevelCannotRun errors of actors (or evaluation workers)."""
    return cls({e.level_name: e.reason for e in errors}, config, consequence,
               keep_failing={e.level_name for e in errors
                             if isinstance(e, LevelKeepsFailing)})


def _how_to_fix(level_names):
  """The advice of the levels' families (Family.how_to_fix), each once; DeepMind Lab's points
  to BUILD.md, a gymnasium environment's to its own code."""
  advice = []
  for name in level_names:
    family = families.find_family(name)
    fix = family.how_to_fix if family is not None else families_base.Family.how_to_fix
    if fix not in advice:
      advice.append(fix)
  return "; ".join(advice)


@dataclasses.dataclass
class _Progress:
  """What the learner thread counts; actors and the supervisor read it."""
  num_updates: int = 0
  trained: int = 0  # New trajectories trained on (not replayed, not used again by IMPACT).
  skipped_updates: int = 0  # Non-finite loss or gradient norm: nothing changed (learner.py).
  skipped_in_a_row: int = 0


class _LocalActors:
  """Actor threads in this process (one machine), each with its group of environments
  (assembly.actor_loop_factory); actor 0 takes over build_agent's environment (and closes it
  when its games run in a vector group). The same interface as actor_process.RemoteActors."""

  def __init__(self, threads, first_env_owner, clocks=None, replace=None):
    """threads: the actor threads; clocks: their watchdog.CallClocks (None: not watched);
    replace: callable(index, replacement number) -> a new, unstarted actor thread."""
    self.threads = threads
    self._first_env_owner = first_env_owner
    self._clocks = clocks
    self._replace = replace
    self.abandoned = []  # Threads given up as hung (watchdog.py): they never end, or end late.
    self.hangs = {}  # Level name -> environment calls that hung.

  def start(self):
    for thread in self.threads:
      thread.start()
    self._first_env_owner.pop_all()  # Actor 0 owns it now.

  def failed(self):
    return actor_lib.first_failed(self.threads)

  def failed_thread(self):
    return None  # The actor threads' failures are `failed`'s; there is no other thread.

  def poll(self):
    pass  # Local actors report their episodes to the monitor themselves.

  def publish_version(self, num_updates):
    pass  # Local actors read _Progress.num_updates.

  def close(self):
    pass  # Stopped by the stop event and the policy's closing.

  def join(self, timeout):
    deadline = time.monotonic() + timeout
    for thread in self.threads:
      if thread.ident is not None:  # Started.
        thread.join(max(0.0, deadline - time.monotonic()))

  def delivered(self):
    return dict(produced=sum(a.num_trajectories for a in self.threads + self.abandoned))

  def hung(self, now, limits_of):
    """Replaces each actor whose environment call has run past its limit; returns what was
    seen: (level name, the call, a sentence) per actor. limits_of: callable(level name) -> {watchdog.STEP: s, RESET: s}."""
    if self._clocks is None:
      return []
    seen = []
    for index, (thread, clock) in enumerate(zip(self.threads, self._clocks)):
      level = thread.level_name
      overdue = clock.overdue(now, limits_of(level))
      if overdue is None:
        continue
      call, seconds = overdue
      clock.abandon()
      self.abandoned.append(thread)
      self.hangs[level] = self.hangs.get(level, 0) + 1
      self.threads[index], self._clocks[index] = self._replace(index, len(self.abandoned))
      self.threads[index].start()
      seen.append((level, call, f"{thread.name}'s environment has not returned from "
                                f"{call}() for {seconds:.0f} s (--env_{call}_timeout_secs="
                                f"{limits_of(level)[call]:g}); new environments replace it. Its "
                                f"thread is left behind: an environment stepped in this process "
                                f"cannot be interrupted."))
    return seen

  def refusal_lines(self):
    return []  # No service: nothing to refuse.

  def farewell(self):
    pass


class _Run:
  """One training run: its parts (built by `build`) and the state its threads share."""

  def __init__(self, config, agent, learner, checkpointer, print_fn):
    self.config = config
    self.agent = agent
    self.learner = learner
    self.checkpointer = checkpointer
    self.print = print_fn
    self.device = assembly.learner_device()
    self.stop_event = threading.Event()
    self.progress = _Progress()
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

  def build(self, cleanup, environment_constructor, first_env, first_env_owner,
            listen_address, shared_replay, agent_tag, access=_ClusterAccess()):
    """The monitor, the policy, the actors and the learner's input; `cleanup` (an ExitStack)
    closes them when train returns."""
    config = self.config
    self.monitor = monitoring.Monitor(config.logdir, sorted(set(config.levels)),
                                      config.total_environment_frames, print_fn=self.print)
    cleanup.callback(self.monitor.close)
    self.monitor.watch_activity(lambda: monitoring.activity_of(
        self.actors, assembly.environment_group_size(config)))
    self.policy = assembly.make_policy(config, self.agent, self.device)
    cleanup.callback(self.policy.close)
    self.input = input_pipeline.LearnerInput(config, self.stop_event, self.print)
    signature = assembly.trajectory_signature(self.agent.config, config.unroll_length,
                                              self.policy)
    if listen_address is None:
      threads, clocks = zip(*[self._actor_thread(i, environment_constructor, first_env)
                              for i in range(config.num_actors)])
      self.actors = _LocalActors(
          list(threads), first_env_owner, list(clocks),
          replace=lambda index, replacement: self._actor_thread(
              index, environment_constructor, None, replacement))
    else:
      self.actors = actor_process.RemoteActors(
          config, self.agent, signature, listen_address, self.input.put_trajectory,
          self.monitor, self.print, secret=access.secret,
          insecure_open_cluster=access.insecure_open_cluster)
      cleanup.callback(self.actors.close)
    self.dataset = self.input.dataset(self.agent, signature, shared_replay, agent_tag,
                                      self.device, self.print, secret=access.secret)
    self.update_options = laser.update_options(config)  # LASER's entropy mask, if any.

  def _actor_thread(self, index, environment_constructor, first_env, replacement=0):
    """(actor thread `index`, its watchdog.CallClock); replacement n > 0: the n-th actor that
    replaces a hung one (new environments, seeded apart from the ones replaced)."""
    config = self.config
    clock = watchdog.CallClock()
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
    are reported and their actors replaced (_LocalActors.hung)."""
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
      stats = self.learner.update(**batch, num_new_trajectories=num_new, **self.update_options)
      stats = {k: v.numpy() for k, v in stats.items()}
      if not stats.pop("update_skipped"):
        self.progress.num_updates += 1
        self.progress.trained += num_new
        self.progress.skipped_in_a_row = 0
        self._check_parameters(f"after update {self.progress.num_updates}")
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

  def _check_parameters(self, when):
    """Raises ParametersDiverged when the parameters' global norm is not finite or above
    --max_parameter_norm (finite but huge parameters make every actor output NaN, so no
    update would ever be skipped as non-finite again: issue 41)."""
    norm, limit = self._parameter_norm(), self.config.max_parameter_norm
    if not progress_watch.parameters_healthy(norm, limit):
      raise ParametersDiverged(
          f"The parameters' global norm is {norm:.3g} {when} (--max_parameter_norm="
          f"{limit:g}): training has diverged. Lower --learning_rate (or set "
          f"--max_grad_norm), then {self._resume_advice()}.")

  def start(self):
    self.monitor.start(self.frames())
    self.progress_watch = progress_watch.ProgressWatch(
        self.config.stall_secs, self.config.batch_size, time.monotonic())
    self.actors.publish_version(self.progress.num_updates)
    self.actors.start()
    self.learner_thread.start()

  def watch(self):
    """Until the run stops: actors' health, remote actors' episodes, and logs and
    checkpoints when they are due."""
    config = self.config
    next_log = time.monotonic() + config.log_secs
    next_checkpoint = time.monotonic() + config.checkpoint_secs
    while not self.stop_event.wait(min(0.5, config.log_secs)):
      now = time.monotonic()
      if (self._actors_stop_the_run(now) or self._a_thread_died()
          or self._hung_environments(now) or self._stalled(now)):
        return
      self.actors.poll()
      if now >= next_log:
        try:
          self.monitor.write(self.frames(), self.input.queues.fill())
        except OSError as error:  # A full disk, a read-only or deleted logdir.
          self.failure = RunFailed(f"Cannot write the run's log in {config.logdir}: {error}.")
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
    if self._kept_failing_before_any_update():
      # A checkpoint would hold only what the run started from (fresh parameters, or the
      # checkpoint it resumed): none is written, so that the same command, once the
      # environment is fixed, starts as it would have (even with another observation shape).
      return
    self.save()

  def _kept_failing_before_any_update(self):
    """An environment crash loop (LevelKeepsFailing) stopped the run before its first update."""
    return self.progress.num_updates == 0 and any(
        isinstance(t.error, LevelKeepsFailing) for t in getattr(self.actors, "threads", ()))

  def report(self):
    """The final log record and console lines: trajectory accounts, why the run stopped."""
    self.monitor.write(self.frames(), self.input.queues.fill())
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


def _supervise(run, stop_request):
  """Starts the run's threads, watches them until the run stops, stops them, writes the
  final checkpoint and returns the TrainResult (or raises what stopped the run early).

  From here on SIGINT and SIGTERM only wake the supervisor (stop_request), so the final
  checkpoint is written whatever the main thread was doing when they arrived.
  """
  if run.frames() >= run.config.total_environment_frames:
    run.print(f"Nothing to do: {run.frames():,} frames already reach "
              f"--total_environment_frames.")
    return TrainResult(num_env_frames=run.frames(), num_updates=0,
                       recent_returns=run.monitor.recent_returns(),
                       checkpoint=run.last_checkpoint,
                       trajectories=TrajectoryAccounts.count(produced=0, trained=0))
  stop_request.supervise(run.stop_event.set)
  try:
    run.start()
    run.watch()
  finally:
    if stop_request.requested:
      run.stop_reason = f"interrupted ({stop_request.signal_name})"
    run.stop()
    run.report()
  run.raise_failure()
  return run.result()
