"""Acting in any action space: what an actor samples, stores and sends, driven by the
policy's action distribution (agent/distributions.py).

    space = action_spaces.for_agent(agent)              # an ActionSpace
    params = network_output.policy_params               # one row per environment: logits, or
                                                         # [mean, log_std] concatenated
    agent_output = space.empty_agent_output()           # paired with an episode's first step
    env_output = space.observe(env.initial())           # the observation filter (vectors)
    action = space.sample(params_row, rng)              # what the trajectory stores
    actions = space.sample_group(params, rngs)          # the same for a group's rows
    env.step(space.to_environment(action, env.spec))    # what the environment receives
    agent_output = space.agent_output(action, params_row, baseline)

The space holds its policy's distributions family (`space.distribution`, the network config's
`action_distribution`), which samples in numpy and fixes the action's dtype and shape; the
trajectory's structures.AgentOutput holds the action and the behaviour policy's parameters for
every family.

Categorical (IMPALA's agents): a sample by the Gumbel-max trick; the action is an int32 index.

Diagonal Gaussian (the IMPACT paper's continuous control, section 4.3): the sample
(distributions.DiagGaussianFamily.sample_numpy) is UNCLIPPED in the trajectory (the behaviour
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
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import normalization
from scalable_agent_tf2.structures import AgentOutput


class ActionSpace:
  """The actions of one policy: sampled, stored and sent as its distribution says."""

  def __init__(self, distribution, observation_filter=None):
    """Args:
      distribution: the network's distributions family (its config's action_distribution).
      observation_filter: an ObservationFilter (vector observations), or None (frames,
        indices: observations as the environment gives them).
    """
    self.distribution = distribution
    self.observation_filter = observation_filter

  def empty_agent_output(self):
    """The agent output paired with an episode's first observation (released code: zeros;
    never used: the learner's step t=0 is no action's outcome)."""
    family = self.distribution
    return AgentOutput(action=np.zeros(family.action_shape, family.action_dtype)[()],
                       policy_params=np.zeros(family.param_size, np.float32),
                       baseline=np.float32(0))

  def empty_group_outputs(self, num_envs):
    """empty_agent_output for each of a group's num_envs environments: [G] rows."""
    family = self.distribution
    return AgentOutput(
        action=np.zeros((num_envs,) + tuple(family.action_shape), family.action_dtype),
        policy_params=np.zeros((num_envs, family.param_size), np.float32),
        baseline=np.zeros(num_envs, np.float32))

  def observe(self, env_output):
    """env_output with its observation filtered (before the policy sees or stores it), when
    the space has a filter."""
    return _filtered(env_output, self.observation_filter)

  def sample(self, params, rng):
    """One action from the policy's parameters [P] with rng (a Gaussian's unclipped)."""
    return self.distribution.sample_numpy(params, rng)

  def sample_group(self, params, rngs):
    """The group's actions [G, *action_shape] from its parameters [G, P], row g with rngs[g]."""
    return self.distribution.sample_rows(params, rngs)

  def to_environment(self, action, spec):
    """The copy the environment receives: a discrete action as it is; a continuous one
    clipped to the spec's bounds (the trajectory keeps the unclipped sample)."""
    if self.distribution.discrete:
      return action
    if not isinstance(spec, base.ContinuousEnvSpec):
      raise ValueError(f"A {self.distribution} policy acts on continuous actions; the "
                       f"environment's spec is {spec}.")
    return action_bounds.clip_to_bounds(action, spec.action_low, spec.action_high)

  def group_to_environment(self, actions, spec):
    """to_environment for each of a group's actions [G, ...]."""
    if self.distribution.discrete:
      return actions
    return np.stack([self.to_environment(action, spec) for action in actions])

  def agent_output(self, action, params, baseline):
    """What the trajectory stores for a step: the action in the family's dtype, mu's
    parameters [P] and the baseline."""
    dtype = self.distribution.action_dtype
    return AgentOutput(action=np.asarray(action, dtype)[()], policy_params=params,
                       baseline=baseline)


class ObservationFilter(tf.train.experimental.PythonState):
  """A run's normalization.MeanStdFilter, shared by its actor threads, saved with checkpoints.

  A tf.train.experimental.PythonState: a tf.train.Checkpoint that tracks it (through the agent
  built with it, networks.Agent's observation_filter) writes its statistics at every save and
  reads them back at restore, so a resumed run and a test run normalise as the trained network
  expects.
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
  return network_config.observation_kind == "vector"


def for_network(network_config, observation_filter=None):
  """The action space of a network config (of its action distribution)."""
  return ActionSpace(network_config.action_distribution, observation_filter)


def for_agent(agent):
  """The action space of an agent, with the agent's observation filter."""
  return for_network(agent.config, agent.observation_filter)
