"""experiment.py --show_settings (issue 33, point 6): every setting's resolved value and its
source for the given level and flags, printed without TensorFlow, exit 0.

"Without TensorFlow" is checked in the process (the wrapper of test_before_tensorflow.py marks
the start of `import tensorflow` on stderr), not with a wall-clock limit.
"""
import dataclasses
import os
import re

from scalable_agent_tf2.resolution import config as config_lib
from scalable_agent_tf2.resolution import presets
from scalable_agent_tf2.configuration import settings
from tests.run.test_before_tensorflow import TENSORFLOW_MARK
from tests.run.test_before_tensorflow import run_experiment

# "  --name=value   source" (the value holds no spaces; a source may).
_ROW = re.compile(r"^  --(\w+)=(\S+)\s+(\S.*)$")


def show(*flags):
  result = run_experiment("--show_settings", *flags, timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr
  assert TENSORFLOW_MARK not in result.stderr, result.stderr
  rows = {}
  for line in result.stdout.splitlines():
    match = _ROW.match(line)
    if match:
      assert match.group(1) not in rows, line  # Each setting once.
      rows[match.group(1)] = (match.group(2), match.group(3))
  return result.stdout, rows


def flag_text(value):
  """How --show_settings writes a value (as on the command line)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  return "(none)" if value is None else "''" if value == "" else str(value)


def test_pong_shows_every_setting_resolved_with_its_source(tmp_path):
  flags = ["--level_name=atari/pong", "--num_actors=4", f"--logdir={tmp_path}/run"]
  text, rows = show(*flags)
  names = {f.name for f in settings.all_settings()} - {"show_settings"}
  assert set(rows) == names, names ^ set(rows)
  config = config_lib.config_from_argv(flags)
  for field in dataclasses.fields(config):
    if field.name != "show_settings":
      assert rows[field.name][0] == flag_text(getattr(config, field.name)), field.name
  # Given, preset (Table G.1 for Atari, cited), derived, default.
  assert rows["num_actors"] == ("4", "flag")
  assert rows["level_name"][1] == "flag"
  assert rows["learning_rate"] == ("0.0006", "preset: Atari games [Table G.1: 0.0006; "
                                   "released code (DMLab-30)]")
  assert rows["entropy_cost"][1].startswith("preset: Atari games [Table G.1: 0.01")
  assert rows["max_grad_norm"] == ("40.0", "preset: Atari games [Table G.1: 40; DMLab: none "
                                   "(released code); LASER section 5.1: none]")
  assert rows["unroll_length"][0] == "20" and rows["unroll_length"][1].startswith("preset:")
  assert rows["intra_op_threads"][1].startswith("derived")
  assert rows["mode"] == ("train", "default")
  assert rows["ppo_clip"] == ("(none)", "unused by this run")  # IMPACT's, IMPALA here.
  assert text.startswith("train: atari/pong, with these settings on this machine")
  assert not (tmp_path / "run").exists()  # Nothing started.


def test_a_flag_beats_the_preset_and_says_so():
  _, rows = show("--level_name=atari/pong", "--learning_rate=0.001", "--algorithm=impact")
  assert rows["learning_rate"] == ("0.001", "flag")
  assert rows["baseline_cost"][0] == "1.0"  # IMPACT Table 1 over Table G.1's 0.5.
  assert rows["baseline_cost"][1].startswith("preset: Atari games, IMPACT Table 1")
  assert rows["target_update_period"] == ("8", "derived [IMPACT section 4.1.1]")  # N x K.


def test_a_level_the_papers_did_not_run_says_where_its_presets_come_from():
  text, rows = show("--level_name=gym:CartPole-v1")
  assert presets.describe_presets("gym:CartPole-v1").splitlines()[0] in text
  assert rows["num_action_repeats"] == ("1", "preset: gymnasium environments [Tables G.1 "
                                        "(Atari) and D.3 (DMLab): 4]")


def test_a_suite_shows_its_levels_and_deep_network():
  text, rows = show("--level_name=dmlab30")
  assert text.startswith("train: dmlab30 (30 levels)")
  assert rows["torso"][0] == "deep" and rows["torso"][1].startswith("preset: DeepMind Lab")


def test_a_bad_flag_is_an_error_without_tensorflow():
  result = run_experiment("--show_settings", "--level_name=atari/pong", "--batch_size=0")
  assert result.returncode == 2, result.stdout + result.stderr
  assert "error: --batch_size must be a positive integer, got 0." in result.stderr
  assert TENSORFLOW_MARK not in result.stderr
