"""The learner update: compiled vs. uncompiled, alignment, learning, frames, lr, clipping, input checks."""
import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import learner
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.structures import AgentOutput
from tests import random_batches
from tests.agent_steps import acting_step
from tests.agent_steps import sampled_actions

DMLAB_SMALL = networks.dmlab_config(networks.SHALLOW, num_actions=5, frame_shape=(20, 24, 3))
ATARI_SMALL = networks.atari_config(num_actions=4, torso=networks.DEEP,
                                    frame_shape=(12, 12, 4))


def random_batch(config, T, B, seed=0):
  return random_batches.random_learner_batch(config, T, B, seed)


def _make(config, jit_compile, seed=0, **hparams):
  agent = networks.Agent(config, seed=seed)
  return learner.Learner(agent, config_lib.LearnerConfig(**hparams), jit_compile=jit_compile)


# The DMLab network in the slow tier here: the default tier compares the Atari one (the deep
# torso), and compiles the DMLab one (the LSTM, the instruction encoder) in
# test_repeated_updates_on_a_fixed_batch_drive_the_loss_down[dmlab].
@pytest.mark.parametrize("config", [
    pytest.param(DMLAB_SMALL, id="dmlab", marks=pytest.mark.slow),
    pytest.param(ATARI_SMALL, id="atari")])
def test_compiled_update_equals_uncompiled(config):
  hparams = dict(learning_rate=0.01, total_environment_frames=10_000, max_grad_norm=40.0)
  compiled, plain = _make(config, True, **hparams), _make(config, False, **hparams)
  for seed in range(2):
    env_outputs, agent_outputs = random_batch(config, T=4, B=3, seed=seed)
    state = compiled.agent.initial_state(3)
    got = compiled.update(state, env_outputs, agent_outputs)
    want = plain.update(state, env_outputs, agent_outputs)
    for key in want:
      np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-4, atol=1e-4,
                                 err_msg=key)
  for a, b in zip(compiled.agent.trainable_variables, plain.agent.trainable_variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.name)


def _collect_on_policy(agent, T, B, seed):
  """A trajectory in the released code's layout, acted by the agent itself (the actors'
  step and sampling)."""
  config = agent.config
  rng = np.random.default_rng(seed)
  env_outputs, _ = random_batch(config, T, B, seed)
  state = agent.initial_state(B)
  first_state = state
  actions, logits, baselines = [np.zeros(B, np.int32)], [np.zeros((B, config.num_actions),
                                                                  np.float32)], [np.zeros(B)]
  for t in range(T):
    # The agent acts on observation t; its output is stored at index t+1, next to the
    # environment output that its action leads to.
    params, baseline, state = acting_step(
        agent, actions[-1], tf.nest.map_structure(lambda x, t=t: x[t], env_outputs), state)
    actions.append(sampled_actions(agent, params, seed=int(rng.integers(1 << 30))))
    logits.append(params.numpy())
    baselines.append(baseline.numpy())
  agent_outputs = AgentOutput(action=np.stack(actions), policy_params=np.stack(logits),
                              baseline=np.stack(baselines).astype(np.float32))
  return first_state, env_outputs, agent_outputs


def test_learner_aligns_actions_with_the_observations_they_were_taken_at():
  """On-policy data (acted by the same parameters) must give log(pi/mu) = 0 everywhere."""
  agent = networks.Agent(DMLAB_SMALL, seed=4)
  state, env_outputs, agent_outputs = _collect_on_policy(agent, T=5, B=2, seed=4)
  learner_outputs, _ = agent.unroll(agent_outputs.action, env_outputs, state)
  _, returns = losses.impala_loss_terms(agent.config.action_distribution, learner_outputs,
                                         env_outputs, agent_outputs, config_lib.LearnerConfig())
  np.testing.assert_allclose(returns.log_rhos.numpy(), 0.0, atol=1e-5)


# The Atari network in the slow tier here: the default tier's compiled-update comparison
# (test_compiled_update_equals_uncompiled[atari]) updates it.
@pytest.mark.parametrize("config,updates,min_drop", [
    pytest.param(DMLAB_SMALL, 40, 0.15, id="dmlab"),
    pytest.param(ATARI_SMALL, 30, 3.0, id="atari", marks=pytest.mark.slow)])
def test_repeated_updates_on_a_fixed_batch_drive_the_loss_down(config, updates, min_drop):
  update = _make(config, True, learning_rate=3e-4, total_environment_frames=10**9,
                 reward_clipping=losses.ABS_ONE)
  env_outputs, agent_outputs = random_batch(config, T=5, B=4, seed=1)
  state = update.agent.initial_state(4)
  stats = [update.update(state, env_outputs, agent_outputs) for _ in range(updates)]
  total = [float(s["total_loss"]) for s in stats]
  assert total[-1] < total[0] - min_drop, total
  assert float(stats[-1]["baseline_loss"]) < float(stats[0]["baseline_loss"])
  # One trace for all updates: same shapes must not recompile.
  assert update._compiled_update.experimental_get_tracing_count() == 1


