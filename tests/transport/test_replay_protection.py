"""A credential captured on the wire cannot be sent again (issue 41).

A learner with a cluster secret serves a legitimate actor process through a loopback TCP proxy
that records every byte the actor sends: what an eavesdropper on the wire sees. Its calls (and
their credentials) are read back from those bytes and sent again, on a new connection and on
the actor's own: nothing is read, nothing is enqueued, the parameters stay bit-identical, and
every refusal is counted and logged (throttled). Then the parts: the challenge table, the
refusal log, what a tag covers, a client whose challenge was forgotten."""
import collections
import socket
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.transport import credentials
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.transport import replay_service
from scalable_agent_tf2.transport import service_client
from scalable_agent_tf2.transport import wire
from tests.transport import test_cluster_security
from tests.transport import test_distributed as td

SECRET = b"the cluster's own secret"
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA_FRAME, _PADDED = 0, 0x8


def _varint(data, position):
  value, shift = 0, 0
  while True:
    byte = data[position]
    position += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if not byte & 0x80:
      return value, position


def _protobuf_fields(message):
  """(field number, value) of a protobuf message: bytes for length-delimited fields, ints
  for varints (all that TensorFlow's CallRequest and CallResponse use)."""
  position = 0
  while position < len(message):
    key, position = _varint(message, position)
    number, wire_type = key >> 3, key & 7
    if wire_type == 0:
      value, position = _varint(message, position)
    elif wire_type == 2:
      length, position = _varint(message, position)
      value, position = message[position:position + length], position + length
    else:
      raise ValueError(f"unexpected protobuf wire type {wire_type}")
    yield number, value


def _grpc_messages(stream, from_client):
  """{HTTP/2 stream id: [gRPC message bytes]} of one direction of a recorded connection."""
  data = bytes(stream)
  position = len(_HTTP2_PREFACE) if from_client else 0
  bodies = collections.defaultdict(bytearray)
  while position + 9 <= len(data):
    length = int.from_bytes(data[position:position + 3], "big")
    frame_type, flags = data[position + 3], data[position + 4]
    stream_id = int.from_bytes(data[position + 5:position + 9], "big") & 0x7FFFFFFF
    payload = data[position + 9:position + 9 + length]
    position += 9 + length
    if frame_type == _DATA_FRAME:
      if flags & _PADDED:
        payload = payload[1:len(payload) - payload[0]]
      bodies[stream_id] += payload
  messages = {}
  for stream_id, body in bodies.items():
    messages[stream_id], position = [], 0
    while position + 5 <= len(body):
      assert body[position] == 0, "a compressed gRPC message"
      length = int.from_bytes(body[position + 1:position + 5], "big")
      messages[stream_id].append(bytes(body[position + 5:position + 5 + length]))
      position += 5 + length
  return messages


def _recorded_calls(stream):
  """[(HTTP/2 stream id, method, [tensors])] of the calls (tf.distribute.experimental.rpc's
  CallRequest: method = 1, input_tensors = 2) in a client's recorded bytes, as sent."""
  calls = []
  for stream_id, messages in sorted(_grpc_messages(stream, from_client=True).items()):
    for message in messages:
      fields = list(_protobuf_fields(message))
      method = [value.decode() for number, value in fields if number == 1]
      if method:  # Not the client's listing of the methods.
        tensors = [tf.constant(tf.make_ndarray(tensor_pb2.TensorProto.FromString(value)))
                   for number, value in fields if number == 2]
        calls.append((stream_id, method[0], tensors))
  return calls


def _secured_server(address, capacity, print_fn):
  """(agent, the learner's TrajectoryServer holding its parameters, behind SECRET)."""
  agent = networks.Agent(td.TOY_NETWORK, seed=3)
  return agent, learner_service.TrajectoryServer(address, td.layout(), td.FINGERPRINT,
                                                 agent.trainable_variables, capacity=capacity,
                                                 secret=SECRET, refusal_print_fn=print_fn)


