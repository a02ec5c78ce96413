"""The trained agents shipped in benchmarks/agents/ (issue 43, item 3): each folder is a policy
that test mode plays without training (run/export_policy.py's layout), small, and better than
random play.

Each agent's folder holds checkpoints/ (one policy-only checkpoint, its settings.json and
policy_only.json), saved_model/ (the same policy as a SavedModel, docs/POLICY_API.md),
training_curve.csv (its run's curve) and shipped.json: the test score
measured when it was shipped (the mean over `test_episodes` games of `python experiment.py
--mode=test`), which the slow test holds it to.
"""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import scalable_agent_tf2
from benchmarks.peers import learning_side_by_side
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.runfiles import checkpoints
from tests import policy_folders

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENTS_DIR = os.path.join(REPO, "benchmarks", "agents")
AGENTS = sorted(name for name in os.listdir(AGENTS_DIR)
                if os.path.isdir(os.path.join(AGENTS_DIR, name)))
# A shipped policy is the network's weights only: a few MB (the shallow Atari network's 0.7M
# weights are 2.7 MB), never a training checkpoint's optimizer state or target network.
MAX_AGENT_BYTES = 20 * 2 ** 20
TRAINING_CURVE = "training_curve.csv"  # Its run's curve (runfiles.plot --table_every).
# The slow test's bar: over its few games an agent must keep at least half of its shipped
# score's lead over random play (a few games of Atari vary; half the lead is far from random).
SLOW_TEST_EPISODES = 5
KEPT_LEAD = 0.5


def _shipped(name):
  folder = os.path.join(AGENTS_DIR, name)
  with open(os.path.join(folder, "shipped.json"), encoding="utf-8") as f:
    shipped = json.load(f)
  with open(checkpoints.policy_only_path(folder), encoding="utf-8") as f:
    policy = json.load(f)
  return folder, shipped, policy


def _test_config(logdir, level_name, *flags):
  return config_lib.config_from_argv(["--mode=test", f"--level_name={level_name}",
                                      f"--logdir={logdir}", *flags])


def test_agents_are_shipped():
  assert AGENTS, f"no agent in {AGENTS_DIR}"
  with open(os.path.join(AGENTS_DIR, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  for name in AGENTS:  # The README's table lists every folder.
    assert f"`{name}/`" in readme, name


@pytest.mark.parametrize("name", AGENTS)
def test_a_shipped_agent_is_a_small_policy_only_folder_with_its_record(name):
  folder, shipped, policy = _shipped(name)
  assert policy["level_name"] == shipped["level_name"]
  assert policy["frames"] == shipped["frames"] > 0
  for key in ("test_score", "test_episodes", "command", "random_score"):
    assert key in shipped, key
  assert shipped["test_score"] > shipped["random_score"]
  names = checkpoints.latest_checkpoint(folder)
  assert names and names[0] == f"ckpt-{policy['frames']}", names
  path = os.path.join(checkpoints.checkpoint_dir(folder), names[0])
  variables = [v for v, _ in tf.train.list_variables(path)]
  assert [v for v in variables if v.startswith("agent/")]
  assert not [v for v in variables if "optimizer" in v or "rmsprop" in v or "target" in v]
  size = sum(os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(folder) for f in files)
  assert size < MAX_AGENT_BYTES, size
  if suites.is_atari_level(shipped["level_name"]):
    game = suites.atari_game(shipped["level_name"])
    assert shipped["random_score"] == suites.ATARI57_RANDOM_SCORES[game]
    # Its training curve, in the table a side-by-side report reads (--ours_table): the run's
    # own, up to the shipped frames, ending near the shipped score.
    curve = learning_side_by_side.read_ours_table(
        os.path.join(folder, TRAINING_CURVE), game)[1]
    assert np.all(np.diff(curve["frames"]) > 0) and np.all(np.diff(curve["hours"]) > 0)
    assert curve["reached"] <= shipped["frames"] < curve["reached"] + 5_000_000
    assert curve["means"][-1] > shipped["random_score"]


@pytest.mark.parametrize("name", AGENTS)
def test_test_mode_restores_a_shipped_agent_without_training(name, tmp_path):
  """The command README shows, in-process on a copy (test mode writes evaluation/ into its
  logdir): it restores the shipped frames and plays one game."""
  folder, shipped, _ = _shipped(name)
  copy = str(tmp_path / name)
  shutil.copytree(folder, copy)
  result = evaluation.evaluate(
      _test_config(copy, shipped["level_name"], "--num_actors=1", "--test_num_episodes=1"),
      print_fn=lambda line: None)
  assert result["summary"]["training_frames"] == shipped["frames"]
  assert result["rows"][0]["episodes"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", AGENTS)
def test_a_shipped_agent_beats_random_play(name, tmp_path):
  folder, shipped, _ = _shipped(name)
  copy = str(tmp_path / name)
  shutil.copytree(folder, copy)
  result = evaluation.evaluate(
      _test_config(copy, shipped["level_name"], "--num_actors=1",
                   f"--test_num_episodes={SLOW_TEST_EPISODES}"),
      print_fn=lambda line: None)
  score = result["rows"][0]["mean_return"]
  bar = shipped["random_score"] + KEPT_LEAD * (shipped["test_score"] - shipped["random_score"])
  assert score >= bar, (score, bar, shipped)


@pytest.mark.parametrize("name", AGENTS)
def test_a_shipped_saved_model_is_the_folder_s_policy(name):
  """Each folder's saved_model/ (export_policy.py --format=saved_model of the folder itself):
  its record names the folder's frames, and its step gives the network's outputs (test mode's
  restore) on the level's own frames."""
  folder, shipped, _ = _shipped(name)
  saved = os.path.join(folder, "saved_model")
  with open(os.path.join(saved, "policy.json"), encoding="utf-8") as f:
    spec = json.load(f)
  assert (spec["level_name"], spec["frames"]) == (shipped["level_name"], shipped["frames"])
  policy = scalable_agent_tf2.load_policy(folder)
  env = policy.make_environment(seed=2)
  frames = [env.reset()[0]]
  for _ in range(5):
    frames.append(env.step(env.action_space.sample())[0])
  observation = np.stack(frames)
  model = tf.saved_model.load(saved)
  state = model.initial_state({"batch_size": tf.constant(len(frames))})
  out = model.step(dict(state, observation=observation, reward=tf.zeros([len(frames)]),
                        seed=tf.constant([0, 0]), greedy=tf.constant(True)))
  agent = policy_folders.restored_agent(folder, shipped["level_name"])
  (params, baseline, _), = policy_folders.network_outputs(agent, [dict(
      observation=observation, reward=np.zeros(len(frames)), first=np.ones(len(frames), bool),
      prev_action=np.zeros(len(frames), np.int32))])
  np.testing.assert_allclose(out["policy_params"].numpy(), params, atol=1e-5, rtol=0)
  np.testing.assert_allclose(out["baseline"].numpy(), baseline, atol=1e-5, rtol=0)
