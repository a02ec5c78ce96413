"""Every call's credential: the cluster's secret proven for one call of one method, signed
by the client (CallSigner) and checked by the service (Gatekeeper).

Only the cluster's own processes may call. Anyone who reaches an open learner's port could
read the whole model (`parameters`) and train it on whatever they send (`enqueue`), so every
call to a service (the learner's learner_service.TrajectoryServer, LASER's replay service:
every registered method, hello included) proves that its caller holds the cluster's shared
secret (--cluster_secret_file, or IMPALA_CLUSTER_SECRET; distributed.cluster_secret), and
proves it for that one call:

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
nothing: allowed on loopback, or anywhere with --insecure_open_cluster
(distributed.check_listen_address).
"""
import collections
import hashlib
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

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
_CREDENTIAL_SPEC = tf.TensorSpec([], tf.int64)


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
