"""The losses, per step and per batch: IMPALA's (section 4.2) with V-trace, reward clipping
(Appendix D, Figure D.1), LASER's trust-region and entropy masks, and IMPACT's (IMPACT paper,
Algorithm 1 line 8: the clipped target-worker surrogate, section 3.1, and V-trace's GAE-lambda
advantages), as named functions beside each other.

    impala_loss_terms   one batch's pg_loss, baseline_loss, entropy_loss (V-trace's returns).
    impact_loss_terms   one batch's IMPACT terms (the surrogate against the target network).
    aligned             a batch [T+1, B] as T transitions, the layout both share.

The losses are SUMMED over time and batch, as in the released code (deepmind/scalable_agent,
experiment.py) and the note under the paper's Table D.1; the hyperparameters of Tables D.1,
D.3 and G.1 assume that scale. learner.py weights and differentiates them.

The indexing follows the released code's actor loop: step t of a trajectory holds the agent
output whose action was taken at observation t-1 and the environment output that action led
to. So, for t = 0..T-1, the action taken at observation t is agent_outputs.action[t+1], its
reward env_outputs.reward[t+1], and the learner's policy and value at observation t come from
unrolling over all T+1 observations; V(x_T) bootstraps (`aligned`).

Truncated episodes (environments/truncation.py): where observation t is a truncated episode's
last (env_outputs.truncated[t]), transition t is the environment's artificial reset step (its
action ignored, reward 0, discount 0). It is cut (`aligned`'s `kept`): rho_t = c_t = 0 in
V-trace (vtrace.from_importance_weights' transition_mask), so v_t = V(x_t) and transition t-1
into x_t (discount gamma) bootstraps from V(x_t) as at the end of an unroll (IMPALA section 4,
Remark 1: v_{t-1} = V(x_{t-1}) + rho_{t-1} (r_{t-1} + gamma V(x_t) - V(x_{t-1}))); and its
policy-gradient, baseline and entropy terms weigh 0. A termination has no such step: its
discount 0 bootstraps from nothing. With nothing truncated the cut multiplies by ones, which
changes no bit.
"""
import collections
import math

import tensorflow as tf

# Names of the reward-clipping modes (the learner's job; environments return raw rewards);
# settings.py names them, as the choices of --reward_clipping.
from scalable_agent_tf2.configuration.settings import ABS_ONE
from scalable_agent_tf2.configuration.settings import NO_CLIPPING
from scalable_agent_tf2.configuration.settings import OPTIMISTIC_ASYMMETRIC
from scalable_agent_tf2.configuration.settings import REWARD_CLIPPING_MODES
from scalable_agent_tf2.configuration.settings import SOFT_ASYMMETRIC
from scalable_agent_tf2.learning import vtrace


def clip_rewards(rewards, mode):
  """Transforms raw rewards for the learner's targets.

  Args:
    rewards: float32 tensor of any shape.
    mode: one of REWARD_CLIPPING_MODES.
      'abs_one': clip(r, -1, 1).
      'optimistic_asymmetric': 0.3 * min(tanh(r), 0) + 5 * max(tanh(r), 0) (Appendix D,
        "optimistic asymmetric reward clipping", Figure D.1).
      'soft_asymmetric': tanh(r / 5) scaled by 5, negative part by 0.3 more (the released
        code's experiment.py, --reward_clipping=soft_asymmetric).
      'none': unchanged.

  Returns:
    float32 tensor of the same shape.
  """
  rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
  if mode == ABS_ONE:
    return tf.clip_by_value(rewards, -1.0, 1.0)
  if mode == OPTIMISTIC_ASYMMETRIC:
    squashed = tf.tanh(rewards)
    return 0.3 * tf.minimum(squashed, 0.0) + 5.0 * tf.maximum(squashed, 0.0)
  if mode == SOFT_ASYMMETRIC:
    squeezed = tf.tanh(rewards / 5.0)
    return 5.0 * tf.where(rewards < 0, 0.3 * squeezed, squeezed)
  if mode == NO_CLIPPING:
    return rewards
  raise ValueError(
      f"Unknown reward clipping {mode!r}; expected one of {REWARD_CLIPPING_MODES}.")


