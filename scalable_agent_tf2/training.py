"""--mode=train on one machine (DESIGN.md "Data flow"):

    actor threads (--num_actors), each with its environment in a subprocess
      -> one batched forward pass for all of them (dynamic_batching, learner's device)
      -> unrolls of --unroll_length on a bounded queue
      [-> with --replay_fraction > 0: a share of each batch drawn from experience replay;
          with --laser_replay: LASER's episode replay (buffers.EpisodeMixer), possibly shared
          by several agents' runs in this process (train_sharing_replay) or, with
          --shared_replay_address, by agents in other processes (replay_service.py)]
      -> tf.data: batch --batch_size trajectories, time-major, prefetch the next batch
      [-> with --algorithm=impact: the circular buffer, each batch used K times]
      -> the learner's compiled update (learner.py)

Threads: actor threads; a learner thread running updates; the main thread supervises (console,
TensorBoard and JSONL every --log_secs, checkpoints every --checkpoint_secs, actor health,
SIGINT/SIGTERM). Training stops at --total_environment_frames, at a signal, or when an actor
fails with an error other than an environment crash (those are restarted and logged), or when
a shared replay service is lost for longer than --shared_replay_connect_secs; a checkpoint is
written in every case.
"""
import os
import queue
import signal
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2 import actor as actor_lib
from scalable_agent_tf2 import buffers
from scalable_agent_tf2 import checkpoints
from scalable_agent_tf2 import distributed
from scalable_agent_tf2 import environments
from scalable_agent_tf2 import learner as learner_lib
from scalable_agent_tf2 import monitoring
from scalable_agent_tf2 import networks
from scalable_agent_tf2 import profiling
from scalable_agent_tf2 import replay_service
from scalable_agent_tf2.structures import AgentOutput, EnvOutput, Observation

# How long stopping threads may take before we give up on them (they are daemons).
_JOIN_TIMEOUT_SECS = 60.0
# Seeds the replay buffer's sampling, apart from the actors' seeds (derive_seed(seed, index)).
_REPLAY_SEED_TAG = 1_000_003
# A finished learner keeps answering this long, so its actor processes hear that it is done
# (an unroll of an actor thread takes well under this) instead of waiting to reconnect.
_ACTOR_NOTICE_SECS = 5.0


class ActorFailed(RuntimeError):
  """An actor thread stopped with an error that is not an environment crash."""


def derive_seed(*parts):
  """A 31-bit seed from ints (e.g. run seed, actor index, restart count)."""
  return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


def run_concurrently(tasks, thread_prefix=""):
  """Runs every task on its own thread and waits for all of them.

  Args:
    tasks: dict key -> callable() (thread named thread_prefix + str(key)).

  Returns:
    dict key -> what its callable returned.

  Raises:
    The first error a task raised (in finishing order), once every task has ended: no task
    is abandoned half-way (each writes its own checkpoints and closes its environments).
  """
  results, errors = {}, []

  def run(key, task):
    try:
      results[key] = task()
    except BaseException as error:  # pylint: disable=broad-except
      errors.append(error)
  threads = [threading.Thread(target=run, args=item, name=f"{thread_prefix}{item[0]}",
                              daemon=True) for item in tasks.items()]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  if errors:
    raise errors[0]
  return results


def learner_device():
  """The device the learner and the batched inference run on: the first GPU, else the CPU."""
  gpus = tf.config.list_logical_devices("GPU")
  return gpus[0].name if gpus else "/cpu:0"


def default_environment_constructor(config):
  """callable(level_name, seed, test_mode) -> (constructor, kwargs) for the run's levels."""
  options = config.environment_options()

  def constructor(level_name, seed, test_mode):
    return environments.environment_constructor(level_name, seed=seed, test_mode=test_mode,
                                                **options)
  return constructor


def configure_threads(config):
  """Applies --intra_op_threads; must run before TensorFlow executes its first op.

  Raises:
    ValueError: TensorFlow already runs with another setting.
  """
  wanted = config.intra_op_threads
  if not wanted or tf.config.threading.get_intra_op_parallelism_threads() == wanted:
    return
  try:
    tf.config.threading.set_intra_op_parallelism_threads(wanted)
  except RuntimeError as error:
    raise ValueError(f"--intra_op_threads={wanted} must be set before TensorFlow starts "
                     f"({error}).") from error


def make_policy(config, agent, device):
  """The actors' policy: batched across actor threads (default) or one forward pass each."""
  if config.batched_inference:
    return actor_lib.BatchedPolicy(agent, device=device)
  return actor_lib.PerActorPolicy(agent, device=device)


def start_environment(environment_constructor, level_name, seed, test_mode=False):
  """An environment in a subprocess."""
  constructor, kwargs = environment_constructor(level_name, seed, test_mode)
  return environments.EnvironmentProcess(constructor, kwargs=kwargs)


