"""Every DMLab-30 level on the real deepmind_lab module, through the project's adapter.

Skipped when the module is not installed (it is not on PyPI: BUILD.md, "DeepMind Lab", says how
to build it). Each level is created, reset and stepped as actors do (frames, instructions,
rewards), in training and in test mode (section 5.3.1: the held-out variants); the two levels
with short episodes also play to an episode's end and into the next.

Tiers: by default, the levels whose maps are fixed or come from a small set of layouts, in
training mode, and the two held-out test variants; with `-m slow`, the maze levels (explore_*,
lasertag_*, skymaze_*: a new map is compiled at each reset, 10 s to 2 minutes each) in both
modes and the other levels in test mode. Compiled maps go to one level cache per session (the adapter's
level_cache_dir, which is the --level_cache_dir flag); point DMLAB_TEST_LEVEL_CACHE_DIR at a
directory to keep them between runs.

    python -m pytest tests/environments/test_dmlab_real.py -q             # Fixed-map levels.
    python -m pytest tests/environments/test_dmlab_real.py -q -m slow     # Maze levels.
"""
import ast
import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("deepmind_lab", reason="deepmind_lab is not installed; see BUILD.md")

# pylint: disable=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2 import environments
from scalable_agent_tf2.environments import dmlab
from scalable_agent_tf2.environments import suites

NUM_STEPS = 25  # Agent steps per level: 100 frames at 4 action repeats (Table D.3).
_MAZE_PREFIXES = ("explore_", "lasertag_", "skymaze_")
NATLAB_LEVELS = [name for name in suites.DMLAB30_TRAIN_LEVELS if name.startswith("natlab_")]
MAZE_LEVELS = [name for name in suites.DMLAB30_TRAIN_LEVELS if name.startswith(_MAZE_PREFIXES)]
FIXED_MAP_LEVELS = [
    name for name in suites.DMLAB30_TRAIN_LEVELS + tuple(suites.DMLAB_EXTRA_LEVELS)
    if name not in NATLAB_LEVELS and name not in MAZE_LEVELS]
# Agent steps in a whole episode: episodeLengthSeconds in the level's script (20 s and 12 s)
# x 60 frames/s (DeepMind Lab's default fps) / 4 action repeats.
SHORT_EPISODE_STEPS = {"seekavoid_arena_01": 300, "rooms_select_nonmatching_object": 180}
# DeepMind Lab's procedural stand-in for the Brady et al. (2008) images (datasetPath=dummy):
# it lets the two levels that need them run here; it is not the paper's task.
STAND_IN_DATASET = "dummy"
_MODES = [pytest.param(False, id="train"), pytest.param(True, id="test")]
# The two levels whose test variant is another level (section 5.3.1, released dmlab30.py).
HELD_OUT_LEVELS = [train for train, test in suites.DMLAB30_LEVEL_MAPPING.items() if train != test]


def _cases(levels, test_mode):
  return [pytest.param(name, test_mode, id="%s-%s" % (name, "test" if test_mode else "train"))
          for name in levels]


@pytest.fixture(scope="session")
def level_cache_dir(tmp_path_factory):
  return (os.environ.get("DMLAB_TEST_LEVEL_CACHE_DIR")
          or str(tmp_path_factory.mktemp("dmlab_level_cache")))


def create(level_name, level_cache_dir, test_mode=False, in_subprocess=True, **options):
  """A level's environment, in an environment process as actors run it by default: DeepMind
  Lab in a process that has TensorFlow loaded (the test runner's) crashes at reset or at exit,
  which would end the whole test run; a crash in a child only ends the child."""
  if level_name in suites.DMLAB30_LEVELS_NEEDING_DATASET:
    options.setdefault("dataset_path", STAND_IN_DATASET)
  return environments.create_environment(
      level_name, seed=1, test_mode=test_mode, in_subprocess=in_subprocess,
      level_cache_dir=level_cache_dir, **options)


def check_output(output, level_name):
  """What an actor relies on in every EnvOutput (Table D.3 frames, Figure 3 instructions)."""
  frame = output.observation.frame
  assert frame.shape == (dmlab.DEFAULT_HEIGHT, dmlab.DEFAULT_WIDTH, 3)
  assert frame.dtype == np.uint8
  instruction = output.observation.instruction
  assert isinstance(instruction, str)
  if level_name.startswith("language_"):
    assert instruction, "%s gave no instruction" % level_name
  else:
    assert instruction == ""
  assert isinstance(output.reward, float) and math.isfinite(output.reward)
  assert math.isfinite(output.episode_return)


