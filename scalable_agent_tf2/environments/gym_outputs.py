"""What a gymnasium environment's reset() and step() return, checked before anything uses it
(gym_env.GymEnvironment reads every result through here).

    reader = OutputReader(description, env.observation_space)
    observation, info = checked_result("reset", env.reset(seed=0))  # or OutputProblem
    frame, instruction = reader.observation(observation)           # or OutputProblem

The results' form is gymnasium's API (gymnasium.Env): reset() returns (observation, info),
step() (observation, reward, terminated, truncated, info). The old Gym API's (gym before 0.26)
reset returned the observation alone and its step four values (one `done`); a method whose
body is `...` (docs/ENVIRONMENTS.md's skeleton) returns None. Each is an OutputProblem saying
what came and what gymnasium's API returns.

Observations are judged as gymnasium's own Box.contains judges them:
  * the shape, every time;
  * the dtype, every time: an array's dtype must cast safely to the declared one
    (np.can_cast), so float64 values from a float32 Box are named, not cast; a list is read
    in the declared dtype, as gymnasium reads it. Comparing two dtypes costs ~0.1 us;
  * a vector's values against the Box's finite bounds (CartPole's velocities have none) on an
    environment's first BOUNDS_CHECKED_FIRST observations, then on one in BOUNDS_CHECK_EVERY:
    the comparison cost 4.7 us against CartPole's 63 us step through GymEnvironment (timeit,
    a loaded 2-core machine), so checking every step would slow the cheapest environments by
    a tenth. A fault that puts values outside the Box from the first step (1e30 in [-1, 1])
    is named at once; one that starts later, or comes on a share p of the steps, within about
    BOUNDS_CHECK_EVERY / p steps.
Not checked here: NaN and infinities (the actor's check, every step, for every family:
base.output_problem); a frame's values (uint8 or bool: their dtype bounds them); a Discrete
observation's range (its dtype is: an integer).
"""
import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_spaces

# What gymnasium's reset() and step() return (gymnasium.Env), and how many values.
RESULTS = {"reset": ("(observation, info)", 2),
           "step": ("(observation, reward, terminated, truncated, info)", 5)}
# What the old Gym API's methods returned: what most wrong results are.
OLD_API = {"reset": "the old Gym API's reset() returned the observation alone",
           "step": "the old Gym API's step() returned 4 values, with one `done`"}

# A vector's bounds are checked on an environment's first observations, then on one in
# this many (the module docstring: why not on every one).
BOUNDS_CHECKED_FIRST, BOUNDS_CHECK_EVERY = 1000, 100

# Out-of-bounds entries a message names (then "and N more").
_ENTRIES_NAMED = 3


class OutputProblem(ValueError):
  """What is wrong with an environment's result, in words ("an observation of shape (3,); its
  observation space promises (2,)"); GymEnvironment adds the level, step and episode."""


def checked_result(method, result):
  """result, the tuple gymnasium's `method` ("reset" or "step") returns; OutputProblem
  saying what came instead."""
  form, size = RESULTS[method]
  if isinstance(result, tuple) and len(result) == size:
    return result
  if result is None:
    came = "None (does it end without `return`? a body of `...` returns None)"
  elif isinstance(result, tuple):
    came = f"a tuple of {len(result)} values" + (
        f" ({OLD_API[method]})" if (method, len(result)) == ("step", 4) else "")
  else:
    came = f"{_kind(result)} ({OLD_API[method]})" if method == "reset" else _kind(result)
  raise OutputProblem(f"{came}; gymnasium's {method}() returns {form}")


def _kind(value):
  """"a ndarray of shape (6,) and dtype float32", "a float": what a value is, in words."""
  if isinstance(value, np.ndarray):
    return f"a ndarray of shape {value.shape} and dtype {value.dtype}"
  return f"a {type(value).__name__}"


def definition_of(env, method):
  """"path:line in method" of `method`'s definition in the environment's own class (env:
  gymnasium's env.unwrapped), or None: where a result came from that no traceback shows."""
  code = getattr(getattr(type(env), method, None), "__code__", None)
  return f"{code.co_filename}:{code.co_firstlineno} in {method}" if code else None


