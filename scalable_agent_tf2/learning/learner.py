"""The learner's update: one tf.function (XLA-compiled on GPUs) per batch of trajectories.

    unroll the network over [T+1, B] -> V-trace -> losses -> gradients -> (clip) -> RMSProp

`Learner` is IMPALA's; IMPACT's learner (a target network and the clipped target-worker
surrogate) is impact.ImpactLearner, a subclass.

The loss terms of a batch (and how its steps are indexed) are losses.py's. A batch's shapes
and types are checked once, at the update's entry (check_batch, with messages that name the
field); V-trace's functions assert their ranks themselves.
"""
import contextlib

import tensorflow as tf

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import optimizers
from scalable_agent_tf2.learning import popart as popart_lib
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation


def default_jit_compile():
  """XLA where it is the fast path: on a GPU. On CPUs, TensorFlow's own (oneDNN) kernels run
  the update 2-3x faster than XLA's CPU backend (benchmarks/RESULTS.md, "Learner update")."""
  return bool(tf.config.list_logical_devices("GPU"))


class Learner(tf.Module):
  """Owns the optimizer state and the frame counter; `update` trains on one batch."""

  def __init__(self, agent, config, jit_compile=None, name="learner", strategy=None,
               entropy_mask=None):
    """Args:
      agent: a networks.Agent (its variables are trained in place, so actors that share the
        object always act with the latest parameters).
      config: a LearnerConfig.
      jit_compile: compile the update with XLA; None chooses default_jit_compile().
      name: module name.
      strategy: None for one learner, or a tf.distribute strategy (e.g. MirroredStrategy over
        several devices) for synchronous data-parallel learners (the paper's "8 learners",
        section 3.1): each replica takes an equal slice of the batch, the gradients of the
        summed losses are summed across replicas (so one update equals one learner's update
        on the whole batch) and one RMSProp step is applied to the mirrored variables. Build
        the agent under strategy.scope().
      entropy_mask: None (the entropy cost on every trajectory), or float32 [B]: 1 for the
        trajectories of every batch the entropy cost applies to (LASER section 5.1: online
        ones only; laser.entropy_mask). One learner only.
    """
    super().__init__(name=name)
    if entropy_mask is not None:
      if strategy is not None:
        raise ValueError("entropy_mask needs a single learner (LASER replay refuses several).")
      entropy_mask = tf.convert_to_tensor(entropy_mask, tf.float32)
    self.entropy_mask = entropy_mask
    if jit_compile is None:
      jit_compile = default_jit_compile()
    # XLA's unroll takes static shapes (networks.Agent.unroll); the actors, which share the
    # agent, keep theirs.
    self.jit_compile = jit_compile
    self.agent = agent
    self.config = config
    self.strategy = strategy
    self._variables = tuple(agent.trainable_variables)
    self.num_tasks = agent.config.num_value_outputs
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope, self.name_scope:
      self.optimizer = optimizers.RMSProp(self._variables, decay=config.decay,
                                          momentum=config.momentum, epsilon=config.epsilon,
                                          initial_mean_square=(
                                              config.rmsprop_initial_mean_square))
      # Frames consumed so far: drives the learning-rate schedule and resumption.
      self.num_env_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="num_env_frames")
      # Variables (not constants) so population-based training (Appendix F) can change them
      # without recompiling, and checkpoints carry them.
      self.learning_rate = tf.Variable(config.learning_rate, dtype=tf.float32,
                                       trainable=False, name="learning_rate")
      self.entropy_cost = tf.Variable(config.entropy_cost, dtype=tf.float32,
                                      trainable=False, name="entropy_cost")
      self.popart = _popart_of(agent, config, strategy)  # Checkpointed with the learner.
    if strategy is None:
      self._compiled_update = tf.function(self._update, jit_compile=jit_compile)
    else:
      # XLA compiles each replica's computation; the cross-replica sum stays outside it.
      self._replica_gradients = tf.function(self._loss_gradients_and_targets,
                                            jit_compile=jit_compile)
      self._compiled_update = tf.function(self._distributed_update)

  def use_config_hyperparameters(self):
    """Sets the hyperparameters held in variables (learning rate, entropy cost, RMSProp
    epsilon) to this learner's config. Training calls it after restoring a checkpoint, so the
    flags of the run win over the values saved with the checkpoint: population-based training
    (IMPALA Appendix F) restarts a member from a checkpoint with changed hyperparameters."""
    self.learning_rate.assign(self.config.learning_rate)
    self.entropy_cost.assign(self.config.entropy_cost)
    self.optimizer.epsilon.assign(self.config.epsilon)

  def update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories=None,
             tasks=None):
    """One learner step on a batch of trajectories.

    Args:
      agent_state: the core state at each trajectory's first step (LSTMState of [B, 256],
        or () for a feed-forward agent).
      env_outputs: EnvOutput of [T+1, B, ...] tensors; observation.instruction holds word
        ids (language.hash_instructions) when the agent uses language.
      agent_outputs: AgentOutput of [T+1, B, ...] tensors from the actors (the agent
        config's action_distribution fixes its action and policy_params shapes).
      num_new_trajectories: how many of the B trajectories are new environment experience
        (the rest were trained on before: replayed); None means all B. Only new ones count
        as environment frames (the frame budget and the learning-rate schedule).
      tasks: int32 [B], each trajectory's task (its level's index in the run's levels,
        run/input_pipeline.py): which value output and PopArt statistics it takes when the
        agent has one per task; unused (may be None) with one.

    Returns:
      dict of scalars: total_loss, pg_loss, baseline_loss, entropy_loss, learning_rate (the
      one used for this step), grad_norm (before clipping), parameter_norm (the trainable
      variables' global norm after the step), num_env_frames (after the step),
      update_skipped (bool: the loss or gradient norm was not finite and nothing changed,
      see _apply); with a trust region also trust_region_rejected (number of rejected
      steps); with PopArt popart_mu and popart_sigma ([N] with N tasks).
    """
    env_outputs, agent_outputs = check_batch(self.agent.config, agent_state, env_outputs,
                                             agent_outputs)
    num_new = checked_num_new_trajectories(num_new_trajectories, env_outputs)
    tasks = checked_tasks(tasks, env_outputs, self.num_tasks)
    if self.entropy_mask is not None and not self.entropy_mask.shape.is_compatible_with(
        env_outputs.reward.shape[1:]):
      raise ValueError(f"The learner's entropy_mask has shape {self.entropy_mask.shape}, the "
                       f"batch [B] = {env_outputs.reward.shape[1:]}.")
    if self.strategy is not None:
      replicas = self.strategy.num_replicas_in_sync
      batch_size = env_outputs.reward.shape[1]
      if batch_size is not None and batch_size % replicas:
        raise ValueError(f"The batch size {batch_size} must be a multiple of the number of "
                         f"learners ({replicas}): each takes an equal slice.")
      return self._compiled_update(agent_state, env_outputs, agent_outputs, num_new)
    return self._compiled_update(agent_state, env_outputs, agent_outputs, num_new, tasks)

  def _popart_values(self, learner_outputs, tasks):
    """The unroll's outputs with V(x) for the baseline (the network's is n(x), PopArt's
    normalised one: each trajectory reads its task's output and statistics), and each
    trajectory's scale for the losses with several tasks (None: one task's losses are scaled
    after the sums, popart.scale_loss_terms, as the single-task learner always did)."""
    if self.popart is None:
      return learner_outputs, None
    outputs = learner_outputs._replace(
        baseline=self.popart.values(learner_outputs.baseline, tasks))
    return outputs, (self.popart.scale(tasks) if self.num_tasks > 1 else None)

  def _loss_gradients_and_targets(self, agent_state, env_outputs, agent_outputs, tasks=None):
    """(total loss, loss terms, gradients) of one batch (losses summed over T and B), and
    V-trace's targets v_s [T, B] with the mask [T, B] of the steps they count on (PopArt's
    statistics move towards them after the update)."""
    config = self.config
    with tf.GradientTape() as tape:
      learner_outputs, _ = self.agent.unroll(agent_outputs.action, env_outputs, agent_state,
                                             static_shapes=self.jit_compile)
      learner_outputs, value_scale = self._popart_values(learner_outputs, tasks)
      terms, returns = losses.impala_loss_terms(self.agent.config.action_distribution,
                                                learner_outputs, env_outputs, agent_outputs,
                                                config, self.entropy_mask, value_scale)
      if self.popart is not None and value_scale is None:
        terms = popart_lib.scale_loss_terms(terms, self.popart.sigma)
      total_loss = (terms["pg_loss"] + config.baseline_cost * terms["baseline_loss"]
                    + self.entropy_cost * terms["entropy_loss"])
    targets = (returns.vs, losses.kept_transitions(env_outputs.truncated))
    return total_loss, terms, tape.gradient(total_loss, self._variables), targets

  def _update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories,
              tasks=None):
    total_loss, terms, gradients, (vs, kept) = self._loss_gradients_and_targets(
        agent_state, env_outputs, agent_outputs, tasks)
    stats = self._apply(total_loss, terms, gradients, env_outputs.reward,
                        num_new_trajectories)
    if self.popart is not None:
      stats.update(tf.cond(stats["update_skipped"], self.popart.statistics,
                           lambda: self.popart.update(vs, kept, tasks)))
    return stats

  def _distributed_update(self, agent_state, env_outputs, agent_outputs,
                          num_new_trajectories):
    """The update with the batch split over the strategy's replicas (see __init__)."""
    strategy = self.strategy

    def replica_step(agent_state, env_outputs, agent_outputs):
      context = tf.distribute.get_replica_context()
      size = tf.shape(env_outputs.reward)[1] // context.num_replicas_in_sync
      start = context.replica_id_in_sync_group * size
      in_time_major = lambda t: t[:, start:start + size]
      # PopArt's targets (the last result) are one learner's: --popart refuses several.
      return self._replica_gradients(
          tf.nest.map_structure(lambda t: t[start:start + size], agent_state),
          tf.nest.map_structure(in_time_major, env_outputs),
          tf.nest.map_structure(in_time_major, agent_outputs))[:3]

    per_replica = strategy.run(replica_step, args=(agent_state, env_outputs, agent_outputs))
    # The losses are sums over the batch: their gradients add up across the slices.
    total_loss, terms, gradients = tf.nest.map_structure(
        lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None),
        per_replica)
    return self._apply(total_loss, terms, gradients, env_outputs.reward,
                       num_new_trajectories)

  def _apply(self, total_loss, terms, gradients, rewards, num_new_trajectories):
    """Clips, applies RMSProp, counts frames; returns the update's statistics.

    An update whose loss or gradient norm is not finite (a diverged network, a batch that
    overflows) is skipped: RMSProp's step would write NaN into every parameter and slot, and
    a checkpoint would then keep them. Parameters, optimizer state and the frame count stay
    as they were (the batch was not trained on); `update_skipped` says so (supervisor.py counts
    skipped updates in a row and stops the run at --max_nonfinite_updates).
    """
    config = self.config
    unroll_length = tf.cast(tf.shape(rewards)[0] - 1, tf.int64)
    # The released code computes the rate from the frames BEFORE this update.
    if config.learning_rate_schedule == settings.CONSTANT:
      learning_rate = self.learning_rate.read_value()
    else:
      learning_rate = optimizers.linear_decay(self.learning_rate, self.num_env_frames,
                                              config.total_environment_frames)
    grad_norm = tf.linalg.global_norm(gradients)
    finite = tf.logical_and(tf.math.is_finite(total_loss), tf.math.is_finite(grad_norm))
    if config.max_grad_norm is not None:
      gradients, _ = tf.clip_by_global_norm(gradients, config.max_grad_norm,
                                            use_norm=grad_norm)

    def apply():
      self.optimizer.apply_gradients(gradients, learning_rate)
      self.num_env_frames.assign_add(
          unroll_length * num_new_trajectories * config.num_action_repeats)
      return tf.constant(True)
    applied = tf.cond(finite, apply, lambda: tf.constant(False))
    with tf.control_dependencies([applied]):
      # The parameters after the step, for the training supervisor's divergence check
      # (--max_parameter_norm). Computed here, in the compiled update, it is nearly free; run
      # eagerly after each update it took 40% of the learner thread on a small MLP
      # (benchmarks/RESULTS.md, "The learner's time on small networks").
      parameter_norm = tf.linalg.global_norm(self._variables)
    return dict(total_loss=total_loss, learning_rate=learning_rate, grad_norm=grad_norm,
                num_env_frames=self.num_env_frames.read_value(),
                update_skipped=tf.logical_not(applied), parameter_norm=parameter_norm, **terms)


