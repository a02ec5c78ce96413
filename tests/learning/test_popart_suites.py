"""Per-task PopArt in the agent and the learners (Hessel et al. 2019): one value output per task,
each trajectory reading its task's output and statistics, the losses in each trajectory's
task's scale, and the single task's shapes and numbers as they were."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner
from scalable_agent_tf2.learning import losses
from tests import random_batches

VECTOR = networks.vector_config(num_actions=3, observation_size=5)
T, B = 6, 4
SCALES = np.array([1.0, 1000.0, 20.0], np.float32)  # Three tasks' reward scales.


def _config(popart=True, **overrides):
  return config_lib.LearnerConfig(**{**dict(
      learning_rate=0.01, total_environment_frames=10_000, max_grad_norm=40.0, popart=popart,
      epsilon=1e-5, rmsprop_initial_mean_square=0.0, reward_clipping="none",
      num_action_repeats=1), **overrides})


def _agent(num_tasks, seed=0):
  return networks.Agent(dataclasses.replace(VECTOR, num_value_outputs=num_tasks), seed=seed)


def _batch(tasks, seed=0):
  """A random batch [T+1, B] whose trajectory b pays rewards of task tasks[b]'s scale, of size
  at least 1 (so the network's clipped reward input is the same +-1 at any scale)."""
  env_outputs, agent_outputs = random_batches.random_learner_batch(VECTOR, T, len(tasks), seed)
  frames = np.random.default_rng(seed).normal(size=(T + 1, len(tasks), 5)).astype(np.float32)
  rewards = np.sign(env_outputs.reward) * (1.0 + np.abs(env_outputs.reward))
  rewards = rewards * SCALES[np.asarray(tasks)][None]
  return env_outputs._replace(reward=rewards.astype(np.float32),
                              observation=env_outputs.observation._replace(frame=frames)), \
      agent_outputs


def test_the_baseline_has_one_output_per_task_and_one_task_keeps_its_shape():
  env_outputs, agent_outputs = _batch([0, 1, 2, 0])
  one = networks.Agent(VECTOR, seed=0)
  three = _agent(3)
  assert one.baseline.w.shape[1] == 1 and three.baseline.w.shape[1] == 3
  assert one.baseline.w.shape[0] == three.baseline.w.shape[0]
  assert one.unroll(agent_outputs.action, env_outputs, ())[0].baseline.shape == (T + 1, B)
  assert three.unroll(agent_outputs.action, env_outputs, ())[0].baseline.shape == (T + 1, B, 3)
  # The same seed builds the same network but for the value layer (built last).
  for a, b in zip(one.trainable_variables, three.trainable_variables):
    if "baseline" not in a.name:
      np.testing.assert_array_equal(a.numpy(), b.numpy())
  with pytest.raises(ValueError, match="num_value_outputs"):
    dataclasses.replace(VECTOR, num_value_outputs=0)


def test_each_trajectory_reads_its_tasks_output_and_statistics():
  learn = learner.Learner(_agent(3), _config(), jit_compile=False)
  learn.popart.mu.assign([1.0, -200.0, 0.5])
  learn.popart.nu.assign([5.0, 200.0 ** 2 + 900.0, 0.5 ** 2 + 0.04])
  env_outputs, agent_outputs = _batch([2, 0, 1, 1])
  tasks = tf.constant([2, 0, 1, 1])
  outputs, scale = learn._popart_values(
      learn.agent.unroll(agent_outputs.action, env_outputs, ())[0], tasks)
  n = learn.agent.unroll(agent_outputs.action, env_outputs, ())[0].baseline.numpy()
  mu, sigma = learn.popart.mu.numpy(), learn.popart.sigma.numpy()
  want = n[:, np.arange(B), [2, 0, 1, 1]] * sigma[[2, 0, 1, 1]] + mu[[2, 0, 1, 1]]
  np.testing.assert_allclose(outputs.baseline.numpy(), want, rtol=1e-5)
  np.testing.assert_allclose(scale.numpy(), sigma[[2, 0, 1, 1]], rtol=1e-6)


def test_a_mixed_batch_moves_only_its_tasks_statistics_and_keeps_every_value():
  learn = learner.Learner(_agent(3), _config(learning_rate=1e-6), jit_compile=False)
  env_outputs, agent_outputs = _batch([0, 1, 1, 0])
  before = {name: getattr(learn.popart, name).numpy().copy()
            for name in ("mu", "nu", "mu_hat", "nu_hat", "count")}
  stats = learn.update((), env_outputs, agent_outputs, tasks=np.array([0, 1, 1, 0], np.int32))
  assert not stats["update_skipped"]
  assert stats["popart_sigma"].shape == (3,)
  count = learn.popart.count.numpy()
  np.testing.assert_array_equal(count, [1.0, 1.0, 0.0])
  for name, old in before.items():  # Task 2 had no trajectory: bit for bit as it was.
    assert getattr(learn.popart, name).numpy()[2] == old[2], name
    assert not np.array_equal(getattr(learn.popart, name).numpy()[:2], old[:2]), name
  # Each task's scale follows its own targets: task 1's rewards are 1,000 times task 0's.
  sigma = learn.popart.sigma.numpy()
  assert sigma[1] > 100 * sigma[0], sigma


def test_the_update_needs_each_trajectorys_task_in_range():
  learn = learner.Learner(_agent(3), _config(), jit_compile=False)
  env_outputs, agent_outputs = _batch([0, 1, 1, 0])
  with pytest.raises(ValueError, match="needs each trajectory's task"):
    learn.update((), env_outputs, agent_outputs)
  with pytest.raises(ValueError, match=r"in \[0, 3\)"):
    learn.update((), env_outputs, agent_outputs, tasks=np.array([0, 1, 3, 0], np.int32))
  with pytest.raises(ValueError, match="shape"):
    learn.update((), env_outputs, agent_outputs, tasks=np.array([0, 1, 2], np.int32))
  with pytest.raises(ValueError, match="needs --popart"):
    learner.Learner(_agent(3), _config(popart=False), jit_compile=False)


def test_the_losses_are_each_trajectorys_in_its_tasks_scale():
  """With every task's statistics (mu 0, sigma s_i), a batch paying task i's rewards x s_i
  gives the losses of the single-task learner with sigma 1 on the unscaled rewards: V-trace is
  linear in the rewards and values, and each trajectory's errors are divided by its sigma."""
  tasks = [0, 1, 2, 1]
  multi = learner.Learner(_agent(3), _config(), jit_compile=False)
  single = learner.Learner(networks.Agent(VECTOR, seed=0), _config(), jit_compile=False)
  for a, b in zip(multi.agent.trainable_variables, single.agent.trainable_variables):
    b.assign(a if a.shape == b.shape else a[:, :1] if a.shape.rank == 2 else a[:1])
  # Every task's output equal to the single network's, so only the scales differ.
  multi.agent.baseline.w.assign(tf.tile(single.agent.baseline.w, [1, 3]))
  multi.agent.baseline.b.assign(tf.tile(single.agent.baseline.b, [3]))
  multi.popart.mu.assign(np.zeros(3, np.float32))
  multi.popart.nu.assign(SCALES ** 2)
  env_outputs, agent_outputs = _batch([0, 0, 0, 0])
  scaled, _ = _batch(tasks)
  got = multi._loss_gradients_and_targets((), scaled, agent_outputs, tf.constant(tasks))[1]
  want = single._loss_gradients_and_targets((), env_outputs, agent_outputs)[1]
  for key in ("pg_loss", "baseline_loss", "entropy_loss"):
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=2e-4, err_msg=key)


