"""The network follows the environment's spec, for any combination (issue 31): vectors take
the MLP torso, Discrete observations the one-hot, frames the paper's torsos (an image with a
text mission also the instruction encoder); discrete actions the categorical head, Box
actions the diagonal Gaussian (on vectors: the IMPACT paper's MLPs; on frames: a frame torso
with a Gaussian head), all one networks.Agent composed by networks.network_config_for_spec.
Vector observations pass through the run's observation filter whatever the actions."""
import dataclasses
import re
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments.families import gym as gym_family
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from tests.agent_steps import acting_step
from tests.agent_steps import sampled_actions

T, B = 4, 3
HPARAMS = dict(learning_rate=0.01, total_environment_frames=100_000, max_grad_norm=40.0)


def _env_outputs(frames, rng, instructions=None):
  leading = frames.shape[:2]
  if instructions is None:
    instructions = np.zeros(leading + (0,), np.int32)
  return EnvOutput(
      reward=rng.normal(size=leading).astype(np.float32), done=rng.random(leading) < 0.2,
      observation=Observation(frame=frames, instruction=instructions),
      episode_return=np.zeros(leading, np.float32), episode_step=np.zeros(leading, np.int32),
      truncated=np.zeros(leading, bool))


def _discrete_batch(config, frames, rng, instructions=None):
  leading = frames.shape[:2]
  agent_outputs = AgentOutput(
      action=rng.integers(0, config.num_actions, leading).astype(np.int32),
      policy_params=rng.normal(size=leading + (config.num_actions,)).astype(np.float32),
      baseline=rng.normal(size=leading).astype(np.float32))
  return _env_outputs(frames, rng, instructions), agent_outputs


def _updates_every_variable(agent, env_outputs, agent_outputs):
  """One learner update on the batch changes every trainable variable; finite losses."""
  learner = learner_lib.Learner(agent, config_lib.LearnerConfig(**HPARAMS), jit_compile=False)
  before = [v.numpy().copy() for v in agent.trainable_variables]
  stats = learner.update(agent.initial_state(B), env_outputs, agent_outputs)
  assert all(np.isfinite(float(value)) for value in stats.values())
  for variable, old in zip(agent.trainable_variables, before):
    assert not np.array_equal(variable.numpy(), old), variable.name


def test_vectors_with_discrete_actions_take_the_mlp_torso_and_update():
  config = networks.vector_config(num_actions=2, observation_size=4, hidden_sizes=(16, 16))
  assert (config.torso, config.frame_dtype, config.use_lstm) == (torsos.MLP, "float32", False)
  agent = networks.Agent(config, seed=1)
  assert isinstance(agent.torso, torsos.MlpTorso)
  assert [v.shape.as_list() for v in agent.policy.trainable_variables] == [[2], [16 + 1 + 2, 2]]
  rng = np.random.default_rng(0)
  frames = rng.normal(size=(T + 1, B, 4)).astype(np.float32)
  env_outputs, agent_outputs = _discrete_batch(config, frames, rng)
  output, _ = agent.unroll(agent_outputs.action, env_outputs, agent.initial_state(B))
  assert output.policy_params.shape == (T + 1, B, 2) and output.baseline.shape == (T + 1, B)
  _updates_every_variable(agent, env_outputs, agent_outputs)


def test_vector_agent_with_an_lstm_core():
  config = networks.vector_config(num_actions=3, observation_size=5, use_lstm=True,
                                  hidden_sizes=(8,))
  agent = networks.Agent(config, seed=0)
  env_output = tf.nest.map_structure(lambda t: t[0], _env_outputs(
      np.ones((1, 2, 5), np.float32), np.random.default_rng(0)))
  params, _, state = acting_step(agent, np.zeros(2, np.int32), env_output,
                                 agent.initial_state(2))
  assert params.shape == (2, 3) and state.h.shape == (2, 256)


def test_discrete_observations_take_the_one_hot_torso_and_update():
  config = networks.index_config(num_actions=4, num_values=16)
  assert (config.frame_shape, config.frame_dtype) == ((), "int32")
  agent = networks.Agent(config, seed=1)
  assert isinstance(agent.torso, torsos.OneHotTorso)
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 16, (T + 1, B)).astype(np.int32)
  env_outputs, agent_outputs = _discrete_batch(config, frames, rng)
  _updates_every_variable(agent, env_outputs, agent_outputs)
  # Two observations differ only in their index: the policy tells them apart.
  one = tf.nest.map_structure(lambda t: t[:1, :1], env_outputs)
  logits = [agent.unroll(np.zeros((1, 1), np.int32),
                         one._replace(observation=one.observation._replace(
                             frame=np.full((1, 1), index, np.int32))),
                         ())[0].policy_params.numpy() for index in (0, 5)]
  assert not np.allclose(*logits)


