"""The learner's RPC service: actors in other processes (and machines) feed it trajectories,
fetch its parameters, report episodes (and sync the observation filter: filter_sync.py).

    learner process:  TrajectoryServer(address, ...)     tf.distribute.experimental.rpc server
                        "hello"      -> a peer of this protocol and trajectory layout, or refused
                        "enqueue"    -> a trajectory into the learner's queue (dequeue())
                        "parameters" -> the learner's latest variables
                        "episode", "ping", and the methods given (filter_sync.learner_methods)

Only tensors cross the wire, as arguments and results of registered tf.functions (gRPC);
nothing is pickled or evaluated. Every peer first says hello with the protocol version
(distributed.PROTOCOL_VERSION) and a fingerprint of the trajectory layout (shapes, dtypes,
level, network; wire.py); a mismatched peer is refused and the learner logs why. Trajectories
are checked again on arrival: a malformed one is refused with a logged reason, never enqueued,
and the learner carries on. With a secret every method is behind credentials.Gatekeeper.
DeliveryLedger is the learner's account of who sent what (duplicates are dropped).
"""
import collections
import sys

import tensorflow as tf

from scalable_agent_tf2.transport import credentials
from scalable_agent_tf2.transport import distributed


def _shape_text(shape):
  return ",".join(str(d) for d in shape)


def _hello_method(expected_fingerprint, stream):
  """The learner's "hello": accepts a peer of this protocol and layout, logs a refusal."""
  expected = tf.constant(expected_fingerprint)

  @tf.function(input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.string),
                                tf.TensorSpec([], tf.string)])
  def hello(protocol, peer_fingerprint, peer):
    accepted = tf.logical_and(tf.equal(protocol, distributed.PROTOCOL_VERSION),
                              tf.equal(peer_fingerprint, expected))
    reason = tf.strings.join([
        "refused: protocol ", tf.strings.as_string(protocol), " (learner ",
        str(distributed.PROTOCOL_VERSION), "), layout fingerprint ", peer_fingerprint, " (learner ",
        expected, ")"])

    def refuse():
      tf.print(tf.strings.join(["Learner: peer ", peer, " ", reason]), output_stream=stream)
      return tf.constant(False)
    accepted = tf.cond(accepted, lambda: tf.constant(True), refuse)
    return accepted, tf.where(accepted, tf.constant("accepted"), reason)
  return hello


def _enqueue_method(queue, layout, stream):
  """The learner's "enqueue": a message of the layout's shapes into `queue`, else a logged
  refusal (False)."""
  expected_shapes = [_shape_text(s.shape.as_list()) for s in layout]
  loose = [tf.TensorSpec(None, s.dtype) for s in layout]

  @tf.function(input_signature=loose)
  def enqueue(*flat):
    checks = [tf.equal(tf.strings.reduce_join(tf.strings.as_string(tf.shape(x)),
                                              separator=","), want)
              for x, want in zip(flat, expected_shapes)]
    matches = tf.reduce_all(tf.stack(checks))

    def accept():
      with tf.control_dependencies([queue.enqueue(
          [tf.ensure_shape(x, s.shape) for x, s in zip(flat, layout)])]):
        return tf.constant(True)

    def refuse():
      tf.print("Learner: refused a trajectory of shapes",
               [tf.shape(x) for x in flat], "expected", expected_shapes,
               output_stream=stream)
      return tf.constant(False)
    return tf.cond(matches, accept, refuse)
  return enqueue


