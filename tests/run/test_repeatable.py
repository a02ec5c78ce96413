"""--repeatable (run/repeatable.py): the same seed and command give the same losses and
parameters, update by update; a different seed does not; what cannot repeat is refused.

The training runs are in this process (training.train, the real toy level's environment
processes and the real Atari vector group); the slow test runs experiment.py twice.
"""
import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.run import training
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from scalable_agent_tf2.structures import Trajectory
from scalable_agent_tf2.transport import distributed

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The toy level with 2 actors and batches of 4 (a batch spans two rounds of 2 unrolls):
# 4 x 5 = 20 frames per update.
TOY_FLAGS = ["--level_name=toy/lit_side", "--num_actors=2", "--batch_size=4",
             "--unroll_length=5", "--log_secs=60"]
TOY_UPDATES = 4
# Pong in 2 actors' vector groups of 2 games, batches of 2 (a round of 4 unrolls makes two
# batches, the second acted with the parameters before the first's update): 2 x 5 x 4
# (action repeat) = 40 frames per update.
ATARI_FLAGS = ["--level_name=atari/pong", "--num_actors=2", "--envs_per_actor=2",
               "--batch_size=2", "--unroll_length=5", "--log_secs=60"]
ATARI_UPDATES = 3


def train_repeatably(logdir, flags, frames, seed):
  """(the run's update lines, its final checkpoint's tensors by name)."""
  config = config_lib.config_from_argv(
      [f"--logdir={logdir}", "--repeatable", f"--seed={seed}",
       f"--total_environment_frames={frames}", *flags])
  lines = []
  result = training.train(config, print_fn=lines.append)
  reader = tf.train.load_checkpoint(result.checkpoint)
  tensors = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  return [line for line in lines if line.startswith("update ")], tensors


def assert_same_tensors(first, second):
  assert sorted(first) == sorted(second)
  for name in first:
    np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def agent_tensors(tensors):
  return {name: value for name, value in tensors.items()
          if name.startswith("agent/") and "OPTIMIZER_SLOT" not in name}


def assert_two_runs_repeat(tmp_path, flags, frames, seed, updates):
  """Trains twice with the same seed; asserts the same `updates` lines (each update's losses
  at float32's full precision and the parameters' digest after it) and the same checkpointed
  tensors. Returns the first run's (lines, tensors)."""
  lines, tensors = train_repeatably(tmp_path / "a", flags, frames, seed=seed)
  again, tensors_again = train_repeatably(tmp_path / "b", flags, frames, seed=seed)
  assert len(lines) == updates, lines
  assert again == lines
  assert_same_tensors(tensors, tensors_again)
  return lines, tensors


def test_toy_level_repeats_its_losses_and_parameters_and_another_seed_does_not(tmp_path):
  frames = TOY_UPDATES * 20
  lines, tensors = assert_two_runs_repeat(tmp_path, TOY_FLAGS, frames, 7, TOY_UPDATES)
  assert agent_tensors(tensors)  # The network's variables are among those compared.

  other, other_tensors = train_repeatably(tmp_path / "c", TOY_FLAGS, frames, seed=8)
  assert len(other) == TOY_UPDATES
  assert all(a != b for a, b in zip(other, lines))
  agent = agent_tensors(tensors)
  assert any(not np.array_equal(agent[name], other_tensors[name]) for name in agent)


def test_atari_repeats_its_losses_and_parameters(tmp_path):
  frames = ATARI_UPDATES * 40
  lines, _ = assert_two_runs_repeat(tmp_path, ATARI_FLAGS, frames, 3, ATARI_UPDATES)
  assert len({line.split("params=")[1] for line in lines}) == ATARI_UPDATES  # They moved.


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_same_command_twice_prints_the_same_updates(tmp_path):
  # experiment.py as a user runs it: TensorFlow started by the command, its thread count.
  def run(logdir):
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO_DIR, "experiment.py"), f"--logdir={logdir}",
         "--repeatable", "--seed=7", f"--total_environment_frames={TOY_UPDATES * 20}",
         *TOY_FLAGS], capture_output=True, text=True, timeout=300, cwd=REPO_DIR)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return [line for line in completed.stdout.splitlines() if line.startswith("update ")]
  first = run(tmp_path / "a")
  assert len(first) == TOY_UPDATES
  assert run(tmp_path / "b") == first


