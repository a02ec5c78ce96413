"""IMPACT's learner: target network period, equivalence with IMPALA's policy gradient, XLA,
frame counting, checkpointing of the target network."""
import dataclasses
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner
from scalable_agent_tf2.learning import losses
from tests import random_batches

# Small networks keep these fast: an LSTM agent (agent_state matters) and a feed-forward one.
LSTM_SMALL = networks.dmlab_config(networks.SHALLOW, num_actions=5, frame_shape=(20, 24, 3))
FF_SMALL = networks.atari_config(num_actions=4, torso=networks.SHALLOW,
                                 frame_shape=(20, 20, 4))
HPARAMS = dict(learning_rate=0.01, total_environment_frames=10**9,
               reward_clipping=losses.ABS_ONE)


def _impact(config, jit_compile=False, seed=0, impact_config=config_lib.ImpactConfig(),
            kl_target=None, **hparams):
  agent = networks.Agent(config, seed=seed)
  return impact.ImpactLearner(agent, config_lib.LearnerConfig(**{**HPARAMS, **hparams}),
                               impact_config, jit_compile=jit_compile, kl_target=kl_target)


def _values(variables):
  return [v.numpy().copy() for v in variables]


def _equal(a, b):
  return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_target_network_starts_equal_and_changes_only_on_its_period():
  period = 3
  update = _impact(FF_SMALL, impact_config=config_lib.ImpactConfig(target_update_period=period))
  agent_vars, target_vars = update.agent.trainable_variables, update._target_variables
  assert _equal(_values(agent_vars), _values(target_vars))  # Algorithm 1 line 2.
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 4, 3, seed=1)
  previous_target = _values(target_vars)
  for step in range(1, 8):
    stats = update.update((), env_outputs, agent_outputs)
    now_target, now_agent = _values(target_vars), _values(agent_vars)
    if step % period == 0:
      assert bool(stats["target_updated"]), step
      assert _equal(now_target, now_agent), step  # Refreshed to the learner's parameters.
      assert not _equal(now_target, previous_target), step
    else:
      assert not bool(stats["target_updated"]), step
      assert _equal(now_target, previous_target), step  # Untouched between periods.
      assert not _equal(now_target, now_agent), step
    previous_target = now_target
  assert int(update.num_updates.numpy()) == 7


@pytest.mark.parametrize("kl_target", [1e-9, 1e9])
def test_kl_coefficient_adapts_at_target_refreshes_by_the_steps_mean_kl(kl_target):
  # RLlib's APPO (the IMPACT paper's runs; Table 2's "KL Target"): at each target refresh,
  # x1.5 if the step's mean KL > 2 x target, x0.5 if < target / 2 (a tiny target grows the
  # coefficient, a huge one shrinks it).
  T, B, period = 4, 3, 2
  update = _impact(FF_SMALL, impact_config=config_lib.ImpactConfig(
      target_update_period=period, kl_cost=1.0), kl_target=kl_target)
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, T, B, seed=1)
  want = 1.0
  for step in range(1, 6):
    stats = update.update((), env_outputs, agent_outputs)
    assert np.isclose(stats["kl_coefficient"], want), step  # The one this step used.
    if step % period == 0:
      mean_kl = float(stats["kl_loss"]) / (T * B)
      assert mean_kl > 0, step  # The learner moved away from the target since the refresh.
      want *= 1.5 if mean_kl > 2 * kl_target else (0.5 if mean_kl < kl_target / 2 else 1.0)
    np.testing.assert_allclose(update.kl_coefficient.numpy(), want, rtol=1e-6)
  assert want != 1.0


def test_without_a_kl_target_the_kl_cost_is_fixed_and_not_a_variable():
  update = _impact(FF_SMALL, impact_config=config_lib.ImpactConfig(kl_cost=0.5))
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 3, 2)
  stats = update.update((), env_outputs, agent_outputs)
  assert "kl_coefficient" not in stats and not hasattr(update, "kl_coefficient")
  with pytest.raises(ValueError, match="kl_target must be positive"):
    _impact(FF_SMALL, kl_target=0.0)


def _near_on_policy_batch(agent, T, B, seed):
  """A batch whose behaviour logits are the agent's own plus noise: pi/mu in (1/2, 2), so
  neither IMPACT's target-worker clipping nor (at pi_target = pi) PPO's clip is active."""
  env_outputs, agent_outputs = random_batches.random_learner_batch(agent.config, T, B, seed)
  state = agent.initial_state(B)
  outputs, _ = agent.unroll(agent_outputs.action, env_outputs, state)
  noise = np.random.default_rng(seed).uniform(-0.3, 0.3, outputs.policy_params.shape)
  return state, env_outputs, agent_outputs._replace(
      policy_params=(outputs.policy_params.numpy() + noise).astype(np.float32))


