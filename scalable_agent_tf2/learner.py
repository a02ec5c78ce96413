"""The learner's update: one tf.function (XLA-compiled on GPUs) per batch of trajectories.

    unroll the network over [T+1, B] -> V-trace -> losses -> gradients -> (clip) -> RMSProp

The indexing follows the released code's actor loop: step t of a trajectory holds the agent
output whose action was taken at observation t-1 and the environment output that action led
to. So, for t = 0..T-1, the action taken at observation t is agent_outputs.action[t+1], its
reward env_outputs.reward[t+1], and the learner's policy and value at observation t come from
unrolling over all T+1 observations; V(x_T) bootstraps.
"""
import contextlib
import dataclasses
import math
from typing import Optional

import tensorflow as tf

from scalable_agent_tf2 import losses
from scalable_agent_tf2 import networks
from scalable_agent_tf2 import optimizers
from scalable_agent_tf2 import vtrace
from scalable_agent_tf2.structures import AgentOutput, EnvOutput, Observation


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """The learner's hyperparameters. Defaults: the paper's DMLab-30 agent.

  Attributes:
    discounting: gamma, 0.99 (Tables D.3, G.1).
    baseline_cost: weight of the baseline loss, 0.5 (Tables D.3, G.1).
    entropy_cost: weight of the entropy loss (released code's DMLab-30 value, from the
      Table D.1 sweep).
    learning_rate: initial RMSProp learning rate (released code's DMLab-30 value).
    total_environment_frames: the learning rate reaches 0 here (10e9 for DMLab-30, released
      code and paper Figure 5).
    num_action_repeats: environment frames per agent step, 4 (Tables D.3, G.1); frames per
      update = batch x unroll length x this.
    decay, momentum, epsilon: RMSProp (Table D.3: momentum 0; released code: decay 0.99,
      epsilon 0.1).
    reward_clipping: one of losses.REWARD_CLIPPING_MODES (DMLab-30: Figure D.1's optimistic
      asymmetric clipping, Table D.3).
    max_grad_norm: global-norm gradient clipping threshold, or None (DMLab: none, as in
      the released code; Atari: 40, Table G.1).
    clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold: V-trace's truncation
      levels, 1 (section 5.2.1).
    vtrace_lambda: Remark 2's lambda, 1.
    off_policy_correction: one of vtrace.OFF_POLICY_CORRECTIONS (Table 2).
    trust_region_threshold: LASER's trust-region V-trace (Schmitt et al. 2019, section 4.3):
      steps whose KL(pi || pi_rho_bar) exceeds this are left out of the policy-gradient and
      baseline losses and cut the V-trace traces. math.inf (default): off, plain IMPALA.
  """
  discounting: float = 0.99
  baseline_cost: float = 0.5
  entropy_cost: float = 0.0033391318945337044
  learning_rate: float = 0.00031866995608948655
  total_environment_frames: int = int(10e9)
  num_action_repeats: int = 4
  decay: float = 0.99
  momentum: float = 0.0
  epsilon: float = 0.1
  reward_clipping: str = losses.OPTIMISTIC_ASYMMETRIC
  max_grad_norm: Optional[float] = None
  clip_rho_threshold: Optional[float] = 1.0
  clip_pg_rho_threshold: Optional[float] = 1.0
  clip_c_threshold: Optional[float] = 1.0
  vtrace_lambda: float = 1.0
  off_policy_correction: str = vtrace.VTRACE
  trust_region_threshold: float = math.inf

  def __post_init__(self):
    if self.reward_clipping not in losses.REWARD_CLIPPING_MODES:
      raise ValueError(f"Unknown reward_clipping {self.reward_clipping!r}; expected one of "
                       f"{losses.REWARD_CLIPPING_MODES}.")
    if self.off_policy_correction not in vtrace.OFF_POLICY_CORRECTIONS:
      raise ValueError(f"Unknown off_policy_correction {self.off_policy_correction!r}; "
                       f"expected one of {vtrace.OFF_POLICY_CORRECTIONS}.")
    for name in ("total_environment_frames", "num_action_repeats"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
    for name in ("learning_rate", "entropy_cost", "baseline_cost", "epsilon"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}.")
    if not 0.0 <= self.discounting <= 1.0:
      raise ValueError(f"discounting must be in [0, 1], got {self.discounting}.")
    if self.max_grad_norm is not None and self.max_grad_norm <= 0:
      raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm}.")
    if math.isnan(self.trust_region_threshold) or self.trust_region_threshold < 0:
      raise ValueError(f"trust_region_threshold must be >= 0 (inf: off), got "
                       f"{self.trust_region_threshold}.")
    if self.uses_trust_region and self.off_policy_correction != vtrace.VTRACE:
      raise ValueError(f"The trust region (trust_region_threshold="
                       f"{self.trust_region_threshold}) needs off_policy_correction="
                       f"'vtrace', got {self.off_policy_correction!r}.")

  @property
  def uses_trust_region(self):
    return not math.isinf(self.trust_region_threshold)


