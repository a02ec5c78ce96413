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
are not observed: gym_spaces.Description.ignored_keys names them. Actions: Discrete(n) ->
base.EnvSpec(n, ...); MultiDiscrete(nvec) -> MultiDiscreteEnvSpec(nvec, ...); Box (A,) ->
ContinuousEnvSpec, the action clipped to the bounds only in the copy sent to gymnasium
(gym_spaces.Description.sent_action, action_bounds.py).

Episode ends. gymnasium tells a termination (the task ended: no value after it) from a
truncation (a time limit cut it: the return would have gone on). A termination sets `done` on
the next episode's first observation, which the learner turns into discount 0 (loss_terms:
gamma x (1 - done)). A truncation, by default (emit_truncation_step=True), emits the truncated
episode's last observation as a step of its own with `truncated` True (done False), and the
next step (its action ignored) starts the next episode with reward 0 and done True; the
learner cuts the transition leaving the truncated observation, so the return into it
bootstraps from its value (truncation.py, losses.py). emit_truncation_step=False ends a
truncated episode like a terminated one, as the MuJoCo tasks do (environments/mujoco.py).

Faults. A step() or reset() that raises is reported as EnvironmentStepFailed, naming the
user's error and the line of their code that raised it (base.innermost_frame_in); an
observation or reward of the wrong shape or dtype as base.EnvironmentOutputError, naming the
level, the field, the step and episode, what came and what the space promised (NaN and infinities
are the actor's check, base.output_problem, for every family). Both are base.EnvironmentFault:
actors replace the environment as they replace a dead environment process, drop the episode
in progress and log the failure; a level whose environments keep failing stops the run with
one message (actor.RestartPolicy).
"""
import difflib
import functools
import importlib

import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_spaces
from scalable_agent_tf2.environments import rendering

# The levels' names: "gym:<id>" (environments/families/gym.py is their family).
LEVEL_PREFIX = "gym:"


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
          with rendering.pygame_notice_silenced():  # MiniGrid imports pygame.
            importlib.import_module(package)
        except ImportError as error:
          raise ValueError(f"{LEVEL_PREFIX}{env_id} is registered by the {package!r} "
                           f"package, which does not import here ({error}); install it "
                           f"with `{install}` (docs/ENVIRONMENTS.md).") from error
  if module is not None:
    with rendering.pygame_notice_silenced():  # A user's package may import pygame too.
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


class EnvironmentCannotBeMade(base.EnvironmentFault, ValueError):
  """gymnasium.make raised: the environment's own constructor failed. A ValueError, so that the
  command line answers it with an `error:` line when the settings are resolved (the family
  reads the spaces then), and an environment fault, so that an actor that meets it retries
  and then reports the level (actor.RestartPolicy)."""


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
    with rendering.pygame_notice_silenced():  # Box2D's modules (CarRacing) import pygame.
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
    description = gym_spaces.Description(env_id, env.observation_space, env.action_space,
                                         env.unwrapped)
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
    self._description = gym_spaces.Description(self._id, self._env.observation_space,
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
    return base.EnvironmentOutputError(f"{self.level_name}: {self._where}: the environment "
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
    if kind == gym_spaces.INDEX:
      if array.shape != () or not np.issubdtype(array.dtype, np.integer):
        raise self._output_error(
            f"an observation of shape {array.shape} and dtype {array.dtype}; its Discrete "
            "space promises an integer")
      return np.int32(array)
    if array.shape != shape:
      raise self._output_error(
          f"an observation of shape {array.shape}; its observation space promises {shape}")
    if kind == gym_spaces.FRAME:
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

  def step(self, action):
    """Acts; resets by itself after an episode ends (base.py). With emit_truncation_step, the
    step after a truncated episode's last observation ignores its action and starts the next
    episode (reward 0, done True)."""
    self._check_open()
    sent = self._description.sent_action(action)
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
