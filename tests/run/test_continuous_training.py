"""Continuous control end to end: MuJoCo presets, Gaussian acting (clipped only towards the
environment), the observation filter in checkpoints and test mode, and the learner's Gaussian
loss terms against numpy."""
import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import mujoco
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import training
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _flags(logdir, algorithm, *extra):
  flags = ["--level_name=mujoco/hopper", f"--algorithm={algorithm}", f"--logdir={logdir}",
           "--batch_size=2", "--unroll_length=8", "--num_actors=2", "--log_secs=60",
           "--total_environment_frames=64", "--test_num_episodes=1", *extra]
  if algorithm == "impact":
    flags += ["--circular_buffer_size=2", "--circular_buffer_max_uses=2"]
  return config_lib.config_from_argv(flags)


def test_mujoco_levels_take_table_2s_presets():
  impala = config_lib.config_from_argv(["--level_name=mujoco/hopper"])
  impact = config_lib.config_from_argv(["--level_name=mujoco/half_cheetah",
                                        "--algorithm=impact"])
  assert (impala.learning_rate, impala.discounting, impala.max_grad_norm) == (1.5e-5, 0.995, 0.5)
  assert (impala.unroll_length, impala.batch_size, impala.entropy_cost) == (1024, 32, 0.0)
  assert impala.reward_clipping == "none" and impala.num_action_repeats == 1
  assert impala.family.environment_options(impala) == {}
  assert impala.width is None and impala.torso is None
  # HalfCheetah's footnotes: K = 32, value coefficient 0.5; n = N x K.
  assert (impact.circular_buffer_max_uses, impact.baseline_cost) == (32, 0.5)
  assert impact.target_update_period == 16 * 32
  assert impact.max_grad_norm == 0.5 * 1024 * 32  # Averaged loss's clip on our sum.
  assert (impact.ppo_clip, impact.kl_cost, impact.gae_lambda) == (0.4, 1.0, 0.995)
  assert impact.kl_target == 0.04 and impala.kl_target is None  # Table 2, "KL Target".


def test_impacts_gradient_clip_follows_the_runs_batch_and_unroll():
  # Table 2's 0.5 clips RLlib APPO's mean over T x B steps; our loss is a sum over them.
  small = config_lib.config_from_argv(["--level_name=mujoco/hopper", "--algorithm=impact",
                                       "--batch_size=4", "--unroll_length=256"])
  assert small.max_grad_norm == 0.5 * 256 * 4
  given = config_lib.config_from_argv(["--level_name=mujoco/hopper", "--algorithm=impact",
                                       "--batch_size=4", "--max_grad_norm=7"])
  assert given.max_grad_norm == 7
  impala = config_lib.config_from_argv(["--level_name=mujoco/hopper", "--batch_size=4"])
  assert impala.max_grad_norm == 0.5  # RLlib's IMPALA summed its loss too: no scaling.
  # Table 1's 10 on the mean of the IMPACT paper's Atari setting, scaled the same way.
  pong = config_lib.config_from_argv(["--level_name=atari/pong", "--algorithm=impact",
                                      "--preset=impact_paper", "--unroll_length=20"])
  assert pong.max_grad_norm == 10.0 * 20 * 10


@pytest.mark.parametrize("algorithm", ["impala", "impact"])
def test_mujoco_presets_step_like_adam_under_a_small_clipped_gradient(algorithm):
  # RLlib's Adam (the paper's optimizer) steps about one learning rate per weight whatever the
  # gradient's scale. IMPALA's clip of 0.5 on the summed gradient leaves a weight ~1e-4: the
  # preset's RMSProp must still take steps of about the learning rate there (Table G.1's
  # epsilon 0.01 and TF1's accumulator start took 0.001 of it).
  from scalable_agent_tf2.learning import optimizers  # pylint: disable=g-import-not-at-top
  learner = config_lib.config_from_argv(["--level_name=mujoco/hopper",
                                         f"--algorithm={algorithm}"]).learner_config()
  weight = tf.Variable(tf.zeros([64]))
  optimizer = optimizers.RMSProp([weight], decay=learner.decay, momentum=learner.momentum,
                                 epsilon=learner.epsilon,
                                 initial_mean_square=learner.rmsprop_initial_mean_square)
  gradient = tf.fill([64], 1e-4)
  steps = []
  for _ in range(300):
    before = weight.numpy().copy()
    optimizer.apply_gradients([gradient], learning_rate=1.0)
    steps.append(np.abs(before - weight.numpy()).mean())
  assert 0.9 < steps[-1] < 1.1  # Step / learning rate.
  assert steps[0] >= 1.0  # Full-size from the first update (no TF1 warm-up).


