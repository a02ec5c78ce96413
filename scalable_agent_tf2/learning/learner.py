"""The learner's update: one tf.function (XLA-compiled on GPUs) per batch of trajectories.

    unroll the network over [T+1, B] -> V-trace -> losses -> gradients -> (clip) -> RMSProp

`Learner` is IMPALA's; `ImpactLearner` is IMPACT's (Luo et al., 2020): the same step with a
target network and the clipped target-worker surrogate.

The loss terms of a batch (and how its steps are indexed) are batch_loss.py's; the checks of
a batch's shapes, batch_checks.py's.
"""
import contextlib
import dataclasses

import tensorflow as tf

from scalable_agent_tf2.learning import batch_checks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import batch_loss
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import optimizers
from scalable_agent_tf2.configuration import settings

# The learner's configs are TensorFlow-free (config.py builds them from settings.py); they are
# re-exported here for the learner's callers.
LearnerConfig = config_lib.LearnerConfig
ImpactConfig = config_lib.ImpactConfig
atari_learner_config = config_lib.atari_learner_config
dmlab_learner_config = config_lib.dmlab_learner_config
IMPALA, IMPACT, ALGORITHMS = settings.IMPALA, settings.IMPACT, settings.ALGORITHMS


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
    if jit_compile and getattr(agent.config, "torso_chunk_frames", 0):
      # XLA cannot compile the chunked torso's recomputing loop (networks.chunked_torso), and
      # its own rematerialisation manages activation memory: the torso runs unchunked.
      agent.config = dataclasses.replace(agent.config, torso_chunk_frames=0)
    self.agent = agent
    self.config = config
    self.strategy = strategy
    self._variables = tuple(agent.trainable_variables)
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

  def batch(self, agent_state, env_outputs, agent_outputs):
    """A batch of trajectories as `update`'s keyword arguments, for either learner: callers
    run `learner.update(**learner.batch(...), num_new_trajectories=...)` without knowing
    which learner they hold. IMPALA's is the three inputs; ImpactLearner's adds the target
    network's policy on the batch, frozen at this call (Algorithm 1 line 7: when the batch
    enters the circular buffer).

    Args: as `update`'s first three.

    Returns:
      dict(agent_state=..., env_outputs=..., agent_outputs=...).
    """
    return dict(agent_state=agent_state, env_outputs=env_outputs, agent_outputs=agent_outputs)

  def update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories=None,
             entropy_mask=None):
    """One learner step on a batch of trajectories.

    Args:
      agent_state: the core state at each trajectory's first step (LSTMState of [B, 256],
        or () for a feed-forward agent).
      env_outputs: EnvOutput of [T+1, B, ...] tensors; observation.instruction holds word
        ids (networks.hash_instructions) when the agent uses language.
      agent_outputs: AgentOutput (or, for a Gaussian policy, GaussianAgentOutput) of
        [T+1, B, ...] tensors from the actors (the agent config's action_distribution says
        which).
      num_new_trajectories: how many of the B trajectories are new environment experience
        (the rest were trained on before: replayed); None means all B. Only new ones count
        as environment frames (the frame budget and the learning-rate schedule).
      entropy_mask: None (the entropy cost on every trajectory), or float32 [B]: 1 for the
        trajectories the entropy cost applies to (LASER section 5.1: online ones only;
        batch_loss.online_mask). One learner only.

    Returns:
      dict of scalars: total_loss, pg_loss, baseline_loss, entropy_loss, learning_rate (the
      one used for this step), grad_norm (before clipping), num_env_frames (after the step),
      update_skipped (bool: the loss or gradient norm was not finite and nothing changed,
      see _apply); with a trust region also trust_region_rejected (number of rejected
      steps).
    """
    env_outputs, agent_outputs = batch_checks.check_batch(self.agent.config, agent_state,
                                                          env_outputs, agent_outputs)
    num_new = batch_checks.checked_num_new_trajectories(num_new_trajectories, env_outputs)
    if entropy_mask is not None:
      if self.strategy is not None:
        raise ValueError("entropy_mask needs a single learner (LASER replay refuses several).")
      entropy_mask = tf.convert_to_tensor(entropy_mask, tf.float32)
      if not entropy_mask.shape.is_compatible_with(env_outputs.reward.shape[1:]):
        raise ValueError(f"entropy_mask has shape {entropy_mask.shape}, expected [B] = "
                         f"{env_outputs.reward.shape[1:]}.")
      return self._compiled_update(agent_state, env_outputs, agent_outputs, num_new,
                                   entropy_mask)
    if self.strategy is not None:
      replicas = self.strategy.num_replicas_in_sync
      batch_size = env_outputs.reward.shape[1]
      if batch_size is not None and batch_size % replicas:
        raise ValueError(f"The batch size {batch_size} must be a multiple of the number of "
                         f"learners ({replicas}): each takes an equal slice.")
    return self._compiled_update(agent_state, env_outputs, agent_outputs, num_new)

  def _loss_and_gradients(self, agent_state, env_outputs, agent_outputs, entropy_mask=None):
    """(total loss, loss terms, gradients) of one batch (losses summed over T and B)."""
    config = self.config
    with tf.GradientTape() as tape:
      learner_outputs, _ = self.agent.unroll(agent_outputs.action, env_outputs, agent_state)
      terms, _ = batch_loss.impala_loss_terms(self.agent.config.action_distribution,
                                              learner_outputs, env_outputs, agent_outputs,
                                              config, entropy_mask)
      total_loss = (terms["pg_loss"] + config.baseline_cost * terms["baseline_loss"]
                    + self.entropy_cost * terms["entropy_loss"])
    return total_loss, terms, tape.gradient(total_loss, self._variables)

  def _update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories,
              entropy_mask=None):
    total_loss, terms, gradients = self._loss_and_gradients(agent_state, env_outputs,
                                                            agent_outputs, entropy_mask)
    return self._apply(total_loss, terms, gradients, env_outputs.reward,
                       num_new_trajectories)

  def _distributed_update(self, agent_state, env_outputs, agent_outputs,
                          num_new_trajectories):
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
    return self._apply(total_loss, terms, gradients, env_outputs.reward,
                       num_new_trajectories)

  def _apply(self, total_loss, terms, gradients, rewards, num_new_trajectories):
    """Clips, applies RMSProp, counts frames; returns the update's statistics.

    An update whose loss or gradient norm is not finite (a diverged network, a batch that
    overflows) is skipped: RMSProp's step would write NaN into every parameter and slot, and
    a checkpoint would then keep them. Parameters, optimizer state and the frame count stay
    as they were (the batch was not trained on); `update_skipped` says so (training.py counts
    skipped updates in a row and stops the run at --max_nonfinite_updates).
    """
    config = self.config
    unroll_length = tf.cast(tf.shape(rewards)[0] - 1, tf.int64)
    # The released code computes the rate from the frames BEFORE this update.
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
    return dict(total_loss=total_loss, learning_rate=learning_rate, grad_norm=grad_norm,
                num_env_frames=self.num_env_frames.read_value(),
                update_skipped=tf.logical_not(applied), **terms)


