"""Truncated and terminated episodes through the learner's own loss terms (losses.py).

A truncated episode's last observation x_t is a step of its own (truncated[t] True, done
False) and the next step is the environment's reset (its action ignored, reward 0, done True;
environments/truncation.py). The learner cuts transition t (rho_t = c_t = 0, its loss terms
weigh 0), so V-trace's target of x_{t-1} bootstraps from V(x_t): on-policy exactly
r_{t-1} + gamma V(x_t) (IMPALA section 4, Remark 1). A terminated episode's discount 0
bootstraps from nothing. The ground truth is numpy (truncation.vtrace_targets and the formulas
written out).
"""
import math

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent.distributions import CategoricalFamily
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import truncation
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

GAMMA = 0.9
NUM_ACTIONS = 3
FAMILY = CategoricalFamily(NUM_ACTIONS)
# Column 0: the episode is truncated at x_2 (its own step), step 3 is the reset.
# Column 1: the episode terminates after x_1 (x_2 starts the next one).
# Column 2: nothing ends.
DONE = np.array([[True, True, True],
                 [False, False, False],
                 [False, True, False],
                 [True, False, False],
                 [False, False, False]])
TRUNCATED = np.array([[False, False, False],
                      [False, False, False],
                      [True, False, False],
                      [False, False, False],
                      [False, False, False]])
REWARDS = np.array([[0.0, 0.0, 0.0],
                    [1.0, 1.0, 1.0],   # r_0
                    [2.0, 2.0, 2.0],   # r_1: the truncated / terminated episode's last reward
                    [0.0, 0.5, 0.5],   # r_2: the reset step's reward (column 0) is 0
                    [0.25, 0.25, 0.25]], np.float32)
VALUES = np.array([[0.3, 0.3, 0.3],
                   [0.6, 0.6, 0.6],
                   [5.0, 5.0, 5.0],   # V(x_2): what a truncated episode bootstraps from
                   [-0.2, -0.2, -0.2],
                   [0.4, 0.4, 0.4]], np.float32)  # the last row: V(x_T), the bootstrap


def _config(**extra):
  return config_lib.LearnerConfig(**{**dict(discounting=GAMMA,
                                         reward_clipping=settings.NO_CLIPPING,
                                         total_environment_frames=1000), **extra})


def _batch(seed=0, on_policy=True, truncated=TRUNCATED):
  """(learner_outputs, env_outputs, agent_outputs) of [T+1 = 5, B = 3] with VALUES as the
  learner's baseline; on_policy: mu(.|x_t) = pi(.|x_t), so every rho is 1."""
  rng = np.random.default_rng(seed)
  steps, batch = DONE.shape
  learner_logits = rng.normal(size=(steps, batch, NUM_ACTIONS)).astype(np.float32)
  behaviour = np.concatenate([learner_logits[:1], learner_logits[:-1]]) if on_policy else (
      rng.normal(size=(steps, batch, NUM_ACTIONS)).astype(np.float32))
  env_outputs = EnvOutput(
      reward=REWARDS, done=DONE,
      observation=Observation(frame=np.zeros((steps, batch, 1), np.float32),
                              instruction=np.zeros((steps, batch, 0), np.int32)),
      episode_return=np.zeros((steps, batch), np.float32),
      episode_step=np.zeros((steps, batch), np.int32), truncated=truncated)
  agent_outputs = AgentOutput(
      action=rng.integers(0, NUM_ACTIONS, (steps, batch)).astype(np.int32),
      policy_params=behaviour, baseline=np.zeros((steps, batch), np.float32))
  learner_outputs = networks.NetworkOutput(policy_params=tf.constant(learner_logits),
                                           baseline=tf.constant(VALUES))
  return learner_outputs, env_outputs, agent_outputs


def _log_softmax(logits):
  logits = logits - logits.max(-1, keepdims=True)
  return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def _numpy_rhos(learner_outputs, agent_outputs):
  """pi(a_t|x_t) / mu(a_t|x_t) [T, B] in numpy."""
  actions = agent_outputs.action[1:]
  pick = lambda logits: np.take_along_axis(_log_softmax(logits), actions[..., None], -1)[..., 0]
  return np.exp(pick(learner_outputs.policy_params.numpy()[:-1])
                - pick(agent_outputs.policy_params[1:]))


def _terms(config, batch, entropy_mask=None):
  learner_outputs, env_outputs, agent_outputs = batch
  return losses.impala_loss_terms(FAMILY, learner_outputs, env_outputs, agent_outputs,
                                      config, entropy_mask)