def policy_gradient_loss(action_log_probs, advantages, mask=None):
  """-sum_t,b log pi(a_t|x_t) * A_t, the advantage held constant (section 4.2).

  Args:
    action_log_probs: float32 [T, B], log pi(a_t | x_t) of the taken actions, under the
      learner's parameters (gradients flow through this).
    advantages: float32 [T, B], e.g. V-trace's pg_advantages.
    mask: None, or float32 [T, B]: 0 leaves a step out (LASER's trust region, section 4.3:
      rejected transitions are not used "for the policy gradient and value gradient
      updates"; vtrace.trust_region_mask).

  Returns:
    float32 scalar.
  """
  return -tf.reduce_sum(_masked(action_log_probs * tf.stop_gradient(advantages), mask))


def baseline_loss(advantages, mask=None):
  """0.5 * sum_t,b (v_s - V(x_s))^2 (section 4.2; the 0.5 is the released code's).

  Args:
    advantages: float32 [T, B], v_s - V(x_s) with gradients through V(x_s) only.
    mask: None, or float32 [T, B]: 0 leaves a step out (as in policy_gradient_loss).

  Returns:
    float32 scalar. The learner multiplies it by baseline_cost (0.5, Table D.3 / G.1).
  """
  return 0.5 * tf.reduce_sum(_masked(tf.square(advantages), mask))


def _masked(terms, mask):
  """terms [T, B] with the masked-out steps (mask 0) set to zero."""
  if mask is None:
    return terms
  return tf.where(tf.cast(mask, tf.bool), terms, tf.zeros_like(terms))


def entropy_loss(policy, mask=None):
  """-sum_t,b H(pi(.|x_t)): minus the policy's entropy (section 4.2, "entropy bonus"; for a
  categorical policy sum_t,b sum_a pi log pi; the IMPACT paper's continuous setting sets its
  weight to 0, Table 2).

  Args:
    policy: a distributions.Categorical or DiagGaussian of [T, B, P] parameters (gradients
      flow through these).
    mask: None, or float32 [T, B]: 0 leaves a step out (LASER section 5.1: the entropy cost
      on online data only; section 4.3: not on steps the trust region rejects;
      entropy_steps).

  Returns:
    float32 scalar. The learner multiplies it by entropy_cost.
  """
  return tf.reduce_sum(_masked(-policy.entropy(), mask))


def impact_log_ratio(action_log_probs, target_action_log_probs, behaviour_action_log_probs,
                     beta):
  """log of IMPACT's clipped target-worker ratio r = pi / max(pi_target, beta * mu).

  IMPACT section 3.1 (J_AIS) and Figure 3's R3, with beta = 1 / rho (rho: Table 1's
  "Target-Worker Clipping", 2.0). Where pi_target >= beta * mu this is PPO's
  pi / pi_target; where the worker made the action much likelier than the target network
  (mu > pi_target / beta), the denominator is beta * mu instead.

  Args:
    action_log_probs: float32 [T, B], log pi(a_t|x_t) under the learner's parameters
      (gradients flow through this only).
    target_action_log_probs: float32 [T, B], log pi_target(a_t|x_t) (target network).
    behaviour_action_log_probs: float32 [T, B], log mu(a_t|x_t) (the worker's policy).
    beta: float in (0, 1].

  Returns:
    float32 [T, B].
  """
  action_log_probs = tf.convert_to_tensor(action_log_probs, tf.float32)
  log_denominator = tf.maximum(
      tf.convert_to_tensor(target_action_log_probs, tf.float32),
      tf.math.log(tf.constant(beta, tf.float32))
      + tf.convert_to_tensor(behaviour_action_log_probs, tf.float32))
  return action_log_probs - tf.stop_gradient(log_denominator)


