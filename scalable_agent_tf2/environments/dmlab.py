"""DeepMind Lab levels through the `deepmind_lab` Python module (built by the user, BUILD.md).

Honours the module's contract (docs/ARCHITECTURE.md "DeepMind Lab"; facts read from
DeepMind Lab's python/dmlab_module.c): observations is a list, config maps str to str, actions
are np.intc arrays of shape (7,), step(action, num_steps) returns the reward summed over the
frames, and stepping a finished episode is an error, so the adapter resets at once.

Paper settings: the 9 actions of Table D.2; 96x72 RGB frames and 4 action repeats (Table D.3);
the language instruction ('INSTR') for the language levels (Figure 3). Test mode (section
5.3.1; released code, experiment.py create_environment): allowHoldOutLevels=true,
mixerSeed=0x600D5EED, and the held-out test variant of the two levels that have one.
"""
import difflib
import importlib
import importlib.util
import os
import shutil
import tempfile
import warnings

import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import suites

# Table D.2: the action set of all DeepMind Lab experiments. DeepMind Lab's action vector is
# [LOOK_LEFT_RIGHT_PIXELS_PER_FRAME, LOOK_DOWN_UP_PIXELS_PER_FRAME, STRAFE_LEFT_RIGHT,
#  MOVE_BACK_FORWARD, FIRE, JUMP, CROUCH].
DEFAULT_ACTION_SET = (
    (0, 0, 0, 1, 0, 0, 0),    # Forward
    (0, 0, 0, -1, 0, 0, 0),   # Backward
    (0, 0, -1, 0, 0, 0, 0),   # Strafe Left
    (0, 0, 1, 0, 0, 0, 0),    # Strafe Right
    (-20, 0, 0, 0, 0, 0, 0),  # Look Left
    (20, 0, 0, 0, 0, 0, 0),   # Look Right
    (-20, 0, 0, 1, 0, 0, 0),  # Forward + Look Left
    (20, 0, 0, 1, 0, 0, 0),   # Forward + Look Right
    (0, 0, 0, 0, 1, 0, 0),    # Fire
)
# Table D.3.
DEFAULT_WIDTH = 96
DEFAULT_HEIGHT = 72
DEFAULT_NUM_ACTION_REPEATS = 4
# Released code (experiment.py): the evaluation mixer seed; with allowHoldOutLevels it selects
# the held-out test episodes (DeepMind Lab docs/users/python_api.md).
TEST_MIXER_SEED = 0x600D5EED
RENDERERS = ("software", "hardware")
# DeepMind Lab's engine runs at 60 frames per second (its default "fps" setting): a video of
# agent steps of num_action_repeats frames plays in real time at 60 / num_action_repeats.
ENGINE_FPS = 60
# DeepMind Lab's path of the DMLab-30 levels (released code, experiment.py).
DMLAB30_LEVEL_DIRECTORY = "contributed/dmlab30/"
# Any DeepMind Lab level by its path under game_scripts/levels: "dmlab:<path>".
LEVEL_PREFIX = "dmlab:"
_OBSERVATIONS = ["RGB_INTERLEAVED", "INSTR"]  # A list: the module rejects tuples.
# Reset seeds are drawn from [0, 2**31 - 1) (released code, environments.PyProcessDmLab).
_MAX_RESET_SEED = 2 ** 31 - 1

MISSING_MODULE_MESSAGE = (
    "DeepMind Lab levels need the `deepmind_lab` Python module, which is not installed in this "
    "Python. It is not on PyPI: build it from DeepMind Lab's own repository and install the "
    "wheel, as described in BUILD.md, section \"DeepMind Lab\".")


def is_level_name(level_name):
  """Whether a name is DeepMind Lab's (valid or not): a level the paper names (the DMLab-30
  levels by their bare names, seekavoid_arena_01) or "dmlab:<path>"."""
  return level_name.startswith(LEVEL_PREFIX) or level_name in suites.DMLAB_LEVELS


def level_path(level_name):
  """DeepMind Lab's script path of a level: DMLab-30 levels live in contributed/dmlab30/,
  "dmlab:<path>" is <path> (a DMLab-30 name after the prefix is found there too)."""
  name = level_name[len(LEVEL_PREFIX):] if level_name.startswith(LEVEL_PREFIX) else level_name
  if name in suites.DMLAB_EXTRA_LEVELS:
    return suites.DMLAB_EXTRA_LEVELS[name]
  if name in suites.DMLAB_LEVELS:
    return DMLAB30_LEVEL_DIRECTORY + name
  return name