def test_a_truncated_step_bootstraps_and_a_terminated_one_does_not():
  """On-policy: v_1 = r_1 + gamma V(x_2) where x_2 is a truncation step, r_1 alone where the
  episode terminated; the cut step's own target is V(x_2); every target is numpy's."""
  terms, returns = _terms(_config(), _batch())
  vs = returns.vs.numpy()
  assert vs[1, 0] == pytest.approx(2.0 + GAMMA * 5.0)  # Bootstraps from V(x_2).
  assert vs[1, 1] == pytest.approx(2.0)                 # Terminated: nothing after it.
  assert vs[2, 0] == VALUES[2, 0]                       # The cut step: exactly V(x_2).
  assert vs[0, 0] == pytest.approx(1.0 + GAMMA * (2.0 + GAMMA * 5.0))
  for column in range(3):
    want = truncation.vtrace_targets(REWARDS[1:, column], VALUES[:-1, column], VALUES[-1, column],
                                     DONE[:, column], TRUNCATED[:, column], GAMMA)
    np.testing.assert_allclose(vs[:, column], want, rtol=1e-6, err_msg=f"column {column}")
  # The advantage of the action that led into the truncation step uses v_2 = V(x_2).
  advantages = returns.pg_advantages.numpy()
  assert advantages[1, 0] == pytest.approx(2.0 + GAMMA * 5.0 - 0.6)
  assert advantages[1, 1] == pytest.approx(2.0 - 0.6)
  assert "trust_region_rejected" not in terms


@pytest.mark.parametrize("correction", settings.OFF_POLICY_CORRECTIONS)
def test_off_policy_targets_and_losses_match_numpy(correction):
  """Off-policy (rho != 1): V-trace's targets are numpy's truncation rule (rho_2 = c_2 = 0 in
  column 0), and the three losses sum over every step but the cut one."""
  config = _config(off_policy_correction=correction)
  batch = _batch(seed=3, on_policy=False)
  terms, returns = _terms(config, batch)
  learner_outputs, env_outputs, agent_outputs = batch
  rhos = _numpy_rhos(learner_outputs, agent_outputs)
  values = VALUES[:-1]
  kept = ~TRUNCATED[:-1]
  if correction == settings.VTRACE:
    want_vs = np.stack([truncation.vtrace_targets(
        REWARDS[1:, b], values[:, b], VALUES[-1, b], DONE[:, b], TRUNCATED[:, b], GAMMA,
        rhos=rhos[:, b]) for b in range(3)], 1)
    np.testing.assert_allclose(returns.vs.numpy(), want_vs, rtol=1e-5, atol=1e-6)
    # The transition into the truncation step: V-trace's one-step target from V(x_2).
    rho = min(1.0, rhos[1, 0])
    assert returns.vs.numpy()[1, 0] == pytest.approx(0.6 + rho * (2.0 + GAMMA * 5.0 - 0.6),
                                                     rel=1e-5)
  else:  # Table 2's ablations: rho = c = 1 but on the cut step.
    want_vs = np.stack([truncation.vtrace_targets(
        REWARDS[1:, b], values[:, b], VALUES[-1, b], DONE[:, b], TRUNCATED[:, b], GAMMA,
        clip_rho=math.inf, clip_c=math.inf) for b in range(3)], 1)
    np.testing.assert_allclose(returns.vs.numpy(), want_vs, rtol=1e-5, atol=1e-6)
  logits = learner_outputs.policy_params.numpy()[:-1]
  log_pi = _log_softmax(logits)
  entropy = -(np.exp(log_pi) * log_pi).sum(-1)
  action_log_probs = returns.target_action_log_probs.numpy()
  np.testing.assert_allclose(float(terms["baseline_loss"]),
                             0.5 * ((returns.vs.numpy() - values) ** 2)[kept].sum(), rtol=1e-5)
  np.testing.assert_allclose(
      float(terms["pg_loss"]),
      -(action_log_probs * returns.pg_advantages.numpy())[kept].sum(), rtol=1e-5)
  np.testing.assert_allclose(float(terms["entropy_loss"]), -entropy[kept].sum(), rtol=1e-5)


def _ignored_action_changed(batch):
  """The batch with another action, behaviour policy and reward at the reset step of column
  0: what the action taken at the truncation step x_2 (ignored by the environment) led to."""
  learner_outputs, env_outputs, agent_outputs = batch
  action = agent_outputs.action.copy()
  action[3, 0] = (action[3, 0] + 1) % NUM_ACTIONS
  logits = agent_outputs.policy_params.copy()
  logits[3, 0] += np.array([3.0, -2.0, 0.5], np.float32)
  reward = env_outputs.reward.copy()
  reward[3, 0] = 7.0
  return (learner_outputs, env_outputs._replace(reward=reward),
          agent_outputs._replace(action=action, policy_params=logits))


