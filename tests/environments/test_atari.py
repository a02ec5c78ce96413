"""Atari with the paper's preprocessing (Table G.1, section 5.3.2, Appendix G)."""
import ale_py
import ale_py.roms
import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing
from gymnasium.wrappers import FrameStackObservation

from scalable_agent_tf2 import environments
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.atari import AtariEnvironment

gymnasium.register_envs(ale_py)


def random_actions(env, count, seed=0):
  return np.random.default_rng(seed).integers(env.spec.num_actions, size=count)


def test_frames_and_rewards_match_gymnasium_atari_preprocessing():
  # An independent implementation of the same preprocessing (grey, 4 repeats, max over the last
  # 2 frames, INTER_AREA resize to 84x84, stack of 4), without no-ops so both start alike.
  reference = FrameStackObservation(AtariPreprocessing(
      gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0),
      noop_max=0, terminal_on_life_loss=False), 4)
  expected, _ = reference.reset(seed=0)
  env = AtariEnvironment("pong", seed=0, max_noops=0, terminal_on_life_loss=False)
  output = env.initial()
  np.testing.assert_array_equal(output.observation.frame, np.moveaxis(expected, 0, -1))
  for step, action in enumerate(random_actions(env, 300)):
    expected, reward, _, _, _ = reference.step(int(action))
    output = env.step(action)
    assert output.reward == reward, step
    np.testing.assert_array_equal(output.observation.frame, np.moveaxis(expected, 0, -1),
                                  err_msg="step %d" % step)


def test_spec_first_output_and_frame_stack():
  env = AtariEnvironment("pong", seed=1)
  assert env.spec == (6, (84, 84, 4))  # Pong's minimal action set.
  first = env.initial()
  assert (first.reward, first.done, first.episode_return, first.episode_step) == (0, True, 0, 0)
  assert first.observation.instruction == ""
  frame = first.observation.frame
  assert frame.dtype == np.uint8 and frame.shape == (84, 84, 4)
  for channel in range(1, 4):  # The first frame fills the stack.
    np.testing.assert_array_equal(frame[..., channel], frame[..., 0])
  previous = frame
  for action in random_actions(env, 50):
    frame = env.step(action).observation.frame
    np.testing.assert_array_equal(frame[..., :3], previous[..., 1:])  # Oldest frame dropped.
    previous = frame


def test_full_action_set_for_the_multitask_agent():
  assert AtariEnvironment("pong", full_action_space=True).spec.num_actions == 18


def test_noops_are_uniform_in_1_to_30_and_seeded():
  def episode_start_frames(seed, num_episodes=40):
    env = AtariEnvironment("pong", seed=seed)
    starts = []
    for _ in range(num_episodes):
      env.initial()
      starts.append(env._ale.getEpisodeFrameNumber())  # pylint: disable=protected-access
    return starts

  starts = episode_start_frames(seed=0)
  assert all(1 <= start <= 30 for start in starts)
  assert len(set(starts)) > 10
  assert starts == episode_start_frames(seed=0)
  assert starts != episode_start_frames(seed=1)


def test_same_seed_same_frames():
  envs = [AtariEnvironment("breakout", seed=5, sticky_actions=True) for _ in range(2)]
  outputs = [[env.initial()] + [env.step(a) for a in random_actions(env, 100)] for env in envs]
  for first, second in zip(*outputs):
    np.testing.assert_array_equal(first.observation.frame, second.observation.frame)
    assert first.reward == second.reward


def test_sticky_actions_flag():
  sticky = AtariEnvironment("pong", sticky_actions=True)
  plain = AtariEnvironment("pong")
  assert sticky._ale.getFloat("repeat_action_probability") == pytest.approx(0.25)  # pylint: disable=protected-access
  assert plain._ale.getFloat("repeat_action_probability") == 0.0  # pylint: disable=protected-access


def play_one_game(env, seed=0):
  """Outputs from initial() to the end of the first game (random play).

  The game is over at the `done` after which the emulator restarted: its frame counter is back
  within the no-ops (at most 30 frames), where a lost life leaves it running on.
  """
  outputs = [env.initial()]
  rng = np.random.default_rng(seed)
  while True:
    outputs.append(env.step(rng.integers(env.spec.num_actions)))
    if outputs[-1].done and env._ale.getEpisodeFrameNumber() <= 30:  # pylint: disable=protected-access
      return outputs


def test_life_loss_ends_the_training_episode_but_returns_are_whole_games():
  env = AtariEnvironment("breakout", seed=3)  # 5 lives.
  outputs = play_one_game(env)
  dones = [t for t, o in enumerate(outputs) if o.done and t > 0]
  assert len(dones) == 5  # Four lost lives, then the game over.
  rewards = [o.reward for o in outputs]
  # The statistics never restart at a lost life: they are the whole game's.
  for t in range(1, len(outputs)):
    assert outputs[t].episode_step == t
    assert outputs[t].episode_return == pytest.approx(sum(rewards[1:t + 1]))
  assert outputs[-1].episode_return > 0
  following = env.step(0)  # A new game: the statistics restart.
  assert following.episode_step == 1 and following.episode_return == following.reward


def test_evaluation_mode_ends_episodes_only_at_game_over():
  env = AtariEnvironment("breakout", seed=3, terminal_on_life_loss=False)
  outputs = play_one_game(env)
  assert [t for t, o in enumerate(outputs) if o.done] == [0, len(outputs) - 1]


def test_rewards_are_not_clipped():
  env = AtariEnvironment("space_invaders", seed=0)
  env.initial()
  rewards = [env.step(a).reward for a in random_actions(env, 1500)]
  assert max(rewards) > 1  # Space Invaders scores 5 to 30 points per invader.


def test_bad_action():
  env = AtariEnvironment("pong")
  env.initial()
  with pytest.raises(ValueError, match="out of range.*6 actions"):
    env.step(6)
  with pytest.raises(ValueError, match="integer"):
    env.step(1.0)


def test_factory_names_and_modes():
  constructor, kwargs = environments.environment_constructor("atari/space_invaders", seed=4)
  assert constructor is AtariEnvironment
  assert kwargs == dict(game="space_invaders", seed=4, terminal_on_life_loss=True)
  _, kwargs = environments.environment_constructor("atari/pong", test_mode=True,
                                                   full_action_space=True)
  assert kwargs["terminal_on_life_loss"] is False and kwargs["full_action_space"] is True
  with pytest.raises(ValueError, match="Unknown level name 'atari/Pong'.*atari/pong"):
    environments.environment_constructor("atari/Pong")
  with pytest.raises(ValueError, match="is a suite"):
    environments.environment_constructor("atari57")


def test_every_game_of_the_suite_has_a_rom():
  assert len(suites.ATARI57_GAMES) == 57
  assert [g for g in suites.ATARI57_GAMES if ale_py.roms.get_rom_path(g) is None] == []
