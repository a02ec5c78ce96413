"""PopArt (learning/popart.py): its math against numpy, its place in the learner, its settings."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner
from scalable_agent_tf2.learning import popart
from tests import random_batches

VECTOR = networks.vector_config(num_actions=3, observation_size=5)


def test_preserved_layer_keeps_every_output():
  rng = np.random.default_rng(0)
  features = rng.normal(size=(7, 4))
  w, b = rng.normal(size=(4, 1)), rng.normal(size=(1,))
  mu, sigma, new_mu, new_sigma = 0.3, 2.0, -40.0, 75.0
  before = sigma * (features @ w + b) + mu
  new_w, new_b = popart.preserved_layer(w, b, mu, sigma, new_mu, new_sigma)
  np.testing.assert_allclose(new_sigma * (features @ new_w + new_b) + new_mu, before,
                             rtol=1e-12)
  # The normalised output itself moved (towards the new scale): not the identity.
  assert not np.allclose(features @ new_w + new_b, features @ w + b)


def test_bias_corrected_moments_are_the_plain_averages_at_first():
  mu_hat = nu_hat = count = 0.0
  targets = [np.array([-100.0, -90.0]), np.array([-80.0, -120.0]), np.array([-60.0, -61.0])]
  for seen, batch in enumerate(targets, 1):
    mu_hat, nu_hat, count, stats = popart.updated_moments(
        mu_hat, nu_hat, count, batch.mean(), np.square(batch).mean(), step_size=3e-4)
    # With beta 3e-4 the corrected average of a few batches is within 0.1% of their mean.
    so_far = np.concatenate(targets[:seen])
    np.testing.assert_allclose(stats.mu, so_far.mean(), rtol=1e-3)
    np.testing.assert_allclose(stats.nu, np.square(so_far).mean(), rtol=1e-3)
  assert count == 3
  # The first batch alone: exactly its moments (the correction undoes the start at 0).
  _, _, _, first = popart.updated_moments(0.0, 0.0, 0.0, 5.0, 29.0)
  np.testing.assert_allclose([first.mu, first.nu], [5.0, 29.0], rtol=1e-9)


def test_sigma_is_the_standard_deviation_within_bounds():
  np.testing.assert_allclose(popart.sigma_of(3.0, 25.0), 4.0)
  assert popart.sigma_of(1.0, 1.0) == popart.SIGMA_BOUNDS[0]  # Zero variance.
  assert popart.sigma_of(0.0, 1e20) == popart.SIGMA_BOUNDS[1]


def test_update_moves_the_statistics_and_keeps_the_values():
  layer = torsos.Linear(4, 1, init=torsos.Initializer(seed=0), name="baseline")
  scaler = popart.PopArt(layer)
  features = tf.random.stateless_normal([6, 4], seed=[1, 2])
  before = scaler.values(tf.squeeze(layer(features), -1))
  targets = tf.constant([[-100.0, -80.0], [-120.0, -60.0]])
  stats = scaler.update(targets, tf.constant([[1.0, 1.0], [1.0, 0.0]]))  # -60 not counted.
  np.testing.assert_allclose(stats["popart_mu"], -100.0, rtol=1e-5)
  np.testing.assert_allclose(stats["popart_sigma"], np.std([-100.0, -80.0, -120.0]), rtol=1e-4)
  np.testing.assert_allclose(scaler.values(tf.squeeze(layer(features), -1)), before, rtol=1e-5,
                             atol=1e-4)


def _learner(popart_on, schedule=settings.LINEAR, seed=0, learning_rate=0.01):
  agent = networks.Agent(VECTOR, seed=seed)
  config = config_lib.LearnerConfig(learning_rate=learning_rate, total_environment_frames=10_000,
                                 max_grad_norm=40.0, popart=popart_on,
                                 learning_rate_schedule=schedule, epsilon=1e-5,
                                 rmsprop_initial_mean_square=0.0, reward_clipping="none",
                                 num_action_repeats=1)
  return learner.Learner(agent, config, jit_compile=False)


def _batch(reward_scale, seed=0):
  """A random batch [T+1 = 9, B = 4] for VECTOR: float observations, rewards of size at least
  1 (so the network's clipped reward input is the same +-1 at any scale) x reward_scale."""
  env_outputs, agent_outputs = random_batches.random_learner_batch(VECTOR, 8, 4, seed)
  frames = np.random.default_rng(seed).normal(size=(9, 4, 5)).astype(np.float32)
  rewards = np.sign(env_outputs.reward) * (1.0 + np.abs(env_outputs.reward))
  return env_outputs._replace(
      reward=(rewards * reward_scale).astype(np.float32),
      observation=env_outputs.observation._replace(frame=frames)), agent_outputs


def test_popart_losses_are_the_normalised_ones():
  """The learner's baseline and policy-gradient losses with PopArt equal those without it on
  rewards divided by sigma, once the statistics are (mu 0, sigma s): V-trace is linear in the
  rewards and values, so (v_s - V) / s is the unscaled task's error."""
  scale = 50.0
  with_popart, without = _learner(True), _learner(False)
  for a, b in zip(with_popart.agent.trainable_variables, without.agent.trainable_variables):
    b.assign(a)
  with_popart.popart.mu.assign(0.0)
  with_popart.popart.nu.assign(scale * scale)  # sigma = 50.
  # V = 50 n: the same normalised network on rewards x 50 is the plain network on rewards.
  env_outputs, agent_outputs = _batch(1.0)
  scaled = env_outputs._replace(reward=env_outputs.reward * scale)  # Inputs clipped alike.
  state = ()
  got = with_popart._loss_gradients_and_targets(state, scaled, agent_outputs)[1]
  want = without._loss_gradients_and_targets(state, env_outputs, agent_outputs)[1]
  for key in ("pg_loss", "baseline_loss", "entropy_loss"):
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=2e-4, err_msg=key)