def test_level(level_name):
  """The level a level's test score is measured on (section 5.3.1): the held-out variant of
  the two DMLab-30 levels that have one, by the name's own form; every other level itself."""
  name = level_name[len(LEVEL_PREFIX):] if level_name.startswith(LEVEL_PREFIX) else level_name
  if name in suites.DMLAB30_LEVEL_MAPPING:
    mapped = suites.DMLAB30_LEVEL_MAPPING[name]
    return LEVEL_PREFIX + mapped if level_name.startswith(LEVEL_PREFIX) else mapped
  return level_name


def check_deepmind_lab_available(module_name="deepmind_lab"):
  """Fails at once, pointing to BUILD.md, when the module is missing (no import is done).

  Raises:
    ModuleNotFoundError: with MISSING_MODULE_MESSAGE.
  """
  if importlib.util.find_spec(module_name) is None:
    raise ModuleNotFoundError(MISSING_MODULE_MESSAGE, name=module_name)


def import_deepmind_lab(module_name="deepmind_lab"):
  """The deepmind_lab module (or a stand-in with the same contract, for tests)."""
  check_deepmind_lab_available(module_name)
  with warnings.catch_warnings():
    # deepmind_lab imports setuptools' pkg_resources, which warns that it is deprecated: once
    # per environment process (30 copies for DMLab-30), and nothing a user of this project
    # can act on (BUILD.md pins setuptools < 81, which still has it).
    warnings.filterwarnings("ignore", message=".*pkg_resources is deprecated.*")
    warnings.filterwarnings("ignore", message=".*the imp module is deprecated.*")
    return importlib.import_module(module_name)


def make_config(width=DEFAULT_WIDTH, height=DEFAULT_HEIGHT, dataset_path="", test_mode=False):
  """The `config` dict passed to deepmind_lab.Lab: every value a str (ints are TypeErrors).

  Returns:
    dict str -> str: width, height, logLevel, datasetPath when given, and in test mode
    allowHoldOutLevels and mixerSeed (released code, experiment.py create_environment).
  """
  config = {"width": str(width), "height": str(height), "logLevel": "WARN"}
  if dataset_path:
    config["datasetPath"] = str(dataset_path)
  if test_mode:
    config["allowHoldOutLevels"] = "true"
    config["mixerSeed"] = str(TEST_MIXER_SEED)
  return config


class LocalLevelCache(object):
  """A level cache on local disk (DeepMind Lab's `level_cache` protocol: fetch / write).

  DMLab-30 levels compile their maps at reset; with the cache a repeated reset loads the
  compiled .pk3 instead (seconds instead of up to ~30 s). Many environment processes share one
  directory, so writes go to a temporary file that is renamed into place.
  """

  def __init__(self, cache_dir):
    self._cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
    os.makedirs(self._cache_dir, exist_ok=True)

  def fetch(self, key, pk3_path):
    """Copies the cached map `key` to pk3_path; False when it is not cached."""
    path = os.path.join(self._cache_dir, key)
    if not os.path.isfile(path):
      return False
    shutil.copyfile(path, pk3_path)
    return True

  def write(self, key, pk3_path):
    """Stores the freshly compiled map pk3_path under `key`."""
    path = os.path.join(self._cache_dir, key)
    if os.path.isfile(path):
      return
    handle, temporary_path = tempfile.mkstemp(dir=self._cache_dir, prefix=".incoming-")
    os.close(handle)
    try:
      shutil.copyfile(pk3_path, temporary_path)
      os.replace(temporary_path, path)  # Atomic: readers never see half a file.
    except BaseException:
      os.unlink(temporary_path)
      raise


