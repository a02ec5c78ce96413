"""LASER's trust-region V-trace (Schmitt et al. 2019, section 4) against numpy ground truths.

The KL divergence between pi and V-trace's implied policy pi_rho_bar ~ min(rho_bar mu, pi), the
mask it gives, the cut traces (a return stops before a rejected step and bootstraps from
V there), the masked losses, and the learner's use of all three.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.learning import learner
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import vtrace
from tests import random_batches
from tests import reference

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _implied_kl(behaviour_logits, target_logits, rho_bar=1.0):
  """distributions.Categorical(target).implied_policy_kl(Categorical(behaviour), rho_bar)."""
  return distributions.Categorical(target_logits).implied_policy_kl(
      distributions.Categorical(behaviour_logits), rho_bar)


def numpy_implied_policy_kl(behaviour_logits, target_logits, rho_bar):
  """sum_a pi log(pi / pi_rho_bar), pi_rho_bar = min(rho_bar mu, pi) / normaliser, in
  probabilities (float64), step by step."""
  pi = reference.softmax(target_logits.astype(np.float64))
  mu = reference.softmax(behaviour_logits.astype(np.float64))
  kl = np.zeros(pi.shape[:-1])
  for index in np.ndindex(*pi.shape[:-1]):
    implied = np.minimum(rho_bar * mu[index], pi[index])
    implied = implied / implied.sum()
    kl[index] = np.sum(pi[index] * np.log(pi[index] / implied))
  return kl


@pytest.mark.parametrize("rho_bar", [1.0, 2.0, 0.5])
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_kl_matches_numpy_on_random_policies(rho_bar, scale):
  rng = np.random.default_rng(int(10 * rho_bar + scale))
  behaviour = (scale * rng.normal(size=(7, 4, 6))).astype(np.float32)
  target = (scale * rng.normal(size=(7, 4, 6))).astype(np.float32)
  got = _implied_kl(behaviour, target, rho_bar).numpy()
  want = numpy_implied_policy_kl(behaviour, target, rho_bar)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  assert got.shape == (7, 4) and np.all(got >= 0)


def test_kl_is_zero_on_policy_and_without_truncation():
  logits = np.random.default_rng(0).normal(size=(3, 2, 5)).astype(np.float32)
  np.testing.assert_allclose(_implied_kl(logits, logits).numpy(), 0, atol=1e-6)
  other = np.roll(logits, 1, axis=-1)
  assert np.all(_implied_kl(other, logits).numpy() > 0)
  for no_truncation in (None, math.inf):
    np.testing.assert_array_equal(_implied_kl(other, logits, no_truncation), 0)


def test_kl_is_finite_for_nearly_disjoint_policies():
  """LASER section 2.3's example: pi almost always "left", mu almost always "right"."""
  behaviour = np.array([[[-30.0, 30.0]]], np.float32)
  target = np.array([[[30.0, -30.0]]], np.float32)
  kl = _implied_kl(behaviour, target).numpy()
  # pi_rho_bar is uniform there (Proposition 1's example): KL(pi || uniform) = log 2.
  np.testing.assert_allclose(kl, np.log(2.0), rtol=1e-4)


@pytest.mark.parametrize("rho_bar", [1.0, 2.0])
def test_mask_matches_numpy_kl_threshold(rho_bar):
  rng = np.random.default_rng(3)
  behaviour = rng.normal(scale=2.0, size=(9, 5, 4)).astype(np.float32)
  target = rng.normal(scale=2.0, size=(9, 5, 4)).astype(np.float32)
  kl = numpy_implied_policy_kl(behaviour, target, rho_bar)
  ordered = np.sort(kl.ravel())
  threshold = float(0.5 * (ordered[20] + ordered[21]))  # Away from any step's own KL.
  got = vtrace.trust_region_mask(_implied_kl(behaviour, target, rho_bar),
                                 threshold).numpy()
  np.testing.assert_array_equal(got, (kl <= threshold).astype(np.float32))
  assert got.sum() == 21
  returns = vtrace.from_logits(behaviour, target, rng.integers(0, 4, (9, 5)).astype(np.int32),
                               np.full((9, 5), 0.9, np.float32), np.zeros((9, 5), np.float32),
                               np.zeros((9, 5), np.float32), np.zeros(5, np.float32),
                               clip_rho_threshold=rho_bar, trust_region_threshold=threshold)
  np.testing.assert_array_equal(returns.trust_region_mask.numpy(), got)


