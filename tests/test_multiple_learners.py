"""Synchronous data-parallel learners (the paper's "8 learners"): two learners on two logical
CPU devices make the same update as one learner on both halves of the batch together."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Logical devices must be configured before TensorFlow starts: a fresh process.
SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from scalable_agent_tf2 import learner as learner_lib, networks, testing_utils

    config = networks.NetworkConfig(num_actions=5, frame_shape=(20, 20, 3),
                                    torso={torso!r}, use_lstm=True, use_instruction=True)
    learner_config = learner_lib.atari_learner_config(max_grad_norm={clip})
    single = learner_lib.Learner(networks.Agent(config, seed=4), learner_config,
                                 jit_compile=False)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      agent = networks.Agent(config, seed=4)
    pair = learner_lib.Learner(agent, learner_config, jit_compile=False, strategy=strategy)
    for step in range(2):
      env_outputs, agent_outputs = testing_utils.random_learner_batch(
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
      env_outputs, agent_outputs = testing_utils.random_learner_batch(
          config, unroll_length=6, batch_size=3)
      state = single.agent.initial_state(3)
      pair.update(state, env_outputs, agent_outputs)
      raise AssertionError("an odd batch was accepted")
    except ValueError as error:
      assert "multiple of the number of learners" in str(error)
    print("equal")
""")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("torso, clip", [("shallow", 40.0), ("deep", None)])
def test_two_learners_equal_one_learner_on_the_whole_batch(torso, clip):
  run = subprocess.run([sys.executable, "-c", SCRIPT.format(repo=REPO_DIR, torso=torso,
                                                             clip=clip)],
                       capture_output=True, text=True, timeout=280)
  assert run.returncode == 0 and "equal" in run.stdout, run.stderr[-4000:]
