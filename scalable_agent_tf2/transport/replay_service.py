"""LASER's shared replay across processes (Schmitt et al., 2019, section 5.4).

LASER trains the agents of a hyperparameter sweep (or a population) at once; each adds its
experience to one common replay and samples uniformly from all of it, every episode tagged
with the agent that produced it. laser.EpisodeReplay is that replay inside one process
(shared_replay_runs.py); this module serves it to agents in other processes:

    replay service process:   ReplayService(address, capacity)   hosts one EpisodeReplay
    agent (learner) process:  replay_client.ReplayClient(address, agent_tag, signature, ...)
                                .add(unroll, agent, actor)  an online unroll into the replay
                                .sample()                   an Episode of any agent
                                .stats(), len(), episodes_by_agent(), added_by_agent()
    python -m scalable_agent_tf2.transport.replay_service --address=localhost:8010 \\
        --replay_capacity=N
    python experiment.py --laser_replay --replay_fraction=0.875 \\
        --shared_replay_address=localhost:8010 --logdir=/tmp/agent_a ...

ReplayClient (replay_client.py) has the interface laser.EpisodeMixer and training.train
already use for a replay, so `train(config, shared_replay=client)` (or
--shared_replay_address) is all an agent needs. The transport is the learner's service's
(learner_service.py): TensorFlow's gRPC RPC with registered tf.functions, a hello that names
the peer and its trajectory layout, reconnection after a lost service
(service_client.ServiceClient), messages in wire.message_layout order (header, then the
trajectory).

The layout is learned from the first agent: the service needs no experiment flags and starts
no environment. Its first hello (with a layout, wire.describe_layout: every tensor's
name, dtype and shape, plus level, torso and action count) fixes the layout until the service
stops; a later agent with another layout is refused with the differences named. Agents that
share one replay therefore run the same level, network and unroll length; their
hyperparameters (learning rate, entropy cost, ...) may differ. A hello without a layout is an
observer's (stats only: tests, monitoring).

Wire methods (all tensors; the service runs its Python through tf.py_function); each but
challenge takes the credential (challenge, counter, tag: credentials.Gatekeeper) first:
    challenge()                                            -> challenge int64
    hello(protocol int32, layout JSON string, peer string) -> (accepted bool, message string)
    add(agent string, payload string [K])                  -> (accepted bool, message string)
    sample(requester string) -> (found bool, token int64, owner string, num_unrolls int32)
    unroll(token int64, index int32)                       -> (found bool, payload string [K])
    stats() -> (counts int64 [5], agents [N], episodes held [N], episodes added [N],
                unrolls added [N], requesters [M], owners [M], episodes sampled [M])
A payload is the K tensors of wire.flatten_message (MessageHeader, then the
trajectory), each as tf.io.serialize_tensor: RPC methods take fixed argument lists, fixed
when the service starts, before it knows the layout; a serialised TensorProto is typed data,
parsed with its expected dtype (tf.io.parse_tensor) and checked against the layout's shape
before it is stored; nothing is unpickled or evaluated. The header's (actor, incarnation,
sequence) keeps each actor's stream apart and drops an add retried after a lost reply
(learner_service.DeliveryLedger), so a stream never holds an unroll twice.

Traffic: every online unroll crosses once to the service; a sampled episode crosses once to
its sampler, one unroll per call (no message is larger than one trajectory message to a
learner), right after it is sampled. Memory: the service holds --replay_capacity unrolls
(FIFO by episode) plus the episodes being fetched; each agent holds the episodes its replay
lanes are playing, as an in-process replay does.

A service that stops (crash, restart) is noticed by its agents within 30 s (a call's deadline)
and waited for during --shared_replay_connect_secs, after which their learners stop with a clear
error and write their final checkpoint; a restarted service starts empty and takes its layout
from the first agent that reconnects. A service refuses to start on an address something listens
on already (gRPC shares ports silently; two services would split the replay).

Like the learner, the service answers only callers that prove the cluster's secret, for each
call anew (--cluster_secret_file or IMPALA_CLUSTER_SECRET; credentials.Gatekeeper, every
method including hello, on a challenge the service issued: a captured credential cannot be
sent again) and, without a secret, listens on loopback only unless
--insecure_open_cluster. An unroll is checked beyond its shapes before it is stored
(wire.message_problem: header fields, level index, actions), so that no sampler receives one
it cannot read.
"""
import collections
import json
import socket
import sys
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.transport import credentials
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.transport import wire
from scalable_agent_tf2.utils import stop_signals