def test_frames_and_linear_learning_rate_schedule():
  T, B, repeats, total = 4, 3, 4, 480
  # 0.001: at 0.1 the third update's gradient norm is infinite, and that update is skipped
  # (test_nonfinite.py).
  update = _make(ATARI_SMALL, False, learning_rate=0.001, total_environment_frames=total,
                 num_action_repeats=repeats)
  env_outputs, agent_outputs = random_batch(ATARI_SMALL, T, B)
  rates = []
  for step in range(1, 4):
    stats = update.update((), env_outputs, agent_outputs)
    rates.append(float(stats["learning_rate"]))
    assert int(stats["num_env_frames"]) == step * T * B * repeats  # 48 frames per update.
  # The rate of each update uses the frames before it: 0.001 * (1 - 48k / 480).
  np.testing.assert_allclose(rates, [0.001, 0.0009, 0.0008], rtol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_update_reports_the_parameters_norm_after_its_step(jit_compile):
  """The supervisor's divergence check (--max_parameter_norm) reads parameter_norm: it must
  be the norm of the parameters the step left, not of those before it."""
  update = _make(ATARI_SMALL, jit_compile, learning_rate=0.5, total_environment_frames=10**9)
  env_outputs, agent_outputs = random_batch(ATARI_SMALL, T=3, B=2, seed=3)
  before = np.sqrt(sum(np.sum(np.square(v.numpy()))
                       for v in update.agent.trainable_variables))
  stats = update.update((), env_outputs, agent_outputs)
  after = np.sqrt(sum(np.sum(np.square(v.numpy().astype(np.float64)))
                      for v in update.agent.trainable_variables))
  assert abs(after - before) > 1e-3 * after  # The step moved the norm: the test can tell.
  np.testing.assert_allclose(float(stats["parameter_norm"]), after, rtol=1e-5)


def test_gradient_norm_clipping_is_applied():
  max_norm = 1e-3
  update = _make(ATARI_SMALL, False, learning_rate=0.1, max_grad_norm=max_norm,
                 total_environment_frames=10**9)
  env_outputs, agent_outputs = random_batch(ATARI_SMALL, T=3, B=2, seed=2)
  before = [v.numpy() for v in update.agent.trainable_variables]

  # The unclipped gradients, computed with the learner's own loss.
  with tf.GradientTape() as tape:
    outputs, _ = update.agent.unroll(agent_outputs.action, env_outputs, ())
    terms, _ = losses.impala_loss_terms(update.agent.config.action_distribution, outputs,
                                            env_outputs, agent_outputs, update.config)
    total = (terms["pg_loss"] + update.config.baseline_cost * terms["baseline_loss"]
             + update.config.entropy_cost * terms["entropy_loss"])
  gradients = tape.gradient(total, update.agent.trainable_variables)
  norm = float(tf.linalg.global_norm(gradients))
  assert norm > 100 * max_norm

  stats = update.update((), env_outputs, agent_outputs)
  np.testing.assert_allclose(float(stats["grad_norm"]), norm, rtol=1e-4)
  epsilon = update.config.epsilon
  for old, var, grad in zip(before, update.agent.trainable_variables, gradients):
    clipped = grad.numpy() * max_norm / norm
    ms = 0.99 * 1.0 + 0.01 * clipped ** 2  # TF1 RMSProp's first step, mean square from 1.
    np.testing.assert_allclose(var.numpy(), old - 0.1 * clipped / np.sqrt(ms + epsilon),
                               rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("mutate,message", [
    (lambda e, a: (e._replace(reward=e.reward[:1]), a), "T >= 1"),
    (lambda e, a: (e._replace(observation=e.observation._replace(
        frame=e.observation.frame[..., :2])), a), "env_outputs.observation.frame"),
    (lambda e, a: (e._replace(observation=e.observation._replace(
        frame=e.observation.frame.astype(np.float32))), a), "uint8"),
    (lambda e, a: (e, a._replace(action=a.action[:, :2])), "agent_outputs.action"),
    (lambda e, a: (e, a._replace(policy_params=a.policy_params[..., :3])),
     "agent_outputs.policy_params"),
    (lambda e, a: (e._replace(done=e.done[:-1]), a), "env_outputs.done"),
    (lambda e, a: (e._replace(observation=e.observation._replace(
        instruction=e.observation.instruction[..., :3])), a), "instruction"),
])
def test_malformed_batches_are_clear_errors(mutate, message):
  update = _make(DMLAB_SMALL, False)
  env_outputs, agent_outputs = mutate(*random_batch(DMLAB_SMALL, T=3, B=4))
  with pytest.raises(ValueError, match=message):
    update.update(update.agent.initial_state(4), env_outputs, agent_outputs)


def test_wrong_state_batch_is_a_clear_error():
  update = _make(DMLAB_SMALL, False)
  env_outputs, agent_outputs = random_batch(DMLAB_SMALL, T=3, B=4)
  with pytest.raises(ValueError, match="agent_state"):
    update.update(update.agent.initial_state(2), env_outputs, agent_outputs)


def test_bad_hyperparameters_are_rejected():
  with pytest.raises(ValueError, match="reward_clipping"):
    config_lib.LearnerConfig(reward_clipping="clip")
  with pytest.raises(ValueError, match="off_policy_correction"):
    config_lib.LearnerConfig(off_policy_correction="retrace")
  with pytest.raises(ValueError, match="total_environment_frames"):
    config_lib.LearnerConfig(total_environment_frames=0)
  with pytest.raises(ValueError, match="learning_rate"):
    config_lib.LearnerConfig(learning_rate=-1.0)


def test_presets_follow_the_paper():
  atari = config_lib.config_from_argv(["--level_name=atari/pong"]).learner_config()  # Table G.1.
  assert (atari.entropy_cost, atari.learning_rate, atari.epsilon, atari.max_grad_norm,
          atari.reward_clipping, atari.total_environment_frames) == (
              0.01, 0.0006, 0.01, 40.0, losses.ABS_ONE, 200_000_000)
  dmlab30 = config_lib.LearnerConfig()  # DMLab-30's presets: Table D.3, Figure D.1.
  assert dmlab30.reward_clipping == losses.OPTIMISTIC_ASYMMETRIC
  assert (dmlab30.discounting, dmlab30.baseline_cost, dmlab30.momentum) == (0.99, 0.5, 0.0)
  assert config_lib.config_from_argv(
      ["--level_name=seekavoid_arena_01"]).learner_config().reward_clipping == losses.ABS_ONE
