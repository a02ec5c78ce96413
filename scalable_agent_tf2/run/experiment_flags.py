"""IMPALA (Espeholt et al., 2018) in TensorFlow 2: train or test one agent.

    python experiment.py --mode=train --level_name=atari/pong --logdir=/tmp/pong
    python experiment.py --mode=test  --level_name=atari/pong --logdir=/tmp/pong

(From a checkout; installed with pip, `python -m scalable_agent_tf2.run.experiment_main` is the same
command, and the one the launcher and the population driver run.)

--algorithm=impact trains with IMPACT (Luo et al., 2020) instead; --replay_fraction mixes
experience replay into every batch (IMPALA section 5.2.2); --laser_replay replays whole
episodes (LASER, Schmitt et al., 2019), shared with agents in other processes through a replay
service with --shared_replay_address (scalable_agent_tf2/transport/replay_service.py).

Exit codes: 0 done (also a training stopped by SIGINT or SIGTERM, with a checkpoint, or
before it started: the checkpoint unchanged); 1 the run failed (updates that stay non-finite,
a dead thread of the learner, a checkpoint or log that cannot be written: the newest good
checkpoint is kept); 2 bad flags, unusable checkpoint or logdir, levels that cannot run here,
or refused by a learner or replay service; 3 the shared replay service unreachable or lost (the
checkpoint is written); 130 a test stopped by SIGINT or SIGTERM (the shell's code for a command
ended by Ctrl-C): nothing is written, or, for a signal while the results were being written
(which waits for them), both results files; its "Stopped:" line says which.

Before TensorFlow loads (seconds to a minute), everything the flags and the files can tell is
answered: bad flags, an unusable logdir (a file, not writable, held by a live run), no
checkpoint to test, a --restore_checkpoint that is not there, a checkpoint trained with other
settings (runfiles/checkpoint_files.py: check_before_restore). A test creates nothing in a
logdir without a checkpoint. A stop signal while TensorFlow loads, or before the run's threads
start, prints the "Stopped:" line, never a traceback. --show_settings prints the resolved
settings and their sources, and exits without loading TensorFlow.

--level_name takes a level ("atari/pong", "explore_goal_locations_small") or a suite
("atari57", "dmlab30"). Flags left unset take the paper's value for that level or suite
(scalable_agent_tf2/resolution/presets.py: Table G.1 for Atari, Table D.3 and the released
code for DeepMind Lab); a flag you set always wins. Every flag, its default, source and check is
a setting of scalable_agent_tf2/configuration/settings.py; this module only parses and checks
them.
"""
import dataclasses
import os
import sys

from absl import flags

from scalable_agent_tf2.configuration import command_line as configuration_command_line
from scalable_agent_tf2.configuration import settings

# The settings and their checks import no TensorFlow: a bad flag is reported at once.
from scalable_agent_tf2.resolution import citations
from scalable_agent_tf2.resolution import config as config_lib
from scalable_agent_tf2.resolution import presets
from scalable_agent_tf2.runfiles import checkpoints as checkpoint_files
from scalable_agent_tf2.runfiles import run_directory

# No TensorFlow here either: experiment_main.py imports it once these checks have passed
# (environment processes do not re-import this file: environments/process.py starts them
# without the parent's main script).

configuration_command_line.define_flags(flags.FLAGS)
FLAGS = flags.FLAGS
_HELP_ARGUMENTS = ("-h", "-help", "--help", "-?", "--helpshort")


def config_from_flags():
  """The resolved config.ExperimentConfig of the parsed flags (ValueError if bad)."""
  return config_lib.config_from_flags(FLAGS)


def _bad_flags(error):
  print(f"error: {error}", file=sys.stderr)
  sys.exit(2)


@dataclasses.dataclass(frozen=True)
class ParsedCommand:
  """What one command line asks for, resolved once (experiment_main.py runs it).

  argv: what absl leaves of the command line (the program's name). config: the resolved
  config.ExperimentConfig. cluster: settings.ClusterSettings, where this process sits in a
  cluster (not part of the experiment).
  """
  argv: list
  config: config_lib.ExperimentConfig
  cluster: settings.ClusterSettings