# 1: the first version (hello with a JSON layout; serialized payloads; episodes by token);
# 2: every call carries a credential first (credentials.Gatekeeper), and "ping"; 3: env_outputs
# gain `truncated` (one more bool [T+1] tensor in every unroll); 4: a credential is
# (challenge, counter, tag) for one call, the challenge issued by "challenge" (so that a
# captured credential cannot be sent again).
REPLAY_PROTOCOL_VERSION = 4
# What the replay service's credentials are computed for (credentials.call_tag).
REPLAY_DOMAIN = "laser replay service"
# LASER section 5.4 shares the replay of a sweep run at once; an agent's learner waits this
# long for the service at its start and after losing it, then stops (its checkpoint written).
DEFAULT_CONNECT_TIMEOUT_SECS = 60.0
# The service answers every call from memory at once, so a call unanswered this long means
# the service is gone. TensorFlow's gRPC client does not fail a call made after its server
# died: the call waits for its whole deadline (measured: 20 of 20 s), so this deadline, not
# the connect timeout, bounds how long an agent takes to notice a lost service.
DEFAULT_CALL_TIMEOUT_SECS = 30.0
# Sampled episodes still being fetched, at most (the oldest is forgotten first; its sampler
# then samples again). Agents fetch right after sampling, so a few per agent suffice.
_MAX_PENDING_EPISODES = 256
# Starts the refusal of an unroll sent to a service that has no layout yet: a restarted
# service, reached by a call made before the restart (TensorFlow's RPC client delivers such a
# call without an error); the client says hello again and resends.
NO_LAYOUT_YET = "no layout yet"
# Starts the service's last console line but one: its final stats as JSON (for scripts).
FINAL_STATS_PREFIX = "Final replay stats: "
# stats()'s counts, in order.
STATS_COUNTS = ("capacity", "episodes", "unrolls", "dropped_unrolls", "duplicates")


class ReplayServiceUnavailable(distributed.ServiceUnavailable):
  """The replay service did not answer within the retry budget."""


def check_address_free(address):
  """Raises ValueError when something listens on `address` ("host:port") already.

  gRPC servers bind with SO_REUSEPORT: a second service on a taken port would start without
  a word and the kernel would split the agents between the two replays. A plain bind (no
  SO_REUSEPORT) fails where any process listens.
  """
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit():
    raise ValueError(f"The replay service's address must be host:port, got {address!r}.")
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no listener.
    try:
      probe.bind((host.strip("[]"), int(port)))
    except OSError as error:
      raise ValueError(f"Cannot listen on {address}: {error.strerror} (another replay "
                       f"service?). Two services on one port would split the replay; "
                       f"choose another --address.") from error


def tensor_text(tensor):
  """A scalar string tensor as str (undecodable bytes replaced)."""
  return tensor.numpy().decode(errors="replace")