class ImpactLearner(Learner):
  """IMPACT's learner (IMPACT paper, Algorithm 1): a target network and the clipped
  target-worker surrogate with V-trace GAE-lambda advantages.

  One step on a batch B (Algorithm 1 lines 6-11):
    - batch(B) / target_policy_params(B): the target network's policy on B, computed once,
      when B enters the circular buffer (line 7; buffers.CircularBuffer,
      input_pipeline.learner_steps);
    - update(**batch(B)): r = pi / max(pi_target, mu / rho), PPO's clipped surrogate of
      r and the V-trace GAE-lambda advantages (pi_target against mu), the value loss against
      V + A, the entropy bonus and kl_cost x KL(pi_target || pi) (line 8), then the
      optimizer step (line 9) and, every target_update_period steps, target <- learner
      (line 11). One tf.function.
  The target network starts equal to the learner (line 2). It and the step count are
  tf.Module attributes, so checkpoints carry them.

  One departure, on purpose: the loss terms are summed over the batch's T x B steps, like
  IMPALA's (the note under IMPALA's Table D.1), where Algorithm 1 averages them (1/M). The
  optimizer is IMPALA's RMSProp with TF1 semantics, whose settings assume summed losses: its
  mean square starts at 1, so the gradients of a mean (M = 640 times smaller) barely move the
  parameters for hundreds of steps. Table 1's learning rate and gradient clipping go with
  averaged losses and an optimizer the paper does not name; presets.py keeps the level's
  IMPALA values for both algorithms instead (as Table 1 gives IMPACT and IMPALA the same
  learning rate). On the toy task of tests/, averaged losses with Table 1's values did not
  learn in 100k frames; summed ones with the level's values learn it in about 20k.
  """

  def __init__(self, agent, config, impact_config=ImpactConfig(), jit_compile=None,
               name="learner", kl_target=None):
    """Args:
      agent: a networks.Agent (trained in place).
      config: a LearnerConfig (optimizer, discounting, reward clipping, baseline and
        entropy costs, V-trace truncation levels).
      impact_config: an ImpactConfig.
      jit_compile: compile the update with XLA; None chooses default_jit_compile().
      name: module name.
      kl_target: None keeps impact_config.kl_cost fixed; a KL (IMPACT Table 2: 0.04) makes
        the KL coefficient adaptive: it starts at kl_cost and, at every target-network
        refresh, losses.adapted_kl_coefficient steers it by that step's mean KL, as RLlib's
        APPO (which ran the paper's IMPACT) did.
    """
    if kl_target is not None and not kl_target > 0:
      raise ValueError(f"kl_target must be positive (or None: a fixed KL cost), got "
                       f"{kl_target}.")
    super().__init__(agent, config, jit_compile=jit_compile, name=name)
    self.impact_config = impact_config
    self.kl_target = kl_target
    with self.name_scope:
      if kl_target is not None:
        # Only an adaptive coefficient is a variable (the checkpoints of fixed-cost runs keep
        # their variables); a checkpoint carries it, so a resumed run continues adapting.
        self.kl_coefficient = tf.Variable(impact_config.kl_cost, dtype=tf.float32,
                                          trainable=False, name="kl_coefficient")
      # The learner's kind of network (networks.Agent or continuous_networks.ContinuousAgent).
      self.target_agent = type(agent)(agent.config, name="target_agent")
      # Learner steps so far: the target network is refreshed when it is a multiple of the
      # period.
      self.num_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_updates")
    self._target_variables = tuple(self.target_agent.trainable_variables)
    for source, target in zip(self._variables, self._target_variables):
      if source.shape != target.shape:
        raise ValueError(f"Target network variable {target.name} {target.shape} does not "
                         f"match {source.name} {source.shape}.")
    self._copy_to_target()  # Algorithm 1 line 2.
    self._compiled_target_params = tf.function(self._target_params,
                                               jit_compile=self.jit_compile)

  def _copy_to_target(self):
    for source, target in zip(self._variables, self._target_variables):
      target.assign(source)
    return tf.constant(True)

  def target_policy_params(self, agent_state, env_outputs, agent_outputs):
    """The target network's policy on a batch (Algorithm 1 line 7), as flat parameters.

    Args: as `update`'s first three.

    Returns:
      float32 [T+1, B, P], from the target network unrolled from agent_state: the logits
      [T+1, B, NUM_ACTIONS], or a Gaussian's mean and log_std concatenated [T+1, B, 2A]
      (the agent config's action_distribution).
    """
    env_outputs, agent_outputs = batch_checks.check_batch(self.agent.config, agent_state,
                                                          env_outputs, agent_outputs)
    return self._compiled_target_params(agent_state, env_outputs, agent_outputs.action)

  def _target_params(self, agent_state, env_outputs, actions):
    outputs, _ = self.target_agent.unroll(actions, env_outputs, agent_state)
    return self.agent.config.action_distribution.params_of(outputs)

  def batch(self, agent_state, env_outputs, agent_outputs):
    """Learner.batch with the target network's policy on the batch, frozen now (Algorithm 1
    line 7): dict(agent_state, env_outputs, agent_outputs, target_policy_params)."""
    return dict(agent_state=agent_state, env_outputs=env_outputs, agent_outputs=agent_outputs,
                target_policy_params=self.target_policy_params(agent_state, env_outputs,
                                                               agent_outputs))

  def update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories=None,
             entropy_mask=None, target_policy_params=None):
    """One IMPACT step (Algorithm 1 lines 8, 9, 11).

    Args:
      agent_state, env_outputs, agent_outputs, num_new_trajectories: as Learner.update
        (a batch used again in the circular buffer brings 0 new trajectories).
      entropy_mask: None only (LASER's online-only entropy is IMPALA's learner's).
      target_policy_params: float32 [T+1, B, P], target_policy_params() of this batch when it
        entered the circular buffer (batch() puts it there); None: the target network's
        policy now.

    Returns:
      dict of scalars: as Learner.update plus kl_loss, ppo_clipped_fraction (steps whose PPO
      clip is active), target_worker_clipped_fraction (steps where mu / rho > pi_target) and
      target_updated (whether the target network was refreshed after this step); with
      kl_target also kl_coefficient (the one this step used).
    """
    if entropy_mask is not None:
      raise ValueError("entropy_mask is LASER's (IMPALA's learner); IMPACT's entropy cost "
                       "applies to every trajectory.")
    if target_policy_params is None:
      target_policy_params = self.target_policy_params(agent_state, env_outputs, agent_outputs)
    env_outputs, agent_outputs = batch_checks.check_batch(self.agent.config, agent_state,
                                                          env_outputs, agent_outputs)
    target_policy_params = tf.convert_to_tensor(target_policy_params, tf.float32)
    want = env_outputs.reward.shape[:2].concatenate(
        [self.agent.config.action_distribution.param_size])
    if not target_policy_params.shape.is_compatible_with(want):
      raise ValueError(f"target_policy_params has shape {target_policy_params.shape}, "
                       f"expected {want} (like the behaviour policy's logits, or its mean "
                       f"and log_std concatenated).")
    num_new = batch_checks.checked_num_new_trajectories(num_new_trajectories, env_outputs)
    return self._compiled_update(agent_state, env_outputs, agent_outputs,
                                 target_policy_params, num_new)

  def _update(self, agent_state, env_outputs, agent_outputs, target_policy_params,
              num_new_trajectories):
    config, impact = self.config, self.impact_config
    kl_cost = impact.kl_cost if self.kl_target is None else self.kl_coefficient.read_value()
    with tf.GradientTape() as tape:
      learner_outputs, _ = self.agent.unroll(agent_outputs.action, env_outputs, agent_state)
      terms, diagnostics = batch_loss.impact_loss_terms(
          self.agent.config.action_distribution, learner_outputs, target_policy_params,
          env_outputs, agent_outputs, config, impact)
      # Summed over T and B like IMPALA's terms (Algorithm 1 line 8 averages: see the class
      # docstring).
      total_loss = (terms["pg_loss"] + config.baseline_cost * terms["baseline_loss"]
                    + self.entropy_cost * terms["entropy_loss"]
                    + kl_cost * terms["kl_loss"])
    gradients = tape.gradient(total_loss, self._variables)
    stats = self._apply(total_loss, terms, gradients, env_outputs.reward,
                        num_new_trajectories)
    # A skipped step (non-finite, see _apply) is no step: it neither counts towards the
    # target refresh nor adapts the KL coefficient (whose KL would be NaN too).
    applied = tf.logical_not(stats["update_skipped"])
    self.num_updates.assign_add(tf.cast(applied, tf.int64))
    refresh = tf.logical_and(applied,
                             tf.equal(self.num_updates % impact.target_update_period, 0))
    target_updated = tf.cond(refresh, self._copy_to_target, lambda: tf.constant(False))
    if self.kl_target is None:
      return dict(stats, target_updated=target_updated, **diagnostics)
    # RLlib's APPO adapts the coefficient when it refreshes the target network, from the
    # mean KL of the learner's last step (kl_loss is summed over the T x B steps).
    mean_kl = terms["kl_loss"] / tf.cast(tf.size(env_outputs.reward[1:]), tf.float32)
    self.kl_coefficient.assign(tf.where(
        refresh, losses.adapted_kl_coefficient(kl_cost, mean_kl, self.kl_target), kl_cost))
    return dict(stats, target_updated=target_updated, kl_coefficient=kl_cost, **diagnostics)
