"""Diagonal Gaussian policies (distributions.DiagGaussian, action_bounds.py, heads.py and the
IMPACT paper's networks of networks.py) against numpy ground truths: closed forms written differently from the
implementation, Monte-Carlo estimates and numerical integration."""
import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import heads
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import vtrace
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from tests import reference
from tests.agent_steps import acting_step
from tests.agent_steps import sampled_actions


def _random_params(rng, shape):
  mean = rng.normal(size=shape).astype(np.float32)
  log_std = rng.uniform(-1.0, 0.5, size=shape).astype(np.float32)
  return mean, log_std


# The distributions API in the argument order of the functions these tests were first written
# for (learning/gaussian.py's, since removed: each was one call of these).
def _log_prob(mean, log_std, actions):
  return distributions.DiagGaussian(mean, log_std).log_prob(actions)


def _entropy(log_std):
  return distributions.DiagGaussian(tf.zeros_like(log_std), log_std).entropy()


def _entropy_loss(log_std, mask=None):
  return losses.entropy_loss(distributions.DiagGaussian(tf.zeros_like(log_std), log_std), mask)


def _kl(p_mean, p_log_std, q_mean, q_log_std):
  return distributions.DiagGaussian(p_mean, p_log_std).kl(
      distributions.DiagGaussian(q_mean, q_log_std))


def _kl_divergence(p_mean, p_log_std, q_mean, q_log_std):
  return losses.kl_divergence(distributions.DiagGaussian(p_mean, p_log_std),
                              distributions.DiagGaussian(q_mean, q_log_std))


def _implied_kl(mu_mean, mu_log_std, pi_mean, pi_log_std, clip_rho_threshold=1.0, **kwargs):
  return distributions.DiagGaussian(pi_mean, pi_log_std).implied_policy_kl(
      distributions.DiagGaussian(mu_mean, mu_log_std), clip_rho_threshold, **kwargs)


def _vtrace(mu_mean, mu_log_std, pi_mean, pi_log_std, *args, **kwargs):
  return vtrace.from_distributions(distributions.DiagGaussian(mu_mean, mu_log_std),
                                   distributions.DiagGaussian(pi_mean, pi_log_std), *args,
                                   **kwargs)


def _sample(mean, log_std, seed):
  return distributions.DiagGaussian(mean, log_std).sample(seed)


def numpy_log_prob(mean, log_std, actions):
  """log of the product of the one-dimensional normal densities (float64)."""
  mean, std, actions = (np.float64(mean), np.exp(np.float64(log_std)), np.float64(actions))
  densities = np.exp(-(actions - mean) ** 2 / (2 * std ** 2)) / np.sqrt(2 * np.pi * std ** 2)
  return np.log(np.prod(densities, axis=-1))


def numpy_kl(p_mean, p_log_std, q_mean, q_log_std):
  """KL of diagonal Gaussians in variances: 0.5 sum [tr + maha - k + log det ratio]."""
  p_var, q_var = np.exp(2 * np.float64(p_log_std)), np.exp(2 * np.float64(q_log_std))
  gap = np.float64(q_mean) - np.float64(p_mean)
  return 0.5 * np.sum(p_var / q_var + gap ** 2 / q_var - 1.0 + np.log(q_var / p_var), -1)