class ReplayService:
  """One laser.EpisodeReplay served over TensorFlow's RPC; see the module docstring."""

  def __init__(self, address, capacity, seed=0, print_fn=print, secret=None,
               insecure_open_cluster=False):
    """Starts listening.

    Args:
      address: "host:port" to listen on (the command's default, loopback:
        command_settings.DEFAULT_REPLAY_ADDRESS).
      capacity: unrolls held (FIFO by episode: laser.EpisodeReplay).
      seed: seeds the uniform sampling.
      print_fn: where joins, refusals and problems are logged.
      secret: the cluster's secret (bytes; distributed.cluster_secret) every call must prove,
        or None.
      insecure_open_cluster: let a service without a secret listen beyond loopback.

    Raises:
      ValueError: a capacity that is not a positive integer, or an address taken.
      distributed.ClusterError (a ValueError): a non-loopback address without a secret or
        insecure_open_cluster.
    """
    for line in distributed.check_listen_address(address, secret, insecure_open_cluster,
                                                 service="replay service"):
      print_fn(line)
    check_address_free(address)
    self.address = address
    self.replay = laser.EpisodeReplay(capacity, seed=seed)
    self._print = print_fn
    self._lock = threading.Lock()
    self._layout = None          # describe_layout(...) of the first agent.
    self._layout_peer = None     # Its name.
    self._dtypes = None          # tf.DType per payload tensor.
    self._shapes = None          # list of ints per payload tensor.
    self._done_index = None      # Where env_outputs.done is in a payload.
    self._checked_indices = None  # Where policy_version and the actions are (or None).
    self._ledgers = collections.defaultdict(lambda: learner_service.DeliveryLedger(1))
    self._incarnations = {}      # (agent, actor index) -> the incarnation it streams from.
    self._replaced = set()       # (agent, incarnation) of agent processes a newer one replaced.
    self._unrolls_added = collections.Counter()   # agent -> unrolls admitted.
    self._sampled = collections.Counter()         # (requester, owner) -> episodes sampled.
    self._pending = collections.OrderedDict()     # token -> Episode being fetched.
    # Random start: a token of this service's predecessor (a fetch in flight across a
    # restart) names no episode here.
    self._next_token = wire.new_incarnation()
    self._gatekeeper = credentials.Gatekeeper(secret, REPLAY_DOMAIN, "Replay service",
                                              print_fn=print_fn)
    self._server = tf.distribute.experimental.rpc.Server.create("grpc", address)
    self._gatekeeper.register(self._server, self._methods().items())
    self._server.start()

  @property
  def refused_calls(self):
    """Calls refused so far for their credential (every reason: refusals())."""
    return self._gatekeeper.refusals.total

  def refusals(self):
    """Calls refused for their credential so far: {"total", "by_reason", "by_method"}."""
    return self._gatekeeper.refusals.totals()

  def refusal_summary_lines(self):
    """The refused calls as the stop summary's lines (none when nothing was refused)."""
    return self._gatekeeper.refusals.summary_lines()

  def _methods(self):
    """The registered tf.functions; each runs one of this object's methods in Python."""
    string, int32, int64 = tf.string, tf.int32, tf.int64
    scalar = lambda dtype: tf.TensorSpec([], dtype)

    @tf.function(input_signature=[scalar(int32), scalar(string), scalar(string)])
    def hello(protocol, layout, peer):
      return tf.py_function(self._hello, [protocol, layout, peer], [tf.bool, string])

    @tf.function(input_signature=[scalar(string), tf.TensorSpec([None], string)])
    def add(agent, payload):
      return tf.py_function(self._add, [agent, payload], [tf.bool, string])

    @tf.function(input_signature=[scalar(string)])
    def sample(requester):
      return tf.py_function(self._sample, [requester], [tf.bool, int64, string, int32])

    @tf.function(input_signature=[scalar(int64), scalar(int32)])
    def unroll(token, index):
      return tf.py_function(self._unroll, [token, index], [tf.bool, string])

    @tf.function(input_signature=[])
    def stats():
      return tf.py_function(self._stats, [],
                            [int64, string, int64, int64, int64, string, string, int64])

    @tf.function(input_signature=[])
    def ping():  # A client's liveness check (service_client.ServiceClient.ping).
      return tf.constant(True)
    return dict(hello=hello, add=add, sample=sample, unroll=unroll, stats=stats, ping=ping)

  # The methods' Python side (eager tensors in, numpy or Python values out).

  def _hello(self, protocol, layout, peer):
    peer = tensor_text(peer)
    if int(protocol) != REPLAY_PROTOCOL_VERSION:
      reason = (f"protocol {int(protocol)}, the replay service speaks "
                f"{REPLAY_PROTOCOL_VERSION}: run the same version of this code everywhere")
      self._print(f"Replay service: refused {peer}: {reason}.")
      return False, reason
    text = tensor_text(layout)
    if not text:
      return True, "observer"
    try:
      offered = json.loads(text)
      names = [name for name, _, _ in offered["tensors"]]
      done_index = names.index("env_outputs/done")
      dtypes = [tf.as_dtype(dtype) for _, dtype, _ in offered["tensors"]]
    except (ValueError, KeyError, TypeError) as error:
      reason = f"unreadable layout ({error!r})"
      self._print(f"Replay service: refused {peer}: {reason}.")
      return False, reason
    with self._lock:
      if self._layout is None:
        self._layout, self._layout_peer = offered, peer
        self._dtypes = dtypes
        self._shapes = [list(shape) for _, _, shape in offered["tensors"]]
        self._done_index = done_index
        self._checked_indices = ((names.index("policy_version"),
                                  names.index("agent_outputs/action"))
                                 if {"policy_version", "agent_outputs/action"} <= set(names)
                                 else None)
        self._print(f"Replay service: layout set by {peer}: "
                    f"{json.dumps(offered['settings'], sort_keys=True)}, "
                    f"{len(names)} tensors per unroll.")
        return True, "accepted; layout set"
      differences = wire.layout_differences(self._layout, offered)
    if differences:
      reason = (f"its trajectory layout differs from the replay's (set by "
                f"{self._layout_peer}): " + "; ".join(differences))
      self._print(f"Replay service: refused {peer}: {reason}.")
      return False, reason
    self._print(f"Replay service: {peer} joined.")
    return True, "accepted"

  def _parse(self, payload):
    """(list of numpy arrays, None) for a payload of the layout, or (None, reason)."""
    if self._layout is None:
      return None, f"{NO_LAYOUT_YET}: say hello with a layout first"
    if len(payload) != len(self._dtypes):
      return None, f"{len(payload)} tensors, the layout has {len(self._dtypes)}"
    arrays = []
    for item, dtype, shape, (name, _, _) in zip(payload, self._dtypes, self._shapes,
                                                self._layout["tensors"]):
      try:
        array = tf.io.parse_tensor(item, dtype).numpy()
      except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as error:
        return None, f"{name} is not a {dtype.name} tensor ({error.message.splitlines()[0]})"
      if list(array.shape) != shape:
        return None, f"{name} has shape {list(array.shape)}, the layout {shape}"
      arrays.append(array)
    return arrays, None

  def _add(self, agent, payload):
    agent, payload = tensor_text(agent), list(payload.numpy())
    with self._lock:
      arrays, reason = self._parse(payload)
      if reason is not None:
        self._print(f"Replay service: refused an unroll of {agent}: {reason}.")
        return False, reason
      header = wire.header_of(arrays)
      reason = self._problem(header, arrays)
      if reason is not None:
        self._print(f"Replay service: refused an unroll of {agent} (actor "
                    f"{header.actor_index}, sequence {header.sequence}): {reason}.")
        return False, reason
      if (agent, header.incarnation) in self._replaced:
        # Its streams went on in a newer process with the same tag: two live agents share the
        # tag, and alternating streams would cut every episode short.
        reason = (f"agent tag {agent!r} is in use by another agent process that joined later; "
                  f"give each agent its own --agent_tag")
        self._print(f"Replay service: refused an unroll of {agent}: {reason}.")
        return False, reason
      if not self._ledgers[agent].admit(header):
        return True, "repeated; dropped"  # A retried add whose first attempt arrived.
      stream = (agent, header.actor_index)
      if self._incarnations.get(stream, header.incarnation) != header.incarnation:
        self._replaced.add((agent, self._incarnations[stream]))
        # The actor's process was restarted (e.g. a PBT member): its unfinished episode will
        # never end, and the new process's unrolls must not continue it.
        self.replay.close_stream(agent, header.actor_index)
      elif stream not in self._incarnations and header.sequence > 0:
        # An actor that streamed to this service's predecessor: its episode started there.
        self.replay.join_mid_episode(agent, header.actor_index)
      self._incarnations[stream] = header.incarnation
      self.replay.add(tuple(payload), agent, header.actor_index,
                      done=arrays[self._done_index])
      self._unrolls_added[agent] += 1
    return True, "accepted"

  def _problem(self, header, arrays):
    """wire.message_problem of a parsed unroll, against the layout's settings (levels and
    actions, when the first agent gave them)."""
    settings = self._layout.get("settings", {})
    version, actions = ((arrays[i] for i in self._checked_indices)
                        if self._checked_indices else (0, np.zeros([0], np.int32)))
    return wire.message_problem(header, version, actions, settings.get("num_levels"),
                                settings.get("num_actions"))

  def _sample(self, requester):
    requester = tensor_text(requester)
    try:
      episode = self.replay.sample()
    except IndexError:
      return False, np.int64(-1), "", np.int32(0)
    with self._lock:
      token = self._next_token
      self._next_token += 1
      self._pending[token] = episode
      while len(self._pending) > _MAX_PENDING_EPISODES:
        self._pending.popitem(last=False)
      self._sampled[(requester, episode.agent)] += 1
    return True, np.int64(token), episode.agent, np.int32(len(episode.unrolls))

  def _unroll(self, token, index):
    token, index = int(token), int(index)
    with self._lock:
      episode = self._pending.get(token)
      if episode is None or not 0 <= index < len(episode.unrolls):
        return False, tf.constant([], tf.string, shape=[0])
      if index == len(episode.unrolls) - 1:
        del self._pending[token]  # Fetched whole.
    return True, tf.constant(list(episode.unrolls[index]), tf.string)

  def _stats(self):
    stats = self.stats()
    agents = sorted(set(stats["added_by_agent"]) | set(stats["unrolls_added_by_agent"]))
    pairs = sorted((requester, owner, count)
                   for requester, owners in stats["sampled"].items()
                   for owner, count in owners.items())
    strings = lambda values: tf.constant(values, tf.string, shape=[len(values)])
    return (np.array([stats[name] for name in STATS_COUNTS], np.int64), strings(agents),
            np.array([stats["episodes_by_agent"].get(a, 0) for a in agents], np.int64),
            np.array([stats["added_by_agent"].get(a, 0) for a in agents], np.int64),
            np.array([stats["unrolls_added_by_agent"].get(a, 0) for a in agents], np.int64),
            strings([r for r, _, _ in pairs]), strings([o for _, o, _ in pairs]),
            np.array([c for _, _, c in pairs], np.int64))

  def stats(self):
    """The replay's contents and traffic (see ReplayClient.stats), in this process."""
    with self._lock:
      sampled = collections.defaultdict(dict)
      for (requester, owner), count in self._sampled.items():
        sampled[requester][owner] = count
      return dict(capacity=self.replay.capacity, episodes=len(self.replay),
                  unrolls=self.replay.num_unrolls,
                  dropped_unrolls=self.replay.num_dropped_unrolls,
                  duplicates=sum(sum(l.duplicates.values()) for l in self._ledgers.values()),
                  episodes_by_agent=self.replay.episodes_by_agent(),
                  added_by_agent=self.replay.added_by_agent(),
                  unrolls_added_by_agent=dict(self._unrolls_added), sampled=dict(sampled))