def _snapshot(agent):
  return [v.numpy().tobytes() for v in agent.trainable_variables]


def _wait_for(condition, timeout_secs=30.0):
  deadline = time.monotonic() + timeout_secs
  while not condition() and time.monotonic() < deadline:
    time.sleep(0.05)
  return condition()


@pytest.mark.timeout(240)
def test_a_captured_credential_sent_again_reads_nothing_and_enqueues_nothing():
  learner_port = td.free_port()
  address = f"localhost:{learner_port}"
  lines = []
  agent, server = _secured_server(address, 8, lines.append)
  server.parameter_version.assign(7)
  proxy = test_cluster_security.Forwarder(learner_port, record=True)
  try:
    # The legitimate actor process, through the proxy: hello, parameters, one trajectory.
    actor = service_client.LearnerClient(f"localhost:{proxy.port}", td.layout(), td.FINGERPRINT,
                                         name="actor-0", connect_timeout_secs=30, secret=SECRET)
    assert actor.parameters()[0] == 7
    actor.send_trajectory(wire.MessageHeader(0, 0, 1, 0), td.toy_trajectory())
    assert server.size() == 1
    parameters_before = _snapshot(agent)
    [recorded] = proxy.sent
    calls = _recorded_calls(recorded)
    captured = {method: tensors for _, method, tensors in calls}
    assert {"hello", "parameters", "enqueue"} <= set(captured), [m for _, m, _ in calls]

    # (a) The captured calls sent again on a new connection of the eavesdropper's own.
    replayer = tf.distribute.experimental.rpc.Client.create("grpc", address, name="replayer")
    read = replayer.parameters(*captured["parameters"])
    assert not read.is_ok(), "a replayed credential read the parameters"
    assert b"replayed credential" in read.get_error()[1].numpy()
    assert not replayer.enqueue(*captured["enqueue"]).is_ok()
    assert not replayer.hello(*captured["hello"]).is_ok()
    assert server.size() == 1, "a replayed credential enqueued a trajectory"

    # (a') The whole recorded byte stream, sent again verbatim on a new TCP connection.
    answered = _replay_bytes(learner_port, recorded, lambda: server.refused_calls >= 6)
    answers = _grpc_messages(answered, from_client=False)
    for stream_id, method, _ in calls:
      if method != credentials.CHALLENGE_METHOD:
        assert not answers.get(stream_id), f"the replayed {method} call was answered"
    assert server.size() == 1

    # (b) Within the actor's own connection (its RPC client, through the proxy): an old
    # counter on its own challenge.
    own_connection = actor._client
    assert not own_connection.parameters(*captured["parameters"]).is_ok()
    assert not own_connection.enqueue(*captured["enqueue"]).is_ok()
    assert len(proxy.sent) == 1  # No new connection was made for it.

    # The captured challenge request sent again gets a fresh challenge (it spends none), but
    # the captured tag is not a tag for it.
    challenge = replayer.challenge(*captured[credentials.CHALLENGE_METHOD]).get_value()
    _, counter, tag, *arguments = captured["parameters"]
    forged = replayer.parameters(challenge, counter, tag, *arguments)
    assert b"not authenticated" in forged.get_error()[1].numpy()

    assert server.size() == 1
    assert _snapshot(agent) == parameters_before
    assert int(server.parameter_version.numpy()) == 7
    refusals = server.refusals()
    assert refusals["by_reason"] == {credentials.REPLAYED_CREDENTIAL: 8,
                                     credentials.NOT_AUTHENTICATED: 1}, refusals
    assert refusals["by_method"] == {"parameters": 4, "enqueue": 3, "hello": 2}
    assert server.refused_calls == 9
    # One line per method (the rest were within a minute of it), and the stop summary.
    assert sorted(line.split(":")[1] for line in lines) == [
        " refused a call to enqueue", " refused a call to hello",
        " refused a call to parameters"], lines
    assert server.refusal_summary_lines() == [
        "Learner: 9 calls refused (not authenticated 1, replayed credential 8; by method: "
        "enqueue 3, hello 2, parameters 4)."]

    # The actor goes on as if nothing happened: its counters were not spent by the replays.
    assert actor.parameters()[0] == 7
    actor.send_trajectory(wire.MessageHeader(0, 0, 1, 1), td.toy_trajectory())
    assert server.size() == 2 and server.refused_calls == 9
  finally:
    proxy.close()


