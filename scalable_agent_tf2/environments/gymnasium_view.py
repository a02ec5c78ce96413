"""One of this project's environments (base.Environment) as a gymnasium.Env, for a loop, a
wrapper or an evaluation of the user's own: policy.make_environment builds the one a trained
policy saw in training (docs/POLICY_API.md).

    env = GymnasiumView(lambda seed: AtariEnvironment("breakout", seed=seed), seed=1)
    observation, info = env.reset()          # uint8 [84, 84, 4]: the agent's own frames
    observation, reward, terminated, truncated, info = env.step(action)

The observation is what the agent reads, made by the project's own environment: Atari's stack
of four grey 84x84 frames (environments/atari.py), DeepMind Lab's RGB frame, a gymnasium
level's observation as gym_env.py turns it into one; with `with_instruction` a Dict of the
frame and the instruction text (DeepMind Lab's, a mission's). Rewards are unclipped.

Episodes: `terminated` is the project's `done` (Atari in test mode: a game over; in training
mode a lost life too, while the game goes on), `truncated` a time limit's cut. The project's
environments start their next episode at the step that ended one (base.py), so the
observation returned with `terminated` is already the next episode's first; reset() starts
another one, as a gymnasium loop expects. reset(seed=s) makes a new environment of seed s
(the project seeds an environment when it is made: ALE's seed, the no-ops); reset() without a
seed goes on with the current one.
"""
import string

import gymnasium
import numpy as np
from gymnasium import spaces

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

# A Text space's longest instruction (DeepMind Lab's are a sentence; a mission a few words).
MAX_INSTRUCTION_CHARACTERS = 1024


def observation_space(spec, with_instruction=False, num_observation_values=None):
  """The gymnasium space of a spec's observations: uint8 frames, float32 vectors, an index
  (Discrete(num_observation_values)); with_instruction: a Dict of "frame" and "instruction"."""
  dtype = base.frame_dtype(spec)
  shape = tuple(spec.frame_shape)
  if dtype == base.FRAME_DTYPE:
    frame = spaces.Box(0, 255, shape, np.uint8)
  elif dtype == base.INDEX_DTYPE:
    frame = (spaces.Discrete(num_observation_values) if num_observation_values
             else spaces.Box(0, np.iinfo(np.int32).max, (), np.int32))
  else:
    frame = spaces.Box(-np.inf, np.inf, shape, np.float32)
  if not with_instruction:
    return frame
  text = spaces.Text(MAX_INSTRUCTION_CHARACTERS, charset=string.printable)
  return spaces.Dict({"frame": frame, "instruction": text})


def action_space(spec):
  """The gymnasium space of a spec's actions: Discrete, Box (its bounds) or MultiDiscrete."""
  if isinstance(spec, base.ContinuousEnvSpec):
    return spaces.Box(np.asarray(spec.action_low, np.float32),
                      np.asarray(spec.action_high, np.float32), dtype=np.float32)
  if isinstance(spec, base.MultiDiscreteEnvSpec):
    return spaces.MultiDiscrete(list(spec.nvec))
  return spaces.Discrete(spec.num_actions)


class GroupRow:
  """The one environment of a group of one (a VECTOR family's group: Atari's ale-py vector,
  atari_vector.AtariVectorGroup, as training and test mode run Table G.1's games) behind
  base.Environment's calls."""

  def __init__(self, group):
    self._group = group

  @property
  def spec(self):
    return self._group.spec

  @staticmethod
  def _row(output):
    observation = output.observation
    return EnvOutput(reward=float(output.reward[0]), done=bool(output.done[0]),
                     observation=Observation(frame=np.array(observation.frame[0]),
                                             instruction=observation.instruction[0]),
                     episode_return=float(output.episode_return[0]),
                     episode_step=int(output.episode_step[0]),
                     truncated=bool(output.truncated[0]))

  def initial(self):
    return self._row(self._group.initial())

  def step(self, action):
    return self._row(self._group.step(np.asarray([action])))

  def render(self):
    return self._group.render(0)

  def close(self):
    self._group.close()


class GymnasiumView(gymnasium.Env):
  """A base.Environment behind gymnasium's reset and step (the module docstring)."""

  metadata = {"render_modes": ["rgb_array"]}

  def __init__(self, make, seed=0, with_instruction=False, num_observation_values=None,
               render_mode=None, environment=None):
    """Args:
      make: callable(seed) -> a base.Environment.
      seed: the first environment's seed.
      with_instruction: observations are Dicts of the frame and the instruction text.
      num_observation_values: n of a Discrete(n) observation (its space), or None.
      render_mode: None or "rgb_array" (render() returns the environment's picture).
      environment: make(seed), when the caller has made it already.
    """
    self._make = make
    self._env = make(seed) if environment is None else environment
    self._with_instruction = with_instruction
    self.render_mode = render_mode
    spec = self._env.spec
    self._spec = spec
    self.observation_space = observation_space(spec, with_instruction, num_observation_values)
    self.action_space = action_space(spec)

  @property
  def environment(self):
    """The project's environment behind this view (base.Environment)."""
    return self._env

  def _observation(self, output):
    frame = output.observation.frame
    if not self._with_instruction:
      return frame
    return {"frame": frame, "instruction": str(output.observation.instruction or "")}

  @staticmethod
  def _info(output):
    return {"episode_return": float(output.episode_return),
            "episode_step": int(output.episode_step)}

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    if seed is not None:
      self._env.close()
      self._env = self._make(int(seed))
    output = self._env.initial()
    return self._observation(output), self._info(output)

  def step(self, action):
    if isinstance(self._spec, base.ContinuousEnvSpec):  # As actors send it (action_spaces.py).
      action = action_bounds.clip_to_bounds(np.asarray(action, np.float32),
                                            self._spec.action_low, self._spec.action_high)
    elif isinstance(self._spec, base.MultiDiscreteEnvSpec):
      action = np.asarray(action, np.int32)
    else:
      action = int(action)
    output = self._env.step(action)
    truncated = bool(output.truncated)
    return (self._observation(output), float(output.reward), bool(output.done) and not truncated,
            truncated, self._info(output))

  def render(self):
    return self._env.render()

  def close(self):
    self._env.close()
    super().close()
