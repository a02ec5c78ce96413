"""A gymnasium environment whose actions are MultiDiscrete, for
tests/environments/test_gym_multi_discrete.py; importing this module registers it.
TensorFlow-free: an environment process imports it through gymnasium's "module:Id" form
(--level_name=gym:tests.gym_multi_discrete_envs:TestChoices-v0).

TestChoices-v0: each step shows a target per choice (the choices' one-hots, float32 [5]) and
pays 1 for each choice whose index hits its target. The second choice's indices start at 1
(gymnasium's `start`), so an action the project did not shift by it is refused.
"""
import gymnasium
import numpy as np
from gymnasium import spaces

NVEC = (3, 2)
START = (0, 1)
EPISODE_STEPS = 10


class Choices(gymnasium.Env):
  """See the module docstring."""

  def __init__(self):
    self.observation_space = spaces.Box(0.0, 1.0, (sum(NVEC),), np.float32)
    self.action_space = spaces.MultiDiscrete(NVEC, start=START)
    self._targets = np.zeros(len(NVEC), np.int64)
    self._steps = 0

  def _observation(self):
    return np.concatenate([np.eye(n, dtype=np.float32)[target]
                           for n, target in zip(NVEC, self._targets)])

  def _draw_targets(self):
    self._targets = np.array([self.np_random.integers(n) for n in NVEC])

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._steps = 0
    self._draw_targets()
    return self._observation(), {}

  def step(self, action):
    if action not in self.action_space:
      raise ValueError(f"{action!r} is not in {self.action_space}")
    hits = np.asarray(action) - np.asarray(START) == self._targets
    self._steps += 1
    self._draw_targets()
    return self._observation(), float(hits.sum()), self._steps >= EPISODE_STEPS, False, {}


gymnasium.register(id="TestChoices-v0", entry_point=Choices)
