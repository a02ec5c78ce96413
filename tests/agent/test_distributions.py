"""distributions.py against numpy ground truth: every method of Categorical, DiagGaussian and
MultiCategorical and of their families, and the network configs' action_distribution."""
import math

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.environments import base as env_base
from scalable_agent_tf2.learning import vtrace
from scalable_agent_tf2.structures import AgentOutput
from tests import reference

T, B, N, A = 4, 3, 5, 2


def _vtrace_of(policy, actions):
  """V-trace of `policy` against itself on [T, B] zeros: where a batch's actions are checked."""
  zeros = np.zeros((T, B), np.float32)
  return vtrace.vtrace_returns(policy, policy, actions, zeros, zeros, zeros, zeros[0])


def _logits(seed, shape=(T, B, N)):
  return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _gaussian(seed, shape=(T, B, A)):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=shape).astype(np.float32),
          (0.3 * rng.normal(size=shape) - 0.2).astype(np.float32))


def _np_gaussian_log_prob(mean, log_std, actions):
  mean, log_std, actions = (np.asarray(x, np.float64) for x in (mean, log_std, actions))
  return np.sum(-0.5 * ((actions - mean) / np.exp(log_std)) ** 2 - log_std
                - 0.5 * math.log(2 * math.pi), -1)


# ---------------------------------------------------------------------------------------------
# Categorical.
# ---------------------------------------------------------------------------------------------
def test_categorical_log_prob_entropy_and_kl_match_numpy():
  logits, other = _logits(0), _logits(1)
  actions = np.random.default_rng(2).integers(0, N, (T, B)).astype(np.int32)
  p = reference.softmax(logits.astype(np.float64))
  q = reference.softmax(other.astype(np.float64))
  policy = distributions.Categorical(logits)
  want_log_prob = np.log(np.take_along_axis(p, actions[..., None], -1))[..., 0]
  np.testing.assert_allclose(policy.log_prob(actions), want_log_prob, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(policy.entropy(), -np.sum(p * np.log(p), -1), rtol=1e-5)
  kl = np.sum(p * np.log(p / q), -1)
  np.testing.assert_allclose(policy.kl(distributions.Categorical(other)), kl, rtol=1e-4)
  np.testing.assert_allclose(policy.total_kl(distributions.Categorical(other)), kl.sum(),
                             rtol=1e-4)
  np.testing.assert_allclose(policy.kl(policy), 0.0, atol=1e-6)
  # The actions' shape is asserted at V-trace's entry (the pure function a batch reaches),
  # not again inside log_prob.
  with pytest.raises(ValueError, match=r"actions has shape \(4, 3, 1\), expected \(4, 3\)"):
    _vtrace_of(policy, actions[..., None])


def test_categorical_implied_policy_kl_matches_numpy():
  behaviour, target = _logits(3), _logits(4)
  mu = reference.softmax(behaviour.astype(np.float64))
  pi = reference.softmax(target.astype(np.float64))
  for rho_bar in (0.5, 1.0, 2.0):
    implied = np.minimum(rho_bar * mu, pi)
    implied /= implied.sum(-1, keepdims=True)
    want = np.sum(pi * np.log(pi / implied), -1)
    got = distributions.Categorical(target).implied_policy_kl(
        distributions.Categorical(behaviour), rho_bar)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  no_truncation = distributions.Categorical(target).implied_policy_kl(
      distributions.Categorical(behaviour), None)
  np.testing.assert_array_equal(no_truncation, np.zeros((T, B)))


def test_categorical_tf_sample_follows_the_policy():
  logits = np.log(np.array([[0.2, 0.5, 0.3]], np.float32)).repeat(20000, 0)
  actions = distributions.Categorical(logits).sample(seed=[1, 2]).numpy()
  assert actions.dtype == np.int32 and actions.shape == (20000,)
  np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000, [0.2, 0.5, 0.3],
                             atol=0.015)


def test_categorical_slices_stop_gradient_and_params():
  logits = tf.Variable(_logits(5))
  policy = distributions.Categorical(logits)
  np.testing.assert_array_equal(policy[:-1].params, logits.numpy()[:-1])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(policy.stop_gradient().entropy())
  assert tape.gradient(loss, logits) is None


