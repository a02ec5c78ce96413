"""The Figure 3 networks: parameter counts, acting vs. learning, resets, instruction hashing."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from tests import random_batches
from tests.agent_steps import acting_step
from tests.agent_steps import sampled_actions

# Small frames keep the tests fast; the shallow torso needs at least 20 pixels (8x8/4 then
# 4x4/2, VALID).
SMALL_FRAME = (20, 24, 3)


def _num_parameters(module):
  return sum(int(np.prod(v.shape)) for v in module.trainable_variables)


@pytest.mark.parametrize("torso,paper,exact", [
    # Figure 3: 1.2M (shallow) and 1.6M (deep) parameters on DMLab.
    (networks.SHALLOW, 1.2e6, 1_230_426),
    (networks.DEEP, 1.6e6, 1_628_010)])
def test_dmlab_parameter_counts_match_figure_3(torso, paper, exact):
  count = _num_parameters(networks.Agent(networks.dmlab_config(torso)))
  assert abs(count - paper) / paper < 0.03
  assert count == exact  # The hand count: conv + FC 256 + LSTM 256 + language + heads.


def _random_env_outputs(rng, config, T, B, done_probability=0.3):
  return random_batches.random_env_outputs(config, (T, B), seed=int(rng.integers(1 << 30)),
                                          done_probability=done_probability)


@pytest.mark.parametrize("config", [
    networks.dmlab_config(networks.SHALLOW, num_actions=4, frame_shape=SMALL_FRAME),
    networks.dmlab_config(networks.DEEP, num_actions=4, frame_shape=(12, 16, 3)),
    networks.atari_config(num_actions=6, torso=networks.SHALLOW, frame_shape=(20, 20, 4)),
], ids=["dmlab-shallow", "dmlab-deep", "atari-shallow"])
def test_unroll_equals_successive_steps_with_resets(config):
  rng = np.random.default_rng(0)
  T, B = 6, 3
  agent = networks.Agent(config, seed=1)
  env_outputs = _random_env_outputs(rng, config, T, B)
  env_outputs = env_outputs._replace(done=env_outputs.done | (np.arange(T)[:, None] == 3))
  prev_actions = rng.integers(0, config.num_actions, size=(T, B)).astype(np.int32)
  # A non-trivial starting state, as an actor's state in mid-episode would be.
  state = tf.nest.map_structure(lambda s: s + rng.normal(size=s.shape).astype(np.float32),
                                agent.initial_state(B))

  unrolled, unrolled_state = agent.unroll(prev_actions, env_outputs, state)

  step_state = state
  for t in range(T):
    params, baseline, step_state = acting_step(
        agent, prev_actions[t], tf.nest.map_structure(lambda x, t=t: x[t], env_outputs),
        step_state)
    np.testing.assert_allclose(params.numpy(), unrolled.policy_params.numpy()[t], rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(baseline.numpy(), unrolled.baseline.numpy()[t],
                               rtol=1e-4, atol=1e-5)
    actions = sampled_actions(agent, params, seed=t)
    assert actions.shape == (B,) and actions.dtype == np.int32
    assert np.all((actions >= 0) & (actions < config.num_actions))
  for a, b in zip(tf.nest.flatten(step_state), tf.nest.flatten(unrolled_state)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_done_resets_the_core_state():
  config = networks.dmlab_config(networks.SHALLOW, num_actions=3, frame_shape=SMALL_FRAME)
  agent = networks.Agent(config)
  rng = np.random.default_rng(2)
  env_output = tf.nest.map_structure(lambda x: x[0], _random_env_outputs(rng, config, 1, 2))
  prev_action = np.zeros(2, np.int32)
  busy_state = tf.nest.map_structure(lambda s: s + 1.0, agent.initial_state(2))
  reset = env_output._replace(done=np.array([True, True]))
  from_busy, _, _ = acting_step(agent, prev_action, reset, busy_state)
  from_zero, _, _ = acting_step(agent, prev_action, reset, agent.initial_state(2))
  np.testing.assert_allclose(from_busy.numpy(), from_zero.numpy(), rtol=1e-6)
  carried = env_output._replace(done=np.array([False, False]))
  not_reset, _, _ = acting_step(agent, prev_action, carried, busy_state)
  assert not np.allclose(not_reset.numpy(), from_zero.numpy())


@pytest.mark.parametrize("batch_size", [1, 5])
def test_step_takes_any_batch_size(batch_size):
  config = networks.atari_config(num_actions=18, frame_shape=(84, 84, 4))
  agent = networks.Agent(config)
  env_output = tf.nest.map_structure(
      lambda x: x[0], _random_env_outputs(np.random.default_rng(0), config, 1, batch_size))
  params, baseline, state = acting_step(agent, np.zeros(batch_size, np.int32), env_output,
                                       agent.initial_state(batch_size))
  assert params.shape == (batch_size, 18)
  assert baseline.shape == (batch_size,)
  assert state == ()  # Atari agents are feed-forward (section 5.3.2).


def test_sampled_actions_follow_the_policy():
  config = networks.atari_config(num_actions=3, frame_shape=(20, 20, 4))
  agent = networks.Agent(config, seed=3)
  # Make the policy head ignore its input and prefer action 2 strongly, action 0 a bit.
  agent.policy.w.assign(tf.zeros_like(agent.policy.w))
  agent.policy.b.assign([1.0, -10.0, 2.0])
  env_output = tf.nest.map_structure(
      lambda x: x[0], _random_env_outputs(np.random.default_rng(0), config, 1, 4000))
  params, _, _ = acting_step(agent, np.zeros(4000, np.int32), env_output, ())
  frequencies = np.bincount(sampled_actions(agent, params), minlength=3) / 4000
  probabilities = np.exp([1.0, -10.0, 2.0]) / np.exp([1.0, -10.0, 2.0]).sum()
  np.testing.assert_allclose(frequencies, probabilities, atol=0.03)


def test_same_seed_same_network_different_seed_different_network():
  config = networks.atari_config(num_actions=4, frame_shape=(20, 20, 4))
  a, b, c = (networks.Agent(config, seed=s) for s in (5, 5, 6))
  for va, vb in zip(a.trainable_variables, b.trainable_variables):
    np.testing.assert_array_equal(va.numpy(), vb.numpy())
  assert not np.allclose(a.torso.fc.w.numpy(), c.torso.fc.w.numpy())


def test_frames_are_scaled_by_255():
  """frame/255: a frame of 255s must act exactly like float ones fed to the torso."""
  config = networks.atari_config(num_actions=2, frame_shape=(20, 20, 4))
  agent = networks.Agent(config)
  torso_on_ones = agent.torso(tf.ones([1, 20, 20, 4]))
  env_output = EnvOutput(reward=np.zeros(1, np.float32), done=np.zeros(1, bool),
                         observation=Observation(np.full((1, 20, 20, 4), 255, np.uint8), ()),
                         episode_return=np.zeros(1), episode_step=np.zeros(1),
                         truncated=np.zeros(1, bool))
  core_input = tf.concat([torso_on_ones, [[0.0]], tf.one_hot([0], 2)], axis=1)
  params, _, _ = acting_step(agent, np.zeros(1, np.int32), env_output, ())
  np.testing.assert_allclose(params.numpy(), agent.policy(core_input).numpy(), rtol=1e-6)


def test_reward_input_is_clipped():
  config = networks.atari_config(num_actions=2, frame_shape=(20, 20, 4))
  agent = networks.Agent(config)
  env_output = tf.nest.map_structure(
      lambda x: x[0], _random_env_outputs(np.random.default_rng(1), config, 1, 1))
  big, _, _ = acting_step(agent, [0], env_output._replace(reward=np.array([50.0], np.float32)),
                          ())
  one, _, _ = acting_step(agent, [0], env_output._replace(reward=np.array([1.0], np.float32)),
                          ())
  np.testing.assert_allclose(big.numpy(), one.numpy(), rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Instructions.


def test_hash_instructions_shape_padding_and_truncation():
  long_instruction = " ".join(["word"] * (language.MAX_INSTRUCTION_WORDS + 5))
  ids = language.hash_instructions(["red  ball", "", long_instruction, b"red"])
  assert ids.shape == (4, language.MAX_INSTRUCTION_WORDS) and ids.dtype == np.int32
  assert np.all(ids[0, :2] > 0) and np.all(ids[0, 2:] == 0)
  assert np.all(ids[1] == 0)
  assert np.all(ids[2] > 0)
  assert ids[3, 0] == ids[0, 0]  # bytes and str hash alike; the same word, the same id.
  assert np.all((ids >= 0) & (ids <= language.INSTRUCTION_HASH_BUCKETS))


def test_instruction_hashing_is_the_same_in_separate_processes():
  words = "pick the red hat from the blue room"
  script = ("from scalable_agent_tf2.agent import language; "
            f"print(language.hash_instructions({words!r}).tolist())")
  # One other process (one TensorFlow import) with a hash seed not this process's: Python's
  # own hash() differs between the two.
  hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
  env = dict(os.environ, PYTHONHASHSEED=hash_seed, TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, check=True, timeout=120)
  output = result.stdout.strip().splitlines()[-1]
  assert output == str(language.hash_instructions(words).tolist())


def test_instruction_encoding_is_the_last_real_words_output():
  encoder = networks.Agent(networks.dmlab_config(
      networks.SHALLOW, frame_shape=SMALL_FRAME)).instruction_encoder
  ids = language.hash_instructions(["red ball", ""])
  encoded = encoder(ids).numpy()
  # Reference: the LSTM run over exactly the two real words, no padding.
  embedded = tf.gather(encoder.embeddings, ids[0, :2] - 1)[:, tf.newaxis]  # [2, 1, 20]
  outputs, _ = encoder.lstm(embedded, encoder.lstm.initial_state(1))
  np.testing.assert_allclose(encoded[0], outputs.numpy()[-1, 0], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(encoded[1], np.zeros(language.INSTRUCTION_LSTM_SIZE))


@pytest.mark.parametrize("texts", [
    ["get to the green goal square", "red ball", "", "go to the door"],  # Trimmed to 6 words.
    ["", ""],  # Nothing but padding: one step.
    [" ".join(["word"] * language.MAX_INSTRUCTION_WORDS), "red"]])  # Nothing to trim.
def test_trimming_the_instructions_padding_changes_no_bit(texts):
  """The encoder's LSTM stops at the batch's longest instruction (trim_padding): the
  encodings and the gradients are those of the LSTM run over all 16 slots, to the bit."""
  encoder = networks.Agent(networks.dmlab_config(
      networks.SHALLOW, frame_shape=SMALL_FRAME)).instruction_encoder
  ids = tf.constant(language.hash_instructions(texts))
  weights = tf.constant(np.random.default_rng(5).normal(
      size=[len(texts), language.INSTRUCTION_LSTM_SIZE]).astype(np.float32))
  results = []
  for trim in (False, True):
    @tf.function
    def encode_and_differentiate(trim=trim):
      with tf.GradientTape() as tape:
        encoded = encoder(ids, trim_padding=trim)
        loss = tf.reduce_sum(encoded * weights)
      return encoded, tape.gradient(loss, encoder.trainable_variables)
    encoded, gradients = encode_and_differentiate()
    results.append([encoded.numpy()] + [tf.convert_to_tensor(g).numpy() for g in gradients])
  for full, trimmed in zip(*results):
    np.testing.assert_array_equal(trimmed, full)


def test_a_learner_compiled_with_xla_leaves_the_agent_it_was_handed_as_it_was():
  """The actors share the learner's agent: its config stays theirs."""
  config = networks.dmlab_config(networks.SHALLOW, num_actions=3, frame_shape=SMALL_FRAME)
  from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.learning import learner  # pylint: disable=g-import-not-at-top
  agent = networks.Agent(config)
  learner.Learner(agent, config_lib.LearnerConfig(), jit_compile=True)
  assert agent.config is config and config.trim_instruction_padding


