"""A gymnasium environment whose observation is a Dict of an image and a text mission
(MiniGrid and BabyAI's Dict(image, direction, mission)) trains through the frame torso and
the paper's instruction encoder (Figure 3, the DeepMind Lab language path), issue 31 point 2.

The environments are tests/gym_mission_envs.py's (no minigrid needed), named in gymnasium's
"module:Id" form so that an environment process (build_agent's first environment) registers
them too by importing that TensorFlow-free module. The last test runs a real MiniGrid level
and is skipped, with the reason, where the benchmark-only minigrid package is not
installed."""
import numpy as np
import pytest

from scalable_agent_tf2 import structures
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import gym_spaces
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import training
from tests.gym_mission_envs import IMAGE_SHAPE
from tests.gym_mission_envs import MISSIONS

HERE = "tests.gym_mission_envs:"
LEVEL = f"gym:{HERE}TestMissionRoom-v0"


def _config(logdir, *extra):
  return config_lib.config_from_argv([
      f"--level_name={LEVEL}", f"--logdir={logdir}", "--batch_size=2", "--unroll_length=8",
      "--num_actors=2", "--envs_per_actor=2", "--log_secs=60",
      "--total_environment_frames=64", *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """(config, agent) of LEVEL as a run builds them (the first environment in its process)."""
  config = _config(tmp_path_factory.mktemp("dict_observations"))
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  return config, agent


def test_a_dict_of_image_and_mission_builds_the_instruction_network(built):
  description = gym_env.describe(HERE + "TestMissionRoom-v0", {})
  assert (description.image_key, description.text_key) == ("image", "mission")
  assert description.ignored_keys == ("direction",)
  assert description.has_instruction and description.observation_shape == IMAGE_SHAPE
  config, agent = built
  assert agent.config.use_instruction and agent.config.frame_shape == IMAGE_SHAPE
  assert hasattr(agent, "instruction_encoder")
  # Its image is pixels (no MiniGrid grid encoding): divided by 255 as every frame.
  assert description.frame_max == agent.config.frame_max == 255.0
  # MiniGrid's 7x7 view is smaller than the shallow torso's VALID convolutions take: a grid's
  # encoding, flattened into the MLP, feed-forward (families/gym.py frame_torso, uses_lstm).
  assert agent.config.torso == "mlp" and not agent.config.use_lstm
  # The grid's encoding is computed, not rendered: the environments run in groups here.
  assert config.family.runs_as(config) == family_base.IN_PROCESS_GROUP


def test_the_mission_reaches_the_instruction_tensor(built):
  _, agent = built
  group = actor.EnvironmentGroup([gym_env.GymEnvironment(LEVEL, seed=s) for s in range(8)],
                                 LEVEL)
  try:
    raw = group.initial()
    outputs = policies.encode_group_instructions(raw)
  finally:
    group.close()
  missions = raw.observation.instruction
  assert set(missions) == set(MISSIONS), missions  # Both missions among 8 seeds.
  words = outputs.observation.instruction
  np.testing.assert_array_equal(words, language.hash_instructions(list(missions)))
  assert (words[:, :len(MISSIONS[0].split())] > 0).all()
  # The acting step reads it: the same frames under the other mission give other logits.
  policy = policies.acting_step(agent)
  obs = outputs.observation
  def logits(instruction):
    return policy(np.zeros(8, np.int32), outputs.reward, outputs.done, obs.frame, instruction,
                  agent.initial_state(8))[0].numpy()
  other = language.hash_instructions([MISSIONS[1 - MISSIONS.index(m)] for m in missions])
  difference = np.abs(logits(words) - logits(other)).max(axis=1)
  assert (difference > 1e-6).all(), difference


def test_a_short_training_updates_the_embeddings_of_the_missions_words(tmp_path):
  config = _config(tmp_path)
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  before = agent.instruction_encoder.embeddings.numpy()
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_updates >= 2 and result.num_env_frames >= 64
  checkpointer = assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent))
  assert checkpointer.restore() == result.checkpoint
  after = agent.instruction_encoder.embeddings.numpy()
  changed = set(np.flatnonzero(np.abs(after - before).max(axis=1) > 0))
  # Row b is the embedding of hash bucket b (word id b + 1, language.hash_instructions).
  mission_rows = set(int(i) - 1 for i in np.unique(language.hash_instructions(list(MISSIONS)))
                     if i > 0)
  assert changed == mission_rows, (sorted(changed), sorted(mission_rows))


@pytest.mark.parametrize("env_id, problem", [
    ("TestTwoImages-v0", r"it has 2 image entries \(Box \(H, W, C\) uint8\): 'left', 'right'"),
    ("TestNoImage-v0", r"it has 0 image entries \(Box \(H, W, C\) uint8\)"),
    ("TestTwoTexts-v0", r"it has 2 text entries: 'hint', 'mission'")])
