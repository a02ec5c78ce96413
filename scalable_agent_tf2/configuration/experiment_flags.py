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
settings. A test creates nothing in a logdir without a checkpoint. A stop signal before the
run's threads start prints the "Stopped:" line, never a traceback. Every flag is a setting of
scalable_agent_tf2/configuration/settings.py; this module parses them (config.py resolves).
"""
import dataclasses
import os
import sys

from absl import flags

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings

# No TensorFlow here: experiment_main.py imports it once these checks have passed.
command_line.define_flags(flags.FLAGS)
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class ParsedCommand:
  """What one command line asks for (experiment_main.py runs it): what absl leaves of argv (the
  program's name), the resolved config, and where this process sits in a cluster."""
  argv: list
  config: config_lib.ExperimentConfig
  cluster: settings.ClusterSettings


def parse_command_line(argv):
  """The ParsedCommand of argv, its config resolved here and only here, before TensorFlow
  loads; --help (by topic) and --show_settings print and exit 0, a bad flag is an `error:`
  line and exit 2."""
  if any(argument in ("-h", "-help", "--help", "-?", "--helpshort") for argument in argv[1:]):
    print(f"{__doc__}\nFlags (python experiment.py --flag=value). \"The level's preset\": the "
          f"value the level's family gives,\nwhich --show_settings prints with its source:\n"
          f"{command_line.help_text()}")
    sys.exit(0)
  try:
    argv = FLAGS(argv)
    if len(argv) > 1:
      raise ValueError(f"unexpected arguments: {' '.join(argv[1:])} (flags are --name=value).")
    config, presets, cited = config_lib.explain(config_lib.config_of_flags(FLAGS))
    cluster = config_lib.config_of_flags(FLAGS, settings.ClusterSettings)
    if FLAGS.show_settings:
      given = {f.name for f in settings.all_settings()
               if FLAGS[f.name].present and f.name != "show_settings"}
      print("\n".join(show_settings_lines(config, given, presets, cited, cluster)))
      try:  # Levels this machine cannot run: a note under the settings, not an error.
        config_lib.check_levels_can_run(config)
      except (ValueError, ModuleNotFoundError) as error:
        print(f"note: this machine cannot run it as it is: {error}")
      sys.exit(0)
    config_lib.check_levels_can_run(config)
    settings.check_values(cluster)
  except (flags.Error, ValueError, ModuleNotFoundError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  return ParsedCommand(argv, config, cluster)


# --show_settings: the resolved run, without TensorFlow. The sources of a setting's value:
GIVEN, PRESET, DERIVED, DEFAULT, UNUSED = "flag", "preset", "derived", "default", "unused"


def _flag_text(value):
  """A value as it would be written on the command line (--name=<this>)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  return "(none)" if value is None else "''" if value == "" else str(value)


def _source(field, value, given, presets, cited, preset_name):
  """Where a setting's value comes from: GIVEN; PRESET (`preset_name`'s); DERIVED from other
  settings; DEFAULT, the setting's own; UNUSED, a preset setting this run leaves unset (IMPACT's
  without --algorithm=impact). In brackets, the value's citation, else the setting's source."""
  if field.name in given:
    return GIVEN
  source = cited.get(field.name, field.metadata["source"])
  bracket = f" [{source}]" if source else ""
  if field.name in presets and presets[field.name] == value:
    return f"{PRESET}: {preset_name}{bracket}"
  if field.metadata["preset"] and value is None:
    return f"{UNUSED} by this run"
  if field.metadata["preset"] or value != field.default:
    return f"{DERIVED}{bracket}"
  return f"{DEFAULT}{bracket}"


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


def show_settings_lines(config, given, presets, cited, cluster=settings.ClusterSettings()):
  """--show_settings's lines for config.explain's (config, presets, cited) and the names of
  the settings `given` on the command line: a header (whose presets, where they come from, the
  network), then every setting by topic: --name=value and its source."""
  values = dict(dataclasses.asdict(config), **dataclasses.asdict(cluster))
  rows = [(field, f"--{field.name}={_flag_text(values[field.name])}")
          for field in settings.all_settings() if field.name != "show_settings"]
  count, what = len(config.levels), config.level_name
  if config.is_multi_task:  # A suite that --excluded_levels leaves one level has one task.
    what += (f" ({count} levels; per-task PopArt on over {count} tasks, Hessel et al. 2019)"
             if config.popart and count > 1 else f" ({count} level{'s' * (count > 1)})")
  lines = [f"{config.mode}: {what}, with these settings on this machine ({os.cpu_count()} "
           f"cores). Sources: {GIVEN} (the command line), {PRESET} (the level's), {DERIVED} "
           f"(from the other settings), {DEFAULT}, {UNUSED}; [where the value comes from]."]
  sources = config.family.preset_sources(config.levels[0])
  if sources:  # A level the papers did not run: where its presets come from.
    lines += ["  " + line for line in sources.splitlines()]
  network = config.family.network_in_words(config)
  if network:  # Where no setting names the network the run builds.
    lines.append("  " + network)
  width = max(len(flag) for _, flag in rows)
  preset_name = _preset_name(config)
  for topic, title in settings.TOPICS.items():
    in_topic = [(field, flag) for field, flag in rows if field.metadata["topic"] == topic]
    lines += [f"{title}:"] if in_topic else []
    lines += [f"  {flag:<{width}}  "
              f"{_source(field, values[field.name], given, presets, cited, preset_name)}"
              for field, flag in in_topic]
  return lines
