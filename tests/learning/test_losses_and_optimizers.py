"""Loss terms, reward clipping and TF1-semantics RMSProp against numpy / tf.compat.v1."""
import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import optimizers

REWARDS = np.array([-100.0, -3.0, -1.0, -0.5, 0.0, 0.2, 1.0, 2.5, 100.0], np.float32)


@pytest.mark.parametrize("mode,want", [
    (losses.ABS_ONE, np.clip(REWARDS, -1, 1)),
    # Figure D.1.
    (losses.OPTIMISTIC_ASYMMETRIC,
     0.3 * np.minimum(np.tanh(REWARDS), 0) + 5.0 * np.maximum(np.tanh(REWARDS), 0)),
    # The released code's soft_asymmetric.
    (losses.SOFT_ASYMMETRIC,
     5.0 * np.where(REWARDS < 0, 0.3 * np.tanh(REWARDS / 5), np.tanh(REWARDS / 5))),
    (losses.NO_CLIPPING, REWARDS),
])
def test_reward_clipping(mode, want):
  np.testing.assert_allclose(losses.clip_rewards(REWARDS, mode).numpy(), want, rtol=1e-6,
                             atol=1e-6)


def test_optimistic_asymmetric_is_asymmetric():
  clipped = losses.clip_rewards([-1000.0, 1000.0], losses.OPTIMISTIC_ASYMMETRIC).numpy()
  np.testing.assert_allclose(clipped, [-0.3, 5.0], rtol=1e-6)


def test_unknown_reward_clipping():
  with pytest.raises(ValueError, match="abs_one"):
    losses.clip_rewards(REWARDS, "hard")


def test_loss_terms_match_numpy_sums():
  rng = np.random.default_rng(0)
  T, B, A = 4, 3, 5
  logits = rng.normal(size=(T, B, A)).astype(np.float32)
  log_probs = rng.normal(size=(T, B)).astype(np.float32)
  advantages = rng.normal(size=(T, B)).astype(np.float32)
  e = np.exp(logits - logits.max(-1, keepdims=True))
  pi = e / e.sum(-1, keepdims=True)
  np.testing.assert_allclose(losses.policy_gradient_loss(log_probs, advantages).numpy(),
                             -(log_probs * advantages).sum(), rtol=1e-5)
  np.testing.assert_allclose(losses.baseline_loss(advantages).numpy(),
                             0.5 * (advantages ** 2).sum(), rtol=1e-5)
  np.testing.assert_allclose(losses.entropy_loss(distributions.Categorical(logits)).numpy(),
                             (pi * np.log(pi)).sum(), rtol=1e-5)


def test_policy_gradient_does_not_differentiate_the_advantage():
  log_probs = tf.Variable([[0.5, -1.0]])
  advantages = tf.Variable([[2.0, 3.0]])
  with tf.GradientTape() as tape:
    loss = losses.policy_gradient_loss(log_probs, advantages)
  grad_log_probs, grad_advantages = tape.gradient(loss, [log_probs, advantages])
  np.testing.assert_allclose(grad_log_probs.numpy(), [[-2.0, -3.0]])
  assert grad_advantages is None


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_equals_tf1_after_five_updates(momentum):
  rng = np.random.default_rng(1)
  initial = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)]
  gradients = [rng.normal(size=v.shape).astype(np.float32) for v in initial]
  lr, decay, epsilon = 0.01, 0.99, 0.1

  ours = [tf.Variable(v) for v in initial]
  optimizer = optimizers.RMSProp(ours, decay=decay, momentum=momentum, epsilon=epsilon)
  theirs = [tf.Variable(v) for v in initial]
  reference = tf.compat.v1.train.RMSPropOptimizer(lr, decay=decay, momentum=momentum,
                                                   epsilon=epsilon)
  for _ in range(5):
    optimizer.apply_gradients([tf.constant(g) for g in gradients], lr)
    reference.apply_gradients([(tf.constant(g), v) for g, v in zip(gradients, theirs)])
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)
  assert int(optimizer.iterations.numpy()) == 5


def test_rmsprop_differs_from_keras():
  """The reason for our own optimizer: Keras 3's RMSprop takes several times larger steps."""
  ours, keras_var = tf.Variable([1.0]), tf.Variable([1.0])
  optimizers.RMSProp([ours], epsilon=0.1).apply_gradients([tf.constant([0.1])], 0.01)
  tf.keras.optimizers.RMSprop(0.01, rho=0.99, epsilon=0.1).apply_gradients(
      [(tf.constant([0.1]), keras_var)])
  our_step, keras_step = 1.0 - ours.numpy()[0], 1.0 - keras_var.numpy()[0]
  assert keras_step > 3 * our_step > 0


