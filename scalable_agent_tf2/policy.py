"""A trained policy in the user's own code: load a run's logdir or a policy-only folder, act on
a batch of observations, and make the environment it saw in training (docs/POLICY_API.md).

    import scalable_agent_tf2
    policy = scalable_agent_tf2.load_policy("benchmarks/agents/breakout")
    env = policy.make_environment(seed=1)            # a gymnasium.Env
    observation, info = env.reset()
    state, reward = policy.initial_state(1), 0.0
    actions, state = policy.step(observation[None], state, reward=[reward])

The folder decides everything the network and its environment were built with: its
checkpoints/settings.json (the level, the torso, the frame size, the algorithm, and what else
shapes a gymnasium level's network or the environment: checkpoints.POLICY_SETTINGS), the
checkpoint (its weights and, for observation vectors, the observation filter's frozen
statistics). The agent is rebuilt and restored on test mode's path (assembly.restore_agent);
one step is the actors' (policies.acting_step), its actions sampled as actors sample them
(action_spaces.py) or, greedy, the most likely (distributions' mode()).

Mistakes a user makes (a folder of another level, an observation of another shape or dtype, a
logdir with no checkpoint yet) raise PolicyError, one line saying what is wrong and what to do.
"""
import collections
import os

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import gymnasium_view
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

# What the network reads besides the observation (Figure 3), carried from step to step:
# core, its recurrent state (an LSTMState of float32 [B, 256] arrays, or () without an LSTM);
# action, the previous action of each row (the network reads it; zeros at an episode's start,
# as actors begin); first, bool [B]: the next observation starts an episode (the LSTM's
# state is reset there, as the learner resets it at `done`).
PolicyState = collections.namedtuple("PolicyState", "core action first")


class PolicyError(ValueError):
  """A policy cannot be loaded or cannot act on what it was given; the message is one line
  saying what is wrong and what to do."""


def load_policy(path, level_name=None, checkpoint=None, seed=0):
  """The policy of a run's logdir or a policy-only folder (run/export_policy.py).

  Args:
    path: the folder (its checkpoints/ holds the checkpoint and settings.json).
    level_name: the level the caller means to play, checked against the folder's (None: the
      folder's own, `policy.level_name`).
    checkpoint: a checkpoint's name in the folder ("ckpt-40248320"); None: the newest. It is
      not made the newest (Checkpointer.restore's make_newest=False).
    seed: seeds the sampled actions.

  Returns:
    Policy.

  Raises:
    PolicyError: no such folder, no checkpoint in it, a folder of another level, a
      checkpoint that does not restore (the message says which and what to do).
  """
  config = _folder_config(path, level_name, checkpoint)
  try:
    constructor = assembly.checked_environment_constructor(config, None, test_mode=True)
    agent, learner, restored = assembly.restore_agent(
        config, constructor, restore_from=checkpoint or "", make_newest=False)
  except (checkpoints.CheckpointError, ValueError, ModuleNotFoundError) as error:
    raise PolicyError(_one_line(error)) from error
  return Policy(agent, config, restored, int(learner.num_env_frames.numpy()), seed)


def make_environment(level_name, seed=0, test_mode=True):
  """A level's environment as a gymnasium.Env (environments/gymnasium_view.py), at the
  settings a run of `--level_name=level_name` and no other flag trains with: the
  observations its agent reads. A policy's own (its folder's settings): Policy.make_environment.

  Args:
    level_name: one level ("atari/breakout", "gym:CartPole-v1", ...).
    seed: the environment's seed (ALE's and the no-ops', for Atari).
    test_mode: the level as test mode plays it (Atari: whole games, section 5.3.2; DMLab: its
      test variant); False: as training does (Atari: a lost life ends an episode, Table G.1).
  """
  try:
    config = config_lib.config_from_argv([f"--level_name={level_name}", "--mode=test"])
  except ValueError as error:
    raise PolicyError(_one_line(error)) from error
  return _environment(config, seed, test_mode, network_config=None)


