"""settings.py is experiment.py's command line; the families' presets follow the paper's tables."""
import dataclasses
import math
import os
import subprocess
import sys

import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*argv):
  return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                        timeout=120, check=False)


def test_every_flag_of_experiment_py_is_a_setting():
  from scalable_agent_tf2.configuration import experiment_flags as experiment
  table = {f.name: f for f in settings.all_settings()}
  flags = experiment.FLAGS._flags()  # pylint: disable=protected-access
  defined = {name for name, flag in flags.items() if flag.name == name
             and experiment.FLAGS.find_module_defining_flag(name) in settings.TOPICS.values()}
  assert defined == set(table)
  for name, field in table.items():
    assert experiment.FLAGS[name].default == field.default, name
    assert field.metadata["doc"] in experiment.FLAGS[name].help, name
    assert field.metadata["topic"] in settings.TOPICS, name
  # Nothing but the settings' flags is defined by the project (absl's own flags aside).
  ours = {name for name in flags
          if experiment.FLAGS.find_module_defining_flag(name) in ("__main__", experiment.__name__)}
  assert not ours


def test_derived_configs_take_their_fields_from_the_settings():
  learner_fields = {f.name for f in dataclasses.fields(config_lib.LearnerConfig)}
  marked = {f.name for f in settings.fields_part_of(settings.FOR_LEARNER)}
  assert learner_fields == marked | {name for name, _ in settings.VTRACE_CONSTANTS}
  assert {f.name for f in dataclasses.fields(config_lib.ImpactConfig)} == {
      f.name for f in settings.fields_part_of(settings.FOR_IMPACT)}
  # ExperimentConfig adds behaviour, no field.
  assert dataclasses.fields(config_lib.ExperimentConfig) == dataclasses.fields(
      settings.ExperimentSettings)


@pytest.mark.parametrize("argv, message", [
    (["--num_actors=0"], "--num_actors must be a positive integer, got 0."),
    (["--level_name=atari/pongg"], "Unknown level name 'atari/pongg'"),
    (["--torso=big"], "--torso"),
    (["--no_such_flag=1"], "no_such_flag"),
    (["--laser_replay"], "set --replay_fraction in (0, 1)"),
    (["--task=-1"], "--task must be >= 0"),
])
def test_a_bad_flag_is_an_error_line_and_exit_2_before_tensorflow_loads(argv, message):
  # experiment.py's parsing, run without main(): it must not have imported TensorFlow.
  probe = ("import sys\n"
           "from scalable_agent_tf2.configuration import experiment_flags\n"
           "try:\n"
           "  experiment_flags.parse_command_line(['experiment.py', *sys.argv[1:]])\n"
           "finally:\n"
           "  print('tensorflow' in sys.modules)\n")
  run = _run("-c", probe, *argv)
  assert run.returncode == 2, run.stderr
  assert run.stdout.strip() == "False"
  assert run.stderr.startswith("error: ") and message in run.stderr, run.stderr
  assert "Traceback" not in run.stderr


def test_experiment_py_rejects_a_bad_value_with_exit_code_2():
  run = _run("experiment.py", "--num_actors=0")
  assert (run.returncode, run.stderr) == (
      2, "error: --num_actors must be a positive integer, got 0.\n")


def test_help_lists_the_flags_by_topic_and_exits_0():
  run = _run("experiment.py", "--help")
  assert run.returncode == 0, run.stderr
  titles = [run.stdout.index(f"\n{title}:\n") for title in settings.TOPICS.values()]
  assert titles == sorted(titles)  # Run, environment, network, learner, replay, IMPACT, cluster.
  for field in settings.all_settings():
    position = run.stdout.index(f"  --{field.name}: ")
    topic = list(settings.TOPICS).index(field.metadata["topic"])
    assert titles[topic] < position, field.name
    assert topic + 1 == len(titles) or position < titles[topic + 1], field.name
  assert "[Source: LASER section 4.3.]" in run.stdout  # --trust_region_threshold's source.
  # A preset's values are its family's, cited there (--show_settings prints them), not here.
  assert "--entropy_cost: float (default: the level's preset)" in run.stdout
  assert "--show_settings prints with its source" in run.stdout


