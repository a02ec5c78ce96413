"""Synchronous data-parallel learners (the paper's "8 learners"): two learners on two logical
CPU devices make the same update as one learner on both halves of the batch together."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from scalable_agent_tf2.run import input_pipeline

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)

# Logical devices must be configured before TensorFlow starts: a fresh process.
SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tests import random_batches
    from scalable_agent_tf2.configuration import config as config_lib
    from scalable_agent_tf2.learning import learner as learner_lib
    from scalable_agent_tf2.agent import networks

    config = networks.NetworkConfig(num_actions=5, frame_shape=(20, 20, 3),
                                    torso={torso!r}, use_lstm=True, use_instruction=True)
    learner_config = config_lib.config_from_argv(
        ["--level_name=atari/pong", "--max_grad_norm={clip_flag}"]).learner_config()
    single = learner_lib.Learner(networks.Agent(config, seed=4), learner_config,
                                 jit_compile=False)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      agent = networks.Agent(config, seed=4)
    pair = learner_lib.Learner(agent, learner_config, jit_compile=False, strategy=strategy)
    for step in range(2):
      env_outputs, agent_outputs = random_batches.random_learner_batch(
          config, unroll_length=6, batch_size=4, seed=step)
      rng = np.random.default_rng(step)
      state = tf.nest.map_structure(
          lambda t: rng.normal(size=t.shape).astype(np.float32), single.agent.initial_state(4))
      a = single.update(state, env_outputs, agent_outputs)
      b = pair.update(state, env_outputs, agent_outputs)
      for key in ("total_loss", "pg_loss", "baseline_loss", "entropy_loss", "grad_norm"):
        np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), rtol=1e-4, atol=1e-4)
      assert int(a["num_env_frames"]) == int(b["num_env_frames"]) == (step + 1) * 6 * 4 * 4
    for x, y in zip(single.agent.trainable_variables, pair.agent.trainable_variables):
      assert "Mirrored" in type(y).__name__
      for component in y.values:
        np.testing.assert_allclose(x.numpy(), component.numpy(), rtol=1e-4, atol=1e-5)
    for x, y in zip(single.optimizer.variables, pair.optimizer.variables):
      np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-5)
    try:
      env_outputs, agent_outputs = random_batches.random_learner_batch(
          config, unroll_length=6, batch_size=3)
      state = single.agent.initial_state(3)
      pair.update(state, env_outputs, agent_outputs)
      raise AssertionError("an odd batch was accepted")
    except ValueError as error:
      assert "multiple of the number of learners" in str(error)
    print("equal")
""")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("torso, clip", [("shallow", 40.0), ("deep", None)])
def test_two_learners_equal_one_learner_on_the_whole_batch(torso, clip):
  run = subprocess.run([sys.executable, "-c", SCRIPT.format(torso=torso, clip_flag=clip or 0)],
                       capture_output=True, text=True, timeout=280, cwd=REPO_DIR)
  assert run.returncode == 0 and "equal" in run.stdout, run.stderr[-4000:]


def test_each_learner_gets_its_own_actors_slice_of_the_batch():
  queues = input_pipeline.LearnerQueues(num_learners=2, capacity=10, batch_size=3,
                                        stop_event=threading.Event())
  for step in range(3):
    for actor_index in range(4):  # Actors 0, 2 feed learner 0; actors 1, 3 learner 1.
      assert queues.put((actor_index, step), actor_index)
  assert queues.fill() == 12 / 20
  batch = [queues.get() for _ in range(6)]  # What the dataset batches as 2 * B.
  assert [actor % 2 for actor, _ in batch] == [0, 0, 0, 1, 1, 1]
  assert batch[:3] == [(0, 0), (2, 0), (0, 1)]  # Each learner's queue is first in, first out.
  stop = threading.Event()
  stop.set()
  stopped = input_pipeline.LearnerQueues(1, 1, 1, stop)
  assert stopped.get() is None and not stopped.put("t", 0)


TRAIN_SCRIPT = textwrap.dedent("""
    from tests.run import test_training as t
    config = t.toy_config({logdir!r}, total_frames={frames}, num_actors=4, batch_size=4,
                          num_learners={learners}, checkpoint_secs=600)
    result = t.train_toy(config, lines=[])
    print("result", result.num_updates, result.num_env_frames, flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_training_with_two_learners_and_resuming_with_one(tmp_path):
  # Two learners: every update trains on 2 x B trajectories (frames counted once each).
  frames_per_update = 2 * 4 * 10 * 4  # learners x B x T x action repeats (toy_config).
  outputs = []
  for learners, frames in ((2, 5 * frames_per_update), (1, 7 * frames_per_update)):
    script = TRAIN_SCRIPT.format(logdir=str(tmp_path), frames=frames, learners=learners)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=380, cwd=REPO_DIR)
    assert run.returncode == 0, run.stderr[-4000:]
    outputs.append(run.stdout.split("result")[1].split())
  updates, frames = map(int, outputs[0])
  assert updates == 5 and frames == 5 * frames_per_update
  # The mirrored variables' checkpoint restores into a single learner, which carries on
  # from 5 updates' frames with batches half the size.
  updates, frames = map(int, outputs[1])
  assert frames >= 7 * frames_per_update and updates == 4, outputs[1]