def test_box_actions_on_frames_take_the_frame_torso_with_a_gaussian_head():
  config = networks.continuous_frame_config(frame_shape=(24, 24, 3), action_size=3)
  agent = networks.Agent(config, seed=2)
  assert isinstance(agent.torso, torsos.ShallowTorso) and agent.initial_state(B) == ()
  assert not action_spaces.takes_observation_filter(config)
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 256, (T + 1, B, 24, 24, 3)).astype(np.uint8)
  agent_outputs = AgentOutput(
      action=rng.normal(size=(T + 1, B, 3)).astype(np.float32),
      policy_params=np.concatenate([rng.normal(size=(T + 1, B, 3)),
                                    0.3 * rng.normal(size=(T + 1, B, 3)) - 0.5],
                                   axis=-1).astype(np.float32),
      baseline=rng.normal(size=(T + 1, B)).astype(np.float32))
  env_outputs = _env_outputs(frames, rng)
  params, baseline, _ = acting_step(agent, np.zeros((B, 3), np.float32),
                                    tf.nest.map_structure(lambda t: t[0], env_outputs), ())
  assert sampled_actions(agent, params).shape == (B, 3) and baseline.shape == (B,)
  _updates_every_variable(agent, env_outputs, agent_outputs)
  # IMPACT's learner builds its target network from the agent's config.
  impact.ImpactLearner(agent, config_lib.LearnerConfig(**HPARAMS),
                            config_lib.ImpactConfig(target_update_period=2), jit_compile=False)


@pytest.mark.parametrize("torso", [torsos.MLP, networks.DEEP])
def test_an_image_with_a_text_mission_takes_the_frame_torso_and_the_instruction_encoder(torso):
  # MiniGrid's 7x7x3 views: too small for the shallow torso; the family's preset flattens them
  # into the MLP (a grid's encoding, not pixels); --torso=deep (SAME layers) takes them too.
  with pytest.raises(ValueError, match="--torso=deep"):
    networks.NetworkConfig(num_actions=7, frame_shape=(7, 7, 3), torso=networks.SHALLOW)
  assert gym_family.frame_torso((7, 7, 3)) == torsos.MLP
  assert gym_family.frame_torso((10, 10, 4)) == torsos.MLP  # MinAtar's planes.
  assert gym_family.frame_torso((96, 96, 3)) == networks.SHALLOW
  config = networks.NetworkConfig(num_actions=7, frame_shape=(7, 7, 3), torso=torso,
                                  use_instruction=True, frame_max=10.0)
  agent = networks.Agent(config, seed=0)
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 11, (T + 1, B, 7, 7, 3)).astype(np.uint8)
  missions = language.hash_instructions(
      rng.choice(["go to the red ball", "get to the green goal square"], size=(T + 1, B)))
  env_outputs, agent_outputs = _discrete_batch(config, frames, rng, missions)
  _updates_every_variable(agent, env_outputs, agent_outputs)


def test_the_flat_mlp_torso_reads_every_cell_of_the_frame():
  """A frame through the MLP torso: [N, H, W, C] flattened to H * W * C inputs, so a change
  in any one cell changes the features (nothing cropped or pooled away)."""
  config = networks.NetworkConfig(num_actions=3, frame_shape=(10, 10, 4), torso=torsos.MLP,
                                  use_lstm=False, use_instruction=False, frame_max=1.0)
  agent = networks.Agent(config, seed=0)
  assert agent.torso.layers[0].w.shape[0] == 10 * 10 * 4
  frames = np.zeros((1, 1, 10, 10, 4), np.uint8)
  env_outputs, _ = _discrete_batch(config, frames, np.random.default_rng(1))
  policy = lambda outputs: agent.unroll(tf.zeros([1, 1], tf.int32), outputs, ())[0].policy_params
  base_params = policy(env_outputs)
  np.testing.assert_array_equal(policy(env_outputs), base_params)
  for cell in [(0, 0, 0), (9, 9, 3), (4, 7, 1)]:
    changed = frames.copy()
    changed[(0, 0) + cell] = 1
    observation = env_outputs.observation._replace(frame=changed)
    params = policy(env_outputs._replace(observation=observation))
    assert not np.allclose(params, base_params), cell


