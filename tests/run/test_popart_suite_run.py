"""Per-task PopArt on a suite in a run (Hessel et al. 2019): each trajectory's task in the batch,
the checkpoint's statistics and level list, the presets, the banner and the console."""
import dataclasses
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import experiment_flags
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments.families import toy as toy_family
from scalable_agent_tf2.learning import buffers
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.structures import Trajectory
from tests import random_batches
from tests import toy_families
from tests.run import test_before_tensorflow

LEVELS = toy_family.REWARD_SCALE_LEVELS  # toy/lit_side, toy/lit_side_x1000.
SUITE = ",".join(toy_family.REWARD_SCALE_LEVELS)  # One agent on both.
UNROLL = 3


def _config(logdir, **flags):
  values = dict(level_name=SUITE, popart=True, logdir=str(logdir), num_actors=2,
                batch_size=4, unroll_length=UNROLL, total_environment_frames=1_000)
  return config_lib.resolve(config_lib.ExperimentConfig(**{**values, **flags}))


def _trajectories(levels, seed=0):
  """One toy trajectory [T+1] per level name given, in that order."""
  env_outputs, agent_outputs = random_batches.random_learner_batch(
      toy_families.toy_network(), UNROLL, len(levels), seed)
  env_outputs = env_outputs._replace(observation=env_outputs.observation._replace(
      instruction=language.empty_instructions([UNROLL + 1, len(levels)])))  # The actors'.
  row = lambda structure, b: tf.nest.map_structure(lambda t: t[:, b], structure)
  return [Trajectory(level_name=level, policy_version=b, agent_state=(),
                     env_outputs=row(env_outputs, b), agent_outputs=row(agent_outputs, b))
          for b, level in enumerate(levels)]


def _signature():
  return assembly.trajectory_signature(toy_families.toy_network(), UNROLL,
                                       types.SimpleNamespace(initial_state=lambda: ()))


def test_each_trajectorys_task_is_its_levels_index_in_the_batch(tmp_path):
  config = _config(tmp_path)
  assert config.levels == LEVELS
  order = [LEVELS[1], LEVELS[0], LEVELS[1], LEVELS[1], LEVELS[0], LEVELS[0], LEVELS[1],
           LEVELS[0]]
  trajectories = iter(_trajectories(order) + [None])
  dataset = input_pipeline.make_dataset(trajectories.__next__, _signature(), 4, config.levels)
  steps = list(input_pipeline.learner_steps(dataset, None, config))
  assert [batch["tasks"].numpy().tolist() for _, batch, _ in steps] == [[1, 0, 1, 1],
                                                                        [0, 0, 1, 0]]
  assert steps[0][1]["tasks"].dtype == tf.int32
  assert steps[0][1]["env_outputs"].reward.shape == (UNROLL + 1, 4)
  with pytest.raises(ValueError, match="'toy/unlit_side', which is not one of this run's levels"):
    input_pipeline.task_index(config.levels)("toy/unlit_side")  # Another suite's.


@pytest.mark.parametrize("laser_replay", [False, True])
def test_replayed_trajectories_keep_their_tasks(tmp_path, laser_replay):
  """IMPALA's replay (buffers.ReplayMixer) and LASER's (laser.EpisodeMixer) hold trajectories
  whole: a replayed one's task is its level's. Each level's trajectories here pay rewards of
  their own sign, so the batch shows which level each trajectory is of."""
  order = [LEVELS[i % 3 == 0] for i in range(24)]
  trajectories = []
  for trajectory in _trajectories(order, seed=1):
    sign = 1.0 if trajectory.level_name == LEVELS[1] else -1.0
    env_outputs = trajectory.env_outputs._replace(
        reward=sign * (1.0 + np.abs(trajectory.env_outputs.reward)),
        done=np.arange(UNROLL + 1) == 1)  # Each unroll a whole episode (LASER stores them).
    trajectories.append(trajectory._replace(env_outputs=env_outputs))
  online = iter(trajectories)
  if laser_replay:
    source = laser.EpisodeMixer(lambda: next(((t, 0) for t in online), None),
                                laser.EpisodeReplay(50), 4, 2, "agent", advance_state=None)
  else:
    source = buffers.ReplayMixer(lambda: next(online, None), buffers.ReplayBuffer(50), 4, 2)
  dataset = input_pipeline.make_dataset(source, _signature(), 4, LEVELS)
  batches = list(dataset)
  assert len(batches) >= 4
  for batch in batches:
    rewards, tasks = batch[2].reward.numpy(), batch[4].numpy()
    np.testing.assert_array_equal(tasks, (rewards[1] > 0).astype(np.int32))
  assert {int(task) for batch in batches for task in batch[4][2:]} == {0, 1}  # Replayed.