@pytest.mark.parametrize("T,B", [(1, 2), (6, 3), (15, 2)])
@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar,lambda_", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 0.9, 0.95)])
def test_cut_traces_match_numpy(T, B, rho_bar, pg_rho_bar, c_bar, lambda_):
  rng = np.random.default_rng(T * 10 + B)
  log_rhos = rng.normal(size=(T, B)).astype(np.float32)
  _, _, _, discounts, rewards, values, bootstrap = reference.random_inputs(rng, T, B)
  mask = (rng.random((T, B)) > 0.35).astype(np.float32)
  got = vtrace.from_importance_weights(
      log_rhos, discounts, rewards, values, bootstrap, clip_rho_threshold=rho_bar,
      clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar, lambda_=lambda_,
      trust_region_mask=mask)
  want_vs, want_pg = reference.numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap,
                                            rho_bar, pg_rho_bar, c_bar, lambda_, mask=mask)
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)


def test_a_rejected_step_ends_the_returns_before_it():
  """On-policy, gamma 0.5, step 1 rejected: v_0 is the 1-step return r_0 + gamma V(x_1)."""
  rewards = np.array([[1.0], [2.0], [4.0]], np.float32)
  values = np.array([[10.0], [20.0], [40.0]], np.float32)
  bootstrap = np.array([80.0], np.float32)
  discounts = np.full((3, 1), 0.5, np.float32)
  mask = np.array([[1.0], [0.0], [1.0]], np.float32)
  got = vtrace.from_importance_weights(np.zeros((3, 1), np.float32), discounts, rewards, values,
                                       bootstrap, trust_region_mask=mask)
  # v_2 = r_2 + 0.5 * 80; v_1 (rejected, not used by the losses) is its own full return;
  # v_0 stops at step 1.
  np.testing.assert_allclose(got.vs.numpy()[:, 0], [1 + 0.5 * 20, 2 + 0.5 * 44, 4 + 0.5 * 80])
  np.testing.assert_allclose(got.pg_advantages.numpy()[:, 0],
                             [1 + 0.5 * 20 - 10, 2 + 0.5 * 44 - 20, 4 + 0.5 * 80 - 40])


