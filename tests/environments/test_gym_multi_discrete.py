"""gymnasium's MultiDiscrete actions end to end (issue 44): the space's spec
(gym_spaces.Description), the distribution chosen from it (distributions.for_spec: one
categorical per choice), the network and its line in words (--show_settings), the actors'
sampling and the copy gymnasium receives, and a short run whose learner updates.

The environment is tests/gym_multi_discrete_envs.py's, named in gymnasium's "module:Id" form
so that an environment process registers it too by importing that TensorFlow-free module.
"""
import numpy as np
import pytest
from gymnasium import spaces

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import gym_spaces
from scalable_agent_tf2.environments import process
from tests.configuration.test_show_settings import show
from tests.gym_multi_discrete_envs import NVEC

ENV_ID = "tests.gym_multi_discrete_envs:TestChoices-v0"
LEVEL = "gym:" + ENV_ID
OBSERVATION_SIZE = sum(NVEC)  # The choices' targets, one-hot.


def _config(logdir, *extra):
  return config_lib.config_from_argv([
      f"--level_name={LEVEL}", f"--logdir={logdir}", "--batch_size=2", "--unroll_length=5",
      "--num_actors=2", "--envs_per_actor=2", "--log_secs=60",
      "--total_environment_frames=40", *extra])


def test_the_spec_names_the_choices_and_chooses_a_categorical_per_choice(tmp_path):
  description = gym_env.describe(ENV_ID, {})
  spec = description.spec()
  assert spec == base.MultiDiscreteEnvSpec(nvec=NVEC, frame_shape=(OBSERVATION_SIZE,))
  assert description.action_layout() == {"nvec": list(NVEC)}
  family = distributions.for_spec(spec)
  assert family == distributions.MultiCategoricalFamily(NVEC)
  config = _config(tmp_path)
  network = config.family.network_config(config, spec)
  assert network.action_distribution == family and network.num_actions is None
  assert network.torso == "mlp" and not network.use_lstm


def test_the_environment_gets_the_indices_shifted_by_the_spaces_start():
  env = gym_env.GymEnvironment(LEVEL, seed=3)
  try:
    env.initial()
    # The environment refuses an action outside its space: [2, 0] reaches it as [2, 1].
    env.step(np.array([2, 0], np.int32))
    with pytest.raises(ValueError, match=r"out of range at \[1\].*\[3, 2\]"):
      env.step(np.array([0, 2], np.int32))
    with pytest.raises(ValueError, match=r"2 integer indices"):
      env.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"2 integer indices"):
      env.step(1)
  finally:
    env.close()


def test_the_rewards_follow_the_targets_in_the_observation():
  env = gym_env.GymEnvironment(LEVEL, seed=4)
  try:
    observation = env.initial().observation.frame
    targets = [int(np.argmax(part)) for part in np.split(observation, np.cumsum(NVEC)[:-1])]
    assert env.step(np.array(targets, np.int32)).reward == len(NVEC)
  finally:
    env.close()


def test_actions_cross_an_environment_process_as_index_vectors():
  env = process.EnvironmentProcess(gym_env.GymEnvironment, kwargs=dict(level_name=LEVEL,
                                                                        seed=2))
  try:
    local = gym_env.GymEnvironment(LEVEL, seed=2)
    np.testing.assert_array_equal(env.initial().observation.frame,
                                  local.initial().observation.frame)
    action = np.array([1, 1], np.int32)
    assert env.step(action).reward == local.step(action).reward
    with pytest.raises(ValueError, match="out of range"):
      env.step(np.array([3, 0], np.int32))  # Checked before the round trip.
  finally:
    env.close()


def test_the_actors_sample_one_index_per_choice_and_store_them_as_int32():
  family = distributions.MultiCategoricalFamily(NVEC)
  space = action_spaces.ActionSpace(family)
  spec = base.MultiDiscreteEnvSpec(nvec=NVEC, frame_shape=(OBSERVATION_SIZE,))
  # Logits that make index 2 of the first choice and index 0 of the second near certain.
  params = np.array([-20.0, -20.0, 20.0, 20.0, -20.0], np.float32)
  rngs = [np.random.default_rng(seed) for seed in range(4)]
  actions = space.sample_group(np.stack([params] * 4), rngs)
  assert actions.dtype == np.int32 and actions.shape == (4, len(NVEC))
  np.testing.assert_array_equal(actions, [[2, 0]] * 4)
  np.testing.assert_array_equal(space.group_to_environment(actions, spec), actions)
  empty = space.empty_agent_output()
  assert empty.action.shape == (len(NVEC),) and empty.policy_params.shape == (sum(NVEC),)


def test_show_settings_names_the_action_kind(tmp_path):
  stdout, _ = show(f"--level_name={LEVEL}", f"--logdir={tmp_path}")
  assert f"MultiDiscrete actions {list(NVEC)}" in stdout, stdout
  config = _config(tmp_path)
  assert config.family.network_in_words(config) in stdout


@pytest.mark.parametrize("action_space, words", [
    (spaces.MultiBinary(3), "MultiBinary"),
    (spaces.MultiDiscrete([[2, 2], [3, 3]]), "MultiDiscrete")])
def test_other_action_spaces_are_refused_naming_multi_discrete_among_the_supported(
    action_space, words):
  with pytest.raises(gym_spaces.UnsupportedSpace,
                     match=rf"(?s)its action space {words}.*supported: Discrete\(n\), "
                           r"MultiDiscrete\(nvec\) of one dimension"):
    gym_spaces.Description("Mine-v0", spaces.Box(-1.0, 1.0, (2,), np.float32), action_space)


# Each learner over the multi-categorical policy: IMPALA's, IMPACT's (its target network's KL
# and ratios) and LASER's trust region (the implied policy's KL over the joint actions).
# IMPACT is the gymnasium default (families/gym.py); the others are asked for by name.
@pytest.mark.parametrize("flags", [("--algorithm=impala",), (),
                                   ("--algorithm=impala", "--replay_fraction=0.5",
                                    "--laser_replay", "--trust_region_threshold=0.5")],
                         ids=["impala", "impact", "laser_trust_region"])
def test_a_short_run_trains_learner_updates_on_multi_discrete_actions(tmp_path, flags):
  from scalable_agent_tf2.run import assembly  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import training  # pylint: disable=g-import-not-at-top
  config = _config(tmp_path, *flags)
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  assert agent.config.action_distribution == distributions.MultiCategoricalFamily(NVEC)
  before = agent.policy.w.numpy()
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_updates >= 2 and result.num_env_frames >= 40
  checkpointer = assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent))
  assert checkpointer.restore() == result.checkpoint
  after = agent.policy.w.numpy()
  assert after.shape == (before.shape[0], sum(NVEC))
  assert np.abs(after - before).max() > 0  # The learner moved every choice's head...
  for start, stop in zip(np.cumsum((0,) + NVEC)[:-1], np.cumsum(NVEC)):
    assert np.abs(after[:, start:stop] - before[:, start:stop]).max() > 0  # ...each one.
