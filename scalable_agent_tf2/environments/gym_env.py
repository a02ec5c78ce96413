"""One gymnasium environment behind base.Environment (the "gym:<id>" levels,
environments/families/gym.py).

    env = GymEnvironment("gym:Pendulum-v1", seed=1)
    env.spec           # base.ContinuousEnvSpec(1, low [1], high [1], (3,))
    env.initial()      # EnvOutput: reward 0, done True, observation.frame float32 [3] (raw)
    env.step(action)   # auto-resets after an episode ends (base.py's convention)

Observations: Box (O,) -> float32 [O] (raw; the actor's normalization.MeanStdFilter
normalises them, as the MuJoCo path does); Box (H, W, C) uint8 -> the frame as it is;
Discrete(n) -> int32 [] index; a Dict of an image (Box (H, W, C) uint8) and a text
(gymnasium's Text, or any space of str such as MiniGrid's MissionSpace: MiniGrid and BabyAI's
Dict(image, direction, mission)) -> the image as the frame and the text as the instruction, as
DeepMind Lab's INSTR (environments/dmlab.py): the actor hashes it into word ids
(policies.encode_group_instructions, language.hash_instructions) and the network encodes it
with the paper's instruction encoder (Figure 3). A Dict's other entries (MiniGrid's direction)
are not observed: Description.ignored_keys names them. Actions: Discrete(n) ->
base.EnvSpec(n, ...); Box (A,) -> ContinuousEnvSpec, the action clipped to the bounds only in
the copy sent to gymnasium (action_bounds.py).

Episode ends. gymnasium tells a termination (the task ended: no value after it) from a
truncation (a time limit cut it: the return would have gone on). A termination sets `done` on
the next episode's first observation, which the learner turns into discount 0 (loss_terms:
gamma x (1 - done)). A truncation, by default (emit_truncation_step=True), emits the truncated
episode's last observation as a step of its own with `truncated` True (done False), and the
next step (its action ignored) starts the next episode with reward 0 and done True; the
learner cuts the transition leaving the truncated observation, so the return into it
bootstraps from its value (truncation.py, batch_loss.py). emit_truncation_step=False ends a
truncated episode like a terminated one, as the MuJoCo tasks do (environments/mujoco.py).

Faults. A step() or reset() that raises is reported as EnvironmentStepFailed, naming the
user's error and the line of their code that raised it (base.innermost_frame_in); an
observation or reward of the wrong shape or dtype as EnvironmentOutputError, naming the level,
the field, the step and episode, what came and what the space promised (NaN and infinities
are the actor's check, base.output_problem, for every family). Both are base.EnvironmentFault:
actors replace the environment as they replace a dead environment process, drop the episode
in progress and log the failure; a level whose environments keep failing stops the run with
one message (actor.RestartPolicy).
"""
import difflib
import functools
import importlib
import sys

import numpy as np

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import rendering

# The levels' names: "gym:<id>" (environments/families/gym.py is their family).
LEVEL_PREFIX = "gym:"
VECTOR, FRAME, INDEX = "vector", "frame", "index"
# The spaces the "gym:" levels take (what an unsupported space's message lists).
SUPPORTED_OBSERVATIONS = ("Box of shape (O,) (a float vector)",
                          "Box of shape (H, W, C) and dtype uint8 or bool (image frames, "
                          "feature planes)",
                          "Discrete(n) (an index)",
                          "Dict of one image (Box (H, W, C) uint8) and at most one text "
                          "(gymnasium Text, or a space of str such as MiniGrid's "
                          "MissionSpace), other entries ignored (MiniGrid/BabyAI's "
                          "Dict(image, direction, mission))")
SUPPORTED_ACTIONS = ("Discrete(n)", "Box of shape (A,) (continuous actions)")
def gym_id(level_name):
  """"gym:CartPole-v1" -> "CartPole-v1"; "gym:pkg.envs:MyEnv-v0" -> "pkg.envs:MyEnv-v0"."""
  return level_name[len(LEVEL_PREFIX):]