def test_an_unroll_with_static_shapes_compiles_with_xla_and_gives_the_trimmed_unrolls_numbers():
  """The learner's XLA-compiled unroll (static shapes: every word slot encoded, the torso
  unchunked) computes what the actors' trimmed unroll computes."""
  config = networks.dmlab_config(networks.SHALLOW, num_actions=3, frame_shape=SMALL_FRAME)
  assert config.trim_instruction_padding
  agent = networks.Agent(config, seed=1)
  env_outputs, agent_outputs = random_batches.random_learner_batch(config, 2, 2, seed=5)
  unroll = lambda **kwargs: agent.unroll(agent_outputs.action, env_outputs,
                                         agent.initial_state(2), **kwargs)[0]
  compiled = tf.function(lambda: unroll(static_shapes=True), jit_compile=True)()
  trimmed = unroll()
  for got, want in zip(tf.nest.flatten(compiled), tf.nest.flatten(trimmed)):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_instruction_changes_the_policy():
  config = networks.dmlab_config(networks.SHALLOW, num_actions=3, frame_shape=SMALL_FRAME)
  agent = networks.Agent(config)
  env_output = tf.nest.map_structure(
      lambda x: x[0], _random_env_outputs(np.random.default_rng(4), config, 1, 1))
  state = agent.initial_state(1)
  outputs = [acting_step(agent, [0], env_output._replace(
      observation=env_output.observation._replace(
          instruction=language.hash_instructions([text]))), state)[0].numpy()
             for text in ("red ball", "blue ball")]
  assert not np.allclose(outputs[0], outputs[1])