def test_frame_flags_are_refused_on_mujoco():
  with pytest.raises(ValueError, match="--torso.*no frames or torso"):
    config_lib.config_from_argv(["--level_name=mujoco/hopper", "--torso=shallow"])


@pytest.mark.parametrize("algorithm", ["impala", "impact"])
def test_train_resume_and_test_on_hopper(tmp_path, algorithm):
  config = _flags(tmp_path, algorithm)
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_updates >= 1 and result.num_env_frames >= 64

  # Resume: the observation filter's statistics come back with the checkpoint.
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  assert agent.observation_filter.filter.count == 0
  checkpointer = assembly.make_checkpointer(config, agent,
                                            assembly.make_learner(config, agent))
  assert checkpointer.restore() == result.checkpoint
  restored = agent.observation_filter.filter.state()
  assert restored["count"] >= result.num_env_frames  # Every observation the actors saw.
  assert np.all(np.isfinite(restored["mean"])) and np.any(restored["m2"] > 0)

  if algorithm == "impact":
    return  # Test mode plays the policy the same way for both algorithms.
  # Test mode: plays the checkpoint with the filter frozen.
  rows = evaluation.evaluate(dataclasses.replace(config, mode="test", num_actors=1),
                             print_fn=lambda line: None)["rows"]
  assert rows[0]["episodes"] == 1 and np.isfinite(rows[0]["mean_return"])


class _RecordingEnvironment(mujoco.MujocoEnvironment):
  """Hopper in process, remembering every action it was sent."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.sent = []

  def step(self, action):
    self.sent.append(np.array(action))
    return super().step(action)


def _continuous_agent(env, update_filter=True, **config):
  spec = env.spec
  agent = networks.Agent(networks.continuous_vector_config(
      observation_size=spec.frame_shape[0], action_size=spec.action_size, **config))
  agent.observation_filter = action_spaces.ObservationFilter(spec.frame_shape[0],
                                                             update=update_filter)
  return agent


def test_environment_gets_clipped_actions_and_the_trajectory_keeps_the_samples():
  env = _RecordingEnvironment("mujoco/hopper", seed=3)
  agent = _continuous_agent(env, state_dependent_log_std=False)
  agent.policy.log_std.assign(np.full(3, math.log(2.0), np.float32))  # Often outside [-1, 1].
  policy = policies.PerActorPolicy(agent)
  loop = actor_lib.EnvironmentLoop(lambda attempt: env, policy, [np.random.default_rng(0)],
                                   "mujoco/hopper")
  [trajectory] = loop.unroll(40)
  actions = trajectory.agent_outputs.action[1:]
  sent = np.stack(env.sent)
  assert isinstance(trajectory.agent_outputs, AgentOutput)
  assert actions.dtype == np.float32 and actions.shape == (40, 3)
  assert np.abs(actions).max() > 1.0  # Unclipped samples are stored...
  np.testing.assert_array_equal(sent, np.clip(actions, -1.0, 1.0))  # ...clipped ones sent.
  np.testing.assert_allclose(trajectory.agent_outputs.policy_params[1:, 3:], math.log(2.0),
                             rtol=1e-6)
  # Observations are stored filtered: the filter has seen all 41 of them.
  assert agent.observation_filter.filter.count == 41
  loop.close()


def test_test_mode_filter_is_frozen():
  env = mujoco.MujocoEnvironment("mujoco/hopper", seed=0)
  agent = _continuous_agent(env, update_filter=False)
  agent.observation_filter.filter.load_state(
      {"count": 10, "mean": np.ones(11), "m2": np.full(11, 9.0 * 4)})
  space = action_spaces.for_agent(agent)
  raw = env.initial()
  filtered = space.observe(raw)
  assert agent.observation_filter.filter.count == 10
  np.testing.assert_allclose(filtered.observation.frame, (raw.observation.frame - 1.0) / 2.0,
                             rtol=1e-5)
  env.close()


def test_filter_statistics_round_trip_through_a_checkpoint(tmp_path):
  saved = action_spaces.ObservationFilter(4)
  saved(np.random.default_rng(0).normal(size=(50, 4)))
  tf.train.Checkpoint(obs_filter=saved).save(str(tmp_path / "ckpt"))
  restored = action_spaces.ObservationFilter(4)
  tf.train.Checkpoint(obs_filter=restored).restore(
      tf.train.latest_checkpoint(str(tmp_path))).assert_existing_objects_matched()
  for key, value in saved.filter.state().items():
    np.testing.assert_array_equal(restored.filter.state()[key], value)


# ---------------------------------------------------------------------------------------------
# The learner's Gaussian loss terms on a fixed batch, against numpy.
# ---------------------------------------------------------------------------------------------

T, B, A, O = 5, 3, 2, 4
GAUSSIAN = distributions.DiagGaussianFamily(A)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)
  env_outputs = EnvOutput(
      reward=f32(T + 1, B), done=rng.random((T + 1, B)) < 0.2,
      observation=Observation(frame=f32(T + 1, B, O), instruction=np.zeros((T + 1, B, 16),
                                                                           np.int32)),
      episode_return=f32(T + 1, B), episode_step=np.zeros((T + 1, B), np.int32),
      truncated=np.zeros((T + 1, B), bool))
  action = 2 * f32(T + 1, B, A)
  agent_params = np.concatenate([f32(T + 1, B, A), 0.3 * f32(T + 1, B, A)], -1)
  agent_outputs = AgentOutput(action=action, policy_params=agent_params, baseline=f32(T + 1, B))
  learner_params = np.concatenate([f32(T + 1, B, A), 0.3 * f32(T + 1, B, A)], -1)
  learner_outputs = networks.NetworkOutput(policy_params=learner_params, baseline=f32(T + 1, B))
  return env_outputs, agent_outputs, learner_outputs


def _mean(outputs):
  """The means [..., A] of an output record's Gaussian parameters [..., 2A]."""
  return outputs.policy_params[..., :A]


