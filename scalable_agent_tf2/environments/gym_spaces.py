"""What a gymnasium environment observes and does, read from its spaces (the "gym:<id>" levels,
gym_env.py; environments/families/gym.py): `Description` of an environment's observation
and action spaces, the kinds the project takes, and the refusal of any other space, which
names what is supported.

Observations: Box (O,) -> VECTOR (float32 [O]); Box (H, W, C) of uint8 or bool -> FRAME;
Discrete(n) -> INDEX (its int32 index); a Dict of one image and at most one text (gymnasium's
Text, or any space of str such as MiniGrid's MissionSpace) -> FRAME with the text as the
instruction the paper's encoder reads (Figure 3), as DeepMind Lab's INSTR. Actions:
Discrete(n) -> a categorical policy (IMPALA); MultiDiscrete(nvec) -> one categorical per
choice, sampled independently (SEED RL's multi-categorical distribution); Box (A,) -> a
diagonal Gaussian (the IMPACT paper's continuous control, section 4.3). The spec a
Description gives (base.EnvSpec, MultiDiscreteEnvSpec or ContinuousEnvSpec) chooses the
network's head (agent/distributions.for_spec), and `sent_action` the copy gymnasium gets.
"""
import sys

import numpy as np

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.environments import base

VECTOR, FRAME, INDEX = "vector", "frame", "index"
# The spaces the "gym:" levels take (what an unsupported space's message lists).
SUPPORTED_OBSERVATIONS = ("Box of shape (O,) (a float vector)",
                          "Box of shape (H, W, C) and dtype uint8 or bool (image frames, "
                          "feature planes)",
                          "Discrete(n) (an index)",
                          "Dict of one image (Box (H, W, C) uint8) and at most one text "
                          "(gymnasium Text, or a space of str such as MiniGrid's "
                          "MissionSpace), other entries ignored (MiniGrid/BabyAI's "
                          "Dict(image, direction, mission))")
SUPPORTED_ACTIONS = ("Discrete(n)", "MultiDiscrete(nvec) of one dimension (several discrete "
                     "choices per step)", "Box of shape (A,) (continuous actions)")


class UnsupportedSpace(ValueError):
  """An observation or action space the project cannot act on."""


class Description:
  """What a gymnasium environment observes and does, read from its spaces.

  Attributes:
    observation_kind: VECTOR, FRAME or INDEX. observation_shape: (O,), (H, W, C) or ().
    has_instruction: the observation carries a text (a Dict's mission): the network takes the
      paper's instruction encoder (families/gym.py network_config).
    image_key, text_key: a Dict observation's entries read as the frame and the instruction
      (text_key None: a Dict without text); both None for a plain space.
    ignored_keys: a Dict's other entries, sorted (not observed; e.g. MiniGrid's direction).
    frame_max: FRAME only: the largest value of the image's entries (frame_max), None else.
    continuous_actions: Box actions. num_actions (Discrete), nvec (MultiDiscrete: a tuple of
      the K choices' numbers of options; None for the other kinds) or action_size,
      action_low, action_high (Box).
  """

  def __init__(self, env_id, observation_space, action_space, unwrapped=None):
    from gymnasium import spaces  # pylint: disable=g-import-not-at-top
    self.env_id = env_id
    self.image_key = self.text_key = None
    self.ignored_keys = ()
    if isinstance(observation_space, spaces.Dict):
      self.image_key, self.text_key, self.ignored_keys = dict_keys(env_id, observation_space)
      self.observation_kind = FRAME
      self.observation_shape = tuple(int(n) for n in
                                     observation_space[self.image_key].shape)
    else:
      self.observation_kind, self.observation_shape = _observation_kind(
          env_id, observation_space, spaces)
    self.has_instruction = self.text_key is not None
    image_space = (observation_space[self.image_key] if self.image_key is not None
                   else observation_space)
    self.frame_is_bool = (self.observation_kind == FRAME
                          and image_space.dtype == np.dtype(np.bool_))
    self.frame_max = (None if self.observation_kind != FRAME else 1.0 if self.frame_is_bool
                      else frame_max(unwrapped, self.observation_shape))
    self.step_seconds = None  # Measured by describe() (measure_step_seconds).
    self._read_actions(env_id, action_space, spaces)

  def _read_actions(self, env_id, space, spaces):
    """The action kind and sizes of a supported action space; UnsupportedSpace otherwise."""
    self.continuous_actions = isinstance(space, spaces.Box) and len(space.shape) == 1
    self.nvec = None
    if isinstance(space, spaces.Discrete):
      self.num_actions, self.action_start = int(space.n), int(space.start)
    elif isinstance(space, spaces.MultiDiscrete) and len(space.nvec.shape) == 1:
      self.nvec = tuple(int(n) for n in space.nvec)
      self.action_start = np.asarray(space.start, np.int64)
    elif self.continuous_actions:
      self.action_size = int(space.shape[0])
      self.action_low = np.asarray(space.low, np.float32)
      self.action_high = np.asarray(space.high, np.float32)
    else:
      raise UnsupportedSpace(
          f"gym:{env_id}: its action space {space} is not supported; supported: "
          f"{', '.join(SUPPORTED_ACTIONS)}. Wrap the environment (e.g. "
          "gymnasium.wrappers.FlattenObservation, a discretising ActionWrapper) in your own "
          "package and register the wrapped one.")

  def spec(self):
    """base.EnvSpec (Discrete actions), base.ContinuousEnvSpec (Box actions) or
    base.MultiDiscreteEnvSpec (MultiDiscrete actions)."""
    if self.continuous_actions:
      return base.ContinuousEnvSpec(action_size=self.action_size,
                                    action_low=self.action_low.copy(),
                                    action_high=self.action_high.copy(),
                                    frame_shape=self.observation_shape)
    if self.nvec is not None:
      return base.MultiDiscreteEnvSpec(nvec=self.nvec, frame_shape=self.observation_shape)
    return base.EnvSpec(num_actions=self.num_actions, frame_shape=self.observation_shape)

  def action_layout(self):
    """The action sizes by name, as the network's action distribution family gives them
    (its `layout`: num_actions, action_size or nvec): what the network's line
    in words says (families/base.py network_in_words), known without TensorFlow."""
    if self.continuous_actions:
      return dict(action_size=self.action_size)
    if self.nvec is not None:
      return dict(nvec=list(self.nvec))
    return dict(num_actions=self.num_actions)

  def sent_action(self, action):
    """The copy of an agent's action that gymnasium receives, checked against the space: a
    Box action clipped to its bounds (the trajectory keeps the unclipped sample,
    action_bounds.py); Discrete and MultiDiscrete indices shifted by the space's start."""
    if self.continuous_actions:
      action = base.check_continuous_action(action, self.action_size)
      return action_bounds.clip_to_bounds(action, self.action_low, self.action_high)
    if self.nvec is not None:
      return base.check_multi_discrete_action(action, self.nvec) + self.action_start
    return base.check_action(action, self.num_actions) + self.action_start


