"""Acting for each kind of action space: what an actor samples, stores and sends.

    space = action_spaces.for_agent(agent)              # Discrete or Gaussian
    params = space.distribution.params_of(network_output)  # one array per row: logits, or
                                                            # [mean, log_std] concatenated
    agent_output = space.empty_agent_output(env.spec)   # paired with an episode's first step
    env_output = space.observe(env.initial())           # the observation filter (MuJoCo)
    action = space.sample(params_row, rng)              # what the trajectory stores
    actions = space.sample_group(params, rngs)          # the same for a group's rows
    env.step(space.to_environment(action, env.spec))    # what the environment receives
    agent_output = space.agent_output(action, params_row, baseline)

Each space holds its policy's distributions family (`space.distribution`, the network config's
`action_distribution`, distributions.py), which samples in numpy.

Discrete (IMPALA's agents): a categorical sample by the Gumbel-max trick; the trajectory's
AgentOutput holds the int32 action and the behaviour policy's logits.

Gaussian (the IMPACT paper's continuous control, section 4.3): a diagonal Gaussian sample
(distributions.DiagGaussianFamily.sample_numpy), UNCLIPPED in the trajectory
(structures.GaussianAgentOutput holds it with mu's mean and log_std: the behaviour
log-probability is the density of that sample); only the copy sent to the environment is
clipped to the spec's bounds (action_bounds.clip_to_bounds, RLlib's `clip_actions`).

Observation vectors (MuJoCo's, gymnasium's Box (O,), with either kind of actions:
takes_observation_filter) pass through the run's ObservationFilter (RLlib's MeanStdFilter,
environments/normalization.py) before the policy sees them and before they are stored; its
statistics grow in training only and are frozen in test mode. Frames and indices are not
filtered.

The acting side runs one step at a time in numpy (policies.py), one generator per actor.
"""
import json

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import normalization
from scalable_agent_tf2.structures import AgentOutput, GaussianAgentOutput


class Discrete:
  """A finite set of actions: categorical policies (IMPALA)."""

  def __init__(self, distribution=None, observation_filter=None):
    """Args:
      distribution: the network's distributions.CategoricalFamily (None: sampling only
        needs the logits' own size).
      observation_filter: an ObservationFilter (vector observations, e.g. CartPole's), or
        None (frames, indices: observations as the environment gives them).
    """
    self.distribution = distribution
    self.observation_filter = observation_filter

  def empty_agent_output(self, spec):
    """The agent output paired with an episode's first observation (released code: zeros)."""
    return AgentOutput(action=np.int32(0), policy_logits=np.zeros(spec.num_actions, np.float32),
                       baseline=np.float32(0))

  def empty_group_outputs(self, num_envs, spec):
    """empty_agent_output for each of a group's num_envs environments: [G] rows."""
    return AgentOutput(action=np.zeros(num_envs, np.int32),
                       policy_logits=np.zeros((num_envs, spec.num_actions), np.float32),
                       baseline=np.zeros(num_envs, np.float32))

  def observe(self, env_output):
    """env_output with its observation filtered, when the space has a filter."""
    return _filtered(env_output, self.observation_filter)

  def _family(self, policy_logits):
    return self.distribution or distributions.CategoricalFamily(np.shape(policy_logits)[-1])

  def sample(self, policy_logits, rng):
    return self._family(policy_logits).sample_numpy(policy_logits, rng)

  def sample_group(self, policy_logits, rngs):
    """The group's actions int32 [G] from its logits [G, NUM_ACTIONS], row g with rngs[g]."""
    return self._family(policy_logits).sample_rows(policy_logits, rngs)

  def to_environment(self, action, spec):
    del spec
    return action

  def group_to_environment(self, actions, spec):
    """What a group's step() receives for the sampled actions int32 [G]: the actions."""
    del spec
    return actions

  def agent_output(self, action, policy_logits, baseline):
    return AgentOutput(action=np.int32(action), policy_logits=policy_logits, baseline=baseline)

  def layout(self, network_config):
    """What fixes the action tensors' shapes (checkpoint and wire settings)."""
    return dict(num_actions=network_config.num_actions)


