"""Diagonal Gaussian policies for continuous actions: the counterparts of the categorical
functions in vtrace.py and losses.py.

IMPACT's continuous-control experiments (IMPACT paper, section 4.3 and Figure 5; Appendix E
"We assume a diagonal Gaussian policy") act with pi(a|x) = prod_i N(a_i; m_i(x), s_i(x)^2)
over the A action dimensions. The paper does not say whether log s depends on the state. Its
code base is RLlib, whose model option `free_log_std` defaults to False: the policy network's
last linear layer outputs 2A numbers, the first half the means and the second half the log
standard deviations (RLlib's DiagGaussian, rllib/models/tf/tf_action_dist.py, and
FullyConnectedNetwork, rllib/models/tf/fcnet.py). So the default here is a STATE-DEPENDENT
log standard deviation, unbounded (RLlib's DiagGaussian clips neither mean nor log_std);
continuous_networks.GaussianPolicyHead also offers RLlib's `free_log_std=True` variant (one
learned log_std per action dimension, state-independent). The functions below take both
(they see mean and log_std tensors of the same shape).

Which functions of vtrace.py / losses.py need no counterpart: everything that takes
log-probabilities of the taken actions is distribution-agnostic: vtrace.from_importance_weights
and gae_from_importance_weights (log_rhos), losses.policy_gradient_loss, losses.impact_log_ratio
(log pi, log pi_target, log mu: with densities, max(pi_target, beta mu) compares densities on
the same measure, so the clipped target-worker ratio of IMPACT section 3.1 is unchanged) and
losses.clipped_surrogate_loss. What takes logits has its counterpart here:
    vtrace.log_probs_from_logits_and_actions -> log_probs_from_params_and_actions
    vtrace.from_logits                       -> from_gaussian_params
    vtrace.implied_policy_kl                 -> implied_policy_kl (Monte-Carlo)
    losses.entropy_loss                      -> entropy_loss (entropy: per step)
    losses.kl_divergence                     -> kl_divergence (kl: per step)
    networks.Agent.step's categorical draw   -> sample (TF), sample_action (numpy, actors)

Actions: the behaviour policy's log-probability is of the UNCLIPPED sample, which is what the
trajectory stores; action_bounds.clip_to_bounds clips only the copy sent to the environment
(RLlib's `clip_actions` does the same).

Everything is time-major like vtrace.py: T is the unroll length, B the batch size, A the
number of action dimensions; the per-step functions also accept any other leading shape
(e.g. [B, A] when acting).
"""
import math

import numpy as np
import tensorflow as tf

from scalable_agent_tf2 import vtrace

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)

# LASER section 4.3: "For large or infinite action spaces a Monte Carlo estimate of the KL
# divergence can be computed." K = 32 samples from pi per step (a choice of this project,
# not the paper's): against numerical integration in one dimension, 200 seeds gave
# 0.048 +- 0.013 for a true 0.048 and 0.57 +- 0.12 for a true 0.59, i.e. a standard error of
# about a quarter of the divergence; the cost is K x T x B x A normal draws per update.
IMPLIED_KL_NUM_SAMPLES = 32


def _params(mean, log_std, mean_name="policy_mean", log_std_name="policy_log_std"):
  """float32 tensors of one shape [..., A], with a message naming the mismatch."""
  mean = tf.convert_to_tensor(mean, tf.float32)
  log_std = tf.convert_to_tensor(log_std, tf.float32)
  if mean.shape.rank is not None and mean.shape.rank < 1:
    raise ValueError(f"{mean_name} must have an action dimension [..., A], got a scalar.")
  if not mean.shape.is_compatible_with(log_std.shape):
    raise ValueError(f"{log_std_name} has shape {log_std.shape}, expected {mean.shape} like "
                     f"{mean_name} (a state-independent log_std is broadcast by the policy "
                     f"head, continuous_networks.GaussianPolicyHead).")
  return mean, log_std