def test_rmsprop_inside_jit_compiled_function():
  var = tf.Variable([1.0, -2.0])
  optimizer = optimizers.RMSProp([var], epsilon=0.01)
  step = tf.function(lambda g: optimizer.apply_gradients([g], 0.1), jit_compile=True)
  step(tf.constant([1.0, 1.0]))
  ms = 0.99 + 0.01 * 1.0
  np.testing.assert_allclose(var.numpy(), [1.0, -2.0] - 0.1 / np.sqrt(ms + 0.01), rtol=1e-6)


def test_rmsprop_initial_mean_square():
  """--rmsprop_initial_mean_square=0: the first step is lr * g / sqrt((1 - decay) g^2 + eps)
  (numpy), over 10x larger (here ~270x) than TF1's lr * g / sqrt(decay + (1 - decay) g^2 + eps) for the
  small gradients of these networks; negative starts are refused."""
  g, lr, epsilon = np.float32(0.02), 0.001, 1e-5
  steps = {}
  for start in (0.0, 1.0):
    var = tf.Variable([0.0])
    optimizers.RMSProp([var], epsilon=epsilon, initial_mean_square=start).apply_gradients(
        [tf.constant([g])], lr)
    steps[start] = -float(var.numpy()[0])
    np.testing.assert_allclose(
        steps[start], lr * g / np.sqrt(0.99 * start + 0.01 * g * g + epsilon), rtol=1e-5)
  assert steps[0.0] > 10 * steps[1.0]
  with pytest.raises(ValueError, match="initial_mean_square"):
    optimizers.RMSProp([tf.Variable([0.0])], initial_mean_square=-1.0)


def test_rmsprop_rejects_mismatched_gradients():
  optimizer = optimizers.RMSProp([tf.Variable([1.0])])
  with pytest.raises(ValueError, match="1 variables"):
    optimizer.apply_gradients([tf.constant([1.0]), tf.constant([1.0])], 0.1)


def test_linear_decay():
  lr = [float(optimizers.linear_decay(0.5, frames, 1000)) for frames in (0, 250, 1000, 5000)]
  np.testing.assert_allclose(lr, [0.5, 0.375, 0.0, 0.0], rtol=1e-6)


def _numpy_impact_loss_and_gradient(log_pi, log_target, log_mu, advantages, beta, epsilon):
  """IMPACT section 3.1 / 4.1 written out: r = pi / max(pi_target, beta mu), the loss
  -sum min(r A, clip(r, 1-eps, 1+eps) A) and its gradient with respect to log pi."""
  pi, target, mu = np.exp(log_pi), np.exp(log_target), np.exp(log_mu)
  ratio = pi / np.maximum(target, beta * mu)
  unclipped, clipped = ratio * advantages, np.clip(ratio, 1 - epsilon, 1 + epsilon) * advantages
  loss = -np.minimum(unclipped, clipped).sum()
  # d(r A)/d log pi = r A; where PPO's clip is active the clipped term is the minimum and
  # its gradient is 0.
  clip_active = ((advantages > 0) & (ratio > 1 + epsilon)) | (
      (advantages < 0) & (ratio < 1 - epsilon))
  return loss, np.where(clip_active, 0.0, -ratio * advantages)


def test_impact_surrogate_matches_numpy():
  rng = np.random.default_rng(7)
  T, B, beta, epsilon = 6, 5, 0.5, 0.3
  log_pi, log_target, log_mu = (np.log(rng.uniform(0.05, 1.0, (T, B))).astype(np.float32)
                                for _ in range(3))
  advantages = rng.normal(size=(T, B)).astype(np.float32)
  want_loss, want_grad = _numpy_impact_loss_and_gradient(log_pi, log_target, log_mu,
                                                         advantages, beta, epsilon)
  log_pi_var = tf.Variable(log_pi)
  with tf.GradientTape() as tape:
    log_ratios = losses.impact_log_ratio(log_pi_var, log_target, log_mu, beta)
    loss = losses.clipped_surrogate_loss(log_ratios, advantages, epsilon)
  np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-5)
  np.testing.assert_allclose(tape.gradient(loss, log_pi_var).numpy(), want_grad, rtol=1e-5,
                             atol=1e-6)
  # The random draw exercises both clippings.
  ratio = np.exp(log_pi) / np.maximum(np.exp(log_target), beta * np.exp(log_mu))
  assert (beta * np.exp(log_mu) > np.exp(log_target)).any()
  assert (ratio > 1 + epsilon).any() and (ratio < 1 - epsilon).any()


