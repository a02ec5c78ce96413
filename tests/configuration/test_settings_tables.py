"""The settings tables stay the one home of every setting: the derived configs are made from
them, and every command's flags come from them, each defined once."""
import collections
import dataclasses
import importlib
import math
import os
import subprocess
import sys

import pytest

from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings


@pytest.mark.parametrize("derived, part_of, constants", [
    (config_lib.LearnerConfig, settings.FOR_LEARNER, dict(settings.VTRACE_CONSTANTS)),
    (config_lib.ImpactConfig, settings.FOR_IMPACT, {}),
])
def test_derived_configs_are_the_marked_settings(derived, part_of, constants):
  fields = {f.name: f for f in dataclasses.fields(derived)}
  marked = [f.name for f in settings.fields_part_of(part_of)]
  assert list(fields) == marked + list(constants)  # The table's order, then the constants.
  for name, value in constants.items():
    assert fields[name].default == value, name
  assert dataclasses.is_dataclass(derived) and derived.__dataclass_params__.frozen
  assert derived.__module__ == config_lib.__name__ and derived.__doc__


def test_derived_configs_keep_their_checks():
  with pytest.raises(ValueError, match="^momentum must be >= 0"):
    config_lib.LearnerConfig(momentum=-0.1)
  with pytest.raises(ValueError, match="max_grad_norm must be positive or None"):
    config_lib.LearnerConfig(max_grad_norm=0.0)
  with pytest.raises(ValueError, match="needs off_policy_correction='vtrace'"):
    config_lib.LearnerConfig(trust_region_threshold=0.5, off_policy_correction="none")
  with pytest.raises(ValueError, match="^ppo_clip must be in \\(0, 1\\)"):
    config_lib.ImpactConfig(ppo_clip=1.5)
  assert not config_lib.LearnerConfig().uses_trust_region
  assert config_lib.LearnerConfig(trust_region_threshold=0.5).uses_trust_region
  with pytest.raises(dataclasses.FrozenInstanceError):
    config_lib.LearnerConfig().momentum = 1.0  # pytype: disable=not-writable
  assert math.isinf(config_lib.LearnerConfig().trust_region_threshold)


# ---------------------------------------------------------------------------------------------
# Every command's flags are settings of a table, each defined once.
# ---------------------------------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Each command, its table, and a bad value with the message its check gives.
COMMANDS = [
    ("scalable_agent_tf2.population.command", command_settings.PopulationSettings,
     ["--logdir=/tmp/unused_population", "--ready_episodes=0"],
     "error: --ready_episodes must be a positive integer, got 0."),
    ("scalable_agent_tf2.transport.replay_service", command_settings.ReplayServiceSettings,
     ["--log_secs=0"], "error: --log_secs must be positive, got 0.0."),
    ("scalable_agent_tf2.run.launch", command_settings.LaunchSettings,
     ["--num_actor_processes=0"], "error: --num_actor_processes must be a positive integer, "
     "got 0."),
]


def _run(*argv):
  return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                        timeout=120, check=False)


def test_every_flag_is_defined_once_across_all_tables():
  definitions = collections.defaultdict(list)
  for table in command_settings.ALL_TABLES:
    for field in dataclasses.fields(table):
      if not field.metadata["reused_from"]:
        definitions[field.name].append(table.__name__)
  twice = {name: tables for name, tables in definitions.items() if len(tables) > 1}
  assert not twice, f"flags defined more than once (reuse one definition): {twice}"
  for table in command_settings.ALL_TABLES:
    for field in dataclasses.fields(table):
      reused_from = field.metadata["reused_from"]
      if not reused_from:
        continue
      home_name, name = reused_from.split(".")
      assert name == field.name, reused_from
      home = {t.__name__: t for t in command_settings.ALL_TABLES}[home_name]
      original = {f.name: f for f in dataclasses.fields(home)}[name]
      assert not original.metadata["reused_from"], reused_from  # Reused from its definition.
      # The same flag: type, choices, check and source are the definition's.
      assert field.type == original.type, (table.__name__, name)
      for key in ("choices", "check", "source"):
        assert field.metadata[key] is original.metadata[key], (table.__name__, name, key)


def test_flags_shared_with_experiment_py_are_reused():
  for table, names in [(command_settings.PopulationSettings, ("logdir", "seed")),
                       (command_settings.ReplayServiceSettings,
                        ("replay_capacity", "seed", "log_secs", "cluster_secret_file",
                         "insecure_open_cluster"))]:
    fields = {f.name: f for f in dataclasses.fields(table)}
    for name in names:
      assert fields[name].metadata["reused_from"], (table.__name__, name)


