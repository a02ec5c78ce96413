"""The learner's RPC service and an actor's client, in separate processes over real gRPC."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from scalable_agent_tf2 import structures
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.environments import toy as toy_environment
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.transport import service_client
from scalable_agent_tf2.transport import wire
from tests.run import test_training

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)
TOY_NETWORK = networks.NetworkConfig(
    num_actions=toy_environment.NUM_ACTIONS, frame_shape=toy_environment.FRAME_SHAPE,
    torso=networks.SHALLOW, use_lstm=False, use_instruction=False)
UNROLL_LENGTH = 5

# The learner side, as its own process: serves until its stdin closes, printing what arrives.
# Child scripts run from the repository root, so `tests` and the project import from there.
LEARNER_SCRIPT = textwrap.dedent("""
    import sys, threading
    from tests.transport import test_distributed as t
    from scalable_agent_tf2.transport import distributed
    from scalable_agent_tf2.transport import learner_service
    from scalable_agent_tf2.transport import service_client
    from scalable_agent_tf2.agent import networks
    agent = networks.Agent(t.TOY_NETWORK, seed=3)
    layout = t.layout()
    server = learner_service.TrajectoryServer({address!r}, layout, t.FINGERPRINT,
                                              agent.trainable_variables, capacity=4)
    server.parameter_version.assign(11)
    print("ready", flush=True)
    def drain():
      while True:
        message = server.dequeue()
        if message is None:
          return
        print("trajectory", int(message[0][0]), message[-1].shape, flush=True)
    threading.Thread(target=drain, daemon=True).start()
    sys.stdin.read()
    server.close()
    print("episodes", server.dequeue_episodes(), flush=True)
