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
user's error and the line of their code that raised it (base.innermost_frame_in; where none is
in the traceback, where their method is defined); a result that is not gymnasium's tuple (the
old Gym API's, or None), an observation or reward of the wrong shape or dtype, or a vector
outside its declared Box as base.EnvironmentOutputError, naming the level, the field, the step
and episode, what came and what the space promised (gym_outputs.py says what is checked and
how often; NaN and infinities are the actor's check, base.output_problem, for every family).
Both are base.EnvironmentFault: actors replace the environment as they replace a dead
environment process, drop the episode in progress and log the failure; a level whose
environments keep failing stops the run with one message (actor.RestartPolicy).
"""
import difflib
import functools
import importlib
import os

import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_outputs
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
  """Imports the module of a "module:Id" level, which registers the id (gymnasium's own form),
  from the import path or, failing that, from the current directory (as `python -m` and the
  interpreter's prompt do: `python experiment.py` puts the script's own directory on the
  path, not the one the command runs in, which holds the user's package).

  Raises:
    ModuleNotFoundError: the module itself is not found: the message names the level and how to
      make the module importable.
    Whatever the module raised while it ran (a module it imports that is missing included):
      the user's own error, unchanged.
  """
  try:
    importlib.import_module(module)
    return
  except ModuleNotFoundError as error:
    if not _is_the_module(error, module):
      raise  # Raised inside the user's module: its own message says what is missing.
    missing = error
  if _add_current_directory():
    try:
      importlib.import_module(module)
      return
    except ModuleNotFoundError as error:
      if not _is_the_module(error, module):
        raise
      missing = error
  top = module.split(".")[0]
  raise ModuleNotFoundError(
      f"{LEVEL_PREFIX}{env_id}: cannot import {module!r}, the module that should register "
      f"{split_id(env_id)[1]!r} ({missing}). The module must be importable where the run "
      f"starts: run from the directory that holds {top}/ or {top}.py (this one, "
      f"{os.getcwd()}, does not), set PYTHONPATH to it, or make it an installed package "
      "(e.g. `pip install -e` of your project).",
      name=missing.name) from None


def _is_the_module(error, module):
  """Whether ModuleNotFoundError `error` is about `module` or a package above it (not about a
  module it imports)."""
  return bool(error.name) and (module == error.name or module.startswith(error.name + "."))


def _add_current_directory():
  """Appends the current directory to sys.path (after everything installed, so that a folder
  here never hides a package); False when it is on the path already. Processes started
  later inherit the path (multiprocessing's spawn passes sys.path on)."""
  import sys  # pylint: disable=g-import-not-at-top
  here = os.getcwd()
  if any(os.path.abspath(path or os.curdir) == here for path in sys.path):
    return False
  sys.path.append(here)
  importlib.invalidate_caches()
  return True


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


# Describing a level closes the environment it measured on the main thread, before the run's
# watchdog exists: a close() that has not returned after this long is left running in its
# thread (a close that hangs), and one line says so, so that it cannot stall the command.
CLOSING_TIMEOUT_SECONDS = 5.0
_reported_closes = set()  # The levels whose close() that hangs was reported (once each).


def close_within(env, level_name, timeout=CLOSING_TIMEOUT_SECONDS):
  """env.close() on a daemon thread, waited for at most `timeout` seconds; an error it raised
  is raised here. One that has not returned by then is left behind, said once per level and
  process on stderr."""
  import sys  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  errors = []

  def close():
    try:
      env.close()
    except Exception as error:  # pylint: disable=broad-except
      errors.append(error)
  thread = threading.Thread(target=close, name="close " + level_name, daemon=True)
  thread.start()
  thread.join(timeout)
  if thread.is_alive():
    if level_name not in _reported_closes:
      _reported_closes.add(level_name)
      print(f"note: {level_name}: the environment's close() did not return within "
            f"{timeout:g} s; it is left running in a thread of its own and the command goes "
            "on (a close() that hangs holds what the environment holds until the process "
            "ends).", file=sys.stderr, flush=True)
  elif errors:
    raise errors[0]


@functools.lru_cache(maxsize=64)
def _describe(env_id, env_kwargs_json):
  import json  # pylint: disable=g-import-not-at-top
  env = make(env_id, json.loads(env_kwargs_json))
  try:
    description = gym_spaces.Description(env_id, env.observation_space, env.action_space,
                                         env.unwrapped)
  except BaseException:
    close_within(env, LEVEL_PREFIX + env_id)
    raise
  description.step_seconds = measure_step_seconds(env)
  if description.step_seconds is not None:
    # Else a step may still run in the abandoned measuring thread: left alone.
    close_within(env, LEVEL_PREFIX + env_id)
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
    self._reader = gym_outputs.OutputReader(self._description, self._env.observation_space)
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

  def _output_error(self, what, user_frame=None):
    """EnvironmentOutputError: "<level>: step 3 of episode 1: the environment returned
    <what>."."""
    return base.EnvironmentOutputError(base.sentence(
        f"{self.level_name}: {self._where}: the environment returned {what}"), user_frame)

  def _call_environment(self, method, *args, **kwargs):
    """The gymnasium environment's `method` (step or reset): its result, checked to be the
    tuple gymnasium's API returns (gym_outputs.checked_result; EnvironmentOutputError naming
    the method and where it is defined), or EnvironmentStepFailed naming the user's error
    and the line of their code that raised it."""
    try:
      result = getattr(self._env, method)(*args, **kwargs)
    except Exception as error:  # pylint: disable=broad-except
      raise self._step_failed(method, error) from error
    try:
      return gym_outputs.checked_result(method, result)
    except gym_outputs.OutputProblem as problem:
      defined = gym_outputs.definition_of(self._env.unwrapped, method)
      raise base.EnvironmentOutputError(base.sentence(
          f"{self.level_name}: {self._where}: the environment's {method}() returned "
          f"{problem}" + (f" (your {method}() is at {defined})" if defined else "")),
          defined) from None

  def _step_failed(self, method, error):
    """EnvironmentStepFailed for an error the environment's `method` raised, naming the
    innermost line of the user's code in its traceback or, where none is (gymnasium's
    wrappers raised about what it returned), where the user's method is defined."""
    unwrapped = self._env.unwrapped
    user_frame = base.innermost_frame_in(error, type(unwrapped).__module__)
    where = f" (at {user_frame})" if user_frame else ""
    if user_frame is None:
      user_frame = gym_outputs.definition_of(unwrapped, method)
      where = (f" (no line of your code in its traceback; your {method}() is at "
               f"{user_frame})" if user_frame else "")
    return EnvironmentStepFailed(base.sentence(
        f"{self.level_name}: {self._where}: the environment's {method}() raised "
        f"{type(error).__name__}: {error}{where}"), user_frame)

  def _read(self, read, *args):
    """read(*args) (the OutputReader's observation or reward), its OutputProblem as an
    EnvironmentOutputError naming the level, the step and the episode."""
    try:
      return read(*args)
    except gym_outputs.OutputProblem as problem:
      raise self._output_error(str(problem)) from None

  def _reset(self):
    self._episode += 1
    self._where = base.position(self._episode, 0)
    if self._seeded:
      observation, _ = self._call_environment("reset")
    else:
      observation, _ = self._call_environment("reset", seed=self._seed)
      self._seeded = True
    return self._read(self._reader.observation, observation)  # (frame, instruction)

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
    reward = self._read(self._reader.reward, reward)
    frame, instruction = self._read(self._reader.observation, observation)
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
