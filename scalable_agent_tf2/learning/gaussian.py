"""DEPRECATED: diagonal Gaussian policies are distributions.DiagGaussian (and its family,
distributions.DiagGaussianFamily); V-trace for any distribution is vtrace.from_distributions,
the entropy and KL losses are losses.entropy_loss / losses.kl_divergence of distributions.

These thin aliases keep the functions this module offered (docs/CONTINUOUS_CONTROL.md names it)
for callers outside the project; the project's own code does not use them. Each is one call of
the method that now holds its arithmetic (the numbers are the same).

    log_probs_from_params_and_actions(m, s, a) -> DiagGaussian(m, s).log_prob(a)
    entropy(s) / entropy_loss(s, mask)         -> DiagGaussian(m, s).entropy(),
                                                  losses.entropy_loss(DiagGaussian(m, s), mask)
    kl(pm, ps, qm, qs) / kl_divergence(...)    -> p.kl(q), losses.kl_divergence(p, q)
    implied_policy_kl(mu..., pi..., ...)       -> pi.implied_policy_kl(mu, ...)
    from_gaussian_params(...)                  -> vtrace.from_distributions(mu, pi, ...)
    sample(m, s, seed) / sample_action(m, s, rng) -> DiagGaussian(m, s).sample(seed),
                                                  distributions.sample_gaussian_numpy
"""
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import vtrace

IMPLIED_KL_NUM_SAMPLES = distributions.IMPLIED_KL_NUM_SAMPLES
sample_action = distributions.sample_gaussian_numpy


def log_probs_from_params_and_actions(policy_mean, policy_log_std, actions):
  """DiagGaussian(policy_mean, policy_log_std).log_prob(actions): [T, B, A] -> [T, B]."""
  return distributions.DiagGaussian(policy_mean, policy_log_std).log_prob(actions)


def entropy(policy_log_std):
  """The entropy [T, B] of a diagonal Gaussian with log_std [T, B, A] (any mean)."""
  log_std = tf.convert_to_tensor(policy_log_std, tf.float32)
  return distributions.DiagGaussian(tf.zeros_like(log_std), log_std).entropy()


def entropy_loss(policy_log_std, mask=None):
  """losses.entropy_loss of a diagonal Gaussian with log_std [T, B, A]; mask [T, B]."""
  log_std = tf.convert_to_tensor(policy_log_std, tf.float32)
  return losses.entropy_loss(distributions.DiagGaussian(tf.zeros_like(log_std), log_std), mask)


def kl(p_mean, p_log_std, q_mean, q_log_std):
  """KL(p || q) [T, B] of diagonal Gaussians with parameters [T, B, A]."""
  return distributions.DiagGaussian(p_mean, p_log_std, "p_mean", "p_log_std").kl(
      distributions.DiagGaussian(q_mean, q_log_std, "q_mean", "q_log_std"))


def kl_divergence(p_mean, p_log_std, q_mean, q_log_std):
  """losses.kl_divergence (sum_t,b KL(p || q), p held constant) of diagonal Gaussians."""
  return losses.kl_divergence(
      distributions.DiagGaussian(p_mean, p_log_std, "p_mean", "p_log_std"),
      distributions.DiagGaussian(q_mean, q_log_std, "q_mean", "q_log_std"))


def implied_policy_kl(behaviour_policy_mean, behaviour_policy_log_std, target_policy_mean,
                      target_policy_log_std, clip_rho_threshold=1.0,
                      num_samples=IMPLIED_KL_NUM_SAMPLES, seed=(0, 0)):
  """pi.implied_policy_kl(mu, ...) [T, B] (LASER section 4.3, Monte Carlo)."""
  behaviour = distributions.DiagGaussian(behaviour_policy_mean, behaviour_policy_log_std,
                                         "behaviour_policy_mean", "behaviour_policy_log_std")
  target = distributions.DiagGaussian(target_policy_mean, target_policy_log_std,
                                      "target_policy_mean", "target_policy_log_std")
  return target.implied_policy_kl(behaviour, clip_rho_threshold, num_samples=num_samples,
                                  seed=seed)


def from_gaussian_params(behaviour_policy_mean, behaviour_policy_log_std, target_policy_mean,
                         target_policy_log_std, actions, discounts, rewards, values,
                         bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                         clip_c_threshold=1.0, lambda_=1.0, trust_region_threshold=None,
                         trust_region_seed=(0, 0), name="vtrace_from_gaussian_params"):
  """vtrace.from_distributions of two DiagGaussians ([T, B, A] parameters)."""
  return vtrace.from_distributions(
      distributions.DiagGaussian(behaviour_policy_mean, behaviour_policy_log_std),
      distributions.DiagGaussian(target_policy_mean, target_policy_log_std), actions,
      discounts, rewards, values, bootstrap_value, clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold, clip_c_threshold=clip_c_threshold,
      lambda_=lambda_, trust_region_threshold=trust_region_threshold,
      trust_region_seed=trust_region_seed, name=name)


def sample(policy_mean, policy_log_std, seed):
  """DiagGaussian(policy_mean, policy_log_std).sample(seed): unclipped [..., A]."""
  return distributions.DiagGaussian(policy_mean, policy_log_std).sample(seed)
