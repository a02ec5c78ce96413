"""The whole pipeline: actor threads, subprocess environments, dynamic batching, the learner.

The learning test trains on toy_environment's lit-side task; the command-line tests run
experiment.py on Atari Pong with tiny settings.
"""
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import toy as toy_environment
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.learning import buffers
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog
from tests import toy_families

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOY_NETWORK = toy_families.toy_network()  # What the toy family builds for toy_config's runs.


def toy_config(logdir, total_frames, **overrides):
  """Atari's presets (Table G.1 learner) on the toy task, small batches."""
  values = dict(level_name="atari/pong", logdir=str(logdir), num_actors=4, batch_size=8,
                unroll_length=10, total_environment_frames=total_frames, log_secs=2.0)
  values.update(overrides)
  return toy_families.on_toy(config_lib.resolve(config_lib.ExperimentConfig(**values)))


def train_toy(config, crash_after_steps=0, lines=None, delayed_reward=False):
  """training.train on the toy task; delayed_reward: its delayed level; crash_after_steps: its
  environment processes die after that many steps (toy_families.with_faults)."""
  if delayed_reward:
    config = dataclasses.replace(config, level_name=toy_environment.DELAYED_LEVEL_NAME)
  if crash_after_steps:
    config = toy_families.with_faults(config, crash_after_steps=crash_after_steps)
  return training.train(config, print_fn=(lines.append if lines is not None else print))


def read_log(logdir):
  return runlog.read_log(logdir)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_pipeline_learns_the_toy_task_and_logs_it(tmp_path):
  # Random play scores 10/3; the optimum is 10. All reward comes at the end of an episode
  # (unclipped: up to 10), so this needs credit assignment over up to 10 steps.
  result = train_toy(toy_config(tmp_path, total_frames=100_000, reward_clipping="none"),
                     delayed_reward=True)
  assert result.num_env_frames >= 100_000
  assert result.recent_returns[toy_environment.DELAYED_LEVEL_NAME] >= 9.0

  records = read_log(tmp_path)
  progress = [r for r in records if r["kind"] == "progress"]
  episodes = [r for r in records if r["kind"] == "episode"]
  assert len(episodes) > 1000
  assert {e["episode_length"] for e in episodes} == {toy_environment.EPISODE_LENGTH}
  for key in ("frames_per_second", "updates_per_second", "queue_fill", "policy_lag",
              "total_loss", "learning_rate", "grad_norm",
              f"episode_return/{toy_environment.DELAYED_LEVEL_NAME}"):
    assert key in progress[-1], key
  # Lag = learner updates between the parameters an unroll was acted with and the update that
  # trains on it: never negative, and bounded by the trajectories that can wait ahead of it
  # (the queue, a prefetched batch, the actors' unrolls) over the batch size. Stale acting
  # parameters (never refreshed) would give a lag near the number of updates (~300).
  config = toy_config(tmp_path, total_frames=100_000)
  waiting = config.queue_capacity + config.batch_size + config.num_actors
  assert 0 <= progress[-1]["policy_lag"] <= waiting / config.batch_size + 1, progress[-1]
  # The learning rate anneals linearly to 0 over the frame budget (Table G.1).
  assert progress[-1]["learning_rate"] < 0.1 * atari_family.ATARI["learning_rate"]
  assert tf.io.gfile.glob(os.path.join(tmp_path, "events.out.tfevents.*"))
  assert os.path.exists(result.checkpoint + ".index")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_impact_learns_the_toy_task(tmp_path):
  # The same delayed-reward task as above, with IMPACT's presets (N = 4, K = 2, target
  # period 8, clipped target-worker surrogate, V-trace GAE-lambda advantages).
  result = train_toy(toy_config(tmp_path, total_frames=50_000, reward_clipping="none",
                                algorithm="impact"), delayed_reward=True)
  assert result.recent_returns[toy_environment.DELAYED_LEVEL_NAME] >= 9.0