def dmlab_learner_config(multi_task=True, **overrides):
  """DeepMind Lab: DMLab-30 (and its experts) or a single level.

  Table D.3: single tasks clip rewards to [-1, 1], DMLab-30 uses Figure D.1's optimistic
  asymmetric clipping. Single levels train for 1e9 frames (released code's default, Figure 4).
  """
  if not multi_task:
    overrides = {"reward_clipping": losses.ABS_ONE,
                 "total_environment_frames": int(1e9), **overrides}
  return LearnerConfig(**overrides)


def atari_learner_config(**overrides):
  """Atari, Table G.1: entropy 0.01, lr 0.0006, RMSProp epsilon 0.01, gradient norm clipped
  at 40, rewards clipped to [-1, 1], 200M frames per game."""
  values = dict(entropy_cost=0.01, learning_rate=0.0006, epsilon=0.01, max_grad_norm=40.0,
                reward_clipping=losses.ABS_ONE, total_environment_frames=int(200e6))
  values.update(overrides)
  return LearnerConfig(**values)


def default_jit_compile():
  """XLA where it is the fast path: on a GPU. On CPUs, TensorFlow's own (oneDNN) kernels run
  the update 2-3x faster than XLA's CPU backend (benchmarks/RESULTS.md, "Learner update")."""
  return bool(tf.config.list_logical_devices("GPU"))