def split_id(env_id):
  """(module or None, registered id) of gymnasium's "module:Id" form or a plain id."""
  module, _, name = env_id.rpartition(":")
  return (module or None), name


# Ids whose package registers them when imported, imported for a plain "gym:<id>" so that
# "gym:MiniGrid-Empty-5x5-v0" works as "gym:minigrid:MiniGrid-Empty-5x5-v0" does: (id prefix,
# package, how to install it). MiniGrid and BabyAI: not in requirements.txt, a benchmark-only
# package, installed without its dependencies (benchmarks/requirements-minigrid.txt says why;
# docs/ENVIRONMENTS.md).
MINIGRID_INSTALL = "pip install --no-deps -r benchmarks/requirements-minigrid.txt"
REGISTERING_PACKAGES = (("MiniGrid-", "minigrid", MINIGRID_INSTALL),
                        ("BabyAI-", "minigrid", MINIGRID_INSTALL))


def check_registered(env_id):
  """Imports a "module:Id"'s module (its own error if it fails) and refuses an id gymnasium
  does not know, naming the nearest registered ids."""
  import gymnasium  # pylint: disable=g-import-not-at-top
  module, name = split_id(env_id)
  if module is None and name not in gymnasium.registry:
    for prefix, package, install in REGISTERING_PACKAGES:
      if name.startswith(prefix):
        try:
          importlib.import_module(package)
        except ImportError as error:
          raise ValueError(f"{LEVEL_PREFIX}{env_id} is registered by the {package!r} "
                           f"package, which does not import here ({error}); install it "
                           f"with `{install}` (docs/ENVIRONMENTS.md).") from error
  if module is not None:
    import_registering_module(env_id, module)
  if name in gymnasium.registry:
    return
  close = difflib.get_close_matches(name, list(gymnasium.registry), n=3, cutoff=0.5)
  hint = (f" The nearest registered ids: {', '.join(LEVEL_PREFIX + c for c in close)}."
          if close else "")
  where = (f" after importing {module} (does it call gymnasium.register(id={name!r}, ...)?)"
           if module else "")
  raise ValueError(f"{LEVEL_PREFIX}{env_id}: gymnasium knows no environment {name!r}{where}."
                   f"{hint} `python -c \"import gymnasium; gymnasium.pprint_registry()\"` "
                   "lists them.")


def import_registering_module(env_id, module):
  """Imports the module of a "module:Id" level, which registers the id (gymnasium's own form).

  Raises:
    ModuleNotFoundError: the module itself is not found: the message names the level and how to
      make the module importable.
    Whatever the module raised while it ran (a module it imports that is missing included):
      the user's own error, unchanged.
  """
  try:
    importlib.import_module(module)
  except ModuleNotFoundError as error:
    if not error.name or not (module == error.name or module.startswith(error.name + ".")):
      raise  # Raised inside the user's module: its own message says what is missing.
    top = module.split(".")[0]
    raise ModuleNotFoundError(
        f"{LEVEL_PREFIX}{env_id}: cannot import {module!r}, the module that should register "
        f"{split_id(env_id)[1]!r} ({error}). The module must be importable where the run "
        f"starts: on PYTHONPATH (run from the directory that holds {top}/ or {top}.py, or set "
        f"PYTHONPATH to it) or an installed package (e.g. `pip install -e` of your project).",
        name=error.name) from None




class EnvironmentStepFailed(base.EnvironmentFault):
  """The environment's own step() or reset() raised: actors replace it as they replace a dead
  environment process (actor.ENVIRONMENT_FAILURES). The message names the level, the step and
  episode and the error, and where in the environment's code it was raised (user_frame)."""


# An observation or reward that breaks the environment's spaces (base.EnvironmentFault too).
EnvironmentOutputError = base.EnvironmentOutputError