def test_rerun_resumes_at_the_same_frames_optimizer_state_and_learning_rate(tmp_path):
  first = train_toy(toy_config(tmp_path, total_frames=2_000))
  saved = tf.train.load_checkpoint(first.checkpoint)
  saved_names = saved.get_variable_to_shape_map()
  slot_names = [n for n in saved_names if "optimizer" in n and "VARIABLE_VALUE" in n]
  assert slot_names

  lines = []
  second = train_toy(toy_config(tmp_path, total_frames=4_000), lines=lines)
  assert any(f"at {first.num_env_frames:,} frames" in line and "Resumed" in line
             for line in lines), lines
  assert second.num_env_frames >= 4_000
  frames_per_update = 8 * 10 * 4  # batch x unroll x action repeats.
  missing = 4_000 - first.num_env_frames
  assert second.num_updates == -(-missing // frames_per_update)  # Only what was missing.

  # A restore of the first checkpoint gives back exactly what was saved.
  agent = networks.Agent(TOY_NETWORK)
  learner = learner_lib.Learner(agent, toy_config(tmp_path, 2_000).learner_config(),
                                jit_compile=False)
  tf.train.Checkpoint(agent=agent, learner=learner).restore(first.checkpoint)
  assert int(learner.num_env_frames.numpy()) == first.num_env_frames
  for name in slot_names:
    restored = [v for v in learner.optimizer.variables
                if v.shape == saved.get_tensor(name).shape]
    assert any(np.array_equal(v.numpy(), saved.get_tensor(name)) for v in restored), name


def test_corrupt_or_incompatible_checkpoint_is_a_clear_error(tmp_path):
  result = train_toy(toy_config(tmp_path, total_frames=800))
  data_files = tf.io.gfile.glob(result.checkpoint + ".data*")
  with open(data_files[0], "r+b") as f:
    f.seek(0)
    f.write(b"\xff" * 64)
  with pytest.raises(checkpoints.CheckpointError, match="corrupt"):
    train_toy(toy_config(tmp_path, total_frames=1_600))

  other = tmp_path / "other"
  train_toy(toy_config(other, total_frames=800))
  # --torso=deep: the toy family builds the deep torso (its network follows the flags).
  with pytest.raises(checkpoints.CheckpointError, match="--torso: checkpoint 'shallow'"):
    train_toy(toy_config(other, total_frames=1_600, torso="deep"))
  # Without the settings file the variables' shapes still disagree: still an error.
  os.remove(checkpoints.settings_path(other))
  with pytest.raises(checkpoints.CheckpointError, match="different network"):
    train_toy(toy_config(other, total_frames=1_600, torso="deep"))

  os.remove(os.path.join(checkpoints.checkpoint_dir(other), checkpoints.STATE_FILE))
  with pytest.raises(checkpoints.CheckpointError, match="not starting over"):
    train_toy(toy_config(other, total_frames=1_600))


def _spy_on_learner(monkeypatch):
  """Records the learner training.train builds."""
  made = []
  make_learner = assembly.make_learner

  def spy(config, agent, strategy=None):
    made.append(make_learner(config, agent, strategy))
    return made[-1]
  monkeypatch.setattr(assembly, "make_learner", spy)
  return made


def test_replay_and_the_off_policy_correction_reach_the_learner(tmp_path, monkeypatch):
  made = _spy_on_learner(monkeypatch)
  lines = []
  # Batch 8, replay fraction 0.5: 4 online trajectories per update (IMPALA section 5.2.2).
  config = toy_config(tmp_path, total_frames=1_600, replay_fraction=0.5, replay_capacity=30,
                      off_policy_correction="epsilon")
  result = train_toy(config, lines=lines)
  assert made[0].config.off_policy_correction == "epsilon"
  # Only online trajectories are new frames: 4 x 10 steps x 4 repeats per update.
  assert result.num_env_frames == 1_600 and result.num_updates == 1_600 // 160
  assert result.trajectories.trained == 4 * result.num_updates
  bytes_per_trajectory = input_pipeline.trajectory_nbytes(assembly.trajectory_signature(
      TOY_NETWORK, 10, type("P", (), {"initial_state": lambda self: ()})()))
  assert any(f"4 of each batch of 8 trajectories drawn uniformly from the last 30 (FIFO); "
             f"memory at most 30 x {bytes_per_trajectory:,} bytes" in line
             for line in lines), lines
  # Without replay the pipeline is the one it always was: no mixer in between.
  no_replay = toy_config(tmp_path, total_frames=1_600)
  source = lambda: None
  assert input_pipeline.with_replay(source, no_replay, None, print) is source
  mixed = input_pipeline.with_replay(source, config, assembly.trajectory_signature(
      TOY_NETWORK, 10, type("P", (), {"initial_state": lambda self: ()})()), lambda line: None)
  assert isinstance(mixed, buffers.ReplayMixer)


@pytest.mark.parametrize("correction", ["vtrace", "one_step_is", "epsilon", "none"])
def test_off_policy_correction_flag_reaches_the_learner(correction):
  config = config_lib.config_from_argv([f"--off_policy_correction={correction}"])
  agent = networks.Agent(TOY_NETWORK)
  assert assembly.make_learner(config, agent).config.off_policy_correction == correction


def test_impact_uses_each_batch_k_times_and_checkpoints_its_target_network(tmp_path,
                                                                           monkeypatch):
  made = _spy_on_learner(monkeypatch)
  lines = []
  # Batches of 8 x 10 steps x 4 repeats = 320 frames; N = 4, K = 2 (IMPACT Table 1): steps 1-4
  # are the first uses of batches 1-4, steps 5-8 their second, step 9 the first of batch 5.
  first = train_toy(toy_config(tmp_path, total_frames=1_600, algorithm="impact"), lines=lines)
  assert first.num_env_frames == 1_600 and first.num_updates == 9
  assert first.trajectories.trained == 5 * 8  # Batches counted once.
  learner = made[0]
  assert isinstance(learner, impact.ImpactLearner)
  assert learner.impact_config.target_update_period == 8  # N x K (section 4.1.1).
  assert any("circular buffer of N = 4 batch(es), each used K = 2 times" in line
             for line in lines)
  saved = impact.ImpactLearner(networks.Agent(TOY_NETWORK), learner.config,
                                    learner.impact_config, jit_compile=False)
  tf.train.Checkpoint(agent=saved.agent, learner=saved).restore(
      first.checkpoint).assert_existing_objects_matched()
  assert int(saved.num_updates.numpy()) == 9
  equal = lambda xs, ys: all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(xs, ys))
  # Refreshed at step 8, then the learner moved on at step 9.
  assert not equal(saved._target_variables, saved.agent.trainable_variables)

  # Resumed: 2 more batches (the circular buffer starts empty), steps 10 and 11, no target
  # refresh (the next is at step 16): the target network is the checkpoint's.
  second = train_toy(toy_config(tmp_path, total_frames=2_000, algorithm="impact"))
  assert (second.num_env_frames, second.num_updates) == (2_240, 2)
  resumed = made[1]
  assert int(resumed.num_updates.numpy()) == 11
  assert equal(resumed._target_variables, saved._target_variables)
  assert not equal(resumed.agent.trainable_variables, saved.agent.trainable_variables)

  with pytest.raises(checkpoints.CheckpointError, match="--algorithm: checkpoint 'impact'"):
    train_toy(toy_config(tmp_path, total_frames=4_000))