def frame_max(unwrapped, image_shape):
  """The largest value an image observation's uint8 entries take: 255 for pixels, and the
  largest index for MiniGrid and BabyAI's image, which is not pixels but the grid's encoding
  (object, colour and state indices of the agent's view, minigrid.core.constants: at most
  10). Divided by 255 as pixels, that image reached the torso about 25 times weaker than a
  frame does (benchmarks/RESULTS.md, "A dictionary observation"). MiniGrid's own
  RGBImgPartialObsWrapper renders pixels instead, of another shape: 255 again.

  Args:
    unwrapped: the environment's env.unwrapped, or None (then pixels).
    image_shape: (H, W, C) of the image.
  """
  minigrid_env = getattr(sys.modules.get("minigrid.minigrid_env"), "MiniGridEnv", None)
  if minigrid_env is not None and isinstance(unwrapped, minigrid_env):
    view = unwrapped.agent_view_size
    if tuple(image_shape) == (view, view, 3):  # Grid encoding, not rendered pixels.
      from minigrid.core import constants  # pylint: disable=g-import-not-at-top
      return float(max(*constants.OBJECT_TO_IDX.values(), *constants.COLOR_TO_IDX.values(),
                       *constants.STATE_TO_IDX.values()))
  return 255.0


# The dtypes of a frame the family takes: uint8 (pixels, MiniGrid's grid encoding) and bool
# (feature planes, e.g. MinAtar's 10x10xC), stored as uint8 (bool as 0 / 1: frame_max 1).
FRAME_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_))


def _is_image(space, spaces):
  """A Box (H, W, C) of uint8 or bool: an image frame."""
  return (isinstance(space, spaces.Box) and len(space.shape) == 3
          and space.dtype in FRAME_DTYPES)


def _is_text(space, spaces):
  """gymnasium's Text, or any space whose values are str (MiniGrid's MissionSpace is a
  Space[str] of dtype str, not a Text)."""
  dtype = getattr(space, "dtype", None)
  return isinstance(space, spaces.Text) or (dtype is not None and dtype.kind in "US")


def dict_keys(env_id, space):
  """(image key, text key or None, the other keys sorted) of a Dict observation space the
  project takes: exactly one image entry (Box (H, W, C) uint8) and at most one text entry;
  UnsupportedSpace naming the entries otherwise."""
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top
  images = [key for key, entry in space.spaces.items() if _is_image(entry, spaces)]
  texts = [key for key, entry in space.spaces.items() if _is_text(entry, spaces)]
  problem = None
  if len(images) != 1:
    problem = (f"it has {len(images)} image entries (Box (H, W, C) uint8)"
               + (f": {', '.join(map(repr, images))}" if images else ""))
  elif len(texts) > 1:
    problem = f"it has {len(texts)} text entries: {', '.join(map(repr, texts))}"
  if problem is not None:
    entries = ", ".join(f"{key!r}: {entry}" for key, entry in space.spaces.items())
    raise UnsupportedSpace(
        f"gym:{env_id}: its observation space Dict({entries}) is not supported: {problem}; "
        f"supported: {', '.join(SUPPORTED_OBSERVATIONS)}. Wrap the environment "
        "(e.g. gymnasium.wrappers.FilterObservation to keep one image and one text, "
        "FlattenObservation for vectors) in your own package and register the wrapped one.")
  text_key = texts[0] if texts else None
  ignored = tuple(sorted(key for key in space.spaces if key not in (images[0], text_key)))
  return images[0], text_key, ignored


def _observation_kind(env_id, space, spaces):
  """(kind, shape) of a supported observation space; UnsupportedSpace otherwise."""
  if isinstance(space, spaces.Discrete):
    return INDEX, ()
  if isinstance(space, spaces.Box):
    if len(space.shape) == 1:
      return VECTOR, tuple(int(n) for n in space.shape)
    if len(space.shape) == 3 and space.dtype in FRAME_DTYPES:
      return FRAME, tuple(int(n) for n in space.shape)
  raise UnsupportedSpace(
      f"gym:{env_id}: its observation space {space} is not supported; supported: "
      f"{', '.join(SUPPORTED_OBSERVATIONS)}. Wrap the environment (e.g. "
      "gymnasium.wrappers.FlattenObservation for Dict or Tuple observations) in your own "
      "package and register the wrapped one.")
