"""Suites a user names: --level_name=atari/pong,atari/breakout,... trains one agent on levels of
one family as the built-in suites (atari57, dmlab30) are trained, and a bad list gets one line
naming what is wrong and what to type instead."""
import dataclasses

import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import create_environment
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import toy as toy_family
from scalable_agent_tf2.runfiles import checkpoints
from tests.run import test_before_tensorflow

ATARI_THREE = "atari/pong,atari/breakout,atari/boxing"
DMLAB_TWO = "rooms_watermaze,explore_goal_locations_small"
TOY_TWO = ",".join(toy_family.REWARD_SCALE_LEVELS)  # toy/lit_side,toy/lit_side_x1000


def _config(*flags):
  return config_lib.config_from_argv(list(flags))


def _differing_settings(config, other):
  return {f.name for f in dataclasses.fields(config)
          if getattr(config, f.name) != getattr(other, f.name)}


def test_a_named_suite_is_its_levels_in_the_order_given():
  assert families.level_names(ATARI_THREE) == ("atari/pong", "atari/breakout", "atari/boxing")
  assert families.level_names("atari/boxing,atari/pong") == ("atari/boxing", "atari/pong")
  assert families.level_names(TOY_TWO) == toy_family.REWARD_SCALE_LEVELS
  assert suites.is_suite(ATARI_THREE) and suites.is_suite(suites.ATARI57)
  assert not suites.is_suite("atari/pong")


def test_a_named_atari_suite_takes_atari57s_presets_and_the_full_action_set():
  config = _config(f"--level_name={ATARI_THREE}")
  assert config.levels == ("atari/pong", "atari/breakout", "atari/boxing")
  assert config.is_multi_task and config.family is atari_family.FAMILY
  # The multi-task agent's presets (Appendix G: the deep network; section 5.3.2: 200M frames a
  # game): everything as atari57's but the name and the frames of 3 games, not 57.
  atari57 = _config(f"--level_name={suites.ATARI57}")
  assert _differing_settings(config, atari57) == {"level_name", "total_environment_frames"}
  assert config.torso == settings.DEEP and config.total_environment_frames == 3 * int(200e6)
  assert config.family.environment_options(config)["full_action_space"]
  single = _config("--level_name=atari/pong")
  assert not single.is_multi_task and single.levels == ("atari/pong",)
  assert single.torso == settings.SHALLOW and not single.family.environment_options(single)[
      "full_action_space"]
  _, _, cited = config_lib.explain(config_lib.ExperimentConfig(level_name=ATARI_THREE))
  assert cited["torso"] == "Appendix G (the multi-task agent): deep"
  assert cited["total_environment_frames"] == "Table G.1 and section 5.3.2, 200M per game: 600M"


def test_named_dmlab_and_toy_suites_take_their_familys_suite_presets():
  dmlab = _config(f"--level_name={DMLAB_TWO}")
  assert dmlab.levels == tuple(DMLAB_TWO.split(",")) and dmlab.is_multi_task
  assert _differing_settings(dmlab, _config("--level_name=dmlab30")) == {"level_name"}
  assert dmlab.reward_clipping == settings.OPTIMISTIC_ASYMMETRIC  # Not one level's abs_one.
  assert _config("--level_name=rooms_watermaze").reward_clipping == settings.ABS_ONE
  toy = _config(f"--level_name={TOY_TWO}")
  assert toy.levels == toy_family.REWARD_SCALE_LEVELS and toy.is_multi_task
  assert _differing_settings(toy, _config("--level_name=toy/lit_side")) == {"level_name"}


def test_atari_games_of_a_named_suite_play_with_18_actions():
  """Appendix G: the multi-task agent plays every game with the full action set of 18 (Pong's
  own set has 6), in the environment process and the C++ vector alike."""
  config = _config("--level_name=atari/pong,atari/breakout")
  single = _config("--level_name=atari/pong")
  for run, num_actions in ((config, 18), (single, 6)):
    env = create_environment("atari/pong", seed=1, in_subprocess=False,
                             **run.family.environment_options(run))
    try:
      assert env.spec.num_actions == num_actions
    finally:
      env.close()
    group = run.family.vector_group(run, "atari/pong", [1], test_mode=False)
    try:
      assert group.spec.num_actions == num_actions
    finally:
      group.close()


