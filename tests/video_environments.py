"""Toy environments for tests/run/test_videos.py, in a module without TensorFlow: environment
processes import the module that defines their environment's class (the test module imports
TensorFlow, which would cost every environment process its import)."""
import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import toy


class CountingEnvironment(toy.LitSideEnvironment):
  """The toy level whose picture says which step of which episode it shows: episode e (from
  0, per environment) lasts 3 + e % 3 steps; the picture at its step k is grey 40 * k (red 60
  * e), so a frame out of place shows."""

  def __init__(self, seed=0):
    super().__init__(seed=seed)
    self._episode = 0
    self._step = 0

  def initial(self):
    self._episode, self._step = 0, 0
    return super().initial()

  def step(self, action):
    output = super().step(action)
    self._step += 1
    done = self._step >= 3 + self._episode % 3
    if done:
      self._episode, self._step = self._episode + 1, 0
    return output._replace(done=done, episode_step=self._step if not done else
                           3 + (self._episode - 1) % 3)

  def render(self):
    picture = np.full((20, 20, 3), 40 * self._step, np.uint8)
    picture[..., 0] = 60 * (self._episode % 4)
    return picture


class BlindEnvironment(toy.LitSideEnvironment):
  """The toy level without a picture (base.Environment's render)."""
  render = base.Environment.render