""")


class _NoPolicy:
  def initial_state(self):
    return ()


def layout():
  return wire.message_layout(
      assembly.trajectory_signature(TOY_NETWORK, UNROLL_LENGTH, _NoPolicy()))


FINGERPRINT = wire.fingerprint(layout(), level_name="toy", torso="shallow")


def free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def toy_trajectory(frame_shape=toy_environment.FRAME_SHAPE):
  steps = UNROLL_LENGTH + 1
  env_outputs = actor.EnvOutput(
      reward=np.ones(steps, np.float32), done=np.zeros(steps, bool),
      observation=actor.Observation(
          frame=np.zeros((steps,) + tuple(frame_shape), np.uint8),
          instruction=np.zeros((steps, language.MAX_INSTRUCTION_WORDS), np.int32)),
      episode_return=np.zeros(steps, np.float32), episode_step=np.zeros(steps, np.int32),
      truncated=np.zeros(steps, bool))
  agent_outputs = structures.AgentOutput(
      action=np.zeros(steps, np.int32),
      policy_params=np.zeros((steps, toy_environment.NUM_ACTIONS), np.float32),
      baseline=np.zeros(steps, np.float32))
  return structures.Trajectory(level_name="toy", policy_version=2, agent_state=(),
                          env_outputs=env_outputs, agent_outputs=agent_outputs)


@pytest.fixture
def learner_process():
  address = f"localhost:{free_port()}"
  script = LEARNER_SCRIPT.format(address=address)
  process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO_DIR)
  assert process.stdout.readline().strip() == "ready", process.stderr.read()[-3000:]
  yield address, process
  if process.poll() is None:
    process.kill()
    process.wait()


def test_parse_cluster_from_flag_tf_config_or_loopback():
  assert distributed.parse_cluster("", environ={}) == {"learner": ["localhost:8001"]}
  cluster = {"learner": ["a:1"], "actor": ["b:2", "c:3"]}
  assert distributed.parse_cluster(json.dumps(cluster), environ={}) == cluster
  tf_config = json.dumps({"cluster": cluster, "task": {"type": "actor", "index": 1}})
  assert distributed.parse_cluster("", environ={"TF_CONFIG": tf_config}) == cluster
  assert distributed.task_from_environment({"TF_CONFIG": tf_config}) == ("actor", 1)
  with pytest.raises(distributed.ClusterError, match="exactly one learner"):
    distributed.parse_cluster('{"actor": ["b:2"]}', environ={})
  with pytest.raises(distributed.ClusterError, match="not valid JSON"):
    distributed.parse_cluster("{learner", environ={})


@pytest.mark.timeout(180)
def test_actor_client_sends_trajectories_and_reads_parameters(learner_process):
  address, process = learner_process
  client = service_client.LearnerClient(address, layout(), FINGERPRINT, name="actor-0",
                                        connect_timeout_secs=60)
  version, values = client.parameters()
  assert version == 11
  agent = networks.Agent(TOY_NETWORK, seed=3)
  assert [v.shape for v in values] == [tuple(v.shape) for v in agent.trainable_variables]
  np.testing.assert_array_equal(values[0], agent.trainable_variables[0].numpy())

  header = lambda level_index, sequence: wire.MessageHeader(level_index, 3, 77, sequence)
  for level_index in (0, 1):
    client.send_trajectory(header(level_index, level_index), toy_trajectory())
  client.report_episode(1, 7.5, 10)
  # A malformed trajectory is refused, logged by the learner, and the learner carries on.
  with pytest.raises(distributed.PeerRejected, match="refused a trajectory"):
    client.send_trajectory(header(0, 2), toy_trajectory(frame_shape=(20, 21, 1)))
  client.send_trajectory(header(2, 3), toy_trajectory())

  # A peer with another layout is refused at hello.
  with pytest.raises(distributed.PeerRejected, match="layout fingerprint"):
    service_client.LearnerClient(address, layout(), "0123456789abcdef", name="stranger",
                                 connect_timeout_secs=60)

  # ParameterSync assigns the learner's values to a local agent.
  local = networks.Agent(TOY_NETWORK, seed=99)
  sync = service_client.ParameterSync(client, local.trainable_variables)
  assert sync.refresh() == 11
  np.testing.assert_array_equal(local.trainable_variables[-1].numpy(), values[-1])

  output, errors = process.communicate(input="", timeout=60)
  lines = output.splitlines()
  assert [line.split()[1] for line in lines if line.startswith("trajectory")] == ["0", "1", "2"]
  assert "episodes [(1, 7.5, 10)]" in output
  assert "refused a trajectory" in errors
  version = distributed.PROTOCOL_VERSION
  assert (f"Learner: peer stranger refused: protocol {version} (learner {version}), layout "
          "fingerprint 0123456789abcdef") in errors
  assert process.returncode == 0


def _listening_sockets(pid):
  """[(ip bytes hex, port)] of the TCP sockets process `pid` listens on (from /proc)."""
  inodes = set()
  for fd in os.listdir(f"/proc/{pid}/fd"):
    target = os.readlink(f"/proc/{pid}/fd/{fd}") if os.path.exists(f"/proc/{pid}/fd/{fd}") else ""
    if target.startswith("socket:["):
      inodes.add(target[8:-1])
  found = []
  for table in ("tcp", "tcp6"):
    with open(f"/proc/{pid}/net/{table}") as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and inode in inodes:  # 0A: LISTEN.
          address, port = local.split(":")
          found.append((address, int(port, 16)))
  return found


def test_the_learner_listens_only_on_its_loopback_address(learner_process):
  address, process = learner_process
  port = int(address.split(":")[1])
  sockets = _listening_sockets(process.pid)
  # IPv4 127.0.0.1 (0100007F), possibly as an IPv4-mapped IPv6 address.
  assert len(sockets) == 1 and sockets[0][1] == port, sockets
  assert sockets[0][0] in ("0100007F", "0000000000000000FFFF00000100007F"), sockets


def test_message_round_trip_and_the_ledger_drops_repeats_per_sender():
  signature = assembly.trajectory_signature(TOY_NETWORK, UNROLL_LENGTH, _NoPolicy())
  header = wire.MessageHeader(level_index=1, actor_index=5, incarnation=2**61 + 3,
                                     sequence=9)
  message = wire.flatten_message(layout(), header, toy_trajectory())
  back, trajectory = wire.unflatten_message(message, signature, ["a", "b"])
  assert back == header and trajectory.level_name == "b" and trajectory.policy_version == 2

  ledger = learner_service.DeliveryLedger(actors_per_process=4)
  sent = lambda actor, incarnation, sequence: ledger.admit(
      wire.MessageHeader(0, actor, incarnation, sequence))
  assert sent(5, 1, 0) and sent(5, 1, 1) and sent(0, 1, 0)
  assert not sent(5, 1, 1)  # A retried send that had arrived: dropped.
  assert not sent(5, 1, 0)
  assert sent(5, 2, 0)  # A restarted actor process (new incarnation) starts again at 0.
  assert ledger.received == {1: 3, 0: 1} and ledger.duplicates == {1: 2}
  assert ledger.total == 4


def test_no_learner_is_a_clear_error_after_bounded_retries():
  with pytest.raises(distributed.LearnerUnavailable, match="No learner answered"):
    service_client.LearnerClient(f"localhost:{free_port()}", layout(), FINGERPRINT,
                                 name="early", connect_timeout_secs=3, print_fn=lambda _: None)


CLUSTER_SCRIPT = textwrap.dedent("""
    from tests.run import test_training as t
    import dataclasses
    from scalable_agent_tf2.run import actor_process
    from scalable_agent_tf2.run import training
    config = t.toy_config({logdir!r}, total_frames={frames}, num_actors=2, log_secs=1.0,
                          checkpoint_secs=5.0)
    if {job!r} == "learner":
      result = training.train(config, listen_address={address!r})
      print("learner done", result.num_env_frames, flush=True)
      print("accounts", dataclasses.asdict(result.trajectories), flush=True)
    else:
      result = actor_process.run_actor_process(config, {address!r}, task={task},
                                               connect_timeout_secs=120)
      print("actor done", result.num_trajectories, flush=True)