class ObservationFilter(tf.train.experimental.PythonState):
  """A run's normalization.MeanStdFilter, shared by its actor threads, saved with checkpoints.

  A tf.train.experimental.PythonState: a tf.train.Checkpoint that tracks it (through the agent,
  build_agent attaches it) writes its statistics at every save and reads them back at restore,
  so a resumed run and a test run normalise as the trained network expects.
  """

  def __init__(self, observation_size, update=True):
    """Args:
      observation_size: O.
      update: True in training (every observation updates the statistics before it is
        filtered, RLlib's order); False in test mode (frozen, RLlib's compute_action).
    """
    self.filter = normalization.MeanStdFilter((observation_size,))
    self.update = update

  def __call__(self, frame):
    return self.filter(frame, update=self.update)

  def serialize(self):
    state = self.filter.state()
    return json.dumps({"count": int(state["count"]), "mean": state["mean"].tolist(),
                       "m2": state["m2"].tolist()})

  def deserialize(self, string_value):
    state = json.loads(string_value.numpy() if hasattr(string_value, "numpy")
                       else string_value)
    self.filter.load_state(state)


class Gaussian:
  """A box of A real action dimensions: diagonal Gaussian policies (IMPACT section 4.3)."""

  def __init__(self, action_size, observation_filter=None):
    """Args:
      action_size: A.
      observation_filter: an ObservationFilter, or None (observations as the environment
        gives them).
    """
    self.action_size = action_size
    self.observation_filter = observation_filter
    self.distribution = distributions.DiagGaussianFamily(action_size)

  def empty_agent_output(self, spec):
    """Zeros, like Discrete's: mean 0 and log_std 0 (never used: the learner's step t=0 is
    no action's outcome)."""
    zeros = np.zeros(spec.action_size, np.float32)
    return GaussianAgentOutput(action=zeros, policy_mean=zeros.copy(),
                               policy_log_std=zeros.copy(), baseline=np.float32(0))

  def empty_group_outputs(self, num_envs, spec):
    """empty_agent_output for each of a group's num_envs environments: [G] rows."""
    return tf.nest.map_structure(lambda *rows: np.stack(rows),
                                 *[self.empty_agent_output(spec) for _ in range(num_envs)])

  def observe(self, env_output):
    """env_output with its observation filtered (before the policy sees or stores it)."""
    return _filtered(env_output, self.observation_filter)

  def sample(self, params, rng):
    """An unclipped sample float32 [A] of N(mean, exp(log_std)^2) from params [2A]."""
    return self.distribution.sample_numpy(params, rng)

  def sample_group(self, params, rngs):
    """The group's unclipped actions float32 [G, A] from params [G, 2A], row g with rngs[g]."""
    return self.distribution.sample_rows(params, rngs)

  def to_environment(self, action, spec):
    """The copy the environment receives, clipped to the spec's bounds."""
    if not isinstance(spec, base.ContinuousEnvSpec):
      raise ValueError(f"A Gaussian policy acts on continuous actions; the environment's "
                       f"spec is {spec}.")
    return action_bounds.clip_to_bounds(action, spec.action_low, spec.action_high)

  def group_to_environment(self, actions, spec):
    """to_environment for each of a group's actions [G, A]."""
    return np.stack([self.to_environment(action, spec) for action in actions])

  def agent_output(self, action, params, baseline):
    mean, log_std = self.distribution.split_numpy(params)
    return GaussianAgentOutput(action=np.asarray(action, np.float32), policy_mean=mean,
                               policy_log_std=log_std, baseline=baseline)

  def layout(self, network_config):
    return dict(action_size=network_config.action_size)


def _filtered(env_output, observation_filter):
  """env_output with observation.frame passed through observation_filter (None: as it is)."""
  if observation_filter is None:
    return env_output
  observation = env_output.observation
  return env_output._replace(observation=observation._replace(
      frame=observation_filter(observation.frame)))


def takes_observation_filter(network_config):
  """True for a network that reads float vectors [O] (MuJoCo's, gymnasium's Box (O,)): their
  observations pass through the run's ObservationFilter whatever the actions (RLlib's
  MeanStdFilter, environments/normalization.py). Frames ([0, 255] pixels, scaled by the network) and
  indices (one-hot) are never filtered."""
  return getattr(network_config, "observation_kind", "frame") == "vector"


def is_continuous(network_config):
  """True for a network whose policy is not discrete (a diagonal Gaussian: its
  action_distribution says so)."""
  return not network_config.action_distribution.discrete


def for_network(network_config, observation_filter=None):
  """The action space of a network config (of its action distribution)."""
  distribution = network_config.action_distribution
  if distribution.discrete:
    return Discrete(distribution, observation_filter)
  return Gaussian(distribution.action_size, observation_filter)


def for_agent(agent):
  """The action space of an agent, with the observation filter build_agent attached."""
  return for_network(agent.config, getattr(agent, "observation_filter", None))