def test_value_scale_none_is_the_losses_of_before_bit_for_bit():
  env_outputs, agent_outputs = _batch([0, 1, 2, 0])
  outputs = networks.Agent(VECTOR, seed=0).unroll(agent_outputs.action, env_outputs, ())[0]
  family = VECTOR.action_distribution
  plain = losses.impala_loss_terms(family, outputs, env_outputs, agent_outputs, _config())[0]
  ones = losses.impala_loss_terms(family, outputs, env_outputs, agent_outputs, _config(),
                                  value_scale=tf.ones([B]))[0]
  halves = losses.impala_loss_terms(family, outputs, env_outputs, agent_outputs, _config(),
                                    value_scale=tf.fill([B], 2.0))[0]
  for key in ("pg_loss", "baseline_loss", "entropy_loss"):
    assert plain[key].numpy() == ones[key].numpy(), key
  np.testing.assert_allclose(halves["pg_loss"], plain["pg_loss"] / 2, rtol=1e-6)
  np.testing.assert_allclose(halves["baseline_loss"], plain["baseline_loss"] / 4, rtol=1e-6)
  assert halves["entropy_loss"].numpy() == plain["entropy_loss"].numpy()


def test_impacts_learner_takes_the_tasks_too():
  learn = impact.ImpactLearner(_agent(3), _config(learning_rate=1e-6),
                               config_lib.ImpactConfig(), jit_compile=False)
  env_outputs, agent_outputs = _batch([2, 2, 0, 2])
  stats = learn.update((), env_outputs, agent_outputs, tasks=np.array([2, 2, 0, 2], np.int32))
  assert not stats["update_skipped"]
  np.testing.assert_array_equal(learn.popart.count.numpy(), [1.0, 0.0, 1.0])
  assert learn.target_agent.baseline.w.shape[1] == 3
  sigma = learn.popart.sigma.numpy()
  assert sigma[2] > 5 * sigma[0] and sigma[1] == 1.0, sigma  # Task 2 pays 20 times task 0.


def test_an_actor_of_one_task_reads_that_tasks_output():
  agent = _agent(3)
  policy = policies.PerActorPolicy(agent)
  env_outputs, agent_outputs = _batch([0, 0])
  step = lambda p: p(agent_outputs.action[0], tf.nest.map_structure(lambda t: t[0], env_outputs),
                     ())
  params, every, _ = step(policy)
  assert every.shape == (2, 3)
  task_params, baseline, _ = step(policies.TaskBaseline(policy, 1))
  np.testing.assert_array_equal(baseline, every[:, 1])
  np.testing.assert_array_equal(task_params, params)
  assert policies.TaskBaseline(policy, 1).action_space is policy.action_space
