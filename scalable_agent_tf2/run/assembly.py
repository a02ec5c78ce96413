"""A run's parts built from its settings: the agent, its learner, checkpoints, the actors'
policy and environments, and the trajectory layout they exchange.

Training (training.py), remote actors (actor_process.py) and evaluation (evaluation.py) build
their runs from these, so a checkpoint written by one is read by the others and a trajectory
made by one fits the others' pipelines.
"""
import contextlib
import dataclasses
import threading

import numpy as np
import tensorflow as tf

from scalable_agent_tf2 import environments
from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration.settings import IMPACT
from scalable_agent_tf2.configuration.settings import TEST
from scalable_agent_tf2.configuration.settings import TRAIN
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from scalable_agent_tf2.transport import wire
from scalable_agent_tf2.utils import quiet_tensorflow


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


def configure_threads(config, print_fn=print):
  """Applies --intra_op_threads if TensorFlow has not started yet (experiment.py sets it as
  it starts TensorFlow; then this checks). A process whose TensorFlow already runs (a
  library caller, a test) keeps its own count, and is told so: the count is a matter of
  speed, not of results. --gpu_memory likewise (a no-op where it is already applied; a
  config without it, a caller's own, leaves TensorFlow's memory as it is)."""
  gpu_memory = getattr(config, "gpu_memory", None)
  try:
    if gpu_memory is not None:
      quiet_tensorflow.configure_gpu_memory(gpu_memory, tf)
  except RuntimeError:
    print_fn(f"Note: TensorFlow already uses the GPU in this process; --gpu_memory="
             f"{gpu_memory} applies only when set before TensorFlow's first op (as "
             f"experiment.py does). Continuing with the memory it has.")
  wanted = config.intra_op_threads
  current = tf.config.threading.get_intra_op_parallelism_threads()
  if not wanted or current == wanted:
    return
  try:
    tf.config.threading.set_intra_op_parallelism_threads(wanted)
  except RuntimeError:
    print_fn(f"Note: TensorFlow already runs in this process with "
             f"{current or 'its default number of'} threads per op; --intra_op_threads="
             f"{wanted} applies only when set before TensorFlow starts (as experiment.py "
             f"does). Continuing with the running count.")


def default_environment_constructor(config):
  """callable(level_name, seed, test_mode) -> (constructor, kwargs) for the run's levels."""
  options = config.family.environment_options(config)

  def constructor(level_name, seed, test_mode):
    return environments.environment_constructor(level_name, seed=seed, test_mode=test_mode,
                                                **options)
  return constructor


def checked_environment_constructor(config, environment_constructor=None, test_mode=False):
  """The run's environment constructor (default: its levels' family's; evaluation.evaluate's
  caller may give another), once it has built the arguments of every level: an unknown level
  or a missing DeepMind Lab fails here, before any work."""
  environment_constructor = environment_constructor or default_environment_constructor(config)
  for level in sorted(set(config.levels)):
    environment_constructor(level, 0, test_mode)
  return environment_constructor


def environment_timeouts(config, level_name):
  """(step, reset) seconds an environment of `level_name` may take (--env_step_timeout_secs,
  --env_reset_timeout_secs; a family whose steps may reset slowly gets the reset's for both)."""
  family = families.find_family(level_name)
  step, reset = config.env_step_timeout_secs, config.env_reset_timeout_secs
  if family is not None and family.steps_may_reset_slowly:
    step = max(step, reset)
  return step, reset


def start_environment(environment_constructor, level_name, seed, test_mode=False,
                      timeouts=None):
  """An environment in a subprocess; timeouts: (step, reset) seconds (None: the process's
  generous default for both)."""
  constructor, kwargs = environment_constructor(level_name, seed, test_mode)
  limits = {} if timeouts is None else dict(zip(("timeout", "reset_timeout"), timeouts))
  return environments.EnvironmentProcess(constructor, kwargs=kwargs, **limits)


def environment_group_size(config):
  """Environments per actor thread: --envs_per_actor where environments run in groups in
  this process (config.uses_environment_groups), else 1 (one environment process per actor)."""
  return config.envs_per_actor if config.uses_environment_groups else 1


def group_factory(config, environment_constructor, level_name, seeds, test_mode=False):
  """callable(attempt) -> one actor's environments for EnvironmentLoop, run as the level's
  family decides for the run's settings (Family.runs_as, environments/families):

    VECTOR: the family's vector group of len(seeds(attempt)) environments in this process
      (Atari: an AtariVectorGroup stepped by ale-py's C++ threads; `environment_constructor`
      is for environment processes and is not used);
    IN_PROCESS_GROUP: a list of len(seeds(attempt)) environments built in this process by
      `environment_constructor`, stepped one after another by the actor's thread (MuJoCo,
      cheap gymnasium environments: a step costs far less than a process's round trip);
    OWN_PROCESS: one environment process (seeds(attempt) has one seed).

  Args:
    seeds: callable(attempt) -> list of ints, one per environment.
  """
  runs_as = config.family.runs_as(config)
  if runs_as == family_base.VECTOR:
    family = config.family
    return lambda attempt: family.vector_group(config, level_name, seeds(attempt), test_mode)
  if runs_as == family_base.IN_PROCESS_GROUP:
    return lambda attempt: start_in_process(environment_constructor, level_name, seeds(attempt),
                                            test_mode)
  if runs_as != family_base.OWN_PROCESS:
    raise ValueError(f"{level_name}: its family says its environments run as {runs_as!r}; "
                     f"families/base.py names the ways (OWN_PROCESS, IN_PROCESS_GROUP, VECTOR).")

  def start(attempt):
    (seed,) = seeds(attempt)
    return start_environment(environment_constructor, level_name, seed, test_mode,
                             environment_timeouts(config, level_name))
  return start