class EnvironmentCannotBeMade(base.EnvironmentFault, ValueError):
  """gymnasium.make raised: the environment's own constructor failed. A ValueError, so that the
  command line answers it with an `error:` line when the settings are resolved (the family
  reads the spaces then), and an environment fault, so that an actor that meets it retries
  and then reports the level (actor.RestartPolicy)."""


class UnsupportedSpace(ValueError):
  """An observation or action space the project cannot act on."""


class Description:
  """What a gymnasium environment observes and does, read from its spaces.

  Attributes:
    observation_kind: VECTOR, FRAME or INDEX. observation_shape: (O,), (H, W, C) or ().
    has_instruction: the observation carries a text (a Dict's mission): the network takes the
      paper's instruction encoder (families/gym.py network_config).
    image_key, text_key: a Dict observation's entries read as the frame and the instruction
      (text_key None: a Dict without text); both None for a plain space.
    ignored_keys: a Dict's other entries, sorted (not observed; e.g. MiniGrid's direction).
    frame_max: FRAME only: the largest value of the image's entries (frame_max), None else.
    continuous_actions: Box actions. num_actions (Discrete) or action_size, action_low,
    action_high (Box).
  """

  def __init__(self, env_id, observation_space, action_space, unwrapped=None):
    from gymnasium import spaces  # pylint: disable=g-import-not-at-top
    self.env_id = env_id
    self.image_key = self.text_key = None
    self.ignored_keys = ()
    if isinstance(observation_space, spaces.Dict):
      self.image_key, self.text_key, self.ignored_keys = dict_keys(env_id, observation_space)
      self.observation_kind = FRAME
      self.observation_shape = tuple(int(n) for n in
                                     observation_space[self.image_key].shape)
    else:
      self.observation_kind, self.observation_shape = _observation_kind(
          env_id, observation_space, spaces)
    self.has_instruction = self.text_key is not None
    image_space = (observation_space[self.image_key] if self.image_key is not None
                   else observation_space)
    self.frame_is_bool = (self.observation_kind == FRAME
                          and image_space.dtype == np.dtype(np.bool_))
    self.frame_max = (None if self.observation_kind != FRAME else 1.0 if self.frame_is_bool
                      else frame_max(unwrapped, self.observation_shape))
    self.step_seconds = None  # Measured by describe() (measure_step_seconds).
    if isinstance(action_space, spaces.Discrete):
      self.continuous_actions, self.num_actions = False, int(action_space.n)
      self.action_start = int(action_space.start)
    elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
      self.continuous_actions = True
      self.action_size = int(action_space.shape[0])
      self.action_low = np.asarray(action_space.low, np.float32)
      self.action_high = np.asarray(action_space.high, np.float32)
    else:
      raise UnsupportedSpace(
          f"gym:{env_id}: its action space {action_space} is not supported; supported: "
          f"{', '.join(SUPPORTED_ACTIONS)}. Wrap the environment (e.g. "
          "gymnasium.wrappers.FlattenObservation, a discretising ActionWrapper) in your own "
          "package and register the wrapped one.")

  def spec(self):
    """base.EnvSpec (discrete actions) or base.ContinuousEnvSpec (Box actions)."""
    if self.continuous_actions:
      return base.ContinuousEnvSpec(action_size=self.action_size,
                                    action_low=self.action_low.copy(),
                                    action_high=self.action_high.copy(),
                                    frame_shape=self.observation_shape)
    return base.EnvSpec(num_actions=self.num_actions, frame_shape=self.observation_shape)


