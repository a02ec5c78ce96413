"""LASER's shared replay across processes (Schmitt et al., 2019, section 5.4):
replay_service.ReplayService and ReplayClient over real gRPC, agents in separate processes."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from scalable_agent_tf2 import structures
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import toy as toy_environment
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import replay_client
from scalable_agent_tf2.transport import replay_service
from scalable_agent_tf2.transport import wire
from tests import toy_families
from tests.transport import test_distributed

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)
TOY_MEMBER = "tests.pbt_toy_member"  # Run with -m from the repository root (_start's cwd).
T = 5  # Unroll length of the unit tests' unrolls.
LEVELS = ("toy",)
SETTINGS = dict(level_name="toy", torso="shallow", num_actions=toy_environment.NUM_ACTIONS,
                use_lstm=True, use_instruction=False)
STATE_SIZE = 4
# The agents' network on the toy task: small, feed-forward.
TOY_NETWORK = test_distributed.TOY_NETWORK


class _Policy:
  """What trajectory_signature reads: an LSTM-like core state (c, h) of STATE_SIZE."""

  def initial_state(self):
    return torsos.LSTMState(c=np.zeros(STATE_SIZE, np.float32),
                            h=np.zeros(STATE_SIZE, np.float32))


def signature(unroll_length=T):
  return assembly.trajectory_signature(test_distributed.TOY_NETWORK, unroll_length, _Policy())


def unroll(mark, starts=(), unroll_length=T):
  """A recognisable unroll: every value derives from `mark`; done at the given steps."""
  steps = unroll_length + 1
  done = np.zeros(steps, bool)
  done[list(starts)] = True
  rng = np.random.default_rng(mark)
  env_outputs = actor.EnvOutput(
      reward=np.full(steps, mark, np.float32), done=done,
      observation=actor.Observation(
          frame=rng.integers(0, 256, (steps,) + toy_environment.FRAME_SHAPE, np.uint8),
          instruction=np.zeros((steps, language.MAX_INSTRUCTION_WORDS), np.int32)),
      episode_return=rng.normal(size=steps).astype(np.float32),
      episode_step=np.arange(steps, dtype=np.int32) + mark, truncated=np.zeros(steps, bool))
  agent_outputs = structures.AgentOutput(
      action=rng.integers(0, 3, steps).astype(np.int32),
      policy_params=rng.normal(size=(steps, toy_environment.NUM_ACTIONS)).astype(np.float32),
      baseline=rng.normal(size=steps).astype(np.float32))
  state = torsos.LSTMState(c=np.full(STATE_SIZE, mark, np.float32),
                           h=-np.full(STATE_SIZE, mark, np.float32))
  return structures.Trajectory(level_name="toy", policy_version=mark, agent_state=state,
                               env_outputs=env_outputs, agent_outputs=agent_outputs)


def assert_same_unroll(got, want):
  assert got.level_name == want.level_name and got.policy_version == want.policy_version
  for a, b in zip(wire.flatten_message(wire.message_layout(signature()), [0, 0, 0, 0], got)[1:],
                  wire.flatten_message(wire.message_layout(signature()), [0, 0, 0, 0],
                                       want)[1:]):
    np.testing.assert_array_equal(a, b)
  assert type(got.agent_state) is type(want.agent_state)  # The state's structure survives.


def marks(episode):
  return [u.policy_version for u in episode.unrolls]


def start_service(capacity, seed=0):
  address = f"localhost:{test_distributed.free_port()}"
  lines = []
  service = replay_service.ReplayService(address, capacity, seed=seed, print_fn=lines.append)
  return address, service, lines


def client(address, tag, unroll_length=T, settings=None, timeout=20.0):
  return replay_client.ReplayClient(address, tag, signature(unroll_length),
                                     settings or SETTINGS, LEVELS,
                                     connect_timeout_secs=timeout, print_fn=lambda _: None)


def test_two_agents_add_and_sample_through_the_service_tags_kept_fifo_by_episode():
  address, _, lines = start_service(capacity=5)
  agent_a, agent_b = client(address, "a"), client(address, "b")
  added = {}
  # Agent a, actor 0: episodes (1, 2) and (2, 3) (an episode starts inside unroll 2 and at
  # the end of unroll 3). Agent b, actor 0: episode (10,) (the next starts after it). Capacity 5 unrolls: all held.
  for mark, starts in ((1, ()), (2, (3,)), (3, (5,))):
    added[mark] = unroll(mark, starts)
    agent_a.add(added[mark], "a", 0)
  added[10] = unroll(10, (5,))
  agent_b.add(added[10], "b", 0)
  assert "layout set by a" in lines[0] and "b joined" in lines[1]
  stats = agent_a.stats()
  assert stats["episodes"] == 3 and stats["unrolls"] == 5 and stats["capacity"] == 5
  assert agent_b.added_by_agent() == {"a": 2, "b": 1} and len(agent_b) == 3
  assert stats["unrolls_added_by_agent"] == {"a": 3, "b": 1}
  # Uniform sampling returns the very tensors that were added, under their owner's tag.
  seen = set()
  for _ in range(40):
    episode = agent_b.sample()
    assert isinstance(episode, laser.Episode)
    seen.add((episode.agent, tuple(marks(episode))))
    for got in episode.unrolls:
      assert_same_unroll(got, added[got.policy_version])
  assert seen == {("a", (1, 2)), ("a", (2, 3)), ("b", (10,))}
  # Agent b's episode (11, 12) needs 2 places: a's oldest episode (1, 2) leaves, whole.
  added[11], added[12] = unroll(11), unroll(12, (1,))
  agent_b.add(added[11], "b", 0)
  assert agent_a.episodes_by_agent() == {"a": 2, "b": 1}  # (11,) alone is no episode yet.
  agent_b.add(added[12], "b", 0)
  assert agent_a.episodes_by_agent() == {"a": 1, "b": 2}
  assert agent_a.added_by_agent() == {"a": 2, "b": 2}
  held = {tuple(marks(agent_a.sample())) for _ in range(40)}
  assert held == {(2, 3), (10,), (11, 12)}
  # The service counts who sampled whose episodes.
  sampled = agent_a.stats()["sampled"]
  assert sampled["b"]["a"] + sampled["b"]["b"] == 40 and sampled["b"]["a"] > 0
  assert sum(sampled["a"].values()) == 40 and sampled["a"]["b"] > 0
  # An observer (no layout) reads the same stats and cannot add.
  observer = replay_client.ReplayClient(address, "observer", print_fn=lambda _: None)
  assert observer.stats()["episodes_by_agent"] == {"a": 1, "b": 2}
  with pytest.raises(ValueError, match="observer"):
    observer.add(added[1], "observer", 0)


def test_an_empty_replay_says_so_and_a_retried_add_is_dropped():
  address, service, _ = start_service(capacity=10)
  first = client(address, "a")
  with pytest.raises(IndexError, match="no complete episode"):
    first.sample()
  first.add(unroll(1), "a", 0)
  # The same message again (a retry after a lost reply: same actor, incarnation, sequence).
  retry = client(address, "a")
  retry._incarnation = first._incarnation  # pylint: disable=protected-access
  retry.add(unroll(1), "a", 0)
  first.add(unroll(2, (4,)), "a", 0)
  assert service.stats()["duplicates"] == 1
  assert [marks(first.sample())] == [[1, 2]]  # The stream holds unroll 1 once.
  # A restarted actor process (new incarnation, same actor index) starts a new stream: its
  # unrolls never continue the unfinished episode of its predecessor.
  first.add(unroll(3), "a", 0)             # Episode (2, 3, ...) left unfinished.
  restarted = client(address, "a")
  restarted.add(unroll(4, (2,)), "a", 0)   # Its first episode: (4,), not (2, 3, 4).
  assert {tuple(marks(first.sample())) for _ in range(30)} == {(1, 2), (4,)}
  assert service.replay.num_dropped_unrolls == 2


def test_two_live_agent_processes_with_one_tag_are_told_apart():
  address, service, lines = start_service(capacity=10)
  first, second = client(address, "a"), client(address, "a")
  first.add(unroll(1), "a", 0)
  second.add(unroll(2, (3,)), "a", 0)  # A newer process with the tag (as a restart would)...
  with pytest.raises(distributed.PeerRejected,
                     match="agent tag 'a' is in use by another agent process that joined "
                           "later; give each agent its own --agent_tag"):
    first.add(unroll(3), "a", 0)       # ... while the first one still runs.
  assert any("refused an unroll of a" in line for line in lines)
  assert service.stats()["unrolls_added_by_agent"] == {"a": 2}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_agent_goes_on_with_a_restarted_service(tmp_path):
  """The population driver restarts a dead service on its address. An agent's next add
  reaches the new service (TensorFlow's RPC client waits for it, without an error), which
  has no layout yet: the agent says hello again and resends. The stream it continues
  mid-episode is dropped until its next episode starts."""
  address = f"localhost:{test_distributed.free_port()}"

  def start(name):
    return _start([sys.executable, "-m", "scalable_agent_tf2.transport.replay_service",
                   f"--address={address}", "--replay_capacity=10"], tmp_path / f"{name}.log")
  services = [start("first")]
  try:
    lines = []
    agent = replay_client.ReplayClient(address, "a", signature(), SETTINGS, LEVELS,
                                        connect_timeout_secs=60, print_fn=lines.append)
    agent.add(unroll(1, (3,)), "a", 0)  # Episode (1,) stored; the next opens at step 3.
    agent.add(unroll(2), "a", 0)
    services[0].kill()
    services[0].wait()
    services.append(start("second"))
    observer = replay_client.ReplayClient(address, "observer", connect_timeout_secs=60,
                                           print_fn=lambda _: None)  # The new one is up.
    assert observer.stats()["unrolls"] == 0
    agent.add(unroll(3, (2,)), "a", 0)  # Ends the episode begun at the first service.
    agent.add(unroll(4, (1,)), "a", 0)
    stats = observer.stats()
    assert stats["episodes"] == 1 and stats["dropped_unrolls"] == 1, stats
    assert marks(agent.sample()) == [3, 4]
    assert any("reconnecting" in line for line in lines), lines
  finally:
    for service in services:
      service.kill()
      service.wait()


def test_an_agent_with_another_layout_is_refused_with_what_differs():
  address, service, lines = start_service(capacity=10)
  # A second service on the same port (gRPC would share it silently) is refused.
  with pytest.raises(ValueError, match=f"Cannot listen on {address}.*another replay service"):
    replay_service.ReplayService(address, 10)
  client(address, "a").add(unroll(1, (2,)), "a", 0)
  with pytest.raises(distributed.PeerRejected) as refused:
    client(address, "b", unroll_length=T + 2, settings=dict(SETTINGS, torso="deep"))
  message = str(refused.value)
  assert "replay service at" in message and "refused b" in message
  assert "torso: 'deep', expected 'shallow'" in message
  assert f"env_outputs/done: shape [{T + 3}], expected [{T + 1}]" in message
  assert "agent_outputs/policy_params: shape" in message
  assert "same level with the same network and --unroll_length" in message
  assert any("refused b" in line and "torso" in line for line in lines)
  # The refused agent added nothing; the replay is a's alone.
  assert service.stats()["unrolls_added_by_agent"] == {"a": 1}


def toy_config(logdir, **overrides):
  """A LASER run on the toy task sharing the replay service of shared_replay_address."""
  values = dict(level_name="atari/pong", logdir=str(logdir), num_actors=2, batch_size=4,
                unroll_length=5, total_environment_frames=1_200, log_secs=30.0,
                checkpoint_secs=600.0, replay_fraction=0.5, laser_replay=True,
                jit_compile="off")
  values.update(overrides)
  return toy_families.on_toy(config_lib.resolve(config_lib.ExperimentConfig(**values)))


@pytest.mark.timeout(120)
def test_a_call_after_the_service_died_fails_within_its_deadline(tmp_path):
  """TensorFlow's gRPC client lets a call made after its server died wait for the call's
  whole deadline: the client's deadline, not the connect timeout, bounds the wait."""
  address = f"localhost:{test_distributed.free_port()}"
  service = _start([sys.executable, "-m", "scalable_agent_tf2.transport.replay_service",
                    f"--address={address}", "--replay_capacity=10"], tmp_path / "service.log")
  try:
    replay_client.ReplayClient(address, "first", connect_timeout_secs=60,
                                print_fn=lambda _: None)  # Waits until the service is up.
    lines = []
    observer = replay_client.ReplayClient(address, "test", connect_timeout_secs=1,
                                           call_timeout_secs=4, print_fn=lines.append)
    assert observer.stats()["episodes"] == 0
  finally:
    service.kill()
    service.wait()
  started = time.monotonic()
  with pytest.raises(replay_service.ReplayServiceUnavailable,
                     match=rf"No replay service answered at {address} within 1 s"):
    observer.stats()
  # 4 s deadline + one reconnection attempt (5 s); without the deadline: 600 s.
  assert time.monotonic() - started < 30
  assert any(line.startswith(f"Lost the replay service at {address}") for line in lines)


def test_no_service_is_a_clear_error_after_the_connect_timeout(tmp_path):
  address = f"localhost:{test_distributed.free_port()}"  # Nothing listens there.
  started = time.monotonic()
  with pytest.raises(replay_service.ReplayServiceUnavailable,
                     match=rf"No replay service answered at {address} within 2 s"):
    client(address, "a", timeout=2.0)
  assert time.monotonic() - started < 30
  # A run with --shared_replay_address: the same error, before any training.
  config = toy_config(tmp_path, shared_replay_address=address, shared_replay_connect_secs=1)
  with pytest.raises(replay_service.ReplayServiceUnavailable,
                     match="python -m scalable_agent_tf2.transport.replay_service"):
    training.train(config, print_fn=lambda _: None)
  assert not os.path.exists(os.path.join(tmp_path, "checkpoints"))


@pytest.mark.parametrize("values, message", [
    (dict(shared_replay_address="localhost:8010"), "add --laser_replay"),
    (dict(laser_replay=True, replay_fraction=0.5, shared_replay_address="localhost"),
     "must be host:port"),
    (dict(laser_replay=True, replay_fraction=0.5, shared_replay_address="localhost:8010",
          shared_replay_connect_secs=0), "must be positive"),
    (dict(laser_replay=True, replay_fraction=0.5, agent_tag="a"), "add --shared_replay_addr"),
])
def test_shared_replay_flags_refuse_bad_combinations(values, message):
  with pytest.raises(ValueError, match=message):
    config_lib.resolve(config_lib.ExperimentConfig(**values))


def _start(argv, output_path):
  with open(output_path, "w") as output:
    return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=REPO_DIR,
                            start_new_session=True)


