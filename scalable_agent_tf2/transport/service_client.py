"""Clients of this project's RPC services: ServiceClient (what every client shares: connect
with a deadline, hello, a credential per call, reconnect after a lost service) and the actor
process's side of the learner's service.

    actor process:    LearnerClient(address, ...)        tf.distribute.experimental.rpc client
                        .parameters()      -> the learner's latest variables (start of an unroll)
                        .send_trajectory() -> into the learner's trajectory queue
                        .report_episode()  -> the learner's monitor; .sync_filter(): filter_sync.py
                      ParameterSync(client, variables)   the local agent at those parameters

replay_client.py builds LASER's shared replay client on ServiceClient. The service's side is
learner_service.py; the credentials, credentials.py; the messages, wire.py.
"""
import threading
import time
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import errors as tf_errors  # Error code -> class.

from scalable_agent_tf2.transport import credentials
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import wire

# How many challenges a client fetches for one call before giving up (one is forgotten when
# more clients than CHALLENGE_SLOTS call, or the service restarted).
_CHALLENGE_ATTEMPTS = 3


def _challenge_refusal(message):
  """The reason a service refused a call for its challenge (credentials.UNKNOWN_CHALLENGE: it
  forgot or never issued it; REPLAYED_CREDENTIAL: its counter was spent), or None: the
  refusals a new challenge may cure."""
  for reason in (credentials.UNKNOWN_CHALLENGE, credentials.REPLAYED_CREDENTIAL):
    if reason in message:
      return reason
  return None


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
               print_fn=print, secret=None, domain=credentials.LEARNER_DOMAIN):
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
    self._key = credentials.cluster_key(secret)
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
      raise distributed.PeerRejected(f"The {self._service} at {self.address} refused {self._name}: "
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
      if _challenge_refusal(message):
        getattr(self._signers, "by_client", {}).pop(client, None)
        if attempt < _CHALLENGE_ATTEMPTS:
          continue
      raise self._call_error(method, int(code.numpy()), message)

  def _signer(self, client, timeout_ms):
    """This thread's CallSigner on `client` (an RPC client), with a new challenge from the
    service the first time; one without a challenge when this process has no secret."""
    if self._key is None:
      return credentials.CallSigner(None, self._domain, None)
    if not hasattr(self._signers, "by_client"):
      # Weak: a connection replaced after a lost service goes with its signers.
      self._signers.by_client = weakref.WeakKeyDictionary()
    signer = self._signers.by_client.get(client)
    if signer is None:
      signer = credentials.CallSigner(self._key, self._domain,
                                      self._challenge(client, timeout_ms))
      self._signers.by_client[client] = signer
    return signer

  def _challenge(self, client, timeout_ms):
    """A new challenge from the service (int64 scalar tensor)."""
    method = credentials.CHALLENGE_METHOD
    if not hasattr(client, method):  # The generated methods are the service's.
      raise distributed.PeerRejected(
          f"The {self._service} at {self.address} issues no challenges: it runs an older "
          f"version of this code (wire protocol before {distributed.PROTOCOL_VERSION}); run "
          f"the same version on every process of the cluster.")
    result = getattr(client, method)(*credentials.challenge_request(self._key, self._domain),
                                     timeout_in_ms=timeout_ms)
    if result.is_ok():
      return result.get_value()
    code, message = result.get_error()
    raise self._call_error(method, int(code.numpy()), message.numpy().decode(errors="replace"))

  def _call_error(self, method, code, message):
    """The exception for a failed call of `method` (TensorFlow's error code and message)."""
    if credentials.NOT_AUTHENTICATED in message:
      has = ("holds another secret" if self._secret is not None else
             "has no secret")
      return distributed.PeerRejected(
          f"The {self._service} at {self.address} refused {self._name}'s call to {method}: "
          f"{credentials.NOT_AUTHENTICATED}: the cluster's secrets differ (this process "
          f"{has}); pass the same --cluster_secret_file (or "
          f"{distributed.SECRET_ENVIRONMENT_VARIABLE}) as the {self._service}.")
    reason = _challenge_refusal(message)
    if reason:
      return distributed.PeerRejected(
          f"The {self._service} at {self.address} refused {self._name}'s call to {method} "
          f"{_CHALLENGE_ATTEMPTS} times, with a new challenge each time (last: {reason}): "
          f"more clients call it than it remembers challenges for "
          f"({credentials.CHALLENGE_SLOTS}), or someone spends this process's credentials "
          f"before it (a man-in-the-middle); see the {self._service}'s log.")
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
    except distributed.PeerRejected:
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
        [tf.constant(distributed.PROTOCOL_VERSION), tf.constant(peer_fingerprint),
         tf.constant(name)],
        service="learner",
        start_hint="Start the learner (--job_name=learner) or check the cluster addresses.",
        refusal_hint="Run the same version with the same level, network and unroll "
                     "settings as the learner.",
        unavailable_error=distributed.LearnerUnavailable,
        connect_timeout_secs=connect_timeout_secs,
        call_timeout_secs=call_timeout_secs, print_fn=print_fn, secret=secret,
        domain=credentials.LEARNER_DOMAIN)

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
      raise distributed.PeerRejected("The learner refused a trajectory (see the learner's log).")

  def report_episode(self, level_index, episode_return, episode_step):
    self._call("episode", [tf.constant(level_index, tf.int32),
                           tf.constant(episode_return, tf.float32),
                           tf.constant(episode_step, tf.int32)])

  def sync_filter(self, count, mean, m2):
    """filter_sync.py's exchange: an observation filter's delta in, the learner's merged out."""
    return tuple(v.numpy() for v in self._call("filter_sync", [
        tf.constant(count, tf.int64), tf.constant(mean, tf.float64), tf.constant(m2, tf.float64)]))


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
