"""A cluster only its own processes can join (issue 30): credentials on every RPC call, the
listening address refused without a secret, malformed messages refused, a dead learner
reported, and the cluster through a tunnel."""
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.run import actor_process
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.transport import credentials
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.transport import replay_client
from scalable_agent_tf2.transport import replay_service
from scalable_agent_tf2.transport import service_client
from scalable_agent_tf2.transport import wire
from tests.run import test_training
from tests.transport import test_distributed as td

SECRET = b"the cluster's own secret"
ZERO = tf.constant(0, tf.int64)


def test_cluster_secret_from_a_file_else_the_environment(tmp_path):
  path = tmp_path / "secret"
  path.write_bytes(b"from the file\n")
  environ = {distributed.SECRET_ENVIRONMENT_VARIABLE: "from the environment"}
  assert distributed.cluster_secret(str(path), environ) == b"from the file"  # The file wins.
  assert distributed.cluster_secret("", environ) == b"from the environment"
  assert distributed.cluster_secret("", {}) is None
  path.write_bytes(b"\n")
  with pytest.raises(distributed.ClusterError, match=f"secret file {path} is empty"):
    distributed.cluster_secret(str(path), environ)
  with pytest.raises(distributed.ClusterError, match="Cannot read the cluster secret file"):
    distributed.cluster_secret(str(tmp_path / "missing"), environ)


def test_a_learner_without_a_secret_listens_on_loopback_only():
  for address in ("localhost:8001", "127.0.0.1:8001", "127.3.2.1:8001", "[::1]:8001"):
    assert distributed.check_listen_address(address, None, False) == []
  for address in ("0.0.0.0:8001", "10.1.2.3:8001", "learner-host:8001", "[::]:8001"):
    with pytest.raises(distributed.ClusterError,
                       match=f"the learner at {address.replace('[', '.')} would accept anyone "
                             f"who reaches it.*--cluster_secret_file=PATH or "
                             f"IMPALA_CLUSTER_SECRET.*--insecure_open_cluster"):
      distributed.check_listen_address(address, None, False)
    [warning] = distributed.check_listen_address(address, None, True)
    assert warning.startswith("WARNING: --insecure_open_cluster") and address in warning
    [note] = distributed.check_listen_address(address, SECRET, False)
    assert "not encrypted" in note


def test_wire_checks_what_shapes_cannot():
  header = lambda level=0, actor=3, sequence=0: wire.MessageHeader(level, actor, 5, sequence)
  good = np.array([0, 5, 2], np.int32)
  problem = lambda h=header(), version=2, actions=good: wire.message_problem(
      h, np.int64(version), actions, num_levels=2, num_actions=6, newest_version=4)
  assert problem() is None
  assert problem(header(level=2)) == "level index 2 is outside the run's 2 levels"
  assert "level index -1" in problem(header(level=-1))
  assert problem(header(actor=-4)) == "header field actor_index is negative (-4)"
  assert "sequence is negative" in problem(header(sequence=-1))
  assert problem(actions=np.array([0, 6], np.int32)) == (
      "action 6 is outside the 6 actions (0 to 5)")
  assert "action -1 is outside" in problem(actions=np.array([-1, 2], np.int32))
  assert problem(version=5) == (
      "policy version 5 is from the future (the learner has made 4 updates)")
  assert "negative" in problem(version=-1)
  assert wire.message_problem(header(), 0, np.array([0.5, np.nan], np.float32), 2) == (
      "a continuous action is not finite")
  assert wire.message_problem(header(), 0, np.array([0.5, -3e3], np.float32), 2) is None


def _server(address, secret, **kwargs):
  agent = networks.Agent(td.TOY_NETWORK, seed=3)
  server = learner_service.TrajectoryServer(address, td.layout(), td.FINGERPRINT,
                                            agent.trainable_variables, capacity=4, secret=secret,
                                            **kwargs)
  return server, agent


