"""The trajectory message: what crosses the wire between actor processes, the learner and
LASER's replay service (learner_service.py, service_client.py and replay_service.py carry it).

A message is a MessageHeader (level, sender, sequence number) followed by one trajectory
(structures.Trajectory) in assembly.trajectory_signature's order, flattened to a list of
tensors (message_layout). Peers agree on the layout before they exchange messages: the
learner compares a short digest (fingerprint); the replay service, which learns its layout from its
first agent, compares a readable account (describe_layout, layout_differences) so that it can
name what differs.

What arrives is checked beyond its shapes before anything trains on it or stores it
(message_problem): a level index outside the run's levels, an action outside the action space,
a policy version from the future or a negative header field would otherwise crash the
learner's pump (an index out of range) or be trained on as if it were true.
"""
import collections
import hashlib
import os

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.structures import Trajectory


class MessageHeader(collections.namedtuple(
    "MessageHeader", "level_index actor_index incarnation sequence")):
  """What precedes a trajectory on the wire: its level and who sent it.

  actor_index: the global actor number (task * num_actors + thread); incarnation: a random
  number drawn when the actor process starts; sequence: 0, 1, ... per actor thread. A message
  that arrives twice (a send retried after a lost reply) repeats (actor_index, incarnation,
  sequence) and is dropped by the learner's DeliveryLedger instead of being trained on twice.
  """


def message_layout(signature):
  """Flat TensorSpecs of one trajectory message: (MessageHeader as int64 [4], trajectory).

  Args:
    signature: assembly.trajectory_signature(...) (policy_version, state, env, agent outputs).
  """
  return [tf.TensorSpec([len(MessageHeader._fields)], tf.int64)] + tf.nest.flatten(signature)


# flatten_message's parts after the header, in order (assembly.trajectory_signature's tuple).
_MESSAGE_PARTS = ("policy_version", "agent_state", "env_outputs", "agent_outputs")


def _leaf_names(structure, prefix):
  """Names of tf.nest.flatten(structure)'s leaves, in its order ("a/b/0": fields of
  namedtuples, indices of tuples and lists, sorted keys of dicts, joined by "/")."""
  if isinstance(structure, dict):
    items = [(str(k), structure[k]) for k in sorted(structure)]
  elif hasattr(structure, "_fields"):
    items = list(zip(structure._fields, structure))
  elif isinstance(structure, (tuple, list)):
    items = [(str(i), value) for i, value in enumerate(structure)]
  else:
    return [prefix]
  return [name for key, value in items for name in _leaf_names(value, f"{prefix}/{key}")]


def message_names(signature):
  """Names of message_layout(signature)'s tensors, e.g. "header", "env_outputs/done"."""
  return ["header"] + [name.lstrip("/") for part, value in zip(_MESSAGE_PARTS, signature)
                       for name in _leaf_names(value, part)]


def describe_layout(signature, **settings):
  """A readable account of message_layout(signature) and the settings peers must share.

  What a service that learns its layout from its first peer (the replay service) keeps and
  compares: JSON-serialisable, so it crosses the wire as one string.

  Returns:
    {"settings": settings, "tensors": [[name, dtype name, shape list], ...]} in wire order.
  """
  layout = message_layout(signature)
  return {"settings": dict(settings),
          "tensors": [[name, spec.dtype.name, spec.shape.as_list()]
                      for name, spec in zip(message_names(signature), layout)]}


def layout_differences(expected, offered):
  """What differs between two describe_layout(...) results, one readable line per item.

  Returns:
    list of str such as "env_outputs/observation/frame: shape [11, 20, 20, 1], expected
    [21, 20, 20, 1]"; empty when the layouts agree.
  """
  lines = []
  want, have = expected.get("settings", {}), offered.get("settings", {})
  for key in sorted(set(want) | set(have)):
    if want.get(key) != have.get(key):
      lines.append(f"{key}: {have.get(key)!r}, expected {want.get(key)!r}")
  want = {name: (dtype, shape) for name, dtype, shape in expected.get("tensors", [])}
  have = {name: (dtype, shape) for name, dtype, shape in offered.get("tensors", [])}
  for name in [n for n, _, _ in offered.get("tensors", [])]:
    if name not in want:
      lines.append(f"{name}: not in the expected layout")
    elif have[name] != want[name]:
      (dtype, shape), (want_dtype, want_shape) = have[name], want[name]
      if dtype != want_dtype:
        lines.append(f"{name}: dtype {dtype}, expected {want_dtype}")
      if shape != want_shape:
        lines.append(f"{name}: shape {shape}, expected {want_shape}")
  lines.extend(f"{name}: missing" for name, _, _ in expected.get("tensors", [])
               if name not in have)
  return lines


