"""benchmarks/tools/optimizer_steps: TF1 RMSProp's step/lr read back from a run's checkpoint."""
import numpy as np
import tensorflow as tf

from benchmarks.tools import optimizer_steps
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.runfiles import checkpoints
from tests import random_batches


def test_step_fraction_is_the_step_for_a_gradient_of_the_accumulators_size():
  epsilon = 0.01
  for mean_square in [1e-8, 1e-4, 0.01, 1.0, 100.0]:
    gradient = np.sqrt(mean_square)
    # TF1's ApplyRMSProp with momentum 0: delta = lr * g / sqrt(ms + epsilon).
    step_per_lr = gradient / np.sqrt(mean_square + epsilon)
    np.testing.assert_allclose(optimizer_steps.step_fraction(mean_square, epsilon),
                               step_per_lr, rtol=1e-12)


def test_reads_every_variable_of_a_saved_run_by_its_agent_path(tmp_path, capsys):
  config = networks.dmlab_config(networks.SHALLOW, num_actions=3, frame_shape=(20, 24, 3))
  agent = networks.Agent(config, seed=0)
  learner = learner_lib.Learner(agent, config_lib.LearnerConfig(), jit_compile=False)
  env_outputs, agent_outputs = random_batches.random_learner_batch(config, 3, 2, 0)
  learner.update(agent.initial_state(2), env_outputs, agent_outputs)
  checkpointer = checkpoints.Checkpointer(str(tmp_path), {}, agent=agent, learner=learner)
  path = checkpointer.save(learner.num_env_frames.numpy())

  frames, iterations, epsilon, rows, overall = optimizer_steps.checkpoint_steps(path, tf)
  assert (frames, iterations) == (learner.num_env_frames.numpy(), 1)
  assert epsilon == np.float32(learner.optimizer.epsilon.numpy())
  names = {row[0] for row in rows}
  assert {"policy/w", "baseline/w", "torso/conv1/w"} <= names
  assert sum(row[1] for row in rows) == sum(v.shape.num_elements()
                                            for v in agent.trainable_variables)
  # After one update from an accumulator of 1, every step is about the learning rate.
  assert all(0.9 < row[4] <= 1.0 for row in rows) and 0.9 < overall <= 1.0

  optimizer_steps.main([f"--logdir={tmp_path}"])
  assert "torso/conv1/w" in capsys.readouterr().out