def _popart_of(agent, config, strategy):
  """PopArt's statistics (learning/popart.py), one pair per value output of the agent (one per
  task with per-task PopArt), or None without --popart."""
  num_tasks = agent.config.num_value_outputs
  if not config.popart:
    if num_tasks > 1:
      raise ValueError(f"The agent has {num_tasks} value outputs, one per task: they are "
                       "per-task PopArt's (Hessel et al. 2019), which needs --popart.")
    return None
  if strategy is not None:
    raise ValueError("--popart keeps one learner's statistics; it does not run with "
                     "--num_learners > 1 yet. Drop one of the two.")
  return popart_lib.PopArt(agent.baseline, num_tasks=num_tasks)


# The batch's checks at the update's entry.


def checked_num_new_trajectories(num_new_trajectories, env_outputs):
  """int64 scalar: the batch's new trajectories (None: all B), checked against B."""
  if num_new_trajectories is None:
    return tf.cast(tf.shape(env_outputs.reward)[1], tf.int64)
  batch_size = env_outputs.reward.shape[1]
  if batch_size is not None and not 0 <= int(num_new_trajectories) <= batch_size:
    raise ValueError(f"num_new_trajectories must be in [0, {batch_size}] (the batch size), "
                     f"got {num_new_trajectories}.")
  return tf.constant(int(num_new_trajectories), tf.int64)