def _replay_bytes(port, recorded, done, timeout_secs=30.0):
  """Sends `recorded` verbatim to the service on a new TCP connection; returns what the
  service answered until `done()` (or the timeout)."""
  answered = bytearray()
  with socket.create_connection(("localhost", port)) as connection:
    connection.sendall(bytes(recorded))
    connection.settimeout(0.2)
    deadline = time.monotonic() + timeout_secs
    while not done() and time.monotonic() < deadline:
      try:
        data = connection.recv(65536)
      except socket.timeout:
        continue
      if not data:
        break
      answered += data
    time.sleep(0.5)  # The answers of the last refusals.
    try:
      while data := connection.recv(65536):
        answered += data
    except OSError:
      pass
  return answered


def test_the_challenge_table_accepts_each_counter_once_and_forgets_the_least_recently_used():
  table = credentials.ChallengeTable(slots=4)
  admit = lambda challenge, counter: int(table.admit(challenge, tf.constant(counter, tf.int64)))
  first, second = table.issue(), table.issue()
  assert int(first) != int(second) and int(first) != 0
  assert admit(first, 1) == credentials.ACCEPTED
  assert admit(first, 1) == credentials.REFUSAL_REASONS.index(credentials.REPLAYED_CREDENTIAL)
  assert admit(first, 5) == credentials.ACCEPTED  # Gaps are fine (a call lost on the way).
  assert admit(first, 3) == credentials.REFUSAL_REASONS.index(credentials.REPLAYED_CREDENTIAL)
  unknown = credentials.REFUSAL_REASONS.index(credentials.UNKNOWN_CHALLENGE)
  assert admit(tf.constant(12345, tf.int64), 1) == unknown
  assert admit(tf.constant(0, tf.int64), 1) == unknown
  # Two more fill the table; the next one takes the least recently used slot: `second`
  # (issued before `first` was last used), not `first`.
  table.issue(), table.issue()
  table.issue()
  assert admit(second, 1) == unknown
  assert admit(first, 6) == credentials.ACCEPTED
  # Another table (a restarted service) does not know this one's challenges.
  assert int(credentials.ChallengeTable(slots=4).admit(first, tf.constant(7, tf.int64))) == (
      unknown)


def test_refusals_are_logged_once_per_method_and_period_with_the_number_not_logged():
  lines, now = [], [0.0]
  log = credentials.RefusalLog("Learner", lines.append, period_secs=60.0, clock=lambda: now[0])
  for _ in range(5):
    log.record("parameters", credentials.REPLAYED_CREDENTIAL)
  log.record("enqueue", credentials.NOT_AUTHENTICATED)
  assert len(lines) == 2
  assert lines[0].startswith("Learner: refused a call to parameters: replayed credential (")
  assert lines[0].endswith("; 1 refused so far.")
  assert lines[1].startswith("Learner: refused a call to enqueue: not authenticated (")
  now[0] = 59.0
  log.record("parameters", credentials.UNKNOWN_CHALLENGE)
  assert len(lines) == 2
  now[0] = 61.0
  log.record("parameters", credentials.REPLAYED_CREDENTIAL)
  assert len(lines) == 3
  assert lines[2].endswith("; 8 refused so far; 5 more refused calls to parameters since its "
                           "last line, not logged.")
  assert log.totals() == dict(
      total=8, by_method={"parameters": 7, "enqueue": 1},
      by_reason={credentials.REPLAYED_CREDENTIAL: 6, credentials.NOT_AUTHENTICATED: 1,
                 credentials.UNKNOWN_CHALLENGE: 1})
  assert credentials.RefusalLog("Learner", lines.append).summary_lines() == []


