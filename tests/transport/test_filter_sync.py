"""MuJoCo's observation filter in a cluster (filter_sync.py): actor processes send their new
statistics to the learner, which merges them into its checkpointed filter and hands the merged
statistics back; checked against numpy on all the observations."""
import json
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments.normalization import MeanStdFilter
from scalable_agent_tf2.run import actor_process
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.transport import filter_sync
from scalable_agent_tf2.transport import service_client
from tests.transport import test_distributed

SIZE = 3  # Observation size O of these tests.


def _agent_with_filter():
  """What build_agent gives a continuous-control agent, as far as the sync is concerned."""
  return types.SimpleNamespace(observation_filter=action_spaces.ObservationFilter(SIZE))


def _assert_holds(state, xs):
  """`state` (count, mean, m2 of a filter) is the statistics of exactly the rows of xs."""
  xs = np.concatenate(xs) if isinstance(xs, list) else xs
  assert int(state["count"]) == len(xs)
  np.testing.assert_allclose(state["mean"], xs.mean(axis=0), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(state["m2"], ((xs - xs.mean(axis=0)) ** 2).sum(axis=0),
                             rtol=1e-10)


def _observations(rng, process, rows):
  """Different data for each actor process: another mean and scale per process."""
  return rng.normal(loc=5.0 * process - 2.0, scale=1.0 + 3.0 * process, size=(rows, SIZE))


class _LoopbackClient:
  """LearnerClient.sync_filter without the gRPC: the learner's "filter_sync" method (the same
  tf.function the learner's server registers) called in this process."""

  def __init__(self, learner_agent):
    [(name, self._method)] = filter_sync.learner_methods(learner_agent)
    assert name == filter_sync.METHOD_NAME
    self.calls = 0

  def sync_filter(self, count, mean, m2):
    self.calls += 1
    merged = self._method(tf.constant(count, tf.int64), tf.constant(mean, tf.float64),
                          tf.constant(m2, tf.float64))
    return tuple(v.numpy() for v in merged)


def test_statistics_cross_the_wire_as_three_arrays():
  obs_filter = MeanStdFilter((SIZE,))
  xs = np.random.default_rng(0).normal(size=(9, SIZE))
  obs_filter(xs)
  count, mean, m2 = filter_sync.statistics_arrays(obs_filter.take_delta())
  assert (count.dtype, mean.dtype, m2.dtype) == (np.int64, np.float64, np.float64)
  assert mean.shape == m2.shape == (SIZE,)
  back = filter_sync.statistics_from_arrays(count, mean, m2)
  _assert_holds({"count": back.count, "mean": back.mean, "m2": back.m2}, xs)
  assert filter_sync.statistics_arrays(obs_filter.state())[0] == 9
  with pytest.raises(ValueError, match="Not a filter's statistics"):
    filter_sync.statistics_from_arrays(-1, mean, m2)
  with pytest.raises(ValueError, match="Not a filter's statistics"):
    filter_sync.statistics_from_arrays(3, mean, m2[:2])


def test_two_actor_processes_and_the_learner_end_with_everyones_statistics():
  rng = np.random.default_rng(1)
  learner = _agent_with_filter()
  # A resumed learner: its filter holds the previous run's observations.
  previous = rng.normal(size=(13, SIZE))
  learner.observation_filter.filter(previous)
  client = _LoopbackClient(learner)
  actors = [MeanStdFilter((SIZE,)) for _ in range(2)]
  syncs = [filter_sync.FilterSync(client, actor) for actor in actors]
  for sync, actor in zip(syncs, actors):  # Before any observation: the restored filter.
    sync.sync()
    _assert_holds(actor.state(), previous)
  seen = [previous]
  for rows in (7, 20):  # Two rounds: each actor process observes its own data, then syncs.
    for process, actor in enumerate(actors):
      xs = _observations(rng, process, rows + process)
      seen.append(xs)
      actor(xs)
    for sync in syncs:
      sync.sync()
  # The first process synced before the second sent its last delta: one more round, with
  # nothing new, and everyone holds everything (RLlib's merged filter), nothing twice.
  syncs[0].sync()
  for state in [learner.observation_filter.filter.state()] + [a.state() for a in actors]:
    _assert_holds(state, seen)
  assert client.calls == 2 + 2 * 2 + 1
  # They normalise as one filter that saw every observation.
  reference = MeanStdFilter((SIZE,))
  reference(np.concatenate(seen))
  probe = rng.normal(size=SIZE)
  for actor in actors:
    np.testing.assert_allclose(actor(probe, update=False), reference(probe, update=False),
                               rtol=1e-6)


class _FakeParameterSync:
  def __init__(self, version):
    self.version = version
    self.refreshes = 0

  def refresh(self):
    self.refreshes += 1
    return self.version


def test_an_unroll_start_syncs_the_filter_with_the_parameters():
  learner, actor_agent = _agent_with_filter(), _agent_with_filter()
  client = _LoopbackClient(learner)
  parameters = _FakeParameterSync(version=7)
  process = actor_process._ActorProcess(  # pylint: disable=protected-access
      types.SimpleNamespace(num_actors=2), 0, client, parameters,
      filter_sync.for_actor_process(client, actor_agent), print_fn=lambda line: None)
  xs = _observations(np.random.default_rng(2), 0, 11)
  actor_agent.observation_filter(xs)  # What its actor threads filtered during an unroll.
  assert process._policy_version() == 7  # pylint: disable=protected-access
  assert parameters.refreshes == 1 and client.calls == 1
  _assert_holds(learner.observation_filter.filter.state(), xs)
  _assert_holds(actor_agent.observation_filter.filter.state(), xs)


def test_agents_without_a_filter_get_no_method_and_make_no_call():
  agent = networks.Agent(test_distributed.TOY_NETWORK)  # Frames: built without a filter.
  assert filter_sync.learner_methods(agent) == []
  assert filter_sync.for_actor_process(object(), agent) is None  # The client is not used.
  parameters = _FakeParameterSync(version=3)
  process = actor_process._ActorProcess(  # pylint: disable=protected-access
      types.SimpleNamespace(num_actors=1), 0, object(), parameters, None,
      print_fn=lambda line: None)
  assert process._policy_version() == 3  # pylint: disable=protected-access
  assert parameters.refreshes == 1


# A (resumed) learner's RPC server with a filter, as its own process: serves until its stdin
# closes, then prints its filter's state.
LEARNER_SCRIPT = textwrap.dedent("""
    import json, sys
    from tests.transport import test_distributed as t
    from scalable_agent_tf2.acting import action_spaces
    from scalable_agent_tf2.transport import learner_service
    from scalable_agent_tf2.transport import service_client
    from scalable_agent_tf2.transport import filter_sync
    from scalable_agent_tf2.agent import networks
    agent = networks.Agent(t.TOY_NETWORK, seed=3,
                           observation_filter=action_spaces.ObservationFilter({size}))
    agent.observation_filter.deserialize({restored!r})  # As a checkpoint restores it.
    server = learner_service.TrajectoryServer({address!r}, t.layout(), t.FINGERPRINT,
                                              agent.trainable_variables, capacity=4,
                                              methods=filter_sync.learner_methods(agent))
    print("ready", flush=True)
    sys.stdin.read()
    print("state", agent.observation_filter.serialize(), flush=True)
""")


@pytest.mark.timeout(180)
def test_actor_processes_sync_with_a_resumed_learner_over_grpc():
  rng = np.random.default_rng(3)
  previous = rng.normal(size=(17, SIZE))
  restored = MeanStdFilter((SIZE,))
  restored(previous)
  state = restored.state()
  address = f"localhost:{test_distributed.free_port()}"
  script = LEARNER_SCRIPT.format(size=SIZE, address=address, restored=json.dumps(
      {"count": int(state["count"]), "mean": state["mean"].tolist(),
       "m2": state["m2"].tolist()}))
  learner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=test_distributed.REPO_DIR)
  try:
    assert learner.stdout.readline().strip() == "ready", learner.stderr.read()[-3000:]
    actors = [MeanStdFilter((SIZE,)) for _ in range(2)]
    syncs = [filter_sync.FilterSync(service_client.LearnerClient(
        address, test_distributed.layout(), test_distributed.FINGERPRINT, name=f"actor-{k}",
        connect_timeout_secs=60), actor) for k, actor in enumerate(actors)]
    for sync, actor in zip(syncs, actors):  # The restored filter reaches the actor processes.
      sync.sync()
      _assert_holds(actor.state(), previous)
    seen = [previous]
    for process, actor in enumerate(actors):
      xs = _observations(rng, process, 10 + process)
      seen.append(xs)
      actor(xs)
    for sync in syncs + syncs[:1]:
      sync.sync()
    for actor in actors:
      _assert_holds(actor.state(), seen)
    output, errors = learner.communicate(input="", timeout=60)
    assert learner.returncode == 0, errors[-3000:]
    _assert_holds(json.loads(output.split("state", 1)[1]), seen)
  finally:
    if learner.poll() is None:
      learner.kill()
      learner.wait()


