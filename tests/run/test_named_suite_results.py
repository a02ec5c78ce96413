"""Test mode on a suite a user names (--level_name=atari/pong,atari/breakout,...): a row per
level, then the suite's human-normalised scores over the levels named (Table 4's median and
mean for Atari games, Table 3's mean capped for DMLab-30 levels), or a line saying its levels
have none (toy levels). One short real run on two toy levels trains and tests the list."""
import numpy as np

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import toy as toy_family
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import runlog

ATARI_GAMES = ("pong", "breakout", "boxing")
ATARI_THREE = ",".join(suites.ATARI_LEVEL_PREFIX + game for game in ATARI_GAMES)
TOY_TWO = ",".join(toy_family.REWARD_SCALE_LEVELS)


def _tables(level_scores, level_name):
  rows = evaluation.level_rows({level: [(score, 100)] for level, score in level_scores.items()})
  return evaluation.format_tables(rows, level_name)


def _normalised(score, random_score, human_score):
  return (score - random_score) / (human_score - random_score)


def test_an_atari_list_gets_table_4s_median_and_mean_over_its_games():
  scores = {suites.ATARI_LEVEL_PREFIX + game: suites.PAPER_ATARI57_IMPALA_MULTITASK_SCORES[game]
            for game in ATARI_GAMES}
  normalised = [_normalised(suites.PAPER_ATARI57_IMPALA_MULTITASK_SCORES[game],
                            *suites.ATARI57_RANDOM_HUMAN_SCORES[game]) for game in ATARI_GAMES]
  text = _tables(scores, ATARI_THREE)
  assert [line.split()[0] for line in text.splitlines()[2:5]] == list(scores)
  assert text.splitlines()[-1] == (
      f"Human-normalised score (Table 4's median and mean) over the 3 levels named: median "
      f"{100 * np.median(normalised):.2f}%, mean {100 * np.mean(normalised):.2f}%")
  # A game that could not run here: the scores cover the others, and say so.
  del scores["atari/breakout"]
  assert "(Table 4's median and mean) over 2 of the 3 levels named: median " in _tables(
      scores, ATARI_THREE)


def test_a_dmlab_list_gets_table_3s_mean_capped_over_its_levels_with_reference_scores():
  name = "rooms_watermaze,rooms_collect_good_objects_train,seekavoid_arena_01"
  tested = {"rooms_watermaze": "rooms_watermaze",
            "rooms_collect_good_objects_train": "rooms_collect_good_objects_test"}
  scores = {level: suites.PAPER_DMLAB30_IMPALA_SCORES[test] for level, test in tested.items()}
  normalised = [_normalised(scores[level], suites.DMLAB30_RANDOM_SCORES[test],
                            suites.DMLAB30_HUMAN_SCORES[test]) for level, test in tested.items()]
  text = _tables(dict(scores, seekavoid_arena_01=30.0), name)
  assert "rooms_collect_good_objects_test" in text  # Section 5.3.1: the held-out variant.
  assert text.splitlines()[-1] == (
      f"Mean capped human-normalised score (Table 3's measure) over 2 of the 3 levels named "
      f"(seekavoid_arena_01: no reference scores): "
      f"{100 * np.mean(np.minimum(normalised, 1.0)):.1f}%   (uncapped mean "
      f"{100 * np.mean(normalised):.1f}%, median {100 * np.median(normalised):.1f}%)")


def test_a_toy_list_gets_its_returns_and_says_it_has_no_normalised_score():
  text = _tables({"toy/lit_side": 7.0, "toy/lit_side_x1000": 7000.0}, TOY_TWO)
  assert "7000.00" in text and "median" not in text and "%" not in text.splitlines()[-1]
  assert text.splitlines()[-1].startswith(
      "No human-normalised score: toy/lit_side, toy/lit_side_x1000 have no human and random "
      "reference scores")


def test_the_built_in_suites_lines_are_unchanged():
  scores = {suites.ATARI_LEVEL_PREFIX + game: score
            for game, score in suites.PAPER_ATARI57_IMPALA_DEEP_SCORES.items()}
  assert _tables(scores, suites.ATARI57).splitlines()[-1] == (
      "Human-normalised score (Table 4): median 191.82%, mean 957.61%")


def test_a_toy_list_trains_one_agent_on_both_levels_and_tests_each(tmp_path):
  """Actors take the levels round-robin as a built-in suite's (2 actors: one each); test
  mode plays every level named, in its order, and writes no normalised summary."""
  config = config_lib.resolve(config_lib.ExperimentConfig(
      level_name=TOY_TWO, logdir=str(tmp_path), num_actors=2, total_environment_frames=400,
      test_num_episodes=2, log_secs=2.0))
  lines = []
  training.train(config, print_fn=lines.append)
  assert f"train: {TOY_TWO} (2 levels)" in lines
  trained = {r["level"] for r in runlog.of_kind(runlog.read_log(str(tmp_path)),
                                                runlog.EPISODE)}
  assert trained == set(toy_family.REWARD_SCALE_LEVELS)
  tested_lines = []
  tested = evaluation.evaluate(config_lib.resolve(config_lib.ExperimentConfig(
      mode="test", level_name=TOY_TWO, logdir=str(tmp_path), num_actors=2,
      test_num_episodes=2)), print_fn=tested_lines.append)
  assert [row["level"] for row in tested["rows"]] == list(toy_family.REWARD_SCALE_LEVELS)
  assert [row["episodes"] for row in tested["rows"]] == [2, 2]
  assert f"test: {TOY_TWO} (2 levels)" in tested_lines
  assert "\nNo human-normalised score: toy/lit_side, toy/lit_side_x1000 have no" in "\n".join(
      tested_lines)
  assert "mean" not in tested["summary"] and tested["summary"]["test_num_episodes"] == 2