def test_crashed_environment_process_is_restarted_and_training_goes_on(tmp_path):
  lines = []
  # A crash every 500 steps (0.2%): 2 or 3 in the run, well under the share of steps that
  # makes a level one that keeps failing (more than 1%, actor.RestartPolicy).
  result = train_toy(toy_config(tmp_path, total_frames=6_000, num_actors=2),
                     crash_after_steps=500, lines=lines)
  assert result.num_env_frames >= 6_000
  assert any("failed and was restarted" in line for line in lines)
  progress = [r for r in read_log(tmp_path) if r["kind"] == "progress"]
  assert progress[-1]["environment_restarts"] >= 1


def test_an_actor_that_fails_stops_training_with_its_error_and_a_checkpoint(tmp_path):
  # One validation call, then actor 0's environment and actor 1's; the restart after the
  # first crash cannot build its environment.
  config = toy_families.with_faults(toy_config(tmp_path, total_frames=10_000_000, num_actors=2),
                                    crash_after_steps=200, refuse_after_calls=3)
  with pytest.raises(actor.ActorFailed, match="refuses to start") as raised:
    training.train(config, print_fn=lambda line: None)
  checkpoint = str(raised.value).split("the checkpoint ")[1].split(" holds")[0]
  assert os.path.exists(checkpoint + ".index")