class Learner(tf.Module):
  """Owns the optimizer state and the frame counter; `update` trains on one batch."""

  def __init__(self, agent, config, jit_compile=None, name="learner", strategy=None):
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
    """
    super().__init__(name=name)
    if jit_compile is None:
      jit_compile = default_jit_compile()
    self.jit_compile = jit_compile
    self.agent = agent
    self.config = config
    self.strategy = strategy
    self._variables = tuple(agent.trainable_variables)
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope, self.name_scope:
      self.optimizer = optimizers.RMSProp(self._variables, decay=config.decay,
                                          momentum=config.momentum, epsilon=config.epsilon)
      # Frames consumed so far: drives the learning-rate schedule and resumption.
      self.num_env_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="num_env_frames")
      # Variables (not constants) so population-based training (Appendix F) can change them
      # without recompiling, and checkpoints carry them.
      self.learning_rate = tf.Variable(config.learning_rate, dtype=tf.float32,
                                       trainable=False, name="learning_rate")
      self.entropy_cost = tf.Variable(config.entropy_cost, dtype=tf.float32,
                                      trainable=False, name="entropy_cost")
    if strategy is None:
      self._compiled_update = tf.function(self._update, jit_compile=jit_compile)
    else:
      # XLA compiles each replica's computation; the cross-replica sum stays outside it.
      self._replica_gradients = tf.function(self._loss_and_gradients, jit_compile=jit_compile)
      self._compiled_update = tf.function(self._distributed_update)

  def use_config_hyperparameters(self):
    """Sets the hyperparameters held in variables (learning rate, entropy cost, RMSProp
    epsilon) to this learner's config. Training calls it after restoring a checkpoint, so the
    flags of the run win over the values saved with the checkpoint: population-based training
    (IMPALA Appendix F) restarts a member from a checkpoint with changed hyperparameters."""
    self.learning_rate.assign(self.config.learning_rate)
    self.entropy_cost.assign(self.config.entropy_cost)
    self.optimizer.epsilon.assign(self.config.epsilon)

  def update(self, agent_state, env_outputs, agent_outputs):
    """One learner step on a batch of trajectories.

    Args:
      agent_state: the core state at each trajectory's first step (LSTMState of [B, 256],
        or () for a feed-forward agent).
      env_outputs: EnvOutput of [T+1, B, ...] tensors; observation.instruction holds word
        ids (networks.hash_instructions) when the agent uses language.
      agent_outputs: AgentOutput of [T+1, B, ...] tensors from the actors.

    Returns:
      dict of scalars: total_loss, pg_loss, baseline_loss, entropy_loss, learning_rate (the
      one used for this step), grad_norm (before clipping), num_env_frames (after the step);
      with a trust region also trust_region_rejected (number of rejected steps).
    """
    env_outputs, agent_outputs = check_batch(self.agent.config, agent_state, env_outputs,
                                             agent_outputs)
    if self.strategy is not None:
      replicas = self.strategy.num_replicas_in_sync
      batch_size = env_outputs.reward.shape[1]
      if batch_size is not None and batch_size % replicas:
        raise ValueError(f"The batch size {batch_size} must be a multiple of the number of "
                         f"learners ({replicas}): each takes an equal slice.")
    return self._compiled_update(agent_state, env_outputs, agent_outputs)

  def _loss_and_gradients(self, agent_state, env_outputs, agent_outputs):
    """(total loss, loss terms, gradients) of one batch (losses summed over T and B)."""
    config = self.config
    with tf.GradientTape() as tape:
      learner_outputs, _ = self.agent.unroll(agent_outputs.action, env_outputs, agent_state)
      terms, _ = impala_loss_terms(learner_outputs, env_outputs, agent_outputs, config)
      total_loss = (terms["pg_loss"] + config.baseline_cost * terms["baseline_loss"]
                    + self.entropy_cost * terms["entropy_loss"])
    return total_loss, terms, tape.gradient(total_loss, self._variables)

  def _update(self, agent_state, env_outputs, agent_outputs):
    total_loss, terms, gradients = self._loss_and_gradients(agent_state, env_outputs,
                                                            agent_outputs)
    return self._apply(total_loss, terms, gradients, env_outputs.reward)

  def _distributed_update(self, agent_state, env_outputs, agent_outputs):
    """The update with the batch split over the strategy's replicas (see __init__)."""
    strategy = self.strategy

    def replica_step(agent_state, env_outputs, agent_outputs):
      context = tf.distribute.get_replica_context()
      size = tf.shape(env_outputs.reward)[1] // context.num_replicas_in_sync
      start = context.replica_id_in_sync_group * size
      in_time_major = lambda t: t[:, start:start + size]
      return self._replica_gradients(
          tf.nest.map_structure(lambda t: t[start:start + size], agent_state),
          tf.nest.map_structure(in_time_major, env_outputs),
          tf.nest.map_structure(in_time_major, agent_outputs))

    per_replica = strategy.run(replica_step, args=(agent_state, env_outputs, agent_outputs))
    # The losses are sums over the batch: their gradients add up across the slices.
    total_loss, terms, gradients = tf.nest.map_structure(
        lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None),
        per_replica)
    return self._apply(total_loss, terms, gradients, env_outputs.reward)

  def _apply(self, total_loss, terms, gradients, rewards):
    """Clips, applies RMSProp, counts frames; returns the update's statistics."""
    config = self.config
    unroll_length = tf.shape(rewards)[0] - 1
    batch_size = tf.shape(rewards)[1]
    # The released code computes the rate from the frames BEFORE this update.
    learning_rate = optimizers.linear_decay(self.learning_rate, self.num_env_frames,
                                            config.total_environment_frames)
    grad_norm = tf.linalg.global_norm(gradients)
    if config.max_grad_norm is not None:
      gradients, _ = tf.clip_by_global_norm(gradients, config.max_grad_norm,
                                            use_norm=grad_norm)
    self.optimizer.apply_gradients(gradients, learning_rate)
    frames = tf.cast(unroll_length * batch_size * config.num_action_repeats, tf.int64)
    self.num_env_frames.assign_add(frames)
    return dict(total_loss=total_loss, learning_rate=learning_rate, grad_norm=grad_norm,
                num_env_frames=self.num_env_frames.read_value(), **terms)