def test_infinite_threshold_equals_plain_vtrace():
  rng = np.random.default_rng(12)
  inputs = reference.random_inputs(rng, 11, 4)
  plain = vtrace.from_logits(*inputs)
  trusted = vtrace.from_logits(*inputs, trust_region_threshold=math.inf)
  for field in ("vs", "pg_advantages", "log_rhos", "target_action_log_probs"):
    np.testing.assert_array_equal(getattr(trusted, field).numpy(),
                                  getattr(plain, field).numpy(), err_msg=field)
  np.testing.assert_array_equal(trusted.trust_region_mask.numpy(), 1.0)
  np.testing.assert_array_equal(plain.trust_region_mask.numpy(), 1.0)
  # An all-ones mask given directly changes nothing either.
  log_rhos = reference.log_rhos(*inputs[:3])
  masked = vtrace.from_importance_weights(log_rhos, *inputs[3:],
                                          trust_region_mask=np.ones((11, 4), np.float32))
  want_vs, want_pg = reference.numpy_vtrace(log_rhos, *inputs[3:])
  np.testing.assert_allclose(masked.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(masked.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)


def test_from_logits_with_threshold_matches_numpy_and_compiles():
  rng = np.random.default_rng(21)
  behaviour, target, actions, discounts, rewards, values, bootstrap = (
      reference.random_inputs(rng, 10, 3))
  kl = numpy_implied_policy_kl(behaviour, target, 1.0)
  threshold = float(np.median(kl))
  run = lambda *args: vtrace.from_logits(*args, trust_region_threshold=threshold)
  inputs = (behaviour, target, actions, discounts, rewards, values, bootstrap)
  eager = run(*inputs)
  want_vs, want_pg = reference.numpy_vtrace(
      reference.log_rhos(behaviour, target, actions), discounts, rewards, values, bootstrap,
      mask=(kl <= threshold).astype(np.float32))
  np.testing.assert_allclose(eager.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(eager.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)
  compiled = tf.function(run, jit_compile=True)(*inputs)
  for got, want in zip(compiled, eager):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar,lambda_", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 0.9, 0.95)])
def test_trust_region_returns_match_numpy(rho_bar, pg_rho_bar, c_bar, lambda_):
  """The variant itself (vtrace.trust_region_returns, what from_distributions picks for a
  threshold): numpy's KL and mask, and equation (1) with the traces cut at rejected steps."""
  rng = np.random.default_rng(22)
  behaviour, target, actions, discounts, rewards, values, bootstrap = (
      reference.random_inputs(rng, 9, 4))
  kl = numpy_implied_policy_kl(behaviour, target, rho_bar)
  threshold = float(np.median(kl))
  mask = (kl <= threshold).astype(np.float32)
  got = vtrace.trust_region_returns(
      distributions.Categorical(behaviour), distributions.Categorical(target), actions,
      discounts, rewards, values, bootstrap, threshold, clip_rho_threshold=rho_bar,
      clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar, lambda_=lambda_)
  want_vs, want_pg = reference.numpy_vtrace(
      reference.log_rhos(behaviour, target, actions), discounts, rewards, values, bootstrap,
      rho_bar, pg_rho_bar, c_bar, lambda_, mask=mask)
  np.testing.assert_array_equal(got.trust_region_mask.numpy(), mask)
  assert 0 < mask.sum() < mask.size
  np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, rtol=1e-5, atol=1e-5)


def test_bad_thresholds_are_clear_errors():
  inputs = reference.random_inputs(np.random.default_rng(0), 3, 2)
  with pytest.raises(ValueError, match="threshold must be a number >= 0"):
    vtrace.from_logits(*inputs, trust_region_threshold=-1.0)
  with pytest.raises(ValueError, match="defined for V-trace"):
    vtrace.from_logits(*inputs, trust_region_threshold=0.1, off_policy_correction="epsilon")
  with pytest.raises(ValueError, match="trust_region_mask has shape"):
    vtrace.from_importance_weights(np.zeros((3, 2)), *inputs[3:],
                                   trust_region_mask=np.ones((2, 2)))
  with pytest.raises(ValueError, match="trust_region_threshold must be >= 0"):
    config_lib.LearnerConfig(trust_region_threshold=-0.5)
  with pytest.raises(ValueError, match="needs off_policy_correction='vtrace'"):
    config_lib.LearnerConfig(trust_region_threshold=0.5, off_policy_correction="none")


def test_masked_losses_leave_rejected_steps_out_of_value_and_gradient():
  rng = np.random.default_rng(4)
  log_probs = tf.Variable(rng.normal(size=(5, 3)).astype(np.float32))
  advantages = rng.normal(size=(5, 3)).astype(np.float32)
  mask = (rng.random((5, 3)) > 0.5).astype(np.float32)
  with tf.GradientTape(persistent=True) as tape:
    pg = losses.policy_gradient_loss(log_probs, advantages, mask)
    baseline = losses.baseline_loss(log_probs, mask)
  np.testing.assert_allclose(pg.numpy(), -np.sum(mask * log_probs.numpy() * advantages),
                             rtol=1e-5)
  np.testing.assert_allclose(baseline.numpy(), 0.5 * np.sum(mask * log_probs.numpy() ** 2),
                             rtol=1e-5)
  for loss in (pg, baseline):
    gradient = tape.gradient(loss, log_probs).numpy()
    np.testing.assert_array_equal(gradient[mask == 0], 0.0)
    assert np.all(gradient[mask == 1] != 0)
  assert losses.policy_gradient_loss(log_probs, advantages).numpy() == pytest.approx(
      -np.sum(log_probs.numpy() * advantages), rel=1e-5)


def numpy_neg_entropy(logits):
  """sum_a pi log pi of each step (numpy ground truth of losses.entropy_loss's terms)."""
  logits = np.asarray(logits, np.float64)
  log_p = logits - logits.max(-1, keepdims=True)
  log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
  return (np.exp(log_p) * log_p).sum(-1)


def test_entropy_leaves_out_rejected_steps_and_replayed_trajectories():
  rng = np.random.default_rng(7)
  logits = rng.normal(size=(5, 4, 3)).astype(np.float32)
  trust_region_mask = np.ones((5, 4), np.float32)
  trust_region_mask[[0, 2, 4], [1, 0, 3]] = 0.0  # Rejected: one online step, two replayed.
  online = laser.online_mask(4, 2)  # [1, 1, 0, 0]: the last 2 trajectories replayed.
  like = np.zeros((5, 4), np.float32)
  neg_entropy = numpy_neg_entropy(logits)
  cases = [(None, None, np.ones((5, 4))),
           (trust_region_mask, None, trust_region_mask),
           (None, online, np.array([[1, 1, 0, 0]] * 5)),
           (trust_region_mask, online, trust_region_mask * [1, 1, 0, 0])]
  for tr_mask, entropy_mask, kept in cases:
    steps = losses.entropy_steps(tr_mask, entropy_mask, like)
    got = losses.entropy_loss(distributions.Categorical(logits), steps).numpy()
    np.testing.assert_allclose(got, np.sum(kept * neg_entropy), rtol=1e-5)
  # The online step the trust region rejected (0, 1) is out: its entropy is not counted.
  steps = losses.entropy_steps(trust_region_mask, online, like).numpy()
  assert steps[0, 1] == 0 and steps[0, 0] == 1 and steps[:, 2:].sum() == 0


SMALL = networks.atari_config(num_actions=4, torso=networks.SHALLOW, frame_shape=(20, 20, 4))


def _learner(jit_compile, **hparams):
  return learner.Learner(networks.Agent(SMALL, seed=0),
                         config_lib.LearnerConfig(learning_rate=0.01,
                                               total_environment_frames=10_000, **hparams),
                         jit_compile=jit_compile)


def test_learner_with_infinite_threshold_is_plain_impala():
  env_outputs, agent_outputs = random_batches.random_learner_batch(SMALL, 4, 3, seed=2)
  default, infinite = _learner(False), _learner(False, trust_region_threshold=math.inf)
  assert not infinite.config.uses_trust_region
  got = infinite.update((), env_outputs, agent_outputs)
  want = default.update((), env_outputs, agent_outputs)
  assert set(got) == set(want) and "trust_region_rejected" not in got
  for key in want:
    np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


def test_learner_trust_region_compiles_and_leaves_rejected_steps_out():
  env_outputs, agent_outputs = random_batches.random_learner_batch(SMALL, 5, 3, seed=6)
  # Random behaviour logits are far from the fresh network's policy: a small threshold
  # rejects some steps and keeps others.
  agent = networks.Agent(SMALL, seed=0)
  outputs, _ = agent.unroll(agent_outputs.action, env_outputs, ())
  kl = numpy_implied_policy_kl(agent_outputs.policy_params[1:],
                               outputs.policy_params[:-1].numpy(), 1.0)
  threshold = float(np.median(kl))
  config = config_lib.LearnerConfig(trust_region_threshold=threshold, reward_clipping="abs_one")
  terms, returns = losses.impala_loss_terms(agent.config.action_distribution, outputs,
                                                env_outputs, agent_outputs, config)
  mask = (kl <= threshold).astype(np.float32)
  np.testing.assert_array_equal(returns.trust_region_mask.numpy(), mask)
  assert terms["trust_region_rejected"].numpy() == np.sum(1 - mask) > 0
  np.testing.assert_allclose(
      terms["pg_loss"].numpy(),
      -np.sum(mask * returns.target_action_log_probs.numpy() * returns.pg_advantages.numpy()),
      rtol=1e-5)
  values = outputs.baseline[:-1].numpy()
  np.testing.assert_allclose(terms["baseline_loss"].numpy(),
                             0.5 * np.sum(mask * (returns.vs.numpy() - values) ** 2), rtol=1e-5)
  # LASER section 4.3: rejected "for all estimates", the entropy term too.
  np.testing.assert_allclose(terms["entropy_loss"].numpy(),
                             np.sum(mask * numpy_neg_entropy(outputs.policy_params[:-1])),
                             rtol=1e-5)

  compiled = _learner(True, trust_region_threshold=threshold)
  plain = _learner(False, trust_region_threshold=threshold)
  got = compiled.update((), env_outputs, agent_outputs)
  want = plain.update((), env_outputs, agent_outputs)
  for key in want:
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-4, atol=1e-4,
                               err_msg=key)


def test_experiment_rejects_a_negative_threshold():
  run = subprocess.run([sys.executable, os.path.join(REPO_DIR, "experiment.py"),
                        "--trust_region_threshold=-1", "--logdir=/nonexistent/never"],
                       capture_output=True, text=True, cwd=REPO_DIR, timeout=240)
  assert run.returncode == 2, run.stderr[-2000:]
  assert "trust_region_threshold must be >= 0" in run.stderr