def test_categorical_family_shapes_outputs_and_numpy_sampling():
  family = distributions.CategoricalFamily(N)
  assert family.param_size == N and family.discrete
  assert family.action_dtype == np.int32 and family.action_shape == ()
  assert family == distributions.CategoricalFamily(N) != distributions.CategoricalFamily(N + 1)
  logits = _logits(6, (B, N))
  outputs = AgentOutput(action=np.zeros(B, np.int32), policy_params=logits,
                        baseline=np.zeros(B, np.float32))
  np.testing.assert_array_equal(family.of_outputs(outputs).logits, logits)
  np.testing.assert_array_equal(family(logits).logits, logits)
  assert family.layout() == {"num_actions": N}
  np.testing.assert_array_equal(family.action_features(np.array([2, 0])),
                                np.eye(N, dtype=np.float32)[[2, 0]])
  # The Gumbel-max trick with each row's own generator: argmax(logits + Gumbel noise).
  seeds = [7, 8, 9]
  want = [int(np.argmax(row + np.random.default_rng(s).gumbel(size=N)))
          for row, s in zip(logits, seeds)]
  rows = family.sample_rows(logits, [np.random.default_rng(s) for s in seeds])
  assert rows.dtype == np.int32 and rows.tolist() == want
  assert [family.sample_numpy(row, np.random.default_rng(s))
          for row, s in zip(logits, seeds)] == want
  rng = np.random.default_rng(0)
  probabilities = np.array([0.2, 0.5, 0.3])
  counts = np.bincount([distributions.CategoricalFamily(3).sample_numpy(
      np.log(probabilities), rng) for _ in range(20000)], minlength=3)
  np.testing.assert_allclose(counts / 20000, probabilities, atol=0.015)


# ---------------------------------------------------------------------------------------------
# DiagGaussian.
# ---------------------------------------------------------------------------------------------
def test_gaussian_log_prob_entropy_and_kl_match_numpy():
  mean, log_std = _gaussian(10)
  q_mean, q_log_std = _gaussian(11)
  actions = np.random.default_rng(12).normal(size=(T, B, A)).astype(np.float32)
  policy = distributions.DiagGaussian(mean, log_std)
  other = distributions.DiagGaussian(q_mean, q_log_std)
  np.testing.assert_allclose(policy.log_prob(actions),
                             _np_gaussian_log_prob(mean, log_std, actions), rtol=1e-5)
  np.testing.assert_allclose(policy.entropy(),
                             np.sum(log_std + 0.5 * math.log(2 * math.pi * math.e), -1),
                             rtol=1e-5)
  s_p, s_q = np.exp(log_std.astype(np.float64)), np.exp(q_log_std.astype(np.float64))
  kl = np.sum(np.log(s_q / s_p) + (s_p ** 2 + (mean - q_mean) ** 2) / (2 * s_q ** 2) - 0.5, -1)
  np.testing.assert_allclose(policy.kl(other), kl, rtol=1e-4)
  np.testing.assert_allclose(policy.total_kl(other), kl.sum(), rtol=1e-4)
  np.testing.assert_allclose(policy.kl(policy), 0.0, atol=1e-6)
  with pytest.raises(ValueError, match="policy_log_std"):
    distributions.DiagGaussian(mean, log_std[..., :1])
  with pytest.raises(ValueError, match=r"actions has shape \(4, 3\), expected \(4, 3, 2\)"):
    _vtrace_of(policy, actions[..., 0])


def test_gaussian_implied_policy_kl_matches_numerical_integration():
  # One dimension: KL(pi || pi_rho_bar) by quadrature on a fine grid.
  mu_mean, mu_log_std, pi_mean, pi_log_std = 0.0, 0.0, 0.8, -0.3
  grid = np.linspace(-10, 10, 200001)
  density = lambda m, ls: np.exp(-0.5 * ((grid - m) / np.exp(ls)) ** 2) / (
      np.exp(ls) * math.sqrt(2 * math.pi))
  pi, mu = density(pi_mean, pi_log_std), density(mu_mean, mu_log_std)
  implied = np.minimum(mu, pi)
  implied /= np.trapezoid(implied, grid)
  want = np.trapezoid(pi * np.log(pi / implied), grid)
  as_steps = lambda value: np.full((400, 50, 1), value, np.float32)
  target = distributions.DiagGaussian(as_steps(pi_mean), as_steps(pi_log_std))
  behaviour = distributions.DiagGaussian(as_steps(mu_mean), as_steps(mu_log_std))
  estimate = target.implied_policy_kl(behaviour, 1.0, seed=[3, 4]).numpy()
  # K = 32 samples per step: a noisy estimate per step, its mean over 20000 steps is close.
  np.testing.assert_allclose(estimate.mean(), want, rtol=0.05)
  same = distributions.DiagGaussian(*_gaussian(13))
  np.testing.assert_array_equal(same.implied_policy_kl(same), np.zeros((T, B)))
  np.testing.assert_array_equal(same.implied_policy_kl(same, None), np.zeros((T, B)))