HOPPER_CLUSTER_SCRIPT = textwrap.dedent("""
    from scalable_agent_tf2.run import actor_process
    from scalable_agent_tf2.run import training
    from tests.transport import test_filter_sync as t
    config = t.hopper_config({logdir!r})
    if {job!r} == "learner":
      result = training.train(config, listen_address={address!r}, print_fn=lambda line: None)
      print("learner done", result.num_env_frames, flush=True)
    else:
      result = actor_process.run_actor_process(config, {address!r}, task=0,
                                               connect_timeout_secs=120)
      print("actor done", result.num_trajectories, flush=True)
""")


def hopper_config(logdir):
  return config_lib.config_from_argv([
      "--level_name=mujoco/hopper", f"--logdir={logdir}", "--batch_size=2",
      "--unroll_length=8", "--num_actors=2", "--log_secs=60",
      "--total_environment_frames=64"])


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_hopper_cluster_checkpoints_the_actor_processes_statistics(tmp_path):
  address = f"localhost:{test_distributed.free_port()}"
  processes = [subprocess.Popen(
      [sys.executable, "-c", HOPPER_CLUSTER_SCRIPT.format(logdir=str(tmp_path), job=job,
                                                          address=address)],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      cwd=test_distributed.REPO_DIR) for job in ("learner", "actor")]
  try:
    outputs = [process.communicate(timeout=360)[0] for process in processes]
    for process, output in zip(processes, outputs):
      assert process.returncode == 0, output[-3000:]
    assert "learner done" in outputs[0] and "actor done" in outputs[1]
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  # The learner acted on nothing itself: its checkpointed filter holds what the actor
  # process observed (at least one unroll's, merged at the next unroll start).
  config = hopper_config(str(tmp_path))
  agent, env = assembly.build_agent(config, assembly.default_environment_constructor(config))
  env.close()
  checkpointer = assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent))
  assert checkpointer.restore() is not None
  state = agent.observation_filter.filter.state()
  assert state["count"] >= config.unroll_length + 1, state
  assert np.all(np.isfinite(state["mean"])) and np.any(state["m2"] > 0)


def test_the_learner_refuses_a_non_finite_delta_and_keeps_its_statistics(capsys):
  rng = np.random.default_rng(4)
  learner = _agent_with_filter()
  seen = rng.normal(size=(6, SIZE))
  learner.observation_filter.filter(seen)
  client = _LoopbackClient(learner)
  count, mean, m2 = 3, np.array([0.0, np.nan, 0.0]), np.ones(SIZE)
  merged = client.sync_filter(count, mean, m2)
  # The actor process gets the learner's statistics back, as they were, and can play on.
  _assert_holds(dict(zip(("count", "mean", "m2"), merged)), seen)
  _assert_holds(learner.observation_filter.filter.state(), seen)
  assert "refused an actor process's observation statistics" in capsys.readouterr().err
  with pytest.raises(ValueError, match="mean holds nan at"):
    filter_sync.statistics_from_arrays(count, mean, m2)
  lines = []
  merger = filter_sync.DeltaMerger(learner.observation_filter.filter, log=lines.append)
  merger(np.int64(2), np.zeros(SIZE), np.array([np.inf, 0.0, 0.0]))
  assert merger.refused == 1 and "m2 holds inf at (0,)" in lines[0], lines
  _assert_holds(learner.observation_filter.filter.state(), seen)
