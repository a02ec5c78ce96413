"""NaN and Inf never reach the parameters: non-finite updates are skipped, non-finite
trajectories dropped, a diverged run stops with its last good checkpoint (issue 30, point 2)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.structures import Trajectory
from tests import random_batches
from tests.run.test_training import REPO_DIR
from tests.run.test_training import toy_config
from tests.run.test_training import train_toy

ATARI = networks.atari_config(num_actions=4, torso=networks.SHALLOW, frame_shape=(24, 24, 4))
HPARAMS = dict(learning_rate=0.01, total_environment_frames=10_000, max_grad_norm=40.0)


def _state_of(the_learner):
  """Every variable the learner owns (parameters, RMSProp slots, counters), as numpy."""
  return [v.numpy().copy() for v in the_learner.variables]


def _assert_same(before, after):
  assert len(before) == len(after)
  for old, new in zip(before, after):
    np.testing.assert_array_equal(old, new)


def _poisoned(batch, where):
  env_outputs, agent_outputs = batch
  if where == "reward":
    reward = env_outputs.reward.copy()
    reward[2, 1] = np.nan
    return env_outputs._replace(reward=reward), agent_outputs
  logits = agent_outputs.policy_params.copy()
  logits[1, 0, 2] = np.inf
  return env_outputs, agent_outputs._replace(policy_params=logits)


# [reward-xla] in the slow tier: the default tier keeps a poisoned reward (plain) and poisoned
# behaviour logits (plain and XLA-compiled).
@pytest.mark.parametrize("jit_compile, where", [
    pytest.param(False, "reward", id="reward-plain"),
    pytest.param(True, "reward", id="reward-xla", marks=pytest.mark.slow),
    pytest.param(False, "behaviour_logits", id="behaviour_logits-plain"),
    pytest.param(True, "behaviour_logits", id="behaviour_logits-xla")])
def test_a_non_finite_update_is_skipped_and_changes_nothing(jit_compile, where):
  the_learner = learner_lib.Learner(networks.Agent(ATARI, seed=1),
                                    config_lib.LearnerConfig(**HPARAMS),
                                    jit_compile=jit_compile)
  state = the_learner.agent.initial_state(3)
  good = random_batches.random_learner_batch(ATARI, 4, 3, seed=0)
  assert not the_learner.update(state, *good)["update_skipped"].numpy()
  before = _state_of(the_learner)
  stats = the_learner.update(state, *_poisoned(good, where))
  assert stats["update_skipped"].numpy()
  assert not np.isfinite(stats["total_loss"].numpy() * stats["grad_norm"].numpy())
  _assert_same(before, _state_of(the_learner))  # Parameters, slots, frames: as they were.
  stats = the_learner.update(state, *good)  # And the next good batch trains as usual.
  assert not stats["update_skipped"].numpy()
  assert stats["num_env_frames"].numpy() == 2 * 4 * 3 * 4


def test_impact_skips_a_non_finite_step_without_counting_it_or_adapting_its_kl():
  the_learner = impact.ImpactLearner(
      networks.Agent(ATARI, seed=1), config_lib.LearnerConfig(**HPARAMS),
      config_lib.ImpactConfig(target_update_period=1, kl_cost=0.1), jit_compile=False,
      kl_target=0.01)
  state = the_learner.agent.initial_state(3)
  env_outputs, agent_outputs = _poisoned(random_batches.random_learner_batch(ATARI, 4, 3), "reward")
  before = _state_of(the_learner)
  stats = the_learner.update(state, env_outputs, agent_outputs)
  assert stats["update_skipped"].numpy() and not stats["target_updated"].numpy()
  # num_updates, the KL coefficient and the target network included.
  _assert_same(before, _state_of(the_learner))


def _trajectory(reward_value=0.0, frame_dtype=np.uint8):
  env_outputs, agent_outputs = random_batches.random_learner_batch(ATARI, 4, 1)
  squeeze = lambda x: x[:, 0]
  env_outputs = tf.nest.map_structure(squeeze, env_outputs)
  agent_outputs = tf.nest.map_structure(squeeze, agent_outputs)
  reward = env_outputs.reward.copy()
  reward[3] = reward_value
  frame = env_outputs.observation.frame.astype(frame_dtype)
  env_outputs = env_outputs._replace(
      reward=reward, observation=env_outputs.observation._replace(frame=frame))
  return Trajectory(level_name="atari/pong", policy_version=0, agent_state=(),
                    env_outputs=env_outputs, agent_outputs=agent_outputs)


def test_non_finite_fields_names_each_field_and_ignores_integer_frames():
  assert input_pipeline.non_finite_fields(_trajectory()) == []
  assert input_pipeline.non_finite_fields(_trajectory(np.nan)) == ["env_outputs/reward (1)"]
  trajectory = _trajectory(frame_dtype=np.float32)  # A vector observation (MuJoCo).
  frame = trajectory.env_outputs.observation.frame
  frame[0, 0, 0, 0] = frame[1, 0, 0, 0] = -np.inf
  logits = trajectory.agent_outputs.policy_params
  logits[2, 1] = np.nan
  assert input_pipeline.non_finite_fields(trajectory) == [
      "env_outputs/observation/frame (2)", "agent_outputs/policy_params (1)"]


class _Config:
  laser_replay = False
  repeatable = False
  num_learners = 1
  queue_capacity = 4
  batch_size = 2


def test_a_non_finite_trajectory_is_dropped_and_logged_with_its_actor():
  import threading  # pylint: disable=g-import-not-at-top
  lines = []
  learner_input = input_pipeline.LearnerInput(_Config(), threading.Event(), lines.append)
  assert learner_input.put_trajectory(_trajectory(np.inf), actor_index=7)
  assert learner_input.queues.fill() == 0 and learner_input.dropped_trajectories == 1
  assert lines and "actor 7" in lines[0] and "env_outputs/reward" in lines[0]
  assert learner_input.put_trajectory(_trajectory(), actor_index=7)
  assert learner_input.queues.fill() == 1 / 4


def _checkpoint_is_finite(logdir):
  prefix, _ = checkpoints.latest_checkpoint(logdir)
  reader = tf.train.load_checkpoint(os.path.join(checkpoints.checkpoint_dir(logdir),
                                                 prefix))
  for name in reader.get_variable_to_shape_map():
    value = np.asarray(reader.get_tensor(name))
    if value.dtype.kind == "f":
      assert np.isfinite(value).all(), name


@pytest.mark.timeout(240)
def test_a_diverging_run_stops_with_an_error_and_its_last_good_checkpoint(tmp_path):
  # A learning rate of 1e9 diverges at once (the tester's reproduction).
  train_toy(toy_config(tmp_path, total_frames=800))  # A good checkpoint first.
  good_prefix, good_frames = checkpoints.latest_checkpoint(str(tmp_path))
  lines = []
  # The norm limit lifted: this is the non-finite updates' stop (the norm's is
  # tests/run/test_progress_watch.py's).
  config = toy_config(tmp_path, total_frames=10_000_000, learning_rate=1e9,
                      max_nonfinite_updates=3, checkpoint_secs=3600.0, max_parameter_norm=1e38)
  with pytest.raises(training.RunFailed, match=r"3 learner updates in a row.*non-finite"):
    train_toy(config, lines=lines)
  assert sum("Skipped a learner update" in line for line in lines) == 3
  _checkpoint_is_finite(str(tmp_path))
  prefix, frames = checkpoints.latest_checkpoint(str(tmp_path))
  # Either the good checkpoint is still the newest, or a finite one written before the
  # skipped updates began: never one of non-finite parameters.
  assert frames >= good_frames


# Slow tier (a whole experiment.py run): the default tier keeps
# test_a_diverging_run_stops_with_an_error_and_its_last_good_checkpoint for the stop itself, and
# test_stopping_and_faults.py's end-to-end runs for a RunFailed's `error:` line and exit 1.
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_experiment_reports_a_diverged_run_as_an_error_line_with_exit_code_1(tmp_path):
  result = subprocess.run(
      [sys.executable, "experiment.py", "--level_name=toy/lit_side", f"--logdir={tmp_path}",
       "--learning_rate=1e9", "--max_nonfinite_updates=2", "--num_actors=2",
       "--max_parameter_norm=1e38",
       "--total_environment_frames=100000000"],
      cwd=REPO_DIR, capture_output=True, text=True, timeout=220)
  assert result.returncode == 1, result.stdout + result.stderr
  assert "error: 2 learner updates in a row had a non-finite loss" in result.stderr
  assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.timeout(180)
def test_a_non_finite_trajectory_over_the_wire_is_dropped_with_its_sender(tmp_path):
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top

  from scalable_agent_tf2.run import actor_process  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import assembly  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.transport import service_client  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.transport import wire  # pylint: disable=g-import-not-at-top
  from tests.transport import test_distributed as td  # pylint: disable=g-import-not-at-top
  config = toy_config(tmp_path, total_frames=1, num_actors=2, unroll_length=td.UNROLL_LENGTH)
  lines = []
  learner_input = input_pipeline.LearnerInput(config, threading.Event(), lines.append)
  signature = assembly.trajectory_signature(td.TOY_NETWORK, config.unroll_length,
                                            td._NoPolicy())
  actors = actor_process.RemoteActors(
      config, networks.Agent(td.TOY_NETWORK, seed=3), signature,
      f"localhost:{td.free_port()}", learner_input.put_trajectory, monitor=None,
      print_fn=lines.append)
  actors.start()
  actors.publish_version(5)
  client = service_client.LearnerClient(
      actors.server.address, wire.message_layout(signature),
      assembly.wire_fingerprint(config, td.TOY_NETWORK, signature), name="actor-0",
      connect_timeout_secs=30)
  poisoned = td.toy_trajectory()
  poisoned.env_outputs.reward[4] = np.nan
  poisoned.agent_outputs.baseline[2] = np.inf
  client.send_trajectory(wire.MessageHeader(0, 1, 7, 0), poisoned)
  client.send_trajectory(wire.MessageHeader(0, 1, 7, 1), td.toy_trajectory())
  deadline = time.monotonic() + 60
  while learner_input.queues.fill() == 0 and time.monotonic() < deadline:
    time.sleep(0.1)
  assert learner_input.dropped_trajectories == 1
  assert learner_input.queues.get().env_outputs.reward[4] == 1.0  # Only the finite one.
  dropped = [line for line in lines if line.startswith("Dropped a trajectory")]
  assert len(dropped) == 1 and "actor 1" in dropped[0], lines
  assert "env_outputs/reward (1)" in dropped[0] and "agent_outputs/baseline (1)" in dropped[0]
  actors.close()
  actors.join(30)