def frame_max(unwrapped, image_shape):
  """The largest value an image observation's uint8 entries take: 255 for pixels, and the
  largest index for MiniGrid and BabyAI's image, which is not pixels but the grid's encoding
  (object, colour and state indices of the agent's view, minigrid.core.constants: at most
  10). Divided by 255 as pixels, that image reached the torso about 25 times weaker than a
  frame does (benchmarks/RESULTS.md, "A dictionary observation"). MiniGrid's own
  RGBImgPartialObsWrapper renders pixels instead, of another shape: 255 again.

  Args:
    unwrapped: the environment's env.unwrapped, or None (then pixels).
    image_shape: (H, W, C) of the image.
  """
  minigrid_env = getattr(sys.modules.get("minigrid.minigrid_env"), "MiniGridEnv", None)
  if minigrid_env is not None and isinstance(unwrapped, minigrid_env):
    view = unwrapped.agent_view_size
    if tuple(image_shape) == (view, view, 3):  # Grid encoding, not rendered pixels.
      from minigrid.core import constants  # pylint: disable=g-import-not-at-top
      return float(max(*constants.OBJECT_TO_IDX.values(), *constants.COLOR_TO_IDX.values(),
                       *constants.STATE_TO_IDX.values()))
  return 255.0


# The dtypes of a frame the family takes: uint8 (pixels, MiniGrid's grid encoding) and bool
# (feature planes, e.g. MinAtar's 10x10xC), stored as uint8 (bool as 0 / 1: frame_max 1).
FRAME_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_))


def _is_image(space, spaces):
  """A Box (H, W, C) of uint8 or bool: an image frame."""
  return (isinstance(space, spaces.Box) and len(space.shape) == 3
          and space.dtype in FRAME_DTYPES)


def _is_text(space, spaces):
  """gymnasium's Text, or any space whose values are str (MiniGrid's MissionSpace is a
  Space[str] of dtype str, not a Text)."""
  dtype = getattr(space, "dtype", None)
  return isinstance(space, spaces.Text) or (dtype is not None and dtype.kind in "US")


def dict_keys(env_id, space):
  """(image key, text key or None, the other keys sorted) of a Dict observation space the
  project takes: exactly one image entry (Box (H, W, C) uint8) and at most one text entry;
  UnsupportedSpace naming the entries otherwise."""
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top
  images = [key for key, entry in space.spaces.items() if _is_image(entry, spaces)]
  texts = [key for key, entry in space.spaces.items() if _is_text(entry, spaces)]
  problem = None
  if len(images) != 1:
    problem = (f"it has {len(images)} image entries (Box (H, W, C) uint8)"
               + (f": {', '.join(map(repr, images))}" if images else ""))
  elif len(texts) > 1:
    problem = f"it has {len(texts)} text entries: {', '.join(map(repr, texts))}"
  if problem is not None:
    entries = ", ".join(f"{key!r}: {entry}" for key, entry in space.spaces.items())
    raise UnsupportedSpace(
        f"gym:{env_id}: its observation space Dict({entries}) is not supported: {problem}; "
        f"supported: {', '.join(SUPPORTED_OBSERVATIONS)}. Wrap the environment "
        "(e.g. gymnasium.wrappers.FilterObservation to keep one image and one text, "
        "FlattenObservation for vectors) in your own package and register the wrapped one.")
  text_key = texts[0] if texts else None
  ignored = tuple(sorted(key for key in space.spaces if key not in (images[0], text_key)))
  return images[0], text_key, ignored


def _observation_kind(env_id, space, spaces):
  """(kind, shape) of a supported observation space; UnsupportedSpace otherwise."""
  if isinstance(space, spaces.Discrete):
    return INDEX, ()
  if isinstance(space, spaces.Box):
    if len(space.shape) == 1:
      return VECTOR, tuple(int(n) for n in space.shape)
    if len(space.shape) == 3 and space.dtype in FRAME_DTYPES:
      return FRAME, tuple(int(n) for n in space.shape)
  raise UnsupportedSpace(
      f"gym:{env_id}: its observation space {space} is not supported; supported: "
      f"{', '.join(SUPPORTED_OBSERVATIONS)}. Wrap the environment (e.g. "
      "gymnasium.wrappers.FlattenObservation for Dict or Tuple observations) in your own "
      "package and register the wrapped one.")


