"""A checkpoint written before the package was split into rooms (issue 32) restores after it.

tests/data/run_before_rooms/checkpoints holds the checkpoint of a training on toy/lit_side by
the flat tree (commit c1bb990), made with

    python experiment.py --mode=train --level_name=toy/lit_side --logdir=/tmp/oldckpt \
        --num_actors=2 --total_environment_frames=2000 --seed=3

TensorFlow's checkpoints name objects by their attribute paths, not by the modules that
define them; this test is what shows that moving the modules kept those paths.
"""
import os
import shutil

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation

OLD_RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "run_before_rooms")


def _config(logdir, *flags):
  return config_from(["--mode=test", "--level_name=toy/lit_side", f"--logdir={logdir}",
                      "--num_actors=2", "--seed=3", *flags])


def config_from(argv):
  return config_lib.config_from_argv(argv)


def _old_logdir(tmp_path):
  logdir = str(tmp_path / "run")
  shutil.copytree(os.path.join(OLD_RUN, "checkpoints"), os.path.join(logdir, "checkpoints"))
  return logdir


def test_every_variable_restores_to_the_old_checkpoints_values(tmp_path):
  config = _config(_old_logdir(tmp_path))
  environment_constructor = assembly.checked_environment_constructor(config, None,
                                                                     test_mode=True)
  agent, probe_env = assembly.build_agent(config, environment_constructor, None)
  probe_env.close()
  learner = assembly.make_learner(config, agent)
  path = assembly.make_checkpointer(config, agent, learner).restore(required=True)
  assert os.path.basename(path) == "ckpt-2000"
  assert int(learner.num_env_frames.numpy()) == 2000
  reader = tf.train.load_checkpoint(path)
  # The parameters are saved under agent/ and learner/_variables/ (not the optimizer's slots).
  saved = [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
           if name.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and "optimizer" not in name]
  assert len(agent.trainable_variables) == 10
  for variable in agent.trainable_variables:
    assert any(value.shape == tuple(variable.shape) and np.array_equal(variable.numpy(), value)
               for value in saved), f"{variable.name} was not restored from {path}"

def test_test_mode_plays_the_old_checkpoint(tmp_path):
  lines = []
  result = evaluation.evaluate(_config(_old_logdir(tmp_path), "--test_num_episodes=4"),
                               print_fn=lines.append)
  assert os.path.basename(result["checkpoint"]) == "ckpt-2000"
  assert result["summary"]["training_frames"] == 2000
  assert [row["episodes"] for row in result["rows"]] == [4]
