"""V-trace against a straightforward numpy ground truth (the paper's equation 1, summed directly:
tests/reference.py)."""
import functools
import inspect

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import vtrace
from tests import reference


@pytest.mark.parametrize("T,B", [(1, 1), (5, 3), (20, 2)])
@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar,lambda_", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 0.9, 0.95), (None, None, None, 1.0)])
def test_from_importance_weights_matches_numpy(T, B, rho_bar, pg_rho_bar, c_bar, lambda_):
  rng = np.random.default_rng(T * 100 + B)
  log_rhos = rng.normal(scale=1.0, size=(T, B)).astype(np.float32)
  _, _, _, discounts, rewards, values, bootstrap_value = reference.random_inputs(rng, T, B)
  got = vtrace.from_importance_weights(
      log_rhos, discounts, rewards, values, bootstrap_value, clip_rho_threshold=rho_bar,
      clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar, lambda_=lambda_)
  want_vs, want_pg = reference.numpy_vtrace(log_rhos, discounts, rewards, values,
                                            bootstrap_value, rho_bar, pg_rho_bar, c_bar, lambda_)
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("T,B", [(4, 2), (13, 5)])
def test_from_logits_matches_numpy(T, B):
  rng = np.random.default_rng(T + B)
  behaviour, target, actions, discounts, rewards, values, bootstrap = reference.random_inputs(
      rng, T, B)
  got = vtrace.from_logits(behaviour, target, actions, discounts, rewards, values, bootstrap)
  log_rhos = reference.log_rhos(behaviour, target, actions)
  want_vs, want_pg = reference.numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap)
  np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)
  take = lambda p: np.take_along_axis(p, actions[..., None], -1)[..., 0]
  np.testing.assert_allclose(got.behaviour_action_log_probs.numpy(),
                             np.log(take(reference.softmax(behaviour))), rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(got.target_action_log_probs.numpy(),
                             np.log(take(reference.softmax(target))), rtol=1e-5,
                             atol=1e-5)


def test_log_probs_from_logits_and_actions_is_the_log_softmax_of_the_taken_action():
  # The released code's public name, kept for its users.
  rng = np.random.default_rng(7)
  logits = rng.normal(size=(5, 3, 4)).astype(np.float32)
  actions = rng.integers(0, 4, (5, 3)).astype(np.int32)
  got = vtrace.log_probs_from_logits_and_actions(logits, actions).numpy()
  want = np.log(np.take_along_axis(reference.softmax(logits), actions[..., None], -1)[..., 0])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError):
    vtrace.log_probs_from_logits_and_actions(logits[0], actions)  # [B, A]: rank 2, not 3


def test_on_policy_reduces_to_n_step_returns():
  """Equation (2): with pi = mu, v_s = sum_t gamma^{t-s} r_t + gamma^{T-s} V(x_T)."""
  rng = np.random.default_rng(7)
  T, B, gamma = 6, 3, 0.9
  rewards = rng.normal(size=(T, B)).astype(np.float32)
  values = rng.normal(size=(T, B)).astype(np.float32)
  bootstrap = rng.normal(size=(B,)).astype(np.float32)
  discounts = np.full((T, B), gamma, np.float32)
  got = vtrace.from_importance_weights(np.zeros((T, B), np.float32), discounts, rewards,
                                       values, bootstrap)
  for s in range(T):
    n_step = sum(gamma ** (t - s) * rewards[t] for t in range(s, T)) + gamma ** (T - s) * bootstrap
    np.testing.assert_allclose(got.vs.numpy()[s], n_step, rtol=1e-5, atol=1e-5)