def test_gaussian_tf_sample_and_params():
  mean = np.array([0.5, -1.0], np.float32)
  log_std = np.array([-1.0, 0.3], np.float32)
  tiled = lambda x: np.tile(x, (20000, 1))
  policy = distributions.DiagGaussian(tiled(mean), tiled(log_std))
  samples = policy.sample(seed=[0, 1]).numpy()
  np.testing.assert_allclose(samples.mean(0), mean, atol=0.03)
  np.testing.assert_allclose(samples.std(0), np.exp(log_std), rtol=0.03)
  np.testing.assert_array_equal(samples, policy.sample(seed=[0, 1]))
  params = np.concatenate([mean, log_std])
  from_params = distributions.DiagGaussian.from_params(params)
  np.testing.assert_array_equal(from_params.mean, mean)
  np.testing.assert_array_equal(from_params.log_std, log_std)
  np.testing.assert_array_equal(from_params.params, params)
  np.testing.assert_array_equal(policy[:3].mean, tiled(mean)[:3])


def test_gaussian_family_shapes_outputs_and_numpy_sampling():
  family = distributions.DiagGaussianFamily(A)
  assert family.param_size == 2 * A and not family.discrete
  assert family.action_dtype == np.float32 and family.action_shape == (A,)
  mean, log_std = _gaussian(14, (B, A))
  params = np.concatenate([mean, log_std], -1)
  outputs = AgentOutput(action=np.zeros((B, A), np.float32), policy_params=params,
                        baseline=np.zeros(B, np.float32))
  np.testing.assert_array_equal(family.of_outputs(outputs).mean, mean)
  np.testing.assert_array_equal(family.of_outputs(outputs).log_std, log_std)
  np.testing.assert_array_equal(family(params).log_std, log_std)
  assert family.layout() == {"action_size": A}
  np.testing.assert_array_equal(family.action_features(mean), mean)
  # mean + exp(log_std) * standard normal noise from each row's own generator (unclipped).
  seeds = [1, 2, 3]
  want = np.stack([m + np.exp(s) * np.random.default_rng(seed).standard_normal(
      A, dtype=np.float32) for m, s, seed in zip(mean, log_std, seeds)])
  rows = family.sample_rows(params, [np.random.default_rng(s) for s in seeds])
  assert rows.dtype == np.float32
  np.testing.assert_allclose(rows, want, rtol=1e-6)
  np.testing.assert_array_equal(family.sample_numpy(params[0], np.random.default_rng(1)),
                                rows[0])
  with pytest.raises(ValueError, match="Gaussian policy parameters"):
    family.sample_numpy(params[0, :3], np.random.default_rng(1))


# ---------------------------------------------------------------------------------------------
# Network configs and V-trace.
# ---------------------------------------------------------------------------------------------
def test_network_configs_name_their_action_distribution():
  assert networks.atari_config(num_actions=6).action_distribution == (
      distributions.CategoricalFamily(6))
  config = networks.continuous_vector_config(observation_size=4, action_size=3)
  assert config.action_distribution == distributions.DiagGaussianFamily(3)
  assert config.num_actions is None


def test_an_environment_spec_names_its_action_distribution():
  assert distributions.for_spec(env_base.EnvSpec(num_actions=4, frame_shape=(2,))) == (
      distributions.CategoricalFamily(4))
  spec = env_base.ContinuousEnvSpec(action_size=2, action_low=np.zeros(2),
                                    action_high=np.ones(2), frame_shape=(5,))
  assert distributions.for_spec(spec) == distributions.DiagGaussianFamily(2)


def test_from_distributions_is_from_logits_for_categoricals_and_refuses_gaussian_ablations():
  rng = np.random.default_rng(20)
  behaviour, target = _logits(21), _logits(22)
  actions = rng.integers(0, N, (T, B)).astype(np.int32)
  rest = [rng.uniform(0.5, 1, (T, B)).astype(np.float32),
          rng.normal(size=(T, B)).astype(np.float32), rng.normal(size=(T, B)).astype(np.float32),
          rng.normal(size=B).astype(np.float32)]
  got = vtrace.from_distributions(distributions.Categorical(behaviour),
                                  distributions.Categorical(target), actions, *rest,
                                  trust_region_threshold=0.1)
  want = vtrace.from_logits(behaviour, target, actions, *rest, trust_region_threshold=0.1)
  for name, a, b in zip(want._fields, got, want):
    np.testing.assert_array_equal(a, b, err_msg=name)
  gaussian = distributions.DiagGaussian(*_gaussian(23))
  with pytest.raises(ValueError, match="discrete-action ablation"):
    vtrace.from_distributions(gaussian, gaussian, np.zeros((T, B, A), np.float32), *rest,
                              off_policy_correction="one_step_is")