def test_evaluation_writes_tables_and_repeats_with_a_seed(tmp_path):
  config = toy_config(tmp_path, total_frames=800, num_actors=3, test_num_episodes=5)
  train_toy(config)
  runs = []
  for _ in range(2):
    lines = []
    runs.append(evaluation.evaluate(config, print_fn=lines.append))
  rows = runs[0]["rows"]
  assert [r["episodes"] for r in rows] == [5]
  assert runs[0]["rows"] == runs[1]["rows"]
  assert "mean_return" in open(runs[0]["paths"][1]).readline()
  assert json.load(open(runs[0]["paths"][0]))["levels"][0]["episodes"] == 5
  assert any(toy_environment.LEVEL_NAME in line for line in lines)


def test_evaluation_without_checkpoint_says_to_train_first(tmp_path):
  config = toy_config(tmp_path, total_frames=800, test_num_episodes=1)
  with pytest.raises(checkpoints.CheckpointError, match="train first"):
    evaluation.evaluate(config)


def _experiment(*flags, **kwargs):
  return subprocess.run([sys.executable, os.path.join(REPO_DIR, "experiment.py"), *flags],
                        capture_output=True, text=True, cwd=REPO_DIR, timeout=240, **kwargs)


@pytest.mark.parametrize("flags, message", [
    (["--level_name=atari/pongg"], "Unknown level name 'atari/pongg'"),
    (["--num_actors=-3"], "--num_actors must be a positive integer"),
    (["--batch_size=0"], "--batch_size must be a positive integer"),
    pytest.param(["--level_name=explore_goal_locations_small"], "BUILD.md",
                 marks=pytest.mark.skipif(importlib.util.find_spec("deepmind_lab") is not None,
                                          reason="deepmind_lab is installed here; "
                                          "test_level_checks covers a missing one")),
    (["--replay_fraction=1.0"], "online data must keep flowing"),
    (["--laser_replay", "--replay_fraction=1.0"], "online data must keep flowing"),
    (["--laser_replay"], "set --replay_fraction in (0, 1)"),
    (["--entropy_on_online_only"], "--entropy_on_online_only needs replayed data"),
    (["--ppo_clip=0.2"], "--ppo_clip is an IMPACT setting: add --algorithm=impact"),
    (["--num_learners=0"], "--num_learners must be a positive integer"),
    (["--num_learners=3", "--num_actors=2"], "must be at least --num_learners"),
    (["--intra_op_threads=-1"], "--intra_op_threads must be >= 0"),
])
def test_bad_flags_fail_before_any_work(tmp_path, flags, message):
  run = _experiment("--mode=train", f"--logdir={tmp_path}", *flags)
  assert run.returncode == 2, run.stderr[-2000:]
  assert message in run.stderr
  assert not os.path.exists(checkpoints.checkpoint_dir(tmp_path))


def _child_pids(pid):
  with open(f"/proc/{pid}/task/{pid}/children") as f:
    children = [int(c) for c in f.read().split()]
  # Threads other than the main one start processes too (actor threads restart environments).
  for task in os.listdir(f"/proc/{pid}/task"):
    with open(f"/proc/{pid}/task/{task}/children") as f:
      children.extend(int(c) for c in f.read().split())
  return sorted(set(children))