def build_agent(config, environment_constructor, network_config=None, strategy=None):
  """(agent, first environment) for a run: the network is sized by the first level's spec.

  The environment (of levels[0], seed of actor 0) is returned for actor 0 to use. With a
  strategy (several learners) the agent's variables are mirrored on its devices.
  """
  env = start_environment(environment_constructor, config.levels[0],
                          derive_seed(config.seed, 0, 0))
  try:
    spec = env.spec
    if network_config is None:
      network_config = config.network_config(spec.num_actions)
    if tuple(spec.frame_shape) != tuple(network_config.frame_shape):
      raise ValueError(f"The environment's frames are {spec.frame_shape}, the network "
                       f"expects {network_config.frame_shape}.")
    if strategy is None:
      return networks.Agent(network_config, seed=config.seed), env
    with strategy.scope():
      return networks.Agent(network_config, seed=config.seed), env
  except BaseException:
    env.close()
    raise


def trajectory_signature(network_config, unroll_length, policy):
  """tf.TensorSpecs of one trajectory as the dataset yields it (no level name)."""
  steps = unroll_length + 1
  spec = lambda shape, dtype: tf.TensorSpec([steps] + list(shape), dtype)
  state = tf.nest.map_structure(lambda s: tf.TensorSpec(np.shape(s), tf.float32),
                                policy.initial_state())
  env_outputs = EnvOutput(
      reward=spec([], tf.float32), done=spec([], tf.bool),
      observation=Observation(frame=spec(network_config.frame_shape, tf.uint8),
                              instruction=spec([networks.MAX_INSTRUCTION_WORDS], tf.int32)),
      episode_return=spec([], tf.float32), episode_step=spec([], tf.int32))
  agent_outputs = AgentOutput(action=spec([], tf.int32),
                              policy_logits=spec([network_config.num_actions], tf.float32),
                              baseline=spec([], tf.float32))
  return (tf.TensorSpec([], tf.int64), state, env_outputs, agent_outputs)


def actor_loop_factory(config, index, policy, environment_constructor, first_env,
                       first_env_index, on_episode, on_restart):
  """callable() -> the EnvironmentLoop of actor `index`, to be called on the actor's thread.

  Actor `index` plays level index % len(levels) (section 5.3: levels assigned round-robin),
  with seeds derived from (seed, index); actor `first_env_index` starts with `first_env`
  (already running, from build_agent).
  """
  levels = config.levels
  level = levels[index % len(levels)]

  def env_factory(attempt):
    if index == first_env_index and attempt == 0:
      return first_env
    return start_environment(environment_constructor, level,
                             derive_seed(config.seed, index, attempt))
  rng = np.random.default_rng([config.seed, index, 1])
  return lambda: actor_lib.EnvironmentLoop(env_factory, policy, rng, level,
                                           on_episode=on_episode, on_restart=on_restart)


def make_dataset(next_trajectory, signature, batch_size):
  """tf.data pipeline: trajectories -> time-major batches, the next one prefetched.

  Args:
    next_trajectory: callable() -> actor.Trajectory, or None to end the dataset.
    signature: trajectory_signature(...).
    batch_size: B.

  Returns:
    Dataset of (policy_version [B], agent_state [B, ...], env_outputs [T+1, B, ...],
    agent_outputs [T+1, B, ...]).
  """
  def generate():
    profiling.name_this_thread("input")  # A tf.data thread: the input pipeline's Python part.
    while True:
      trajectory = next_trajectory()
      if trajectory is None:
        return
      yield (trajectory.policy_version, trajectory.agent_state, trajectory.env_outputs,
             trajectory.agent_outputs)

  def time_major(policy_version, agent_state, env_outputs, agent_outputs):
    swap = lambda t: tf.transpose(t, tf.concat([[1, 0], tf.range(2, tf.rank(t))], 0))
    return (policy_version, agent_state, tf.nest.map_structure(swap, env_outputs),
            tf.nest.map_structure(swap, agent_outputs))

  dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
  return (dataset.batch(batch_size, drop_remainder=True)
          .map(time_major, num_parallel_calls=1)
          .prefetch(1))


def trajectory_nbytes(signature):
  """Bytes of one trajectory of `signature` (what replay stores per trajectory)."""
  return sum(int(np.prod(spec.shape)) * spec.dtype.size for spec in tf.nest.flatten(signature))


def advance_state_fn(agent, device):
  """callable(trajectory, state) -> the core state before the trajectory's successor: the
  current network run (no gradient) over steps 0..T-1 from `state`, as the actor ran it (it
  reads observation t to choose the action of step t+1; step T is the successor's step 0).
  LASER Appendix A.2: replayed episodes' LSTM states recomputed with the latest
  parameters."""
  @tf.function
  def advance(prev_actions, env_outputs, state):
    _, state = agent.unroll(prev_actions, env_outputs, state)
    return state

  def advance_state(trajectory, state):
    batched = lambda x: tf.convert_to_tensor(x)[:-1, tf.newaxis]
    with tf.device(device):
      state = advance(batched(trajectory.agent_outputs.action),
                      tf.nest.map_structure(batched, trajectory.env_outputs),
                      tf.nest.map_structure(lambda s: tf.convert_to_tensor(s)[tf.newaxis],
                                            state))
    return tf.nest.map_structure(lambda s: s.numpy()[0], state)
  return advance_state