def parse_command_line(argv):
  """absl's parsing, with --help by topic (exit 0) and a bad flag an `error:` line (exit 2);
  the ParsedCommand, its config resolved here and only here.

  Everything the flags alone can tell is checked before TensorFlow loads, so a bad value is
  reported in well under a second. --show_settings prints the settings and exits 0.
  """
  if any(argument in _HELP_ARGUMENTS for argument in argv[1:]):
    print(f"{__doc__}\nFlags (python experiment.py --flag=value):\n{configuration_command_line.help_text()}")
    sys.exit(0)
  try:
    argv = FLAGS(argv)
  except flags.Error as error:
    _bad_flags(error)
  if len(argv) > 1:
    _bad_flags(f"unexpected arguments: {' '.join(argv[1:])} (flags are --name=value).")
  try:
    config = config_from_flags()
  except (ValueError, ModuleNotFoundError) as error:
    _bad_flags(error)
  if FLAGS.show_settings:
    _show_settings(config)
  try:
    config_lib.check_levels_can_run(config)
    cluster = settings.ClusterSettings(
        **{name: FLAGS[name].value for name in settings.CLUSTER_SETTINGS})
    settings.check_values(cluster)
  except (ValueError, ModuleNotFoundError) as error:
    _bad_flags(error)
  return ParsedCommand(argv, config, cluster)


def parse_flags(argv):
  """parse_command_line as absl's flags_parser: what absl leaves of argv."""
  return parse_command_line(argv).argv


# ---------------------------------------------------------------------------------------------
# --show_settings: the resolved run, without TensorFlow.
# ---------------------------------------------------------------------------------------------

# The sources of a setting's value.
GIVEN, PRESET, DERIVED, DEFAULT, UNUSED = "flag", "preset", "derived", "default", "unused"