def new_incarnation():
  """A random 62-bit number that tells this actor process's messages from its predecessor's."""
  return int.from_bytes(os.urandom(8), "little") >> 2


def fingerprint(layout, **settings):
  """A short digest of the message layout and the settings both sides must share."""
  text = repr([(s.dtype.name, s.shape.as_list()) for s in layout]) + repr(sorted(
      settings.items()))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def flatten_message(layout, header, trajectory):
  """(MessageHeader, Trajectory) as the flat list of numpy arrays of `layout`
  (message_layout)."""
  values = [list(header)] + tf.nest.flatten(
      (trajectory.policy_version, trajectory.agent_state, trajectory.env_outputs,
       trajectory.agent_outputs))
  return [np.asarray(value, spec.dtype.as_numpy_dtype) for value, spec in zip(values, layout)]


def message_problem(header, policy_version, actions, num_levels, num_actions=None,
                    newest_version=None):
  """Why a message cannot be trained on or stored, or None when it can.

  Non-finite rewards and observations are the learner's input's business
  (input_pipeline.LearnerInput.put_trajectory); this is what only the wire can get wrong.

  Args:
    header: its MessageHeader.
    policy_version: the trajectory's policy_version (learner updates when it started).
    actions: its agent_outputs.action array: integers for a discrete action space, floats
      for a continuous one.
    num_levels: the run's levels (a level index must name one); None: only checked to be
      non-negative.
    num_actions: the discrete action space's size (None: not checked).
    newest_version: the receiver's learner updates so far (None: not checked). A learner
      restarted from its checkpoint refuses the unrolls its actors started before (at most
      one per actor thread): they name updates it no longer has.

  Returns:
    str, the reason (e.g. "level index 7 is outside the run's 2 levels"), or None.
  """
  for field in ("actor_index", "incarnation", "sequence"):
    if getattr(header, field) < 0:
      return f"header field {field} is negative ({getattr(header, field)})"
  if header.level_index < 0 or (num_levels is not None and header.level_index >= num_levels):
    return f"level index {header.level_index} is outside the run's {num_levels} levels"
  version = int(np.asarray(policy_version))
  if version < 0:
    return f"policy version {version} is negative"
  if newest_version is not None and version > newest_version:
    return (f"policy version {version} is from the future (the learner has made "
            f"{newest_version} updates)")
  actions = np.asarray(actions)
  if np.issubdtype(actions.dtype, np.floating):
    if not np.all(np.isfinite(actions)):
      return "a continuous action is not finite"
  elif np.issubdtype(actions.dtype, np.integer) and num_actions is not None and actions.size:
    low, high = int(actions.min()), int(actions.max())
    if low < 0 or high >= num_actions:
      bad = low if low < 0 else high
      return f"action {bad} is outside the {num_actions} actions (0 to {num_actions - 1})"
  return None


def header_of(message):
  """The MessageHeader of a message of message_layout (its first tensor)."""
  fields = np.asarray(message[0]).reshape(-1)[:len(MessageHeader._fields)]
  return MessageHeader(*(int(v) for v in fields))


def unflatten_message(message, signature, levels):
  """(MessageHeader, structures.Trajectory) from a message of message_layout (checked by
  message_problem first: the header's level index picks one of `levels`)."""
  header = header_of(message)
  policy_version, agent_state, env_outputs, agent_outputs = tf.nest.pack_sequence_as(
      signature, message[1:])
  return header, Trajectory(
      level_name=levels[header.level_index], policy_version=int(policy_version),
      agent_state=agent_state, env_outputs=env_outputs, agent_outputs=agent_outputs)