def test_lambda_on_policy_gives_lambda_returns():
  """Remark 2: on-policy, V-trace with lambda is the TD(lambda) (lambda-return) target."""
  rng = np.random.default_rng(8)
  T, B, gamma, lam = 7, 2, 0.95, 0.8
  rewards = rng.normal(size=(T, B))
  values = rng.normal(size=(T, B))
  bootstrap = rng.normal(size=(B,))
  got = vtrace.from_importance_weights(np.zeros((T, B)), np.full((T, B), gamma), rewards,
                                       values, bootstrap, lambda_=lam)
  # Recursive lambda-return: G_s = r_s + gamma((1 - lam) V(x_{s+1}) + lam G_{s+1}), G_T = V.
  values_ext = np.concatenate([values, bootstrap[None]])
  g = bootstrap.copy()
  want = np.zeros((T, B))
  for s in reversed(range(T)):
    g = rewards[s] + gamma * ((1 - lam) * values_ext[s + 1] + lam * g)
    want[s] = g
  np.testing.assert_allclose(got.vs.numpy(), want, rtol=1e-5, atol=1e-5)


def test_no_gradient_through_targets():
  rng = np.random.default_rng(3)
  behaviour, target, actions, discounts, rewards, values, bootstrap = reference.random_inputs(
      rng, 5, 2)
  target, values, bootstrap = map(tf.Variable, (target, values, bootstrap))
  with tf.GradientTape(persistent=True) as tape:
    returns = vtrace.from_logits(behaviour, target, actions, discounts, rewards, values,
                                 bootstrap)
    target_sum = tf.reduce_sum(returns.vs) + tf.reduce_sum(returns.pg_advantages)
    log_prob_sum = tf.reduce_sum(returns.target_action_log_probs)
  assert all(g is None for g in tape.gradient(target_sum, [target, values, bootstrap]))
  # The policy's log-probabilities do carry the gradient the policy-gradient loss needs.
  assert tape.gradient(log_prob_sum, target) is not None


