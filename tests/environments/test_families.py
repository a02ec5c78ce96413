"""The registry of environment families: every level name has exactly one family, found by its
prefix or its listed name; nothing is any family's fallback."""
import subprocess
import sys

import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments.families import base as family_base


@pytest.mark.parametrize("level_name, family_name", [
    ("atari/pong", "atari"), ("explore_goal_locations_small", "dmlab"),
    ("seekavoid_arena_01", "dmlab"), ("dmlab:nav_maze_random_goal_01", "dmlab"),
    ("toy/lit_side", "toy"), ("mujoco/hopper", "mujoco")])
def test_each_name_has_its_family(level_name, family_name):
  assert families.family_of(level_name).name == family_name


def test_every_listed_level_has_exactly_one_family():
  for name in families.listed_names():
    owners = [family.name for family in families.families() if family.owns(name)]
    assert len(owners) == 1, (name, owners)


@pytest.mark.parametrize("name", ["zzz", "atari/not_a_game", "toy/dark_side", "mujoco/ant"])
def test_unknown_names_are_refused_not_defaulted(name):
  with pytest.raises(ValueError, match="Unknown level name"):
    families.family_of(name)
  with pytest.raises(ValueError, match=families.LIST_LEVELS_COMMAND):
    config_lib.resolve(config_lib.ExperimentConfig(level_name=name))


def test_atari_vector_constants_are_atari_py_defaults():
  from scalable_agent_tf2.environments import atari  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.environments.families import atari as atari_family
  assert atari_family.VECTOR_FRAME_SIZE == atari.DEFAULT_FRAME_SIZE
  assert atari_family.VECTOR_NUM_ACTION_REPEATS == atari.DEFAULT_NUM_ACTION_REPEATS


def test_a_family_registers_with_a_prefix_of_its_own():
  class Taken(family_base.Family):
    name, prefixes = "taken", ("atari/",)
  with pytest.raises(ValueError, match="prefixes of its own"):
    families.register(Taken())


def test_the_registry_imports_no_heavy_module():
  code = ("import sys; from scalable_agent_tf2.environments import families; "
          "[f.listed_levels() for f in families.families()]; "
          "from scalable_agent_tf2.configuration import config; "
          "heavy = [m for m in ('tensorflow', 'gymnasium', 'ale_py', 'deepmind_lab', 'cv2', "
          "'mujoco') if m in sys.modules]; print(heavy)")
  out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                       text=True).stdout
  assert out.strip() == "[]"


def test_the_documented_example_family_registers_and_trains(tmp_path):
  from scalable_agent_tf2.run import training  # pylint: disable=g-import-not-at-top
  from tests import example_family  # pylint: disable=g-import-not-at-top
  families.register(example_family.FAMILY)
  try:
    with pytest.raises(ValueError, match="did you mean coin/show"):
      families.level_names("coin/shw")
    config = config_lib.config_from_argv([
        "--level_name=coin/show", f"--logdir={tmp_path}", "--num_actors=2",
        "--total_environment_frames=400", "--log_secs=60"])
    assert config.uses_environment_groups and config.batch_size == 8
    result = training.train(config, print_fn=lambda line: None)
    assert result.num_updates >= 3
  finally:
    families.unregister(example_family.FAMILY)
  with pytest.raises(ValueError, match="Unknown level name"):
    families.level_names("coin/show")