def format_stats(stats):
  """One console line of ReplayClient.stats() / ReplayService.stats()."""
  by_agent = ", ".join(f"{agent} {stats['added_by_agent'].get(agent, 0)} "
                       f"({stats['episodes_by_agent'].get(agent, 0)} held)"
                       for agent in sorted(stats["unrolls_added_by_agent"]))
  sampled = ", ".join(f"{requester}<-{owner} {count}"
                      for requester, owners in sorted(stats["sampled"].items())
                      for owner, count in sorted(owners.items()))
  return (f"Replay: {stats['episodes']} episodes ({stats['unrolls']:,} of "
          f"{stats['capacity']:,} unrolls) held; episodes added by agent: "
          f"{by_agent or 'none yet'}; sampled (requester<-owner): {sampled or 'none yet'}.")


def _parser():
  """The command line: command_settings.ReplayServiceSettings' flags (defaults, help and checks)."""
  return command_line.CommandParser(
      command_settings.ReplayServiceSettings,
      prog="python -m scalable_agent_tf2.transport.replay_service",
      description="LASER's shared replay (Schmitt et al. 2019, section 5.4) for agents in "
                  "other processes: run experiment.py with --laser_replay "
                  "--shared_replay_address=ADDRESS. The trajectory layout is taken from the "
                  "first agent; later agents must match it.")


