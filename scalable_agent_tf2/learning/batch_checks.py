"""Checks of a learner batch against the agent's network, with messages that name the field
and the shape expected (learner.Learner.update and ImpactLearner.update call them before
their compiled step).
"""
import tensorflow as tf

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.structures import AgentOutput, EnvOutput, Observation


def checked_num_new_trajectories(num_new_trajectories, env_outputs):
  """int64 scalar: the batch's new trajectories (None: all B), checked against B."""
  if num_new_trajectories is None:
    return tf.cast(tf.shape(env_outputs.reward)[1], tf.int64)
  batch_size = env_outputs.reward.shape[1]
  if batch_size is not None and not 0 <= int(num_new_trajectories) <= batch_size:
    raise ValueError(f"num_new_trajectories must be in [0, {batch_size}] (the batch size), "
                     f"got {num_new_trajectories}.")
  return tf.constant(int(num_new_trajectories), tf.int64)


def check_batch(network_config, agent_state, env_outputs, agent_outputs):
  """Validates a learner batch against the network, with messages that name the field.

  The network config fixes the observation (frame_shape, frame_dtype: uint8 frames, or a
  float32 observation vector [O]) and its `action_distribution` (distributions.py) the
  agent outputs: the action's dtype and shape and the policy's parameters (policy_params
  [P]: the logits [N], or a Gaussian's means and log standard deviations [2A]).

  Returns (env_outputs, agent_outputs) with every field converted to a tensor.
  Raises ValueError (or TypeError) on a malformed batch.
  """
  if not isinstance(env_outputs, EnvOutput) or not isinstance(
      env_outputs.observation, Observation):
    raise TypeError("env_outputs must be an EnvOutput whose observation is an Observation.")
  family = network_config.action_distribution
  if not isinstance(agent_outputs, AgentOutput):
    raise TypeError(f"agent_outputs must be an AgentOutput (got a "
                    f"{type(agent_outputs).__name__}).")
  env_outputs, agent_outputs, leading = _as_tensors_of_t_plus_1_steps(env_outputs,
                                                                      agent_outputs)
  expected = {
      "env_outputs.done": (env_outputs.done, ()),
      "env_outputs.truncated": (env_outputs.truncated, ()),
      "env_outputs.observation.frame": (env_outputs.observation.frame,
                                        tuple(network_config.frame_shape)),
      "agent_outputs.action": (agent_outputs.action, tuple(family.action_shape)),
  }
  expected["agent_outputs.policy_params"] = (agent_outputs.policy_params, (family.param_size,))
  expected["agent_outputs.baseline"] = (agent_outputs.baseline, ())
  if network_config.use_instruction:
    expected["env_outputs.observation.instruction"] = (
        env_outputs.observation.instruction, (language.MAX_INSTRUCTION_WORDS,))
  for name, (tensor, trailing) in expected.items():
    want = tf.TensorShape(list(leading) + list(trailing))
    if not tensor.shape.is_compatible_with(want):
      raise ValueError(f"{name} has shape {tensor.shape}, expected {want} "
                       "([T+1, B] like env_outputs.reward, then the network's shape).")
  frame_dtype = tf.as_dtype(network_config.frame_dtype)
  if env_outputs.observation.frame.dtype != frame_dtype:
    raise ValueError(f"env_outputs.observation.frame must be {frame_dtype.name}, got "
                     f"{env_outputs.observation.frame.dtype.name}.")
  action_dtype = tf.as_dtype(family.action_dtype)
  if action_dtype.is_integer and not agent_outputs.action.dtype.is_integer:
    raise ValueError(f"agent_outputs.action must be an integer tensor, got "
                     f"{agent_outputs.action.dtype.name}.")
  if not action_dtype.is_integer and agent_outputs.action.dtype != action_dtype:
    raise ValueError(f"agent_outputs.action must be {action_dtype.name} for a "
                     f"{family}, got {agent_outputs.action.dtype.name}.")
  batch = leading[1]
  for index, state in enumerate(tf.nest.flatten(agent_state)):
    state = tf.convert_to_tensor(state)
    if state.shape.rank < 1 or not state.shape[:1].is_compatible_with([batch]):
      raise ValueError(f"agent_state component {index} has shape {state.shape}; its first "
                       f"dimension must be the batch size {batch}.")
  return env_outputs, agent_outputs


def _as_tensors_of_t_plus_1_steps(env_outputs, agent_outputs):
  """Both structures as tensors, and their leading shape [T+1, B] from the rewards (T >= 1)."""
  env_outputs = tf.nest.map_structure(tf.convert_to_tensor, env_outputs)
  agent_outputs = tf.nest.map_structure(tf.convert_to_tensor, agent_outputs)
  reward_shape = env_outputs.reward.shape
  if reward_shape.rank != 2 or reward_shape[0] is None or reward_shape[0] < 2:
    raise ValueError(
        f"env_outputs.reward must be [T+1, B] with T >= 1, got shape {reward_shape}.")
  return env_outputs, agent_outputs, reward_shape[:2]