def _flag_text(value):
  """A value as it would be written on the command line (--name=<this>)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  if value is None:
    return "(none)"
  if value == "":
    return "''"
  return str(value)


def setting_sources(config, given, preset_values, preset_name, cited=None):
  """(name, resolved value, source, its description) for every setting of `config`.

  Sources: GIVEN on the command line; PRESET, the value the presets give (config.preset_values,
  whose `preset_name`); DERIVED by config.resolve from other settings (intra_op_threads by the
  machine's cores, IMPACT's target_update_period = N x K, a clip on the mean loss scaled to the
  run's batch, ...); DEFAULT, the setting's own; UNUSED, a preset setting this run leaves unset
  (IMPACT's without --algorithm=impact). Descriptions end, in brackets, with where the value
  comes from: for a preset or derived value its citation in `cited` (resolution/citations.py:
  the family's source of that value), else the setting's source in the settings table.
  """
  cited = cited or {}
  rows = []
  for field in settings.all_settings():
    if field.name == "show_settings":
      continue
    if field.name in settings.CLUSTER_SETTINGS:
      value = FLAGS[field.name].value
    else:
      value = getattr(config, field.name)
    source = field.metadata["source"]
    if field.name in cited and field.name not in given:
      source = cited[field.name]
    cited_text = f" [{source}]" if source else ""
    if field.name in given:
      kind, text = GIVEN, GIVEN
    elif field.name in preset_values and preset_values[field.name] == value:
      kind, text = PRESET, f"{PRESET}: {preset_name}{cited_text}"
    elif field.metadata["preset"] and value is None:
      kind, text = UNUSED, f"{UNUSED} by this run"
    elif field.metadata["preset"] or value != field.default:
      kind, text = DERIVED, f"{DERIVED}{cited_text}"
    else:
      kind, text = DEFAULT, f"{DEFAULT}{cited_text}"
    rows.append((field.name, value, kind, text))
  return rows


def _preset_name(config):
  """Whose presets fill this run's unset settings, in words."""
  if config.preset == settings.IMPACT_PAPER:
    return f"the IMPACT paper's Atari setting (--preset={settings.IMPACT_PAPER})"
  name = config.family.title
  # A family that owns its IMPACT presets (MuJoCo's and gymnasium's: Table 2's) names them in
  # its own documentation; the others take IMPACT Table 1's (families.base.IMPACT_PRESET).
  if config.algorithm == settings.IMPACT and not config.family.owns_algorithm_presets:
    name += ", IMPACT Table 1"
  if config.laser_replay:
    name += ", LASER section 5.1"
  return name


def show_settings_lines(config, given):
  """--show_settings's lines: a header (whose presets, and where they come from, as the start
  banner says it: presets.describe_presets), then every setting by topic: --name=value and
  its source."""
  given_values = {name: getattr(config, name) for name in given
                  if name not in settings.CLUSTER_SETTINGS}
  values = config_lib.preset_values(config, given_values)
  rows = setting_sources(config, given, values, _preset_name(config),
                         citations.of(config, given_values, values))
  what = (f"{config.level_name} ({len(config.levels)} levels)" if config.is_multi_task
          else config.level_name)
  lines = [f"{config.mode}: {what}, with these settings on this machine ({os.cpu_count()} "
           f"cores). Sources: {GIVEN} (the command line), {PRESET} (the level's), {DERIVED} "
           f"(from the other settings), {DEFAULT}, {UNUSED}; [where the value comes from]."]
  sources = presets.describe_presets(config.level_name)
  if sources:  # A level the papers did not run: where its presets come from.
    lines += ["  " + line for line in sources.splitlines()]
  network = config.family.network_in_words(config)
  if network:  # Where no setting names the network the run builds.
    lines.append("  " + network)
  topic_of = {f.name: f.metadata["topic"] for f in settings.all_settings()}
  width = max(len(f"--{name}={_flag_text(value)}") for name, value, _, _ in rows)
  for topic, title in settings.TOPICS.items():
    in_topic = [row for row in rows if topic_of[row[0]] == topic]
    if in_topic:
      lines.append(f"{title}:")
    for name, value, _, text in in_topic:
      lines.append(f"  {f'--{name}={_flag_text(value)}':<{width}}  {text}")
  return lines


def _show_settings(config):
  """Prints show_settings_lines for the parsed flags' resolved `config` and exits 0."""
  given = {name for name in settings.CLUSTER_SETTINGS + tuple(
      f.name for f in settings.all_settings()) if FLAGS[name].present and name != "show_settings"}
  for line in show_settings_lines(config, given):
    print(line)
  try:
    config_lib.check_levels_can_run(config)
  except (ValueError, ModuleNotFoundError) as error:
    print(f"note: this machine cannot run it as it is: {error}")
  sys.exit(0)


# ---------------------------------------------------------------------------------------------
# Before TensorFlow: the logdir and the checkpoint.
# ---------------------------------------------------------------------------------------------


def checkpoint_settings(config):
  """The settings a checkpoint is checked against (checkpoint_files.SHAPE_SETTINGS), as far as
  the flags tell them: the torso of a network that the environment's spec chooses (gymnasium,
  MuJoCo: --torso unset) is left to the restore, which knows the network."""
  values = {name: getattr(config, name) for name in checkpoint_files.SHAPE_SETTINGS}
  if values["torso"] is None:
    del values["torso"]
  return values


def check_before_tensorflow(config, job_name):
  """Checks --logdir and its checkpoint and takes the logdir for this process, before
  TensorFlow loads (exit 2 with the `error:` line if one fails).

  A test checks the checkpoint first and takes the logdir only when there is one to test: it
  creates nothing (no logdir, no .lock, no evaluation/) where it would not test; its results
  directory is checked, not made. Actor processes of a cluster write nothing there and
  restore nothing (the learner owns the run): they share the learner's --logdir without
  holding it.
  """
  testing = config.mode == settings.TEST
  try:
    run_directory.check_path(config.logdir)
    if job_name == "actor":
      run_directory.check_usable(config.logdir)
      return
    if testing:
      checkpoint_files.check_before_restore(config.logdir, checkpoint_settings(config),
                                            required=True)
    # Held until this process ends.
    run_directory.hold(config.logdir, role=f"{config.mode} of {config.level_name}")
    if testing:
      run_directory.check_creatable(os.path.join(config.logdir, "evaluation"))
    else:
      checkpoint_files.check_before_restore(config.logdir, checkpoint_settings(config),
                                            restore_from=config.restore_checkpoint)
  except (run_directory.RunDirectoryError, checkpoint_files.UnusableCheckpoint) as error:
    _bad_flags(error)