@pytest.mark.parametrize("correction", vtrace.OFF_POLICY_CORRECTIONS)
def test_jit_compiled_equals_eager(correction):
  rng = np.random.default_rng(11)
  inputs = reference.random_inputs(rng, 9, 4)
  run = lambda *args: vtrace.from_logits(*args, off_policy_correction=correction)
  eager = run(*inputs)
  compiled = tf.function(run, jit_compile=True)(*inputs)
  for got, want in zip(compiled, eager):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_table2_corrections_match_numpy():
  rng = np.random.default_rng(5)
  behaviour, target, actions, discounts, rewards, values, bootstrap = reference.random_inputs(
      rng, 8, 3)
  log_rhos = reference.log_rhos(behaviour, target, actions)
  # Without correction the targets are V-trace's with every weight equal to one.
  plain_vs, plain_pg = reference.numpy_vtrace(np.zeros_like(log_rhos), discounts, rewards,
                                              values, bootstrap)
  run = lambda c: vtrace.from_logits(behaviour, target, actions, discounts, rewards, values,
                                     bootstrap, off_policy_correction=c)
  take = lambda p: np.take_along_axis(p, actions[..., None], -1)[..., 0]
  pi_a = take(reference.softmax(target))

  none = run(vtrace.NO_CORRECTION)
  np.testing.assert_allclose(none.vs.numpy(), plain_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(none.pg_advantages.numpy(), plain_pg, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(none.target_action_log_probs.numpy(), np.log(pi_a), rtol=1e-5)

  epsilon = run(vtrace.EPSILON)
  np.testing.assert_allclose(epsilon.vs.numpy(), plain_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(epsilon.target_action_log_probs.numpy(), np.log(pi_a + 1e-6),
                             rtol=1e-5)

  one_step = run(vtrace.ONE_STEP_IS)
  np.testing.assert_allclose(one_step.vs.numpy(), plain_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(one_step.pg_advantages.numpy(),
                             np.minimum(1.0, np.exp(log_rhos)) * plain_pg, rtol=1e-5, atol=1e-5)

  full = run(vtrace.VTRACE)
  want_vs, _ = reference.numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap)
  np.testing.assert_allclose(full.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  assert not np.allclose(full.vs.numpy(), plain_vs)  # The inputs are really off-policy.


def test_bad_inputs_are_clear_errors():
  rng = np.random.default_rng(0)
  behaviour, target, actions, discounts, rewards, values, bootstrap = reference.random_inputs(
      rng, 4, 2)
  with pytest.raises(ValueError, match="off_policy_correction"):
    vtrace.from_logits(behaviour, target, actions, discounts, rewards, values, bootstrap,
                       off_policy_correction="retrace")
  with pytest.raises(ValueError, match="rewards"):
    vtrace.from_importance_weights(np.zeros((4, 2)), discounts, rewards[:3], values, bootstrap)
  with pytest.raises(ValueError, match="bootstrap_value"):
    vtrace.from_importance_weights(np.zeros((4, 2)), discounts, rewards, values,
                                   np.zeros(3))


@pytest.mark.parametrize("lambda_,rho_bar,c_bar", [(0.995, 1.0, 1.0), (0.9, 2.0, 0.5),
                                                   (1.0, None, None)])
def test_impact_gae_advantages_match_the_paper_formula(lambda_, rho_bar, c_bar):
  """IMPACT section 3.1: A_t = sum_{i>=t} (lambda gamma)^{i-t} (prod_{j=t}^{i-1} c_j) delta_i V,
  delta_i V = rho_i (r_i + gamma V(x_{i+1}) - V(x_i)). Term for term this is V-trace's
  v_t - V(x_t) (equation 1) with lambda folded into the traces (c_j -> lambda c_j), so the one
  numpy V-trace is its ground truth (per-step discounts gamma_j, zero at episode ends)."""
  rng = np.random.default_rng(11)
  T, B = 7, 3
  log_rhos = rng.normal(size=(T, B)).astype(np.float32)
  _, _, _, discounts, rewards, values, bootstrap = reference.random_inputs(rng, T, B)
  want_vs, _ = reference.numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap,
                                      rho_bar=rho_bar, c_bar=c_bar, lambda_=lambda_)
  want = want_vs - values
  got = losses.gae_from_importance_weights(log_rhos, discounts, rewards, values, bootstrap,
                                           lambda_, clip_rho_threshold=rho_bar,
                                           clip_c_threshold=c_bar)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.vs.numpy(), values + want, rtol=1e-5, atol=1e-5)


# --- One function per variant (rlax's layout): each against numpy, its entry checks, and the
# dispatcher's choice. ---------------------------------------------------------------------


def _categorical_inputs(seed, T=6, B=3):
  """(behaviour, target, actions, discounts, rewards, values, bootstrap) with the policies as
  distributions.Categorical, and the numpy log_rhos of the taken actions."""
  behaviour, target, actions, *rest = reference.random_inputs(np.random.default_rng(seed), T, B)
  inputs = (distributions.Categorical(behaviour), distributions.Categorical(target), actions,
            *rest)
  return inputs, reference.log_rhos(behaviour, target, actions)


def _taken_probability(policy, actions):
  """pi(a_t|x_t) [T, B] in numpy, from a Categorical's logits."""
  probabilities = reference.softmax(policy.logits.numpy())
  return np.take_along_axis(probabilities, actions[..., None], -1)[..., 0]


def test_vtrace_returns_match_numpy():
  inputs, log_rhos = _categorical_inputs(seed=30)
  _, target, actions, discounts, rewards, values, bootstrap = inputs
  got = vtrace.vtrace_returns(*inputs, clip_rho_threshold=2.0, clip_pg_rho_threshold=0.5,
                              clip_c_threshold=0.9, lambda_=0.95)
  want_vs, want_pg = reference.numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap,
                                            2.0, 0.5, 0.9, 0.95)
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.target_action_log_probs.numpy(),
                             np.log(_taken_probability(target, actions)), rtol=1e-5)
  np.testing.assert_array_equal(got.trust_region_mask.numpy(), 1.0)


