"""The one interface every environment offers the actor, in process or in a subprocess.

Semantics follow the released code (deepmind/scalable_agent: environments.PyProcessDmLab and
FlowEnvironment):
  * `initial()` starts an episode and returns its first EnvOutput: reward 0, done True,
    episode_return 0, episode_step 0.
  * `step(action)` acts and returns the next EnvOutput. When the action ended the episode, the
    environment resets itself at once: the returned observation is the FIRST of the new
    episode, done is True, and episode_return / episode_step are the statistics of the episode
    that just ended (including this step's reward). Otherwise they are the running statistics.
  * Rewards are unclipped (clipping is the learner's: losses.clip_rewards; Table G.1, Figure D.1).

No TensorFlow here (docs/ARCHITECTURE.md "Rooms"): environments run in cheap subprocesses.
"""
import abc
import collections
import math
import numbers
import os
import sys
import traceback

import numpy as np

from scalable_agent_tf2.environments import normalization
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

# What the actor needs before it builds the network. num_actions: int, size of the discrete
# action set. frame_shape: (H, W, C) of the uint8 frames (DMLab (72, 96, 3); Atari (84, 84, 4)),
# or (O,) of a float32 vector, () of an int32 index (gymnasium environments, gym_env.py).
EnvSpec = collections.namedtuple("EnvSpec", "num_actions frame_shape")

# Continuous-control environments (environments/mujoco.py) instead: action_size A, the action
# space's bounds action_low / action_high float32 [A] (actions are clipped to them only when sent
# to the simulator, action_bounds.py), frame_shape (O,) of a float32 observation vector.
ContinuousEnvSpec = collections.namedtuple(
    "ContinuousEnvSpec", "action_size action_low action_high frame_shape")

# Several discrete choices per step (gymnasium's MultiDiscrete, gym_spaces.py): nvec, a tuple of
# K numbers of choices, an action being K indices, action[k] in [0, nvec[k]) (a categorical
# policy per component, agent/distributions.MultiCategoricalFamily); frame_shape as EnvSpec's.
MultiDiscreteEnvSpec = collections.namedtuple("MultiDiscreteEnvSpec", "nvec frame_shape")

# Frames are uint8 (structures.Observation); continuous-control observations float32.
FRAME_DTYPE = np.uint8
OBSERVATION_DTYPE = np.float32


class LevelCannotRun(RuntimeError):
  """A level's environment cannot be started or reset here, even after restarts.

  Attributes:
    level_name: the level.
    reason: what happened, in words, with the environment's last output when there is one
      (e.g. "DeepMind Lab could not find map 'natlab_forage_ltm_day' and ended its process").
  """

  def __init__(self, level_name, reason):
    super().__init__(f"{level_name}: {reason}")
    self.level_name = level_name
    self.reason = reason


class LevelKeepsFailing(LevelCannotRun):
  """A level's environments started, then failed again and again while they ran (a crash loop:
  more of an actor's steps failed than actor.RestartPolicy allows): a fault of the environment
  itself, not of this machine's set-up. The reason ends with the last failure."""


class EnvironmentFault(RuntimeError):
  """An environment misbehaved while it ran: its step() or reset() raised, or an output broke
  its spec (EnvironmentOutputError). Actors replace it as they replace a dead environment
  process (actor.ENVIRONMENT_FAILURES), dropping the episodes in progress; a level whose
  environments keep failing stops the run (LevelKeepsFailing).

  Attributes:
    user_frame: where the environment's own code raised, "path:line in function"
      (innermost_frame_in), or None.
  """

  def __init__(self, message, user_frame=None):
    super().__init__(message)
    self.user_frame = user_frame

  def __reduce__(self):  # Crosses an environment process's pipe with its user_frame.
    return type(self), (str(self), self.user_frame)


class EnvironmentOutputError(EnvironmentFault, ValueError):
  """An environment returned an observation or reward of the wrong shape or dtype, or one
  holding NaN or an infinity. The message names the level, the field, the step and episode,
  what came and what the spec promised."""


def innermost_frame_in(error, module_name):
  """"path:line in function" of the innermost frame of error's traceback that lies in the
  top-level package (or the script) module_name belongs to, or None.

  The rule that finds a user's own line: an environment class defined in my_package.envs
  points to the deepest frame in my_package's files, past gymnasium's wrappers and this
  project's calls above it and past the libraries (numpy, ...) it called below it. A
  gymnasium environment of gymnasium's own (gym:CartPole-v1) points into gymnasium.
  """
  roots = _source_roots(module_name)
  for frame in reversed(traceback.extract_tb(error.__traceback__)):
    path = os.path.abspath(frame.filename)
    if any(path == root or path.startswith(root + os.sep) for root in roots):
      return f"{frame.filename}:{frame.lineno} in {frame.name}"
  return None


