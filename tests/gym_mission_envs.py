"""Gymnasium environments whose observation is a Dict of an image and a text mission, for
tests/environments/test_gym_dict_observations.py; importing this module registers them. TensorFlow-free:
an environment process (build_agent's first environment) imports it through gymnasium's
"module:Id" form (--level_name=gym:tests.gym_mission_envs:TestMissionRoom-v0)."""
import string

import gymnasium
import numpy as np
from gymnasium import spaces

# The missions and the action each asks for: only the text tells them apart (the image is the
# same in both), so a policy that reads the mission can be right every time, one that does
# not at most half the time.
MISSIONS = ("go to the red ball", "go to the blue key")
IMAGE_SHAPE = (7, 7, 3)  # MiniGrid's partial view: 7x7 cells of (object, colour, state).


class MissionRoom(gymnasium.Env):
  """One-step episodes: the mission names an object, the action that reaches it earns 1."""

  def __init__(self, bad_mission_at=0):
    self.observation_space = spaces.Dict({
        "image": spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
        "direction": spaces.Discrete(4),
        "mission": spaces.Text(max_length=64, charset=string.ascii_lowercase + " ")})
    self.action_space = spaces.Discrete(3)
    self._bad_mission_at, self._steps, self._target = bad_mission_at, 0, 0

  def _observation(self):
    mission = MISSIONS[self._target]
    if self._steps and self._steps == self._bad_mission_at:
      mission = 7  # Not a text: the adapter must name the field.
    return {"image": np.full(IMAGE_SHAPE, 2, np.uint8), "direction": 0, "mission": mission}

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._target = int(self.np_random.integers(len(MISSIONS)))
    return self._observation(), {}

  def step(self, action):
    self._steps += 1
    reward = float(action == self._target)
    return self._observation(), reward, True, False, {}


class TwoImages(MissionRoom):
  def __init__(self):
    super().__init__()
    self.observation_space = spaces.Dict({
        "left": spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
        "right": spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
        "mission": spaces.Text(max_length=64)})


class NoImage(MissionRoom):
  def __init__(self):
    super().__init__()
    self.observation_space = spaces.Dict({"position": spaces.Box(-1, 1, (2,), np.float32),
                                          "mission": spaces.Text(max_length=64)})


class TwoTexts(MissionRoom):
  def __init__(self):
    super().__init__()
    self.observation_space = spaces.Dict({
        "image": spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
        "mission": spaces.Text(max_length=64), "hint": spaces.Text(max_length=64)})


gymnasium.register(id="TestMissionRoom-v0", entry_point=MissionRoom)
gymnasium.register(id="TestMissionRoomBadMission-v0", entry_point=MissionRoom,
                   kwargs=dict(bad_mission_at=2))
gymnasium.register(id="TestTwoImages-v0", entry_point=TwoImages)
gymnasium.register(id="TestNoImage-v0", entry_point=NoImage)
gymnasium.register(id="TestTwoTexts-v0", entry_point=TwoTexts)
