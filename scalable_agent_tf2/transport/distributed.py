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

Only the cluster's own processes may call (issues 30 and 41). Anyone who reaches an open
learner's port could read the whole model (`parameters`) and train it on whatever they send
(`enqueue`), so every call to a service (the learner's TrajectoryServer, LASER's replay
service: every registered method, hello included) proves that its caller holds the cluster's
shared secret (--cluster_secret_file, or IMPALA_CLUSTER_SECRET; cluster_secret), and proves
it for that one call:

    key        = SHA-256(secret)[:16] as two 64-bit words                 (cluster_key)
    challenge  = a random 64-bit id the service issues on request (`challenge`, whose own
                 credential is (0, 1, tag): challenge_request) and remembers (ChallengeTable)
    credential = (challenge, counter, tag): counter = 1, 2, 3, ... on that challenge,
                 tag = SipHash-2-4_key(domain:method:challenge:counter:arguments)  (call_tag)

The service accepts a call only when the tag verifies, it issued the challenge and still
remembers it, and the counter is greater than the last it accepted on that challenge; only
then does it remember the new counter. A credential is therefore good for one call of one
method with the same small arguments: a stranger has none; a credential captured on the wire
and sent again is refused, on a new connection as on the old one (a challenge is not tied to
a TCP connection: its counter is spent); an old counter is refused. A client holds one
challenge per connection and per thread (CallSigner), so the calls on a challenge are
sequential: threads sharing a gRPC channel overtake each other, and "greater than the last"
would refuse their legitimate calls. The service remembers CHALLENGE_SLOTS challenges,
forgetting the least recently used first; a client whose challenge was forgotten (or whose
service restarted) is refused with UNKNOWN_CHALLENGE, fetches a new one and calls again. Only
callers with the secret get challenges, so a stranger cannot make the service forget its
clients' by asking for new ones. An eavesdropper can, by sending a captured challenge request
again (it yields challenges he holds no tag for): a flood of them costs every client a round
trip per forgotten challenge, and a call refused _CHALLENGE_ATTEMPTS times fails (as any
flood of a service's port would slow it).

"arguments" are the call's small arguments, each as a length-prefixed serialised TensorProto:
every numeric tensor of at most BOUND_ELEMENTS elements and every scalar string (hello's
protocol, fingerprint and name; an episode report; a filter delta; a replay sample's
requester and token). Large ones (a replay payload) are not covered, nor is any argument of
a trajectory sent to the learner (`enqueue`, UNCOVERED_METHODS): hashing ~0.6 MB per Atari
trajectory on both sides, thousands of times a second, would take the learner CPU it needs
for its input, and even sorting a trajectory's small tensors from its large ones costs it
~0.1 ms a message.

SipHash-2-4 is a keyed pseudo-random function; TensorFlow has it as
tf.strings.to_hash_bucket_strong (with the most buckets it takes, 2**63 - 1, so a tag is 63
bits). The client computes each call's tag in Python (CallSigner; one TensorFlow op, the
hash); the server recomputes it with TensorFlow ops inside every registered tf.function
(Gatekeeper) and checks the challenge and counter in a tf.CriticalSection, so an accepted
call never enters Python. A refused call fails a
tf.debugging.Assert that every op of the method waits on (control dependencies): it reads and
writes nothing, the caller gets an error naming the reason (NOT_AUTHENTICATED,
UNKNOWN_CHALLENGE, REPLAYED_CREDENTIAL; PeerRejected: "not authenticated: the cluster's secrets
differ ..." when it is the secret), and the service counts it by reason and method and logs
it, at most one line per method per minute with the number not logged (RefusalLog; the
totals: TrajectoryServer.refusals(), ReplayService.refusals()). TensorFlow's RPC does not tell
a service who called, so the log names the method, not the peer. The secret itself never
crosses the wire; the domain ("impala learner", "laser replay service") keeps a credential
for one service from opening another.

What this does not protect against: the calls are not encrypted. Whoever can read the
traffic (a passive observer on the wire) reads the parameters and the trajectories. An active
man-in-the-middle can alter what no tag covers: a trajectory on its way to the learner, the
large arguments, and every answer (answers carry no tag: the parameters an actor receives, a
replayed episode); he can also hold back a call and spend its credential himself on a call
of the same method with other uncovered arguments. Confidentiality and integrity on a network
you do not trust need an encrypted tunnel, which TensorFlow's RPC cannot provide itself (its
Server.create takes a protocol and an address, no credentials): listen on localhost and
forward with `ssh -N -L 8001:localhost:8001 user@learner-host` on every actor host (or put
the hosts on WireGuard). Without a secret, clients send a zero credential and services check
nothing: allowed on loopback, or anywhere with --insecure_open_cluster (check_listen_address).
"""
import collections
import hashlib
import ipaddress
import json
import os
import sys
import threading
import time
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow.python.framework import errors as tf_errors  # Error code -> class.

from scalable_agent_tf2.transport import wire

# 2: messages start with a wire.MessageHeader; 3: the filter sync (filter_sync.py); 4: every
# call carries a credential (nonce, tag) first, and "ping"; 5: env_outputs gain `truncated`
# (structures.EnvOutput: one more bool [T+1] tensor in every trajectory message); 6: a
# credential is (challenge, counter, tag) for one call, the challenge issued by the service's
# "challenge" (issue 41: a captured credential can no longer be sent again).
PROTOCOL_VERSION = 6
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
# The method that issues challenges (every service registers it; challenge_request).
CHALLENGE_METHOD = "challenge"
# Challenges a service remembers at once, a power of two (a challenge's low bits are its
# slot). One per connection and client thread: an actor process holds one per actor thread,
# so this is ample for hundreds of actor processes; past it the least recently used is
# forgotten and its client fetches another.
CHALLENGE_SLOTS = 2**14
# A numeric argument of at most this many elements is covered by its call's tag (a string
# argument when it is a scalar); larger ones would cost the learner CPU to hash.
BOUND_ELEMENTS = 64
# Methods whose arguments no tag covers: the learner's hot path, a trajectory. Its loose
# signature (any shapes, refused with a logged reason) would leave the service to decide per
# argument at run time which are small, ~0.05-0.1 ms of the learner's CPU per message.
UNCOVERED_METHODS = frozenset({"enqueue"})
# Why a service refuses a call, by refusal code (0: accepted). Each text starts the error the
# caller receives; clients recognise them.
ACCEPTED = 0
NOT_AUTHENTICATED = "not authenticated"
UNKNOWN_CHALLENGE = "unknown challenge"
REPLAYED_CREDENTIAL = "replayed credential"
REFUSAL_REASONS = ("", NOT_AUTHENTICATED, UNKNOWN_CHALLENGE, REPLAYED_CREDENTIAL)
_REFUSAL_EXPLANATIONS = {
    NOT_AUTHENTICATED: "its tag does not verify: a caller without the cluster's secret, or "
                       "arguments altered on the way",
    UNKNOWN_CHALLENGE: "a challenge this service did not issue or no longer remembers: a "
                       "credential captured from an earlier run of the service, or a "
                       "client's challenge forgotten in a restart or among more than "
                       f"{CHALLENGE_SLOTS} client connections and threads (a client of the "
                       "cluster then fetches a new one and calls again)",
    REPLAYED_CREDENTIAL: "its counter is not above the last one accepted on its challenge: a "
                         "captured call sent again",
}
# A service logs at most one refused call per method in this many seconds (an attacker's
# flood must not flood the log); the next line says how many were not logged.
REFUSAL_LOG_PERIOD_SECS = 60.0
# How many challenges a client fetches for one call before giving up (one is forgotten when
# more clients than CHALLENGE_SLOTS call, or the service restarted).
_CHALLENGE_ATTEMPTS = 3
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


def is_bound(dtype, shape):
  """Whether a call's tag covers an argument of `dtype` and `shape` (tf.TensorShape): a
  numeric tensor of at most BOUND_ELEMENTS elements, a scalar string. None when the shape
  leaves it open (a service's loose signature: then the value decides, as on the client)."""
  if dtype == tf.string:
    return None if shape.rank is None else shape.rank == 0
  if not shape.is_fully_defined():
    return None
  return shape.num_elements() <= BOUND_ELEMENTS


def _serialised(argument):
  """An argument as its tag covers it: the serialised TensorProto (dtype, shape, values),
  prefixed by its length so that no two argument lists give the same text."""
  data = tf.io.serialize_tensor(argument)
  return tf.strings.join([tf.strings.as_string(tf.strings.length(data)), data], separator="#")


def _argument_text(argument):
  """What a call's tag covers of one argument in a service's graph: _serialised if it is
  bound (is_bound), else "_" (its place only)."""
  bound = is_bound(argument.dtype, argument.shape)
  if bound is None:  # A loose signature: the value decides, as on the client.
    small = (tf.equal(tf.rank(argument), 0) if argument.dtype == tf.string else
             tf.size(argument) <= BOUND_ELEMENTS)
    return tf.cond(small, lambda: _serialised(argument), lambda: tf.constant("_"))
  return _serialised(argument) if bound else tf.constant("_")


def _tag(key, domain, method, challenge, counter, argument_texts):
  parts = [tf.constant(domain), tf.constant(method), tf.strings.as_string(challenge),
           tf.strings.as_string(counter)]
  text = tf.strings.join(parts + list(argument_texts), separator=":")
  return tf.strings.to_hash_bucket_strong(text, _TAG_BUCKETS, key=list(key))


def call_tag(key, domain, method, challenge, counter, arguments):
  """SipHash-2-4 under `key` of "domain:method:challenge:counter:" and the call's arguments
  (_argument_text of each; int64 tensor), as the service computes it in its graph.
  CallSigner computes the same on the client, in Python."""
  return _tag(key, domain, method, challenge, counter,
              [_argument_text(tf.convert_to_tensor(a)) for a in arguments])


def _serialised_on_client(argument):
  """_serialised's bytes of a numpy array or an eager tensor, built in Python: a client
  signs every call, and a dozen small TF ops per argument would cost it milliseconds.
  tf.io.serialize_tensor's encoding (TensorProto: dtype, shape, then the values as
  tensor_content, a string as string_val), which test_replay_protection compares."""
  if isinstance(argument, tf.Tensor):
    dtype, array = argument.dtype, argument.numpy()
  else:
    array = np.asarray(argument)
    dtype = tf.as_dtype(array.dtype)
  proto = tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum)
  proto.tensor_shape.SetInParent()  # Present even for a scalar, as TensorFlow writes it.
  for size in np.shape(array):
    proto.tensor_shape.dim.add(size=size)
  if dtype == tf.string:  # Only scalar strings are bound.
    proto.string_val.append(array)
  else:
    proto.tensor_content = np.ascontiguousarray(array).tobytes()
  data = proto.SerializeToString()
  return b"%d#" % len(data) + data


