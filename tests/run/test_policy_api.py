"""scalable_agent_tf2.load_policy and make_environment (policy.py): a trained policy in the
user's own gymnasium loop acts as the project's network does, carries its recurrent state,
reads its settings and observation filter from the folder, and says what is wrong in one line.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import scalable_agent_tf2
from scalable_agent_tf2 import policy as policy_lib
from scalable_agent_tf2.runfiles import checkpoints
from tests import policy_folders
from tests.policy_folders import BOXING
from tests.policy_folders import BREAKOUT
from tests.policy_folders import CART_POLE
from tests.policy_folders import PIXEL_MISSION


def _play(policy, envs, num_steps, greedy=True):
  """Steps `envs` (gymnasium.Envs, one per row) with policy.step; returns the steps as
  policy_folders.network_outputs takes them, and the states after each step."""
  observations = [env.reset()[0] for env in envs]
  state, rewards = policy.initial_state(len(envs)), np.zeros(len(envs), np.float32)
  steps, states = [], []
  for _ in range(num_steps):
    batch = _batch(observations)
    step = dict(observation=batch["frame"] if isinstance(batch, dict) else batch,
                instruction=batch.get("instruction") if isinstance(batch, dict) else None,
                reward=rewards.copy(), first=state.first.copy(), prev_action=state.action.copy())
    actions, state = policy.step(batch, state, reward=rewards, greedy=greedy)
    step["action"] = actions
    steps.append(step)
    ended = np.zeros(len(envs), bool)
    for row, env in enumerate(envs):
      observations[row], rewards[row], terminated, truncated, _ = env.step(actions[row])
      ended[row] = terminated or truncated
      if ended[row]:
        observations[row] = env.reset()[0]
        rewards[row] = 0.0
    state = policy.restart(state, ended)
    states.append(state)
  return steps, states


def _batch(observations):
  if isinstance(observations[0], dict):
    return {"frame": np.stack([o["frame"] for o in observations]),
            "instruction": [o["instruction"] for o in observations]}
  return np.stack(observations)


def test_the_package_names_the_api_without_loading_tensorflow_at_import():
  assert scalable_agent_tf2.load_policy is policy_lib.load_policy
  assert scalable_agent_tf2.make_environment is policy_lib.make_environment
  child = subprocess.run(
      [sys.executable, "-c", "import sys, scalable_agent_tf2; "
       "print('tensorflow' in sys.modules, hasattr(scalable_agent_tf2, 'nothing'))"],
      cwd=policy_folders.REPO, capture_output=True, text=True, check=True)
  assert child.stdout.split() == ["False", "False"], child.stdout


def test_a_shipped_agent_acts_as_its_network_on_its_environments_frames():
  policy = scalable_agent_tf2.load_policy(BREAKOUT, level_name="atari/breakout")
  assert (policy.level_name, policy.frames) == ("atari/breakout", 40248320)
  env = policy.make_environment(seed=3)
  assert env.observation_space.shape == (84, 84, 4) and env.action_space.n == 4
  steps, _ = _play(policy, [env], 40)
  env.close()
  reference = policy_folders.network_outputs(
      policy_folders.restored_agent(BREAKOUT, "atari/breakout"), steps)
  for step, (params, _, _) in zip(steps, reference):
    np.testing.assert_array_equal(step["action"], np.argmax(params, axis=1))
  # The agent reads the previous action (Figure 3): the steps carried the policy's own.
  assert [int(s["prev_action"][0]) for s in steps[1:]] == [int(s["action"][0]) for s in steps[:-1]]


def test_sampled_actions_follow_the_seed():
  observations = np.stack([policy_lib.make_environment("atari/boxing", seed=s).reset()[0]
                           for s in range(8)])

  def actions(seed):
    policy = scalable_agent_tf2.load_policy(BOXING, seed=seed)
    state, chosen = policy.initial_state(8), []
    for _ in range(6):
      action, state = policy.step(observations, state)
      chosen.append(action)
    return np.stack(chosen)
  first = actions(1)
  assert first.dtype == np.int32 and first.shape == (6, 8)
  np.testing.assert_array_equal(actions(1), first)
  assert not np.array_equal(actions(2), first)


def test_an_lstm_agent_with_instructions_carries_its_state_and_restarts_rows(tmp_path):
  folder = policy_folders.new_folder(str(tmp_path / "mission"), PIXEL_MISSION)
  policy = scalable_agent_tf2.load_policy(folder)
  assert policy.network_config.use_lstm and policy.network_config.use_instruction
  envs = [policy.make_environment(seed=seed) for seed in (1, 2)]
  observation, _ = envs[0].reset()
  assert set(observation) == {"frame", "instruction"} and observation["instruction"]
  steps, states = _play(policy, envs, 9)  # Episodes of 6 steps: a restart at step 6.
  reference = policy_folders.network_outputs(
      policy_folders.restored_agent(folder, PIXEL_MISSION), steps)
  for step, (params, _, _) in zip(steps, reference):
    np.testing.assert_array_equal(step["action"], np.argmax(params, axis=1))
  # The state each step returned is the network's (before the restart of ended rows).
  for t in (0, 1, 2, 3, 4, 6, 7, 8):
    for mine, theirs in zip(states[t].core, reference[t][2]):
      np.testing.assert_allclose(mine, theirs, atol=1e-5)
  assert states[5].first.all() and not states[4].first.any()
  assert all(np.abs(part).max() == 0 for part in states[5].core)


def test_the_observation_filter_and_the_network_settings_come_from_the_folder(tmp_path):
  rng = np.random.default_rng(0)
  seen = rng.normal(3.0, 2.0, size=(50, 4))
  # --value_torso=shared is no default: without the folder's settings the network would not
  # be the one its checkpoint holds.
  folder = policy_folders.new_folder(str(tmp_path / "cart"), CART_POLE, "--value_torso=shared",
                                     filter_observations=seen)
  policy = scalable_agent_tf2.load_policy(folder)
  assert not policy.network_config.separate_value_torso
  observations = rng.normal(3.0, 2.0, size=(64, 4)).astype(np.float32)
  actions, _ = policy.step(observations, policy.initial_state(64), greedy=True)
  agent = policy_folders.restored_agent(folder, CART_POLE, "--value_torso=shared")
  assert agent.observation_filter.filter.count == 50
  (params, _, _), = policy_folders.network_outputs(agent, [dict(
      observation=observations, reward=np.zeros(64), first=np.ones(64, bool),
      prev_action=np.zeros(64, np.int32))])
  np.testing.assert_array_equal(actions, np.argmax(params, axis=1))
  assert len(set(actions.tolist())) == 2  # Both actions: the comparison says something.


def test_a_state_log_std_policy_loads_and_its_run_resumes_only_with_it(tmp_path):
  """--log_std=state is not the preset: the folder's settings build the head its checkpoint
  holds (the policy layer's second half, not a free vector), also from a settings.json
  written before log_std was stored (IMPACT's head then), and a resume without the flag is
  refused before TensorFlow restores, naming it."""
  pendulum = "gym:Pendulum-v1"
  folder = policy_folders.new_folder(str(tmp_path / "pendulum"), pendulum, "--log_std=state")
  agent = policy_folders.restored_agent(folder, pendulum, "--log_std=state")
  assert agent.policy.state_dependent_log_std
  observations = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
  path = checkpoints.settings_path(folder)
  with open(path) as f:
    stored = json.load(f)
  for settings_file in (stored, {k: v for k, v in stored.items() if k != "log_std"}):
    with open(path, "w") as f:
      json.dump(settings_file, f)
    policy = scalable_agent_tf2.load_policy(folder)
    assert policy.network_config.state_dependent_log_std
    actions, _ = policy.step(observations, policy.initial_state(8), greedy=True)
    assert actions.shape == (8, 1) and np.all(np.abs(actions) <= 2.0)
    resume = subprocess.run(
        [sys.executable, "experiment.py", "--mode=train", f"--level_name={pendulum}",
         f"--logdir={folder}", "--total_environment_frames=2000"],
        cwd=policy_folders.REPO, capture_output=True, text=True, timeout=120, check=False)
    assert resume.returncode == 2, resume.stdout + resume.stderr
    assert "--log_std: checkpoint 'state', now 'free'" in resume.stderr, resume.stderr


def test_a_per_task_popart_policy_of_a_suite_with_excluded_levels_loads(tmp_path):
  # Its value outputs are the levels trained on: the suite's but the excluded one.
  suite = "toy/lit_side,toy/unlit_side,toy/lit_side_x1000"
  folder = policy_folders.new_folder(str(tmp_path / "suite"), suite, "--popart=true",
                                     "--excluded_levels=toy/unlit_side")
  policy = scalable_agent_tf2.load_policy(folder)
  assert policy.network_config.num_value_outputs == 2
  assert policy.level_name == suite


def test_a_named_checkpoint_is_loaded_and_the_folder_is_left_as_it_was(tmp_path):
  folder = policy_folders.new_folder(str(tmp_path / "toy"), "toy/lit_side", frames=1000)
  policy_folders.new_folder(folder, "toy/lit_side", frames=2000)
  before = sorted(os.listdir(checkpoints.checkpoint_dir(folder)))
  assert scalable_agent_tf2.load_policy(folder, checkpoint="ckpt-1000").frames == 1000
  assert scalable_agent_tf2.load_policy(folder).frames == 2000
  assert sorted(os.listdir(checkpoints.checkpoint_dir(folder))) == before
  assert checkpoints.latest_checkpoint(folder) == ("ckpt-2000", 2000)


def test_make_environment_is_a_gymnasium_env_of_the_project_s_episodes():
  env = scalable_agent_tf2.make_environment("toy/lit_side", seed=4)
  observation, info = env.reset()
  assert observation.shape == env.observation_space.shape == (20, 20, 1)
  assert observation.dtype == np.uint8 and info == {"episode_return": 0.0, "episode_step": 0}
  ends = []
  for step in range(1, 21):
    _, _, terminated, truncated, info = env.step(env.action_space.sample())
    if terminated:
      ends.append((step, info["episode_step"]))
    assert not truncated
  assert ends == [(10, 10), (20, 10)]  # toy/lit_side: 10 steps an episode.
  again = scalable_agent_tf2.make_environment("toy/lit_side", seed=9)
  np.testing.assert_array_equal(again.reset(seed=4)[0], env.reset(seed=4)[0])


def _error(call):
  with pytest.raises(policy_lib.PolicyError) as caught:
    call()
  message = str(caught.value)
  assert "\n" not in message, message
  return message


def test_a_user_s_mistakes_get_one_line_each(tmp_path):
  assert "no such folder" in _error(lambda: scalable_agent_tf2.load_policy(
      str(tmp_path / "missing")))
  os.makedirs(tmp_path / "fresh_run")
  assert "No checkpoint in" in _error(lambda: scalable_agent_tf2.load_policy(
      str(tmp_path / "fresh_run")))
  assert ("holds a policy of atari/boxing, not atari/breakout" in _error(
      lambda: scalable_agent_tf2.load_policy(BOXING, level_name="atari/breakout")))
  assert "no such checkpoint" in _error(lambda: scalable_agent_tf2.load_policy(
      BREAKOUT, checkpoint="ckpt-5"))
  assert "atari/nope" in _error(lambda: scalable_agent_tf2.make_environment("atari/nope"))
  policy = scalable_agent_tf2.load_policy(BREAKOUT)
  frame = policy.make_environment(seed=1).reset()[0]
  state = policy.initial_state(1)
  assert "without a batch dimension" in _error(lambda: policy.step(frame, state))
  assert "observations of dtype float32" in _error(
      lambda: policy.step(frame[None].astype(np.float32) / 255, state))
  assert "observations of shape [1, 84, 84, 3]" in _error(
      lambda: policy.step(frame[None, :, :, :3], state))
  assert "a state of 1 rows for 2 observations" in _error(
      lambda: policy.step(np.stack([frame, frame]), state))
  assert "reward of shape [3]" in _error(lambda: policy.step(frame[None], state,
                                                             reward=[0, 1, 2]))