def log_probs_from_params_and_actions(policy_mean, policy_log_std, actions):
  """log pi(a | x) of the taken actions, summed over the action dimensions.

  log pi(a|x) = sum_i [-0.5 ((a_i - m_i) / s_i)^2 - log s_i - 0.5 log(2 pi)].

  Args:
    policy_mean: float32 [T, B, A], the means m(x).
    policy_log_std: float32 [T, B, A], the log standard deviations log s(x).
    actions: float32 [T, B, A], the actions taken (unclipped samples).

  Returns:
    float32 [T, B].
  """
  mean, log_std = _params(policy_mean, policy_log_std)
  actions = tf.convert_to_tensor(actions, tf.float32)
  if not actions.shape.is_compatible_with(mean.shape):
    raise ValueError(f"actions has shape {actions.shape}, expected {mean.shape} like "
                     f"policy_mean (continuous actions are float32 [..., A]).")
  standardised = (actions - mean) * tf.exp(-log_std)
  return -tf.reduce_sum(0.5 * tf.square(standardised) + log_std + _HALF_LOG_2PI, axis=-1)


def entropy(policy_log_std):
  """H(pi(.|x)) = sum_i (log s_i + 0.5 log(2 pi e)) (the mean does not matter).

  Args:
    policy_log_std: float32 [T, B, A].

  Returns:
    float32 [T, B].
  """
  log_std = tf.convert_to_tensor(policy_log_std, tf.float32)
  return tf.reduce_sum(log_std + _HALF_LOG_2PI_E, axis=-1)


def entropy_loss(policy_log_std, mask=None):
  """-sum_t,b H(pi(.|x_t)): losses.entropy_loss's counterpart (IMPALA section 4.2 "entropy
  bonus"; the IMPACT paper's continuous setting sets its weight to 0, Table 2).

  Args:
    policy_log_std: float32 [T, B, A].
    mask: None, or float32 [T, B]: 0 leaves a step out (as in losses.entropy_loss).

  Returns:
    float32 scalar. The learner multiplies it by entropy_cost.
  """
  negative_entropy = -entropy(policy_log_std)
  if mask is not None:
    negative_entropy = tf.where(tf.cast(mask, tf.bool), negative_entropy,
                                tf.zeros_like(negative_entropy))
  return tf.reduce_sum(negative_entropy)


def kl(p_mean, p_log_std, q_mean, q_log_std):
  """KL(p || q) between diagonal Gaussians at every step, in closed form:

  sum_i [log(s_q,i / s_p,i) + (s_p,i^2 + (m_p,i - m_q,i)^2) / (2 s_q,i^2) - 1/2].

  Args:
    p_mean, p_log_std: float32 [T, B, A], p's parameters.
    q_mean, q_log_std: float32 [T, B, A], q's parameters.

  Returns:
    float32 [T, B], >= 0 (gradients flow through both).
  """
  p_mean, p_log_std = _params(p_mean, p_log_std, "p_mean", "p_log_std")
  q_mean, q_log_std = _params(q_mean, q_log_std, "q_mean", "q_log_std")
  if not p_mean.shape.is_compatible_with(q_mean.shape):
    raise ValueError(f"q_mean has shape {q_mean.shape}, expected {p_mean.shape} like p_mean.")
  variance_ratio = tf.exp(2.0 * (p_log_std - q_log_std))
  standardised_gap = (p_mean - q_mean) * tf.exp(-q_log_std)
  return tf.reduce_sum(
      q_log_std - p_log_std + 0.5 * (variance_ratio + tf.square(standardised_gap)) - 0.5,
      axis=-1)


def kl_divergence(p_mean, p_log_std, q_mean, q_log_std):
  """sum_t,b KL(p || q) with p held constant: losses.kl_divergence's counterpart, for
  IMPACT's KL(pi_target, pi) term (Algorithm 1 line 8; "KL Coeff" 1.0 on continuous tasks,
  Table 2).

  Args:
    p_mean, p_log_std: float32 [T, B, A] (the target network's; no gradient).
    q_mean, q_log_std: float32 [T, B, A] (the learner's; gradients flow through these).

  Returns:
    float32 scalar.
  """
  p_mean, p_log_std = _params(p_mean, p_log_std, "p_mean", "p_log_std")
  return tf.reduce_sum(kl(tf.stop_gradient(p_mean), tf.stop_gradient(p_log_std),
                          q_mean, q_log_std))


