"""--mode=train: `train`, which builds a run and supervises it (start, watch, stop, checkpoint).

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

The run's supervision is supervisor.py's (its parts: run_parts.py; one machine's actor threads:
local_actors.py; what stops it: failure_policy.py; when it checkpoints: checkpoint_policy.py);
what `train` raises is run_failures.py's, what it returns
training_result.py's. Callers name them as train's: training.RunFailed, training.TrainResult.

Signals (stop_signals.StopRequest): SIGINT and SIGTERM only record a stop request and wake the
supervisor, which stops the threads and writes the checkpoint; nothing is raised in the code the
main thread happens to run. While the run is being built (before any update) a signal stops
the build at once: the checkpoint the run would resume from stays as it is. The request is the
command's (experiment_main.py installs it before anything loads), or train's own for a caller
that has none.
"""
import contextlib
import os

from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.run import run_parts
from scalable_agent_tf2.run import supervisor

# What train raises and returns; its callers name them training.<name>.
from scalable_agent_tf2.run.run_failures import Diverged  # noqa: F401
from scalable_agent_tf2.run.run_failures import LevelsCannotRun
from scalable_agent_tf2.run.run_failures import NonFiniteUpdates  # noqa: F401
from scalable_agent_tf2.run.run_failures import ParametersDiverged  # noqa: F401
from scalable_agent_tf2.run.run_failures import RunFailed  # noqa: F401
from scalable_agent_tf2.run.run_failures import Stalled  # noqa: F401
from scalable_agent_tf2.run.training_result import TrainResult
from scalable_agent_tf2.run.training_result import TrajectoryAccounts
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.utils import stop_signals


def train(config, print_fn=print, listen_address=None, shared_replay=None, agent_tag=None, cluster_secret=None,
          insecure_open_cluster=False, stop_request=None):
  """Trains until config.total_environment_frames; resumes from logdir's checkpoint.

  Args:
    config: a resolved config.ExperimentConfig: its levels' family builds their environments
      and chooses the network (environments/families; a user's own family is registered with
      families.register).
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
    return _build_and_supervise(config, print_fn, listen_address, shared_replay, agent_tag,
                                stop_request,
                                run_parts.ClusterAccess(cluster_secret, insecure_open_cluster))
  except stop_signals.Stopping as interrupt:
    return _stopped_while_building(config, interrupt, print_fn)
  except LevelCannotRun as error:  # The first environment (build_agent's) cannot start.
    raise LevelsCannotRun.of([error], config, " Nothing was trained.") from error
  finally:
    if owns_stop_request:  # The command's stays installed until the command ends.
      stop_request.restore()
    deterministic_ops.restore()


def _stopped_while_building(config, interrupt, print_fn):
  """The result of a run stopped by a signal before its first update: the checkpoint it
  would resume from (if any) unchanged."""
  latest = checkpoints.latest_checkpoint(config.logdir)
  checkpoint, frames = ((os.path.join(checkpoints.checkpoint_dir(config.logdir),
                                      latest[0]), latest[1]) if latest else (None, 0))
  print_fn(f"Stopped: interrupted ({interrupt}) before training started; "
           + (f"checkpoint {checkpoint} unchanged at {frames:,} frames." if checkpoint
              else "nothing trained, nothing to save."))
  return TrainResult(num_env_frames=frames, num_updates=0, recent_returns={},
                     checkpoint=checkpoint,
                     trajectories=TrajectoryAccounts.count(produced=0, trained=0))


def _build_and_supervise(config, print_fn, listen_address, shared_replay, agent_tag,
                         stop_request, access):
  """train's work: builds the run (a signal raises Stopping here) and supervises it."""
  # Threads and several learners' devices: set up before TensorFlow initialises them.
  assembly.configure_threads(config, print_fn)
  strategy = distributed.learner_strategy(config.num_learners)
  environment_constructor = assembly.checked_environment_constructor(config)
  agent, first_env = assembly.build_agent(config, environment_constructor, strategy)
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
                                        int(learner.num_env_frames.numpy()),
                                        remote_actors=listen_address is not None):
      print_fn(line)
    if shared_replay is not None and not config.laser_replay:
      raise ValueError("shared_replay is LASER's: it needs --laser_replay.")
    run = supervisor.Run(config, agent, learner, checkpointer, print_fn)
    run.build(cleanup, environment_constructor, first_env, first_env_owner, listen_address,
              shared_replay, agent_tag or config.agent_tag
              or os.path.basename(os.path.normpath(config.logdir)), access)
    return _supervise(run, stop_request)


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
    run.stop(f"interrupted ({stop_request.signal_name})" if stop_request.requested else None)
    run.report()
  run.raise_failure()
  return run.result()
