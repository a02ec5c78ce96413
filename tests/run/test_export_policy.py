"""run/export_policy.py (issue 43, item 3): a run's policy as a folder test mode plays, without
the optimizer state; training on it is refused."""
import json
import os
import shutil

import pytest
import tensorflow as tf

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import export_policy
from scalable_agent_tf2.runfiles import checkpoints

# A toy/lit_side run's checkpoint at 2,000 frames (tests/data; written before the rooms' move).
TOY_RUN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "run_before_rooms")


def _config(logdir, mode="test", *flags):
  return config_lib.config_from_argv([f"--mode={mode}", "--level_name=toy/lit_side",
                                      f"--logdir={logdir}", "--seed=3", *flags])


def _variable_names(path):
  return [name for name, _ in tf.train.list_variables(path)]


def test_the_exported_policy_is_the_agent_and_the_frames_and_test_mode_plays_it(tmp_path):
  run = str(tmp_path / "run")
  shutil.copytree(os.path.join(TOY_RUN, "checkpoints"), os.path.join(run, "checkpoints"))
  output = str(tmp_path / "agents" / "toy")
  path, frames = export_policy.export(_config(run), output)
  assert frames == 2000 and os.path.basename(path) == "ckpt-2000"
  full = os.path.join(checkpoints.checkpoint_dir(run),
                      checkpoints.latest_checkpoint(run)[0])
  names, full_names = _variable_names(path), _variable_names(full)
  assert not [n for n in names if "optimizer" in n or "rmsprop" in n], names
  # The full checkpoint lists a variable once, under the first path to it: the agent's own, or
  # the learner's list of the variables it trains. This run's agent also saved agent/_sampler
  # (a random generator no code reads any more), which the export, of today's agent, leaves out.
  agent_variables = [n for n in full_names if n.startswith(("agent/", "learner/_variables/"))
                     and not n.startswith("agent/_sampler/")]
  assert len([n for n in names if n.startswith("agent/")]) == len(agent_variables)
  others = sorted(n for n in names if not n.startswith("agent/"))
  assert others == ["_CHECKPOINTABLE_OBJECT_GRAPH",
                    "learner/num_env_frames/.ATTRIBUTES/VARIABLE_VALUE",
                    "save_counter/.ATTRIBUTES/VARIABLE_VALUE"], others
  size = lambda p: sum(os.path.getsize(os.path.join(os.path.dirname(p), f))
                       for f in os.listdir(os.path.dirname(p)) if f.startswith(os.path.basename(p)))
  assert size(path) < size(full)
  record = json.load(open(checkpoints.policy_only_path(output)))
  assert record["frames"] == 2000 and record["source_checkpoint"] == full
  # Test mode plays it, and reports the frames it was trained to.
  result = evaluation.evaluate(_config(output, "test", "--num_actors=1", "--test_num_episodes=2"),
                               print_fn=lambda line: None)
  assert result["summary"]["training_frames"] == 2000
  assert result["rows"][0]["episodes"] == 2
  # The same scores as the run's own checkpoint: the same policy.
  own = evaluation.evaluate(_config(run, "test", "--num_actors=1", "--test_num_episodes=2"),
                            print_fn=lambda line: None)
  assert result["rows"][0]["mean_return"] == own["rows"][0]["mean_return"]


def test_training_on_an_exported_policy_is_refused_and_output_is_never_overwritten(tmp_path):
  run = str(tmp_path / "run")
  shutil.copytree(os.path.join(TOY_RUN, "checkpoints"), os.path.join(run, "checkpoints"))
  output = str(tmp_path / "policy")
  export_policy.export(_config(run), output)
  from scalable_agent_tf2.run import assembly  # pylint: disable=g-import-not-at-top
  config = _config(output, "train")
  agent, probe = assembly.build_agent(config, assembly.checked_environment_constructor(
      config, None, test_mode=False))
  probe.close()
  with pytest.raises(checkpoints.CheckpointError, match="holds a policy only"):
    assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent))
  with pytest.raises(ValueError, match="not empty"):
    export_policy.export(_config(run), output)
