"""torsos.chunked_torso: the torso in chunks, recomputed for the gradient, gives the same
gradients and the same learner update as the torso over all frames at once."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import learner as learner_lib
from tests import random_batches

UNROLL_LENGTH, BATCH_SIZE = 5, 3  # 18 frames: chunks of 4 leave a padded last chunk.


def small_config(torso, chunk_frames=0):
  return networks.NetworkConfig(num_actions=5, frame_shape=(24, 32, 3), torso=torso,
                                torso_chunk_frames=chunk_frames)


def loss_and_gradients(config, jit_compile=False):
  agent = networks.Agent(config, seed=7)
  env_outputs, agent_outputs = random_batches.random_learner_batch(config, UNROLL_LENGTH,
                                                                  BATCH_SIZE)

  @tf.function(jit_compile=jit_compile)
  def compute():
    with tf.GradientTape() as tape:
      output, _ = agent.unroll(agent_outputs.action, env_outputs,
                               agent.initial_state(BATCH_SIZE))
      loss = (tf.reduce_sum(tf.nn.log_softmax(output.policy_params)[..., 0])
              + tf.reduce_sum(tf.square(output.baseline)))
    return loss, tape.gradient(loss, agent.trainable_variables)
  loss, gradients = compute()
  return loss.numpy(), [tf.convert_to_tensor(g).numpy() for g in gradients]


# The deep torso's cases in the slow tier: the default tier keeps the shallow one here, and
# chunks the deep torso by 4 (a padded last chunk) in test_chunked_torso_compiles_with_xla
# (the same loss and gradients, XLA-compiled) and test_learner_update_is_the_same_with_chunks.
@pytest.mark.parametrize("torso,chunk_frames", [
    pytest.param(networks.DEEP, 4, marks=pytest.mark.slow),
    pytest.param(networks.DEEP, 17, marks=pytest.mark.slow),
    (networks.SHALLOW, 6)])
def test_chunked_torso_gives_the_same_loss_and_gradients(torso, chunk_frames):
  loss, gradients = loss_and_gradients(small_config(torso))
  chunked_loss, chunked_gradients = loss_and_gradients(small_config(torso, chunk_frames))
  np.testing.assert_allclose(chunked_loss, loss, rtol=1e-6)
  assert len(chunked_gradients) == len(gradients)
  for chunked, plain in zip(chunked_gradients, gradients):
    assert np.abs(plain).max() > 0  # Every variable gets a gradient, chunked or not.
    np.testing.assert_allclose(chunked, plain, rtol=1e-4, atol=1e-5 * np.abs(plain).max())


def test_chunked_torso_compiles_with_xla():
  loss, gradients = loss_and_gradients(small_config(networks.DEEP))
  chunked_loss, chunked_gradients = loss_and_gradients(small_config(networks.DEEP, 4),
                                                       jit_compile=True)
  np.testing.assert_allclose(chunked_loss, loss, rtol=1e-5)
  for chunked, plain in zip(chunked_gradients, gradients):
    np.testing.assert_allclose(chunked, plain, rtol=1e-3, atol=1e-4 * np.abs(plain).max())


def test_chunked_torso_outputs_match_the_torso():
  config = small_config(networks.DEEP)
  agent = networks.Agent(config, seed=1)
  frames = np.random.default_rng(0).integers(0, 256, (11,) + config.frame_shape, np.uint8)
  expected = agent.torso(torsos.to_unit_float(frames)).numpy()
  chunked = torsos.chunked_torso(agent.torso, tf.constant(frames), 4).numpy()
  assert chunked.shape == expected.shape
  np.testing.assert_allclose(chunked, expected, rtol=1e-5, atol=1e-6)


def test_learner_update_is_the_same_with_chunks():
  config = small_config(networks.DEEP)
  env_outputs, agent_outputs = random_batches.random_learner_batch(config, UNROLL_LENGTH,
                                                                  BATCH_SIZE)
  results = []
  for network_config in (config, dataclasses.replace(config, torso_chunk_frames=4)):
    agent = networks.Agent(network_config, seed=3)
    learner = learner_lib.Learner(agent, config_lib.LearnerConfig(), jit_compile=False)
    stats = [learner.update(agent.initial_state(BATCH_SIZE), env_outputs, agent_outputs)
             for _ in range(2)]
    results.append(([{k: float(v) for k, v in s.items()} for s in stats],
                    [v.numpy() for v in agent.trainable_variables]))
  (plain_stats, plain_weights), (chunked_stats, chunked_weights) = results
  for plain, chunked in zip(plain_stats, chunked_stats):
    assert plain.keys() == chunked.keys()
    for key in plain:
      np.testing.assert_allclose(chunked[key], plain[key], rtol=1e-4, err_msg=key)
  for plain, chunked in zip(plain_weights, chunked_weights):
    np.testing.assert_allclose(chunked, plain, rtol=1e-4, atol=1e-6)


def test_the_deep_torso_is_chunked_by_default():
  assert small_config(networks.DEEP, None).torso_chunk_frames == networks.DEEP_TORSO_CHUNK_FRAMES
  assert networks.dmlab_config(networks.DEEP).torso_chunk_frames == (
      networks.DEEP_TORSO_CHUNK_FRAMES)
  assert networks.dmlab_config(networks.SHALLOW).torso_chunk_frames == 0


def test_negative_chunk_size_is_refused():
  with pytest.raises(ValueError, match="torso_chunk_frames"):
    small_config(networks.DEEP, -1)