def clipped_surrogate_loss(log_ratios, advantages, clip_epsilon, mask=None):
  """PPO's clipped surrogate, as IMPACT uses it (section 4.1, "we truncate all three ratios
  with PPO's clipping function"; Appendix E): -sum_t,b min(r A, clip(r, 1 - eps, 1 + eps) A).

  Args:
    log_ratios: float32 [T, B], log r (e.g. impact_log_ratio); gradients flow through it.
    advantages: float32 [T, B], held constant (e.g. V-trace GAE-lambda advantages).
    clip_epsilon: PPO's epsilon (IMPACT Table 1, discrete: 0.3).
    mask: None, or float32 [T, B]: 0 leaves a step out (a truncated episode's reset step,
      module docstring).

  Returns:
    float32 scalar (summed over T and B, like the IMPALA terms above).
  """
  ratios = tf.exp(log_ratios)
  advantages = tf.stop_gradient(tf.convert_to_tensor(advantages, tf.float32))
  surrogate = tf.minimum(ratios * advantages,
                         tf.clip_by_value(ratios, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
                         * advantages)
  return -tf.reduce_sum(_masked(surrogate, mask))


def standardized_advantages(advantages, mask=None, epsilon=1e-8):
  """(A - mean(A)) / (std(A) + epsilon) over a batch's steps (those mask keeps): PPO's
  advantage normalisation as its implementations apply it per batch (Stable-Baselines3's
  normalize_advantage, CleanRL's norm_adv; not in the IMPACT paper). With it the surrogate's
  size no longer depends on the rewards' scale, so an entropy cost weighs the same against it
  on every task. Masked-out steps come back as 0.

  Args:
    advantages: float32 [T, B].
    mask: None, or float32 [T, B]: 0 leaves a step out of the moments (a truncated episode's
      reset step, module docstring).
    epsilon: added to the standard deviation (a batch of equal advantages gives 0, not NaN).

  Returns:
    float32 [T, B], gradient-free.
  """
  advantages = tf.stop_gradient(tf.convert_to_tensor(advantages, tf.float32))
  tf.debugging.assert_rank(advantages, 2, message="advantages must be [T, B]")
  weights = tf.ones_like(advantages) if mask is None else tf.cast(mask, tf.float32)
  count = tf.maximum(tf.reduce_sum(weights), 1.0)
  mean = tf.reduce_sum(advantages * weights) / count
  variance = tf.reduce_sum(tf.square(advantages - mean) * weights) / count
  return _masked((advantages - mean) / (tf.sqrt(variance) + epsilon), mask)


def kl_divergence(p, q):
  """sum_t,b KL(p || q) with p held constant, for IMPACT's KL(pi_target, pi) term (Algorithm 1
  line 8; weight 0 on discrete tasks, Table 1; "KL Coeff" 1.0 on continuous ones, Table 2).

  Args:
    p: a distributions.Categorical or DiagGaussian of [T, B, P] parameters, held constant
      (the target network's).
    q: the same kind and shape (the learner's; gradients flow through these).

  Returns:
    float32 scalar.
  """
  return p.stop_gradient().total_kl(q)


# PPO's adaptive KL penalty (Schulman et al., 2017, section 4) as the IMPACT paper's code base,
# RLlib (2019), applies it to IMPACT's KL coefficient (Table 2: "KL Coeff" 1.0, "KL Target"
# 0.04): scaled by 1.5 when the measured KL exceeds twice the target, halved when it is below
# half of it. (PPO's paper scales by 2 and compares with target x / 1.5; RLlib's factors are
# the ones the IMPACT runs used.)
KL_COEFFICIENT_INCREASE = 1.5
KL_COEFFICIENT_DECREASE = 0.5


def adapted_kl_coefficient(kl_coefficient, mean_kl, kl_target):
  """The KL coefficient after one adaptation step (constants above).

  Args:
    kl_coefficient: float32 scalar, the coefficient now.
    mean_kl: float32 scalar, KL(pi_target || pi) averaged over a batch's steps.
    kl_target: float, the KL the coefficient steers towards (> 0).

  Returns:
    float32 scalar: x1.5 if mean_kl > 2 kl_target, x0.5 if mean_kl < kl_target / 2, else
    unchanged.
  """
  kl_coefficient = tf.convert_to_tensor(kl_coefficient, tf.float32)
  mean_kl = tf.convert_to_tensor(mean_kl, tf.float32)
  return tf.where(mean_kl > 2.0 * kl_target, KL_COEFFICIENT_INCREASE * kl_coefficient,
                  tf.where(mean_kl < 0.5 * kl_target,
                           KL_COEFFICIENT_DECREASE * kl_coefficient, kl_coefficient))


# ---------------------------------------------------------------------------------------------
# One batch's terms: the transitions of a [T+1, B] batch, IMPALA's and IMPACT's.
# ---------------------------------------------------------------------------------------------


_Aligned = collections.namedtuple(
    "_Aligned", "learner_policy values bootstrap_value actions behaviour_policy rewards "
    "discounts kept")


def aligned(action_distribution, learner_outputs, env_outputs, agent_outputs, config):
  """A batch aligned to "observation t, the action taken there, its reward", t = 0..T-1
  (module docstring): the learner's and the behaviour policies (distributions of [T, B, P]
  parameters), actions [T, B(, A)], values, rewards (clipped), discounts [T, B] (0 after an
  episode's end), kept [T, B] (0 for a transition that leaves a truncated observation: the
  module docstring), bootstrap value V(x_T) [B]."""
  rewards, discounts = _rewards_and_discounts(env_outputs, config)
  return _Aligned(
      learner_policy=action_distribution.of_outputs(learner_outputs)[:-1],
      values=learner_outputs.baseline[:-1],
      bootstrap_value=learner_outputs.baseline[-1],
      actions=agent_outputs.action[1:],
      behaviour_policy=action_distribution.of_outputs(agent_outputs)[1:],
      rewards=rewards, discounts=discounts, kept=kept_transitions(env_outputs.truncated))


def kept_transitions(truncated):
  """float32 [T, B]: 0 for transition t when observation t is a truncated episode's last
  (truncated [T+1, B]: the next step is the environment's reset, its action ignored), else 1.
  """
  return tf.cast(~tf.cast(truncated[:-1], tf.bool), tf.float32)


def _rewards_and_discounts(env_outputs, config):
  """Rewards (clipped) and discounts [T, B] of steps 1..T (discount 0 after an episode's end:
  no bootstrapping across an episode boundary)."""
  return (clip_rewards(env_outputs.reward[1:], config.reward_clipping),
          tf.cast(~tf.cast(env_outputs.done[1:], tf.bool), tf.float32) * config.discounting)


def _vtrace_options(config):
  """V-trace's truncation levels, lambda and LASER's trust region, from the learner config."""
  return dict(clip_rho_threshold=config.clip_rho_threshold,
              clip_pg_rho_threshold=config.clip_pg_rho_threshold,
              clip_c_threshold=config.clip_c_threshold, lambda_=config.vtrace_lambda,
              trust_region_threshold=_trust_region_threshold(config))


def _trust_region_threshold(config):
  """LASER's trust region threshold, or None: the setting's infinity turns it off."""
  threshold = config.trust_region_threshold
  return None if math.isinf(threshold) else threshold


def entropy_steps(trust_region_mask, entropy_mask, like):
  """float32 [T, B] (or None: every step): the steps whose entropy counts.

  Those the trust region kept (trust_region_mask [T, B], LASER section 4.3: rejected
  transitions count "for all estimates") of the trajectories entropy_mask [B] selects
  (section 5.1: online ones only); `like` gives [T, B] for a mask given per trajectory.
  """
  if entropy_mask is None:
    return trust_region_mask
  per_step = tf.broadcast_to(tf.cast(entropy_mask, tf.float32), tf.shape(like))
  return per_step if trust_region_mask is None else per_step * trust_region_mask


def _vtrace_loss_terms(returns, values, mask, entropy_loss, trust_region_mask, value_scale=None):
  """The policy-gradient and baseline losses of V-trace's returns (section 4.2) over the steps
  mask [T, B] keeps, the given entropy loss, and the count of steps LASER's trust region
  rejected (trust_region_mask [T, B], or None without a trust region); value_scale: as
  impala_loss_terms'."""
  scaled = lambda errors: errors if value_scale is None else errors / value_scale
  terms = dict(
      pg_loss=policy_gradient_loss(returns.target_action_log_probs,
                                   scaled(returns.pg_advantages), mask),
      baseline_loss=baseline_loss(scaled(returns.vs - values), mask),
      entropy_loss=entropy_loss)
  if trust_region_mask is not None:
    terms["trust_region_rejected"] = tf.reduce_sum(1.0 - trust_region_mask)
  return terms


def impala_loss_terms(action_distribution, learner_outputs, env_outputs, agent_outputs, config,
                      entropy_mask=None, value_scale=None):
  """The three unweighted IMPALA loss terms (section 4.2) of one batch, with LASER's trust
  region when the config has one (for a Gaussian policy, the Monte-Carlo implied KL).

  Args:
    action_distribution: the policy's distributions family (the network config's
      `action_distribution`: CategoricalFamily or DiagGaussianFamily).
    learner_outputs: the network's output of [T+1, B, ...] from the learner's unroll
      (networks.NetworkOutput).
    env_outputs: EnvOutput of [T+1, B, ...].
    agent_outputs: AgentOutput of [T+1, B, ...] (the behaviour
      policy mu).
    config: LearnerConfig.
    entropy_mask: None, or float32 [B]: the trajectories whose entropy counts (LASER
      section 5.1: online data only).
    value_scale: None, or float32 [B]: each trajectory's scale (per-task PopArt, Hessel et al.
      2019: its task's sigma): its policy-gradient advantages and baseline errors are
      divided by it before the sums (learning/popart.py). The entropy term keeps its scale.

  Returns:
    (dict with float32 scalars pg_loss, baseline_loss, entropy_loss (sums over T and B) and,
     with a trust region, trust_region_rejected (steps the trust region left out of the
     policy-gradient, baseline and entropy losses), the vtrace.VTraceFromLogitsReturns
     they were computed from ([T, B] each)).
  """
  batch = aligned(action_distribution, learner_outputs, env_outputs, agent_outputs, config)
  returns = vtrace.from_distributions(
      behaviour_policy=batch.behaviour_policy, target_policy=batch.learner_policy,
      actions=batch.actions, discounts=batch.discounts, rewards=batch.rewards,
      values=batch.values, bootstrap_value=batch.bootstrap_value,
      off_policy_correction=config.off_policy_correction, transition_mask=batch.kept,
      **_vtrace_options(config))
  # LASER section 4.3: rejected transitions count for none of the losses ("we reject
  # transitions entirely for all estimates"); nor does a cut transition (a truncated
  # episode's reset step, module docstring). Multiplying by a mask of ones changes no bit.
  trust_region = (returns.trust_region_mask if _trust_region_threshold(config) is not None
                  else None)
  mask = batch.kept if trust_region is None else trust_region * batch.kept
  entropy = entropy_loss(batch.learner_policy,
                                entropy_steps(mask, entropy_mask, batch.rewards))
  return (_vtrace_loss_terms(returns, batch.values, mask, entropy, trust_region, value_scale),
          returns)


def impact_loss_terms(action_distribution, learner_outputs, target_policy_params, env_outputs,
                      agent_outputs, config, impact_config):
  """IMPACT's unweighted loss terms of one batch (IMPACT paper, Algorithm 1 line 8), summed
  over T and B like impala_loss_terms (see ImpactLearner).

  Args:
    action_distribution: as impala_loss_terms.
    learner_outputs: the network's output of [T+1, B, ...] from the learner's unroll.
    target_policy_params: float32 [T+1, B, P], the target network's flat policy parameters
      (the logits, or a Gaussian's mean and log_std concatenated; constant).
    env_outputs: EnvOutput of [T+1, B, ...].
    agent_outputs: AgentOutput of [T+1, B, ...] (the workers'
      policy mu).
    config: LearnerConfig (reward clipping, discounting, rho_bar and c_bar of the advantages).
    impact_config: ImpactConfig.

  Returns:
    (dict of float32 scalars: pg_loss (the clipped surrogate of r = pi / max(pi_target,
     mu / rho) and the V-trace GAE-lambda advantages of pi_target against mu), baseline_loss
     (0.5 sum (V + A - V(x))^2, section 3.1's value target), entropy_loss (-sum H(pi)),
     kl_loss (sum KL(pi_target || pi));
     dict of float32 scalars: ppo_clipped_fraction, target_worker_clipped_fraction).
  """
  terms, diagnostics, _ = impact_loss_terms_and_targets(
      action_distribution, learner_outputs, target_policy_params, env_outputs, agent_outputs,
      config, impact_config)
  return terms, diagnostics


def impact_loss_terms_and_targets(action_distribution, learner_outputs, target_policy_params,
                                  env_outputs, agent_outputs, config, impact_config,
                                  value_scale=None):
  """impact_loss_terms and the value targets v_s float32 [T, B] (PopArt's statistics follow
  them, learning/popart.py); value_scale: as impala_loss_terms' (standardised advantages,
  --normalize_advantages, have no scale left to divide)."""
  batch = aligned(action_distribution, learner_outputs, env_outputs, agent_outputs,
                             config)
  target_policy = action_distribution(tf.stop_gradient(target_policy_params[:-1]))
  log_probs = lambda policy: policy.log_prob(batch.actions)
  return _impact_terms(
      batch, log_probs(batch.learner_policy), log_probs(target_policy),
      log_probs(batch.behaviour_policy), config, impact_config,
      entropy_loss=entropy_loss(batch.learner_policy, batch.kept),
      # KL(pi_target || pi) at x_t stays: it depends on the observation alone (a real one),
      # and the KL coefficient's adaptation averages it over all T x B steps (learner.py).
      kl_loss=kl_divergence(target_policy, batch.learner_policy), value_scale=value_scale)


def _impact_terms(batch, action_log_probs, target_log_probs, behaviour_log_probs, config,
                  impact_config, entropy_loss, kl_loss, value_scale=None):
  """impact_loss_terms from the log-probabilities of the taken actions [T, B] under pi,
  pi_target and mu (any action space), and the entropy and KL terms."""
  # A cut transition (a truncated episode's reset step) has rho = c = 0, so its advantage is
  # 0 and the one into it bootstraps from V(x_t) (module docstring); its terms weigh 0.
  returns = gae_from_importance_weights(
      target_log_probs - behaviour_log_probs, batch.discounts, batch.rewards, batch.values,
      batch.bootstrap_value, lambda_=impact_config.gae_lambda,
      clip_rho_threshold=config.clip_rho_threshold, clip_c_threshold=config.clip_c_threshold,
      transition_mask=batch.kept)
  beta = 1.0 / impact_config.target_worker_clipping  # Section 3.1: beta = 1 / rho.
  log_ratios = impact_log_ratio(action_log_probs, target_log_probs,
                                       behaviour_log_probs, beta)
  scaled = lambda errors: errors if value_scale is None else errors / value_scale
  advantages = returns.pg_advantages
  if impact_config.normalize_advantages:
    advantages = standardized_advantages(advantages, batch.kept)
  else:
    advantages = scaled(advantages)
  terms = dict(
      pg_loss=clipped_surrogate_loss(log_ratios, advantages, impact_config.ppo_clip, batch.kept),
      baseline_loss=baseline_loss(scaled(returns.vs - batch.values), batch.kept),
      entropy_loss=entropy_loss, kl_loss=kl_loss)
  fraction = lambda mask: tf.reduce_mean(tf.cast(mask, tf.float32))
  diagnostics = dict(
      ppo_clipped_fraction=fraction(
          tf.abs(tf.exp(log_ratios) - 1.0) > impact_config.ppo_clip),
      target_worker_clipped_fraction=fraction(
          tf.math.log(beta) + behaviour_log_probs > target_log_probs))
  return terms, diagnostics, returns.vs


def gae_from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                                lambda_, clip_rho_threshold=1.0, clip_c_threshold=1.0,
                                transition_mask=None,
                                name="vtrace_gae_from_importance_weights"):
  r"""IMPACT's V-trace GAE-lambda advantages (IMPACT paper, section 3.1, after Han & Sung).

      A_t = sum_{i=t}^{T-1} (prod_{j=t}^{i-1} lambda gamma_j c_j) delta_i V,
      delta_i V = rho_i (r_i + gamma_i V(x_{i+1}) - V(x_i)),
  with rho_i = min(rho_bar, pi/mu), c_j = min(c_bar, pi/mu) and V(x_T) = bootstrap_value.
  This is V-trace's v_t - V(x_t) with Remark 2's lambda, so the value target is v_t = V(x_t)
  + A_t. IMPACT takes pi = the target network's policy and mu = the worker's.

  Args:
    log_rhos: float32 [T, B], log(pi(a_t|x_t) / mu(a_t|x_t)).
    discounts, rewards, values, bootstrap_value: as in vtrace.from_importance_weights.
    lambda_: GAE's lambda (IMPACT Table 1, discrete: 0.995).
    clip_rho_threshold: rho_bar, or None. clip_c_threshold: c_bar, or None.
    transition_mask: None, or float32 [T, B] as in vtrace.from_importance_weights (A_t = 0 where it
      is 0, and A_{t-1} bootstraps from V(x_t)).
    name: name scope.

  Returns:
    VTraceReturns(vs float32 [T, B], pg_advantages float32 [T, B] = A_t), gradient-free.
  """
  with tf.name_scope(name):
    values = tf.convert_to_tensor(values, dtype=tf.float32)
    returns = vtrace.from_importance_weights(
        log_rhos, discounts, rewards, values, bootstrap_value,
        clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=None,
        clip_c_threshold=clip_c_threshold, lambda_=lambda_, transition_mask=transition_mask)
    return vtrace.VTraceReturns(vs=returns.vs,
                                pg_advantages=tf.stop_gradient(returns.vs - values))
