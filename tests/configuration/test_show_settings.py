"""experiment.py --show_settings: every setting's resolved value and its source for the given
level and flags, printed without TensorFlow, exit 0.

"Without TensorFlow" is checked in the process (the wrapper of test_before_tensorflow.py marks
the start of `import tensorflow` on stderr), not with a wall-clock limit.
"""
import dataclasses
import math
import re

from absl import flags as absl_flags

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import experiment_flags
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments.families import gym as gym_family
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
  assert rows["learning_rate"] == ("0.0006", "preset: Atari games [Table G.1: 0.0006]")
  assert rows["entropy_cost"][1].startswith("preset: Atari games [Table G.1: 0.01")
  assert rows["max_grad_norm"] == ("40.0", "preset: Atari games [Table G.1: 40]")
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
  assert rows["target_update_period"] == ("8", "derived [IMPACT section 4.1.1, n = N x K = 4 "
                                          "x 2: 8]")


def test_a_level_the_papers_did_not_run_says_where_its_presets_come_from():
  text, rows = show("--level_name=gym:CartPole-v1")
  assert gym_family.PRESETS_DOCUMENTATION.splitlines()[0] in text
  assert rows["num_action_repeats"] == ("1", "preset: gymnasium environments [not in the "
                                        "paper (a gymnasium step is an agent step): 1]")
  # The value printed, cited (not the Atari tables' 4, nor a 1e-5 of another algorithm's).
  assert rows["epsilon"][0] == "1e-16" and rows["epsilon"][1].endswith(": 1e-16]")
  assert rows["ppo_clip"][0] == "0.4" and "IMPACT Table 2" in rows["ppo_clip"][1]
  assert rows["torso"][0] == "(none)" and "take the mlp torso" in rows["torso"][1]


def test_a_suite_shows_its_levels_and_deep_network():
  text, rows = show("--level_name=dmlab30")
  assert text.startswith("train: dmlab30 (30 levels)")
  assert rows["torso"][0] == "deep" and rows["torso"][1].startswith("preset: DeepMind Lab")


def test_a_bad_flag_is_an_error_without_tensorflow():
  result = run_experiment("--show_settings", "--level_name=atari/pong", "--batch_size=0")
  assert result.returncode == 2, result.stdout + result.stderr
  assert "error: --batch_size must be a positive integer, got 0." in result.stderr
  assert TENSORFLOW_MARK not in result.stderr


# Every family's presets, each algorithm and preset, the derived settings (a clip on the mean
# loss, N x K, a short budget's batch, LASER's): the runs whose brackets are checked.
_EVERY_KIND = [
    ["--level_name=atari/pong"],
    ["--level_name=atari/pong", "--torso=deep"],                     # Threads by the torso given.
    ["--level_name=atari57"],
    ["--level_name=atari/breakout", "--algorithm=impact"],
    ["--level_name=atari/pong", "--preset=impact_paper"],
    ["--level_name=atari/pong", "--preset=impact_paper", "--algorithm=impact"],
    ["--level_name=atari/pong", "--laser_replay", "--replay_fraction=0.875"],
    ["--level_name=dmlab30"],
    ["--level_name=seekavoid_arena_01", "--algorithm=impact"],
    ["--level_name=mujoco/hopper"],
    ["--level_name=mujoco/half_cheetah", "--algorithm=impact"],
    ["--level_name=gym:CartPole-v1"],                                # Discrete, vectors.
    ["--level_name=gym:CartPole-v1", "--algorithm=impala"],
    ["--level_name=gym:Pendulum-v1"],                                # Box, vectors.
    ["--level_name=gym:CarRacing-v3"],                               # Box, frames.
    ["--level_name=gym:FrozenLake-v1"],                              # An index.
    ["--level_name=gym:tests.gym_user_package.costs:UserPlanes-v0"],  # A grid's small planes.
    ["--level_name=toy/lit_side"],
    ["--level_name=toy/lit_side", "--total_environment_frames=40"],  # A batch cut short.
]
_WORDS = {"true": ("on", "true"), "false": ("off", "false"), "(none)": ("none",)}
# The words that are values: every setting's choices, and the words for true, false, none.
_VALUE_WORDS = sorted({str(choice) for f in settings.all_settings()
                       for choice in f.metadata["choices"] or () if choice}
                      | {word for words in _WORDS.values() for word in words}, key=len,
                      reverse=True)
# A bracket's cited value: what follows its first "<source>: " that is a number (200M, 1e-16,
# 10,000, inf) or a value's word (shallow, impact, none, on, off).
_CITED = re.compile(r": (-?inf\b|-?[\d,]*\.?\d+(?:e[-+]?\d+)?[kM]?(?![\w.-]*[a-zA-Z])|(?:"
                    + "|".join(re.escape(word) for word in _VALUE_WORDS) + r")\b)")


def _cited_number(text):
  scale = {"k": 1e3, "M": 1e6}.get(text[-1], 1)
  return float(text.rstrip("kM").replace(",", "")) * scale


def _cites(value, cited):
  """Whether a bracket's cited value is the printed value."""
  if value in _WORDS:
    return cited in _WORDS[value]
  try:
    number = float(value)
  except ValueError:
    return cited == value
  try:
    return math.isclose(_cited_number(cited), number, rel_tol=1e-9)
  except ValueError:
    return False


def _lines(flags):
  """(--show_settings' lines for experiment.py's `flags`, config.explain's presets and
  citations): as experiment_flags.parse_command_line makes them."""
  values = absl_flags.FlagValues()
  command_line.define_flags(values)
  values(["experiment.py", *flags])
  config, presets, cited = config_lib.explain(config_lib.config_of_flags(values))
  given = {flag[2:].split("=")[0] for flag in flags}
  return experiment_flags.show_settings_lines(config, given, presets, cited), presets, cited


def test_every_bracket_cites_the_value_printed():
  """A bracket names where the printed value comes from: where it cites a value (its first
  "<source>: <value>"), that is the printed one; a different number only comes after it, as
  the reason why the value printed differs from a paper's."""
  wrong = []
  for flags in _EVERY_KIND:
    for line in _lines(flags)[0]:
      match = _ROW.match(line)
      if not match or "[" not in match.group(3):
        continue
      name, value, source = match.groups()
      bracket = source[source.index("[") + 1:]
      cited = _CITED.search(bracket)
      if cited and not _cites(value, cited.group(1)):
        wrong.append(f"{' '.join(flags)}: --{name}={value} {source}")
  assert not wrong, "\n".join(wrong)


def test_every_preset_value_has_a_citation_of_its_family():
  """Each preset and derived row carries its family's citation of that value (or
  config.explain's, for a derived one), not the setting's general note, and every family's
  citations have the keys of its presets."""
  missing = []
  for flags in _EVERY_KIND:
    lines, values, cited = _lines(flags)
    assert set(values) <= set(cited), (flags, set(values) - set(cited))
    for line in lines:
      match = _ROW.match(line)
      if match and match.group(3).startswith(("preset", "derived")):
        name, _, source = match.groups()
        if name not in cited or not source.endswith(f"[{cited[name]}]"):
          missing.append(f"{' '.join(flags)}: --{name} {source}")
  assert not missing, "\n".join(missing)
