"""Actors in other processes (and machines) feeding one learner over TensorFlow's own RPC.

    learner process:  TrajectoryServer(address, ...)     tf.distribute.experimental.rpc server
    actor process:    LearnerClient(address, ...)        tf.distribute.experimental.rpc client
                        .parameters()      -> the learner's latest variables (start of an unroll)
                        .send_trajectory() -> into the learner's trajectory queue
                        .report_episode()  -> the learner's monitor; .sync_filter(): filter_sync.py

Only tensors cross the wire, as arguments and results of registered tf.functions (gRPC);
nothing is pickled or evaluated. Every peer first says hello with the protocol version and
a fingerprint of the trajectory layout (shapes, dtypes, level, network); a mismatched peer is
refused and the learner logs why. Trajectories are checked again on arrival: a malformed one
is refused with a logged reason, never enqueued, and the learner carries on.

ServiceClient holds what every client of these services shares (connect with a deadline,
hello, reconnect after a lost service); replay_service.py builds LASER's shared replay service
on it. The messages themselves (header, trajectory layout, fingerprint) are wire.py's.

Cluster layout (the standard TF_CONFIG format, or --cluster with the same "cluster" part):
    {"cluster": {"learner": ["host:port"], "actor": ["host:port", ...]},
     "task": {"type": "actor", "index": 0}}
Only the learner listens (on its own address from the spec); actors only connect.
"""
import collections
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import errors as tf_errors  # Error code -> class.

from scalable_agent_tf2 import wire

# 2: messages start with a wire.MessageHeader; 3: the filter sync (filter_sync.py).
PROTOCOL_VERSION = 3
LEARNER_JOB, ACTOR_JOB = "learner", "actor"
# Loopback: with no cluster given, nothing listens beyond this machine.
DEFAULT_LEARNER_ADDRESS = "localhost:8001"


class ClusterError(ValueError):
  """A cluster specification that cannot work."""


class PeerRejected(RuntimeError):
  """A service refused this peer or its data (protocol or trajectory layout differs)."""


def parse_cluster(cluster_json="", environ=None):
  """The cluster as {job: [addresses]}, from --cluster or else TF_CONFIG.

  Args:
    cluster_json: JSON {"learner": [...], "actor": [...]} (the "cluster" part of TF_CONFIG),
      or "" to read TF_CONFIG.
    environ: the environment (os.environ by default).

  Returns:
    dict job -> list of "host:port"; {"learner": [DEFAULT_LEARNER_ADDRESS]} when neither is
    given.

  Raises:
    ClusterError: malformed JSON, or no single learner address.
  """
  environ = os.environ if environ is None else environ
  source = "--cluster"
  text = cluster_json
  if not text and environ.get("TF_CONFIG"):
    source, text = "TF_CONFIG", environ["TF_CONFIG"]
  if not text:
    return {LEARNER_JOB: [DEFAULT_LEARNER_ADDRESS]}
  try:
    value = json.loads(text)
  except ValueError as error:
    raise ClusterError(f"{source} is not valid JSON: {error}") from error
  cluster = value.get("cluster", value) if source == "TF_CONFIG" else value
  if not isinstance(cluster, dict) or not isinstance(cluster.get(LEARNER_JOB), list) or len(
      cluster[LEARNER_JOB]) != 1:
    raise ClusterError(f"{source} must name exactly one learner address, e.g. "
                       f'{{"learner": ["host:8001"], "actor": ["host2:8002"]}}; got {text!r}.')
  return {job: [str(a) for a in addresses] for job, addresses in cluster.items()}


def task_from_environment(environ=None):
  """(job_name, task index) from TF_CONFIG's "task", or (None, None)."""
  environ = os.environ if environ is None else environ
  if not environ.get("TF_CONFIG"):
    return None, None
  task = json.loads(environ["TF_CONFIG"]).get("task", {})
  return task.get("type"), task.get("index")


def _shape_text(shape):
  return ",".join(str(d) for d in shape)