@pytest.mark.parametrize("flags, message", [
    (["--mode=test"], "--repeatable is for --mode=train"),
    (["--num_learners=2"], "Use --num_learners=1"),
    (["--laser_replay", "--replay_fraction=0.875", "--shared_replay_address=localhost:8010"],
     "--shared_replay_address"),
])
def test_combinations_that_cannot_repeat_are_refused(tmp_path, flags, message):
  with pytest.raises(ValueError, match=message):
    config_lib.config_from_argv([f"--logdir={tmp_path}", "--repeatable", *TOY_FLAGS,
                                 *flags])
  config_lib.config_from_argv([f"--logdir={tmp_path}", *TOY_FLAGS, *flags])  # Fine without.


def test_a_cluster_learner_or_a_replay_shared_in_process_is_refused_before_any_work(tmp_path):
  config = config_lib.config_from_argv([f"--logdir={tmp_path / 'run'}", "--repeatable",
                                        *TOY_FLAGS])
  with pytest.raises(distributed.ClusterError, match="--repeatable .* actor processes"):
    training.train(config, listen_address="localhost:0")
  with pytest.raises(ValueError, match="shared with other runs"):
    training.train(config, shared_replay=object())
  assert not os.path.exists(tmp_path / "run")


# The lockstep schedule itself (no TensorFlow run).


def lockstep(num_actors=3, envs_per_actor=2, one_at_a_time=False):
  return repeatable.LockstepQueues(num_actors, envs_per_actor, threading.Event(),
                                   one_at_a_time=one_at_a_time)


def test_actors_wait_for_the_learner_and_the_learner_takes_rounds_in_stream_order():
  queues = lockstep()
  assert not any(queues._may_act(actor) for actor in range(3))  # Nobody asked yet.
  taken = []
  learner = threading.Thread(target=lambda: taken.extend(queues.get() for _ in range(8)))
  learner.start()
  for actor in (2, 0, 1):  # Any order of arrival.
    assert queues.actor_turn(actor)
    queues.put(f"r0s{2 * actor + 1}", 2 * actor + 1)
    queues.put(f"r0s{2 * actor}", 2 * actor)
  for actor in (1, 2, 0):  # The learner asked for round 1 at its 7th trajectory.
    assert queues.actor_turn(actor)
    queues.put(f"r1s{2 * actor}", 2 * actor)
    queues.put(f"r1s{2 * actor + 1}", 2 * actor + 1)
  learner.join(10)
  assert taken == [f"r0s{s}" for s in range(6)] + ["r1s0", "r1s1"]
  assert not queues._may_act(0)  # Round 2 not asked for.


def test_one_at_a_time_holds_each_actor_until_those_before_it_delivered():
  queues = lockstep(num_actors=2, envs_per_actor=1, one_at_a_time=True)
  learner = threading.Thread(target=queues.get)
  learner.start()
  assert queues.actor_turn(0)
  assert not queues._may_act(1)
  queues.put("a", 0)
  assert queues.actor_turn(1)
  queues.put("b", 1)
  learner.join(10)


def test_a_second_delivery_in_a_round_is_an_error_and_dropped_ones_are_skipped():
  queues = lockstep(num_actors=2, envs_per_actor=1)
  learner = threading.Thread(target=lambda: queues.get())
  learner.start()
  queues.actor_turn(0)
  queues.put(None, 0)  # Dropped (non-finite): the round completes without it.
  with pytest.raises(RuntimeError, match="delivered twice"):
    queues.put("again", 0)
  queues.put("b", 1)
  learner.join(10)
  assert not learner.is_alive()