class Policy:
  """A trained agent acting on batches of observations (load_policy).

  Attributes:
    level_name: the level it was trained on.
    frames: the environment frames it was trained for.
    checkpoint: the checkpoint it was restored from.
    network_config: the network's settings (agent/networks.NetworkConfig).
    observation_shape, observation_dtype: one observation's (without the batch dimension).
  """

  def __init__(self, agent, config, checkpoint, frames, seed=0):
    self._agent = agent
    self._config = config
    self.level_name = config.level_name
    self.checkpoint = checkpoint
    self.frames = frames
    self.network_config = agent.config
    self.observation_shape = tuple(agent.config.frame_shape)
    self.observation_dtype = np.dtype(agent.config.frame_dtype)
    self._family = agent.config.action_distribution
    self._space = action_spaces.for_agent(agent)
    self._network = policies.PerActorPolicy(agent)
    self._rng = np.random.default_rng(seed)

  def initial_state(self, batch_size):
    """The state of `batch_size` rows at the start of their episodes (PolicyState)."""
    family = self._family
    return PolicyState(core=self._network.initial_states(batch_size),
                       action=np.zeros((batch_size,) + tuple(family.action_shape),
                                       family.action_dtype),
                       first=np.ones(batch_size, bool))

  def restart(self, state, ended):
    """`state` with the rows where `ended` (bool [B]) is True at the start of an episode: a
    batch of environments whose episodes end at different steps."""
    ended = np.asarray(ended, bool)
    fresh = self.initial_state(len(ended))
    pick = lambda new, old: np.where(
        ended.reshape((-1,) + (1,) * (np.ndim(old) - 1)), new, old)
    return PolicyState(core=tf.nest.map_structure(pick, fresh.core, state.core),
                       action=pick(fresh.action, state.action),
                       first=ended | np.asarray(state.first, bool))

  def step(self, observation, state, reward=0.0, greedy=False):
    """Actions for a batch of observations.

    Args:
      observation: [B, *observation_shape] of observation_dtype as the environment gives
        them (make_environment's: Atari's uint8 [B, 84, 84, 4]; vectors raw, the folder's
        observation filter normalises them); with an instruction, a dict of "frame" [B, ...]
        and "instruction" (B strings).
      state: initial_state(B), or the state the previous step returned.
      reward: the reward each row's environment returned with this observation (0 after a
        reset): the network reads it, clipped to [-1, 1] as in training; a number or [B].
      greedy: the most likely action (the mode) instead of a sample of the policy.

    Returns:
      (actions [B, *action_shape]: int32 indices, or a Gaussian's float32 actions unclipped
       (make_environment's environment clips them to its bounds), the next PolicyState).
    """
    frames, instructions = self._observations(observation)
    batch = len(frames)
    self._check_state(state, batch)
    rewards = np.asarray(reward, np.float32)
    if rewards.shape not in ((), (batch,)):
      raise PolicyError(f"reward of shape {list(rewards.shape)} for {batch} observations: "
                        f"give one number or one per observation ([{batch}]).")
    zeros = np.zeros(batch, np.float32)
    env_output = EnvOutput(reward=np.broadcast_to(rewards, (batch,)),
                           done=np.asarray(state.first, bool),
                           observation=Observation(frame=frames, instruction=instructions),
                           episode_return=zeros, episode_step=zeros,
                           truncated=np.zeros(batch, bool))
    env_output = self._space.observe(policies.encode_group_instructions(env_output))
    params, _, core = self._network(state.action, env_output, state.core)
    if greedy:
      actions = self._family(params).mode().numpy()
    else:
      actions = self._space.sample_group(params, [self._rng] * batch)
    actions = np.asarray(actions, self._family.action_dtype)
    return actions, PolicyState(core=core, action=actions, first=np.zeros(batch, bool))

  def make_environment(self, seed=0, test_mode=True):
    """The environment this policy saw in training, as a gymnasium.Env, built from the
    folder's settings (make_environment's arguments)."""
    return _environment(self._config, seed, test_mode, self.network_config)

  def _observations(self, observation):
    """(frames [B, ...], B instruction strings) of a step's observation, or PolicyError."""
    instructions = None
    if isinstance(observation, dict):
      if "frame" not in observation:
        raise PolicyError(f"an observation dict with keys {sorted(observation)}: give "
                          f"\"frame\" (and \"instruction\"), as make_environment's has.")
      instructions = observation.get("instruction")
      observation = observation["frame"]
    frames = np.asarray(observation)
    self._check_observation(frames)
    if self.network_config.observation_kind == torsos.INDEX:
      frames = frames.astype(np.int32)
    if instructions is None:
      instructions = [""] * len(frames)
    instructions = np.asarray(instructions, dtype=object).reshape(-1)
    if len(instructions) != len(frames):
      raise PolicyError(f"{len(instructions)} instructions for {len(frames)} observations: "
                        f"give one per observation.")
    return frames, instructions

  def _check_observation(self, frames):
    shape, dtype = self.observation_shape, self.observation_dtype
    wanted = f"{dtype.name} [B, {', '.join(str(n) for n in shape)}]".replace(", ]", "]")
    what = (f"this policy ({self.level_name}) takes a batch of observations {wanted} as its "
            f"environment gives them (Policy.make_environment)")
    if frames.shape == shape:
      raise PolicyError(f"an observation of shape {list(frames.shape)} without a batch "
                        f"dimension: {what}; give observation[None] for one.")
    if frames.ndim < 1 or tuple(frames.shape[1:]) != shape:
      raise PolicyError(f"observations of shape {list(frames.shape)}: {what}.")
    kind = self.network_config.observation_kind
    fits = {torsos.FRAME: frames.dtype == dtype, torsos.VECTOR: frames.dtype.kind in "iuf",
            torsos.INDEX: frames.dtype.kind in "iu"}[kind]
    if not fits:
      hint = (" (pixels 0-255 as the environment gives them, not scaled)"
              if kind == torsos.FRAME else "")
      raise PolicyError(f"observations of dtype {frames.dtype}: {what}{hint}.")

  def _check_state(self, state, batch):
    if not isinstance(state, PolicyState):
      raise PolicyError(f"a state of type {type(state).__name__}: give initial_state(B) or "
                        f"the state the previous step returned.")
    if len(state.first) != batch:
      raise PolicyError(f"a state of {len(state.first)} rows for {batch} observations: "
                        f"start with initial_state({batch}).")


