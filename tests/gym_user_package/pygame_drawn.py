"""A user's environment that imports pygame when its module loads, as MiniGrid's does (its
window); importing this module registers UserPygameDrawn-v0
(gym:tests.gym_user_package.pygame_drawn:UserPygameDrawn-v0). TensorFlow-free."""
import gymnasium
import numpy as np
import pygame  # noqa: F401 (importing it prints the notice the command must silence)
from gymnasium import spaces


class UserPygameDrawn(gymnasium.Env):
  """A vector of 2 zeros, 2 actions, reward 1 for action 1, episodes of 5 steps."""

  def __init__(self):
    self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    self.action_space = spaces.Discrete(2)
    self._steps = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._steps = 0
    return np.zeros(2, np.float32), {}

  def step(self, action):
    self._steps += 1
    return np.zeros(2, np.float32), float(action == 1), self._steps >= 5, False, {}


gymnasium.register(id="UserPygameDrawn-v0", entry_point=UserPygameDrawn)
