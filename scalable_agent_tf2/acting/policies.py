"""The agent's acting step for actor threads (actor.py): one call per step of a group of G
environments, batched across threads (BatchedPolicy) or run by each thread (PerActorPolicy),
and the numpy side around it: action sampling, empty agent outputs, instruction encoding.

    policy = BatchedPolicy(agent)   # one forward pass for many actor threads
    logits, baseline, core_states = policy(prev_actions, env_outputs, core_states)
    actions = sample_group_actions(policy.action_space, logits, rngs)

Actions are sampled here, in numpy, from the batched policy's logits with one random generator
per environment slot: which other actors share a forward pass never changes an environment's
actions, so seeded evaluations are repeatable.
"""
import numpy as np
import tensorflow as tf

import dynamic_batching
from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.structures import AgentOutput, EnvOutput, Observation

def sample_action(policy_logits, rng):
  """One action from softmax(policy_logits [NUM_ACTIONS]) by the Gumbel-max trick, an int
  (distributions.CategoricalFamily.sample_numpy: its one home)."""
  return distributions.CategoricalFamily(np.shape(policy_logits)[-1]).sample_numpy(
      policy_logits, rng)


def sample_actions(policy_logits, rngs):
  """One action per row of policy_logits [G, NUM_ACTIONS], row g drawn with rngs[g]: int32
  [G] (distributions.CategoricalFamily.sample_rows)."""
  return distributions.CategoricalFamily(np.shape(policy_logits)[-1]).sample_rows(
      policy_logits, rngs)


def empty_agent_outputs(num_envs, num_actions):
  """The agent outputs paired with episodes' first observations (released code: zeros), [G]."""
  return AgentOutput(action=np.zeros(num_envs, np.int32),
                     policy_logits=np.zeros((num_envs, num_actions), np.float32),
                     baseline=np.zeros(num_envs, np.float32))


def sample_group_actions(space, params, rngs):
  """The group's actions from its policy parameters [G, P] (the space's distribution)."""
  return space.sample_group(params, rngs)


def empty_group_outputs(space, num_envs, spec):
  """empty_agent_outputs for any action space: [G] rows of the space's empty output."""
  return space.empty_group_outputs(num_envs, spec)


def group_environment_actions(space, actions, spec):
  """What the group's step() receives: the sampled actions, continuous ones clipped to the
  action space's bounds (the trajectory keeps the unclipped sample)."""
  return space.group_to_environment(actions, spec)


def environment_actions(actions):
  """What the group's step() receives for the sampled actions int32 [G]."""
  return actions


def acting_step(agent):
  """The agent's acting step on a batch: (prev_action [B], reward [B], done [B], frame
  [B, H, W, C], instruction [B, 16] or (), core_state) -> (policy_logits [B, A], baseline [B],
  new core_state); for a Gaussian policy (mean and log_std [B, 2A], baseline, state)."""
  use_instruction = agent.config.use_instruction
  distribution = agent.config.action_distribution

  def policy(prev_action, reward, done, frame, instruction, core_state):
    if not use_instruction:
      instruction = tf.zeros([tf.shape(frame)[0], networks.MAX_INSTRUCTION_WORDS], tf.int32)
    env_output = EnvOutput(reward=reward, done=done,
                           observation=Observation(frame=frame, instruction=instruction),
                           episode_return=(), episode_step=())
    add_time = lambda t: t[tf.newaxis]
    output, core_state = agent.unroll(
        add_time(prev_action), tf.nest.map_structure(add_time, env_output), core_state)
    return distribution.params_of(output)[0], output.baseline[0], core_state
  return policy


def _to_numpy(x):
  return x.numpy() if hasattr(x, "numpy") else x