class DmLabEnvironment(base.Environment):
  """One DeepMind Lab level; frames uint8 [height, width, 3], instructions str."""

  def __init__(self, level_name, seed=0, test_mode=False,
               num_action_repeats=DEFAULT_NUM_ACTION_REPEATS, width=DEFAULT_WIDTH,
               height=DEFAULT_HEIGHT, dataset_path="", renderer="software",
               level_cache_dir=None, lab_module="deepmind_lab"):
    """Creates the level (DeepMind Lab compiles it at the first reset).

    Args:
      level_name: a DMLab-30 level by its bare name, e.g. "explore_goal_locations_small",
        or any DeepMind Lab level as "dmlab:<path>" (e.g. "dmlab:nav_maze_random_goal_01").
      seed: int; every episode is reset with a seed drawn from a generator seeded by it.
      test_mode: evaluate (section 5.3.1): the level's test variant, allowHoldOutLevels and
        mixerSeed 0x600D5EED.
      num_action_repeats: frames per agent step (Table D.3: 4), through Lab.step's num_steps.
      width, height: frame size (Table D.3: 96x72).
      dataset_path: directory of the Brady et al. (2008) images; required by the two levels
        in suites.DMLAB30_LEVELS_NEEDING_DATASET.
      renderer: "software" (OSMesa, no GPU) or "hardware" (EGL, GPU).
      level_cache_dir: directory for compiled maps (LocalLevelCache); None for no cache.
      lab_module: the module name to import, or the module itself (tests pass a stand-in).

    Raises:
      ValueError: unknown level, bad renderer, or dataset needed but not given.
      ModuleNotFoundError: deepmind_lab is not installed (see BUILD.md).
    """
    if not is_level_name(level_name):
      close = difflib.get_close_matches(level_name, suites.DMLAB_LEVELS, n=3, cutoff=0.6)
      if close:  # A mistyped DMLab-30 name.
        raise ValueError(f"Unknown level name {level_name!r}; did you mean "
                         f"{' or '.join(close)}?")
      raise ValueError(f"{level_name!r} is not a DeepMind Lab level: DMLab-30 levels by their "
                       "bare names, any other as dmlab:<level>.")
    if renderer not in RENDERERS:
      raise ValueError("renderer must be one of %s, got %r." % (RENDERERS, renderer))
    if test_mode:
      level_name = test_level(level_name)
    if (level_path(level_name).split("/")[-1] in suites.DMLAB30_LEVELS_NEEDING_DATASET
        and not dataset_path):
      raise ValueError(
          "%s needs the Brady et al. (2008) image dataset: pass dataset_path (the directory "
          "that holds it). BUILD.md, section \"DeepMind Lab\", says where to get it."
          % level_name)
    if isinstance(lab_module, str):
      lab_module = import_deepmind_lab(lab_module)
    self.level_name = level_name
    self._num_action_repeats = num_action_repeats
    self._actions = [np.array(action, dtype=np.intc) for action in DEFAULT_ACTION_SET]
    self._seed_generator = np.random.default_rng(seed)
    self._lab = lab_module.Lab(
        level_path(level_name), list(_OBSERVATIONS),
        config=make_config(width, height, dataset_path, test_mode), renderer=renderer,
        level_cache=LocalLevelCache(level_cache_dir) if level_cache_dir else None)
    self._frame_shape = (height, width, 3)
    self._last_frame = None
    self._statistics = base.EpisodeStatistics()
    self._closed = False

  @property
  def spec(self):
    return base.EnvSpec(num_actions=len(self._actions), frame_shape=self._frame_shape)

  def _reset(self):
    self._lab.reset(seed=int(self._seed_generator.integers(0, _MAX_RESET_SEED)))

  def _observation(self):
    """(frame uint8 [H, W, 3], instruction str); the module returns fresh copies."""
    observations = self._lab.observations()
    self._last_frame = observations["RGB_INTERLEAVED"]  # For render().
    return observations["RGB_INTERLEAVED"], observations["INSTR"]

  def initial(self):
    self._reset()
    self._statistics.restart()
    frame, instruction = self._observation()
    return base.make_env_output(0.0, True, frame, instruction, 0.0, 0)

  def step(self, action):
    action = base.check_action(action, len(self._actions))
    reward = self._lab.step(self._actions[action], num_steps=self._num_action_repeats)
    done = not self._lab.is_running()
    episode_return, episode_step = self._statistics.record(reward, episode_ended=done)
    if done:  # A finished episode cannot be stepped or observed: start the next one now.
      self._reset()
    frame, instruction = self._observation()
    return base.make_env_output(reward, done, frame, instruction, episode_return,
                                episode_step)

  def render(self):
    """The last RGB observation, uint8 [height, width, 3] (what the agent sees: 96x72 in the
    paper, Table D.3)."""
    if self._last_frame is None:
      raise base.CannotRender(f"{self.level_name}: nothing observed yet (call initial()).")
    return np.array(self._last_frame, np.uint8)

  def render_fps(self):
    return ENGINE_FPS / self._num_action_repeats

  def close(self):
    if not self._closed:
      self._closed = True
      self._lab.close()