def numpy_grid_implied_kl(pi_params, mu_params, rho_bar, half_width=12.0, points=2001):
  """KL(pi || pi_rho_bar) by numerical integration on a grid over one or two dimensions,
  in log space (no underflow in the tails): pi_rho_bar = min(rho_bar mu, pi) / Z."""
  (pi_mean, pi_log_std), (mu_mean, mu_log_std) = pi_params, mu_params
  axes = [np.linspace(m - half_width, m + half_width, points) for m in pi_mean]
  grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
  cell = np.prod([a[1] - a[0] for a in axes])
  log_density = lambda mean, log_std: np.sum(
      -0.5 * ((grid - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi), -1)
  log_pi = log_density(np.array(pi_mean), np.array(pi_log_std))
  log_mu = log_density(np.array(mu_mean), np.array(mu_log_std))
  log_implied = np.minimum(np.log(rho_bar) + log_mu, log_pi)
  log_normaliser = np.log(np.sum(np.exp(log_implied)) * cell)
  return np.sum(np.exp(log_pi) * (log_pi - log_implied)) * cell + log_normaliser


# --- log-probabilities, entropy, KL ------------------------------------------------------


def test_log_probs_match_the_product_of_normal_densities():
  rng = np.random.default_rng(0)
  mean, log_std = _random_params(rng, (4, 3, 5))
  actions = (mean + np.exp(log_std) * rng.normal(size=mean.shape) * 2).astype(np.float32)
  log_probs = _log_prob(mean, log_std, actions)
  assert log_probs.shape == (4, 3)
  np.testing.assert_allclose(log_probs, numpy_log_prob(mean, log_std, actions), rtol=1e-5,
                             atol=1e-4)


def test_mismatched_shapes_are_refused_where_they_enter():
  mean = np.zeros((2, 3, 4), np.float32)
  with pytest.raises(ValueError, match="policy_log_std"):
    distributions.DiagGaussian(mean, np.zeros((2, 3, 1)))
  # A batch's actions are checked at V-trace's entry, not again inside log_prob.
  policy, zeros = distributions.DiagGaussian(mean, mean), np.zeros((2, 3), np.float32)
  with pytest.raises(ValueError, match=r"actions has shape \(2, 3\), expected \(2, 3, 4\)"):
    vtrace.vtrace_returns(policy, policy, zeros, zeros, zeros, zeros, zeros[0])


def test_entropy_matches_closed_form_and_monte_carlo():
  rng = np.random.default_rng(1)
  mean, log_std = _random_params(rng, (2, 3, 4))
  expected = np.sum(0.5 * np.log(2 * np.pi * np.e * np.exp(2 * np.float64(log_std))), -1)
  np.testing.assert_allclose(_entropy(log_std), expected, rtol=1e-5)
  samples = mean + np.exp(log_std) * rng.normal(size=(100000,) + mean.shape)
  monte_carlo = -numpy_log_prob(mean, log_std, samples).mean(axis=0)
  np.testing.assert_allclose(_entropy(log_std), monte_carlo, atol=0.03)


def test_entropy_loss_is_minus_the_masked_entropy_sum():
  rng = np.random.default_rng(2)
  _, log_std = _random_params(rng, (3, 2, 4))
  mask = np.array([[1, 0], [1, 1], [0, 1]], np.float32)
  entropies = _entropy(log_std).numpy()
  np.testing.assert_allclose(_entropy_loss(log_std), -entropies.sum(), rtol=1e-5)
  np.testing.assert_allclose(_entropy_loss(log_std, mask),
                             -(entropies * mask).sum(), rtol=1e-5)


def test_kl_matches_closed_form_and_monte_carlo():
  rng = np.random.default_rng(3)
  p_mean, p_log_std = _random_params(rng, (2, 3, 4))
  q_mean, q_log_std = _random_params(rng, (2, 3, 4))
  kl = _kl(p_mean, p_log_std, q_mean, q_log_std).numpy()
  np.testing.assert_allclose(kl, numpy_kl(p_mean, p_log_std, q_mean, q_log_std), rtol=1e-4)
  samples = p_mean + np.exp(p_log_std) * rng.normal(size=(200000,) + p_mean.shape)
  monte_carlo = (numpy_log_prob(p_mean, p_log_std, samples)
                 - numpy_log_prob(q_mean, q_log_std, samples)).mean(axis=0)
  np.testing.assert_allclose(kl, monte_carlo, rtol=0.05, atol=0.05)
  assert np.all(kl > 0)
  np.testing.assert_allclose(_kl(p_mean, p_log_std, p_mean, p_log_std), 0, atol=1e-6)


def test_kl_divergence_sums_and_holds_p_constant():
  rng = np.random.default_rng(4)
  params = [tf.Variable(x) for x in _random_params(rng, (3, 2, 2)) + _random_params(
      rng, (3, 2, 2))]
  with tf.GradientTape() as tape:
    total = _kl_divergence(*params)
  np.testing.assert_allclose(total, numpy_kl(*[p.numpy() for p in params]).sum(), rtol=1e-4)
  p_mean_grad, p_log_std_grad, q_mean_grad, q_log_std_grad = tape.gradient(total, params)
  assert p_mean_grad is None and p_log_std_grad is None
  # d KL / d m_q = (m_q - m_p) / s_q^2.
  p_mean, _, q_mean, q_log_std = [p.numpy() for p in params]
  np.testing.assert_allclose(q_mean_grad, (q_mean - p_mean) / np.exp(2 * q_log_std),
                             rtol=1e-4)
  assert np.all(np.isfinite(q_log_std_grad))


def test_impact_log_ratio_takes_gaussian_log_probs_unchanged():
  """losses.impact_log_ratio is distribution-agnostic: log pi - max(log pi_target,
  log beta + log mu) with densities."""
  rng = np.random.default_rng(5)
  pi, target, behaviour = [_random_params(rng, (4, 3, 2)) for _ in range(3)]
  actions = (behaviour[0] + np.exp(behaviour[1]) * rng.normal(size=(4, 3, 2))).astype(
      np.float32)
  log_probs = [numpy_log_prob(m, s, actions) for m, s in (pi, target, behaviour)]
  beta = 0.5
  ratio = losses.impact_log_ratio(*[_log_prob(
      m, s, actions) for m, s in (pi, target, behaviour)], beta)
  expected = log_probs[0] - np.maximum(log_probs[1], np.log(beta) + log_probs[2])
  np.testing.assert_allclose(ratio, expected, rtol=1e-4, atol=1e-4)


# --- LASER's implied-policy KL -------------------------------------------------------------


@pytest.mark.parametrize("pi_params,mu_params,rho_bar", [
    (([0.0], [0.0]), ([0.5], [0.0]), 1.0),
    (([0.0], [math.log(0.5)]), ([2.0], [0.0]), 1.0),
    (([0.0], [0.0]), ([1.0], [math.log(0.5)]), 2.0),
    (([0.0, 1.0], [0.0, -0.5]), ([0.7, 0.5], [0.3, -0.2]), 1.0),
])
def test_implied_kl_matches_numerical_integration(pi_params, mu_params, rho_bar):
  expected = numpy_grid_implied_kl(pi_params, mu_params, rho_bar,
                                   points=2001 if len(pi_params[0]) == 1 else 801)
  as_batch = lambda params: [np.array(x, np.float32)[None, None] for x in params]
  estimate = _implied_kl(*as_batch(mu_params), *as_batch(pi_params), rho_bar,
                                        num_samples=200000, seed=[7, 0]).numpy()[0, 0]
  assert expected > 0.01
  np.testing.assert_allclose(estimate, expected, rtol=0.03)


def test_implied_kl_default_samples_are_unbiased_enough():
  """K = 32 (the default) over many seeds: the mean is within 5% of the integral."""
  pi_params, mu_params = ([0.0], [0.0]), ([0.5], [0.0])
  expected = numpy_grid_implied_kl(pi_params, mu_params, 1.0)
  mu = [np.full((50, 8, 1), x[0], np.float32) for x in mu_params]
  pi = [np.full((50, 8, 1), x[0], np.float32) for x in pi_params]
  estimates = _implied_kl(*mu, *pi, 1.0, seed=[3, 4]).numpy()
  np.testing.assert_allclose(estimates.mean(), expected, rtol=0.05)
  assert estimates.std() < 0.5 * expected


def test_implied_kl_zero_cases_seed_and_no_gradient():
  rng = np.random.default_rng(6)
  mean, log_std = _random_params(rng, (3, 2, 4))
  np.testing.assert_array_equal(_implied_kl(mean, log_std, mean, log_std), 0)
  other_mean, other_log_std = _random_params(rng, (3, 2, 4))
  args = (other_mean, other_log_std, mean, log_std)
  np.testing.assert_array_equal(_implied_kl(*args, clip_rho_threshold=None), 0)
  first = _implied_kl(*args, seed=[1, 2]).numpy()
  assert np.all(first > 0)
  np.testing.assert_array_equal(first, _implied_kl(*args, seed=[1, 2]))
  assert not np.array_equal(first, _implied_kl(*args, seed=[2, 2]))
  variables = [tf.Variable(x) for x in args]
  with tf.GradientTape() as tape:
    total = tf.reduce_sum(_implied_kl(*variables))
  assert all(g is None for g in tape.gradient(total, variables))


# --- V-trace from Gaussian parameters ------------------------------------------------------


def _vtrace_inputs(rng, T=6, B=3, A=2):
  behaviour = _random_params(rng, (T, B, A))
  target = _random_params(rng, (T, B, A))
  actions = (behaviour[0] + np.exp(behaviour[1]) * rng.normal(size=(T, B, A))).astype(
      np.float32)
  _, _, _, discounts, rewards, values, bootstrap_value = reference.random_inputs(rng, T, B)
  return behaviour, target, actions, discounts, rewards, values, bootstrap_value


@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar,lambda_", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 1.5, 0.9, 0.95), (None, None, None, 1.0)])
def test_from_gaussian_params_matches_numpy_vtrace(rho_bar, pg_rho_bar, c_bar, lambda_):
  rng = np.random.default_rng(7)
  behaviour, target, actions, discounts, rewards, values, bootstrap = _vtrace_inputs(rng)
  log_rhos = numpy_log_prob(*target, actions) - numpy_log_prob(*behaviour, actions)
  expected_vs, expected_advantages = reference.numpy_vtrace(
      log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, c_bar, lambda_)
  returns = _vtrace(
      *behaviour, *target, actions, discounts, rewards, values, bootstrap,
      clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar,
      lambda_=lambda_)
  np.testing.assert_allclose(returns.log_rhos, log_rhos, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(returns.behaviour_action_log_probs,
                             numpy_log_prob(*behaviour, actions), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(returns.vs, expected_vs, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(returns.pg_advantages, expected_advantages, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(returns.trust_region_mask, 1)


def test_from_gaussian_params_trust_region_matches_numpy_and_compiles():
  rng = np.random.default_rng(8)
  behaviour, target, actions, discounts, rewards, values, bootstrap = _vtrace_inputs(rng)
  threshold, seed = 0.3, [5, 6]
  kl = _implied_kl(*behaviour, *target, 1.0, seed=seed).numpy()
  mask = (kl <= threshold).astype(np.float32)
  assert 0 < mask.sum() < mask.size  # Both kept and rejected steps.
  log_rhos = numpy_log_prob(*target, actions) - numpy_log_prob(*behaviour, actions)
  expected_vs, expected_advantages = reference.numpy_vtrace(
      log_rhos, discounts, rewards, values, bootstrap, mask=mask)
  compute = lambda *args: _vtrace(
      *args, trust_region_threshold=threshold, trust_region_seed=seed)
  inputs = (*behaviour, *target, actions, discounts, rewards, values, bootstrap)
  for function in (compute, tf.function(compute, jit_compile=True)):
    returns = function(*inputs)
    np.testing.assert_array_equal(returns.trust_region_mask, mask)
    np.testing.assert_allclose(returns.vs, expected_vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(returns.pg_advantages, expected_advantages, rtol=1e-4,
                               atol=1e-4)
  plain = _vtrace(*inputs)
  infinite = _vtrace(*inputs, trust_region_threshold=math.inf)
  np.testing.assert_allclose(infinite.vs, plain.vs, rtol=1e-6)


def test_policy_gradient_through_gaussian_log_probs_is_finite_and_correct():
  rng = np.random.default_rng(9)
  behaviour, target, actions, discounts, rewards, values, bootstrap = _vtrace_inputs(rng)
  mean, log_std = tf.Variable(target[0]), tf.Variable(target[1])
  with tf.GradientTape() as tape:
    returns = _vtrace(*behaviour, mean, log_std, actions, discounts,
                                            rewards, values, bootstrap)
    loss = losses.policy_gradient_loss(returns.target_action_log_probs,
                                       returns.pg_advantages)
  mean_grad, log_std_grad = tape.gradient(loss, [mean, log_std])
  advantages = returns.pg_advantages.numpy()[..., None]
  std = np.exp(np.float64(target[1]))
  # d log pi / d m = (a - m) / s^2; d log pi / d log s = ((a - m) / s)^2 - 1.
  np.testing.assert_allclose(mean_grad, -advantages * (actions - target[0]) / std ** 2,
                             rtol=1e-3, atol=1e-4)
  np.testing.assert_allclose(log_std_grad,
                             -advantages * (((actions - target[0]) / std) ** 2 - 1),
                             rtol=1e-3, atol=1e-4)
  assert np.all(np.isfinite(mean_grad)) and np.all(np.isfinite(log_std_grad))


# --- sampling and clipping ------------------------------------------------------------


def test_tf_and_numpy_samples_have_the_policy_statistics():
  mean = np.array([0.5, -2.0, 0.0], np.float32)
  log_std = np.log(np.array([0.3, 1.0, 2.5], np.float32))
  tiled = lambda x: np.tile(x, (50000, 1))
  tf_samples = _sample(tiled(mean), tiled(log_std), seed=[0, 1]).numpy()
  np_samples = distributions.DiagGaussianFamily(3).sample_numpy(
      np.concatenate([tiled(mean), tiled(log_std)], -1), np.random.default_rng(0))
  for samples in (tf_samples, np_samples):
    assert samples.dtype == np.float32
    np.testing.assert_allclose(samples.mean(0), mean, atol=0.04)
    np.testing.assert_allclose(samples.std(0), np.exp(log_std), rtol=0.02)
  np.testing.assert_array_equal(
      tf_samples, _sample(tiled(mean), tiled(log_std), seed=[0, 1]))


def test_samples_are_unclipped_and_only_the_environment_copy_is_clipped():
  mean, log_std = np.zeros(4, np.float32), np.full(4, math.log(3.0), np.float32)
  samples = distributions.DiagGaussianFamily(4).sample_numpy(
      np.tile(np.concatenate([mean, log_std]), (100, 1)), np.random.default_rng(1))
  assert np.abs(samples).max() > 1.0  # The policy's own samples leave [-1, 1].
  original = samples.copy()
  clipped = np.stack([action_bounds.clip_to_bounds(a, -1.0, 1.0) for a in samples])
  np.testing.assert_array_equal(samples, original)  # The trajectory's copy is untouched.
  np.testing.assert_array_equal(clipped, np.clip(original, -1.0, 1.0))
  # The behaviour log-prob is the density at the unclipped sample, not at the clipped one.
  stored = _log_prob(mean, log_std, samples[0])
  np.testing.assert_allclose(stored, numpy_log_prob(mean, log_std, samples[0]), rtol=1e-5)


def test_clip_to_bounds_per_dimension_and_bad_input():
  low, high = np.array([-1.0, 0.0, -0.4]), np.array([1.0, 2.0, 0.4])
  np.testing.assert_array_equal(
      action_bounds.clip_to_bounds([3.0, -1.0, 0.25], low, high), [1.0, 0.0, 0.25])
  assert action_bounds.clip_to_bounds([3.0, -1.0, 0.1], low, high).dtype == np.float32
  with pytest.raises(ValueError, match="NaN"):
    action_bounds.clip_to_bounds([np.nan, 0.0, 0.0], low, high)
  with pytest.raises(ValueError, match="inverted"):
    action_bounds.clip_to_bounds([0.0, 0.0, 0.0], high, low)


# --- networks --------------------------------------------------------------------------


def _env_outputs(observations):
  zeros = np.zeros(observations.shape[:2], np.float32)
  return EnvOutput(reward=zeros, done=zeros.astype(bool),
                   observation=Observation(frame=observations, instruction=()),
                   episode_return=(), episode_step=(), truncated=zeros.astype(bool))


@pytest.mark.parametrize("state_dependent", [True, False])
def test_policy_head_log_std_dependence(state_dependent):
  init = torsos.NormcInitializer(0).for_output_layers()
  head = heads.policy_head(distributions.DiagGaussianFamily(3), 8, init,
                           state_dependent_log_std=state_dependent)
  assert isinstance(head, heads.GaussianPolicyHead)
  head.linear.w.assign(tf.random.normal(head.linear.w.shape, seed=1))
  inputs = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
  params = head(inputs)
  assert params.shape == (5, 6)
  mean, log_std = params[:, :3], params[:, 3:]
  assert mean.shape == log_std.shape == (5, 3)
  outputs = inputs @ head.linear.w.numpy() + head.linear.b.numpy()
  np.testing.assert_allclose(mean, outputs[:, :3], rtol=1e-5, atol=1e-5)
  if state_dependent:  # RLlib's DiagGaussian: the second half of the outputs is log_std.
    np.testing.assert_allclose(log_std, outputs[:, 3:], rtol=1e-5, atol=1e-5)
  else:  # RLlib's free_log_std: one learned vector, initialised to 0.
    head.log_std.assign([0.1, -0.2, 0.3])
    np.testing.assert_allclose(head(inputs)[:, 3:], np.tile([0.1, -0.2, 0.3], (5, 1)),
                               rtol=1e-6)


def test_a_free_log_std_starts_at_initial_log_std_and_a_state_dependent_one_ignores_it():
  init = torsos.NormcInitializer(0).for_output_layers()
  inputs = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
  free = heads.policy_head(distributions.DiagGaussianFamily(3), 8, init,
                           state_dependent_log_std=False, initial_log_std=-2.0)
  np.testing.assert_array_equal(free(inputs)[:, 3:], np.full((5, 3), -2.0, np.float32))
  assert [v.name for v in free.trainable_variables].count("policy/log_std:0") == 1
  state = heads.policy_head(distributions.DiagGaussianFamily(3), 8, init,
                            state_dependent_log_std=True, initial_log_std=-2.0)
  assert not hasattr(state, "log_std")
  assert not np.allclose(state(inputs)[:, 3:], -2.0)
  # Through the network's config, as the gym family builds it (--initial_log_std).
  config = dataclasses.replace(networks.continuous_vector_config(
      observation_size=5, action_size=2, state_dependent_log_std=False), initial_log_std=-0.5)
  np.testing.assert_array_equal(networks.Agent(config, seed=0).policy.log_std, [-0.5, -0.5])


def test_agent_architecture_initialisation_and_separate_networks():
  config = networks.continuous_vector_config(observation_size=11, action_size=3)
  agent = networks.Agent(config, seed=0)
  for torso in (agent.policy_torso, agent.value_torso):
    assert [layer.w.shape for layer in torso.layers] == [(11, 256), (256, 256)]
    for layer in torso.layers:
      np.testing.assert_allclose(np.linalg.norm(layer.w.numpy(), axis=0), 1.0, rtol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(agent.policy.linear.w.numpy(), axis=0), 0.01,
                             rtol=1e-5)
  assert agent.policy.linear.w.shape == (256, 6)
  observations = np.random.default_rng(0).normal(size=(4, 2, 11)).astype(np.float32)
  with tf.GradientTape(persistent=True) as tape:
    output, state = agent.unroll(np.zeros((4, 2, 3), np.float32), _env_outputs(observations),
                                 agent.initial_state(2))
    policy_total = tf.reduce_sum(output.policy_params)
    value_total = tf.reduce_sum(output.baseline)
  assert state == () and output.baseline.shape == (4, 2)
  assert output.policy_params.shape == (4, 2, 6)
  value_variables = agent.value_torso.trainable_variables + agent.baseline.trainable_variables
  policy_variables = agent.policy_torso.trainable_variables + agent.policy.trainable_variables
  assert all(g is None for g in tape.gradient(policy_total, value_variables))
  assert all(g is None for g in tape.gradient(value_total, policy_variables))
  gradients = tape.gradient(policy_total, policy_variables)
  assert all(np.all(np.isfinite(g)) for g in gradients)
  # tanh hidden units: each layer's output is the tanh of its affine map.
  want = observations[0]
  for layer in agent.policy_torso.layers:
    want = np.tanh(want @ layer.w.numpy() + layer.b.numpy())
  np.testing.assert_allclose(agent.policy_torso(observations[0]), want, rtol=1e-5, atol=1e-6)


def test_acting_step_matches_unroll_and_samples_float_actions():
  config = networks.continuous_vector_config(observation_size=5, action_size=2,
                                             state_dependent_log_std=False)
  agent = networks.Agent(config, seed=3)
  observations = np.random.default_rng(1).normal(size=(1, 4, 5)).astype(np.float32)
  output, _ = agent.unroll(np.zeros((1, 4, 2), np.float32), _env_outputs(observations), ())
  env_output = tf.nest.map_structure(lambda x: x[0], _env_outputs(observations))
  params, baseline, _ = acting_step(agent, np.zeros((4, 2), np.float32), env_output, ())
  actions = sampled_actions(agent, params)
  assert actions.dtype == np.float32 and actions.shape == (4, 2)
  np.testing.assert_allclose(params, output.policy_params[0], rtol=1e-6)
  np.testing.assert_allclose(baseline, output.baseline[0], rtol=1e-6)
  np.testing.assert_array_equal(params[:, 2:], 0.0)  # log_std starts at 0.