def start_in_process(environment_constructor, level_name, seeds, test_mode=False):
  """A list of environments of level_name built in this process, one per seed (all closed
  if one fails to build)."""
  envs = []
  try:
    for seed in seeds:
      constructor, kwargs = environment_constructor(level_name, seed, test_mode)
      envs.append(constructor(**kwargs))
  except BaseException:
    actor_lib.close_all(envs)
    raise
  return envs


def num_tasks(config):
  """The tasks of the run's value outputs and PopArt statistics: its levels with --popart on a
  suite (checkpoints.popart_tasks: per-task PopArt, Hessel et al. 2019), else 1."""
  return len(checkpoints.popart_tasks(config) or ()) or 1


def build_agent(config, environment_constructor, strategy=None):
  """(agent, first environment) for a run: the network is sized by the first level's spec.

  The environment (of levels[0], seed of actor 0) is returned for actor 0 to use. With a
  strategy (several learners) the agent's variables are mirrored on its devices. An agent
  that reads observation vectors (MuJoCo, gymnasium's Box (O,), with discrete or continuous
  actions: action_spaces.takes_observation_filter) is built with the run's observation filter,
  `agent.observation_filter` (action_spaces.ObservationFilter: checkpointed with the agent;
  updated in training, frozen in test mode; filter_sync.py syncs it with actor processes).
  """
  env = start_environment(environment_constructor, config.levels[0],
                          derive_seed(config.seed, 0, 0),
                          timeouts=environment_timeouts(config, config.levels[0]))
  try:
    spec = env.spec
    network_config = config.family.network_config(config, spec)  # As the level's family chooses.
    if num_tasks(config) > 1:  # Hessel et al. 2019: a normalised value output per task.
      network_config = dataclasses.replace(network_config, num_value_outputs=num_tasks(config))
    if tuple(spec.frame_shape) != tuple(network_config.frame_shape):
      raise ValueError(f"The environment's frames are {spec.frame_shape}, the network "
                       f"expects {network_config.frame_shape}.")
    if distributions.for_spec(spec).discrete != network_config.action_distribution.discrete:
      raise ValueError(f"The environment's spec {spec} and the network config "
                       f"{network_config} are not for the same kind of actions.")
    observation_filter = (action_spaces.ObservationFilter(spec.frame_shape[0],
                                                          update=config.mode == TRAIN)
                          if action_spaces.takes_observation_filter(network_config) else None)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
      agent = networks.Agent(network_config, seed=config.seed,
                             observation_filter=observation_filter)
    return agent, env
  except BaseException:
    env.close()
    raise


def make_policy(config, agent, device):
  """The actors' policy: batched across actor threads (default) or one forward pass each
  (--batched_inference=false; --repeatable, whose passes must not depend on which actors
  wait together: run/repeatable.py)."""
  if config.batched_inference and not config.repeatable:
    return policies.BatchedPolicy(agent, device=device)
  return policies.PerActorPolicy(agent, device=device)


def make_learner(config, agent, strategy=None):
  """The run's learner: IMPALA's (on `strategy`'s devices with several learners), or IMPACT's
  with --algorithm=impact (one learner: config.resolve checks)."""
  if config.algorithm == IMPACT:
    return impact.ImpactLearner(agent, config.learner_config(), config.impact_config(),
                                     jit_compile=config.jit_compile_choice(),
                                     kl_target=config.kl_target)
  return learner_lib.Learner(agent, config.learner_config(),
                             jit_compile=config.jit_compile_choice(), strategy=strategy,
                             entropy_mask=laser.entropy_mask(config))


def checkpoint_settings(config, agent):
  """What a checkpoint's network depends on (stored beside it, compared at restore): the run's
  checkpoints.SHAPE_SETTINGS, the torso the network was built with, the action layout, and
  with per-task PopArt its levels in order (checkpoints.TASKS_SETTING: absent with one task,
  as before it was stored); and, stored but not compared, checkpoints.POLICY_SETTINGS (what
  else shapes the network and its environment, for a policy loaded outside the run: policy.py)."""
  stored = {**{name: getattr(config, name) for name in checkpoints.SHAPE_SETTINGS},
            "torso": agent.config.torso,
            **agent.config.action_distribution.layout(),
            **{name: getattr(config, name) for name in checkpoints.POLICY_SETTINGS}}
  tasks = checkpoints.popart_tasks(config)
  if tasks:
    stored[checkpoints.TASKS_SETTING] = tasks
  return stored