# inf: no trust region (IMPALA); 0.05 rejects some steps; 1e9 keeps every step.
@pytest.mark.parametrize("trust_region_threshold", [math.inf, 0.05, 1e9])
def test_the_ignored_action_teaches_nothing(trust_region_threshold):
  """Every loss term and every target that counts are the same whatever action, behaviour
  policy and reward the reset step holds (LASER's trust region too: it cuts the traces where
  the truncation already did)."""
  config = _config(trust_region_threshold=trust_region_threshold)
  batch = _batch(seed=1, on_policy=False)
  terms, returns = _terms(config, batch)
  other_terms, other_returns = _terms(config, _ignored_action_changed(batch))
  for name in ("pg_loss", "baseline_loss", "entropy_loss"):
    np.testing.assert_allclose(float(other_terms[name]), float(terms[name]), rtol=1e-6,
                               err_msg=name)
  # Every target but the cut step's own (never used: its terms weigh 0).
  kept = ~TRUNCATED[:-1]
  np.testing.assert_allclose(other_returns.vs.numpy()[kept], returns.vs.numpy()[kept],
                             rtol=1e-6)
  # The same batch with the episode terminated instead (no truncation step): the ignored
  # action now counts (unless the trust region rejects it itself).
  untruncated = _batch(seed=1, on_policy=False, truncated=np.zeros_like(TRUNCATED))
  before, before_returns = _terms(config, untruncated)
  after, after_returns = _terms(config, _ignored_action_changed(untruncated))
  if before_returns.trust_region_mask.numpy()[2, 0] == after_returns.trust_region_mask.numpy()[
      2, 0] == 1.0:
    assert float(after["pg_loss"]) != pytest.approx(float(before["pg_loss"]))


def test_laser_online_entropy_mask_and_trust_region_leave_the_cut_step_out():
  """LASER (a trust region that keeps every step, entropy on online trajectories only): the
  cut step weighs 0 in every term, and the trust region's own count does not include it."""
  config = _config(trust_region_threshold=1e9)
  batch = _batch(seed=2, on_policy=False)
  entropy_mask = np.array([1.0, 0.0, 1.0], np.float32)
  terms, returns = _terms(config, batch, entropy_mask)
  assert float(terms["trust_region_rejected"]) == 0.0
  log_pi = _log_softmax(batch[0].policy_params.numpy()[:-1])
  entropy = -(np.exp(log_pi) * log_pi).sum(-1)
  steps = (~TRUNCATED[:-1]) & (entropy_mask > 0)[None]
  np.testing.assert_allclose(float(terms["entropy_loss"]), -entropy[steps].sum(), rtol=1e-5)
  plain, plain_returns = _terms(_config(), batch, entropy_mask)
  np.testing.assert_allclose(returns.vs.numpy(), plain_returns.vs.numpy(), rtol=1e-6)
  np.testing.assert_allclose(float(terms["pg_loss"]), float(plain["pg_loss"]), rtol=1e-6)


def test_impact_bootstraps_a_truncated_step_and_ignores_its_reset():
  """IMPACT (target network = learner, lambda 1, on-policy): the value target of x_1 is
  r_1 + gamma V(x_2) under truncation and r_1 under termination; the cut step's advantage is
  0 and its terms weigh 0 (the ignored action changes no term)."""
  impact_config = config_lib.ImpactConfig(gae_lambda=1.0)
  config = _config()
  learner_outputs, env_outputs, agent_outputs = _batch(seed=4)
  target = learner_outputs.policy_params
  terms, _ = losses.impact_loss_terms(FAMILY, learner_outputs, target, env_outputs,
                                          agent_outputs, config, impact_config)
  want_vs = np.stack([truncation.vtrace_targets(
      REWARDS[1:, b], VALUES[:-1, b], VALUES[-1, b], DONE[:, b], TRUNCATED[:, b], GAMMA)
      for b in range(3)], 1)
  assert want_vs[1, 0] == pytest.approx(2.0 + GAMMA * 5.0) and want_vs[1, 1] == 2.0
  kept = ~TRUNCATED[:-1]
  np.testing.assert_allclose(float(terms["baseline_loss"]),
                             0.5 * ((want_vs - VALUES[:-1]) ** 2)[kept].sum(), rtol=1e-5)
  changed = _ignored_action_changed((learner_outputs, env_outputs, agent_outputs))
  other, _ = losses.impact_loss_terms(FAMILY, changed[0], target, changed[1], changed[2],
                                          config, impact_config)
  for name in ("pg_loss", "baseline_loss", "entropy_loss", "kl_loss"):
    np.testing.assert_allclose(float(other[name]), float(terms[name]), rtol=1e-6,
                               err_msg=name)


def test_a_record_without_truncated_is_refused():
  """EnvOutput is a plain record: every field is given (an environment that cannot truncate
  says False), so no constructor guesses the field's form from `done`."""
  with pytest.raises(TypeError, match="truncated"):
    EnvOutput(0.0, True, None, 0.0, 0)