def main(argv=None):
  """Serves until SIGTERM or Ctrl-C. Exit code 2: bad flags or an address in use."""
  try:
    args, _ = _parser().parse_settings(argv)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  say = lambda line: print(line, flush=True)
  try:
    secret = distributed.cluster_secret(args.cluster_secret_file)
    service = ReplayService(args.address, args.replay_capacity, seed=args.seed, print_fn=say,
                            secret=secret, insecure_open_cluster=args.insecure_open_cluster)
  except (ValueError, tf.errors.OpError) as error:
    print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
    return 2
  protection = ("calls must prove the cluster's secret" if secret is not None else
                "no cluster secret")
  say(f"Replay service listening on {args.address} ({protection}): up to "
      f"{args.replay_capacity:,} unrolls; the first agent sets the trajectory layout.")
  sigterm = stop_signals.SigtermRaises()
  try:
    while True:
      time.sleep(args.log_secs)
      say(format_stats(service.stats()))
  except (KeyboardInterrupt, stop_signals.Stopping):
    pass
  finally:
    sigterm.restore()
  stats = service.stats()
  say(format_stats(stats))
  for line in service.refusal_summary_lines():
    say(line)
  say(f"{FINAL_STATS_PREFIX}{json.dumps(stats, sort_keys=True)}")
  say("Replay service stopped; its contents are gone.")
  return 0


if __name__ == "__main__":
  sys.exit(main())