def test_impacts_circular_buffer_keeps_each_batchs_tasks(tmp_path):
  config = _config(tmp_path, algorithm="impact", circular_buffer_size=2,
                   circular_buffer_max_uses=2, batch_size=2)
  trajectories = iter(_trajectories([LEVELS[1], LEVELS[0], LEVELS[0], LEVELS[0]]) + [None])
  dataset = input_pipeline.make_dataset(trajectories.__next__, _signature(), 2, config.levels)
  learner = types.SimpleNamespace(target_policy_params=lambda *batch: None)
  got = [(batch["tasks"].numpy().tolist(), new) for _, batch, new in
         impact.steps(dataset, learner, config)]
  assert got == [([1, 0], 2), ([0, 0], 2), ([1, 0], 0), ([0, 0], 0)]


def test_the_network_has_one_value_output_per_level_only_with_popart_on_a_suite(tmp_path):
  for config, outputs in ((_config(tmp_path), 2), (_config(tmp_path, popart=False), 1),
                          (_config(tmp_path, level_name="toy/lit_side"), 1)):
    assert assembly.num_tasks(config) == outputs
    assert checkpoints.popart_tasks(config) == (list(LEVELS) if outputs > 1 else None)


def _checkpointed_run(config, update_tasks):
  """(agent, learner, checkpointer) of `config` after one update on a batch of update_tasks'
  levels, checkpointed."""
  agent, env = assembly.build_agent(config, assembly.checked_environment_constructor(config))
  env.close()
  learner = assembly.make_learner(config, agent)
  checkpointer = assembly.make_checkpointer(config, agent, learner)
  assert checkpointer.restore() is None
  env_outputs, agent_outputs = random_batches.random_learner_batch(
      agent.config, UNROLL, len(update_tasks), seed=3)
  env_outputs = env_outputs._replace(reward=env_outputs.reward * 500.0)
  learner.update((), env_outputs, agent_outputs, tasks=np.array(update_tasks, np.int32))
  checkpointer.save(int(learner.num_env_frames.numpy()))
  return agent, learner, checkpointer


def test_a_checkpoint_keeps_each_tasks_statistics_and_refuses_another_level_list(tmp_path):
  config = _config(tmp_path)
  agent, learner, _ = _checkpointed_run(config, [1, 1, 1, 1])
  assert agent.baseline.w.shape[1] == 2
  stored = json.loads((tmp_path / "checkpoints" / "settings.json").read_text())
  assert stored[checkpoints.TASKS_SETTING] == list(LEVELS)
  np.testing.assert_array_equal(learner.popart.count.numpy(), [0.0, 1.0])
  _, restored, path = assembly.restore_agent(config, assembly.checked_environment_constructor(
      config))
  assert path.endswith("ckpt-12")
  for name in ("mu", "nu", "mu_hat", "nu_hat", "count"):
    np.testing.assert_array_equal(getattr(restored.popart, name).numpy(),
                                  getattr(learner.popart, name).numpy(), err_msg=name)
  # Test mode plays each level of the suite (no reference scores: no suite summary).
  tested = evaluation.evaluate(dataclasses.replace(config, mode=settings.TEST,
                                                   test_num_episodes=2, num_actors=2),
                               print_fn=lambda line: None)
  assert sorted(row["level"] for row in tested["rows"]) == sorted(LEVELS)
  assert tested["summary"].get("mean_capped") is None
  # The same suite less a level: the tasks' indices would mean other levels.
  fewer = _config(tmp_path, excluded_levels=LEVELS[0])
  with pytest.raises(checkpoints.UnusableCheckpoint, match=r"per-task PopArt's levels: "
                     r"checkpoint \['toy/lit_side', 'toy/lit_side_x1000'\], now "
                     r"\['toy/lit_side_x1000'\]"):
    assembly.restore_agent(fewer, assembly.checked_environment_constructor(fewer))


def test_the_command_line_refuses_another_level_list_before_tensorflow(tmp_path):
  checkpoints_dir = tmp_path / "checkpoints"
  checkpoints_dir.mkdir()
  (checkpoints_dir / "settings.json").write_text(json.dumps(dict(
      level_name=SUITE, torso="shallow", width=20, height=20, algorithm="impala",
      popart=True, **{checkpoints.TASKS_SETTING: ["toy/lit_side_x1000", "toy/lit_side"]})))
  result = test_before_tensorflow.run_experiment(
      "--mode=train", f"--level_name={SUITE}", "--popart=true",
      f"--logdir={tmp_path}")
  test_before_tensorflow.assert_answered_before_tensorflow(
      result, "(per-task PopArt's levels: checkpoint ['toy/lit_side_x1000', 'toy/lit_side'], "
      "now ['toy/lit_side', 'toy/lit_side_x1000']).")