# Slow tier (two whole experiment.py runs): the default tier keeps
# tests/acting/test_watchdog.py's SIGTERM stop with its checkpoint (a hung environment, which is
# harder), test_stopping_and_faults.py's signals at any moment, and
# test_rerun_resumes_at_the_same_frames_optimizer_state_and_learning_rate for the resume.
@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_the_same_command_resumes(tmp_path):
  flags = ["--mode=train", "--level_name=atari/pong", f"--logdir={tmp_path}",
           "--num_actors=2", "--envs_per_actor=1", "--batch_size=2", "--unroll_length=5",
           "--log_secs=1",
           "--total_environment_frames=100000000"]
  process = subprocess.Popen([sys.executable, os.path.join(REPO_DIR, "experiment.py"), *flags],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=REPO_DIR)
  output = []
  deadline = time.monotonic() + 180
  for line in process.stdout:
    output.append(line)
    if line.startswith("frames ") and not line.startswith("frames 0 "):
      children = _child_pids(process.pid)
      # Multiprocessing's tracker and build_agent's environment process at least (the games
      # themselves run in this process: Atari vector groups).
      assert children
      for pid in children:  # Spawned children must not load TensorFlow (experiment.py).
        with open(f"/proc/{pid}/maps") as maps:
          assert "tensorflow" not in maps.read(), pid
      process.send_signal(signal.SIGTERM)
      break
    assert time.monotonic() < deadline, "".join(output[-20:])
  rest, _ = process.communicate(timeout=120)
  output.append(rest)
  text = "".join(output)
  assert process.returncode == 0, text[-3000:]
  assert "Stopped: interrupted (SIGTERM). Checkpoint" in text
  saved_frames = int(text.split("Stopped: interrupted")[1].split(" at ")[1].split(" frames")[0]
                     .replace(",", ""))
  assert saved_frames > 0

  resumed = _experiment(*flags[:-1], f"--total_environment_frames={saved_frames}")
  assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
  assert f"at {saved_frames:,} frames" in resumed.stdout
  assert "Nothing to do" in resumed.stdout


def test_presets_follow_the_paper_and_flags_win():
  pong = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong"))
  # Table G.1.
  assert (pong.unroll_length, pong.batch_size, pong.entropy_cost, pong.learning_rate,
          pong.epsilon, pong.max_grad_norm, pong.reward_clipping, pong.torso,
          pong.total_environment_frames) == (20, 32, 0.01, 0.0006, 0.01, 40.0, "abs_one",
                                             "shallow", 200_000_000)
  assert pong.family.environment_options(pong)["full_action_space"] is False
  atari57 = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari57"))
  assert atari57.torso == "deep" and atari57.family.environment_options(atari57)["full_action_space"]
  dmlab30 = config_lib.resolve(config_lib.ExperimentConfig(level_name="dmlab30"))
  # Table D.3 and the released code.
  assert (dmlab30.unroll_length, dmlab30.width, dmlab30.height, dmlab30.num_actors,
          dmlab30.reward_clipping, dmlab30.max_grad_norm) == (
              100, 96, 72, 150, "optimistic_asymmetric", 0.0)
  assert dmlab30.learner_config().max_grad_norm is None
  single = config_lib.resolve(config_lib.ExperimentConfig(level_name="rooms_watermaze"))
  assert single.reward_clipping == "abs_one" and single.num_actors == 48
  overridden = config_lib.resolve(config_lib.ExperimentConfig(
      level_name="atari/pong", learning_rate=0.01, num_actors=3))
  assert (overridden.learning_rate, overridden.num_actors) == (0.01, 3)
  # IMPACT's presets (IMPACT paper, Table 1; the optimizer's are the level's); IMPALA's stay
  # Table G.1's.
  impact = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong",
                                                          algorithm="impact"))
  assert (impact.learning_rate, impact.max_grad_norm, impact.baseline_cost,
          impact.entropy_cost, impact.ppo_clip, impact.target_worker_clipping,
          impact.gae_lambda, impact.kl_cost, impact.circular_buffer_size,
          impact.circular_buffer_max_uses, impact.target_update_period) == (
              0.0006, 40.0, 1.0, 0.01, 0.3, 2.0, 0.995, 0.0, 4, 2, 8)
  assert (impact.unroll_length, impact.batch_size) == (pong.unroll_length, pong.batch_size)
  assert (pong.algorithm, pong.baseline_cost, pong.replay_fraction, pong.replay_capacity,
          pong.target_update_period) == ("impala", 0.5, 0.0, 10_000, None)
  assert config_lib.resolve(config_lib.ExperimentConfig(
      algorithm="impact", circular_buffer_size=1)).target_update_period == 2
  with pytest.raises(ValueError, match="IMPACT corrects"):
    config_lib.resolve(config_lib.ExperimentConfig(algorithm="impact",
                                                   off_policy_correction="none"))
  with pytest.raises(ValueError, match="--algorithm must be one of"):
    config_lib.resolve(config_lib.ExperimentConfig(algorithm="ppo"))
  with pytest.raises(ValueError, match="--replay_capacity"):
    config_lib.resolve(config_lib.ExperimentConfig(replay_fraction=0.5, replay_capacity=0))
  for refused in (dict(replay_fraction=0.5), dict(algorithm="impact")):
    with pytest.raises(ValueError, match="--num_learners=1"):
      config_lib.resolve(config_lib.ExperimentConfig(num_learners=2, **refused))
  with pytest.raises(ValueError, match="--mode"):
    config_lib.resolve(config_lib.ExperimentConfig(mode="play"))
  with pytest.raises(ValueError, match="square"):
    config_lib.resolve(config_lib.ExperimentConfig(width=84, height=80))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_training_with_each_actor_calling_the_network_itself(tmp_path):
  # Table 1's comparison point (--nobatched_inference) trains like the default.
  config = toy_config(tmp_path, total_frames=1600, batched_inference=False)
  result = train_toy(config, lines=[])
  assert result.num_env_frames >= 1600
  assert result.trajectories.trained == result.num_updates * config.batch_size