def test_bad_configs_are_rejected():
  with pytest.raises(ValueError, match="torso"):
    networks.dmlab_config("resnet50")
  with pytest.raises(ValueError, match="num_actions"):
    networks.atari_config(num_actions=0)
  with pytest.raises(ValueError, match="frame_shape"):
    networks.atari_config(num_actions=3, frame_shape=(84, 84))


# The IMPACT paper's Atari network (section 4.3; torsos.IMPACT_CNN_LAYERS).
IMPACT_CNN_CONFIG = networks.atari_config(num_actions=6, torso=networks.IMPACT_CNN,
                                          frame_shape=(42, 42, 4))


def test_impact_cnn_shapes_42x42_to_21_to_11_to_one_fully_connected_256():
  torso = networks.Agent(IMPACT_CNN_CONFIG).torso
  x = tf.random.uniform([5, 42, 42, 4])
  shapes = []
  for layer in torso.layers:
    x = tf.nn.relu(layer(x))
    shapes.append(tuple(x.shape))
  # 4x4/2 SAME: ceil(42 / 2) = 21, ceil(21 / 2) = 11; 11x11/1 VALID: 1.
  assert shapes == [(5, 21, 21, 16), (5, 11, 11, 32), (5, 1, 1, 256)]
  assert tuple(torso(tf.random.uniform([5, 42, 42, 4])).shape) == (5, 256)
  T, B = 3, 2
  output, state = networks.Agent(IMPACT_CNN_CONFIG).unroll(
      np.zeros([T, B], np.int32), random_batches.random_env_outputs(IMPACT_CNN_CONFIG, (T, B)),
      ())
  assert tuple(output.policy_params.shape) == (T, B, 6)
  assert tuple(output.baseline.shape) == (T, B) and state == ()