def impala_loss_terms(learner_outputs, env_outputs, agent_outputs, config):
  """The three unweighted IMPALA loss terms (section 4.2) of one batch.

  Args:
    learner_outputs: networks.NetworkOutput of [T+1, B, ...] from the learner's unroll.
    env_outputs: EnvOutput of [T+1, B, ...].
    agent_outputs: AgentOutput of [T+1, B, ...] (the behaviour policy mu).
    config: LearnerConfig.

  Returns:
    (dict with float32 scalars pg_loss, baseline_loss, entropy_loss (sums over T and B) and,
     with a trust region, trust_region_rejected (steps left out of the policy-gradient and
     baseline losses; the entropy term keeps every step), the vtrace.VTraceFromLogitsReturns
     they were computed from ([T, B] each)).
  """
  bootstrap_value = learner_outputs.baseline[-1]
  # Align to "observation t, action taken there, its reward" for t = 0..T-1 (module doc).
  target_logits = learner_outputs.policy_logits[:-1]
  values = learner_outputs.baseline[:-1]
  actions = agent_outputs.action[1:]
  behaviour_logits = agent_outputs.policy_logits[1:]
  rewards = losses.clip_rewards(env_outputs.reward[1:], config.reward_clipping)
  # No bootstrapping across an episode boundary.
  discounts = tf.cast(~tf.cast(env_outputs.done[1:], tf.bool), tf.float32) * config.discounting

  returns = vtrace.from_logits(
      behaviour_policy_logits=behaviour_logits, target_policy_logits=target_logits,
      actions=actions, discounts=discounts, rewards=rewards, values=values,
      bootstrap_value=bootstrap_value, clip_rho_threshold=config.clip_rho_threshold,
      clip_pg_rho_threshold=config.clip_pg_rho_threshold,
      clip_c_threshold=config.clip_c_threshold, lambda_=config.vtrace_lambda,
      off_policy_correction=config.off_policy_correction,
      trust_region_threshold=(config.trust_region_threshold if config.uses_trust_region
                              else None))
  # LASER section 4.3: rejected transitions count for neither the policy nor the value
  # gradient. (Without a trust region, mask None: exactly IMPALA's graph.)
  mask = returns.trust_region_mask if config.uses_trust_region else None
  terms = dict(
      pg_loss=losses.policy_gradient_loss(returns.target_action_log_probs,
                                          returns.pg_advantages, mask),
      baseline_loss=losses.baseline_loss(returns.vs - values, mask),
      entropy_loss=losses.entropy_loss(target_logits))
  if mask is not None:
    terms["trust_region_rejected"] = tf.reduce_sum(1.0 - mask)
  return terms, returns


def check_batch(network_config, agent_state, env_outputs, agent_outputs):
  """Validates a learner batch against the network, with messages that name the field.

  Returns (env_outputs, agent_outputs) with every field converted to a tensor.
  Raises ValueError (or TypeError) on a malformed batch.
  """
  if not isinstance(env_outputs, EnvOutput) or not isinstance(
      env_outputs.observation, Observation):
    raise TypeError("env_outputs must be an EnvOutput whose observation is an Observation.")
  if not isinstance(agent_outputs, AgentOutput):
    raise TypeError("agent_outputs must be an AgentOutput.")
  env_outputs = tf.nest.map_structure(tf.convert_to_tensor, env_outputs)
  agent_outputs = tf.nest.map_structure(tf.convert_to_tensor, agent_outputs)

  reward_shape = env_outputs.reward.shape
  if reward_shape.rank != 2 or reward_shape[0] is None or reward_shape[0] < 2:
    raise ValueError(
        f"env_outputs.reward must be [T+1, B] with T >= 1, got shape {reward_shape}.")
  leading = reward_shape[:2]
  frame_shape = tuple(network_config.frame_shape)
  expected = {
      "env_outputs.done": (env_outputs.done, ()),
      "env_outputs.observation.frame": (env_outputs.observation.frame, frame_shape),
      "agent_outputs.action": (agent_outputs.action, ()),
      "agent_outputs.policy_logits": (agent_outputs.policy_logits,
                                      (network_config.num_actions,)),
      "agent_outputs.baseline": (agent_outputs.baseline, ()),
  }
  if network_config.use_instruction:
    expected["env_outputs.observation.instruction"] = (
        env_outputs.observation.instruction, (networks.MAX_INSTRUCTION_WORDS,))
  for name, (tensor, trailing) in expected.items():
    want = tf.TensorShape(list(leading) + list(trailing))
    if not tensor.shape.is_compatible_with(want):
      raise ValueError(f"{name} has shape {tensor.shape}, expected {want} "
                       "([T+1, B] like env_outputs.reward, then the network's shape).")
  if env_outputs.observation.frame.dtype != tf.uint8:
    raise ValueError(f"env_outputs.observation.frame must be uint8, got "
                     f"{env_outputs.observation.frame.dtype.name}.")
  if not agent_outputs.action.dtype.is_integer:
    raise ValueError(f"agent_outputs.action must be an integer tensor, got "
                     f"{agent_outputs.action.dtype.name}.")
  batch = leading[1]
  for index, state in enumerate(tf.nest.flatten(agent_state)):
    state = tf.convert_to_tensor(state)
    if state.shape.rank < 1 or not state.shape[:1].is_compatible_with([batch]):
      raise ValueError(f"agent_state component {index} has shape {state.shape}; its first "
                       f"dimension must be the batch size {batch}.")
  return env_outputs, agent_outputs
