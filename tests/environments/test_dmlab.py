"""The DeepMind Lab adapter against the contract of the deepmind_lab module.

These tests use tests/fake_deepmind_lab.py, a stand-in that enforces the module's contract and
plays its failures, so they run on every machine; tests/environments/test_dmlab_real.py runs every level on
the real module when it is installed.
"""
import importlib.util
import os

import numpy as np
import pytest

from scalable_agent_tf2 import environments
from scalable_agent_tf2.environments import dmlab
from scalable_agent_tf2.environments import process
from scalable_agent_tf2.environments import suites
from tests import fake_deepmind_lab

# Table D.2, written out again so that a typo in dmlab.py cannot hide.
TABLE_D2 = [
    (0, 0, 0, 1, 0, 0, 0), (0, 0, 0, -1, 0, 0, 0), (0, 0, -1, 0, 0, 0, 0),
    (0, 0, 1, 0, 0, 0, 0), (-20, 0, 0, 0, 0, 0, 0), (20, 0, 0, 0, 0, 0, 0),
    (-20, 0, 0, 1, 0, 0, 0), (20, 0, 0, 1, 0, 0, 0), (0, 0, 0, 0, 1, 0, 0)]
FORWARD, BACKWARD = 0, 1
STEPS_PER_EPISODE = fake_deepmind_lab.EPISODE_FRAMES // dmlab.DEFAULT_NUM_ACTION_REPEATS


def make_env(level_name="explore_goal_locations_small", **kwargs):
  kwargs.setdefault("lab_module", fake_deepmind_lab)
  env = dmlab.DmLabEnvironment(level_name, **kwargs)
  return env, fake_deepmind_lab.instances[-1]


class TestFakeEnforcesTheContract:
  """The stand-in is only useful if it rejects what the real module rejects."""

  def test_constructor_argument_types(self):
    with pytest.raises(TypeError):
      fake_deepmind_lab.Lab("l", ("RGB_INTERLEAVED",))
    with pytest.raises(ValueError, match="Unknown observation 'RGB'"):
      fake_deepmind_lab.Lab("l", ["RGB"])
    with pytest.raises(TypeError):
      fake_deepmind_lab.Lab("l", ["RGB_INTERLEAVED"], config={"width": 96})
    with pytest.raises(RuntimeError):
      fake_deepmind_lab.Lab("l", ["RGB_INTERLEAVED"], renderer="opengl")

  def test_step_and_observation_rules(self):
    lab = fake_deepmind_lab.Lab("l", ["RGB_INTERLEAVED", "INSTR"])
    with pytest.raises(TypeError):
      lab.reset(seed=np.int64(3))
    lab.reset(seed=3)
    with pytest.raises(ValueError):
      lab.step(np.zeros(7, np.int64))
    with pytest.raises(ValueError):
      lab.step(np.zeros(6, np.intc))
    forward = np.array(TABLE_D2[FORWARD], np.intc)
    assert lab.step(forward, num_steps=50) == fake_deepmind_lab.EPISODE_FRAMES
    assert not lab.is_running()
    with pytest.raises(RuntimeError, match="wrong status to advance"):
      lab.step(forward)
    with pytest.raises(RuntimeError):
      lab.observations()

  def test_held_out_levels_need_allow_hold_out_levels(self):
    with pytest.raises(RuntimeError, match="Failed to init environment.*allowHoldOutLevels"):
      fake_deepmind_lab.Lab("contributed/dmlab30/rooms_watermaze_test", ["RGB_INTERLEAVED"])
    fake_deepmind_lab.Lab("contributed/dmlab30/rooms_watermaze_test", ["RGB_INTERLEAVED"],
                          config={"allowHoldOutLevels": "true"})

  def test_failures_are_switched_on_per_level(self, monkeypatch):
    monkeypatch.setenv(fake_deepmind_lab.LUA_ERROR_LEVELS_VARIABLE, "a, rooms_watermaze")
    with pytest.raises(RuntimeError, match='Failed to init environment - ".*rooms_watermaze'):
      fake_deepmind_lab.Lab("contributed/dmlab30/rooms_watermaze", ["RGB_INTERLEAVED"])
    fake_deepmind_lab.Lab("contributed/dmlab30/rooms_keys_doors_puzzle", ["RGB_INTERLEAVED"])
    # The process-ending failure is checked in an environment process (TestLevelThatCannotRun):
    # here only that an unlisted level is untouched by it.
    monkeypatch.setenv(fake_deepmind_lab.MISSING_MAP_LEVELS_VARIABLE, "natlab_fixed_large_map")
    assert fake_deepmind_lab.Lab("contributed/dmlab30/natlab_varying_map_regrowth",
                                 ["RGB_INTERLEAVED"]).reset(seed=1)


