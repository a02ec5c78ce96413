"""An agent's connection to LASER's shared replay service (replay_service.py), used as its
replay: laser.EpisodeReplay's interface over TensorFlow's RPC (Schmitt et al., 2019,
section 5.4). The protocol (wire methods, payloads, timeouts) is described in
replay_service.py's module docstring.
"""
import collections
import json
import threading

import tensorflow as tf

from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import service_client
from scalable_agent_tf2.transport import wire
from scalable_agent_tf2.transport.replay_service import DEFAULT_CALL_TIMEOUT_SECS
from scalable_agent_tf2.transport.replay_service import DEFAULT_CONNECT_TIMEOUT_SECS
from scalable_agent_tf2.transport.replay_service import NO_LAYOUT_YET
from scalable_agent_tf2.transport.replay_service import REPLAY_DOMAIN
from scalable_agent_tf2.transport.replay_service import REPLAY_PROTOCOL_VERSION
from scalable_agent_tf2.transport.replay_service import STATS_COUNTS
from scalable_agent_tf2.transport.replay_service import ReplayServiceUnavailable
from scalable_agent_tf2.transport.replay_service import tensor_text


class ReplayClient(service_client.ServiceClient):
  """An agent's connection to a ReplayService, used as its LASER replay (thread-safe).

  Has laser.EpisodeReplay's interface (add, sample, __len__, capacity, num_unrolls,
  episodes_by_agent, added_by_agent), so laser.EpisodeMixer and training.train take it as
  their `shared_replay`. Without a signature it is an observer: stats only.
  """

  def __init__(self, address, agent_tag, signature=None, settings=None, levels=(),
               connect_timeout_secs=DEFAULT_CONNECT_TIMEOUT_SECS,
               call_timeout_secs=DEFAULT_CALL_TIMEOUT_SECS, print_fn=print, secret=None):
    """Connects (waiting up to connect_timeout_secs) and says hello.

    Args:
      address: the service's "host:port".
      agent_tag: this agent's tag (its episodes' owner; the requester of its samples).
      signature: assembly.trajectory_signature(...) of this agent's unrolls; None: observer.
      settings: what agents must share besides tensor shapes (level_name, torso,
        num_actions, ...: assembly.layout_settings), named when they differ.
      levels: the run's level names (a trajectory's level travels as its index).
      connect_timeout_secs: how long to wait for the service at the start and after losing it.
      call_timeout_secs: a call unanswered this long counts the service as lost (then the
        client reconnects, up to connect_timeout_secs).
      secret: the cluster's secret (bytes; distributed.cluster_secret), the service's.

    Raises:
      ReplayServiceUnavailable: no service answered within connect_timeout_secs.
      distributed.PeerRejected: the service refused this agent's layout (the message names
        what differs) or its secret.
    """
    self.agent_tag = agent_tag
    self._signature = signature
    self._levels = list(levels)
    self._layout = None if signature is None else wire.message_layout(signature)
    # The number of levels too: the service refuses an unroll naming a level beyond them.
    description = ("" if signature is None else json.dumps(
        wire.describe_layout(signature, **(settings or {}), num_levels=len(self._levels)),
        sort_keys=True))
    self._incarnation = wire.new_incarnation()
    self._sequences = collections.Counter()  # Actor index -> unrolls sent so far.
    self._send_lock = threading.Lock()
    super().__init__(
        address, agent_tag,
        [tf.constant(REPLAY_PROTOCOL_VERSION), tf.constant(description),
         tf.constant(agent_tag)],
        service="replay service",
        start_hint=(f"Start it (python -m scalable_agent_tf2.transport.replay_service "
                    f"--address={address} --replay_capacity=N) or check "
                    f"--shared_replay_address."),
        refusal_hint=("Agents sharing a replay must play the same level with the same "
                      "network and --unroll_length; only hyperparameters may differ."),
        unavailable_error=ReplayServiceUnavailable, connect_timeout_secs=connect_timeout_secs,
        call_timeout_secs=call_timeout_secs, print_fn=print_fn, secret=secret,
        domain=REPLAY_DOMAIN)

  def _require_layout(self, what):
    if self._layout is None:
      raise ValueError(f"This replay client is an observer (no signature): it cannot {what}.")

  def add(self, unroll, agent, actor):
    """Sends an actor's next unroll (structures.Trajectory) to the shared replay.

    Args:
      unroll: the trajectory (its level must be one of `levels`).
      agent: the tag its episode is stored under (this client's agent_tag, as EpisodeMixer
        passes it).
      actor: the actor's index within this agent (its stream).

    Raises:
      distributed.PeerRejected: the service refused the unroll (the message says why).
      ReplayServiceUnavailable: the service is gone (no answer within the timeout).
    """
    self._require_layout("add unrolls")
    with self._send_lock:  # One sequence per actor, in sending order.
      header = wire.MessageHeader(self._levels.index(unroll.level_name), actor,
                                         self._incarnation, self._sequences[actor])
      payload = tf.stack([tf.io.serialize_tensor(a) for a in
                          wire.flatten_message(self._layout, header, unroll)])
      accepted, message = self._call("add", [tf.constant(agent), payload])
      if not accepted.numpy() and tensor_text(message).startswith(NO_LAYOUT_YET):
        self._reconnect(self._generation, f"The replay service at {self.address} was restarted")
        accepted, message = self._call("add", [tf.constant(agent), payload])
      if not accepted.numpy():
        raise distributed.PeerRejected(f"The replay service at {self.address} refused an "
                                       f"unroll of {agent}: {tensor_text(message)}.")
      self._sequences[actor] += 1

  def sample(self):
    """A laser.Episode of any agent, uniformly among those held (LASER section 5.4).

    Returns:
      Episode(agent = its owner's tag, unrolls = tuple of structures.Trajectory).

    Raises:
      IndexError: the replay holds no complete episode yet.
      ReplayServiceUnavailable: the service is gone.
    """
    self._require_layout("sample")
    for _ in range(3):  # An episode forgotten mid-fetch (many samplers at once): again.
      found, token, owner, count = self._call("sample", [tf.constant(self.agent_tag)])
      if not found.numpy():
        raise IndexError(f"The shared replay at {self.address} holds no complete episode "
                         f"yet.")
      unrolls = []
      for index in range(int(count)):
        found, payload = self._call("unroll", [token, tf.constant(index, tf.int32)])
        if not found.numpy():
          break
        unrolls.append(self._trajectory(payload))
      else:
        return laser.Episode(tensor_text(owner), tuple(unrolls))
    raise IndexError(f"Sampled episodes of {self.address} kept being forgotten before they "
                     f"were fetched; too many samplers for the service's pending list.")

  def _trajectory(self, payload):
    arrays = [tf.io.parse_tensor(item, spec.dtype).numpy()
              for item, spec in zip(tf.unstack(payload), self._layout)]
    return wire.unflatten_message(arrays, self._signature, self._levels)[1]

  def stats(self):
    """The service's contents and traffic.

    Returns:
      dict: capacity, episodes, unrolls (held), dropped_unrolls (of episodes longer than the
      capacity), duplicates (retried adds dropped), episodes_by_agent (held), added_by_agent
      (episodes stored since the start), unrolls_added_by_agent, sampled ({requester:
      {owner: episodes sampled}}).
    """
    (counts, agents, held, added, unrolls, requesters, owners,
     sampled) = [t.numpy() for t in self._call("stats", [])]
    agents = [a.decode() for a in agents]
    result = dict(zip(STATS_COUNTS, (int(c) for c in counts)))
    result.update(
        episodes_by_agent={a: int(n) for a, n in zip(agents, held) if n},
        added_by_agent={a: int(n) for a, n in zip(agents, added) if n},
        unrolls_added_by_agent={a: int(n) for a, n in zip(agents, unrolls)})
    by_requester = collections.defaultdict(dict)
    for requester, owner, count in zip(requesters, owners, sampled):
      by_requester[requester.decode()][owner.decode()] = int(count)
    result["sampled"] = dict(by_requester)
    return result

  @property
  def capacity(self):
    return self.stats()["capacity"]

  @property
  def num_unrolls(self):
    return self.stats()["unrolls"]

  def __len__(self):
    return self.stats()["episodes"]

  def episodes_by_agent(self):
    return self.stats()["episodes_by_agent"]

  def added_by_agent(self):
    return self.stats()["added_by_agent"]