def test_the_client_signs_what_the_service_checks():
  key = credentials.cluster_key(SECRET)
  challenge = tf.constant(-987654321, tf.int64)
  arguments = [tf.constant(3, tf.int32), tf.constant(1.5, tf.float32), tf.constant("actor-0"),
               np.arange(6, dtype=np.int64).reshape(2, 3).T,  # Not contiguous.
               np.zeros([65], np.float32),                     # Too large to be covered.
               tf.constant(["a", "b"]),                         # Strings: scalars only.
               np.array([True, False])]
  signer = credentials.CallSigner(key, credentials.LEARNER_DOMAIN, challenge)
  for counter in (1, 2):
    sent_challenge, sent_counter, tag = signer.credential("episode", arguments)
    assert int(sent_challenge) == int(challenge) and int(sent_counter) == counter
    assert int(tag) == int(credentials.call_tag(key, credentials.LEARNER_DOMAIN, "episode",
                                                challenge, sent_counter, arguments))
  # In the service's graph too, where a loose signature leaves the sizes to the values.
  loose = tf.function(lambda *args: credentials.call_tag(
      key, credentials.LEARNER_DOMAIN, "episode", challenge, tf.constant(2, tf.int64), args),
      input_signature=[tf.TensorSpec(None, tf.convert_to_tensor(a).dtype) for a in arguments])
  assert int(loose(*arguments)) == int(tag)
  # The tag covers the method, the counter and every small argument, not the large ones.
  tag_of = lambda method="episode", counter=2, changed=None: int(credentials.call_tag(
      key, credentials.LEARNER_DOMAIN, method, challenge, tf.constant(counter, tf.int64),
      [changed.get(i, a) for i, a in enumerate(arguments)] if changed else arguments))
  assert tag_of() == int(tag)
  assert tag_of(method="parameters") != int(tag) and tag_of(counter=3) != int(tag)
  assert tag_of(changed={1: tf.constant(1e9, tf.float32)}) != int(tag)
  assert tag_of(changed={2: tf.constant("actor-1")}) != int(tag)
  assert tag_of(changed={3: np.arange(6, dtype=np.int64).reshape(3, 2)}) != int(tag)
  assert tag_of(changed={4: np.ones([65], np.float32)}) == int(tag)
  assert tag_of(changed={5: tf.constant(["c", "d"])}) == int(tag)


@pytest.mark.timeout(120)
def test_a_call_with_other_arguments_than_its_tag_covers_is_refused():
  address = f"localhost:{td.free_port()}"
  _, server = _secured_server(address, 4, lambda line: None)
  client = tf.distribute.experimental.rpc.Client.create("grpc", address, name="signer")
  key = credentials.cluster_key(SECRET)
  signer = credentials.CallSigner(key, credentials.LEARNER_DOMAIN, client.challenge(
      *credentials.challenge_request(key, credentials.LEARNER_DOMAIN)).get_value())
  report = [tf.constant(0, tf.int32), tf.constant(21.0, tf.float32), tf.constant(100, tf.int32)]
  altered = [report[0], tf.constant(1e9, tf.float32), report[2]]
  credential = signer.credential("episode", report)
  refused = client.episode(*credential, *altered)
  assert b"not authenticated" in refused.get_error()[1].numpy()
  assert client.episode(*credential, *report).is_ok()  # Not spent by the refused call.
  assert server.dequeue_episodes() == [(0, 21.0, 100)]
  assert b"replayed credential" in client.episode(*credential, *report).get_error()[1].numpy()
  assert server.dequeue_episodes() == []