def play_a_few_steps(env, level_name):
  """initial() and NUM_STEPS random actions; returns the frames seen."""
  first = env.initial()
  check_output(first, level_name)
  assert (first.done, first.episode_step, first.episode_return) == (True, 0, 0.0)
  frames = [first.observation.frame]
  episode_return = 0.0
  actions = np.random.default_rng(0).integers(env.spec.num_actions, size=NUM_STEPS)
  for step, action in enumerate(actions, start=1):
    output = env.step(int(action))
    check_output(output, level_name)
    episode_return += output.reward
    assert (output.done, output.episode_step) == (False, step)
    assert output.episode_return == pytest.approx(episode_return)
    frames.append(output.observation.frame)
  return frames


def run_level(level_name, test_mode, level_cache_dir):
  env = create(level_name, level_cache_dir, test_mode=test_mode)
  try:
    assert env.spec == (len(dmlab.DEFAULT_ACTION_SET),
                        (dmlab.DEFAULT_HEIGHT, dmlab.DEFAULT_WIDTH, 3))
    # The process plays the level's test variant in test mode (its description is the name
    # asked for; the level played is checked by the stand-in tests in test_dmlab.py).
    assert env.description == level_name
    frames = play_a_few_steps(env, level_name)
    # The picture changes as the agent moves: the renderer really draws the level.
    assert any(not np.array_equal(frames[0], frame) for frame in frames[1:])
  finally:
    env.close()


@pytest.mark.parametrize("level_name, test_mode", _cases(FIXED_MAP_LEVELS, False)
                         + _cases(HELD_OUT_LEVELS, True))