@pytest.mark.parametrize("kwargs, message", [
    (dict(frame_shape=(4,), torso="resnet"), "Unknown torso 'resnet'.*observation_kind"),
    (dict(frame_shape=(4,), torso=networks.DEEP), "frame_shape must be \\(height"),
    (dict(frame_shape=(4,), torso=networks.DEEP, observation_kind=torsos.VECTOR,
          use_instruction=False), "take the 'mlp' torso"),
    (dict(frame_shape=(4,), torso=torsos.MLP, observation_kind=torsos.VECTOR),
     "instruction goes with image frames"),
    (dict(frame_shape=(4,), torso=torsos.ONE_HOT, observation_kind=torsos.INDEX,
          use_instruction=False, num_observation_values=4), "frame_shape \\(\\)"),
    (dict(frame_shape=(), torso=torsos.ONE_HOT, observation_kind="tokens",
          use_instruction=False), "Unknown observation_kind")])
def test_configs_that_do_not_fit_their_observation_are_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    networks.NetworkConfig(num_actions=2, **kwargs)


def _gym_config(tmp_path, level_name, *extra):
  return config_lib.config_from_argv([f"--level_name={level_name}", f"--logdir={tmp_path}",
                                      *extra])


@pytest.mark.parametrize("level_name, family_type, kind, filtered", [
    ("gym:CartPole-v1", distributions.CategoricalFamily, torsos.VECTOR, True),
    ("gym:FrozenLake-v1", distributions.CategoricalFamily, torsos.INDEX, False),
    ("gym:Pendulum-v1", distributions.DiagGaussianFamily, torsos.VECTOR, True),
    ("gym:CarRacing-v3", distributions.DiagGaussianFamily, torsos.FRAME, False)])
def test_the_gym_family_builds_the_network_of_each_spec(tmp_path, level_name, family_type, kind,
                                                        filtered):
  config = _gym_config(tmp_path, level_name)
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  try:
    assert type(agent.config.action_distribution) is family_type
    assert agent.config.observation_kind == kind
    # The family's choice is the composition network_config_for_spec makes from the spec.
    continuous = family_type is distributions.DiagGaussianFamily
    assert agent.config == networks.network_config_for_spec(
        env.spec, kind, torso=config.torso if kind == torsos.FRAME else None,
        use_lstm=kind == torsos.FRAME and not continuous,
        num_observation_values=16 if kind == torsos.INDEX else None,
        state_dependent_log_std=False,  # Box actions' preset: one free log std (--log_std).
        # Discrete actions on feed-forward networks: a value torso of their own.
        separate_value_torso=not continuous)
    # Every feed-forward network here has one (the IMPACT paper's Box MLPs; discrete actions
    # since issue 42's Unlock study); Box actions on frames share the torso (CarRacing).
    assert agent.config.separate_value_torso == (kind != torsos.FRAME or not continuous)
    assert hasattr(agent, "value_torso") == agent.config.separate_value_torso
    assert (agent.observation_filter is not None) == filtered
    assert (action_spaces.for_agent(agent).observation_filter is not None) == filtered
    if kind == torsos.INDEX:
      assert agent.config.num_observation_values == 16  # FrozenLake's Discrete(16).
  finally:
    env.close()


def test_the_gym_family_refuses_a_frame_torso_for_vectors(tmp_path):
  config = _gym_config(tmp_path, "gym:CartPole-v1", "--torso=deep")
  with pytest.raises(ValueError, match="--torso=deep is for image frames"):
    config.family.network_config(config, gym_family.FAMILY.describe("gym:CartPole-v1").spec())


