"""gymnasium environments end to end: Pendulum (vector observations, Box actions: the
continuous path), a user's own class through gymnasium's "module:Id" form, test mode on the
same environment; and CartPole's discrete actions on vectors stopped at the network with a
message naming what is missing."""
import dataclasses

import numpy as np
import pytest

from scalable_agent_tf2 import assembly
from scalable_agent_tf2 import config as config_lib
from scalable_agent_tf2 import evaluation
from scalable_agent_tf2 import training


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


def test_discrete_actions_on_vectors_stop_at_the_network_naming_what_is_missing(tmp_path):
  config = _config(tmp_path, "gym:CartPole-v1")
  with pytest.raises(NotImplementedError, match="torso_for_observation's MLP torso"):
    assembly.build_agent(config, assembly.default_environment_constructor(config))