class TestDmLabEnvironment:

  def test_spec_and_lab_arguments(self):
    env, lab = make_env(renderer="hardware")
    assert env.spec == (9, (72, 96, 3))
    assert lab.level == "contributed/dmlab30/explore_goal_locations_small"
    assert lab.observation_names == ["RGB_INTERLEAVED", "INSTR"]
    assert lab.renderer == "hardware"
    assert lab.config["width"] == "96" and lab.config["height"] == "72"
    assert "allowHoldOutLevels" not in lab.config and "mixerSeed" not in lab.config

  def test_seekavoid_arena_of_tables_1_and_2_is_at_the_root_of_dmlab_levels(self):
    env, lab = make_env(level_name="seekavoid_arena_01")
    assert lab.level == "seekavoid_arena_01"
    assert suites.reference_scores("seekavoid_arena_01") is None
    with pytest.raises(ValueError, match="not a DMLab-30 level"):
      suites.normalized_scores({"seekavoid_arena_01": 1.0}, "dmlab30")

  def test_actions_are_table_d2_with_four_repeats(self):
    env, lab = make_env()
    env.initial()
    for action in range(9):
      env.step(action)
    assert [action for action, _ in lab.steps_seen] == TABLE_D2
    assert all(num_steps == 4 for _, num_steps in lab.steps_seen)

  def test_rewards_are_summed_over_repeats_and_episode_ends_with_reset(self):
    env, lab = make_env(seed=7)
    first = env.initial()
    assert (first.reward, first.done, first.episode_return, first.episode_step) == (0, True, 0, 0)
    assert first.observation.frame.shape == (72, 96, 3)
    assert first.observation.frame.dtype == np.uint8
    outputs = [env.step(FORWARD) for _ in range(STEPS_PER_EPISODE)]
    assert [o.reward for o in outputs] == [4.0] * STEPS_PER_EPISODE
    assert [o.done for o in outputs] == [False] * (STEPS_PER_EPISODE - 1) + [True]
    last = outputs[-1]
    # The ended episode's statistics, and the new episode's first frame (0 frames played).
    assert (last.episode_return, last.episode_step) == (20.0, STEPS_PER_EPISODE)
    assert last.observation.frame[0, 0, 1] == 0
    assert len(lab.reset_seeds) == 2 and lab.reset_seeds[0] != lab.reset_seeds[1]
    assert last.observation.frame[0, 0, 0] == lab.reset_seeds[1] % 256
    following = env.step(BACKWARD)
    assert (following.reward, following.done) == (0.0, False)
    assert (following.episode_return, following.episode_step) == (0.0, 1)

  def test_seed_makes_reset_seeds_reproducible(self):
    seeds = []
    for seed in (1, 1, 2):
      env, lab = make_env(seed=seed)
      env.initial()
      for _ in range(STEPS_PER_EPISODE):
        env.step(FORWARD)
      seeds.append(lab.reset_seeds)
    assert seeds[0] == seeds[1]
    assert seeds[0] != seeds[2]

  def test_test_mode_configuration(self):
    env, lab = make_env("rooms_collect_good_objects_train", test_mode=True)
    assert lab.level == "contributed/dmlab30/rooms_collect_good_objects_test"
    assert env.level_name == "rooms_collect_good_objects_test"
    assert lab.config["allowHoldOutLevels"] == "true"
    assert lab.config["mixerSeed"] == str(0x600D5EED) == "1611489005"
    _, lab = make_env("rooms_watermaze", test_mode=True)
    assert lab.level == "contributed/dmlab30/rooms_watermaze"

  def test_instruction_on_language_levels_only(self):
    env, _ = make_env("language_select_described_object")
    assert env.initial().observation.instruction == "pick the red balloon"
    env, _ = make_env("rooms_watermaze")
    assert env.initial().observation.instruction == ""

  def test_dataset_path_required_by_the_two_psychlab_levels(self):
    with pytest.raises(ValueError, match="Brady.*dataset_path.*BUILD.md"):
      make_env("psychlab_continuous_recognition")
    _, lab = make_env("psychlab_continuous_recognition", dataset_path="/data/brady")
    assert lab.config["datasetPath"] == "/data/brady"
    _, lab = make_env("psychlab_visual_search")  # Needs no dataset.
    assert "datasetPath" not in lab.config

  def test_level_cache_compiles_each_map_once(self, tmp_path):
    cache_dir = str(tmp_path / "cache")
    first, first_lab = make_env(level_cache_dir=cache_dir, seed=1)
    first.initial()
    second, second_lab = make_env(level_cache_dir=cache_dir, seed=2)
    second.initial()
    assert first_lab.compiled_maps == 1
    assert second_lab.compiled_maps == 0
    assert os.listdir(cache_dir) == ["map-contributed_dmlab30_explore_goal_locations_small"]

  def test_errors(self):
    env, _ = make_env()
    env.initial()
    with pytest.raises(ValueError, match="out of range.*9 actions"):
      env.step(9)
    with pytest.raises(ValueError, match="renderer"):
      make_env(renderer="opengl")
    with pytest.raises(ValueError, match="Unknown level name 'explore_goal_locations'.*"
                       "explore_goal_locations_small"):
      make_env("explore_goal_locations")
    with pytest.raises(ValueError, match="not a DeepMind Lab level"):
      make_env("atari/pong")