def _log_std(outputs):
  """The log standard deviations [..., A] of an output record's Gaussian parameters."""
  return outputs.policy_params[..., A:]


def _np_log_prob(mean, log_std, action):
  return np.sum(-0.5 * ((action - mean) / np.exp(log_std)) ** 2 - log_std - HALF_LOG_2PI, -1)


def _np_vtrace(log_rhos, discounts, rewards, values, bootstrap, lambda_=1.0):
  """V-trace (IMPALA section 4.1) with rho_bar = c_bar = rho_bar_pg = 1, by recursion."""
  rhos = np.minimum(1.0, np.exp(log_rhos))
  cs = lambda_ * rhos
  next_values = np.concatenate([values[1:], bootstrap[None]], 0)
  deltas = rhos * (rewards + discounts * next_values - values)
  vs_minus_v = np.zeros_like(values)
  acc = np.zeros_like(bootstrap)
  for t in reversed(range(len(values))):
    acc = deltas[t] + discounts[t] * cs[t] * acc
    vs_minus_v[t] = acc
  vs = vs_minus_v + values
  next_vs = np.concatenate([vs[1:], bootstrap[None]], 0)
  return vs, rhos * (rewards + discounts * next_vs - values)


def test_gaussian_impala_loss_terms_match_numpy():
  env_outputs, agent_outputs, learner_outputs = _batch()
  config = config_lib.LearnerConfig(reward_clipping="none", discounting=0.9)
  terms, _ = losses.impala_loss_terms(GAUSSIAN, learner_outputs, env_outputs,
                                          agent_outputs, config)
  actions = agent_outputs.action[1:]
  log_pi = _np_log_prob(_mean(learner_outputs)[:-1], _log_std(learner_outputs)[:-1],
                        actions)
  log_mu = _np_log_prob(_mean(agent_outputs)[1:], _log_std(agent_outputs)[1:],
                        actions)
  discounts = 0.9 * (1.0 - env_outputs.done[1:])
  values = learner_outputs.baseline[:-1]
  vs, pg_advantages = _np_vtrace(log_pi - log_mu, discounts, env_outputs.reward[1:], values,
                                 learner_outputs.baseline[-1])
  entropy = np.sum(_log_std(learner_outputs)[:-1] + 0.5 * math.log(2 * math.pi * math.e),
                   -1)
  np.testing.assert_allclose(terms["pg_loss"], -np.sum(log_pi * pg_advantages), rtol=1e-4)
  np.testing.assert_allclose(terms["baseline_loss"], 0.5 * np.sum((vs - values) ** 2),
                             rtol=1e-4)
  np.testing.assert_allclose(terms["entropy_loss"], -np.sum(entropy), rtol=1e-5)