def test_with_the_target_equal_to_the_learner_the_surrogate_gradient_is_impalas():
  """K = 1, N = 1, target = learner (period 1), lambda = 1, no clipping active: the gradient
  of IMPACT's surrogate equals that of IMPALA's importance-weighted policy gradient
  -sum rho_s log pi(a_s|x_s) (r_s + gamma v_{s+1} - V(x_s)) (section 4.2), and so does the
  gradient of the whole loss (same value targets and entropy term)."""
  T, B = 6, 3
  impact_config = config_lib.ImpactConfig(gae_lambda=1.0, target_update_period=1)
  update = _impact(LSTM_SMALL, seed=5, impact_config=impact_config)
  agent, config = update.agent, update.config
  for seed in range(2):  # The second batch: after one update and its target refresh.
    state, env_outputs, agent_outputs = _near_on_policy_batch(agent, T, B, seed=seed)
    target_params = update.target_policy_params(state, env_outputs, agent_outputs)
    with tf.GradientTape(persistent=True) as tape:
      outputs, _ = agent.unroll(agent_outputs.action, env_outputs, state)
      family = agent.config.action_distribution
      impact_terms, diagnostics = losses.impact_loss_terms(
          family, outputs, target_params, env_outputs, agent_outputs, config, impact_config)
      impala_terms, impala_returns = losses.impala_loss_terms(family, outputs, env_outputs,
                                                               agent_outputs, config)
      impact_total = (impact_terms["pg_loss"] + config.baseline_cost
                      * impact_terms["baseline_loss"] + config.entropy_cost
                      * impact_terms["entropy_loss"])
      impala_total = (impala_terms["pg_loss"] + config.baseline_cost
                      * impala_terms["baseline_loss"] + config.entropy_cost
                      * impala_terms["entropy_loss"])
    assert float(diagnostics["target_worker_clipped_fraction"]) == 0.0
    assert float(diagnostics["ppo_clipped_fraction"]) == 0.0
    # IMPALA's importance weights are really at work: some pi/mu are truncated at 1.
    log_rhos = impala_returns.log_rhos.numpy()
    assert (log_rhos > 0).any() and (log_rhos < 0).any()
    gradient = lambda loss: [tf.convert_to_tensor(g).numpy() for g in tape.gradient(
        loss, agent.trainable_variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)]
    for impact_loss, impala_loss in [(impact_terms["pg_loss"], impala_terms["pg_loss"]),
                                     (impact_total, impala_total)]:
      for got, want in zip(gradient(impact_loss), gradient(impala_loss)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    for name in ("baseline_loss", "entropy_loss"):  # Same value targets, same entropy.
      np.testing.assert_allclose(impact_terms[name].numpy(), impala_terms[name].numpy(),
                                 rtol=1e-5, atol=1e-6, err_msg=name)
    assert abs(float(impact_terms["kl_loss"])) < 1e-4

    stats = update.update(state, env_outputs, agent_outputs, target_policy_params=target_params)
    np.testing.assert_allclose(float(stats["total_loss"]), float(impact_total), rtol=1e-5)
    assert _equal(_values(update._target_variables), _values(agent.trainable_variables))


@pytest.mark.parametrize("normalize", [False, True])
def test_standardised_advantages_make_the_surrogate_blind_to_the_rewards_scale(normalize):
  """--normalize_advantages: with the baseline at 0 (so the advantages are linear in the
  rewards), rewards 100 times larger give the same surrogate when the advantages are
  standardised, and 100 times its size when they are not."""
  T, B = 6, 3
  impact_config = config_lib.ImpactConfig(normalize_advantages=normalize)
  # The network does not read the reward (Figure 3's reward input would see the scale).
  network = dataclasses.replace(FF_SMALL, reward_and_action_inputs=False)
  update = _impact(network, seed=2, impact_config=impact_config,
                   reward_clipping=losses.NO_CLIPPING)
  agent = update.agent
  for variable in agent.baseline.trainable_variables:
    variable.assign(tf.zeros_like(variable))
  state, env_outputs, agent_outputs = _near_on_policy_batch(agent, T, B, seed=4)
  target_params = update.target_policy_params(state, env_outputs, agent_outputs)

  def pg_gradient(scale):
    """The surrogate's gradient (its value is 0 at pi = pi_target with mean-0 advantages)."""
    scaled = env_outputs._replace(reward=env_outputs.reward * np.float32(scale))
    with tf.GradientTape() as tape:
      outputs, _ = agent.unroll(agent_outputs.action, scaled, state)
      terms, _ = losses.impact_loss_terms(agent.config.action_distribution, outputs,
                                          target_params, scaled, agent_outputs, update.config,
                                          impact_config)
    gradients = tape.gradient(terms["pg_loss"], agent.policy.trainable_variables)
    return np.concatenate([np.ravel(g) for g in gradients])

  assert np.abs(pg_gradient(1.0)).max() > 1e-4
  np.testing.assert_allclose(pg_gradient(100.0),
                             pg_gradient(1.0) * (1.0 if normalize else 100.0),
                             rtol=1e-3, atol=1e-6 * (1.0 if normalize else 100.0))


def test_compiled_impact_update_equals_uncompiled():
  impact_config = config_lib.ImpactConfig(target_update_period=2)
  compiled = _impact(FF_SMALL, jit_compile=True, impact_config=impact_config, max_grad_norm=10.0)
  plain = _impact(FF_SMALL, jit_compile=False, impact_config=impact_config, max_grad_norm=10.0)
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 4, 3, seed=3)
  for _ in range(3):  # Both branches of the target refresh.
    got = compiled.update((), env_outputs, agent_outputs)
    want = plain.update((), env_outputs, agent_outputs)
    for key in want:
      np.testing.assert_allclose(np.float32(got[key]), np.float32(want[key]), rtol=1e-4,
                                 atol=1e-4, err_msg=key)
  for a, b in zip(compiled._target_variables + compiled._variables,
                  plain._target_variables + plain._variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.name)
  assert compiled._compiled_update.experimental_get_tracing_count() == 1