class TestFactory:

  def test_missing_module_fails_at_once_pointing_to_build_md(self):
    with pytest.raises(ModuleNotFoundError, match="BUILD.md"):
      environments.create_environment("explore_goal_locations_small",
                                      lab_module="no_such_deepmind_lab_module")

  @pytest.mark.skipif(importlib.util.find_spec("deepmind_lab") is not None,
                      reason="deepmind_lab is installed")
  def test_default_module_missing_here(self):
    with pytest.raises(ModuleNotFoundError, match="BUILD.md"):
      environments.create_environment("explore_goal_locations_small")

  def test_every_dmlab30_level_is_accepted(self):
    for level_name in suites.SUITES["dmlab30"] + suites.DMLAB30_TEST_LEVELS:
      constructor, kwargs = environments.environment_constructor(
          level_name, lab_module="tests.fake_deepmind_lab")
      assert constructor is dmlab.DmLabEnvironment and kwargs["level_name"] == level_name

  @pytest.mark.timeout(60)
  def test_in_a_subprocess(self):
    # The stand-in is imported by name in the child (spawned with this process's sys.path).
    with environments.create_environment("language_select_located_object", seed=3,
                                         lab_module="tests.fake_deepmind_lab") as env:
      assert env.spec == (9, (72, 96, 3))
      first = env.initial()
      assert first.observation.instruction == "pick the red balloon"
      outputs = [env.step(FORWARD) for _ in range(STEPS_PER_EPISODE)]
      assert outputs[-1].done and outputs[-1].episode_return == 20.0
      assert outputs[-1].observation.frame.shape == (72, 96, 3)
      assert outputs[-2].observation.frame[0, 0, 1] == 4 * (STEPS_PER_EPISODE - 1)


class TestLevelThatCannotRun:
  """What a user sees when DeepMind Lab cannot run a level (the real module's failures,
  played by the stand-in in an environment process as actors use it)."""

  @pytest.mark.timeout(60)
  def test_missing_map_ends_the_environment_process_at_the_first_reset(self, monkeypatch,
                                                                        capfd):
    monkeypatch.setenv(fake_deepmind_lab.MISSING_MAP_LEVELS_VARIABLE, "natlab_fixed_large_map")
    env = environments.create_environment("natlab_fixed_large_map", seed=1,
                                          lab_module="tests.fake_deepmind_lab")
    assert env.spec == (9, (72, 96, 3))  # Construction succeeds: the map is loaded at reset.
    map_name = fake_deepmind_lab.missing_map_name("natlab_fixed_large_map")
    with pytest.raises(environments.EnvironmentProcessDied) as raised:
      env.initial()
    # The level, the cause in words, the exit code and the engine's last lines.
    assert str(raised.value).startswith(
        "natlab_fixed_large_map: DeepMind Lab could not find map '%s' and ended its process "
        "(exited with code 1; environment process 'DmLabEnvironment', pid %d). Its last "
        "output:\n  Didn't find map '%s'" % (map_name, env.pid, map_name))
    # The engine's own line still reaches the console, prefixed with its level.
    assert ("[natlab_fixed_large_map] Didn't find map '%s'" % map_name
            in capfd.readouterr().err)
    with pytest.raises(RuntimeError, match="is closed"):  # Released: no zombie, no hang.
      env.step(0)

  @pytest.mark.timeout(60)
  def test_lua_error_at_construction_is_raised_in_the_caller(self, monkeypatch):
    monkeypatch.setenv(fake_deepmind_lab.LUA_ERROR_LEVELS_VARIABLE, "rooms_watermaze")
    with pytest.raises(RuntimeError, match='Failed to init environment - "'
                       r'\.\.\.game_scripts/levels/contributed/dmlab30/rooms_watermaze\.lua'
                       ) as raised:
      environments.create_environment("rooms_watermaze", lab_module="tests.fake_deepmind_lab")
    assert isinstance(raised.value.__cause__, process.RemoteTraceback)
    assert "environments/dmlab.py" in raised.value.__cause__.traceback_text  # The child's stack.

  @pytest.mark.timeout(60)
  def test_held_out_level_in_training_mode_is_refused_by_deepmind_lab(self):
    # The held-out variant needs test_mode (allowHoldOutLevels); training on it is refused by
    # DeepMind Lab's own check, at construction, in the caller.
    with pytest.raises(RuntimeError, match="must only be used during evaluation"):
      environments.create_environment("rooms_collect_good_objects_test",
                                      lab_module="tests.fake_deepmind_lab")
    with pytest.raises(RuntimeError, match="allowHoldOutLevels"):
      make_env("rooms_exploit_deferred_effects_test")
