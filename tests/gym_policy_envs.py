"""A gymnasium environment a user might write, whose network has every part a policy carries
from step to step: pixels large enough for Figure 3's convolutions with a text mission (the
gym family gives it the LSTM 256 core and the instruction encoder). For
tests/run/test_policy_api.py and test_saved_policy.py; importing this module registers it
(--level_name=gym:tests.gym_policy_envs:TestPixelMission-v0). TensorFlow-free."""
import string

import gymnasium
import numpy as np
from gymnasium import spaces

MISSIONS = ("go to the red ball", "pick up the blue key", "open the green door")
IMAGE_SHAPE = (24, 24, 3)
EPISODE_STEPS = 6


class PixelMission(gymnasium.Env):
  """Noise images, a mission drawn per episode; the action the mission names earns 1."""

  def __init__(self):
    self.observation_space = spaces.Dict({
        "image": spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
        "mission": spaces.Text(max_length=64, charset=string.ascii_lowercase + " ")})
    self.action_space = spaces.Discrete(len(MISSIONS))
    self._target, self._steps = 0, 0

  def _observation(self):
    image = self.np_random.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
    return {"image": image, "mission": MISSIONS[self._target]}

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._target = int(self.np_random.integers(len(MISSIONS)))
    self._steps = 0
    return self._observation(), {}

  def step(self, action):
    self._steps += 1
    reward = float(int(action) == self._target)
    return self._observation(), reward, self._steps >= EPISODE_STEPS, False, {}


gymnasium.register(id="TestPixelMission-v0", entry_point=PixelMission)