def implied_policy_kl(behaviour_policy_mean, behaviour_policy_log_std, target_policy_mean,
                      target_policy_log_std, clip_rho_threshold=1.0,
                      num_samples=IMPLIED_KL_NUM_SAMPLES, seed=(0, 0)):
  """KL(pi || pi_rho_bar) at every step, estimated by Monte Carlo: vtrace.implied_policy_kl's
  counterpart for LASER's trust region (LASER section 4.3).

  pi_rho_bar(a|x) = min(rho_bar mu(a|x), pi(a|x)) / Z, Z = E_pi[min(1, rho_bar mu / pi)]
  (IMPALA Theorem 1; LASER equation 3). With e(a) = max(0, log pi(a) - log mu(a) - log rho_bar),
      log(pi / pi_rho_bar) = e(a) + log Z,   Z = E_pi[exp(-e(a))],
  so KL = E_pi[e] + log E_pi[exp(-e)], both expectations over the same K samples a ~ pi
  (section 4.3: "a Monte Carlo estimate of the KL divergence"). The estimate is >= 0 by
  Jensen, exactly 0 where pi = mu (rho_bar >= 1), and consistent as K grows. It depends on
  the states' policies only, not on the actions taken (section 4.3).

  Args:
    behaviour_policy_mean, behaviour_policy_log_std: float32 [T, B, A], mu's parameters.
    target_policy_mean, target_policy_log_std: float32 [T, B, A], pi's parameters.
    clip_rho_threshold: rho_bar (V-trace's, 1 by default); None or inf: pi_rho_bar = pi, 0.
    num_samples: K, samples from pi per step.
    seed: int32 [2], the stateless random seed of the samples (same seed, same estimate).

  Returns:
    float32 [T, B], >= 0, gradient-free (it selects data; it is not a loss).
  """
  mu_mean, mu_log_std = tf.nest.map_structure(tf.stop_gradient, _params(
      behaviour_policy_mean, behaviour_policy_log_std, "behaviour_policy_mean",
      "behaviour_policy_log_std"))
  pi_mean, pi_log_std = tf.nest.map_structure(tf.stop_gradient, _params(
      target_policy_mean, target_policy_log_std, "target_policy_mean", "target_policy_log_std"))
  if not mu_mean.shape.is_compatible_with(pi_mean.shape):
    raise ValueError(f"target_policy_mean has shape {pi_mean.shape}, expected "
                     f"{mu_mean.shape} like behaviour_policy_mean.")
  if clip_rho_threshold is None or math.isinf(clip_rho_threshold):
    return tf.zeros_like(pi_mean[..., 0])
  if num_samples < 1:
    raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
  noise = tf.random.stateless_normal(
      tf.concat([[num_samples], tf.shape(pi_mean)], 0), seed=seed)  # [K, T, B, A]
  samples = pi_mean + tf.exp(pi_log_std) * noise
  # log pi(a) - log mu(a) (the 0.5 log(2 pi) terms cancel), both by the same ops, so that
  # pi = mu gives exactly 0.
  log_density = lambda mean, log_std: -tf.reduce_sum(
      0.5 * tf.square((samples - mean) * tf.exp(-log_std)) + log_std, axis=-1)
  log_pi = log_density(pi_mean, pi_log_std)
  log_mu = log_density(mu_mean, mu_log_std)
  excess = tf.nn.relu(log_pi - log_mu - math.log(clip_rho_threshold))  # [K, T, B]
  log_normaliser = (tf.reduce_logsumexp(-excess, axis=0)
                    - tf.math.log(tf.cast(num_samples, tf.float32)))
  return tf.maximum(tf.reduce_mean(excess, axis=0) + log_normaliser, 0.0)