def _covered(method, arguments):
  """The arguments a call's tag covers (is_bound says how much of each)."""
  return () if method in UNCOVERED_METHODS else arguments


def _bound_on_client(argument):
  """is_bound of an argument the client holds (its shape is known)."""
  if isinstance(argument, tf.Tensor):
    return is_bound(argument.dtype, argument.shape)
  array = np.asarray(argument)
  return is_bound(tf.as_dtype(array.dtype), tf.TensorShape(array.shape))


class CallSigner:
  """One client thread's credentials on one connection: the challenge the service issued it
  and the counter of its calls.

  Not shared between threads: the service accepts a counter only above the last one it
  accepted on the challenge, and concurrent calls on one gRPC channel arrive in any order.
  """

  def __init__(self, key, domain, challenge):
    """key: cluster_key(secret), or None (then every credential is zero and nothing is
    counted); challenge: an int64 scalar the service issued (CHALLENGE_METHOD)."""
    self._key = key
    self._domain = domain
    self.challenge = challenge
    self._challenge_value = None if challenge is None else int(challenge)
    self._counter = 0

  def credential(self, method, arguments):
    """(challenge, counter, tag) int64 tensors for this thread's next call of `method`."""
    if self._key is None:
      return (tf.constant(0, tf.int64),) * 3
    self._counter += 1
    # call_tag's text, in Python (as_string writes an int64 as %d does).
    parts = [self._domain.encode(), method.encode(), b"%d" % self._challenge_value,
             b"%d" % self._counter]
    parts += [_serialised_on_client(a) if _bound_on_client(a) else b"_"
              for a in _covered(method, arguments)]
    tag = tf.strings.to_hash_bucket_strong(b":".join(parts), _TAG_BUCKETS, key=self._key)
    return self.challenge, tf.constant(self._counter, tf.int64), tag