def restore_agent(config, environment_constructor, restore_from="", make_newest=True):
  """(agent, learner, checkpoint path): the agent built as training builds it (build_agent)
  at logdir's newest checkpoint, or at `restore_from` (make_newest: Checkpointer.restore's),
  for test mode and the policy's readers (evaluation.py, export_policy.py, policy.py). The
  learner holds what the checkpoint keeps besides the agent (its frame count); no update runs.

  Raises:
    checkpoints.CheckpointError: no usable checkpoint there.
  """
  agent, probe_env = build_agent(config, environment_constructor)
  probe_env.close()
  learner = make_learner(config, agent)
  path = make_checkpointer(config, agent, learner).restore(
      required=True, restore_from=restore_from, make_newest=make_newest)
  return agent, learner, path


def make_checkpointer(config, agent, learner):
  """The run's checkpoints (checkpoints.run_checkpointer): the agent and the learner; of a
  policy-only logdir (export_policy.py), the agent and the frame count for test mode only."""
  return checkpoints.run_checkpointer(config.logdir, checkpoint_settings(config, agent), agent,
                                      learner, test_mode=config.mode == TEST)


def actor_loop_factory(config, index, policy, environment_constructor, first_env,
                       first_env_index, on_episode, on_restart, restart_policy=None,
                       call_clock=None, attempt_offset=0):
  """callable() -> the EnvironmentLoop of actor `index`, to be called on the actor's thread.

  Actor `index` plays level index % len(levels) (section 5.3: levels assigned round-robin) in
  G = environment_group_size(config) environments, streams index * G + slot (what
  ActorThread's put_trajectory receives); each environment's seeds and action generator are
  derived from (seed, stream), so with G = 1 stream and actor number coincide. Actor
  `first_env_index` starts with `first_env` (already running, from build_agent), or closes it
  when its environments run in a group in this process.

  call_clock: a watchdog.CallClock that times the calls of environments run in this process
  (groups, vectors; those in processes have their own timeouts); attempt_offset: added to the
  attempt that seeds the environments (a replacement actor's differ from the one replaced).
  """
  levels = config.levels
  level = levels[index % len(levels)]
  if num_tasks(config) > 1:  # Its task's value output (policies.TaskBaseline).
    policy = policies.TaskBaseline(policy, levels.index(level))
  size = environment_group_size(config)
  streams = range(index * size, (index + 1) * size)
  start = group_factory(config, environment_constructor, level,
                        lambda attempt: [derive_seed(config.seed, s, attempt) for s in streams])

  def factory(attempt):
    if index == first_env_index and attempt == 0:
      if not config.uses_environment_groups:
        return first_env
      first_env.close()
    envs = start(attempt + attempt_offset)
    if call_clock is not None and config.uses_environment_groups:
      envs = watchdog.timed(envs, call_clock)
    return envs
  rngs = [np.random.default_rng([config.seed, s, 1]) for s in streams]
  return lambda: actor_lib.EnvironmentLoop(factory, policy, rngs, level, on_episode=on_episode,
                                           on_restart=on_restart, restart_policy=restart_policy)


def trajectory_signature(network_config, unroll_length, policy):
  """tf.TensorSpecs of one trajectory as the dataset yields it (no level name).

  The agent outputs hold the action distribution's actions (int32 [] categorical, float32 [A]
  Gaussian: unclipped) and mu's flat parameters [P].
  """
  steps = unroll_length + 1
  spec = lambda shape, dtype: tf.TensorSpec([steps] + list(shape), dtype)
  state = tf.nest.map_structure(lambda s: tf.TensorSpec(np.shape(s), tf.float32),
                                policy.initial_state())
  distribution = network_config.action_distribution
  env_outputs = EnvOutput(
      reward=spec([], tf.float32), done=spec([], tf.bool),
      # The network config names its observations' dtype (uint8 frames, float32 vectors).
      observation=Observation(frame=spec(network_config.frame_shape,
                                         tf.as_dtype(network_config.frame_dtype)),
                              instruction=spec([language.MAX_INSTRUCTION_WORDS], tf.int32)),
      episode_return=spec([], tf.float32), episode_step=spec([], tf.int32),
      truncated=spec([], tf.bool))
  agent_outputs = AgentOutput(
      action=spec(distribution.action_shape, tf.as_dtype(distribution.action_dtype)),
      policy_params=spec([distribution.param_size], tf.float32),
      baseline=spec([], tf.float32))
  return (tf.TensorSpec([], tf.int64), state, env_outputs, agent_outputs)


def layout_settings(config, network_config):
  """What peers exchanging trajectories must share besides the tensors' shapes."""
  return dict(level_name=config.level_name, torso=network_config.torso,
              **network_config.action_distribution.layout(),
              use_lstm=network_config.use_lstm,
              use_instruction=network_config.use_instruction)


def wire_fingerprint(config, network_config, signature):
  """What a learner and its actor processes must agree on (wire.fingerprint)."""
  return wire.fingerprint(wire.message_layout(signature),
                          **layout_settings(config, network_config))