def test_impact_surrogate_with_the_target_equal_to_the_learner_is_the_policy_gradient():
  """pi_target = pi and beta mu < pi: r = 1 (no clipping), and the gradient is that of
  IMPALA's -sum log pi A (section 4.2)."""
  rng = np.random.default_rng(8)
  log_pi = np.log(rng.uniform(0.2, 1.0, (4, 3))).astype(np.float32)
  log_mu = log_pi + rng.uniform(-0.5, 0.5, (4, 3)).astype(np.float32)  # beta mu < pi.
  advantages = rng.normal(size=(4, 3)).astype(np.float32)
  variable = tf.Variable(log_pi)
  with tf.GradientTape(persistent=True) as tape:
    surrogate = losses.clipped_surrogate_loss(
        losses.impact_log_ratio(variable, log_pi, log_mu, beta=0.5), advantages, 0.3)
    policy_gradient = losses.policy_gradient_loss(variable, advantages)
  np.testing.assert_allclose(tape.gradient(surrogate, variable).numpy(),
                             tape.gradient(policy_gradient, variable).numpy(), rtol=1e-6)


def test_kl_divergence_matches_numpy():
  rng = np.random.default_rng(9)
  p_logits, q_logits = (rng.normal(size=(3, 2, 4)).astype(np.float32) for _ in range(2))
  softmax = lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)
  p, q = softmax(p_logits), softmax(q_logits)
  np.testing.assert_allclose(losses.kl_divergence(distributions.Categorical(p_logits),
                                                   distributions.Categorical(q_logits)).numpy(),
                             (p * np.log(p / q)).sum(), rtol=1e-5)
  assert abs(float(losses.kl_divergence(distributions.Categorical(p_logits),
                                         distributions.Categorical(p_logits)))) < 1e-5


def _np_adapted_kl_coefficient(coefficient, mean_kl, kl_target):
  """RLlib's rule (the IMPACT paper's code base): x1.5 above 2 x target, x0.5 below half."""
  if mean_kl > 2.0 * kl_target:
    return coefficient * 1.5
  if mean_kl < 0.5 * kl_target:
    return coefficient * 0.5
  return coefficient


@pytest.mark.parametrize("mean_kl", [0.0, 0.01, 0.019, 0.02, 0.021, 0.04, 0.079, 0.08, 0.081,
                                     1.0])
@pytest.mark.parametrize("coefficient", [1.0, 0.3, 0.0])
def test_adapted_kl_coefficient_matches_rllibs_rule(mean_kl, coefficient):
  kl_target = 0.04  # IMPACT Table 2's "KL Target".
  got = losses.adapted_kl_coefficient(np.float32(coefficient), np.float32(mean_kl), kl_target)
  want = _np_adapted_kl_coefficient(coefficient, np.float32(mean_kl), np.float32(kl_target))
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_standardized_advantages_match_numpy_over_the_kept_steps():
  """PPO's per-batch standardisation (losses.standardized_advantages): mean 0 and standard
  deviation 1 over the steps the mask keeps, masked steps 0 and left out of the moments."""
  rng = np.random.default_rng(7)
  advantages = rng.normal(3.0, 5.0, (6, 4)).astype(np.float32)
  mask = (rng.random((6, 4)) > 0.25).astype(np.float32)
  kept = advantages[mask > 0]
  want = np.where(mask > 0, (advantages - kept.mean()) / (kept.std() + 1e-8), 0.0)
  got = losses.standardized_advantages(advantages, mask).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert abs(got[mask > 0].mean()) < 1e-5 and abs(got[mask > 0].std() - 1.0) < 1e-4
  # Unmasked, every step counts; a shift and a positive scale change nothing.
  np.testing.assert_allclose(losses.standardized_advantages(advantages).numpy(),
                             (advantages - advantages.mean()) / (advantages.std() + 1e-8),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(losses.standardized_advantages(100.0 * advantages - 7.0, mask),
                             got, rtol=1e-4, atol=1e-5)
  # Equal advantages: zeros, not NaN.
  np.testing.assert_array_equal(losses.standardized_advantages(np.ones((3, 2), np.float32)),
                                np.zeros((3, 2), np.float32))
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="\\[T, B\\]"):
    losses.standardized_advantages(np.ones((3,), np.float32))