def test_popart_makes_the_update_independent_of_the_reward_scale():
  """Two learners from the same start on one batch, rewards x1 and x1000: after a first update
  sets the scale, the second update's gradient norms agree within 25%; without PopArt they
  differ by orders of magnitude (the issue's -1-per-step task). A small learning rate keeps
  the network near its start, so that only the statistics differ."""
  norms = {}
  for popart_on in (True, False):
    for scale in (1.0, 1000.0):
      learn = _learner(popart_on, learning_rate=1e-6)
      env_outputs, agent_outputs = _batch(scale)
      for _ in range(2):
        stats = learn.update((), env_outputs, agent_outputs)
      norms[popart_on, scale] = float(stats["grad_norm"])
  assert norms[True, 1000.0] == pytest.approx(norms[True, 1.0], rel=0.25), norms
  assert norms[False, 1000.0] > 100 * norms[False, 1.0], norms


def test_impact_popart_losses_are_the_normalised_ones():
  """IMPACT's learner with PopArt (mu 0, sigma s) on rewards x s reports the policy-gradient
  and baseline losses of the plain IMPACT learner on the unscaled rewards: the GAE V-trace
  advantages and targets are linear in the rewards and values, and the clipped surrogate is
  positively homogeneous in the advantages. Both start from one seed (their target networks
  too), at a learning rate too small to matter."""
  scale = 40.0
  learners = {}
  for popart_on in (True, False):
    config = dataclasses.replace(_learner(popart_on).config, learning_rate=1e-12)
    learners[popart_on] = impact.ImpactLearner(networks.Agent(VECTOR, seed=0), config,
                                               jit_compile=False)
  learners[True].popart.nu.assign(scale * scale)  # mu 0, sigma 40.
  env_outputs, agent_outputs = _batch(1.0)
  scaled = env_outputs._replace(reward=env_outputs.reward * scale)
  got = learners[True].update((), scaled, agent_outputs)
  want = learners[False].update((), env_outputs, agent_outputs)
  for key in ("pg_loss", "baseline_loss", "entropy_loss", "kl_loss"):
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=2e-4, atol=1e-6,
                               err_msg=key)
  # The statistics moved towards the scaled task's targets and the layer kept V(x).
  assert float(got["popart_sigma"]) != scale and "popart_mu" in got


def test_constant_schedule_keeps_the_learning_rate():
  for schedule, want in ((settings.CONSTANT, [0.01, 0.01, 0.01]),
                         (settings.LINEAR, [0.01, 0.01 * (1 - 32 / 10_000),
                                            0.01 * (1 - 64 / 10_000)])):
    learn = _learner(False, schedule)
    env_outputs, agent_outputs = _batch(1.0)
    got = [float(learn.update((), env_outputs, agent_outputs)["learning_rate"])
           for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=schedule)


def test_popart_statistics_are_checkpointed(tmp_path):
  learn = _learner(True)
  env_outputs, agent_outputs = _batch(100.0)
  learn.update((), env_outputs, agent_outputs)
  path = tf.train.Checkpoint(learner=learn).save(str(tmp_path / "ckpt"))
  fresh = _learner(True, seed=1)
  tf.train.Checkpoint(learner=fresh).restore(path).assert_consumed()
  for name in ("mu", "nu", "mu_hat", "nu_hat", "count"):
    assert getattr(fresh.popart, name).numpy() == getattr(learn.popart, name).numpy(), name
  assert fresh.popart.count.numpy() == 1.0


def _resolved(level_name, **flags):
  base = config_lib.ExperimentConfig(level_name=level_name)
  return config_lib.resolve(dataclasses.replace(base, **flags))


def test_presets_use_popart_only_where_the_papers_did_not_run():
  assert _resolved("gym:CartPole-v1").popart
  assert _resolved("gym:CartPole-v1").learning_rate_schedule == settings.CONSTANT
  assert _resolved("gym:Pendulum-v1").popart
  for paper_level in ("atari/pong", "mujoco/hopper", "toy/lit_side"):
    resolved = _resolved(paper_level)
    assert not resolved.popart and resolved.learning_rate_schedule == settings.LINEAR, paper_level
  for algorithm in (settings.IMPACT, settings.IMPALA):  # Both gymnasium sets learn with it.
    assert _resolved("gym:CartPole-v1", algorithm=algorithm).popart


def test_popart_refuses_several_learners():
  with pytest.raises(ValueError, match="num_learners"):
    _resolved("atari/pong", popart=True, num_learners=2, num_actors=2)


def test_standardised_advantages_are_not_divided_by_sigma_again():
  terms = dict(pg_loss=tf.constant(3.0), baseline_loss=tf.constant(8.0),
               entropy_loss=tf.constant(-2.0))
  scaled = popart.scale_loss_terms(terms, tf.constant(2.0), scale_pg=False)
  assert float(scaled["pg_loss"]) == 3.0 and float(scaled["baseline_loss"]) == 2.0
  assert float(popart.scale_loss_terms(terms, tf.constant(2.0))["pg_loss"]) == 1.5
  assert float(scaled["entropy_loss"]) == -2.0