def challenge_request(key, domain):
  """The credential of a CHALLENGE_METHOD call: (0, 1, tag); zeros without a key. The same for
  every request: one sent again only yields a challenge its sender holds no tag for."""
  return CallSigner(key, domain, tf.constant(0, tf.int64)).credential(CHALLENGE_METHOD, [])


def _code(reason):
  return REFUSAL_REASONS.index(reason)


class ChallengeTable:
  """The challenges a service issued and the last counter it accepted on each, in TF ops.

  `slots` slots; a challenge's low bits name its slot and the rest are random, so a
  challenge that another run of the service issued, or that this one forgot, is unknown
  (but for odds of 2**-50). Issuing and admitting run in one tf.CriticalSection: two calls
  with one counter cannot both pass the check.
  """

  def __init__(self, slots=None):
    """slots: how many challenges are remembered, a power of two (CHALLENGE_SLOTS)."""
    slots = CHALLENGE_SLOTS if slots is None else slots
    if slots < 1 or slots & (slots - 1):
      raise ValueError(f"A challenge table's slots must be a power of two, got {slots}.")
    self._slots = slots
    zeros = lambda: tf.Variable(tf.zeros([slots], tf.int64), trainable=False)
    self._challenges = zeros()     # 0: a free slot (no challenge is 0).
    self._last_counters = zeros()  # The last counter accepted (0 before the first call).
    self._last_used = zeros()      # _clock at the last issue or accepted call (0: never).
    self._clock = tf.Variable(0, dtype=tf.int64, trainable=False)
    # Seeded by the operating system: a restarted service must not issue its
    # predecessor's challenges again (their credentials may have been captured).
    self._random = tf.random.Generator.from_seed(
        int.from_bytes(os.urandom(8), "little", signed=True))
    self._critical = tf.CriticalSection(name="challenges")

  def issue(self):
    """A new challenge (int64 scalar), in the least recently used slot."""
    return self._critical.execute(self._issue)

  def admit(self, challenge, counter):
    """The refusal code (int32) of a call on `challenge` with `counter` whose tag verified:
    ACCEPTED (and the counter is remembered), UNKNOWN_CHALLENGE or REPLAYED_CREDENTIAL."""
    return self._critical.execute(lambda: self._admit(challenge, counter))

  def _issue(self):
    slot = tf.argmin(self._last_used, output_type=tf.int64)
    random_bits = tf.bitwise.bitwise_and(self._random.uniform_full_int([], tf.int64),
                                         tf.constant(-self._slots, tf.int64))
    challenge = tf.bitwise.bitwise_or(random_bits, slot)
    with tf.control_dependencies([self._store(slot, challenge, tf.constant(0, tf.int64))]):
      return tf.identity(challenge)

  def _admit(self, challenge, counter):
    slot = tf.math.floormod(challenge, self._slots)
    issued = tf.logical_and(tf.not_equal(challenge, 0),
                            tf.equal(tf.gather(self._challenges, slot), challenge))
    fresh = counter > tf.gather(self._last_counters, slot)

    def accept():
      with tf.control_dependencies([self._store(slot, challenge, counter)]):
        return tf.constant(ACCEPTED, tf.int32)

    def refuse():
      return tf.where(issued, _code(REPLAYED_CREDENTIAL), _code(UNKNOWN_CHALLENGE))
    return tf.cond(tf.logical_and(issued, fresh), accept, refuse)

  def _store(self, slot, challenge, counter):
    now = self._clock.assign_add(1)
    return tf.group(self._challenges.scatter_nd_update([[slot]], [challenge]),
                    self._last_counters.scatter_nd_update([[slot]], [counter]),
                    self._last_used.scatter_nd_update([[slot]], [now]))