@pytest.mark.timeout(120)
def test_a_client_whose_challenge_was_forgotten_fetches_another(monkeypatch):
  monkeypatch.setattr(credentials, "CHALLENGE_SLOTS", 4)
  address = f"localhost:{td.free_port()}"
  lines = []
  _, server = _secured_server(address, 4, lines.append)
  actor = service_client.LearnerClient(address, td.layout(), td.FINGERPRINT, name="actor-0",
                                       connect_timeout_secs=30, secret=SECRET)
  flood = tf.distribute.experimental.rpc.Client.create("grpc", address, name="flood")
  for _ in range(4):  # A stranger cannot have challenges issued.
    assert not flood.challenge(*([tf.constant(0, tf.int64)] * 3)).is_ok()
  assert actor.parameters()[0] == 0
  assert server.refusals()["by_reason"] == {credentials.NOT_AUTHENTICATED: 4}
  # An eavesdropper's captured challenge request, sent again and again: the actor's
  # challenge is forgotten, and it fetches another.
  request = credentials.challenge_request(credentials.cluster_key(SECRET),
                                          credentials.LEARNER_DOMAIN)
  for _ in range(4):
    flood.challenge(*request).get_value()
  assert actor.parameters()[0] == 0
  assert server.refusals()["by_reason"] == {credentials.NOT_AUTHENTICATED: 4,
                                            credentials.UNKNOWN_CHALLENGE: 1}
  assert "refused a call to parameters: unknown challenge" in lines[-1]


@pytest.mark.timeout(120)
def test_a_service_of_an_older_protocol_is_named_as_such():
  address = f"localhost:{td.free_port()}"
  server = tf.distribute.experimental.rpc.Server.create("grpc", address)

  @tf.function(input_signature=[tf.TensorSpec([], tf.int64)] * 2)
  def hello(nonce, tag):  # Protocol 5's credential; no "challenge" method.
    return tf.constant(True)
  server.register("hello", hello)
  server.start()
  with pytest.raises(distributed.PeerRejected, match="issues no challenges: it runs an older "
                                                     "version of this code"):
    service_client.LearnerClient(address, td.layout(), td.FINGERPRINT, name="actor-0",
                                 connect_timeout_secs=30, secret=SECRET)


@pytest.mark.timeout(120)
def test_the_replay_service_refuses_a_replayed_credential_too():
  address = f"localhost:{td.free_port()}"
  lines = []
  service = replay_service.ReplayService(address, 10, print_fn=lines.append, secret=SECRET)
  client = tf.distribute.experimental.rpc.Client.create("grpc", address, name="observer")
  key = credentials.cluster_key(SECRET)
  challenge = lambda domain: client.challenge(
      *credentials.challenge_request(key, domain)).get_value()
  signer = credentials.CallSigner(key, replay_service.REPLAY_DOMAIN,
                                  challenge(replay_service.REPLAY_DOMAIN))
  credential = signer.credential("stats", [])
  assert client.stats(*credential).is_ok()
  replayed = client.stats(*credential)
  assert b"replayed credential" in replayed.get_error()[1].numpy()
  # A learner's credentials do not open the replay service (another domain).
  learner_signer = credentials.CallSigner(key, credentials.LEARNER_DOMAIN,
                                          challenge(replay_service.REPLAY_DOMAIN))
  assert b"not authenticated" in client.stats(
      *learner_signer.credential("stats", [])).get_error()[1].numpy()
  assert not client.challenge(*credentials.challenge_request(
      key, credentials.LEARNER_DOMAIN)).is_ok()
  assert service.refusals()["by_reason"] == {credentials.REPLAYED_CREDENTIAL: 1,
                                             credentials.NOT_AUTHENTICATED: 2}
  assert [line.split(":")[1] for line in lines if line.startswith("Replay service: refused")] == [
      " refused a call to stats", " refused a call to challenge"]
  assert service.refusal_summary_lines() == [
      "Replay service: 3 calls refused (not authenticated 2, replayed credential 1; by method: "
      "challenge 1, stats 2)."]