class OutputReader:
  """An environment's observations and rewards as the project stores them, checked against
  its Description and declared observation space (the module docstring says what is
  checked, and how often)."""

  def __init__(self, description, observation_space):
    self._description = description
    self._vector_dtype = self._low = self._high = None
    self._observations = 0  # Vectors read: the bounds' schedule.
    if description.observation_kind == gym_spaces.VECTOR:  # A plain Box (O,).
      self._vector_dtype = np.dtype(observation_space.dtype)
      low = np.asarray(observation_space.low, np.float64)
      high = np.asarray(observation_space.high, np.float64)
      if np.isfinite(low).any() or np.isfinite(high).any():
        self._low, self._high = low, high

  def observation(self, observation):
    """(frame, instruction str): a Dict's image and text ('' without one), or the
    observation and ''; OutputProblem when it does not fit the declared space."""
    description = self._description
    if description.image_key is None:
      return self._frame(observation), ""
    if not isinstance(observation, dict) or description.image_key not in observation:
      raise OutputProblem(
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
      raise OutputProblem(
          f"{type(text).__name__} for the observation's {description.text_key!r}; its Dict "
          "space promises a text (str)")
    return frame, text

  def _frame(self, observation):
    """A plain observation (or a Dict's image) as the frame the project stores."""
    kind, shape = self._description.observation_kind, self._description.observation_shape
    if kind == gym_spaces.VECTOR:
      return self._vector(observation, shape)
    array = np.asarray(observation)
    if kind == gym_spaces.INDEX:
      if array.shape != () or not np.issubdtype(array.dtype, np.integer):
        raise OutputProblem(
            f"an observation of shape {array.shape} and dtype {array.dtype}; its Discrete "
            "space promises an integer")
      return np.int32(array)
    if array.shape != shape:
      raise OutputProblem(
          f"an observation of shape {array.shape}; its observation space promises {shape}")
    promised = np.bool_ if self._description.frame_is_bool else np.uint8
    if array.dtype != promised:
      raise OutputProblem(
          f"an observation of dtype {array.dtype}; its observation space promises "
          f"{np.dtype(promised).name} frames")
    return array.astype(np.uint8) if self._description.frame_is_bool else array

  def _vector(self, observation, shape):
    """A Box (O,) observation as float32 [O]: its shape and dtype checked, its bounds when
    due (BOUNDS_CHECKED_FIRST, BOUNDS_CHECK_EVERY)."""
    declared = self._vector_dtype
    if isinstance(observation, np.ndarray):
      array = observation
    else:  # A list or a number, read in the declared dtype (gymnasium's Box.contains).
      try:
        array = np.asarray(observation, dtype=declared)
      except (TypeError, ValueError, OverflowError):
        array = np.asarray(observation, dtype=object)
    if array.shape != shape:
      raise OutputProblem(
          f"an observation of shape {array.shape}; its observation space promises {shape}")
    if array.dtype != declared and not np.can_cast(array.dtype, declared):
      raise OutputProblem(
          f"an observation of dtype {array.dtype}; its observation space promises {declared} "
          f"(return {declared} values, e.g. np.asarray(observation, np.{declared}), or "
          f"declare the Box with dtype=np.{array.dtype})")
    self._observations += 1
    if self._low is not None and (self._observations <= BOUNDS_CHECKED_FIRST
                                  or self._observations % BOUNDS_CHECK_EVERY == 0):
      self._check_bounds(array)
    return array.astype(base.OBSERVATION_DTYPE)

  def _check_bounds(self, array):
    """OutputProblem naming the entries outside the Box's bounds (not NaN: the actor's
    finiteness check names it)."""
    if ((array >= self._low) & (array <= self._high)).all():
      return
    values = array.astype(np.float64)
    outside = np.flatnonzero((values < self._low) | (values > self._high))
    if not len(outside):  # Only NaN.
      return
    named = [f"{values[i]:g} at ({i},) (bounds [{self._low[i]:g}, {self._high[i]:g}])"
             for i in outside[:_ENTRIES_NAMED]]
    more = (f" and {len(outside) - _ENTRIES_NAMED} more" if len(outside) > _ENTRIES_NAMED
            else "")
    raise OutputProblem(f"an observation outside its Box's bounds: {', '.join(named)}{more}")

  @staticmethod
  def reward(reward):
    """The reward as a float; OutputProblem when it is not one number."""
    array = np.asarray(reward)
    if array.shape != () or not np.issubdtype(array.dtype, np.number):
      raise OutputProblem(
          f"a reward of shape {array.shape} and dtype {array.dtype}; a reward is one number")
    return float(array)
