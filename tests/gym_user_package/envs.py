"""A user's environment classes, registered with gymnasium when this module is imported.

    --level_name=gym:tests.gym_user_package.envs:UserTarget-v0

UserTarget-v0: move a point on a line towards a target (observation: position and target,
float32 [2]; action: a velocity in [-1, 1]; reward: minus the distance; 20 steps, then a
time-limit truncation). Tests make broken variants of it with --env_kwargs (a wrong
observation shape mid-episode, a step or a constructor that raises, NaN in a share of the
observations) and register others (unsupported spaces) from the classes here.
"""
import gymnasium
import numpy as np
from gymnasium import spaces

EPISODE_STEPS = 20


class UserTarget(gymnasium.Env):
  """See the module docstring. `bad_shape_at`: the step whose observation has a wrong shape;
  `raise_at`: the step that raises; `nan_at`: the step whose observation holds NaN (0: never);
  `nan_fraction`: the share of steps whose observation holds NaN, at random;
  `refuse_to_start`: the constructor raises."""

  def __init__(self, bad_shape_at=0, raise_at=0, nan_at=0, nan_fraction=0.0,
               refuse_to_start=False):
    if refuse_to_start:
      raise RuntimeError("the user's simulator licence has expired")
    self.observation_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
    self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    self._bad_shape_at, self._raise_at = bad_shape_at, raise_at
    self._nan_at, self._nan_fraction = nan_at, nan_fraction
    self._steps = 0
    self._position = self._target = 0.0

  def _observation(self):
    return np.array([self._position, self._target], np.float32)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._position = float(self.np_random.uniform(-1, 1))
    self._target = float(self.np_random.uniform(-1, 1))
    return self._observation(), {}

  def _draws_nan(self):
    # Draws only when asked to: the generator's other draws (the episodes) stay as they were.
    return self._nan_fraction > 0 and self.np_random.uniform() < self._nan_fraction

  def step(self, action):
    self._steps += 1
    if self._steps == self._raise_at:
      raise RuntimeError("the user's simulator lost its connection")
    self._position = float(np.clip(self._position + 0.1 * float(action[0]), -2, 2))
    observation = self._observation()
    if self._steps == self._bad_shape_at:
      observation = np.zeros(3, np.float32)
    if self._steps == self._nan_at or self._draws_nan():
      observation[0] = np.nan
    return observation, -abs(self._position - self._target), False, False, {}


class DictObservations(UserTarget):
  """Observations the project does not take (a Dict)."""

  def __init__(self):
    super().__init__()
    self.observation_space = spaces.Dict({"position": spaces.Box(-2, 2, (1,))})


class MultiBinaryActions(UserTarget):
  """Actions the project does not take (MultiBinary)."""

  def __init__(self):
    super().__init__()
    self.action_space = spaces.MultiBinary(3)


gymnasium.register(id="UserTarget-v0", entry_point=UserTarget,
                   max_episode_steps=EPISODE_STEPS)
gymnasium.register(id="UserDictObservations-v0", entry_point=DictObservations)
gymnasium.register(id="UserMultiBinary-v0", entry_point=MultiBinaryActions)