@pytest.mark.timeout(180)
def test_only_callers_with_the_secret_read_parameters_or_send_anything():
  address = f"localhost:{td.free_port()}"
  side_effects = tf.Variable(0, dtype=tf.int64)

  @tf.function(input_signature=[])
  def side_effect():  # A method registered next to the learner's (as filter_sync is).
    return side_effects.assign_add(1)
  server, agent = _server(address, SECRET, methods=[("side_effect", side_effect)])
  before = [v.numpy().copy() for v in agent.trainable_variables]
  message = wire.flatten_message(td.layout(), wire.MessageHeader(0, 0, 1, 0), td.toy_trajectory())

  # A stranger with only the public code: no challenge, no hello, a made-up or zero
  # credential.
  stranger = tf.distribute.experimental.rpc.Client.create("grpc", address)
  assert b"not authenticated" in stranger.challenge(ZERO, ZERO, ZERO).get_error()[1].numpy()
  for credential in ((ZERO, ZERO, ZERO), (tf.constant(12345, tf.int64),
                                          tf.constant(1, tf.int64), tf.constant(678, tf.int64))):
    result = stranger.parameters(*credential)
    assert not result.is_ok()
    assert b"not authenticated" in result.get_error()[1].numpy()
    assert not stranger.enqueue(*credential, *message).is_ok()
    assert not stranger.side_effect(*credential).is_ok()
  assert server.refused_calls == 7
  # A client with another secret, or none, is refused at its first call (challenge; hello
  # without a secret) with what to do.
  for secret, has in ((b"another secret", "holds another secret"), (None, "has no secret")):
    with pytest.raises(distributed.PeerRejected,
                       match=f"not authenticated: the cluster's secrets differ \\(this process "
                             f"{has}\\); pass the same --cluster_secret_file"):
      service_client.LearnerClient(address, td.layout(), td.FINGERPRINT, name="stranger",
                                   connect_timeout_secs=30, secret=secret)
  assert server.refused_calls == 9
  assert server.size() == 0 and side_effects.numpy() == 0
  for old, variable in zip(before, agent.trainable_variables):
    assert old.tobytes() == variable.numpy().tobytes()

  # The cluster's own process gets parameters and delivers.
  client = service_client.LearnerClient(address, td.layout(), td.FINGERPRINT, name="actor-0",
                                        connect_timeout_secs=30, secret=SECRET)
  version, values = client.parameters()
  assert version == 0 and values[0].tobytes() == before[0].tobytes()
  client.send_trajectory(wire.MessageHeader(0, 0, 1, 0), td.toy_trajectory())
  assert server.size() == 1 and client.ping(5.0)
  assert server.refused_calls == 9
  # The stranger still gets nothing, however it reuses what it saw of the protocol.
  assert not stranger.parameters(ZERO, ZERO, ZERO).is_ok() and server.size() == 1


def _remote_actors(tmp_path, secret, lines, delivered):
  config = test_training.toy_config(tmp_path, total_frames=1, num_actors=2,
                                    unroll_length=td.UNROLL_LENGTH)
  agent = networks.Agent(td.TOY_NETWORK, seed=3)
  signature = assembly.trajectory_signature(td.TOY_NETWORK, config.unroll_length, td._NoPolicy())
  actors = actor_process.RemoteActors(
      config, agent, signature, f"localhost:{td.free_port()}",
      lambda trajectory, actor_index: delivered.append((trajectory, actor_index)) or True,
      monitor=None, print_fn=lines.append, secret=secret)
  return config, signature, actors