def test_impact_cnn_parameter_count_is_the_hand_count():
  conv1 = 4 * 4 * 4 * 16 + 16        # 1,040
  conv2 = 4 * 4 * 16 * 32 + 32       # 8,224
  conv3 = 11 * 11 * 32 * 256 + 256   # 991,488
  head_input = 256 + 1 + 6           # torso, clipped reward, one-hot previous action.
  heads = head_input * 6 + 6 + head_input + 1
  agent = networks.Agent(IMPACT_CNN_CONFIG)
  assert _num_parameters(agent.torso) == conv1 + conv2 + conv3 == 1_000_752
  assert _num_parameters(agent) == 1_000_752 + heads == 1_002_600


def test_impact_cnn_gradients_reach_every_variable_and_every_pixel():
  agent = networks.Agent(IMPACT_CNN_CONFIG, seed=3)
  env_outputs = random_batches.random_env_outputs(IMPACT_CNN_CONFIG, (2, 3), seed=1)
  frames = tf.Variable(tf.cast(env_outputs.observation.frame, tf.float32) / 255.0)
  with tf.GradientTape() as tape:
    features = agent.torso(tf.reshape(frames, [6, 42, 42, 4]))
    output, _ = agent.unroll(np.zeros([2, 3], np.int32), env_outputs, ())
    loss = tf.reduce_sum(output.policy_params ** 2) + tf.reduce_sum(output.baseline ** 2)
    loss += tf.reduce_sum(features)
  gradients = tape.gradient(loss, agent.trainable_variables + (frames,))
  for variable, gradient in zip(agent.trainable_variables, gradients):
    assert gradient is not None and np.any(gradient.numpy() != 0), variable.name
  # The 11x11 layer sees the whole 11x11 map, so every pixel, corners included, counts.
  pixel_gradient = np.abs(gradients[-1].numpy()).sum(axis=(0, 1, 4))
  assert np.all(pixel_gradient > 0)


def test_impact_cnn_refuses_other_frame_sizes():
  with pytest.raises(ValueError, match="42x42 frames"):
    networks.atari_config(num_actions=6, torso=networks.IMPACT_CNN, frame_shape=(84, 84, 4))