def _hello_method(expected_fingerprint, stream):
  """The learner's "hello": accepts a peer of this protocol and layout, logs a refusal."""
  expected = tf.constant(expected_fingerprint)

  @tf.function(input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.string),
                                tf.TensorSpec([], tf.string)])
  def hello(protocol, peer_fingerprint, peer):
    accepted = tf.logical_and(tf.equal(protocol, PROTOCOL_VERSION),
                              tf.equal(peer_fingerprint, expected))
    reason = tf.strings.join([
        "refused: protocol ", tf.strings.as_string(protocol), " (learner ",
        str(PROTOCOL_VERSION), "), layout fingerprint ", peer_fingerprint, " (learner ",
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
  actor, which is the back-pressure). `dequeue` hands them to the training loop.
  """

  def __init__(self, address, layout, expected_fingerprint, variables, capacity,
               log_stream=sys.stderr, methods=()):
    """Args:
      address: "host:port" to listen on (the learner's address in the cluster spec).
      layout: wire.message_layout(...).
      expected_fingerprint: what peers must present (wire.fingerprint(...)).
      variables: the agent's variables, served by `parameters` in this order.
      capacity: queued trajectories at most.
      log_stream: where refusals are logged (tf.print's output_stream).
      methods: more (name, tf.function) to serve (filter_sync.learner_methods).
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

    self._methods = list(methods)  # Kept alive as long as the server serves them.
    self._server = tf.distribute.experimental.rpc.Server.create("grpc", address)
    for name, function in [("hello", _hello_method(expected_fingerprint, log_stream)),
                           ("enqueue", _enqueue_method(self._queue, layout, log_stream)),
                           ("parameters", parameters), ("episode", episode)] + self._methods:
      self._server.register(name, function)
    self._server.start()

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


class ServiceUnavailable(ConnectionError):
  """A service (the learner, a replay service) did not answer within the retry budget."""


class ServiceClient:
  """A connection to one of this project's RPC services (thread-safe): connect, hello, calls.

  A service that becomes unreachable (crashed, restarting) is waited for: calls reconnect,
  say hello again and retry until `connect_timeout_secs` pass, then raise `unavailable_error`.
  TensorFlow's gRPC client does not fail a call made after its server died; the call waits
  for its deadline (`call_timeout_secs`), so a lost service is noticed only then.
  Subclasses add the service's methods on top of `_call`.
  """

  def __init__(self, address, name, hello_args, service, start_hint, refusal_hint,
               unavailable_error, connect_timeout_secs=300.0, call_timeout_secs=600.0,
               print_fn=print):
    """Connects (retrying until connect_timeout_secs) and says hello.

    Args:
      address: "host:port" of the service.
      name: this peer's name (in the service's log; RPC client names derive from it).
      hello_args: the tensors of the service's "hello" method; it answers
        (accepted bool, message string).
      service: what to call the service in messages ("learner", "replay service").
      start_hint: what to do when it does not answer (ends the unavailable error's text).
      refusal_hint: what to do when it refuses this peer (ends PeerRejected's text).
      unavailable_error: the ServiceUnavailable subclass to raise.
      call_timeout_secs: how long one call may take (a full learner queue makes sending
        wait); a call that takes longer is retried.

    Raises:
      unavailable_error: no service answered in time.
      PeerRejected: the service refused this peer (the message says why).
    """
    self.address = address
    self._name = name
    self._hello_args = list(hello_args)
    self._service = service
    self._start_hint = start_hint
    self._refusal_hint = refusal_hint
    self._unavailable_error = unavailable_error
    self._connect_timeout_secs = connect_timeout_secs
    self._call_timeout_ms = int(call_timeout_secs * 1000)
    self._print = print_fn
    self._lock = threading.Lock()
    self._generation = 0
    self._attempts = 0
    self._connect(waiting_message=f"Waiting for the {service} at {address} ...")

  def _connect(self, waiting_message, announce=False):
    """Creates the RPC client and says hello, retrying until the connect timeout.

    waiting_message is printed once the first attempt fails (or at once with announce).
    """
    deadline = time.monotonic() + self._connect_timeout_secs
    announced = announce
    if announce:
      self._print(waiting_message)
    while True:
      self._attempts += 1
      try:
        client = tf.distribute.experimental.rpc.Client.create(
            "grpc", self.address, name=f"{self._name}-{self._attempts}", timeout_in_ms=5000)
        break
      except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
              tf.errors.UnknownError) as error:
        if time.monotonic() > deadline:
          raise self._unavailable_error(
              f"No {self._service} answered at {self.address} within "
              f"{self._connect_timeout_secs:.0f} s (last error: "
              f"{str(error).splitlines()[0]}). {self._start_hint}") from error
        if not announced:
          self._print(waiting_message)
          announced = True
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
    accepted, message = self._checked_call(client, "hello", self._hello_args)
    if not accepted.numpy():
      raise PeerRejected(f"The {self._service} at {self.address} refused {self._name}: "
                         f"{message.numpy().decode()}. {self._refusal_hint}")
    self._client = client
    self._generation += 1
    if announced:
      self._print(f"Connected to the {self._service} at {self.address}.")

  def _reconnect(self, generation, reason):
    """Reconnects and says hello again, unless another thread did since connection
    `generation` (reason starts the message printed)."""
    with self._lock:
      if generation == self._generation:
        self._connect(waiting_message=f"{reason}; reconnecting for up to "
                      f"{self._connect_timeout_secs:.0f} s ...", announce=True)

  def _checked_call(self, client, method, args):
    """One call; raises the service's error as a tf.errors exception with a readable text."""
    # The generated method knows the method's output signature.
    result = getattr(client, method)(*args, timeout_in_ms=self._call_timeout_ms)
    if result.is_ok():
      return result.get_value()
    code, message = result.get_error()
    error_class = tf_errors.exception_type_from_error_code(int(code.numpy()))
    raise error_class(None, None, f"{method} on the {self._service} at {self.address} "
                      f"failed: {message.numpy().decode(errors='replace')}")

  def _call(self, method, args):
    """A call that survives a service restart (reconnects, then calls again)."""
    while True:
      generation = self._generation
      try:
        return self._checked_call(self._client, method, args)
      except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError):
        self._reconnect(generation, f"Lost the {self._service} at {self.address}")


class LearnerUnavailable(ServiceUnavailable):
  """The learner did not answer within the retry budget."""


class LearnerClient(ServiceClient):
  """An actor process's connection to the learner (thread-safe).

  A learner that becomes unreachable (crashed, restarting from its checkpoint) is waited for:
  calls reconnect and retry until `connect_timeout_secs` pass, then raise LearnerUnavailable.
  A learner that finished closes its queue: sending then raises tf.errors.CancelledError.
  """

  def __init__(self, address, layout, peer_fingerprint, name, connect_timeout_secs=300.0,
               call_timeout_secs=600.0, print_fn=print):
    """Connects and says hello with the protocol and the layout's fingerprint (arguments and
    timeouts as ServiceClient's).

    Raises:
      LearnerUnavailable: no learner answered in time.
      PeerRejected: the learner refused this actor (the message says why).
    """
    self._layout = layout
    super().__init__(
        address, name,
        [tf.constant(PROTOCOL_VERSION), tf.constant(peer_fingerprint), tf.constant(name)],
        service="learner",
        start_hint="Start the learner (--job_name=learner) or check the cluster addresses.",
        refusal_hint="Run the same version with the same level, network and unroll "
                     "settings as the learner.",
        unavailable_error=LearnerUnavailable, connect_timeout_secs=connect_timeout_secs,
        call_timeout_secs=call_timeout_secs, print_fn=print_fn)

  def parameters(self):
    """(version int, [numpy arrays] in the learner's variable order)."""
    values = self._call("parameters", [])
    return int(values[0].numpy()), [v.numpy() for v in values[1:]]

  def send_trajectory(self, header, trajectory):
    """Queues a trajectory on the learner (blocks while its queue is full).

    Args:
      header: wire.MessageHeader (level and sender; the learner drops a repeated sequence
        number).

    Raises:
      PeerRejected: the learner refused it (its log says why).
    """
    accepted = self._call("enqueue", wire.flatten_message(self._layout, header, trajectory))
    if not bool(np.asarray(accepted)):
      raise PeerRejected("The learner refused a trajectory (see the learner's log).")

  def report_episode(self, level_index, episode_return, episode_step):
    self._call("episode", [tf.constant(level_index, tf.int32),
                           tf.constant(episode_return, tf.float32),
                           tf.constant(episode_step, tf.int32)])

  def sync_filter(self, count, mean, m2):
    """filter_sync.py's exchange: an observation filter's delta in, the learner's merged out."""
    return tuple(v.numpy() for v in self._call("filter_sync", [
        tf.constant(count, tf.int64), tf.constant(mean, tf.float64), tf.constant(m2, tf.float64)]))


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


def learner_strategy(num_learners):
  """None for one learner; else a MirroredStrategy over `num_learners` devices.

  The paper's "8 learners" (Figure 1 right, Table 3) are synchronous learners on 8 GPUs: with
  that many GPUs they are used; otherwise the CPU is split into `num_learners` logical devices
  (same arithmetic, for testing and for CPU clusters). Must run before TensorFlow has
  initialised its devices (before any variable or op).

  Raises:
    ValueError: num_learners < 1, or too few GPUs for the GPUs to be used and TensorFlow
      already initialised.
  """
  if num_learners < 1:
    raise ValueError(f"--num_learners must be at least 1, got {num_learners}.")
  if num_learners == 1:
    return None
  gpus = tf.config.list_physical_devices("GPU")
  if len(gpus) >= num_learners:
    devices = [f"/gpu:{i}" for i in range(num_learners)]
  elif gpus:
    raise ValueError(f"--num_learners={num_learners} needs as many GPUs; this machine has "
                     f"{len(gpus)}.")
  else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration()] * num_learners)
    except RuntimeError as error:  # Already initialised: fine if the split is there.
      if len(tf.config.list_logical_devices("CPU")) < num_learners:
        raise ValueError(
            f"--num_learners={num_learners} on the CPU needs the CPU split into "
            f"{num_learners} logical devices before TensorFlow starts ({error}).") from error
    devices = [f"/cpu:{i}" for i in range(num_learners)]
  return tf.distribute.MirroredStrategy(devices)


class ParameterSync:
  """Keeps an actor process's local agent at the learner's latest parameters.

  `refresh()` runs at the start of every unroll (the paper's section 2: "at the beginning of
  each trajectory, an actor updates its own local policy to the latest learner policy"). The
  threads of one process share the local copy: a refresh that another thread started after
  this one asked is good enough, so a process fetches once per wave of unroll starts.
  """

  def __init__(self, client, variables):
    self._client = client
    self._variables = list(variables)
    self._lock = threading.Lock()
    self._fetched_at = 0.0
    self.version = -1

  def refresh(self):
    """Fetches and assigns the learner's parameters; returns their version (updates)."""
    asked_at = time.monotonic()
    with self._lock:
      if self._fetched_at >= asked_at:
        return self.version
      started = time.monotonic()
      version, values = self._client.parameters()
      if version != self.version:
        for variable, value in zip(self._variables, values):
          variable.assign(value)
        self.version = version
      self._fetched_at = started
      return self.version


__all__ = ["ClusterError", "DeliveryLedger", "LearnerClient", "LearnerUnavailable",
           "ParameterSync", "PeerRejected", "ServiceClient", "ServiceUnavailable",
           "TrajectoryServer", "learner_strategy", "parse_cluster", "task_from_environment"]