@pytest.mark.timeout(180)
def test_the_pump_refuses_malformed_messages_with_their_sender_and_goes_on(tmp_path):
  lines, delivered = [], []
  config, signature, actors = _remote_actors(tmp_path, SECRET, lines, delivered)
  actors.start()
  actors.publish_version(3)
  client = service_client.LearnerClient(
      actors.server.address, wire.message_layout(signature),
      assembly.wire_fingerprint(config, td.TOY_NETWORK, signature), name="actor-1",
      connect_timeout_secs=30, secret=SECRET)

  def unroll(version=2, action=0):
    trajectory = td.toy_trajectory()._replace(policy_version=version)
    trajectory.agent_outputs.action[-1] = action
    return trajectory
  # (level index, trajectory, what the log says); actor 2 belongs to actor process 1.
  malformed = [(1, unroll(), "level index 1 is outside the run's 1 levels"),
               (-1, unroll(), "level index -1 is outside"),
               (0, unroll(action=td.toy_environment.NUM_ACTIONS), "action 3 is outside"),
               (0, unroll(action=-1), "action -1 is outside"),
               (0, unroll(version=4), "policy version 4 is from the future")]
  for sequence, (level, trajectory, _) in enumerate(malformed):
    client.send_trajectory(wire.MessageHeader(level, 2, 7, sequence), trajectory)
  client.send_trajectory(wire.MessageHeader(0, 2, 7, len(malformed)), unroll(version=3))
  deadline = time.monotonic() + 60
  while not delivered and time.monotonic() < deadline:
    time.sleep(0.1)
  assert len(delivered) == 1 and delivered[0][1] == 2  # Only the valid one, after the rest.
  assert delivered[0][0].policy_version == 3
  assert actors.failed_thread() is None
  refusals = [line for line in lines if line.startswith("Refused a trajectory")]
  assert len(refusals) == len(malformed), lines
  for line, (_, _, reason) in zip(refusals, malformed):
    assert "from actor 2 (actor process 1" in line and reason in line, line
  assert actors.refused_messages() == dict(by_actor_process={1: 5}, unauthenticated_calls=0)
  assert actors.delivered()["by_actor_process"] == {1: 1}
  assert actors.refusal_lines() == []  # The stop summary's: no credential was refused.

  # An error of the learner's input is caught per message too; the pump lives on.
  def broken(trajectory, actor_index):
    raise RuntimeError("the learner's input broke")
  actors._put_trajectory = broken
  client.send_trajectory(wire.MessageHeader(0, 2, 7, 10), unroll())
  deadline = time.monotonic() + 60
  while len([l for l in lines if "input broke" in l]) < 1 and time.monotonic() < deadline:
    time.sleep(0.1)
  assert any("could not be delivered" in l and "input broke" in l for l in lines), lines
  assert actors.failed_thread() is None
  actors.close()
  actors.join(30)
  assert actors.failed_thread() is None


def test_a_dead_pump_is_reported_to_the_supervisor(tmp_path):
  lines = []
  _, _, actors = _remote_actors(tmp_path, None, lines, [])

  def dequeue():
    raise MemoryError("no memory for the next message")
  actors.server.dequeue = dequeue
  actors.start()
  actors.join(30)
  name, error = actors.failed_thread()
  assert name == "trajectory-pump" and isinstance(error, MemoryError)
  assert any("The trajectory pump failed" in line for line in lines), lines


class _FakeLearner:
  address = "learner-host:8001"

  def __init__(self):
    self.answering = True

  def ping(self, timeout_secs):
    if not self.answering:
      time.sleep(min(timeout_secs, 0.2))
    return self.answering


def test_the_heartbeat_reports_a_silent_learner_and_its_return():
  learner, lines, gone, stop = _FakeLearner(), [], [], threading.Event()
  heartbeat = actor_process.Heartbeat(learner, stop, gone.append, lines.append,
                                      give_up_secs=3.0, interval_secs=0.1, timeout_secs=0.2)
  heartbeat.start()
  time.sleep(0.5)
  assert lines == []
  learner.answering = False
  time.sleep(1.0)
  assert lines and lines[0].startswith("The learner at learner-host:8001 is not answering ("), lines
  assert "s); retrying for up to " in lines[0]
  learner.answering = True
  time.sleep(0.5)
  assert lines[-1] == "The learner at learner-host:8001 answers again."
  learner.answering = False  # Now for longer than the budget: the learner is gone.
  heartbeat.join(10)
  assert len(gone) == 1 and isinstance(gone[0], distributed.LearnerUnavailable)
  assert "did not answer for" in str(gone[0])


KILLED_LEARNER_SCRIPT = textwrap.dedent("""
    import sys
    from tests.transport import test_cluster_security as t
    server, _ = t._server({address!r}, t.SECRET)
    print("ready", flush=True)
    sys.stdin.read()
""")