# ---------------------------------------------------------------------------------------------
# MultiCategorical (gymnasium's MultiDiscrete actions).
# ---------------------------------------------------------------------------------------------
NVEC = (3, 2, 4)


def _np_joint(logits):
  """numpy ground truth: the joint probabilities [T, B, 3, 2, 4] of independent components."""
  first, second, third = np.split(logits.astype(np.float64), np.cumsum(NVEC)[:-1], -1)
  p1, p2, p3 = (reference.softmax(x) for x in (first, second, third))
  return p1[..., :, None, None] * p2[..., None, :, None] * p3[..., None, None, :]


def test_multi_categorical_log_prob_entropy_and_kl_match_the_joint_distribution():
  logits, other = _logits(20, (T, B, sum(NVEC))), _logits(21, (T, B, sum(NVEC)))
  rng = np.random.default_rng(22)
  actions = np.stack([rng.integers(0, n, (T, B)) for n in NVEC], -1).astype(np.int32)
  p, q = _np_joint(logits), _np_joint(other)
  policy = distributions.MultiCategorical(logits, NVEC)
  picked = p[np.arange(T)[:, None], np.arange(B)[None, :], actions[..., 0], actions[..., 1],
             actions[..., 2]]
  np.testing.assert_allclose(policy.log_prob(actions), np.log(picked), rtol=1e-5, atol=1e-6)
  flat_p, flat_q = p.reshape(T, B, -1), q.reshape(T, B, -1)
  np.testing.assert_allclose(policy.entropy(), -np.sum(flat_p * np.log(flat_p), -1), rtol=1e-5)
  kl = np.sum(flat_p * np.log(flat_p / flat_q), -1)
  other_policy = distributions.MultiCategorical(other, NVEC)
  np.testing.assert_allclose(policy.kl(other_policy), kl, rtol=1e-4)
  np.testing.assert_allclose(policy.total_kl(other_policy), kl.sum(), rtol=1e-4)
  for rho_bar in (0.5, 1.0, 2.0):  # LASER's implied KL over the 24 joint actions.
    implied = np.minimum(rho_bar * flat_q, flat_p)
    implied /= implied.sum(-1, keepdims=True)
    np.testing.assert_allclose(policy.implied_policy_kl(other_policy, rho_bar),
                               np.sum(flat_p * np.log(flat_p / implied), -1),
                               rtol=1e-4, atol=1e-6)
  with pytest.raises(ValueError, match=r"actions has shape \(4, 3, 2\), expected \(4, 3, 3\)"):
    _vtrace_of(policy, actions[..., :2])


def test_multi_categorical_family_samples_each_component_from_its_policy():
  family = distributions.MultiCategoricalFamily(NVEC)
  assert family.param_size == 9 and family.action_shape == (3,) and family.discrete
  assert family.layout() == {"nvec": [3, 2, 4]}
  logits = np.log(np.array([0.2, 0.5, 0.3, 0.9, 0.1, 0.1, 0.2, 0.3, 0.4], np.float32))
  rngs = [np.random.default_rng(s) for s in range(4000)]
  actions = family.sample_rows(np.tile(logits, (4000, 1)), rngs)
  assert actions.dtype == np.int32 and actions.shape == (4000, 3)
  for k, want in enumerate(([0.2, 0.5, 0.3], [0.9, 0.1], [0.1, 0.2, 0.3, 0.4])):
    np.testing.assert_allclose(np.bincount(actions[:, k], minlength=len(want)) / 4000, want,
                               atol=0.03)
  tf_actions = family(np.tile(logits, (4000, 1))).sample(seed=[3, 4]).numpy()
  assert tf_actions.shape == (4000, 3)
  np.testing.assert_allclose(np.bincount(tf_actions[:, 2], minlength=4) / 4000,
                             [0.1, 0.2, 0.3, 0.4], atol=0.03)
  np.testing.assert_array_equal(family.action_features(np.array([[2, 1, 0]])),
                                [[0, 0, 1, 0, 1, 1, 0, 0, 0]])


def test_the_mode_is_each_distribution_s_most_likely_action():
  logits = _logits(11)
  np.testing.assert_array_equal(distributions.Categorical(logits).mode().numpy(),
                                np.argmax(logits, axis=-1))
  mean, log_std = _gaussian(12)
  np.testing.assert_array_equal(distributions.DiagGaussian(mean, log_std).mode().numpy(), mean)
  nvec = (3, 2)
  joint = _logits(13, (T, B, sum(nvec)))
  expected = np.stack([np.argmax(joint[..., :3], -1), np.argmax(joint[..., 3:], -1)], -1)
  mode = distributions.MultiCategorical(joint, nvec).mode()
  assert mode.dtype == tf.int32
  np.testing.assert_array_equal(mode.numpy(), expected)