def test_command_tables_keep_the_commands_defaults():
  population = command_settings.PopulationSettings(logdir="/tmp/p")
  assert (population.population_size, population.initial_hyperparameters, population.seed,
          population.burn_in_frames, population.ready_episodes, population.exploit_threshold,
          population.poll_secs, population.stop_timeout_secs, population.max_crashes,
          population.member_prefix, population.shared_replay_capacity, population.curve_of) == (
              24, "table_d1", 1, 20_000_000, 5_000, 5.0, 10.0, 300.0, 3, "", 0, None)
  assert (command_settings.POPULATION_SIZE, command_settings.BURN_IN_FRAMES) == (24, 20_000_000)
  with pytest.raises(TypeError):
    # pylint: disable-next=no-value-for-parameter (--logdir required)
    command_settings.PopulationSettings()
  service = command_settings.ReplayServiceSettings()
  assert (service.address, service.replay_capacity, service.seed, service.log_secs,
          service.cluster_secret_file, service.insecure_open_cluster) == (
              "localhost:8010", settings.DEFAULT_REPLAY_CAPACITY, 0, 30.0, "", False)
  assert command_settings.LaunchSettings() == command_settings.LaunchSettings(
      num_actor_processes=2, port=None)


def test_replay_service_secret_help_names_its_variable():
  from scalable_agent_tf2.transport import distributed  # pylint: disable=g-import-not-at-top
  fields = {f.name: f for f in dataclasses.fields(command_settings.ReplayServiceSettings)}
  assert distributed.SECRET_ENVIRONMENT_VARIABLE in fields["cluster_secret_file"].metadata["doc"]


def test_parsers_are_generated_from_the_tables():
  # pylint: disable=protected-access
  from scalable_agent_tf2.population import command  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import launch
  values, rest = command._parser().parse_settings(
      ["--logdir=/tmp/p", "--population_size=3", "--exploit_threshold", "2.5", "--",
       "--level_name=atari/pong"], known_only=True)
  assert values == command_settings.PopulationSettings(logdir="/tmp/p", population_size=3,
                                               exploit_threshold=2.5)
  assert rest == ["--", "--level_name=atari/pong"]
  values, _ = launch._parser().parse_settings(["--port=8001"], known_only=True)
  assert values == command_settings.LaunchSettings(port=8001)
  with pytest.raises(ValueError, match="^--exploit_threshold must be a number, got nan.$"):
    command._parser().parse_settings(["--logdir=x", "--exploit_threshold=nan"])
  with pytest.raises(ValueError, match="^--port must be a port number"):
    launch._parser().parse_settings(["--port=70000"])


def _check_help(text, table):
  """Every flag of `table` under its topic's title, with its help and source."""
  flat = " ".join(text.split())
  for field in dataclasses.fields(table):
    position = text.index(f"  --{field.name}: ")
    title = command_settings.ALL_TOPICS[field.metadata["topic"]]
    assert text.rfind(f"\n{title}:\n", 0, position) >= 0, field.name
    at = flat.index(f"--{field.name}: ")
    assert field.metadata["doc"][:40] in flat[at:], field.name
    if field.metadata["source"]:
      assert f"[Source: {field.metadata['source']}.]" in flat[at:], field.name


@pytest.mark.parametrize("module, table, bad, message", COMMANDS)
def test_each_command_lists_its_flags_by_topic_and_refuses_bad_values(module, table, bad,
                                                                      message, capsys):
  command = importlib.import_module(module)
  with pytest.raises(SystemExit) as exit_info:
    command.main(["--help"])
  assert exit_info.value.code == 0
  _check_help(capsys.readouterr().out, table)
  assert command.main(bad) == 2
  assert capsys.readouterr().err == message + "\n"


@pytest.mark.parametrize("module, table", [
    ("scalable_agent_tf2.population", command_settings.PopulationSettings),
    ("scalable_agent_tf2.run.launch", command_settings.LaunchSettings)])
def test_tensorflow_free_commands_answer_help_at_once(module, table):
  run = _run("-X", "importtime", "-m", module, "--help")
  assert run.returncode == 0, run.stderr
  _check_help(run.stdout, table)
  # -X importtime lists every module imported, one a line, its name last ("| tensorflow").
  imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
              if line.startswith("import time:")]
  assert imported and not [name for name in imported if name.split(".")[0] == "tensorflow"]
