"""Gymnasium environments of the kinds issue 42 names, for tests/environments/
test_gym_layout.py; importing this module registers them (gymnasium's "module:Id" form:
gym:tests.gym_user_package.costs:UserPlanes-v0). TensorFlow-free.

  UserPlanes-v0: MinAtar's kind of observation, bool feature planes (10, 10, 4), 3 actions;
    the reward is 1 when the action is the index of the lit plane's row third, so a policy
    must read the planes.
  UserSlowFrames-v0: 20 ms a step (a rendered frame's cost, CarRacing's order), uint8 frames
    (24, 24, 3) and Box actions of 2 dimensions.
"""
import time

import gymnasium
import numpy as np
from gymnasium import spaces

PLANES_SHAPE = (10, 10, 4)
SLOW_STEP_SECONDS = 0.02


class UserPlanes(gymnasium.Env):
  """See the module docstring; episodes of 10 steps."""

  def __init__(self):
    self.observation_space = spaces.Box(0, 1, PLANES_SHAPE, np.bool_)
    self.action_space = spaces.Discrete(3)
    self._row, self._steps = 0, 0

  def _observation(self):
    planes = np.zeros(PLANES_SHAPE, np.bool_)
    planes[self._row, :, 1] = True
    return planes

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._row, self._steps = int(self.np_random.integers(9)), 0
    return self._observation(), {}

  def step(self, action):
    reward = float(int(action) == self._row // 3)
    self._row, self._steps = int(self.np_random.integers(9)), self._steps + 1
    return self._observation(), reward, False, self._steps >= 10, {}


class UserSlowFrames(gymnasium.Env):
  """See the module docstring; episodes of 50 steps, reward -|action|^2."""

  def __init__(self):
    self.observation_space = spaces.Box(0, 255, (24, 24, 3), np.uint8)
    self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    self._steps = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._steps = 0
    return np.zeros((24, 24, 3), np.uint8), {}

  def step(self, action):
    time.sleep(SLOW_STEP_SECONDS)
    self._steps += 1
    frame = np.full((24, 24, 3), self._steps % 256, np.uint8)
    return frame, -float(np.sum(np.square(action))), False, self._steps >= 50, {}


gymnasium.register(id="UserPlanes-v0", entry_point=UserPlanes)
gymnasium.register(id="UserSlowFrames-v0", entry_point=UserSlowFrames)