def make(env_id, env_kwargs):
  """gymnasium.make(env_id, **env_kwargs), the id checked first (nearest ids named).

  Raises:
    ValueError: env_kwargs the environment does not take.
    EnvironmentCannotBeMade: the environment's own constructor raised.
  """
  import gymnasium  # pylint: disable=g-import-not-at-top
  check_registered(env_id)
  rendering.prepare_headless_rendering()  # Before a MuJoCo task imports mujoco (its render()).
  try:
    return gymnasium.make(env_id, **env_kwargs)
  except TypeError as error:
    if env_kwargs:
      raise ValueError(f"gym:{env_id} does not take --env_kwargs={env_kwargs}: {error}") \
          from error
    raise _cannot_be_made(env_id, error) from error
  except Exception as error:  # pylint: disable=broad-except
    raise _cannot_be_made(env_id, error) from error


def _cannot_be_made(env_id, error):
  """EnvironmentCannotBeMade naming the error and the line of the environment's code (the
  module of its registered entry point) that raised it."""
  import gymnasium  # pylint: disable=g-import-not-at-top
  entry_point = gymnasium.spec(split_id(env_id)[1]).entry_point
  module = (entry_point.split(":")[0] if isinstance(entry_point, str)
            else getattr(entry_point, "__module__", None))
  user_frame = base.innermost_frame_in(error, module) if module else None
  return EnvironmentCannotBeMade(base.sentence(
      f"gym:{env_id}: making the environment raised {type(error).__name__}: {error}"
      + (f" (at {user_frame})" if user_frame else "")), user_frame)


# How a Description measures a step's cost (families/gym.py runs_as chooses the actor layout
# by it): at most this many random steps, or this many seconds, after one reset.
MEASURED_STEPS, MEASURING_SECONDS = 50, 0.5


# A measurement that has not returned after this long is abandoned (a step that hangs): the
# level is then laid out as if unmeasured, and the run's own watchdog meets the hang.
MEASURING_TIMEOUT_SECONDS = 5.0


def measure_step_seconds(env, steps=MEASURED_STEPS, seconds=MEASURING_SECONDS, seed=0,
                         timeout=MEASURING_TIMEOUT_SECONDS):
  """The median wall time of one env.step with random actions (resetting at episode ends),
  over at most `steps` steps or `seconds`, after a reset, measured on a daemon thread; None if
  stepping raised (the run's own checks then say what is wrong) or did not return within
  `timeout` (the environment, stuck in its thread, must not be closed: `measured_cleanly`)."""
  import threading  # pylint: disable=g-import-not-at-top
  result = []
  thread = threading.Thread(target=lambda: result.append(_timed_steps(env, steps, seconds,
                                                                      seed)),
                            name="measure_step_seconds", daemon=True)
  thread.start()
  thread.join(timeout)
  return result[0] if result else None


def _timed_steps(env, steps, seconds, seed):
  """The median time of one step (each timed alone, resets excluded): on a loaded machine the
  thread is descheduled between steps, which a median of single steps leaves out and a mean
  over the loop counted (a 20 us step measured above the 2 ms threshold under a load of 20)."""
  import time  # pylint: disable=g-import-not-at-top
  try:
    env.action_space.seed(seed)
    env.reset(seed=seed)
    start, times = time.perf_counter(), []
    while len(times) < steps and time.perf_counter() - start < seconds:
      action = env.action_space.sample()
      before = time.perf_counter()
      _, _, terminated, truncated, _ = env.step(action)
      times.append(time.perf_counter() - before)
      if terminated or truncated:
        env.reset()
    return float(np.median(times))
  except Exception:  # pylint: disable=broad-except
    return None