def test_a_thread_count_after_tensorflow_started_is_kept_with_a_note(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.constant(1.0) + 1.0  # TensorFlow is running in this process now.
  lines = []
  current = tf.config.threading.get_intra_op_parallelism_threads()
  assembly.configure_threads(toy_config(tmp_path, total_frames=1, intra_op_threads=0),
                             lines.append)  # 0: nothing to do.
  assembly.configure_threads(toy_config(tmp_path, total_frames=1, intra_op_threads=current),
                             lines.append)  # Already so.
  assert not lines
  assembly.configure_threads(toy_config(tmp_path, total_frames=1,
                                        intra_op_threads=current + 3), lines.append)
  assert tf.config.threading.get_intra_op_parallelism_threads() == current
  assert len(lines) == 1 and f"--intra_op_threads={current + 3} applies only" in lines[0]


def test_trajectory_accounts_tell_laser_online_fills_from_untrained():
  accounts = training.TrajectoryAccounts.count(produced=100, trained=80, online_fill=6)
  assert accounts == training.TrajectoryAccounts(produced=100, trained=80, untrained=14,
                                                 online_fill=6)
  lines = accounts.lines()
  assert "100 delivered, 80 trained on, 14 not trained on" in lines[0]
  assert lines[1] == ("  6 filled replayed places while the replay held no complete episode "
                      "(not counted as frames).")
  assert training.TrajectoryAccounts.count(produced=100, trained=100) == (
      training.TrajectoryAccounts(produced=100, trained=100, untrained=0))


def test_trajectory_accounts_count_dropped_trajectories_apart_from_queued_ones():
  # Issue 41: the stop summary counted trajectories dropped for non-finite numbers as "queued
  # or prefetched at the stop".
  accounts = training.TrajectoryAccounts.count(produced=28_356, trained=8, dropped=28_298)
  assert accounts.untrained == 50 and accounts.dropped == 28_298
  assert accounts.lines()[0] == (
      "Trajectories: 28356 delivered, 8 trained on, 28298 dropped (non-finite numbers), 50 "
      "not trained on (queued or prefetched at the stop; not counted as frames).")
