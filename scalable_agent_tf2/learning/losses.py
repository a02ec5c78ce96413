"""IMPALA's loss terms (section 4.2), reward clipping (Appendix D, Figure D.1) and IMPACT's
clipped target-worker surrogate (IMPACT paper, section 3.1).

The losses are SUMMED over time and batch, as in the released code (deepmind/scalable_agent,
experiment.py) and the note under the paper's Table D.1; the hyperparameters of Tables D.1,
D.3 and G.1 assume that scale.
"""
import tensorflow as tf

# Names of the reward-clipping modes (the learner's job; environments return raw rewards);
# settings.py names them, as the choices of --reward_clipping.
from scalable_agent_tf2.configuration.settings import (
    ABS_ONE, NO_CLIPPING, OPTIMISTIC_ASYMMETRIC, REWARD_CLIPPING_MODES, SOFT_ASYMMETRIC)


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
      batch_loss.entropy_steps).

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
      batch_loss.py).

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
      reset step, batch_loss.py).
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