def _member(logdir, tag, address, learning_rate, entropy_cost, frames):
  return [sys.executable, "-m", TOY_MEMBER, f"--logdir={logdir}", f"--agent_tag={tag}",
          f"--learning_rate={learning_rate}", f"--entropy_cost={entropy_cost}",
          "--epsilon=0.01", f"--total_environment_frames={frames}", "--laser_replay",
          "--replay_fraction=0.5", f"--shared_replay_address={address}",
          "--shared_replay_connect_secs=3"]


def _wait_for(condition, processes, timeout, what):
  """Polls condition() until true; fails early if a process in `processes` ended."""
  deadline = time.monotonic() + timeout
  while not condition():
    for name, (process, output) in processes.items():
      if process.poll() is not None:
        with open(output) as f:
          pytest.fail(f"{name} ended (exit code {process.returncode}) while waiting for "
                      f"{what}:\n{f.read()[-3000:]}")
    assert time.monotonic() < deadline, f"timed out waiting for {what}"
    time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_agent_processes_with_different_hyperparameters_share_a_service_process(tmp_path):
  """Two agent processes (different learning rates and entropy costs) and a replay service
  process: each replays the other's episodes; when the service dies, the agent still
  training stops with a clear error and its final checkpoint."""
  address = f"localhost:{test_distributed.free_port()}"
  service_log = tmp_path / "service.log"
  service = _start([sys.executable, "-m", "scalable_agent_tf2.transport.replay_service",
                    f"--address={address}", "--replay_capacity=300", "--log_secs=1"],
                   service_log)
  processes = {"service": (service, service_log)}
  finished = []  # Expected to end; out of `processes` (whose ending _wait_for reports).
  try:
    observer = replay_client.ReplayClient(address, "test", connect_timeout_secs=120,
                                           print_fn=lambda _: None)
    # Agent b first, with a budget it will not reach: it is still training when a runs.
    processes["b"] = (_start(_member(tmp_path / "b", "b", address, 0.0002, 0.02, 10**7),
                             tmp_path / "b.log"), tmp_path / "b.log")
    _wait_for(lambda: observer.added_by_agent().get("b", 0) >= 3, processes, 240,
              "agent b's episodes")
    processes["a"] = (_start(_member(tmp_path / "a", "a", address, 0.0006, 0.01, 2_000),
                             tmp_path / "a.log"), tmp_path / "a.log")
    agent_a = processes.pop("a")[0]
    finished.append(agent_a)
    assert agent_a.wait(240) == 0, (tmp_path / "a.log").read_text()[-3000:]
    # b replays a's episodes too (they stay in the replay after a finished).
    _wait_for(lambda: observer.stats()["sampled"].get("b", {}).get("a", 0) > 0, processes,
              120, "agent b sampling agent a's episodes")
    stats = observer.stats()
    assert stats["added_by_agent"]["a"] > 0 and stats["added_by_agent"]["b"] > 0, stats
    assert stats["sampled"]["a"]["b"] > 0, stats
    # Agent a's own account: it trained on replayed episodes of b.
    result = json.loads([line for line in (tmp_path / "a.log").read_text().splitlines()
                         if line.startswith("RESULT ")][-1][len("RESULT "):])
    assert result["num_env_frames"] >= 2_000
    assert result["replay"]["sampled_by_agent"].get("b", 0) > 0, result["replay"]
    assert "Sharing the LASER replay of" in (tmp_path / "a.log").read_text()
    # The service dies: b waits --shared_replay_connect_secs (3 s), then stops with its
    # checkpoint written and exit code 3 (the population driver restarts such a member).
    service.kill()
    service.wait()
    agent_b = processes["b"][0]
    assert agent_b.wait(120) == 3  # A call's deadline (30 s) + the connect timeout (3 s).
    output = (tmp_path / "b.log").read_text()
    assert "Lost the replay service at" in output
    assert "Stopped: the shared replay service was lost" in output
    assert "No replay service answered" in output and "holds its state" in output
    prefix, frames = checkpoints.latest_checkpoint(str(tmp_path / "b"))
    assert f"Checkpoint {os.path.join(str(tmp_path / 'b'), 'checkpoints', prefix)}" in output
    assert frames > 0
    assert "Replay: " in service_log.read_text()  # The service's periodic console line.
  finally:
    for process in [process for process, _ in processes.values()] + finished:
      if process.poll() is None:
        process.kill()
        process.wait()