@pytest.mark.timeout(300)
def test_fixed_map_level(level_name, test_mode, level_cache_dir):
  run_level(level_name, test_mode, level_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("level_name, test_mode", _cases(
    [name for name in FIXED_MAP_LEVELS if name not in HELD_OUT_LEVELS], True))
@pytest.mark.timeout(300)
def test_fixed_map_level_in_test_mode(level_name, test_mode, level_cache_dir):
  """The evaluation settings (allowHoldOutLevels, mixerSeed) on levels tested on themselves."""
  run_level(level_name, test_mode, level_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("test_mode", _MODES)
@pytest.mark.parametrize("level_name", MAZE_LEVELS)
@pytest.mark.timeout(900)
def test_maze_level(level_name, test_mode, level_cache_dir):
  run_level(level_name, test_mode, level_cache_dir)


@pytest.mark.parametrize("test_mode", _MODES)
@pytest.mark.parametrize("level_name", NATLAB_LEVELS)
@pytest.mark.timeout(300)
def test_natlab_level(level_name, test_mode, level_cache_dir, capfd):
  """In an environment process: a build that lacks a level's map ends that process at reset.

  Such a level is skipped, naming the map, once the project has reported the death: the
  level, the cause in words, the exit status and the engine's last lines (also on stderr).
  """
  env = create(level_name, level_cache_dir, test_mode=test_mode, in_subprocess=True)
  try:
    try:
      play_a_few_steps(env, level_name)
    except environments.EnvironmentProcessDied as died:
      printed = capfd.readouterr().err
      missing = re.search(r"Didn't find map '([^']+)'", printed)
      assert missing, "%s: %s; the environment printed:\n%s" % (level_name, died, printed)
      assert str(died).startswith(
          "%s: DeepMind Lab could not find map '%s' and ended its process (exited with code 1"
          % (level_name, missing.group(1))), died
      assert "Its last output:\n  Didn't find map '%s'" % missing.group(1) in str(died)
      pytest.skip("%s: this DeepMind Lab build lacks its map '%s'; the engine ended the "
                  "environment process (exit 1) at reset" % (level_name, missing.group(1)))
  finally:
    env.close()


@pytest.mark.parametrize("level_name", sorted(SHORT_EPISODE_STEPS))
@pytest.mark.timeout(300)
def test_episode_ends_and_the_next_one_begins(level_name, level_cache_dir):
  env = create(level_name, level_cache_dir)
  try:
    play_whole_episode(env, level_name)
  finally:
    env.close()


@pytest.mark.timeout(300)
def test_in_an_environment_process_in_test_mode(level_cache_dir):
  level_name = "seekavoid_arena_01"
  env = create(level_name, level_cache_dir, test_mode=True, in_subprocess=True)
  try:
    assert isinstance(env, environments.EnvironmentProcess)
    play_whole_episode(env, level_name)
  finally:
    env.close()


def play_whole_episode(env, level_name):
  """Steps "Forward" until the episode ends, within its length; then one step of the next."""
  first = env.initial()
  check_output(first, level_name)
  episode_return = 0.0
  for step in range(1, SHORT_EPISODE_STEPS[level_name] + 1):  # noqa: B007 (read after)
    output = env.step(0)
    check_output(output, level_name)
    episode_return += output.reward
    if output.done:
      break
  assert output.done, "%s did not end within %d steps" % (level_name, step)
  assert (output.episode_step, output.episode_return) == (step, pytest.approx(episode_return))
  following = env.step(0)  # The adapter already reset: the new episode's first step.
  check_output(following, level_name)
  assert (following.done, following.episode_step) == (False, 1)
  assert following.episode_return == following.reward


_CACHE_CHECK = textwrap.dedent("""
    import sys
    from scalable_agent_tf2.environments import dmlab
    from tests.environments import test_dmlab_real
    fetched = []
    fetch = dmlab.LocalLevelCache.fetch
    def recording_fetch(cache, key, pk3_path):
      found = fetch(cache, key, pk3_path)
      fetched.append((key, found))
      return found
    dmlab.LocalLevelCache.fetch = recording_fetch
    for _ in range(2):  # Same level, same seed: the same compiled map.
      env = test_dmlab_real.create("language_select_described_object", sys.argv[1],
                                  in_subprocess=False)
      try:
        env.initial()
      finally:
        env.close()
    print(repr(fetched))
""")


@pytest.mark.timeout(300)
def test_second_environment_loads_the_map_from_the_level_cache(level_cache_dir):
  # In a process of its own: DeepMind Lab in the test runner's process has crashed it.
  result = subprocess.run([sys.executable, "-c", _CACHE_CHECK, level_cache_dir],
                          capture_output=True, text=True, timeout=280)
  assert result.returncode == 0, result.stderr[-3000:]
  fetched = ast.literal_eval(result.stdout.strip().splitlines()[-1])
  assert fetched and fetched[-1][1], fetched
  assert fetched[-1][0] in os.listdir(level_cache_dir)


def test_levels_that_cannot_start_as_asked_are_refused(level_cache_dir):
  """What the user sees today for the two mistakes the adapter or DeepMind Lab catch."""
  with pytest.raises(ValueError, match="psychlab_continuous_recognition needs the Brady"):
    environments.create_environment("psychlab_continuous_recognition", in_subprocess=False)
  # A held-out level for training: DeepMind Lab's own check, at construction.
  with pytest.raises(RuntimeError, match="Failed to init environment.*allowHoldOutLevels"):
    create("rooms_collect_good_objects_test", level_cache_dir)


_DRIVER_IMPORTING_TENSORFLOW = textwrap.dedent("""
    import sys
    import tensorflow  # At the top, as a benchmark or a user's driver script has it.
    sys.path.insert(0, {repo!r})
    if __name__ == "__main__":
      from tests.environments import test_dmlab_real
      env = test_dmlab_real.create("seekavoid_arena_01", {cache!r}, in_subprocess=True)
      try:
        test_dmlab_real.check_output(env.initial(), "seekavoid_arena_01")
        for _ in range(test_dmlab_real.NUM_STEPS):
          test_dmlab_real.check_output(env.step(0), "seekavoid_arena_01")
      finally:
        env.close()
      print("stepped")
""")


@pytest.mark.timeout(300)
def test_an_environment_process_started_by_a_script_that_imports_tensorflow(
    level_cache_dir, tmp_path):
  # TensorFlow loaded next to DeepMind Lab crashes the engine at reset (SIGSEGV); a spawned
  # child that re-imported its parent's script would load it.
  script = tmp_path / "driver.py"
  script.write_text(_DRIVER_IMPORTING_TENSORFLOW.format(
      repo=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), cache=level_cache_dir))
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=280)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split()[-1] == "stepped"
