"""An in-process stand-in for the `deepmind_lab` module that enforces its contract exactly.

The contract (read from DeepMind Lab's python/dmlab_module.c and checked against a built
module; tests/environments/test_dmlab_real.py runs the real one): argument types, the errors the real module
raises, rewards summed over num_steps frames, fresh observation copies, no stepping or observing
after the episode ended or after close(), the level_cache protocol. Anything the adapter gets
wrong here would be wrong against the real module.

The fake world: every frame gives reward 1 while MOVE_BACK_FORWARD is +1 (so "Forward" earns
num_steps per agent step) and nothing otherwise; an episode lasts EPISODE_FRAMES frames. The
frame's pixels encode the reset seed and the frame count, so tests can see both.

Two failures of the real module, each switched on for chosen levels by an environment variable
(a comma-separated list of bare level names) so that it reaches environment processes too:
  * MISSING_MAP_LEVELS_VARIABLE: the level's map cannot be found. Like the real engine, the
    first reset prints "Didn't find map '<map>'" on stderr and ends the whole process with exit
    status 1: no Python exception, no reply.
  * LUA_ERROR_LEVELS_VARIABLE: the level's Lua script fails while the Lab is constructed; the
    real module raises RuntimeError('Failed to init environment - "<Lua error and stack>"').
Held-out levels (names ending in "_test") refuse to be constructed without
allowHoldOutLevels=true, with the real module's message (decorators/test_only.lua).
"""
import os
import sys

import numpy as np

EPISODE_FRAMES = 20
_ACTION_SPEC = [
    {"name": "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME", "min": -512, "max": 512},
    {"name": "LOOK_DOWN_UP_PIXELS_PER_FRAME", "min": -512, "max": 512},
    {"name": "STRAFE_LEFT_RIGHT", "min": -1, "max": 1},
    {"name": "MOVE_BACK_FORWARD", "min": -1, "max": 1},
    {"name": "FIRE", "min": 0, "max": 1},
    {"name": "JUMP", "min": 0, "max": 1},
    {"name": "CROUCH", "min": 0, "max": 1},
]
_MOVE_BACK_FORWARD = 3
_KNOWN_OBSERVATIONS = ("RGB_INTERLEAVED", "INSTR")
_LANGUAGE_INSTRUCTION = "pick the red balloon"
MISSING_MAP_LEVELS_VARIABLE = "FAKE_DEEPMIND_LAB_MISSING_MAP_LEVELS"
LUA_ERROR_LEVELS_VARIABLE = "FAKE_DEEPMIND_LAB_LUA_ERROR_LEVELS"
# What the real module prints before exit(1) when a map is missing (the engine's stderr).
MISSING_MAP_MESSAGE = "Didn't find map '%s'\n: No such file or directory\n"
_LUA_ERROR_MESSAGE = (
    'Failed to init environment - "...game_scripts/levels/%s.lua:18: module '
    "'factories.%s_factory' not found:\n\tno field package.preload['factories.%s_factory']"
    "\nstack traceback:\n\t[C]: in function 'require'\n\t...game_scripts/levels/%s.lua:18: "
    'in main chunk"')
_HELD_OUT_LEVEL_MESSAGE = (
    'Failed to init environment - "...game_scripts/decorators/test_only.lua:33: This level '
    "must only be used during evaluation. For training, use the *_train.lua version of the "
    'level. If you really want to use this level, add the setting "allowHoldOutLevels" = '
    '"true" explicitly\nstack traceback:\n\t[C]: in function \'assert\'"')

# Every Lab ever constructed, so that tests can inspect what the adapter asked for.
instances = []


def _bare_name(level):
  return level.rsplit("/", 1)[-1]


def _levels_in_variable(variable):
  """The bare level names listed in environment variable `variable`."""
  return {name.strip() for name in os.environ.get(variable, "").split(",") if name.strip()}


def missing_map_name(level):
  """The map name the stand-in reports missing for `level` (the real one names the map)."""
  return _bare_name(level) + "_map"