def checked_tasks(tasks, env_outputs, num_tasks):
  """int32 [B]: each trajectory's task, checked against B and the agent's num_tasks value
  outputs; None with one task (every trajectory reads the one output)."""
  if num_tasks == 1:
    return None
  if tasks is None:
    raise ValueError(f"The agent has {num_tasks} value outputs, one per task (per-task "
                     "PopArt): the update needs each trajectory's task (tasks int32 [B]).")
  tasks = tf.convert_to_tensor(tasks)
  want = env_outputs.reward.shape[1:]
  if not tasks.dtype.is_integer or not tasks.shape.is_compatible_with(want):
    raise ValueError(f"tasks must be integers of shape {want} (one per trajectory), got "
                     f"{tasks.dtype.name} {tasks.shape}.")
  if tf.executing_eagerly() and tf.size(tasks) and not (
      0 <= int(tf.reduce_min(tasks)) and int(tf.reduce_max(tasks)) < num_tasks):
    raise ValueError(f"tasks must be in [0, {num_tasks}) (the run's levels), got "
                     f"{tasks.numpy().tolist()}.")
  return tf.cast(tasks, tf.int32)


def check_batch(network_config, agent_state, env_outputs, agent_outputs):
  """Validates a learner batch against the network, with messages that name the field.

  The network config fixes the observation (frame_shape, frame_dtype: uint8 frames, or a
  float32 observation vector [O]) and its `action_distribution` (distributions.py) the
  agent outputs: the action's dtype and shape and the policy's parameters (policy_params
  [P]: the logits [N], or a Gaussian's means and log standard deviations [2A]).

  Returns (env_outputs, agent_outputs) with every field converted to a tensor.
  Raises ValueError (or TypeError) on a malformed batch.
  """
  if not isinstance(env_outputs, EnvOutput) or not isinstance(
      env_outputs.observation, Observation):
    raise TypeError("env_outputs must be an EnvOutput whose observation is an Observation.")
  family = network_config.action_distribution
  if not isinstance(agent_outputs, AgentOutput):
    raise TypeError(f"agent_outputs must be an AgentOutput (got a "
                    f"{type(agent_outputs).__name__}).")
  env_outputs, agent_outputs, leading = _as_tensors_of_t_plus_1_steps(env_outputs,
                                                                      agent_outputs)
  expected = {
      "env_outputs.done": (env_outputs.done, ()),
      "env_outputs.truncated": (env_outputs.truncated, ()),
      "env_outputs.observation.frame": (env_outputs.observation.frame,
                                        tuple(network_config.frame_shape)),
      "agent_outputs.action": (agent_outputs.action, tuple(family.action_shape)),
  }
  expected["agent_outputs.policy_params"] = (agent_outputs.policy_params, (family.param_size,))
  expected["agent_outputs.baseline"] = (agent_outputs.baseline, ())
  if network_config.use_instruction:
    expected["env_outputs.observation.instruction"] = (
        env_outputs.observation.instruction, (language.MAX_INSTRUCTION_WORDS,))
  for name, (tensor, trailing) in expected.items():
    want = tf.TensorShape(list(leading) + list(trailing))
    if not tensor.shape.is_compatible_with(want):
      raise ValueError(f"{name} has shape {tensor.shape}, expected {want} "
                       "([T+1, B] like env_outputs.reward, then the network's shape).")
  frame_dtype = tf.as_dtype(network_config.frame_dtype)
  if env_outputs.observation.frame.dtype != frame_dtype:
    raise ValueError(f"env_outputs.observation.frame must be {frame_dtype.name}, got "
                     f"{env_outputs.observation.frame.dtype.name}.")
  action_dtype = tf.as_dtype(family.action_dtype)
  if action_dtype.is_integer and not agent_outputs.action.dtype.is_integer:
    raise ValueError(f"agent_outputs.action must be an integer tensor, got "
                     f"{agent_outputs.action.dtype.name}.")
  if not action_dtype.is_integer and agent_outputs.action.dtype != action_dtype:
    raise ValueError(f"agent_outputs.action must be {action_dtype.name} for a "
                     f"{family}, got {agent_outputs.action.dtype.name}.")
  batch = leading[1]
  for index, state in enumerate(tf.nest.flatten(agent_state)):
    state = tf.convert_to_tensor(state)
    if state.shape.rank < 1 or not state.shape[:1].is_compatible_with([batch]):
      raise ValueError(f"agent_state component {index} has shape {state.shape}; its first "
                       f"dimension must be the batch size {batch}.")
  return env_outputs, agent_outputs


def _as_tensors_of_t_plus_1_steps(env_outputs, agent_outputs):
  """Both structures as tensors, and their leading shape [T+1, B] from the rewards (T >= 1)."""
  env_outputs = tf.nest.map_structure(tf.convert_to_tensor, env_outputs)
  agent_outputs = tf.nest.map_structure(tf.convert_to_tensor, agent_outputs)
  reward_shape = env_outputs.reward.shape
  if reward_shape.rank != 2 or reward_shape[0] is None or reward_shape[0] < 2:
    raise ValueError(
        f"env_outputs.reward must be [T+1, B] with T >= 1, got shape {reward_shape}.")
  return env_outputs, agent_outputs, reward_shape[:2]