def test_with_popart_an_atari_suite_trains_unclipped_and_says_why():
  resolve = lambda *flags: config_lib.explain(config_lib.config_from_argv(list(flags)))
  config, _, cited = resolve("--level_name=atari57", "--popart=true")
  assert config.reward_clipping == settings.NO_CLIPPING and config.popart
  assert cited["reward_clipping"].startswith("Hessel et al. 2019, Table 1")
  assert cited["reward_clipping"].endswith(": none")
  # Off by default on suites, and then the paper's clipping (Table G.1), as before.
  plain = config_lib.config_from_argv(["--level_name=atari57"])
  assert not plain.popart and plain.reward_clipping == settings.ABS_ONE
  assert config_lib.config_from_argv(["--level_name=atari/pong", "--popart=true"]
                                     ).reward_clipping == settings.ABS_ONE  # One game: G.1.
  dmlab = config_lib.config_from_argv(["--level_name=dmlab30", "--popart=true"])
  assert dmlab.reward_clipping == settings.OPTIMISTIC_ASYMMETRIC  # Its preset, kept.
  given = config_lib.config_from_argv(["--level_name=atari57", "--popart=true",
                                       "--reward_clipping=abs_one"])
  assert given.reward_clipping == settings.ABS_ONE  # A value given wins.
  lines = experiment_flags.show_settings_lines(config, {"level_name", "popart"},
                                               *resolve("--level_name=atari57",
                                                        "--popart=true")[1:])
  assert "per-task PopArt on over 57 tasks" in lines[0]
  row = next(line for line in lines if line.strip().startswith("--reward_clipping="))
  assert "--reward_clipping=none" in row and "Hessel et al. 2019, Table 1" in row
  # A suite that --excluded_levels leaves one level is one task: no per-task PopArt to name.
  one = resolve(f"--level_name={SUITE}", "--popart=true", f"--excluded_levels={LEVELS[1]}")
  line = experiment_flags.show_settings_lines(one[0], {"level_name"}, *one[1:])[0]
  assert line.startswith(f"train: {SUITE} (1 level), "), line


def test_the_banner_and_the_console_say_per_task_popart_and_each_tasks_sigma(tmp_path):
  config = _config(tmp_path)
  banner = "\n".join(monitoring.start_banner(config, toy_families.toy_network(), "/cpu:0",
                                             False, None, 0))
  assert "per-task PopArt on over 2 tasks" in banner
  single = "\n".join(monitoring.start_banner(_config(tmp_path, level_name="toy/lit_side"),
                                             toy_families.toy_network(), "/cpu:0", False,
                                             None, 0))
  assert "values learned in PopArt's normalised scale" in single and "per-task" not in single
  lines = []
  monitor = monitoring.Monitor(str(tmp_path), sorted(LEVELS), 1_000, print_fn=lines.append,
                               clock=iter(range(100)).__next__,
                               tasks=checkpoints.popart_tasks(config))
  monitor.start(0)
  monitor.record_update(dict(total_loss=np.float32(2.0), num_env_frames=np.int64(12),
                             popart_mu=np.array([0.5, 900.0], np.float32),
                             popart_sigma=np.array([1.25, 1500.0], np.float32)), [0])
  record = monitor.write(12, 0.0)
  monitor.close()
  assert record["popart_sigma/toy/lit_side"] == 1.25
  assert record["popart_sigma/toy/lit_side_x1000"] == 1500.0
  assert record["popart_mu/toy/lit_side_x1000"] == 900.0
  assert "sigma 1.25 (toy/lit_side) .. 1.5e+03 (toy/lit_side_x1000)" in lines[-1]
  logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
  assert logged[-1]["popart_sigma/toy/lit_side"] == 1.25


def test_the_saved_policy_reads_each_rows_task(tmp_path):
  from scalable_agent_tf2.run import saved_policy  # pylint: disable=import-outside-toplevel
  network = dataclasses.replace(toy_families.toy_network(), num_value_outputs=2)
  assert "task" in saved_policy.input_specs(network)
  assert "task" not in saved_policy.input_specs(toy_families.toy_network())
  from scalable_agent_tf2.agent import networks  # pylint: disable=import-outside-toplevel
  agent = networks.Agent(network, seed=0)
  step = saved_policy._step_function(agent)  # pylint: disable=protected-access
  frames = np.random.default_rng(0).integers(0, 255, (3, 20, 20, 1)).astype(np.uint8)
  inputs = dict(observation=frames, reward=np.zeros(3, np.float32), seed=np.array([1, 2]),
                greedy=tf.constant(True), prev_action=np.zeros(3, np.int32),
                first=np.ones(3, bool))
  every = [step(dict(inputs, task=np.full(3, task, np.int32)))["baseline"].numpy()
           for task in (0, 1)]
  mixed = step(dict(inputs, task=np.array([1, 0, 1], np.int32)))["baseline"].numpy()
  np.testing.assert_array_equal(mixed, [every[1][0], every[0][1], every[1][2]])
  assert not np.allclose(every[0], every[1])
