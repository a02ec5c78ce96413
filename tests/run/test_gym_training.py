"""gymnasium environments end to end: Pendulum (vector observations, Box actions: the
continuous path), a user's own class through gymnasium's "module:Id" form, test mode on the
same environment; and CartPole (vector observations, discrete actions: the MLP torso and the
categorical head) learning past random play."""
import dataclasses

import numpy as np
import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import training


def _config(logdir, level_name, *extra):
  return config_lib.config_from_argv([
      f"--level_name={level_name}", f"--logdir={logdir}", "--batch_size=2",
      "--unroll_length=8", "--num_actors=2", "--envs_per_actor=2", "--log_secs=60",
      "--total_environment_frames=64", "--test_num_episodes=1", *extra])


@pytest.mark.parametrize("level_name", [
    "gym:Pendulum-v1", "gym:tests.gym_user_package.envs:UserTarget-v0"])
def test_vector_observations_with_box_actions_train_and_test(tmp_path, level_name):
  config = _config(tmp_path, level_name)
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_updates >= 1 and result.num_env_frames >= 64
  rows = evaluation.evaluate(dataclasses.replace(config, mode="test", num_actors=1),
                             print_fn=lambda line: None)["rows"]
  assert rows[0]["episodes"] == 1 and np.isfinite(rows[0]["mean_return"])


# CartPole-v1 under a uniformly random policy lasts about 22 steps (return 22); the budget is
# what the family's defaults (Table G.1's learner, one step per gymnasium step) need to beat it
# clearly on 2 cores in well under a minute.
CARTPOLE_RANDOM_RETURN = 22.0
CARTPOLE_FRAMES = 40_000


def test_cartpole_trains_past_random_play_and_its_checkpoint_carries_the_filter(tmp_path):
  config = config_lib.config_from_argv([
      "--level_name=gym:CartPole-v1", f"--logdir={tmp_path}", "--log_secs=60",
      f"--total_environment_frames={CARTPOLE_FRAMES}", "--test_num_episodes=40"])
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_env_frames >= CARTPOLE_FRAMES
  # Vector observations with discrete actions pass through the run's filter, and a checkpoint
  # carries its statistics (restored into a fresh agent, as a resumed or a test run does).
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  assert agent.observation_filter.filter.count == 0
  checkpointer = assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent))
  assert checkpointer.restore() == result.checkpoint
  assert agent.observation_filter.filter.count >= CARTPOLE_FRAMES
  rows = evaluation.evaluate(dataclasses.replace(config, mode="test"),
                             print_fn=lambda line: None)["rows"]
  assert rows[0]["episodes"] == 40
  assert rows[0]["mean_return"] > 1.4 * CARTPOLE_RANDOM_RETURN, rows