class Lab(object):
  """deepmind_lab.Lab with the real constructor signature and checks."""

  def __init__(self, level, observations, config=None, renderer="software", level_cache=None,
               temp_folder=None):
    config = {} if config is None else config  # The real module's default: no settings.
    if not isinstance(level, str):
      raise TypeError("level must be a str")
    if not isinstance(observations, list):
      raise TypeError("observations must be a list of str")
    for name in observations:
      if name not in _KNOWN_OBSERVATIONS:
        raise ValueError("Unknown observation '%s'." % name)
    if not isinstance(config, dict):
      raise TypeError("config must be a dict")
    for key, value in config.items():
      if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError("config keys and values must be str, got %r: %r" % (key, value))
    if renderer not in ("software", "hardware"):
      raise RuntimeError("Failed to connect RL API: unknown renderer %r" % (renderer,))
    if level_cache is not None and not (hasattr(level_cache, "fetch")
                                        and hasattr(level_cache, "write")):
      raise TypeError("level_cache must have fetch() and write()")
    bare_name = _bare_name(level)
    if bare_name in _levels_in_variable(LUA_ERROR_LEVELS_VARIABLE):
      raise RuntimeError(_LUA_ERROR_MESSAGE % (level, bare_name, bare_name, level))
    if bare_name.endswith("_test") and config.get("allowHoldOutLevels") != "true":
      raise RuntimeError(_HELD_OUT_LEVEL_MESSAGE)
    self.level = level
    self.observation_names = list(observations)
    self.config = {"fps": "60"}
    self.config.update(config)
    self.renderer = renderer
    self.level_cache = level_cache
    self.temp_folder = temp_folder
    self.width = int(self.config.get("width", "320"))
    self.height = int(self.config.get("height", "240"))
    self.reset_seeds = []
    self.steps_seen = []  # (action tuple, num_steps) of every step call.
    self.compiled_maps = 0
    self._frames = 0
    self._running = False
    self._closed = False
    self._seed = 0
    instances.append(self)

  def _fetch_or_compile_map(self):
    """What the real module does at reset: load the map from the cache or compile it."""
    if _bare_name(self.level) in _levels_in_variable(MISSING_MAP_LEVELS_VARIABLE):
      sys.stderr.write(MISSING_MAP_MESSAGE % missing_map_name(self.level))
      sys.stderr.flush()
      os._exit(1)  # pylint: disable=protected-access  # The engine's exit(1): no cleanup.
    if self.level_cache is None:
      self.compiled_maps += 1
      return
    key = "map-" + self.level.replace("/", "_")
    pk3_path = "%s/%s.pk3" % (self.temp_folder or "/tmp", key)
    if not self.level_cache.fetch(key, pk3_path):
      self.compiled_maps += 1
      with open(pk3_path, "wb") as f:
        f.write(b"compiled map of " + self.level.encode())
      self.level_cache.write(key, pk3_path)

  def reset(self, episode=-1, seed=None):
    if self._closed:
      raise RuntimeError("Environment is closed.")
    if not isinstance(episode, int) or isinstance(episode, bool):
      raise TypeError("episode must be an int")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
      raise TypeError("seed must be an int or None")
    self._fetch_or_compile_map()
    self._seed = seed if seed is not None else int(np.random.randint(2 ** 31 - 1))
    self.reset_seeds.append(self._seed)
    self._frames = 0
    self._running = True
    return True

  def step(self, action, num_steps=1):
    if not isinstance(action, np.ndarray) or action.dtype != np.intc or action.shape != (7,):
      raise ValueError("action must be a numpy array of dtype intc and shape (7,)")
    if not self._running:
      raise RuntimeError("Environment in wrong status to advance.")
    self.steps_seen.append((tuple(int(a) for a in action), num_steps))
    reward = 0.0
    for _ in range(num_steps):
      reward += 1.0 if action[_MOVE_BACK_FORWARD] == 1 else 0.0
      self._frames += 1
      if self._frames >= EPISODE_FRAMES:
        self._running = False
        break
    return reward

  def observations(self):
    if self._closed or not self._running:
      raise RuntimeError("Environment in wrong status for call to observations()")
    frame = np.zeros((self.height, self.width, 3), np.uint8)
    frame[..., 0] = self._seed % 256
    frame[..., 1] = self._frames % 256
    result = {}
    if "RGB_INTERLEAVED" in self.observation_names:
      result["RGB_INTERLEAVED"] = frame
    if "INSTR" in self.observation_names:
      result["INSTR"] = _LANGUAGE_INSTRUCTION if "/language_" in self.level else ""
    return result

  def is_running(self):
    return self._running and not self._closed

  def num_steps(self):
    return self._frames

  def action_spec(self):
    return [dict(entry) for entry in _ACTION_SPEC]

  def observation_spec(self):
    return [{"name": "RGB_INTERLEAVED", "shape": (self.height, self.width, 3),
             "dtype": np.uint8},
            {"name": "INSTR", "shape": (), "dtype": str}]

  def close(self):
    self._closed = True
    self._running = False
    return True