def test_only_new_trajectories_count_as_frames():
  T, B = 4, 3
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, T, B)
  impala = learner.Learner(networks.Agent(FF_SMALL), config_lib.LearnerConfig(**HPARAMS),
                           jit_compile=False)
  impact = _impact(FF_SMALL)
  for the_learner in (impala, impact):  # One call for both.
    frames = [int(the_learner.update((), env_outputs, agent_outputs,
                                     num_new_trajectories=n)["num_env_frames"])
              for n in (None, 0, 2)]
    assert frames == [T * B * 4, T * B * 4, T * B * 4 + T * 2 * 4]  # 4 action repeats.
    with pytest.raises(ValueError, match="num_new_trajectories"):
      the_learner.update((), env_outputs, agent_outputs, num_new_trajectories=4)
  assert impala._compiled_update.experimental_get_tracing_count() == 1


def test_wrong_target_params_and_bad_hyperparameters_are_clear_errors():
  update = _impact(FF_SMALL)
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 3, 2)
  with pytest.raises(ValueError, match="target_policy_params has shape"):
    update.update((), env_outputs, agent_outputs,
                  target_policy_params=np.zeros((4, 2, 3), np.float32))
  for field, value, message in [("ppo_clip", 0.0, "ppo_clip"),
                                ("target_worker_clipping", 0.5, "must be >= 1"),
                                ("gae_lambda", 1.5, "gae_lambda"), ("kl_cost", -1.0, "kl_cost"),
                                ("target_update_period", 0, "target_update_period")]:
    with pytest.raises(ValueError, match=message):
      config_lib.ImpactConfig(**{field: value})


def test_checkpoint_carries_the_target_network_and_step_count(tmp_path):
  update = _impact(FF_SMALL, impact_config=config_lib.ImpactConfig(target_update_period=2))
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 3, 2)
  for _ in range(3):  # The target was refreshed at step 2; the learner moved on after.
    update.update((), env_outputs, agent_outputs)
  path = tf.train.Checkpoint(agent=update.agent, learner=update).save(str(tmp_path / "ckpt"))
  names = [name for name, _ in tf.train.list_variables(path)]
  # The target network's variables (every one of them, under the learner).
  targets = [name for name in names if name.startswith("learner/_target_variables/")]
  assert len(targets) == len(update._target_variables), names

  restored = _impact(FF_SMALL, seed=9)
  tf.train.Checkpoint(agent=restored.agent, learner=restored).restore(
      path).assert_existing_objects_matched()
  assert int(restored.num_updates.numpy()) == 3
  assert _equal(_values(restored._target_variables), _values(update._target_variables))
  assert not _equal(_values(restored._target_variables),
                    _values(restored.agent.trainable_variables))


def test_update_without_target_params_uses_the_target_network_now():
  # Algorithm 1 line 7 for a batch used once: update() computes the target policy itself;
  # impact.steps freezes it for the circular buffer as the batch enters. Both give the same
  # step.
  env_outputs, agent_outputs = random_batches.random_learner_batch(FF_SMALL, 3, 2, seed=4)
  inside, given = _impact(FF_SMALL), _impact(FF_SMALL)
  got = inside.update((), env_outputs, agent_outputs)
  config = types.SimpleNamespace(num_learners=1, num_online_per_batch=2,
                                 circular_buffer_size=1, circular_buffer_max_uses=1)
  [(_, batch, num_new)] = impact.steps([((0, 0), (), env_outputs, agent_outputs, (0, 0))],
                                       given, config)
  np.testing.assert_array_equal(
      batch["target_policy_params"],
      given.target_policy_params((), env_outputs, agent_outputs))
  want = given.update(**batch, num_new_trajectories=num_new)
  for key in want:
    np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