def with_laser_replay(next_online, config, agent, replay, agent_tag, print_fn, device):
  """A buffers.EpisodeMixer: LASER's episode replay (Schmitt et al., 2019, section 5).

  next_online yields (trajectory, actor index). `replay` is a buffers.EpisodeReplay, shared
  with other agents' runs (section 5.4) or this run's own; this run's episodes carry
  agent_tag.
  """
  num_replayed = config.num_replayed_per_batch
  print_fn(f"LASER replay: {num_replayed} of each batch of {config.batch_size} trajectories "
           f"from episodes replayed from their start (agent {agent_tag!r}; replay of "
           f"{replay.capacity:,} unrolls, FIFO by episode); entropy cost on "
           f"{'online trajectories only' if config.entropy_on_online_only else 'all'}.")
  return buffers.EpisodeMixer(next_online, replay, config.batch_size, num_replayed, agent_tag,
                              advance_state_fn(agent, device))


def with_replay(next_trajectory, config, signature, print_fn):
  """next_trajectory, or with --replay_fraction > 0 a buffers.ReplayMixer over it.

  IMPALA section 5.2.2: each batch draws round(fraction x batch size) trajectories uniformly
  from a replay of the last --replay_capacity online trajectories (Table D.3: 10,000, FIFO).
  Replayed trajectories keep their behaviour policy and initial core state. Prints the memory
  bound (capacity x bytes per trajectory).
  """
  num_replayed = config.num_replayed_per_batch
  if not num_replayed:
    return next_trajectory  # The pipeline as it is, untouched.
  capacity = config.replay_capacity
  nbytes = trajectory_nbytes(signature)
  print_fn(f"Experience replay (IMPALA 5.2.2): {num_replayed} of each batch of "
           f"{config.batch_size} trajectories drawn uniformly from the last {capacity:,} "
           f"(FIFO); memory at most {capacity:,} x {nbytes:,} bytes = "
           f"{capacity * nbytes / 1e9:.2f} GB.")
  try:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    physical = None
  if physical and capacity * nbytes > 0.8 * physical:
    print_fn(f"Warning: a full replay ({capacity * nbytes / 1e9:.1f} GB) would take more than "
             f"80% of this machine's {physical / 1e9:.1f} GB; lower --replay_capacity.")
  replay = buffers.ReplayBuffer(capacity, seed=derive_seed(config.seed, _REPLAY_SEED_TAG))
  return buffers.ReplayMixer(next_trajectory, replay, config.batch_size, num_replayed)


def make_learner(config, agent, strategy=None):
  """The run's learner: IMPALA's (on `strategy`'s devices with several learners), or IMPACT's
  with --algorithm=impact (one learner: config.resolve checks)."""
  if config.algorithm == learner_lib.IMPACT:
    return learner_lib.ImpactLearner(agent, config.learner_config(), config.impact_config(),
                                     jit_compile=config.jit_compile_choice())
  return learner_lib.Learner(agent, config.learner_config(),
                             jit_compile=config.jit_compile_choice(), strategy=strategy)


def learner_steps(dataset, learner, config):
  """The learner's steps: (policy_versions [B], arguments of learner.update, number of new
  trajectories in the batch).

  IMPALA: one step per batch. IMPACT (Algorithm 1 lines 6, 7, 10): batches pass through a
  buffers.CircularBuffer of --circular_buffer_size batches, each used
  --circular_buffer_max_uses times; the target network's policy is evaluated on a batch when
  it enters. Only a batch's first use brings new trajectories (and of those, not the
  replayed ones): frames are counted once.
  """
  num_new = config.num_learners * config.batch_size - config.num_replayed_per_batch
  if config.algorithm != learner_lib.IMPACT:
    for policy_versions, *batch in dataset:
      yield policy_versions, batch, num_new
    return
  ring = buffers.CircularBuffer(config.circular_buffer_size, config.circular_buffer_max_uses)
  batches = iter(dataset)

  def enter():
    batch = next(batches, None)
    if batch is None:
      return None
    policy_versions, *inputs = batch
    return policy_versions, inputs + [learner.target_policy_logits(*inputs)]

  while (step := ring.next(enter)) is not None:
    (policy_versions, inputs), use = step
    yield policy_versions, inputs, num_new if use == 0 else 0


def make_checkpointer(config, agent, learner):
  """The run's checkpoints: the agent and the learner (optimizer slots, frame count; IMPACT's
  target network and step count)."""
  settings = {"level_name": config.level_name, "torso": agent.config.torso,
              "width": config.width, "height": config.height,
              "num_actions": agent.config.num_actions, "algorithm": config.algorithm}
  return checkpoints.Checkpointer(config.logdir, settings, agent=agent, learner=learner)