@functools.lru_cache(maxsize=64)
def _describe(env_id, env_kwargs_json):
  import json  # pylint: disable=g-import-not-at-top
  env = make(env_id, json.loads(env_kwargs_json))
  try:
    description = Description(env_id, env.observation_space, env.action_space, env.unwrapped)
  except BaseException:
    env.close()
    raise
  description.step_seconds = measure_step_seconds(env)
  if description.step_seconds is not None:
    env.close()  # Else a step may still run in the abandoned measuring thread: left alone.
  return description


def describe(env_id, env_kwargs):
  """The Description of gym:<env_id> made with env_kwargs (made once per process)."""
  import json  # pylint: disable=g-import-not-at-top
  return _describe(env_id, json.dumps(env_kwargs, sort_keys=True))


class GymEnvironment(base.Environment):
  """See the module docstring."""

  def __init__(self, level_name, seed=0, env_kwargs=None, emit_truncation_step=True):
    """Makes the environment (gymnasium.make).

    Args:
      level_name: "gym:<id>" or "gym:<module>:<id>".
      seed: int >= 0; the first reset is reset(seed=seed), later resets continue gymnasium's
        generator, so a seed fixes every episode.
      env_kwargs: dict of keyword arguments for gymnasium.make.
      emit_truncation_step: emit a truncated episode's last observation as a step of its own
        with `truncated` True (truncation.py; the default); False: a truncation ends the
        episode like a termination.
    """
    if int(seed) != seed or seed < 0:
      raise ValueError(f"seed must be a non-negative integer (gymnasium's), got {seed!r}.")
    self.level_name = level_name
    self._id = gym_id(level_name)
    self._env = make(self._id, dict(env_kwargs or {}))
    self._description = Description(self._id, self._env.observation_space,
                                    self._env.action_space, self._env.unwrapped)
    self._spec = self._description.spec()
    self._seed, self._seeded = int(seed), False
    self._emit_truncation_step = emit_truncation_step
    self._pending_reset = False
    self._statistics = base.EpisodeStatistics()
    self._episode = 0  # The episode in progress, counted from 1 (its messages name it).
    self._where = base.position(1, 0)  # The output being made, for messages.
    self._closed = False

  @property
  def spec(self):
    return self._spec

  def _output_error(self, what):
    """EnvironmentOutputError: "<level>: step 3 of episode 1: the environment returned
    <what>."."""
    return EnvironmentOutputError(f"{self.level_name}: {self._where}: the environment "
                                  f"returned {what}.")

  def _call_environment(self, method, *args, **kwargs):
    """The gymnasium environment's `method` (step or reset); EnvironmentStepFailed naming
    the user's error and the line of their code that raised it when it raises."""
    try:
      return getattr(self._env, method)(*args, **kwargs)
    except Exception as error:  # pylint: disable=broad-except
      user_frame = base.innermost_frame_in(error, type(self._env.unwrapped).__module__)
      raise EnvironmentStepFailed(base.sentence(
          f"{self.level_name}: {self._where}: the environment's {method}() raised "
          f"{type(error).__name__}: {error}" + (f" (at {user_frame})" if user_frame else "")),
          user_frame) from error

  def _observation(self, observation):
    """(frame, instruction str) as the project stores them: a Dict's image and text (''
    without one), or the observation and ''; EnvironmentOutputError when it does not fit
    the declared space."""
    description = self._description
    if description.image_key is None:
      return self._frame(observation), ""
    if not isinstance(observation, dict) or description.image_key not in observation:
      raise self._output_error(
          f"an observation of type {type(observation).__name__}"
          + (f" with keys {sorted(observation)}" if isinstance(observation, dict) else "")
          + f"; its Dict space promises the key {description.image_key!r}")
    frame = self._frame(observation[description.image_key])
    if description.text_key is None:
      return frame, ""
    text = observation.get(description.text_key)
    if isinstance(text, bytes):
      text = text.decode("utf-8")
    if not isinstance(text, str):
      raise self._output_error(
          f"{type(text).__name__} for the observation's {description.text_key!r}; its Dict "
          "space promises a text (str)")
    return frame, text

  def _frame(self, observation):
    """A plain observation (or a Dict's image) as the frame the project stores."""
    kind, shape = self._description.observation_kind, self._description.observation_shape
    array = np.asarray(observation)
    if kind == INDEX:
      if array.shape != () or not np.issubdtype(array.dtype, np.integer):
        raise self._output_error(
            f"an observation of shape {array.shape} and dtype {array.dtype}; its Discrete "
            "space promises an integer")
      return np.int32(array)
    if array.shape != shape:
      raise self._output_error(
          f"an observation of shape {array.shape}; its observation space promises {shape}")
    if kind == FRAME:
      promised = np.bool_ if self._description.frame_is_bool else np.uint8
      if array.dtype != promised:
        raise self._output_error(
            f"an observation of dtype {array.dtype}; its observation space promises "
            f"{np.dtype(promised).name} frames")
      return array.astype(np.uint8) if self._description.frame_is_bool else array
    if not np.issubdtype(array.dtype, np.number):
      raise self._output_error(
          f"an observation of dtype {array.dtype}; its observation space promises numbers")
    return array.astype(base.OBSERVATION_DTYPE)

  def _reward(self, reward):
    array = np.asarray(reward)
    if array.shape != () or not np.issubdtype(array.dtype, np.number):
      raise self._output_error(
          f"a reward of shape {array.shape} and dtype {array.dtype}; a reward is one number")
    return float(array)

  def _reset(self):
    self._episode += 1
    self._where = base.position(self._episode, 0)
    if self._seeded:
      observation, _ = self._call_environment("reset")
    else:
      observation, _ = self._call_environment("reset", seed=self._seed)
      self._seeded = True
    return self._observation(observation)  # (frame, instruction)

  def _check_open(self):
    if self._closed:
      raise RuntimeError(f"GymEnvironment({self.level_name!r}) is closed.")

  def initial(self):
    self._check_open()
    self._statistics.restart()
    self._pending_reset = False
    self._episode = 0
    return base.make_env_output(0.0, True, *self._reset(), 0.0, 0)

  def _sent_action(self, action):
    if self._description.continuous_actions:
      action = base.check_continuous_action(action, self._spec.action_size)
      return action_bounds.clip_to_bounds(action, self._description.action_low,
                                          self._description.action_high)
    return base.check_action(action, self._spec.num_actions) + self._description.action_start

  def step(self, action):
    """Acts; resets by itself after an episode ends (base.py). With emit_truncation_step, the
    step after a truncated episode's last observation ignores its action and starts the next
    episode (reward 0, done True)."""
    self._check_open()
    sent = self._sent_action(action)
    if self._pending_reset:
      self._pending_reset = False
      return base.make_env_output(0.0, True, *self._reset(), *self._last_statistics)
    self._where = base.position(self._episode, self._statistics.episode_step + 1)
    observation, reward, terminated, truncated, _ = self._call_environment("step", sent)
    reward = self._reward(reward)
    frame, instruction = self._observation(observation)
    if truncated and not terminated and self._emit_truncation_step:
      self._last_statistics = self._statistics.record(reward, episode_ended=True)
      self._pending_reset = True
      return base.make_env_output(reward, False, frame, instruction, *self._last_statistics,
                                  truncated=True)
    ended = bool(terminated or truncated)
    episode_return, episode_step = self._statistics.record(reward, episode_ended=ended)
    if ended:
      frame, instruction = self._reset()
    return base.make_env_output(reward, ended, frame, instruction, episode_return,
                                episode_step)

  def render(self):
    """gymnasium's rgb_array picture, uint8 [H, W, 3] (rendering.render_rgb; base.CannotRender
    if it has none)."""
    self._check_open()
    return rendering.render_rgb(self._env, self.level_name)

  def render_fps(self):
    return rendering.render_fps_of(self._env)

  def close(self):
    if not self._closed:
      self._closed = True
      self._env.close()