def test_the_gym_family_maps_an_image_with_a_mission_to_the_instruction_path(monkeypatch,
                                                                            tmp_path):
  # What gym_spaces.Description will say of a Dict(image, mission) observation (MiniGrid).
  from scalable_agent_tf2.environments import base
  # The torso a resolved MiniGrid config holds: the family's preset for 7x7 frames.
  config = dataclasses.replace(_gym_config(tmp_path, "gym:CartPole-v1"),
                               torso=gym_family.frame_torso((7, 7, 3)))
  description = types.SimpleNamespace(observation_kind="frame", observation_shape=(7, 7, 3),
                                      has_instruction=True, frame_max=10.0)
  monkeypatch.setattr(gym_family.GymFamily, "describe", lambda *args, **kwargs: description)
  network = gym_family.FAMILY.network_config(config, base.EnvSpec(7, (7, 7, 3)))
  assert (network.torso, network.use_instruction, network.use_lstm,
          network.separate_value_torso) == (torsos.MLP, True, False, True)
  assert network.frame_max == 10.0  # The grid encoding's largest index, not 255.


def test_discrete_actions_filter_vector_observations():
  obs_filter = action_spaces.ObservationFilter(2)
  space = action_spaces.for_network(networks.vector_config(2, 2), obs_filter)
  assert space.distribution.discrete and space.observation_filter is obs_filter
  rng = np.random.default_rng(0)
  for _ in range(5):
    raw = tf.nest.map_structure(lambda t: t[0, 0], _env_outputs(
        (3.0 + rng.normal(size=(1, 1, 2))).astype(np.float32), rng))
    filtered = space.observe(raw)
  assert obs_filter.filter.count == 5
  assert np.all(np.abs(filtered.observation.frame) < 3)  # Centred on the running mean.


def test_minigrid_ids_import_their_package_or_say_how_to_get_it():
  try:
    import minigrid  # noqa: F401 (whether it is installed is the question)
  except ImportError:
    with pytest.raises(ValueError, match=re.escape(gym_env.MINIGRID_INSTALL)):
      gym_env.check_registered("MiniGrid-Empty-5x5-v0")
  else:  # Installed: the plain id is registered by importing the package.
    gym_env.check_registered("BabyAI-GoToRedBall-v0")


def test_a_new_action_distribution_needs_only_its_family():
  # MultiDiscrete actions on a vector: the head (sum(nvec) logits), the previous action's
  # one-hots, the sampling and the learner all follow distributions.MultiCategoricalFamily.
  family = distributions.MultiCategoricalFamily((3, 2))
  config = networks.NetworkConfig(
      num_actions=None, frame_shape=(5,), torso=torsos.MLP, use_lstm=False,
      use_instruction=False, observation_kind=torsos.VECTOR, action_distribution=family)
  agent = networks.Agent(config, seed=1)
  # The MLP's 256 features, the clipped reward and the previous action's 3 + 2 one-hots.
  assert agent.policy.w.shape == (256 + 1 + 5, 5)
  rng = np.random.default_rng(0)
  env_outputs = _env_outputs(rng.normal(size=(T + 1, B, 5)).astype(np.float32), rng)
  actions = np.stack([rng.integers(0, n, (T + 1, B)) for n in (3, 2)], -1).astype(np.int32)
  agent_outputs = AgentOutput(
      action=actions, policy_params=rng.normal(size=(T + 1, B, 5)).astype(np.float32),
      baseline=rng.normal(size=(T + 1, B)).astype(np.float32))
  params, _, _ = acting_step(agent, actions[0],
                             tf.nest.map_structure(lambda t: t[0], env_outputs), ())
  assert sampled_actions(agent, params).shape == (B, 2) and params.shape == (B, 5)
  space = action_spaces.for_agent(agent)
  assert space.sample(params.numpy()[0], rng).shape == (2,)
  _updates_every_variable(agent, env_outputs, agent_outputs)


def test_the_observation_filter_is_part_of_the_agent_and_its_checkpoints(tmp_path):
  """The run's filter is given when the agent is built (assembly.build_agent), not attached
  later; a checkpoint of the agent carries its statistics, which an agent built with a fresh
  filter restores."""
  config = networks.vector_config(2, 2)
  trained = networks.Agent(config, observation_filter=action_spaces.ObservationFilter(2))
  trained.observation_filter(np.array([[1.0, 2.0], [3.0, 6.0]]))
  path = tf.train.Checkpoint(agent=trained).save(str(tmp_path / "ckpt"))
  fresh = networks.Agent(config, observation_filter=action_spaces.ObservationFilter(2))
  tf.train.Checkpoint(agent=fresh).restore(path).assert_existing_objects_matched()
  assert fresh.observation_filter.serialize() == trained.observation_filter.serialize()
  assert action_spaces.for_agent(fresh).observation_filter is fresh.observation_filter
  assert networks.Agent(config).observation_filter is None
