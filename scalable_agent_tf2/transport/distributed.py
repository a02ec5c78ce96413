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

Only the cluster's own processes may call (issue 30). Anyone who reaches an open learner's
port could read the whole model (`parameters`) and train it on whatever they send
(`enqueue`), so every call to a service (the learner's TrajectoryServer, LASER's replay
service: every registered method, hello included) proves that its caller holds the cluster's
shared secret (--cluster_secret_file, or IMPALA_CLUSTER_SECRET; cluster_secret):

    key        = SHA-256(secret)[:16] as two 64-bit words           (cluster_key)
    credential = (nonce, tag): nonce a random 64-bit number drawn per connection,
                 tag = SipHash-2-4_key(domain + ":" + nonce)        (credential_tag)

SipHash-2-4 is a keyed pseudo-random function; TensorFlow has it as
tf.strings.to_hash_bucket_strong (with the most buckets it takes, 2**63 - 1, so a tag is 63
bits). The client computes its tag once per connection, eagerly; the server recomputes it
inside every registered tf.function (Gatekeeper), so a call costs one hash of ~30 bytes and
never enters Python. A call whose tag does not verify fails a tf.debugging.Assert that every
op of the method waits on (control dependencies): it reads and writes nothing, the caller
gets an error naming the mismatch (PeerRejected: "not authenticated: the cluster's secrets
differ ..."), and the service counts it and logs it with the method's name. The secret
itself never crosses the wire; the domain ("impala learner", "laser replay service") keeps a
credential for one service from opening another.

Why a credential per connection rather than a MAC of every message's content: a trajectory
is ~0.6 MB on Atari and thousands of frames arrive per second; hashing every message on both
sides would cost the learner CPU it needs for input. The threat named is anyone who can reach
the port, and a credential stops them. Whoever can read the traffic can read the parameters
(and replay a credential) anyway: confidentiality and integrity on a network you do not
trust need an encrypted tunnel, which TensorFlow's RPC cannot provide itself (its
Server.create takes a protocol and an address, no credentials): listen on localhost and
forward with `ssh -N -L 8001:localhost:8001 user@learner-host` on every actor host (or put
the hosts on WireGuard). Without a secret, clients send a zero credential and services check
nothing: allowed on loopback, or anywhere with --insecure_open_cluster
(check_listen_address).
"""
import collections
import hashlib
import ipaddress
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import errors as tf_errors  # Error code -> class.

from scalable_agent_tf2.transport import wire

# 2: messages start with a wire.MessageHeader; 3: the filter sync (filter_sync.py); 4: every
# call carries a credential (nonce, tag) first, and "ping"; 5: env_outputs gain `truncated`
# (structures.EnvOutput: one more bool [T+1] tensor in every trajectory message).
PROTOCOL_VERSION = 5
LEARNER_JOB, ACTOR_JOB = "learner", "actor"
# Loopback: with no cluster given, nothing listens beyond this machine.
DEFAULT_LEARNER_ADDRESS = "localhost:8001"
# Where the cluster's secret is when no --cluster_secret_file names a file: the secret itself.
SECRET_ENVIRONMENT_VARIABLE = "IMPALA_CLUSTER_SECRET"
# What the learner's credentials are computed for (a replay service's: replay_service.py).
LEARNER_DOMAIN = "impala learner"
# The most buckets tf.strings.to_hash_bucket_strong takes (an int64 attribute): a tag is the
# SipHash output modulo 2**63 - 1.
_TAG_BUCKETS = 2**63 - 1
# Starts the error of a call whose credential did not verify (what clients recognise).
NOT_AUTHENTICATED = "not authenticated"
_CREDENTIAL_SPEC = tf.TensorSpec([], tf.int64)


class ClusterError(ValueError):
  """A cluster specification that cannot work."""


class PeerRejected(RuntimeError):
  """A service refused this peer or its data (secret, protocol or trajectory layout differs)."""


def cluster_secret(secret_file="", environ=None):
  """The cluster's shared secret: --cluster_secret_file's content, else IMPALA_CLUSTER_SECRET.

  Args:
    secret_file: a file holding the secret (any bytes; one trailing newline is dropped, as
      editors and `echo` add one), or "" to read the environment.
    environ: the environment (os.environ by default).

  Returns:
    bytes, or None when neither gives a secret.

  Raises:
    ClusterError: the file cannot be read or is empty (a mistake that would otherwise open the
      cluster or lock its own processes out).
  """
  environ = os.environ if environ is None else environ
  if secret_file:
    try:
      with open(secret_file, "rb") as f:
        secret = f.read()
    except OSError as error:
      raise ClusterError(
          f"Cannot read the cluster secret file {secret_file} "
          f"({error.strerror or error}); give --cluster_secret_file a file this user can "
          f"read, holding the same secret as the rest of the cluster.") from error
    secret = _without_newline(secret)
    if not secret:
      raise ClusterError(
          f"The cluster secret file {secret_file} is empty; write the secret into it, e.g. "
          f"python -c 'import secrets; print(secrets.token_hex(32))' > {secret_file} && "
          f"chmod 600 {secret_file}, and give every process of the cluster the same file.")
    return secret
  value = _without_newline(environ.get(SECRET_ENVIRONMENT_VARIABLE, "").encode())
  return value or None


def _without_newline(data):
  return data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data


def is_loopback(address):
  """Whether "host:port" (or "[v6]:port") names this machine only: localhost, 127.x.x.x, ::1."""
  host = address.rpartition(":")[0].strip("[]").lower()
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def check_listen_address(address, secret, insecure_open_cluster, service="learner"):
  """Whether a service (`service`: "learner", "replay service") may listen on `address`: its
  console lines, or an error.

  A service without a secret answers anyone who reaches it; that is fine on loopback and
  nowhere else unless the user says so (--insecure_open_cluster).

  Returns:
    list of console lines (a warning for an open non-loopback address; a note that the
    traffic is not encrypted for a protected one); empty on loopback.

  Raises:
    ClusterError: a non-loopback address, no secret, and no --insecure_open_cluster.
  """
  if is_loopback(address):
    return []
  if secret is None and not insecure_open_cluster:
    raise ClusterError(
        f"the {service} at {address} would accept anyone who reaches it (read the model, "
        f"train it on anything); set a secret with --cluster_secret_file=PATH or "
        f"{SECRET_ENVIRONMENT_VARIABLE} (the launcher generates one), or pass "
        f"--insecure_open_cluster on a network you trust.")
  if secret is None:
    return [f"WARNING: --insecure_open_cluster: {address} accepts anyone who reaches it; "
            f"they can read the model and train it on anything they send."]
  return [f"Calls to {address} must prove the cluster's secret; they are not encrypted: on a "
          f"network you do not trust, listen on localhost and tunnel (ssh -N -L) or use "
          f"WireGuard."]


def cluster_key(secret):
  """SipHash's 128-bit key of a secret: SHA-256's first 16 bytes as two 64-bit words (signed,
  TensorFlow's attribute type), or None without a secret."""
  if secret is None:
    return None
  digest = hashlib.sha256(secret).digest()
  return [int.from_bytes(digest[i:i + 8], "little", signed=True) for i in (0, 8)]


def credential_tag(key, domain, nonce):
  """SipHash-2-4 of "domain:nonce" under `key` (int64 tensor): the same ops on both sides."""
  text = tf.strings.join([domain, tf.strings.as_string(nonce)], separator=":")
  return tf.strings.to_hash_bucket_strong(text, _TAG_BUCKETS, key=key)


def new_credential(secret, domain):
  """(nonce, tag) int64 tensors for a new connection; (0, 0) without a secret."""
  key = cluster_key(secret)
  if key is None:
    return tf.constant(0, tf.int64), tf.constant(0, tf.int64)
  nonce = tf.constant(int.from_bytes(os.urandom(8), "little", signed=True), tf.int64)
  return nonce, credential_tag(key, domain, nonce)


class Gatekeeper:
  """A service's check of every call's credential, inside its registered tf.functions.

  `guard(name, function)` is what the service registers: (nonce, tag, *function's arguments).
  Without a secret nothing is checked (loopback, or --insecure_open_cluster).
  """

  def __init__(self, secret, domain, service, log_stream=sys.stderr):
    """Args:
      secret: the cluster's secret (bytes) or None.
      domain: what the credentials are computed for (LEARNER_DOMAIN, ...).
      service: how the log names this service ("Learner", "Replay service").
      log_stream: where refused calls are logged (tf.print's output_stream).
    """
    self._key = cluster_key(secret)
    self._domain = domain
    self._service = service
    self._stream = log_stream
    self.refused = tf.Variable(0, dtype=tf.int64, trainable=False)

  def guard(self, name, function):
    """`function` (a tf.function with an input signature) behind the credential check."""
    specs = list(function.input_signature)

    body = function.python_function  # Traced into this graph: one function, no nesting.

    @tf.function(input_signature=[_CREDENTIAL_SPEC, _CREDENTIAL_SPEC] + specs)
    def guarded(nonce, tag, *args):
      # Every op of the method waits for the check: its arguments and everything it runs.
      with tf.control_dependencies([self._check(name, nonce, tag)]):
        return body(*[tf.identity(arg) for arg in args])
    return guarded

  def _check(self, name, nonce, tag):
    if self._key is None:
      return tf.no_op()
    valid = tf.equal(credential_tag(self._key, self._domain, nonce), tag)

    def refuse():
      count = self.refused.assign_add(1)
      printed = tf.print(f"{self._service}: refused a call to {name}: {NOT_AUTHENTICATED} "
                         f"(a caller without the cluster's secret);", count,
                         "refused so far.", output_stream=self._stream)
      with tf.control_dependencies([printed]):
        return tf.constant(False)
    accepted = tf.cond(valid, lambda: tf.constant(True), refuse)
    return tf.debugging.Assert(accepted, [
        f"{NOT_AUTHENTICATED}: the caller does not hold this cluster secret"])


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
  actor, which is the back-pressure). `dequeue` hands them to the training loop. With a
  secret, every method refuses callers that cannot prove it (Gatekeeper).
  """

  def __init__(self, address, layout, expected_fingerprint, variables, capacity,
               log_stream=sys.stderr, methods=(), secret=None):
    """Args:
      address: "host:port" to listen on (the learner's address in the cluster spec).
      layout: wire.message_layout(...).
      expected_fingerprint: what peers must present (wire.fingerprint(...)).
      variables: the agent's variables, served by `parameters` in this order.
      capacity: queued trajectories at most.
      log_stream: where refusals are logged (tf.print's output_stream).
      methods: more (name, tf.function) to serve (filter_sync.learner_methods).
      secret: the cluster's secret (bytes; cluster_secret), or None: nothing is checked.
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

    self._gatekeeper = Gatekeeper(secret, LEARNER_DOMAIN, "Learner", log_stream)
    methods = [("hello", _hello_method(expected_fingerprint, log_stream)),
               ("enqueue", _enqueue_method(self._queue, layout, log_stream)),
               ("parameters", parameters), ("episode", episode), ("ping", ping)] + list(methods)
    # Kept alive as long as the server serves them (the guarded ones call the originals).
    self._methods = [(name, self._gatekeeper.guard(name, function), function)
                     for name, function in methods]
    self._server = tf.distribute.experimental.rpc.Server.create("grpc", address)
    for name, guarded, _ in self._methods:
      self._server.register(name, guarded)
    self._server.start()

  @property
  def refused_calls(self):
    """Calls refused so far because their credential did not verify."""
    return int(self._gatekeeper.refused.numpy())

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
  for its deadline (`call_timeout_secs`), so a lost service is noticed only then (`ping`
  notices sooner). Every call carries this connection's credential (new_credential).
  Subclasses add the service's methods on top of `_call`.
  """

  def __init__(self, address, name, hello_args, service, start_hint, refusal_hint,
               unavailable_error, connect_timeout_secs=300.0, call_timeout_secs=600.0,
               print_fn=print, secret=None, domain=LEARNER_DOMAIN):
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
      secret: the cluster's secret (bytes; cluster_secret), or None.
      domain: what the service's credentials are computed for (LEARNER_DOMAIN, ...).

    Raises:
      unavailable_error: no service answered in time.
      PeerRejected: the service refused this peer (the message says why: another secret,
        protocol or layout).
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
    self._secret = secret
    self._domain = domain
    self._lock = threading.Lock()
    self._generation = 0
    self._attempts = 0
    self._ping_client = None
    self._ping_connections = 0
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
    self._credential = new_credential(self._secret, self._domain)  # For this connection.
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

  def _checked_call(self, client, method, args, timeout_ms=None):
    """One call; raises the service's error as a tf.errors exception with a readable text,
    or PeerRejected when the service did not accept this process's credential."""
    # The generated method knows the method's output signature.
    result = getattr(client, method)(*self._credential, *args,
                                     timeout_in_ms=timeout_ms or self._call_timeout_ms)
    if result.is_ok():
      return result.get_value()
    code, message = result.get_error()
    message = message.numpy().decode(errors="replace")
    if NOT_AUTHENTICATED in message:
      has = ("holds another secret" if self._secret is not None else
             "has no secret")
      raise PeerRejected(
          f"The {self._service} at {self.address} refused {self._name}'s call to {method}: "
          f"{NOT_AUTHENTICATED}: the cluster's secrets differ (this process {has}); pass "
          f"the same --cluster_secret_file (or {SECRET_ENVIRONMENT_VARIABLE}) as the "
          f"{self._service}.")
    error_class = tf_errors.exception_type_from_error_code(int(code.numpy()))
    raise error_class(None, None, f"{method} on the {self._service} at {self.address} "
                      f"failed: {message}")

  def ping(self, timeout_secs):
    """Whether the service answers its "ping" within `timeout_secs` (no retry).

    On a connection of its own, opened again after a failure: a call on a channel to a dead
    server waits for its deadline, and a new connection to a restarted one answers at once.
    A refusal is an answer (the service's calls report it).
    """
    timeout_ms = max(1, int(timeout_secs * 1000))
    try:
      if self._ping_client is None:
        self._ping_connections += 1
        self._ping_client = tf.distribute.experimental.rpc.Client.create(
            "grpc", self.address, name=f"{self._name}-ping-{self._ping_connections}",
            timeout_in_ms=timeout_ms)
      self._checked_call(self._ping_client, "ping", [], timeout_ms=timeout_ms)
      return True
    except PeerRejected:
      return True
    except tf.errors.OpError:
      self._ping_client = None
      return False

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
               call_timeout_secs=600.0, print_fn=print, secret=None):
    """Connects and says hello with the protocol and the layout's fingerprint (arguments,
    timeouts and the cluster's secret as ServiceClient's).

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
        call_timeout_secs=call_timeout_secs, print_fn=print_fn, secret=secret,
        domain=LEARNER_DOMAIN)

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


__all__ = ["ClusterError", "DeliveryLedger", "Gatekeeper", "LearnerClient",
           "LearnerUnavailable", "ParameterSync", "PeerRejected", "ServiceClient",
           "ServiceUnavailable", "TrajectoryServer", "check_listen_address", "cluster_key",
           "cluster_secret", "credential_tag", "is_loopback", "learner_strategy",
           "new_credential", "parse_cluster", "task_from_environment"]