def test_an_unsupported_dict_is_refused_naming_what_is_supported(tmp_path, env_id, problem):
  with pytest.raises(gym_spaces.UnsupportedSpace,
                     match=f"gym:{HERE}{env_id}: its observation space Dict\\(.*{problem}; "
                           r"supported: .*Dict of one image .* and at most one text"):
    config_lib.resolve(config_lib.ExperimentConfig(level_name=f"gym:{HERE}{env_id}",
                                                   logdir=str(tmp_path)))


def test_a_mission_that_is_not_a_text_mid_episode_names_the_field():
  env = gym_env.GymEnvironment(f"gym:{HERE}TestMissionRoomBadMission-v0", seed=0)
  try:
    env.initial()
    env.step(0)
    with pytest.raises(base.EnvironmentOutputError,
                       match="TestMissionRoomBadMission-v0: step 1 of episode 2: the "
                             "environment returned int for the observation's 'mission'"):
      env.step(0)
  finally:
    env.close()


def test_a_minigrid_level_passes_its_mission_as_the_instruction():
  pytest.importorskip(
      "minigrid", reason="minigrid is a benchmark-only package, not in requirements.txt: "
      "pip install --no-deps -r benchmarks/requirements-minigrid.txt")
  level = "gym:MiniGrid-Fetch-5x5-N2-v0"
  env = gym_env.GymEnvironment(level, seed=3)
  try:
    description = gym_env.describe("MiniGrid-Fetch-5x5-N2-v0", {})
    assert description.has_instruction and description.ignored_keys == ("direction",)
    assert env.spec.frame_shape == (7, 7, 3) and env.spec.num_actions == 7
    first = env.initial()
    assert first.observation.instruction == env._env.unwrapped.mission  # pylint: disable=protected-access
    assert first.observation.frame.dtype == np.uint8
  finally:
    env.close()


def test_a_minigrid_image_is_scaled_by_its_largest_index_not_by_255(tmp_path):
  """MiniGrid's image holds object, colour and state indices (at most 10), not pixels: the
  network divides it by 10 so that it spans [0, 1] as pixel frames do; MiniGrid's own
  RGBImgPartialObsWrapper gives pixels again, divided by 255."""
  pytest.importorskip(
      "minigrid", reason="minigrid is a benchmark-only package, not in requirements.txt: "
      "pip install --no-deps -r benchmarks/requirements-minigrid.txt")
  import gymnasium  # pylint: disable=g-import-not-at-top
  from minigrid import wrappers  # pylint: disable=g-import-not-at-top
  level = "gym:MiniGrid-Fetch-5x5-N2-v0"
  config = config_lib.config_from_argv([f"--level_name={level}", f"--logdir={tmp_path}"])
  network_config = config.family.network_config(config, 
      gym_env.describe("MiniGrid-Fetch-5x5-N2-v0", {}).spec())
  assert network_config.frame_max == 10.0
  env = gym_env.GymEnvironment(level, seed=1)
  try:
    frame = env.initial().observation.frame
  finally:
    env.close()
  assert 0 < frame.max() <= 10
  scaled = torsos.to_unit_float(frame[np.newaxis], network_config.frame_max).numpy()
  assert scaled.max() <= 1.0 and scaled.max() >= 0.2
  rendered = wrappers.RGBImgPartialObsWrapper(gymnasium.make("MiniGrid-Fetch-5x5-N2-v0"))
  try:
    image_shape = rendered.observation_space["image"].shape
    assert gym_spaces.frame_max(rendered.unwrapped, image_shape) == 255.0
  finally:
    rendered.close()


@pytest.mark.parametrize("chunk_frames", [0, 3])
def test_the_torso_takes_frames_divided_by_frame_max(chunk_frames):
  """Agent.unroll's torso input is frame / frame_max, whole or chunked (chunked_torso)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = networks.NetworkConfig(num_actions=3, frame_shape=(7, 7, 3), torso="deep",
                                  use_instruction=False, frame_max=10.0,
                                  torso_chunk_frames=chunk_frames)
  agent = networks.Agent(config)
  frames = np.random.RandomState(0).randint(0, 11, size=(2, 4, 7, 7, 3)).astype(np.uint8)
  seen = []
  torso = agent.torso
  class Recording(tf.Module):  # pylint: disable=missing-class-docstring
    def __call__(self, x):
      seen.append(x)
      return torso(x)
  agent.torso = Recording()
  env_outputs = structures.EnvOutput(
      reward=tf.zeros([2, 4]), done=tf.zeros([2, 4], tf.bool),
      observation=structures.Observation(frame=tf.constant(frames), instruction=None),
      episode_return=tf.zeros([2, 4]), episode_step=tf.zeros([2, 4], tf.int32),
      truncated=tf.zeros([2, 4], tf.bool))
  agent.unroll(tf.zeros([2, 4], tf.int32), env_outputs, agent.initial_state(4))
  inputs = tf.concat(seen, 0).numpy()[:8]
  np.testing.assert_allclose(inputs, frames.reshape(8, 7, 7, 3) / 10.0, rtol=1e-6)
