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
import subprocess
import sys

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


# A process that restores the old checkpoint as test mode does, then exits.
RESTORE_SCRIPT = """
import sys
from tests.run import test_old_checkpoint as t
from scalable_agent_tf2.run import assembly
config = t._config(sys.argv[1])
agent, learner, path = assembly.restore_agent(
    config, assembly.checked_environment_constructor(config, None, test_mode=True))
print("restored", path, flush=True)
"""


def test_the_values_todays_agent_no_longer_has_stay_unread_without_a_warning(tmp_path):
  """The old agent also saved agent/_sampler (a random generator today's agent does not have:
  actors sample in numpy); restoring leaves it unread, and nothing says so when the process
  ends (TensorFlow's "Value in checkpoint could not be found" warning, at exit)."""
  logdir = _old_logdir(tmp_path)
  reader = tf.train.load_checkpoint(os.path.join(logdir, "checkpoints", "ckpt-2000"))
  assert any(name.startswith("agent/_sampler/") for name in reader.get_variable_to_shape_map())
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  result = subprocess.run([sys.executable, "-c", RESTORE_SCRIPT, logdir], cwd=repo,
                          capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=repo))
  assert result.returncode == 0, result.stderr[-3000:]
  assert "restored" in result.stdout and "ckpt-2000" in result.stdout
  assert "could not be found" not in result.stderr, result.stderr[-3000:]
  assert "unrestored values" not in result.stderr, result.stderr[-3000:]