def _source_roots(module_name):
  """Where module_name's top-level package lies: its directory (its __init__.py's), the
  directories of a namespace package (a folder without __init__.py, as docs/ENVIRONMENTS.md's
  my_package/: it has __path__ but no __file__), or the file of a top-level module (a
  script's __main__); () when it has none."""
  top = sys.modules.get(module_name.split(".")[0])
  path = getattr(top, "__file__", None)
  if path is not None:
    path = os.path.abspath(path)
    return (os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path,)
  return tuple(os.path.abspath(entry) for entry in getattr(top, "__path__", ()))


def sentence(text):
  """text ending with exactly one full stop (an error's own message may end with one)."""
  return text.rstrip().rstrip(".") + "."


def position(episode, step, ended=False):
  """Where an output came in an environment's life, in words: "step 7 of episode 2" (episodes
  counted from 1, steps within one from 1; step 0 is initial()'s first observation). An
  output that `ended` the episode carries its last reward and the next episode's first
  observation (the auto-reset, module docstring)."""
  if ended:
    return (f"step {step} of episode {episode}, its last (the observation is episode "
            f"{episode + 1}'s first)")
  return f"step {step} of episode {episode}"


def output_problem(env_output, spec):
  """What is wrong with env_output's observation or reward against spec, in words, or None:
  layout_problem's, then NaN or an infinity in the frame or the reward."""
  problem = layout_problem(env_output.observation.frame, spec)
  if problem is not None:
    return problem
  frame = np.asarray(env_output.observation.frame)
  if frame.dtype.kind == "f" and not np.isfinite(frame).all():
    return (f"an observation holding {normalization.non_finite_entries(frame)}; its spec "
            f"promises finite numbers ({_promise(spec)})")
  if not _is_finite_number(env_output.reward):
    return f"a reward of {env_output.reward!r}; a reward is one finite number"
  return None


def layout_problem(frame, spec):
  """What is wrong with an observation's frame against spec, in words, or None: it must be of
  spec.frame_shape and frame_dtype(spec) (a vector's real numbers of any dtype: the
  observation filter turns them into float32). Cheap when nothing is wrong: every output of
  every step passes here (actor.EnvironmentGroup)."""
  frame = np.asarray(frame)
  if frame.shape != tuple(spec.frame_shape) or not _dtype_fits(frame.dtype, frame_dtype(spec)):
    return (f"an observation of dtype {frame.dtype} and shape {list(frame.shape)}; its spec "
            f"promises {_promise(spec)}")
  return None


def _promise(spec):
  """"float32 [11]": what spec promises an observation's frame is."""
  return f"{np.dtype(frame_dtype(spec)).name} {list(spec.frame_shape)}"


def _is_finite_number(value):
  try:
    return math.isfinite(float(value))
  except (TypeError, ValueError):
    return False


def _dtype_fits(dtype, promised):
  """uint8 frames and int32 indices exactly (the trajectory's tensors are of these dtypes);
  vectors any real numbers (the observation filter turns them into float32)."""
  if promised == OBSERVATION_DTYPE:
    return dtype.kind in "iuf"
  return dtype == promised


class CannotRender(RuntimeError):
  """An environment cannot show a picture of its state (Environment.render): it has none, or
  the renderer it needs is not available here. The message says which and, where there is
  one, what to do. Test mode names the level and plays on without its videos."""


# A Discrete observation (gym_env.py) is its index.
INDEX_DTYPE = np.int32


def frame_dtype(spec):
  """The dtype of observation.frame: uint8 for frames [H, W, C]; float32 for observation
  vectors [O] (a ContinuousEnvSpec's, or a discrete-action environment's, gym_env.py); int32
  for a Discrete observation's index (shape ())."""
  if isinstance(spec, ContinuousEnvSpec) or len(spec.frame_shape) == 1:
    return OBSERVATION_DTYPE
  if len(spec.frame_shape) == 0:
    return INDEX_DTYPE
  return FRAME_DTYPE


def check_action(action, num_actions):
  """The action as a Python int, or a clear error.

  Args:
    action: an integer (Python or numpy) in [0, num_actions).
    num_actions: int.

  Returns:
    int.

  Raises:
    ValueError: not an integer, or out of range.
  """
  if isinstance(action, (bool, np.bool_)) or not isinstance(action, numbers.Integral):
    raise ValueError("Action must be an integer in [0, %d), got %r of type %s."
                     % (num_actions, action, type(action).__name__))
  action = int(action)
  if not 0 <= action < num_actions:
    raise ValueError("Action %d is out of range: this environment has %d actions (0..%d)."
                     % (action, num_actions, num_actions - 1))
  return action