def from_gaussian_params(behaviour_policy_mean, behaviour_policy_log_std, target_policy_mean,
                         target_policy_log_std, actions, discounts, rewards, values,
                         bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                         clip_c_threshold=1.0, lambda_=1.0, trust_region_threshold=None,
                         trust_region_seed=(0, 0), name="vtrace_from_gaussian_params"):
  """V-trace from behaviour and target diagonal Gaussians: vtrace.from_logits's counterpart.

  log_rhos = log pi(a_t|x_t) - log mu(a_t|x_t) of the taken (unclipped) actions, then
  vtrace.from_importance_weights. Table 2's alternative corrections (vtrace.from_logits's
  `off_policy_correction`) are IMPALA's discrete-action ablation and are not offered here.

  Args:
    behaviour_policy_mean, behaviour_policy_log_std: float32 [T, B, A], mu's parameters
      (from the actors).
    target_policy_mean, target_policy_log_std: float32 [T, B, A], pi's parameters (from the
      learner; gradients flow into target_action_log_probs).
    actions: float32 [T, B, A], the unclipped actions the actors sampled.
    discounts, rewards, values, bootstrap_value, clip_*, lambda_: as in
      vtrace.from_importance_weights ([T, B], [T, B], [T, B], [B]).
    trust_region_threshold: None for plain V-trace; else LASER's trust region (section 4.3)
      with `implied_policy_kl` (rho_bar = clip_rho_threshold) as the relevance function:
      steps above the threshold are rejected (traces cut, mask 0). math.inf keeps every step.
    trust_region_seed: int32 [2], the seed of implied_policy_kl's Monte-Carlo samples.
    name: name scope.

  Returns:
    vtrace.VTraceFromLogitsReturns (the same fields as vtrace.from_logits): vs [T, B],
    pg_advantages [T, B] (both gradient-free), log_rhos [T, B], behaviour_action_log_probs
    [T, B], target_action_log_probs [T, B], trust_region_mask [T, B] (1 = kept).
  """
  with tf.name_scope(name):
    target_action_log_probs = log_probs_from_params_and_actions(
        target_policy_mean, target_policy_log_std, actions)
    behaviour_action_log_probs = log_probs_from_params_and_actions(
        behaviour_policy_mean, behaviour_policy_log_std, actions)
    target_action_log_probs.shape.assert_has_rank(2)
    log_rhos = target_action_log_probs - behaviour_action_log_probs
    mask = tf.ones_like(log_rhos)
    if trust_region_threshold is not None:
      mask = vtrace.trust_region_mask(
          implied_policy_kl(behaviour_policy_mean, behaviour_policy_log_std,
                            target_policy_mean, target_policy_log_std, clip_rho_threshold,
                            seed=trust_region_seed),
          trust_region_threshold)
    returns = vtrace.from_importance_weights(
        log_rhos, discounts, rewards, values, bootstrap_value,
        clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold, lambda_=lambda_,
        trust_region_mask=mask if trust_region_threshold is not None else None)
    return vtrace.VTraceFromLogitsReturns(
        vs=returns.vs, pg_advantages=returns.pg_advantages, log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs, trust_region_mask=mask)


def sample(policy_mean, policy_log_std, seed):
  """a = m + s * eps, eps ~ N(0, I): an UNCLIPPED action (TF, stateless, XLA-compilable).

  Args:
    policy_mean: float32 [..., A] (e.g. [B, A] when acting).
    policy_log_std: float32 [..., A].
    seed: int32 [2], the stateless random seed.

  Returns:
    float32 [..., A]. Its log-probability is log_probs_from_params_and_actions of it; clip
    only the copy sent to the environment (action_bounds.clip_to_bounds).
  """
  mean, log_std = _params(policy_mean, policy_log_std)
  return mean + tf.exp(log_std) * tf.random.stateless_normal(tf.shape(mean), seed=seed)


def sample_action(policy_mean, policy_log_std, rng):
  """sample's numpy counterpart for actors that sample in numpy (like policies.sample_action).

  Args:
    policy_mean: float [A] (or [..., A]).
    policy_log_std: float, the same shape.
    rng: numpy.random.Generator (one per actor: repeatable seeded evaluations).

  Returns:
    float32 [A] (or [..., A]), unclipped.
  """
  mean = np.asarray(policy_mean, np.float32)
  log_std = np.asarray(policy_log_std, np.float32)
  if mean.shape != log_std.shape:
    raise ValueError(f"policy_log_std has shape {log_std.shape}, expected {mean.shape} like "
                     f"policy_mean.")
  noise = rng.standard_normal(mean.shape, dtype=np.float32)
  return (mean + np.exp(log_std) * noise).astype(np.float32)