""")


def _start(job, address, logdir, frames, task=0):
  script = CLUSTER_SCRIPT.format(job=job, address=address, logdir=str(logdir), frames=frames,
                                 task=task)
  return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd=REPO_DIR)


def _descendants(pid):
  found = []
  for task in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{task}/children") as f:
      for child in f.read().split():
        found.append(int(child))
        found.extend(_descendants(int(child)))
  return found


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_learner_trains_on_two_actor_processes_and_survives_a_killed_one(tmp_path):
  address = f"localhost:{free_port()}"
  # An actor started before the learner waits for it.
  actors = [_start("actor", address, tmp_path, 1, task=k) for k in (0, 1)]
  outputs = [[], []]
  for k, process in enumerate(actors):  # Up and waiting, however long start-up takes.
    for line in process.stdout:
      outputs[k].append(line)
      if "Waiting for the learner" in line:
        break
  learner = _start("learner", address, tmp_path, 60_000)
  try:
    # Both actors deliver; then one is killed (its environment processes die with it).
    for k, process in enumerate(actors):
      for line in process.stdout:
        outputs[k].append(line)
        if "first trajectory delivered" in line:
          break
      assert "first trajectory delivered" in "".join(outputs[k]), "".join(outputs[k])[-3000:]
    environment_pids = _descendants(actors[1].pid)
    actors[1].kill()
    actors[1].wait()
    learner_output, _ = learner.communicate(timeout=300)
    assert learner.returncode == 0, learner_output[-3000:]
    assert "learner done" in learner_output
    frames = int(learner_output.split("learner done")[1].split()[0])
    assert frames >= 60_000
    # Both actor processes are accounted for; every trajectory trained on is counted as
    # frames once, the rest is reported as not trained on.
    accounts = eval(learner_output.split("accounts")[1].splitlines()[0])  # Our own print.
    assert set(accounts["by_actor_process"]) == {0, 1}, accounts
    assert accounts["duplicates"] == {}
    assert accounts["trained"] + accounts["untrained"] == accounts["produced"]
    config = test_training.toy_config(str(tmp_path), total_frames=1, num_actors=2)
    assert frames == accounts["trained"] * config.unroll_length * config.num_action_repeats
    assert "actor process 1:" in learner_output
    rest, _ = actors[0].communicate(timeout=120)
    survivor_output = "".join(outputs[0]) + rest
    assert actors[0].returncode == 0, survivor_output[-3000:]
    assert "Waiting for the learner" in survivor_output
    assert "is gone" in survivor_output
    assert int(survivor_output.split("actor done")[1].split()[0]) > 0
    time.sleep(2)
    for pid in environment_pids:
      assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
  finally:
    for process in actors + [learner]:
      if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launcher_runs_a_local_cluster_to_the_end_and_leaves_no_process(tmp_path, capfd):
  from scalable_agent_tf2.run import launch
  code = launch.main(["--num_actor_processes=1", "--", "--level_name=atari/pong",
                      "--num_actors=2", "--batch_size=2", "--unroll_length=5",
                      "--total_environment_frames=800", f"--logdir={tmp_path}"])
  output = capfd.readouterr().out
  assert code == 0, output[-3000:]
  assert "[learner] Stopped: frame budget reached" in output
  assert "[actor 0] Actor process stopped: learner gone" in output
  leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
  assert leftovers.stdout.strip() == ""


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_actor_waits_for_a_restarted_learner_and_reconnects(tmp_path):
  address = f"localhost:{free_port()}"
  first_learner = _start("learner", address, tmp_path, 10_000_000)
  actor_process = _start("actor", address, tmp_path, 1)
  second_learner = None
  try:
    output = []
    for line in actor_process.stdout:
      output.append(line)
      if "first trajectory delivered" in line:
        break
    first_learner.kill()  # A crash: no goodbye to the actors.
    first_learner.wait()
    second_learner = _start("learner", address, tmp_path, 20_000)
    learner_output, _ = second_learner.communicate(timeout=300)
    assert second_learner.returncode == 0, learner_output[-3000:]
    assert "learner done" in learner_output
    rest, _ = actor_process.communicate(timeout=120)
    text = "".join(output) + rest
    assert actor_process.returncode == 0, text[-3000:]
    assert "Lost the learner" in text and "Connected to the learner" in text
    assert "is gone (CancelledError)" in text  # The restarted learner finished and said so.
  finally:
    for process in (first_learner, second_learner, actor_process):
      if process is not None and process.poll() is None:
        process.kill()
        process.wait()