def check_continuous_action(action, action_size):
  """The action as a new float32 [action_size] array, or a clear error. Not clipped: bounds are
  the environment's business (action_bounds.clip_to_bounds).

  Raises:
    ValueError: not numeric, or not of shape [action_size].
  """
  try:
    checked = np.array(action, dtype=np.float32)
  except (TypeError, ValueError):
    raise ValueError("Action must be a float vector of %d numbers, got %r." % (
        action_size, action)) from None
  if checked.shape != (action_size,):
    raise ValueError("Action has shape %s; this environment takes a vector of %d numbers (one "
                     "per action dimension)." % (checked.shape, action_size))
  return checked


def check_multi_discrete_action(action, nvec):
  """The action as a new int64 [K] array of indices, action[k] in [0, nvec[k]), or a clear
  error (gymnasium's MultiDiscrete takes int64).

  Raises:
    ValueError: not integers, not of shape [K], or an index out of its range.
  """
  checked = np.asarray(action)
  if checked.shape != (len(nvec),) or not np.issubdtype(checked.dtype, np.integer):
    raise ValueError("Action must be %d integer indices (one per choice of %s), got %r." % (
        len(nvec), list(nvec), action))
  out_of_range = [k for k, (index, n) in enumerate(zip(checked, nvec)) if not 0 <= index < n]
  if out_of_range:
    raise ValueError("Action %s is out of range at %s: this environment's choices have %s "
                     "options each." % (checked.tolist(), out_of_range, list(nvec)))
  return checked.astype(np.int64)


def check_action_for_spec(action, spec):
  """check_action for an EnvSpec, check_continuous_action for a ContinuousEnvSpec,
  check_multi_discrete_action for a MultiDiscreteEnvSpec."""
  if isinstance(spec, ContinuousEnvSpec):
    return check_continuous_action(action, spec.action_size)
  if isinstance(spec, MultiDiscreteEnvSpec):
    return check_multi_discrete_action(action, spec.nvec)
  return check_action(action, spec.num_actions)


class EpisodeStatistics(object):
  """Running return and length of the current episode (the released code's StepOutputInfo).

  episode_step counts agent steps (each is num_action_repeats frames).
  """

  def __init__(self):
    self.episode_return = 0.0
    self.episode_step = 0

  def record(self, reward, episode_ended):
    """Adds one step; returns (episode_return, episode_step) to report for it.

    Args:
      reward: float, this step's (unclipped) reward.
      episode_ended: bool, this step ended the episode; the statistics restart afterwards.

    Returns:
      (float, int): the statistics including this step.
    """
    self.episode_return += reward
    self.episode_step += 1
    reported = (self.episode_return, self.episode_step)
    if episode_ended:
      self.episode_return = 0.0
      self.episode_step = 0
    return reported

  def restart(self):
    """Forgets the running episode (at `initial()`)."""
    self.episode_return = 0.0
    self.episode_step = 0


def make_env_output(reward, done, frame, instruction, episode_return, episode_step,
                    truncated=False):
  """EnvOutput of plain Python / numpy values (structures.EnvOutput).

  Args:
    reward: float (unclipped). done: bool. frame: uint8 [H, W, C]. instruction: str ('' when
    the level has none). episode_return: float. episode_step: int. truncated: bool, this is
    a truncated episode's last observation (environments/truncation.py); False for an
    environment that cannot truncate.
  """
  return EnvOutput(reward=float(reward), done=bool(done),
                   observation=Observation(frame=frame, instruction=instruction),
                   episode_return=float(episode_return), episode_step=int(episode_step),
                   truncated=bool(truncated))


class Environment(abc.ABC):
  """An environment as the actor sees it. Usable as a context manager (closes on exit)."""

  @property
  @abc.abstractmethod
  def spec(self):
    """EnvSpec (number of actions, frame shape), ContinuousEnvSpec (action bounds) or
    MultiDiscreteEnvSpec (numbers of choices)."""

  @abc.abstractmethod
  def initial(self):
    """Starts a new episode; returns its first EnvOutput (done True, reward 0)."""

  @abc.abstractmethod
  def step(self, action):
    """Acts (int in [0, spec.num_actions), float [A] for a ContinuousEnvSpec, int [K] for a
    MultiDiscreteEnvSpec); returns the next EnvOutput (auto-reset on done)."""

  @abc.abstractmethod
  def close(self):
    """Releases the environment; further calls are errors. Safe to call twice."""

  def render(self):
    """A picture of the environment's state now, for videos (test mode's
    --record_video_episodes): RGB uint8 [H, W, 3].

    "Now" is the state of the last EnvOutput's observation: after a step that ended an
    episode, the new episode's first (the environment has reset itself). Rendering changes
    nothing the agent observes, so a recorded test plays the same episodes as one that is not.

    Raises:
      CannotRender: the environment has no picture, or cannot draw one here (this default).
    """
    raise CannotRender(f"{type(self).__name__} has no picture of its state (it does not "
                       "implement render()).")

  def render_fps(self):
    """Agent steps per second of the environment's own time (a video shows its episodes at
    the speed they happen); None when it has no such time (videos.DEFAULT_FPS)."""
    return None

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()