class TrajectoryServer:
  """The learner's side: an RPC server that queues trajectories and serves parameters.

  Trajectories wait in a FIFOQueue (`capacity` messages; a full queue blocks the sending
  actor, which is the back-pressure). `dequeue` hands them to the training loop. With a
  secret, every method refuses callers that cannot prove it (Gatekeeper).
  """

  def __init__(self, address, layout, expected_fingerprint, variables, capacity,
               log_stream=sys.stderr, methods=(), secret=None, refusal_print_fn=None):
    """Args:
      address: "host:port" to listen on (the learner's address in the cluster spec).
      layout: wire.message_layout(...).
      expected_fingerprint: what peers must present (wire.fingerprint(...)).
      variables: the agent's variables, served by `parameters` in this order.
      capacity: queued trajectories at most.
      log_stream: where refusals are logged: sys.stderr or sys.stdout (tf.print's
        output_stream).
      methods: more (name, tf.function) to serve (filter_sync.learner_methods).
      secret: the cluster's secret (bytes; cluster_secret), or None: nothing is checked.
      refusal_print_fn: where calls refused for their credential are logged (a function of
        a line; Gatekeeper, RefusalLog), by default log_stream.
    """
    self.address = address
    self._layout = layout
    self._variables = list(variables)
    self.parameter_version = tf.Variable(0, dtype=tf.int64, trainable=False)
    self._queue = tf.queue.FIFOQueue(capacity, [s.dtype for s in layout],
                                     shapes=[s.shape for s in layout])
    self._episodes = tf.queue.FIFOQueue(100_000, [tf.int32, tf.float32, tf.int32],
                                        shapes=[[], [], []])
    episodes, version, variables = self._episodes, self.parameter_version, self._variables

    @tf.function(input_signature=[])
    def parameters():
      return [version.read_value()] + [v.read_value() for v in variables]

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
                                  tf.TensorSpec([], tf.int32)])
    def episode(level_index, episode_return, episode_step):
      with tf.control_dependencies([episodes.enqueue([level_index, episode_return,
                                                       episode_step])]):
        return tf.constant(True)

    @tf.function(input_signature=[])
    def ping():  # The actor processes' heartbeat: the cheapest authenticated answer.
      return version.read_value()

    self._gatekeeper = credentials.Gatekeeper(
        secret, credentials.LEARNER_DOMAIN, "Learner",
        refusal_print_fn or (lambda line: print(line, file=log_stream, flush=True)))
    methods = [("hello", _hello_method(expected_fingerprint, log_stream)),
               ("enqueue", _enqueue_method(self._queue, layout, log_stream)),
               ("parameters", parameters), ("episode", episode), ("ping", ping)] + list(methods)
    self._server = tf.distribute.experimental.rpc.Server.create("grpc", address)
    self._gatekeeper.register(self._server, methods)
    self._server.start()

  @property
  def refused_calls(self):
    """Calls refused so far for their credential (every reason: refusals())."""
    return self._gatekeeper.refusals.total

  def refusals(self):
    """Calls refused for their credential so far: {"total", "by_reason", "by_method"}
    (RefusalLog.totals; summary_lines() words them for a stop summary)."""
    return self._gatekeeper.refusals.totals()

  def refusal_summary_lines(self):
    """The refused calls as a stop summary's lines (none when nothing was refused)."""
    return self._gatekeeper.refusals.summary_lines()

  def dequeue(self):
    """The next trajectory message (list of numpy arrays), or None once closed and empty."""
    try:
      return [t.numpy() for t in self._queue.dequeue()]
    except tf.errors.OutOfRangeError:
      return None

  def dequeue_episodes(self):
    """[(level_index, episode_return, episode_step)] reported so far (does not block)."""
    count = int(self._episodes.size().numpy())
    if not count:
      return []
    levels, returns, steps = self._episodes.dequeue_many(count)
    return list(zip(levels.numpy().tolist(), returns.numpy().tolist(),
                    steps.numpy().tolist()))

  def size(self):
    return int(self._queue.size().numpy())

  def close(self):
    """Refuses further trajectories and ends `dequeue` once the queue is empty.

    The gRPC server itself cannot be stopped in TensorFlow 2.21; it goes with the process.
    """
    self._queue.close(cancel_pending_enqueues=True)


class DeliveryLedger:
  """The learner's account of who sent what: trajectories per actor process, duplicates.

  `admit` is called once per arriving message, on one thread (the learner's pump).
  """

  def __init__(self, actors_per_process):
    self._actors_per_process = actors_per_process
    self._last_sequence = {}  # (actor_index, incarnation) -> highest sequence admitted.
    self.received = collections.Counter()  # Actor process (task) -> trajectories admitted.
    self.duplicates = collections.Counter()  # Actor process -> repeated messages dropped.

  def task_of(self, header):
    return header.actor_index // self._actors_per_process

  def admit(self, header):
    """True for a message seen for the first time; False for a repeat (to be dropped)."""
    key = (header.actor_index, header.incarnation)
    task = self.task_of(header)
    if header.sequence <= self._last_sequence.get(key, -1):
      self.duplicates[task] += 1
      return False
    self._last_sequence[key] = header.sequence
    self.received[task] += 1
    return True

  @property
  def total(self):
    return sum(self.received.values())


# An actor process is silent when it has sent nothing for this many of its own mean gaps
# between trajectories (and for longer than an environment step may take: silent_secs).
SILENT_GAPS = 20


class SenderWatch:
  """When each actor process joined, fell silent and sent again, from its deliveries.

  The learner cannot tell a dead actor process from a frozen one or one cut off (a process
  that dies says nothing; gRPC does not tell the server): a process that has sent nothing for
  max(silent_secs, SILENT_GAPS x its mean gap) is silent. `delivered` is called by the pump
  thread, `changes` by the supervisor's.
  """

  def __init__(self, silent_secs):
    self._silent_secs = silent_secs
    self._first = {}  # Task -> time of its first trajectory.
    self._last = {}  # Task -> time of its latest one.
    self._count = collections.Counter()
    self._announced = set()
    self._silent = {}  # Task -> the silence's start (its last trajectory then).

  def delivered(self, task, now):
    self._first.setdefault(task, now)
    self._last[task] = now
    self._count[task] += 1

  def _limit(self, task):
    count = self._count[task]
    mean_gap = (self._last[task] - self._first[task]) / (count - 1) if count > 1 else 0.0
    return max(self._silent_secs, SILENT_GAPS * mean_gap)

  def changes(self, now):
    """[(task, event, seconds)] since the last call: event "joined" (its first trajectory;
    seconds 0), "silent" (seconds without a trajectory) or "sending again" (after seconds of
    silence)."""
    events = []
    for task, last in sorted(dict(self._last).items()):
      if task not in self._announced:
        self._announced.add(task)
        events.append((task, "joined", 0.0))
      since = self._silent.get(task)
      if since is not None and last > since:
        del self._silent[task]
        events.append((task, "sending again", last - since))
      elif since is None and now - last > self._limit(task):
        self._silent[task] = last
        events.append((task, "silent", now - last))
    return events

  def sending(self):
    """Actor processes that joined and are not silent."""
    return sorted(set(self._last) - set(self._silent))