def test_excluded_levels_leave_levels_of_a_named_suite():
  config = _config(f"--level_name={ATARI_THREE}", "--excluded_levels=atari/breakout")
  assert config.levels == ("atari/pong", "atari/boxing") and config.is_multi_task
  with pytest.raises(ValueError, match=f"atari/qbert not in {ATARI_THREE}"):
    _config(f"--level_name={ATARI_THREE}", "--excluded_levels=atari/qbert")
  with pytest.raises(ValueError, match="leaves none"):
    _config("--level_name=atari/pong,atari/boxing", "--excluded_levels=atari/pong,atari/boxing")


@pytest.mark.parametrize("name, expected", [
    ("atari/pong,toy/lit_side", "mixes families: atari/pong is a level of family atari, "
     "toy/lit_side of family toy"),
    ("atari/pong,atari/breakout,atari/pong", "atari/pong is named twice (levels 1 and 3 of "
     "the list); name each level once"),
    ("rooms_watermaze,dmlab:contributed/dmlab30/rooms_watermaze", "rooms_watermaze (as "
     "dmlab:contributed/dmlab30/rooms_watermaze) is named twice"),
    ("atari/pong,atari/breakout,", "level 3 of the list is empty (a trailing or doubled comma)"),
    ("atari/pong,,atari/breakout", "level 2 of the list is empty"),
    ("atari/pong,atari/breakoutt", "Unknown level name 'atari/breakoutt'; did you mean "
     "atari/breakout"),
    ("atari57,atari/pong", "atari57 is a suite, not a level; train on it alone "
     "(--level_name=atari57, with --excluded_levels"),
    ("atari/pong, atari/breakout", "' atari/breakout' has spaces around it; write the list "
     "without them: --level_name=atari/pong,atari/breakout."),
    ("mujoco/hopper,mujoco/half_cheetah", "levels of family mujoco form no suite"),
    ("gym:CartPole-v1,gym:Acrobot-v1", "levels of family gym form no suite"),
])
def test_a_bad_list_gets_one_line_saying_what_is_wrong(name, expected):
  with pytest.raises(ValueError) as raised:
    _config(f"--level_name={name}")
  message = str(raised.value)
  assert message.startswith(f"--level_name={name}") and expected in message, message
  assert "\n" not in message


def test_experiment_py_answers_a_bad_list_with_an_error_line_before_tensorflow(tmp_path):
  result = test_before_tensorflow.run_experiment(
      "--level_name=atari/pong,toy/lit_side", f"--logdir={tmp_path}")
  test_before_tensorflow.assert_answered_before_tensorflow(
      result, "error: --level_name=atari/pong,toy/lit_side mixes families")
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_show_settings_names_the_suite_as_its_list_and_count(tmp_path):
  result = test_before_tensorflow.run_experiment(
      f"--level_name={TOY_TWO}", f"--logdir={tmp_path}", "--show_settings")
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith(f"train: {TOY_TWO} (2 levels), with these settings"), (
      result.stdout)


def test_a_restart_with_another_list_is_refused(tmp_path):
  """The checkpoint's settings hold the list: another one (or another order, which renumbers
  the tasks) is refused before TensorFlow with the existing line."""
  stored = "toy/lit_side,toy/lit_side_x1000"
  test_before_tensorflow.fake_checkpoint(tmp_path, level_name=stored)
  other = "toy/lit_side_x1000,toy/lit_side"
  result = test_before_tensorflow.run_experiment(f"--level_name={other}", f"--logdir={tmp_path}")
  test_before_tensorflow.assert_answered_before_tensorflow(
      result, f"was trained with different settings (--level_name: checkpoint {stored!r}, now "
              f"{other!r})")
  checkpoints.check_before_restore(str(tmp_path), dict(
      test_before_tensorflow.TOY_SETTINGS, level_name=stored, popart=False))  # Its own list.


def test_the_listing_shows_how_to_name_a_suite():
  text = families.all_names_text()
  suites_group = text.split("\n\n")[0]
  # The built-in families whose levels form suites, then any a test registered (faulty-toy).
  named = families.suite_families_text()
  assert named == "dmlab, atari or toy" or named.startswith("dmlab, atari, toy"), named
  assert (f"\n  <level>,<level>,... (a suite you name: levels of one family, {named}, e.g. "
          "atari/pong,atari/breakout)") in suites_group
