"""The agent's acting step for actor threads (actor.py): one call per step of a group of G
environments, batched across threads (BatchedPolicy) or run by each thread (PerActorPolicy),
and the numpy side around it: instruction encoding.

    policy = BatchedPolicy(agent)   # one forward pass for many actor threads
    params, baseline, core_states = policy(prev_actions, env_outputs, core_states)
    actions = policy.action_space.sample_group(params, rngs)

Actions are sampled in numpy (action_spaces.ActionSpace), from the batched policy's
parameters with one random generator per environment slot: which other actors share a forward
pass never changes an environment's actions, so seeded evaluations are repeatable.
"""
import numpy as np
import tensorflow as tf

import dynamic_batching
from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation


def acting_step(agent):
  """The agent's acting step on a batch: (prev_action [B, *action_shape], reward [B],
  done [B], frame [B, H, W, C], instruction [B, 16] or (), core_state) -> (policy_params
  [B, P] (logits, or a Gaussian's mean and log_std), baseline [B], new core_state)."""
  use_instruction = agent.config.use_instruction

  def policy(prev_action, reward, done, frame, instruction, core_state):
    if not use_instruction:
      instruction = tf.zeros([tf.shape(frame)[0], language.MAX_INSTRUCTION_WORDS], tf.int32)
    env_output = EnvOutput(reward=reward, done=done,
                           observation=Observation(frame=frame, instruction=instruction),
                           episode_return=(), episode_step=(), truncated=())
    add_time = lambda t: t[tf.newaxis]
    output, core_state = agent.unroll(
        add_time(prev_action), tf.nest.map_structure(add_time, env_output), core_state)
    return output.policy_params[0], output.baseline[0], core_state
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
      prev_actions: [G, *action_shape], the actions that led to env_outputs.
      env_outputs: EnvOutput of numpy arrays [G, ...] (instruction as int32 word ids [G, 16]).
      core_states: the states returned by the previous call, or initial_states(G).

    Returns:
      (policy_params float32 [G, P], baseline float32 [G], new core_states).
    """
    instruction = env_outputs.observation.instruction if self._config.use_instruction else ()
    params, baseline, core_states = self._step(
        prev_actions, env_outputs.reward, env_outputs.done, env_outputs.observation.frame,
        instruction, core_states)
    return _to_numpy(params), _to_numpy(baseline), tf.nest.map_structure(_to_numpy, core_states)

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


class TaskBaseline:
  """A policy for the actors of one task of an agent with one value output per task
  (per-task PopArt, Hessel et al. 2019): its baseline [G] is that task's normalised output
  n_task(x), the one the learner reads for the trajectory (popart.PopArt.select), as a
  single-task agent's is its one n(x); the rest is `policy`'s."""

  def __init__(self, policy, task):
    self._policy = policy
    self._task = int(task)

  def __call__(self, prev_actions, env_outputs, core_states):
    params, baseline, core_states = self._policy(prev_actions, env_outputs, core_states)
    return params, np.asarray(baseline)[:, self._task], core_states

  def __getattr__(self, name):  # action_space, initial_states, close, ...
    return getattr(self._policy, name)


def encode_group_instructions(env_outputs, no_instructions=None):
  """A group's outputs with instructions as int32 word ids [G, 16]. No hashing when every
  instruction is empty (Atari, the toy levels): the ids are `no_instructions`, the zeros [G, 16]
  an actor builds once for its group (language.empty_instructions; read-only, as the steps
  share them), or new zeros."""
  instructions = env_outputs.observation.instruction
  if any(instructions):
    encoded = language.hash_instructions(np.asarray(list(instructions), dtype=object))
  elif no_instructions is not None and len(no_instructions) == len(instructions):
    encoded = no_instructions
  else:
    encoded = language.empty_instructions([len(instructions)])
  return env_outputs._replace(
      observation=env_outputs.observation._replace(instruction=encoded))