@pytest.mark.timeout(180)
def test_a_killed_learner_is_reported_within_seconds():
  address = f"localhost:{td.free_port()}"
  learner = subprocess.Popen([sys.executable, "-c", KILLED_LEARNER_SCRIPT.format(
      address=address)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=td.REPO_DIR)
  try:
    assert learner.stdout.readline().strip() == "ready"
    client = service_client.LearnerClient(address, td.layout(), td.FINGERPRINT, name="actor-0",
                                          connect_timeout_secs=30, secret=SECRET)
    lines, stop = [], threading.Event()
    heartbeat = actor_process.Heartbeat(client, stop, lambda _: None, lines.append,
                                        give_up_secs=300.0)
    heartbeat.start()
    time.sleep(actor_process.HEARTBEAT_SECS * 2)
    assert lines == []
    learner.kill()
    learner.wait()
    killed_at = time.monotonic()
    while not lines and time.monotonic() - killed_at < 30:
      time.sleep(0.1)
    assert lines and lines[0].startswith(f"The learner at {address} is not answering")
    assert time.monotonic() - killed_at < 10
    stop.set()
    heartbeat.join(10)
  finally:
    if learner.poll() is None:
      learner.kill()
      learner.wait()


@pytest.mark.timeout(180)
def test_the_replay_service_refuses_callers_without_the_secret(tmp_path):
  address = f"localhost:{td.free_port()}"
  lines = []
  service = replay_service.ReplayService(address, 10, print_fn=lines.append, secret=SECRET)
  stranger = tf.distribute.experimental.rpc.Client.create("grpc", address)
  assert not stranger.stats(ZERO, ZERO, ZERO).is_ok()
  assert not stranger.add(ZERO, ZERO, ZERO, tf.constant("stranger"), tf.constant(["x"])).is_ok()
  for secret in (None, b"another secret"):
    with pytest.raises(distributed.PeerRejected, match="not authenticated"):
      replay_client.ReplayClient(address, "stranger", connect_timeout_secs=30, secret=secret)
  assert service.refused_calls == 4
  observer = replay_client.ReplayClient(address, "observer", connect_timeout_secs=30,
                                        secret=SECRET)
  assert observer.stats()["unrolls"] == 0 and observer.ping(5.0)
  # Its credentials are for the replay service only: the learner's domain differs.
  tag = lambda domain: credentials.call_tag(credentials.cluster_key(SECRET), domain, "stats",
                                            ZERO, ZERO, []).numpy()
  assert tag(credentials.LEARNER_DOMAIN) != tag(replay_service.REPLAY_DOMAIN)
  with pytest.raises(distributed.ClusterError, match="the replay service at 0.0.0.0:"):
    replay_service.ReplayService(f"0.0.0.0:{td.free_port()}", 10, print_fn=lines.append)


class Forwarder:
  """A TCP port forwarder on loopback: the local end of `ssh -N -L PORT:localhost:LEARNER`
  (what an actor host connects to), standing in for the tunnel where no sshd runs. With
  `record`, it keeps every byte each connection's client sent (`sent`, a bytearray per
  connection): what an observer of the wire captures (test_replay_protection.py)."""

  def __init__(self, target_port, record=False):
    self._target = ("localhost", target_port)
    self._listener = socket.create_server(("localhost", 0))
    self.port = self._listener.getsockname()[1]
    self.connections = 0
    self._record = record
    self.sent = []
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self):
    while True:
      try:
        near, _ = self._listener.accept()
      except OSError:
        return
      try:
        far = socket.create_connection(self._target)
      except OSError:  # The learner is not up yet: as ssh, drop this connection.
        near.close()
        continue
      self.connections += 1
      sent = None
      if self._record:
        sent = bytearray()
        self.sent.append(sent)
      for source, sink, record in ((near, far, sent), (far, near, None)):
        threading.Thread(target=self._copy, args=(source, sink, record), daemon=True).start()

  @staticmethod
  def _copy(source, sink, record):
    try:
      while True:
        data = source.recv(65536)
        if not data:
          break
        if record is not None:
          record += data
        sink.sendall(data)
    except OSError:
      pass
    finally:
      for s in (source, sink):
        try:
          s.shutdown(socket.SHUT_RDWR)
        except OSError:
          pass

  def close(self):
    self._listener.close()