def test_gaussian_impact_loss_terms_match_numpy():
  env_outputs, agent_outputs, learner_outputs = _batch(1)
  config = config_lib.LearnerConfig(reward_clipping="none", discounting=0.9)
  impact = config_lib.ImpactConfig(kl_cost=1.0)
  # On-policy (pi = pi_target = mu): r = 1, so the surrogate is -sum(A) with GAE(lambda)
  # advantages, and KL(pi_target || pi) = 0.
  # mu at step t+1 is the policy at observation t (learner.py's module docstring).
  shifted = lambda x: np.concatenate([x[:1], x[:-1]], 0)
  on_policy = agent_outputs._replace(policy_params=shifted(learner_outputs.policy_params))
  target = learner_outputs.policy_params
  terms, diagnostics = losses.impact_loss_terms(
      GAUSSIAN, learner_outputs, target, env_outputs, on_policy, config, impact)
  values = learner_outputs.baseline[:-1]
  discounts = 0.9 * (1.0 - env_outputs.done[1:])
  vs, _ = _np_vtrace(np.zeros((T, B)), discounts, env_outputs.reward[1:], values,
                     learner_outputs.baseline[-1], lambda_=impact.gae_lambda)
  np.testing.assert_allclose(terms["pg_loss"], -np.sum(vs - values), rtol=1e-4)
  np.testing.assert_allclose(terms["baseline_loss"], 0.5 * np.sum((vs - values) ** 2),
                             rtol=1e-4)
  np.testing.assert_allclose(terms["kl_loss"], 0.0, atol=1e-5)
  assert float(diagnostics["ppo_clipped_fraction"]) == 0.0
  # Another target: KL(pi_target || pi) in closed form.
  target_mean = target[..., :A] + 0.5
  target_log_std = target[..., A:] - 0.2
  terms, _ = losses.impact_loss_terms(
      GAUSSIAN, learner_outputs, np.concatenate([target_mean, target_log_std], -1), env_outputs,
      on_policy, config, impact)
  p_mean, p_log_std = target_mean[:-1], target_log_std[:-1]
  q_mean, q_log_std = _mean(learner_outputs)[:-1], _log_std(learner_outputs)[:-1]
  kl = np.sum(q_log_std - p_log_std + (np.exp(2 * p_log_std) + (p_mean - q_mean) ** 2)
              / (2 * np.exp(2 * q_log_std)) - 0.5)
  np.testing.assert_allclose(terms["kl_loss"], kl, rtol=1e-4)


def test_learner_update_on_a_gaussian_batch_trains_and_checks_shapes():
  env_outputs, agent_outputs, _ = _batch(2)
  agent = networks.Agent(networks.continuous_vector_config(observation_size=O, action_size=A))
  learner = learner_lib.Learner(agent, config_lib.LearnerConfig(reward_clipping="none"),
                                jit_compile=False)
  stats = learner.update((), env_outputs, agent_outputs)
  assert np.isfinite(stats["total_loss"].numpy()) and stats["num_env_frames"] == T * B * 4
  with pytest.raises(ValueError, match="agent_outputs.action has shape"):
    learner.update((), env_outputs, agent_outputs._replace(
        action=agent_outputs.action[..., :1]))


def test_gaussian_trust_region_leaves_rejected_steps_out_of_the_entropy_too():
  # LASER section 4.3: rejected transitions count "for all estimates", the entropy's
  # included; section 5.1: with entropy_mask, only the online trajectories' entropy counts.
  env_outputs, agent_outputs, learner_outputs = _batch(3)
  implied_kl = distributions.DiagGaussian(
      _mean(learner_outputs)[:-1], _log_std(learner_outputs)[:-1]).implied_policy_kl(
          distributions.DiagGaussian(_mean(agent_outputs)[1:],
                                     _log_std(agent_outputs)[1:])).numpy()
  threshold = float(np.median(implied_kl))
  kept = (implied_kl <= threshold).astype(np.float32)  # Ground truth: steps at or below.
  assert 0 < kept.sum() < kept.size
  online = np.array([1, 1, 0], np.float32)
  config = config_lib.LearnerConfig(reward_clipping="none", trust_region_threshold=threshold)
  entropy = np.sum(_log_std(learner_outputs)[:-1] + 0.5 * math.log(2 * math.pi * math.e),
                   -1)
  for entropy_mask, steps in ((None, kept), (online, kept * online)):
    terms, returns = losses.impala_loss_terms(
        GAUSSIAN, learner_outputs, env_outputs, agent_outputs, config, entropy_mask)
    np.testing.assert_array_equal(returns.trust_region_mask, kept)
    np.testing.assert_allclose(terms["entropy_loss"], -np.sum(entropy * steps), rtol=1e-5)
    assert float(terms["trust_region_rejected"]) == kept.size - kept.sum()