@pytest.mark.parametrize("lambda_", [1.0, 0.8])
def test_no_correction_returns_are_on_policy_returns(lambda_):
  """Table 2's "no-correction": V-trace with every weight one (n-step or lambda-returns)."""
  inputs, log_rhos = _categorical_inputs(seed=31)
  _, target, actions, discounts, rewards, values, bootstrap = inputs
  got = vtrace.no_correction_returns(*inputs, lambda_=lambda_)
  want_vs, want_pg = reference.numpy_vtrace(np.zeros_like(log_rhos), discounts, rewards,
                                            values, bootstrap, lambda_=lambda_)
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.target_action_log_probs.numpy(),
                             np.log(_taken_probability(target, actions)), rtol=1e-5)
  np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=1e-5, atol=1e-5)


def test_one_step_is_returns_weigh_the_on_policy_advantage_by_rho():
  """Table 2's "1-step importance sampling": uncorrected targets, the advantage times
  min(rho_pg_bar, pi/mu) of its own step."""
  inputs, log_rhos = _categorical_inputs(seed=32)
  discounts, rewards, values, bootstrap = inputs[3:]
  got = vtrace.one_step_is_returns(*inputs, clip_pg_rho_threshold=0.7, lambda_=0.9)
  plain_vs, plain_pg = reference.numpy_vtrace(np.zeros_like(log_rhos), discounts, rewards,
                                              values, bootstrap, lambda_=0.9)
  np.testing.assert_allclose(got.vs.numpy(), plain_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(),
                             np.minimum(0.7, np.exp(log_rhos)) * plain_pg, rtol=1e-5, atol=1e-5)
  assert np.any(np.exp(log_rhos) > 0.7) and np.any(np.exp(log_rhos) < 0.7)


def test_epsilon_correction_returns_add_epsilon_to_the_policy_gradients_probability():
  """Table 2's "epsilon-correction": uncorrected targets and advantages; the policy gradient's
  log(pi + 1e-6), with log_rhos still the plain log pi - log mu."""
  inputs, log_rhos = _categorical_inputs(seed=33)
  _, target, actions, discounts, rewards, values, bootstrap = inputs
  got = vtrace.epsilon_correction_returns(*inputs)
  plain_vs, plain_pg = reference.numpy_vtrace(np.zeros_like(log_rhos), discounts, rewards,
                                              values, bootstrap)
  np.testing.assert_allclose(got.vs.numpy(), plain_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), plain_pg, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.target_action_log_probs.numpy(),
                             np.log(_taken_probability(target, actions) + 1e-6), rtol=1e-5)
  np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=1e-5, atol=1e-5)


_VARIANTS = {
    "vtrace_returns": vtrace.vtrace_returns,
    "trust_region_returns": functools.partial(vtrace.trust_region_returns,
                                              trust_region_threshold=0.1),
    "one_step_is_returns": vtrace.one_step_is_returns,
    "epsilon_correction_returns": vtrace.epsilon_correction_returns,
    "no_correction_returns": vtrace.no_correction_returns,
}


def _shorter_policies(inputs):
  """The policies and actions of one step fewer than the rewards (T - 1 of them)."""
  behaviour, target, actions, *rest = inputs
  return (behaviour[:-1], target[:-1], actions[:-1], *rest)


def _unlike_policies(inputs):
  """A target policy over one action more than the behaviour policy's."""
  behaviour, target, *rest = inputs
  wider = distributions.Categorical(tf.concat([target.logits, target.logits[..., :1]], -1))
  return (behaviour, wider, *rest)


def _shorter_actions(inputs):
  """The actions of one step fewer than the rewards and policies."""
  behaviour, target, actions, *rest = inputs
  return (behaviour, target, actions[:-1], *rest)