def _folder_config(path, level_name, checkpoint):
  """The resolved test-mode config of folder `path` from its settings.json; PolicyError
  where there is no such folder, no checkpoint, or the folder is of another level."""
  if not os.path.isdir(path):
    raise PolicyError(f"{path}: no such folder; give a run's --logdir or a policy folder "
                      f"(benchmarks/agents/breakout).")
  try:
    stored = checkpoints.read_settings(path)
  except checkpoints.UnusableCheckpoint as error:
    raise PolicyError(_one_line(error)) from error
  has_checkpoint = checkpoints.has_checkpoint_files(path)
  if stored is None or not has_checkpoint:
    raise PolicyError(checkpoints.no_checkpoint_message(path))
  if checkpoint and checkpoint not in checkpoints.complete_checkpoints(
      checkpoints.checkpoint_dir(path)):
    raise PolicyError(checkpoints.unknown_checkpoint_message(path, checkpoint))
  trained = stored["level_name"]
  if level_name is not None and level_name != trained:
    raise PolicyError(f"{path} holds a policy of {trained}, not {level_name}: load a folder "
                      f"trained on {level_name}, or play {trained}.")
  flags = [f"--level_name={trained}", "--mode=test", f"--logdir={path}"]
  names = checkpoints.SHAPE_SETTINGS + checkpoints.POLICY_SETTINGS
  flags += [f"--{name}={stored[name]}" for name in names
            if name not in ("level_name", "torso") and stored.get(name) not in (None, "")]
  try:
    config = config_lib.config_from_argv(flags)
    if config.torso is not None and stored.get("torso"):
      # A frame network's torso; vectors and indices take their own (no --torso).
      config = config_lib.config_from_argv(flags + [f"--torso={stored['torso']}"])
  except ValueError as error:
    raise PolicyError(f"{path}: its settings.json no longer makes a run here "
                      f"({_one_line(error)}).") from error
  return config


def _environment(config, seed, test_mode, network_config):
  """A GymnasiumView of config's level, its environment built as its run builds it (one
  game of a VECTOR family's group, else the family's environment in this process);
  network_config None: the level's own network's (which says whether observations carry an
  instruction)."""
  constructor = assembly.default_environment_constructor(config)
  level = config.levels[0]

  def make(environment_seed):
    # As training and test mode run the level.
    if config.family.runs_as(config) == family_base.VECTOR:
      return gymnasium_view.GroupRow(config.family.vector_group(
          config, level, [environment_seed], test_mode))
    make_env, kwargs = constructor(level, environment_seed, test_mode)
    return make_env(**kwargs)
  first = make(seed)
  if network_config is None:
    network_config = config.family.network_config(config, first.spec)
  return gymnasium_view.GymnasiumView(
      make, seed, with_instruction=network_config.use_instruction,
      num_observation_values=network_config.num_observation_values, environment=first)


def _one_line(error):
  """An error's message on one line."""
  return " ".join(str(error).split())