class _Policy:
  """A group's step (G rows) through a batched step function `self._step`."""

  def __init__(self, agent):
    self._config = agent.config
    self.action_space = action_spaces.for_agent(agent)
    self._initial_state = tf.nest.map_structure(lambda t: t.numpy()[0],
                                                agent.initial_state(1))

  def initial_state(self):
    """The core state at the start of an episode (numpy, no batch dimension)."""
    return self._initial_state

  def initial_states(self, num_envs):
    """initial_state() for each of num_envs environments (numpy [G, ...])."""
    return tf.nest.map_structure(lambda s: np.repeat(s[np.newaxis], num_envs, axis=0),
                                 self._initial_state)

  def __call__(self, prev_actions, env_outputs, core_states):
    """One step of a group of G environments, in one call.

    Args:
      prev_actions: int32 [G], the actions that led to env_outputs.
      env_outputs: EnvOutput of numpy arrays [G, ...] (instruction as int32 word ids [G, 16]).
      core_states: the states returned by the previous call, or initial_states(G).

    Returns:
      (policy_logits float32 [G, NUM_ACTIONS], baseline float32 [G], new core_states).
    """
    instruction = env_outputs.observation.instruction if self._config.use_instruction else ()
    logits, baseline, core_states = self._step(
        prev_actions, env_outputs.reward, env_outputs.done, env_outputs.observation.frame,
        instruction, core_states)
    return _to_numpy(logits), _to_numpy(baseline), tf.nest.map_structure(_to_numpy, core_states)

  def close(self):
    pass


class BatchedPolicy(_Policy):
  """The agent's acting step for one group at a time, batched across actor threads.

  Each call is one actor's group of rows; dynamic_batching gathers the calls of many threads
  into one forward pass on `device`. The agent's variables are read at every pass, so actors
  always act with the learner's latest parameters.
  """

  def __init__(self, agent, device=None, maximum_batch_size=1024, timeout_ms=100):
    """Args:
      agent: networks.Agent.
      device: where the forward pass runs (the learner's device), e.g. "/cpu:0".
      maximum_batch_size: most rows (environments) served by one pass.
      timeout_ms: how long a pass waits for more callers once one is waiting (the released
        code's dynamic_batching default, 100 ms; any waiting actor is served when the serving
        thread is free, so this only bounds the latency of a lone caller).
    """
    super().__init__(agent)
    self._step = dynamic_batching.batch_fn_with_options(
        minimum_batch_size=1, maximum_batch_size=maximum_batch_size, timeout_ms=timeout_ms,
        allow_groups=True, device=device)(acting_step(agent))

  def placement(self):
    """{"batcher": devices, "computation": devices} of the traced forward pass
    (dynamic_batching.BatchedFunction.placement): the batcher's ops on the CPU, whose only
    kernels they have, the network on `device`; None before the first call."""
    return self._step.placement()

  def close(self):
    self._step.close()


class PerActorPolicy(_Policy):
  """Each actor thread runs the forward pass itself, on its own group (no dynamic batching).

  Table 1's comparison point for dynamic batching; same interface as BatchedPolicy.
  """

  def __init__(self, agent, device=None):
    super().__init__(agent)
    step = tf.function(acting_step(agent))
    device = device or "/cpu:0"

    def on_device(*args):
      with tf.device(device):
        return step(*args)
    self._step = on_device


def encode_instruction(env_output):
  """The env output with its instruction string(s) replaced by int32 word ids [..., 16]."""
  observation = env_output.observation
  return env_output._replace(observation=observation._replace(
      instruction=networks.hash_instructions(observation.instruction)))


def encode_group_instructions(env_outputs):
  """A group's outputs with instructions as int32 word ids [G, 16]; no hashing when every
  instruction is empty (Atari, the toy levels)."""
  instructions = env_outputs.observation.instruction
  if not any(instructions):
    encoded = networks.empty_instructions([len(instructions)])
  else:
    encoded = networks.hash_instructions(np.asarray(list(instructions), dtype=object))
  return env_outputs._replace(
      observation=env_outputs.observation._replace(instruction=encoded))