def _replaced(index, bad):
  return lambda inputs: inputs[:index] + (bad,) + inputs[index + 1:]


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
@pytest.mark.parametrize("broken,message", [
    (_replaced(3, np.zeros((5, 3), np.float32)), "discounts has shape"),
    (_replaced(4, np.zeros((6, 3, 1), np.float32)), "rewards has shape"),
    (_replaced(5, np.zeros((6, 2), np.float32)), "values has shape"),
    (_replaced(6, np.zeros(4, np.float32)), "bootstrap_value has shape"),
    (_shorter_policies, "behaviour_policy's parameters have shape"),
    (_unlike_policies, "parameters .* and target_policy's .* differ"),
    (_shorter_actions, "actions has shape"),
], ids=["discounts", "rewards", "values", "bootstrap_value", "policies", "unlike policies",
        "actions"])
def test_each_variant_checks_its_inputs_shapes_at_entry(variant, broken, message):
  inputs, _ = _categorical_inputs(seed=34)
  with pytest.raises(ValueError, match=message):
    _VARIANTS[variant](*broken(inputs))
  with pytest.raises(ValueError, match="transition_mask has shape"):
    _VARIANTS[variant](*inputs, transition_mask=np.ones((6, 2), np.float32))


def test_the_table_has_a_variant_for_every_correction_the_setting_offers():
  assert set(vtrace.VARIANTS) == set(settings.OFF_POLICY_CORRECTIONS)
  for correction, (variant, thresholds) in vtrace.VARIANTS.items():
    assert set(thresholds) <= set(inspect.signature(variant).parameters), correction


@pytest.mark.parametrize("variant", ["one_step_is_returns", "epsilon_correction_returns",
                                     "no_correction_returns"])
def test_table2_ablations_refuse_a_gaussian_policy(variant):
  rng = np.random.default_rng(35)
  gaussian = distributions.DiagGaussian(rng.normal(size=(6, 3, 2)).astype(np.float32),
                                        np.zeros((6, 3, 2), np.float32))
  rest = _categorical_inputs(seed=35)[0][3:]
  with pytest.raises(ValueError, match="discrete-action ablation"):
    _VARIANTS[variant](gaussian, gaussian, np.zeros((6, 3, 2), np.float32), *rest)


# The settings each variant takes (the dispatcher is given all of them).
_OPTIONS = dict(clip_rho_threshold=1.5, clip_pg_rho_threshold=0.7, clip_c_threshold=0.8,
                lambda_=0.9)
_TAKES = {"vtrace_returns": tuple(_OPTIONS), "trust_region_returns": tuple(_OPTIONS),
          "one_step_is_returns": ("clip_pg_rho_threshold", "lambda_"),
          "epsilon_correction_returns": ("lambda_",), "no_correction_returns": ("lambda_",)}


def _run_variant(name, inputs):
  return _VARIANTS[name](*inputs, **{key: _OPTIONS[key] for key in _TAKES[name]})


@pytest.mark.parametrize("correction,threshold,variant", [
    (vtrace.VTRACE, None, "vtrace_returns"),
    (vtrace.VTRACE, 0.1, "trust_region_returns"),
    (vtrace.ONE_STEP_IS, None, "one_step_is_returns"),
    (vtrace.EPSILON, None, "epsilon_correction_returns"),
    (vtrace.NO_CORRECTION, None, "no_correction_returns"),
])
def test_from_distributions_picks_the_variant_the_settings_name(correction, threshold,
                                                                variant):
  inputs, _ = _categorical_inputs(seed=36)
  got = vtrace.from_distributions(*inputs, off_policy_correction=correction,
                                  trust_region_threshold=threshold, **_OPTIONS)
  want = _run_variant(variant, inputs)
  for name, a, b in zip(want._fields, got, want):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
  for other in set(_VARIANTS) - {variant}:  # Each variant's returns are its own.
    assert not all(np.array_equal(a.numpy(), b.numpy())
                   for a, b in zip(_run_variant(other, inputs), want)), other