def _print_to_stderr(line):
  print(line, file=sys.stderr, flush=True)


class RefusalLog:
  """A service's refused calls: counted by reason and method, and logged, at most one line
  per method per `period_secs` (a flood of refusals must not flood the log), that line
  saying how many went unlogged since the previous one. TensorFlow's RPC does not tell a
  service who called, so refusals are told apart by method, not by peer. Thread-safe."""

  def __init__(self, service, print_fn=_print_to_stderr, period_secs=REFUSAL_LOG_PERIOD_SECS,
               clock=time.monotonic):
    """service: how the lines name the service ("Learner", "Replay service")."""
    self._service = service
    self._print = print_fn
    self._period_secs = period_secs
    self._clock = clock
    self._lock = threading.Lock()
    self._total = 0
    self._by_reason = collections.Counter()
    self._by_method = collections.Counter()
    self._logged_at = {}                    # Method -> when its last line was printed.
    self._unlogged = collections.Counter()  # Method -> refusals since that line.

  def record(self, method, reason):
    """Counts a refused call of `method` (`reason`: one of REFUSAL_REASONS) and logs it unless
    a line for `method` was printed less than period_secs ago."""
    with self._lock:
      self._total += 1
      self._by_reason[reason] += 1
      self._by_method[method] += 1
      now = self._clock()
      last = self._logged_at.get(method)
      if last is not None and now - last < self._period_secs:
        self._unlogged[method] += 1
        return
      self._logged_at[method] = now
      unlogged = self._unlogged.pop(method, 0)
      total = self._total
    line = (f"{self._service}: refused a call to {method}: {reason} "
            f"({_REFUSAL_EXPLANATIONS[reason]}); {total} refused so far")
    if unlogged:
      line += f"; {unlogged} more refused calls to {method} since its last line, not logged"
    self._print(line + ".")

  @property
  def total(self):
    return self._total

  def totals(self):
    """{"total": n, "by_reason": {reason: n}, "by_method": {method: n}} so far."""
    with self._lock:
      return dict(total=self._total, by_reason=dict(self._by_reason),
                  by_method=dict(self._by_method))

  def summary_lines(self):
    """A stop summary's lines: nothing when no call was refused."""
    totals = self.totals()
    if not totals["total"]:
      return []
    by = lambda counts: ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
    return [f"{self._service}: {totals['total']} calls refused ({by(totals['by_reason'])}; "
            f"by method: {by(totals['by_method'])})."]