# The learner with a secret (RemoteActors given it, as training.train does once experiment.py
# passes --cluster_secret_file's), training on the toy task.
SECURE_LEARNER_SCRIPT = textwrap.dedent("""
    import dataclasses
    from tests.transport import test_cluster_security as s
    from tests.run import test_training as t
    from scalable_agent_tf2.run import actor_process
    from scalable_agent_tf2.run import training

    class Protected(actor_process.RemoteActors):
      def __init__(self, *args, **kwargs):
        kwargs["secret"] = s.SECRET
        super().__init__(*args, **kwargs)
    actor_process.RemoteActors = Protected
    config = t.toy_config({logdir!r}, total_frames={frames}, num_actors=2, log_secs=1.0,
                          checkpoint_secs=30.0)
    result = training.train(config, listen_address={address!r})
    print("learner done", result.num_env_frames, flush=True)
    print("accounts", dataclasses.asdict(result.trajectories), flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_an_actor_through_a_tunnel_trains_with_the_learner_while_a_stranger_gets_nothing(
    tmp_path):
  learner_port = td.free_port()
  address = f"localhost:{learner_port}"
  learner = subprocess.Popen(
      [sys.executable, "-c", SECURE_LEARNER_SCRIPT.format(logdir=str(tmp_path / "learner"),
                                                          frames=20_000, address=address)],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=td.REPO_DIR)
  forwarder = Forwarder(learner_port)
  lines = []
  result = []
  config = test_training.toy_config(tmp_path / "actor", total_frames=1, num_actors=2)
  actor = threading.Thread(target=lambda: result.append(actor_process.run_actor_process(
      config, f"localhost:{forwarder.port}", task=0, print_fn=lines.append,
      connect_timeout_secs=180, secret=SECRET)), daemon=True)
  try:
    # The tunnel is opened to a learner that listens (ssh would accept and drop connections
    # until then, and gRPC backs off from such an address for up to minutes).
    deadline = time.monotonic() + 240
    while True:
      assert learner.poll() is None and time.monotonic() < deadline, learner.stdout.read()
      try:
        socket.create_connection(("localhost", learner_port)).close()
        break
      except OSError:
        time.sleep(0.5)
    actor.start()
    deadline = time.monotonic() + 180
    while not any("first trajectory delivered" in l for l in lines):
      assert time.monotonic() < deadline and actor.is_alive(), lines
      time.sleep(0.2)
    # A stranger on the learner's own port: no parameters, nothing trained on.
    stranger = tf.distribute.experimental.rpc.Client.create("grpc", address)
    assert not stranger.parameters(ZERO, ZERO, ZERO).is_ok()
    message = wire.flatten_message(td.layout(), wire.MessageHeader(0, 1000, 1, 0),
                                   td.toy_trajectory())
    assert not stranger.enqueue(ZERO, ZERO, ZERO, *message).is_ok()
    with pytest.raises(distributed.PeerRejected, match="not authenticated"):
      service_client.LearnerClient(address, [], "", name="stranger", connect_timeout_secs=30,
                                   secret=b"a guess")
    output, _ = learner.communicate(timeout=300)
    assert learner.returncode == 0, output[-3000:]
    actor.join(120)
    assert result, lines[-20:]
    accounts = eval(output.split("accounts")[1].splitlines()[0])  # Our own print.
    # Everything produced came from the actor process 0, through the tunnel.
    assert set(accounts["by_actor_process"]) == {0}, accounts
    assert accounts["produced"] == result[0].num_trajectories > 0
    assert int(output.split("learner done")[1].split()[0]) >= 20_000
    assert "Learner: refused a call to parameters: not authenticated" in output
    assert "Learner: refused a call to enqueue: not authenticated" in output
    assert "Learner: refused a call to challenge: not authenticated" in output
    # The stop summary counts them (supervisor.Run.report).
    assert re.search(r"Learner: \d+ calls refused \(", output), output[-3000:]
    # The actor process's own calls (many threads on one connection) were never refused.
    assert credentials.REPLAYED_CREDENTIAL not in output, output[-3000:]
    assert credentials.UNKNOWN_CHALLENGE not in output, output[-3000:]
    assert forwarder.connections >= 1
  finally:
    forwarder.close()
    if learner.poll() is None:
      learner.kill()
      learner.wait()


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"),
                    reason="no sshd on this machine: the forwarder test stands in for the tunnel")
def test_a_real_ssh_tunnel_carries_the_learners_calls(tmp_path):
  # Needs an sshd on localhost that accepts this user's key without a prompt.
  learner_port, local_port = td.free_port(), td.free_port()
  server, _ = _server(f"localhost:{learner_port}", SECRET)
  tunnel = subprocess.Popen(
      ["ssh", "-N", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
       "-L", f"{local_port}:localhost:{learner_port}", "localhost"])
  try:
    time.sleep(3)
    if tunnel.poll() is not None:
      pytest.skip("ssh to localhost needs a password or key set-up here")
    client = service_client.LearnerClient(f"localhost:{local_port}", td.layout(), td.FINGERPRINT,
                                          name="actor-0", connect_timeout_secs=30, secret=SECRET)
    client.send_trajectory(wire.MessageHeader(0, 0, 1, 0), td.toy_trajectory())
    assert server.size() == 1
  finally:
    tunnel.kill()
    tunnel.wait()