class LearnerQueues:
  """The trajectories waiting for the learners, one bounded queue per learner.

  With several learners (Figure 1 right), learner r trains on the trajectories of actors
  r, r + N, r + 2N, ...: `get` hands out B trajectories from learner 0's queue, then B from
  learner 1's, and so on, so a dataset batching N * B in order gives learner r (which takes
  slice r of the batch, learner.Learner) its own actors' trajectories. One learner: one FIFO
  queue. Blocking calls give up (put -> False, get -> None) once `stop_event` is set.
  """

  def __init__(self, num_learners, capacity, batch_size, stop_event):
    self._queues = [queue.Queue(maxsize=capacity) for _ in range(num_learners)]
    self._capacity = capacity
    self._batch_size = batch_size
    self._stop_event = stop_event
    self._taken = 0  # Only `get` (the dataset's one generator thread) changes it.

  def put(self, trajectory, actor_index):
    """Queues for learner actor_index % N; blocks while full; False if stopping."""
    target = self._queues[actor_index % len(self._queues)]
    while not self._stop_event.is_set():
      try:
        target.put(trajectory, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def get(self):
    """The next trajectory in batch order (see the class doc), or None once stopping."""
    source = self._queues[(self._taken // self._batch_size) % len(self._queues)]
    while not self._stop_event.is_set():
      try:
        trajectory = source.get(timeout=0.1)
        self._taken += 1
        return trajectory
      except queue.Empty:
        pass
    return None

  def fill(self):
    """Fraction of the queues' capacity in use."""
    return sum(q.qsize() for q in self._queues) / (len(self._queues) * self._capacity)


class _Stopping(Exception):
  """SIGTERM arrived (turned into an exception in the main thread)."""


def _raise_stopping(signum, frame):
  del frame
  raise _Stopping(signal.Signals(signum).name)


def _signal_name(interrupt):
  """What stopped the run, for its console: "SIGTERM" or "SIGINT" (Ctrl-C)."""
  return str(interrupt) if isinstance(interrupt, _Stopping) else "SIGINT"


def layout_settings(config, network_config):
  """What peers exchanging trajectories must share besides the tensors' shapes."""
  return dict(level_name=config.level_name, torso=network_config.torso,
              num_actions=network_config.num_actions, use_lstm=network_config.use_lstm,
              use_instruction=network_config.use_instruction)


def wire_fingerprint(config, network_config, signature):
  """What a learner and its actor processes must agree on (distributed.fingerprint)."""
  return distributed.fingerprint(distributed.wire_layout(signature),
                                 **layout_settings(config, network_config))


def connect_shared_replay(config, network_config, signature, agent_tag, print_fn):
  """The replay_service.ReplayClient of --shared_replay_address, connected as agent_tag.

  LASER section 5.4 across processes: the replay service's first agent sets the trajectory
  layout; this agent must have the same (else distributed.PeerRejected names what differs).

  Raises:
    replay_service.ReplayServiceUnavailable: no answer within --shared_replay_connect_secs.
    distributed.PeerRejected: the service refused this agent's layout.
  """
  client = replay_service.ReplayClient(
      config.shared_replay_address, agent_tag, signature,
      layout_settings(config, network_config), config.levels,
      connect_timeout_secs=config.shared_replay_connect_secs, print_fn=print_fn)
  print_fn(f"Sharing the LASER replay of {config.shared_replay_address} as agent "
           f"{agent_tag!r}.")
  return client


def ending_on_lost_replay(source, lost):
  """callable() -> source(), or None (the end of the stream) once the replay service is lost.

  A shared replay service that stays unreachable past the client's reconnection budget, or
  that came back and refuses this agent, ends the learner's input: the learner finishes its
  update and the run stops as at its frame budget, writing its checkpoint; the error is
  appended to `lost` for train to raise afterwards. Only the replay's contents are lost.
  """
  def next_item():
    try:
      return source()
    except (distributed.ServiceUnavailable, distributed.PeerRejected) as error:
      lost.append(error)
      return None
  return next_item


def train(config, environment_constructor=None, network_config=None, print_fn=print,
          listen_address=None, shared_replay=None, agent_tag=None):
  """Trains until config.total_environment_frames; resumes from logdir's checkpoint.

  Args:
    config: a resolved config.ExperimentConfig.
    environment_constructor: callable(level_name, seed, test_mode) -> (constructor, kwargs);
      default: the paper's environments (environments.environment_constructor).
    network_config: overrides config.network_config(num_actions) (tests use small frames).
    print_fn: where console lines go.
    listen_address: None: actor threads in this process (one machine). "host:port": the
      learner of a cluster: no local actors; actor processes (run_actor_process) send
      trajectories to a distributed.TrajectoryServer on this address.
    shared_replay: with --laser_replay, a buffers.EpisodeReplay shared with other agents'
      runs (LASER section 5.4; e.g. train() calls on threads of one process), or a
      replay_service.ReplayClient (agents in other processes); None: the replay service of
      --shared_replay_address if set, else a replay of this run's own (--replay_capacity
      unrolls).
    agent_tag: this run's tag on its episodes in the replay; default: --agent_tag, else the
      logdir's name.

  Returns:
    dict: num_env_frames, num_updates, recent_returns (level -> mean of recent returns),
    checkpoint (path of the last checkpoint written), trajectories: dict with produced
    (delivered to the learner's queues: by local actors, or admitted from actor processes),
    trained (in this run's updates), untrained (produced - trained - online_fill: queued or
    prefetched at the stop, never counted as frames), with LASER online_fill (online
    trajectories that filled replayed places, not counted as frames) when there were any, and
    for a cluster learner by_actor_process (actor process -> trajectories admitted) and
    duplicates (repeated messages dropped); with --laser_replay also replay: episodes_by_agent
    (held at the end, by agent tag; None: the shared service did not answer), sampled_by_agent
    (episodes this run replayed, by the tag of the agent that made them), num_replayed (replayed
    trajectories trained on) and num_online_fill (replayed places filled with online
    trajectories while the replay held no complete episode).

  Raises:
    checkpoints.CheckpointError: unusable checkpoint (nothing is started).
    ActorFailed: an actor thread hit an error (a checkpoint is written first).
    replay_service.ReplayServiceUnavailable: the shared replay service did not answer at the
      start, or was lost during training (a checkpoint is written first).
    distributed.PeerRejected: the shared replay service refused this agent's layout.
  """
  # Threads and several learners' devices: set up before TensorFlow initialises them.
  configure_threads(config)
  strategy = distributed.learner_strategy(config.num_learners)
  environment_constructor = environment_constructor or default_environment_constructor(config)
  levels = config.levels
  for level in sorted(set(levels)):  # Unknown level, DMLab missing: fail before any work.
    environment_constructor(level, 0, False)

  agent, first_env = build_agent(config, environment_constructor, network_config, strategy)
  closers = [first_env.close]
  try:
    learner = make_learner(config, agent, strategy)
    checkpointer = make_checkpointer(config, agent, learner)
    restored = checkpointer.restore()
    # The flags' learning rate, entropy cost and RMSProp epsilon win over the checkpoint's
    # (population-based training restarts members with changed ones, IMPALA Appendix F).
    learner.use_config_hyperparameters()
    if restored:
      print_fn(f"Resumed from {restored} at {int(learner.num_env_frames.numpy()):,} frames.")
    if shared_replay is not None and not config.laser_replay:
      raise ValueError("shared_replay is LASER's: it needs --laser_replay.")
    return _run(config, agent, learner, checkpointer, first_env, environment_constructor,
                closers, print_fn, listen_address, shared_replay,
                agent_tag or config.agent_tag
                or os.path.basename(os.path.normpath(config.logdir)))
  finally:
    for close in reversed(closers):
      close()


def train_sharing_replay(configs, replay_capacity, environment_constructor=None,
                         network_config=None, print_fn=print, seed=0):
  """Trains several agents at once in this process on one LASER episode replay.

  LASER section 5.4: the agents of a hyperparameter sweep run concurrently, each adds its
  experience to a common replay and samples uniformly from all of it (tagged by agent).
  Each agent is a `train` run on its own thread with its own actors, learner, logdir and
  checkpoints. The runs stop at their frame budgets; signals are not handled (interrupting
  the process loses the runs' final checkpoints, the periodic ones remain).

  Args:
    configs: dict agent tag -> resolved config.ExperimentConfig with laser_replay (e.g. a
      sweep over learning rate and entropy cost), each with its own logdir.
    replay_capacity: unrolls held by the shared replay (FIFO by episode).
    environment_constructor, network_config: as `train` (for every agent).
    print_fn: where console lines go, each prefixed with its agent's tag.
    seed: seeds the replay's sampling.

  Returns:
    (dict agent tag -> train's result, the buffers.EpisodeReplay).

  Raises:
    ValueError: a config without laser_replay, or two agents with one logdir.
    The first error of a run, once every run has stopped.
  """
  for tag, config in configs.items():
    if not config.laser_replay:
      raise ValueError(f"Agent {tag!r}: sharing a replay needs --laser_replay.")
  logdirs = [os.path.normpath(config.logdir) for config in configs.values()]
  if len(set(logdirs)) != len(logdirs):
    raise ValueError(f"Each agent needs its own logdir, got {logdirs}.")
  replay = buffers.EpisodeReplay(replay_capacity, seed=seed)

  def run(tag, config):
    return lambda: train(config, environment_constructor, network_config,
                         print_fn=lambda line: print_fn(f"[{tag}] {line}"),
                         shared_replay=replay, agent_tag=tag)
  results = run_concurrently({tag: run(tag, config) for tag, config in configs.items()},
                             thread_prefix="agent-")
  return results, replay


def _run(config, agent, learner, checkpointer, first_env, environment_constructor, closers,
         print_fn, listen_address, shared_replay, agent_tag):
  """The threads of `train`; see the module docstring."""
  levels = config.levels
  device = learner_device()
  monitor = monitoring.Monitor(config.logdir, sorted(set(levels)),
                               config.total_environment_frames, print_fn=print_fn)
  closers.append(monitor.close)
  policy = make_policy(config, agent, device)
  closers.append(policy.close)
  stop_event = threading.Event()
  num_learners = config.num_learners
  learner_queues = LearnerQueues(num_learners, config.queue_capacity, config.batch_size,
                                 stop_event)
  num_updates = [0]
  trained = [0]  # New trajectories trained on (not replayed, not used again by IMPACT).
  update_lock = threading.Lock()  # Checkpoints never see half an update.
  put_trajectory, next_trajectory = learner_queues.put, learner_queues.get
  if config.laser_replay:
    # LASER's replay keeps each actor's stream of unrolls: the queues carry the actor's index.
    put_trajectory = lambda trajectory, index: learner_queues.put((trajectory, index), index)

  def make_loop(index):
    return actor_loop_factory(config, index, policy, environment_constructor, first_env, 0,
                              monitor.record_episode, monitor.record_restart)

  signature = trajectory_signature(agent.config, config.unroll_length, policy)
  server = None
  ledger = None
  helpers = []
  if listen_address is None:
    actors = [actor_lib.ActorThread(i, make_loop(i), config.unroll_length,
                                    lambda t, i=i: put_trajectory(t, i),
                                    lambda: num_updates[0], stop_event)
              for i in range(config.num_actors)]
  else:
    actors = []
    server = distributed.TrajectoryServer(
        listen_address, distributed.wire_layout(signature),
        wire_fingerprint(config, agent.config, signature), agent.trainable_variables,
        capacity=config.queue_capacity)
    closers.append(server.close)
    ledger = distributed.DeliveryLedger(config.num_actors)
    print_fn(f"Learner listening on {listen_address}.")

    def pump():  # Remote trajectories into the queues local actors would use.
      profiling.name_this_thread("pump")
      while True:
        message = server.dequeue()
        if message is None:
          return
        header, trajectory = distributed.unflatten_message(message, signature, levels)
        if not ledger.admit(header):
          print_fn(f"Dropped a repeated trajectory from actor {header.actor_index} "
                   f"(sequence {header.sequence}): a send was retried after it arrived.")
        elif not put_trajectory(trajectory, header.actor_index):
          return
    helpers.append(threading.Thread(target=pump, name="trajectory-pump", daemon=True))

  def record_remote_episodes():
    for level_index, episode_return, episode_step in server.dequeue_episodes():
      if 0 <= level_index < len(levels):
        monitor.record_episode(levels[level_index], episode_return, episode_step)
  if config.algorithm == learner_lib.IMPACT:
    print_fn(f"IMPACT: circular buffer of N = {config.circular_buffer_size} batch(es), each "
             f"used K = {config.circular_buffer_max_uses} times; target network refreshed "
             f"every {config.target_update_period} learner steps.")
  replay_lost = []  # The shared replay service's error, once it is gone.
  if config.laser_replay:
    replay = shared_replay
    if replay is None and config.shared_replay_address:
      replay = connect_shared_replay(config, agent.config, signature, agent_tag, print_fn)
    elif replay is None:
      replay = buffers.EpisodeReplay(config.replay_capacity,
                                     seed=derive_seed(config.seed, _REPLAY_SEED_TAG))
    mixer = with_laser_replay(next_trajectory, config, agent, replay, agent_tag, print_fn,
                              device)
    source = ending_on_lost_replay(mixer, replay_lost)
  else:
    source = with_replay(next_trajectory, config, signature, print_fn)
  dataset = make_dataset(source, signature, num_learners * config.batch_size)
  # LASER section 5.1: the entropy cost on the batch's online trajectories only.
  entropy_mask = (learner_lib.online_mask(config.batch_size, config.num_replayed_per_batch)
                  if config.entropy_on_online_only else None)
  learner_error = []
  total_frames = config.total_environment_frames

  def learn():
    profiling.name_this_thread("learner")
    try:
      with tf.device(device):
        for policy_versions, batch, num_new in learner_steps(dataset, learner, config):
          with update_lock:
            if entropy_mask is None:
              stats = learner.update(*batch, num_new_trajectories=num_new)
            else:
              stats = learner.update(*batch, num_new_trajectories=num_new,
                                     entropy_mask=entropy_mask)
            num_updates[0] += 1
            trained[0] += num_new
          if server is not None:  # Actor processes read it with the parameters.
            server.parameter_version.assign(num_updates[0])
          stats = {k: v.numpy() for k, v in stats.items()}
          monitor.record_update(stats, num_updates[0] - 1 - policy_versions.numpy())
          if stats["num_env_frames"] >= total_frames or stop_event.is_set():
            break
    except BaseException as error:  # pylint: disable=broad-except
      learner_error.append(error)
    finally:
      stop_event.set()

  learner_thread = threading.Thread(target=learn, name="learner", daemon=True)
  frames = lambda: int(learner.num_env_frames.numpy())
  # Signals reach the main thread only; a run on another thread (several agents in one
  # process, shared replay) leaves them to its caller.
  on_main_thread = threading.current_thread() is threading.main_thread()
  if on_main_thread:
    previous_handler = signal.signal(signal.SIGTERM, _raise_stopping)
  stop_reason = "frame budget reached"
  last_checkpoint = checkpointer.latest
  try:
    if frames() >= total_frames:
      print_fn(f"Nothing to do: {frames():,} frames already reach --total_environment_frames.")
      return dict(num_env_frames=frames(), num_updates=0,
                  recent_returns=monitor.recent_returns(), checkpoint=last_checkpoint,
                  trajectories=dict(produced=0, trained=0, untrained=0))
    monitor.start(frames())
    for thread in actors + helpers:
      thread.start()
    if actors:
      closers.remove(first_env.close)  # Actor 0 owns it now.
    learner_thread.start()
    next_log = time.monotonic() + config.log_secs
    next_checkpoint = time.monotonic() + config.checkpoint_secs
    while not stop_event.wait(min(0.5, config.log_secs)):
      now = time.monotonic()
      failed = [a for a in actors if a.error is not None]
      if failed:
        stop_reason = f"{failed[0].name} failed"
        break
      if server is not None:
        record_remote_episodes()
      if now >= next_log:
        monitor.write(frames(), learner_queues.fill())
        next_log = now + config.log_secs
      if now >= next_checkpoint:
        with update_lock:
          last_checkpoint = checkpointer.save(frames())
        print_fn(f"Checkpoint {last_checkpoint}")
        next_checkpoint = now + config.checkpoint_secs
  except (KeyboardInterrupt, _Stopping) as interrupt:
    stop_reason = f"interrupted ({_signal_name(interrupt)})"
  finally:
    # A SIGTERM now (a second one, or one as the budget is reached) must not cut the final
    # checkpoint short; the previous handler comes back once it is written.
    if on_main_thread:
      signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if replay_lost:
      stop_reason = "the shared replay service was lost"
    stop_event.set()
    policy.close()  # Wakes actors waiting for an action.
    if server is not None:
      server.close()
      closed_at = time.monotonic()
    if learner_thread.ident is not None:  # Started.
      learner_thread.join(_JOIN_TIMEOUT_SECS)
    for thread in actors + helpers:
      if thread.ident is not None:
        thread.join(_JOIN_TIMEOUT_SECS)
    try:
      last_checkpoint = checkpointer.save(frames())
    finally:
      if on_main_thread:
        signal.signal(signal.SIGTERM, previous_handler)
    monitor.write(frames(), learner_queues.fill())
    accounts = _trajectory_accounts(actors, ledger, server, trained[0],
                                    mixer.num_online_fill if config.laser_replay else 0)
    for line in _account_lines(accounts):
      print_fn(line)
    print_fn(f"Stopped: {stop_reason}. Checkpoint {last_checkpoint} at {frames():,} frames.")
    if server is not None:
      # Actor processes learn that training is over from their next send (the closed queue
      # refuses it); the server lives as long as this process, so let them hear it.
      time.sleep(max(0.0, _ACTOR_NOTICE_SECS - (time.monotonic() - closed_at)))

  failed = [a for a in actors if a.error is not None]
  if failed:
    raise ActorFailed(f"{failed[0].name} stopped with {type(failed[0].error).__name__}: "
                      f"{failed[0].error}. Training stopped; the checkpoint "
                      f"{last_checkpoint} holds its state.") from failed[0].error
  if replay_lost:
    raise type(replay_lost[0])(f"{replay_lost[0]} Training stopped; the checkpoint "
                               f"{last_checkpoint} holds its state.") from replay_lost[0]
  if learner_error and not isinstance(learner_error[0], tf.errors.CancelledError):
    raise learner_error[0]
  result = dict(num_env_frames=frames(), num_updates=num_updates[0],
                recent_returns=monitor.recent_returns(), checkpoint=last_checkpoint,
                trajectories=accounts)
  if config.laser_replay:
    try:
      held = replay.episodes_by_agent()
    except (distributed.ServiceUnavailable, distributed.PeerRejected) as error:
      # The run itself is complete and checkpointed; only this statistic is missing.
      print_fn(f"The shared replay's final contents are unknown: {error}")
      held = None
    result["replay"] = dict(episodes_by_agent=held,
                            sampled_by_agent=dict(mixer.sampled_agents),
                            num_replayed=mixer.num_replayed,
                            num_online_fill=mixer.num_online_fill)
  return result


def _trajectory_accounts(actors, ledger, server, trained, online_fill=0):
  """Where this run's trajectories went (train's `trajectories` result).

  online_fill: LASER's replayed places filled with online trajectories (buffers.EpisodeMixer):
  trained on (unless prefetched at the stop) but not counted as frames (README, Departures).
  """
  if ledger is None:
    produced = sum(a.num_trajectories for a in actors)
    accounts = dict(produced=produced)
  else:
    # Still in the server's queue at the stop (arrived, never admitted or trained on).
    accounts = dict(produced=ledger.total + server.size(),
                    by_actor_process=dict(ledger.received),
                    duplicates=dict(ledger.duplicates))
  accounts.update(trained=trained, untrained=accounts["produced"] - trained - online_fill)
  if online_fill:
    accounts["online_fill"] = online_fill
  return accounts


def _account_lines(accounts):
  lines = [f"Trajectories: {accounts['produced']} delivered, {accounts['trained']} trained on, "
           f"{accounts['untrained']} not trained on (queued or prefetched at the stop; not "
           f"counted as frames)."]
  if accounts.get("online_fill"):
    lines.append(f"  {accounts['online_fill']} filled replayed places while the replay held no "
                 f"complete episode (not counted as frames).")
  if "by_actor_process" in accounts:
    for task in sorted(accounts["by_actor_process"]):
      line = f"  actor process {task}: {accounts['by_actor_process'][task]} trajectories"
      if accounts["duplicates"].get(task):
        line += f", {accounts['duplicates'][task]} repeated messages dropped"
      lines.append(line)
  return lines


# The learner is gone: it finished (its queue is closed: CancelledError) or did not come back
# within the client's reconnection budget (LearnerUnavailable).
_LEARNER_GONE = (tf.errors.CancelledError, distributed.LearnerUnavailable)


def run_actor_process(config, learner_address, task, environment_constructor=None,
                      network_config=None, print_fn=print, connect_timeout_secs=300.0):
  """An actor process of a cluster: --num_actors actor threads feeding a remote learner.

  The threads' inference is batched on this host (dynamic_batching); the local network is
  refreshed from the learner at the start of every unroll (distributed.ParameterSync).
  Levels and seeds follow the global actor number task * num_actors + i, so a cluster
  assigns levels round-robin like one machine does.

  Returns:
    dict: num_trajectories sent, stop_reason.

  Raises:
    distributed.LearnerUnavailable: no learner answered within connect_timeout_secs.
    distributed.PeerRejected: the learner refused this actor.
    ActorFailed: an actor thread hit an error other than an environment crash.
  """
  configure_threads(config)
  environment_constructor = environment_constructor or default_environment_constructor(config)
  levels = config.levels
  for level in sorted(set(levels)):
    environment_constructor(level, 0, False)
  first_index = task * config.num_actors
  agent, first_env = build_agent(config, environment_constructor, network_config)
  closers = [first_env.close]
  try:
    policy = make_policy(config, agent, learner_device())
    closers.append(policy.close)
    signature = trajectory_signature(agent.config, config.unroll_length, policy)
    client = distributed.LearnerClient(
        learner_address, distributed.wire_layout(signature),
        wire_fingerprint(config, agent.config, signature), name=f"actor-{task}",
        connect_timeout_secs=connect_timeout_secs, print_fn=print_fn)
    sync = distributed.ParameterSync(client, agent.trainable_variables)
    sync.refresh()
    print_fn(f"Actor task {task}: {config.num_actors} actors connected to {learner_address}.")
    return _run_actors(config, levels, first_index, first_env, closers, policy, client, sync,
                       environment_constructor, print_fn)
  finally:
    for close in reversed(closers):
      close()


def _run_actors(config, levels, first_index, first_env, closers, policy, client, sync,
                environment_constructor, print_fn):
  """The threads of run_actor_process."""
  stop_event = threading.Event()
  learner_gone = []

  def on_learner_gone(error):
    learner_gone.append(error)
    stop_event.set()

  delivered = []
  incarnation = distributed.new_incarnation()
  sequences = {}  # Actor index -> messages sent so far (its next sequence number).

  def put_trajectory(trajectory, actor_index):
    header = distributed.MessageHeader(levels.index(trajectory.level_name), actor_index,
                                       incarnation, sequences.get(actor_index, 0))
    try:
      client.send_trajectory(header, trajectory)
      sequences[actor_index] = header.sequence + 1
      if not delivered:
        delivered.append(True)
        print_fn(f"Actor process {first_index // config.num_actors}: first trajectory "
                 f"delivered to the learner.")
      return True
    except _LEARNER_GONE as error:
      on_learner_gone(error)
      return False

  def policy_version():
    try:
      return sync.refresh()
    except _LEARNER_GONE as error:
      on_learner_gone(error)
      raise

  def report_episode(level, episode_return, episode_step):
    try:
      client.report_episode(levels.index(level), episode_return, episode_step)
    except _LEARNER_GONE as error:
      on_learner_gone(error)

  def make_loop(index):
    return actor_loop_factory(
        config, index, policy, environment_constructor, first_env, first_index,
        report_episode, lambda lvl, e: print_fn(f"Environment for {lvl} restarted: {e}"))

  actors = [actor_lib.ActorThread(i, make_loop(i), config.unroll_length,
                                  lambda t, i=i: put_trajectory(t, i), policy_version,
                                  stop_event)
            for i in range(first_index, first_index + config.num_actors)]
  previous_handler = signal.signal(signal.SIGTERM, _raise_stopping)
  stop_reason = "learner gone"
  try:
    for thread in actors:
      thread.start()
    closers.remove(first_env.close)  # Its actor owns it now.
    while not stop_event.wait(0.5):
      if any(a.error is not None for a in actors):
        stop_reason = "an actor failed"
        break
  except (KeyboardInterrupt, _Stopping) as interrupt:
    stop_reason = f"interrupted ({_signal_name(interrupt)})"
  finally:
    signal.signal(signal.SIGTERM, previous_handler)
    stop_event.set()
    policy.close()
    for thread in actors:
      thread.join(_JOIN_TIMEOUT_SECS)
  sent = sum(a.num_trajectories for a in actors)
  if learner_gone:
    print_fn(f"The learner at {client.address} is gone "
             f"({type(learner_gone[0]).__name__}); this actor process stops after sending "
             f"{sent} trajectories.")
  failed = [a for a in actors if a.error is not None and not learner_gone]
  if failed:
    raise ActorFailed(f"{failed[0].name} stopped with {type(failed[0].error).__name__}: "
                      f"{failed[0].error}.") from failed[0].error
  print_fn(f"Actor process stopped: {stop_reason}; {sent} trajectories sent.")
  return dict(num_trajectories=sent, stop_reason=stop_reason)