class Gatekeeper:
  """A service's check of every call's credential, inside its registered tf.functions.

  `register(server, methods)` serves CHALLENGE_METHOD and every method behind the check: the
  served method takes (challenge, counter, tag, *the method's arguments). A challenge
  request's credential is challenge_request's (no challenge to spend yet): a stranger cannot
  have the service forget its clients' challenges by asking for new ones. Without a secret
  nothing is checked (loopback, or --insecure_open_cluster).
  """

  def __init__(self, secret, domain, service, print_fn=_print_to_stderr,
               challenge_slots=None, log_period_secs=REFUSAL_LOG_PERIOD_SECS):
    """Args:
      secret: the cluster's secret (bytes) or None.
      domain: what the credentials are computed for (LEARNER_DOMAIN, ...).
      service: how the log names this service ("Learner", "Replay service").
      print_fn: where refused calls are logged (RefusalLog).
      challenge_slots: how many challenges are remembered at once (ChallengeTable;
        CHALLENGE_SLOTS by default).
      log_period_secs: a method's refusals are logged at most once in this many seconds.
    """
    self._key = cluster_key(secret)
    self._domain = domain
    self._challenges = ChallengeTable(challenge_slots)
    self.refusals = RefusalLog(service, print_fn, log_period_secs)
    self._served = []  # Alive as long as the server serves them (tf.py_function inside).

  def register(self, server, methods):
    """Registers CHALLENGE_METHOD and every (name, tf.function) of `methods`, guarded, on
    `server` (not started yet)."""
    served = [(CHALLENGE_METHOD, self._challenge_method())] + [
        (name, self.guard(name, function)) for name, function in methods]
    for name, function in served:
      server.register(name, function)
    self._served.extend(served + list(methods))

  def guard(self, name, function):
    """`function` (a tf.function with an input signature) behind the credential check."""
    specs = list(function.input_signature)

    body = function.python_function  # Traced into this graph: one function, no nesting.

    @tf.function(input_signature=[_CREDENTIAL_SPEC] * 3 + specs)
    def guarded(challenge, counter, tag, *args):
      # Every op of the method waits for the check: its arguments and everything it runs.
      with tf.control_dependencies([self._check(name, challenge, counter, tag, args)]):
        return body(*[tf.identity(arg) for arg in args])
    return guarded

  def _challenge_method(self):
    """CHALLENGE_METHOD: a new challenge for a caller that proves the secret. Such a request
    may be sent again (it spends no challenge): its sender gets a challenge it holds no tag
    for, and the least recently used client fetches a new one."""

    @tf.function(input_signature=[_CREDENTIAL_SPEC] * 3)
    def challenge(no_challenge, nonce, tag):
      with tf.control_dependencies([self._check(CHALLENGE_METHOD, no_challenge, nonce, tag, [],
                                                spends_challenge=False)]):
        return self._challenges.issue()
    return challenge

  def _check(self, name, challenge, counter, tag, args, spends_challenge=True):
    """The op a call of `name` waits on: it fails (tf.debugging.Assert, naming the reason)
    unless the credential verifies, after counting and logging the refusal. With
    spends_challenge, the call's challenge and counter must also be admitted (ChallengeTable);
    without it (a challenge request) the tag alone decides."""
    if self._key is None:
      return tf.no_op()
    # The tag first: a caller without the secret must not spend or touch a challenge.
    authentic = tf.equal(call_tag(self._key, self._domain, name, challenge, counter,
                                  _covered(name, args)), tag)
    refused = tf.constant(_code(NOT_AUTHENTICATED), tf.int32)
    if spends_challenge:
      code = tf.cond(authentic, lambda: self._challenges.admit(challenge, counter),
                     lambda: refused)
    else:
      code = tf.where(authentic, tf.constant(ACCEPTED, tf.int32), refused)
    accepted = tf.equal(code, ACCEPTED)
    # Python (counting, logging) only for a refused call.
    code = tf.cond(accepted, lambda: code, lambda: self._record_refusal(name, code))
    messages = tf.constant([""] + [f"{reason}: {_REFUSAL_EXPLANATIONS[reason]}"
                                   for reason in REFUSAL_REASONS[1:]])
    return tf.debugging.Assert(accepted, [tf.gather(messages, code)])

  def _record_refusal(self, name, code):
    def record(code):
      self.refusals.record(name, REFUSAL_REASONS[int(code)])
      return code
    recorded = tf.py_function(record, [code], tf.int32)
    recorded.set_shape([])
    return recorded


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

    self._gatekeeper = Gatekeeper(
        secret, LEARNER_DOMAIN, "Learner",
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


class ServiceUnavailable(ConnectionError):
  """A service (the learner, a replay service) did not answer within the retry budget."""


class ServiceClient:
  """A connection to one of this project's RPC services (thread-safe): connect, hello, calls.

  A service that becomes unreachable (crashed, restarting) is waited for: calls reconnect,
  say hello again and retry until `connect_timeout_secs` pass, then raise `unavailable_error`.
  TensorFlow's gRPC client does not fail a call made after its server died; the call waits
  for its deadline (`call_timeout_secs`), so a lost service is noticed only then (`ping`
  notices sooner). Every call carries a credential for that call (CallSigner: one challenge
  per connection and thread). Subclasses add the service's methods on top of `_call`.
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
    self._key = cluster_key(secret)
    self._domain = domain
    self._signers = threading.local()  # .by_client: RPC client -> this thread's CallSigner.
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
    or PeerRejected when the service did not accept this process's credential.

    A challenge the service forgot (it restarted, or served more clients than it remembers
    challenges for) or refused as spent is replaced by a new one and the call made again:
    a refused call did nothing.
    """
    timeout_ms = timeout_ms or self._call_timeout_ms
    for attempt in range(1, _CHALLENGE_ATTEMPTS + 1):
      signer = self._signer(client, timeout_ms)
      # The generated method knows the method's output signature.
      result = getattr(client, method)(*signer.credential(method, args), *args,
                                       timeout_in_ms=timeout_ms)
      if result.is_ok():
        return result.get_value()
      code, message = result.get_error()
      message = message.numpy().decode(errors="replace")
      if UNKNOWN_CHALLENGE in message or REPLAYED_CREDENTIAL in message:
        getattr(self._signers, "by_client", {}).pop(client, None)
        if attempt < _CHALLENGE_ATTEMPTS:
          continue
      raise self._call_error(method, int(code.numpy()), message)

  def _signer(self, client, timeout_ms):
    """This thread's CallSigner on `client` (an RPC client), with a new challenge from the
    service the first time; one without a challenge when this process has no secret."""
    if self._key is None:
      return CallSigner(None, self._domain, None)
    if not hasattr(self._signers, "by_client"):
      # Weak: a connection replaced after a lost service goes with its signers.
      self._signers.by_client = weakref.WeakKeyDictionary()
    signer = self._signers.by_client.get(client)
    if signer is None:
      signer = CallSigner(self._key, self._domain, self._challenge(client, timeout_ms))
      self._signers.by_client[client] = signer
    return signer

  def _challenge(self, client, timeout_ms):
    """A new challenge from the service (int64 scalar tensor)."""
    if not hasattr(client, CHALLENGE_METHOD):  # The generated methods are the service's.
      raise PeerRejected(
          f"The {self._service} at {self.address} issues no challenges: it runs an older "
          f"version of this code (wire protocol before {PROTOCOL_VERSION}); run the same "
          f"version on every process of the cluster.")
    result = getattr(client, CHALLENGE_METHOD)(*challenge_request(self._key, self._domain),
                                               timeout_in_ms=timeout_ms)
    if result.is_ok():
      return result.get_value()
    code, message = result.get_error()
    raise self._call_error(CHALLENGE_METHOD, int(code.numpy()),
                           message.numpy().decode(errors="replace"))

  def _call_error(self, method, code, message):
    """The exception for a failed call of `method` (TensorFlow's error code and message)."""
    if NOT_AUTHENTICATED in message:
      has = ("holds another secret" if self._secret is not None else
             "has no secret")
      return PeerRejected(
          f"The {self._service} at {self.address} refused {self._name}'s call to {method}: "
          f"{NOT_AUTHENTICATED}: the cluster's secrets differ (this process {has}); pass "
          f"the same --cluster_secret_file (or {SECRET_ENVIRONMENT_VARIABLE}) as the "
          f"{self._service}.")
    if UNKNOWN_CHALLENGE in message or REPLAYED_CREDENTIAL in message:
      reason = UNKNOWN_CHALLENGE if UNKNOWN_CHALLENGE in message else REPLAYED_CREDENTIAL
      return PeerRejected(
          f"The {self._service} at {self.address} refused {self._name}'s call to {method} "
          f"{_CHALLENGE_ATTEMPTS} times, with a new challenge each time (last: {reason}): "
          f"more clients call it than it remembers challenges for ({CHALLENGE_SLOTS}), or "
          f"someone spends this process's credentials before it (a man-in-the-middle); see "
          f"the {self._service}'s log.")
    error_class = tf_errors.exception_type_from_error_code(code)
    return error_class(None, None, f"{method} on the {self._service} at {self.address} "
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


__all__ = ["CallSigner", "ChallengeTable", "ClusterError", "DeliveryLedger", "Gatekeeper",
           "LearnerClient", "LearnerUnavailable", "ParameterSync", "PeerRejected",
           "RefusalLog", "ServiceClient", "ServiceUnavailable", "TrajectoryServer",
           "call_tag", "challenge_request", "check_listen_address", "cluster_key", "cluster_secret", "is_bound",
           "is_loopback", "learner_strategy", "parse_cluster", "task_from_environment"]