def test_a_stop_releases_the_learner_and_the_actors():
  stop = threading.Event()
  queues = repeatable.LockstepQueues(2, 1, stop)
  got = []
  learner = threading.Thread(target=lambda: got.append(queues.get()))
  learner.start()
  stop.set()
  learner.join(10)
  assert got == [None]
  assert not queues.actor_turn(0)
  assert not queues.put("late", 0)


def test_lockstep_batches_are_the_tf_data_batches():
  config = networks.NetworkConfig(num_actions=3, frame_shape=(20, 20, 1),
                                  torso=networks.SHALLOW, use_lstm=True,
                                  use_instruction=False)
  state = (np.zeros(5, np.float32), np.ones(5, np.float32))
  signature = assembly.trajectory_signature(config, 2, types.SimpleNamespace(
      initial_state=lambda: state))
  rng = np.random.default_rng(0)

  levels = ("toy/lit_side", "toy/unlit_side_x1000")  # A suite's: each batch's tasks too.

  def trajectory(version):
    steps = 3
    return Trajectory(
        level_name=levels[version % 3 == 1], policy_version=version,
        agent_state=tuple(rng.standard_normal(5).astype(np.float32) for _ in state),
        env_outputs=EnvOutput(
            reward=rng.standard_normal(steps).astype(np.float32),
            done=rng.random(steps) < 0.5,
            observation=Observation(
                frame=rng.integers(0, 255, (steps, 20, 20, 1)).astype(np.uint8),
                instruction=np.zeros((steps, language.MAX_INSTRUCTION_WORDS), np.int32)),
            episode_return=rng.standard_normal(steps).astype(np.float32),
            episode_step=np.arange(steps, dtype=np.int32), truncated=np.zeros(steps, bool)),
        agent_outputs=AgentOutput(action=rng.integers(0, 3, steps).astype(np.int32),
                                  policy_params=rng.standard_normal((steps, 3)).astype(
                                      np.float32),
                                  baseline=rng.standard_normal(steps).astype(np.float32)))
  trajectories = [trajectory(version) for version in range(6)]
  from_tf_data = list(input_pipeline.make_dataset(iter(trajectories + [None]).__next__,
                                                  signature, 3, levels))
  ours = list(repeatable.lockstep_batches(iter(trajectories + [None]).__next__, signature, 3,
                                          input_pipeline.task_index(levels)))
  assert len(ours) == len(from_tf_data) == 2
  assert [batch[-1].numpy().tolist() for batch in ours] == [[0, 1, 0], [0, 1, 0]]
  for mine, theirs in zip(ours, from_tf_data):
    tf.nest.assert_same_structure(mine, theirs)
    for a, b in zip(tf.nest.flatten(mine), tf.nest.flatten(theirs)):
      assert a.dtype == b.dtype and a.shape == b.shape
      np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_update_line_shows_float32_losses_and_a_parameter_digest():
  variables = [tf.Variable([1.0, 2.0]), tf.Variable([[3]])]
  line = repeatable.update_line(3, dict(total_loss=np.float32(291.39908), pg_loss=1.0,
                                        num_env_frames=240.0), variables)
  assert line.startswith("update 3: total_loss=291.39908 pg_loss=1.0 frames=240 params=")
  digest = repeatable.parameter_digest(variables)
  variables[0].assign([1.0, np.nextafter(np.float32(2), np.float32(3))])  # One bit.
  assert repeatable.parameter_digest(variables) != digest


def test_the_default_mode_is_asynchronous(tmp_path):
  config = config_lib.config_from_argv([f"--logdir={tmp_path}", *TOY_FLAGS])
  learner_input = input_pipeline.LearnerInput(config, threading.Event())
  assert isinstance(learner_input.queues, input_pipeline.LearnerQueues)
  assert learner_input.actor_turn(0) is None