def test_config_from_argv_leaves_the_global_flags_alone():
  config = config_lib.config_from_argv(["--level_name=dmlab30", "--num_actors=3"])
  assert (config.num_actors, config.unroll_length) == (3, 100)
  assert config == config_lib.resolve(config_lib.ExperimentConfig(level_name="dmlab30",
                                                                  num_actors=3))
  with pytest.raises(ValueError, match="no_such_flag"):
    config_lib.config_from_argv(["--no_such_flag=1"])
  with pytest.raises(ValueError, match="--batch_size must be a positive integer"):
    config_lib.config_from_argv(["--batch_size=0"])


def _resolved(level_name, **values):
  return config_lib.resolve(config_lib.ExperimentConfig(level_name=level_name, **values))


def test_atari_presets_are_table_g1():
  for level in ("atari/pong", "atari/breakout"):
    config = _resolved(level)
    # Table G.1: batch 32, unroll 20, lr 0.0006, entropy 0.01, RMSProp decay 0.99, epsilon
    # 0.01, momentum 0, gradient norm clipped at 40, discount 0.99, baseline cost 0.5, rewards
    # clipped to [-1, 1], action repeat 4, 84x84 frames, 200M frames; the experts' network is
    # the shallow one (Appendix G).
    assert (config.batch_size, config.unroll_length, config.learning_rate,
            config.entropy_cost, config.decay, config.epsilon, config.momentum,
            config.max_grad_norm, config.discounting, config.baseline_cost,
            config.reward_clipping, config.num_action_repeats, config.width, config.height,
            config.total_environment_frames, config.torso) == (
                32, 20, 0.0006, 0.01, 0.99, 0.01, 0.0, 40.0, 0.99, 0.5, "abs_one", 4, 84, 84,
                200_000_000, "shallow")
  atari57 = _resolved("atari57")
  assert (atari57.torso, atari57.total_environment_frames) == ("deep", 57 * 200_000_000)


def test_dmlab_presets_are_table_d3_and_the_released_code():
  dmlab30 = _resolved("dmlab30")
  assert (dmlab30.batch_size, dmlab30.unroll_length, dmlab30.width, dmlab30.height,
          dmlab30.num_action_repeats, dmlab30.discounting, dmlab30.baseline_cost,
          dmlab30.decay, dmlab30.momentum, dmlab30.epsilon, dmlab30.max_grad_norm,
          dmlab30.reward_clipping, dmlab30.total_environment_frames, dmlab30.torso,
          dmlab30.num_actors, dmlab30.replay_capacity) == (
              32, 100, 96, 72, 4, 0.99, 0.5, 0.99, 0.0, 0.1, 0.0, "optimistic_asymmetric",
              10_000_000_000, "deep", 150, 10_000)
  assert (dmlab30.entropy_cost, dmlab30.learning_rate) == (0.0033391318945337044,
                                                           0.00031866995608948655)
  single = _resolved("seekavoid_arena_01")
  assert (single.reward_clipping, single.total_environment_frames, single.num_actors) == (
      "abs_one", 1_000_000_000, 48)
  # LearnerConfig's defaults are the DMLab-30 preset (max_grad_norm None: no clipping).
  assert config_lib.LearnerConfig() == dmlab30.learner_config()


def test_impact_presets_are_its_table_1():
  impact = _resolved("atari/pong", algorithm="impact")
  assert (impact.baseline_cost, impact.circular_buffer_size, impact.circular_buffer_max_uses,
          impact.ppo_clip, impact.target_worker_clipping, impact.gae_lambda, impact.kl_cost,
          impact.target_update_period) == (1.0, 4, 2, 0.3, 2.0, 0.995, 0.0, 8)
  assert impact.impact_config() == config_lib.ImpactConfig()


def test_every_setting_checks_its_value_by_name():
  with pytest.raises(ValueError, match="--decay must be in \\[0, 1\\], got 1.5"):
    _resolved("atari/pong", decay=1.5)
  with pytest.raises(ValueError, match="--shared_replay_connect_secs must be positive"):
    _resolved("atari/pong", shared_replay_connect_secs=0.0)
  with pytest.raises(ValueError, match="--trust_region_threshold must be >= 0"):
    _resolved("atari/pong", trust_region_threshold=math.nan)
  with pytest.raises(ValueError, match="--renderer must be one of"):
    _resolved("dmlab30", renderer="opengl")
  # The derived configs name the field without "--".
  with pytest.raises(ValueError, match="^momentum must be >= 0"):
    config_lib.LearnerConfig(momentum=-0.1)
