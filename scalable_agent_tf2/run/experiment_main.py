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
checkpoint is written); 130 a test stopped by SIGINT or SIGTERM before its results were written
(nothing is written; the shell's code for a command ended by Ctrl-C).

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
a setting of scalable_agent_tf2/configuration/settings.py; this module only parses them and
wires the rooms.
"""
import os
import sys
import threading
import time

from absl import app
from absl import flags
from absl import logging

# The settings and their checks import no TensorFlow: a bad flag is reported at once.
from scalable_agent_tf2.resolution import config as config_lib
from scalable_agent_tf2.resolution import presets
from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.runfiles import checkpoint_files
from scalable_agent_tf2.runfiles import run_directory
from scalable_agent_tf2.utils import quiet_tensorflow
from scalable_agent_tf2.utils import stop_signals

# TensorFlow's C++ INFO and WARNING lines (CUDA probing, oneDNN notices, the batcher's
# cancellation at shutdown) are noise for a training run; errors still print. Set the
# variable yourself to see them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The project's TensorFlow modules are imported in main(), not here: a bad flag is reported
# before TensorFlow's import (environment processes do not re-import this file either:
# environments/process.py starts them without the parent's main script).

command_line.define_flags(flags.FLAGS)
FLAGS = flags.FLAGS
_HELP_ARGUMENTS = ("-h", "-help", "--help", "-?", "--helpshort")


def config_from_flags():
  """The resolved config.ExperimentConfig of the parsed flags (ValueError if bad)."""
  return config_lib.config_from_flags(FLAGS)


def _bad_flags(error):
  print(f"error: {error}", file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  """absl's parsing, with --help by topic (exit 0) and a bad flag an `error:` line (exit 2)."""
  if any(argument in _HELP_ARGUMENTS for argument in argv[1:]):
    print(f"{__doc__}\nFlags (python experiment.py --flag=value):\n{command_line.help_text()}")
    sys.exit(0)
  try:
    argv = FLAGS(argv)
  except flags.Error as error:
    _bad_flags(error)
  if len(argv) > 1:
    _bad_flags(f"unexpected arguments: {' '.join(argv[1:])} (flags are --name=value).")
  if FLAGS.show_settings:
    _show_settings()
  try:  # Before TensorFlow loads (main), so a bad value is reported in well under a second.
    config_lib.check_levels_can_run(config_from_flags())
    settings.check_values(settings.ClusterSettings(
        **{name: FLAGS[name].value for name in settings.CLUSTER_SETTINGS}))
  except (ValueError, ModuleNotFoundError) as error:
    _bad_flags(error)
  return argv


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


def setting_sources(config, given, preset_values, preset_name):
  """(name, resolved value, source, its description) for every setting of `config`.

  Sources: GIVEN on the command line; PRESET, the value the presets give (config.preset_values,
  whose `preset_name`); DERIVED by config.resolve from other settings (intra_op_threads by the
  machine's cores, IMPACT's target_update_period = N x K, a clip on the mean loss scaled to the
  run's batch, ...); DEFAULT, the setting's own; UNUSED, a preset setting this run leaves unset
  (IMPACT's without --algorithm=impact). Descriptions end with the setting's source in the
  settings table (the paper's table or section), in brackets.
  """
  rows = []
  for field in settings.all_settings():
    if field.name == "show_settings":
      continue
    if field.name in settings.CLUSTER_SETTINGS:
      value = FLAGS[field.name].value
    else:
      value = getattr(config, field.name)
    cited = f" [{field.metadata['source']}]" if field.metadata["source"] else ""
    if field.name in given:
      kind, text = GIVEN, GIVEN
    elif field.name in preset_values and preset_values[field.name] == value:
      kind, text = PRESET, f"{PRESET}: {preset_name}{cited}"
    elif field.metadata["preset"] and value is None:
      kind, text = UNUSED, f"{UNUSED} by this run"
    elif field.metadata["preset"] or value != field.default:
      kind, text = DERIVED, f"{DERIVED}{cited}"
    else:
      kind, text = DEFAULT, f"{DEFAULT}{cited}"
    rows.append((field.name, value, kind, text))
  return rows


def _preset_name(config):
  """Whose presets fill this run's unset settings, in words."""
  if config.preset == settings.IMPACT_PAPER:
    return f"the IMPACT paper's Atari setting (--preset={settings.IMPACT_PAPER})"
  name = config.family.title
  if config.algorithm == settings.IMPACT:
    name += ", IMPACT Table 1"
  if config.laser_replay:
    name += ", LASER section 5.1"
  return name


def show_settings_lines(config, given):
  """--show_settings's lines: a header (whose presets, and where they come from, as the start
  banner says it: presets.describe_presets), then every setting by topic: --name=value and
  its source."""
  values = config_lib.preset_values(config, {name: getattr(config, name) for name in given
                                             if name not in settings.CLUSTER_SETTINGS})
  rows = setting_sources(config, given, values, _preset_name(config))
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


def _show_settings():
  """Prints show_settings_lines for the parsed flags and exits 0 (2 for bad flags)."""
  given = {name for name in settings.CLUSTER_SETTINGS + tuple(
      f.name for f in settings.all_settings()) if FLAGS[name].present and name != "show_settings"}
  try:
    config = config_from_flags()
  except ValueError as error:
    _bad_flags(error)
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


def stopped_before_start(config, interrupt, job_name=""):
  """The "Stopped:" line of a run stopped before its threads started (training.py's words)."""
  name = stop_signals.interrupt_name(interrupt)
  if config.mode == settings.TEST:
    return f"Stopped: interrupted ({name}) before testing started; nothing was played."
  if job_name == "actor":  # The learner owns the run's checkpoints.
    return f"Stopped: interrupted ({name}) before acting started."
  latest = checkpoint_files.latest_checkpoint(config.logdir)
  if latest is None:
    return (f"Stopped: interrupted ({name}) before training started; nothing trained, "
            "nothing to save.")
  path = os.path.join(checkpoint_files.checkpoint_dir(config.logdir), latest[0])
  return (f"Stopped: interrupted ({name}) before training started; checkpoint {path} "
          f"unchanged at {latest[1]:,} frames.")


def main(argv):
  del argv  # parse_flags took everything.
  logging.set_verbosity(logging.WARNING)  # TensorFlow's Python INFO lines (checkpointing).
  held_config = config_from_flags()
  # Until the run's own handlers take over (training's StopRequest, the test's _test),
  # SIGINT and SIGTERM raise Stopping: nothing runs yet that a stop could lose.
  _start_up()
  try:
    check_before_tensorflow(held_config, FLAGS.job_name)
    # Threads per op and GPU memory can only be set before TensorFlow's first op, which this
    # import runs.
    quiet_tensorflow.import_tensorflow(held_config.intra_op_threads, held_config.gpu_memory)
    # pylint: disable=g-import-not-at-top
    from scalable_agent_tf2.run import actor_process
    from scalable_agent_tf2.run import checkpoints
    from scalable_agent_tf2.transport import distributed
    from scalable_agent_tf2.run import evaluation
    from scalable_agent_tf2.transport import replay_service
    from scalable_agent_tf2.run import training
  except stop_signals.Stopping as interrupt:
    print(stopped_before_start(held_config, interrupt, FLAGS.job_name), flush=True)
    return TEST_STOPPED if held_config.mode == settings.TEST else 0
  finally:
    _started()  # The handlers from before the command started come back.
  try:
    config = config_from_flags()
    job_name, task = distributed.task_from_environment()
    job_name = FLAGS.job_name or job_name or ""
    task = FLAGS.task if FLAGS.task is not None else (task or 0)
    if task < 0:
      raise ValueError(f"--task must be >= 0, got {task}.")
    learner_address = None
    # Raises distributed.ClusterError (a ValueError) for an unreadable or empty file.
    secret = distributed.cluster_secret(FLAGS.cluster_secret_file)
    if job_name:
      if config.mode != settings.TRAIN:
        raise ValueError("--job_name is for training; test on one machine (--job_name=).")
      learner_address = distributed.parse_cluster(FLAGS.cluster)[distributed.LEARNER_JOB][0]
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  try:
    if config.mode == settings.TEST:
      return _test(config, evaluation)
    elif job_name == distributed.ACTOR_JOB:
      actor_process.run_actor_process(config, learner_address, task, secret=secret)
    else:
      training.train(config, listen_address=learner_address, cluster_secret=secret,
                     insecure_open_cluster=FLAGS.insecure_open_cluster)
  except (ModuleNotFoundError, checkpoints.CheckpointError, distributed.LearnerUnavailable,
          distributed.PeerRejected, distributed.ClusterError,
          run_directory.RunDirectoryError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  except training.LevelsCannotRun as error:
    # 2 for levels that cannot start here (the set-up); 1 for environments that started, then
    # kept failing (a crash loop: a failure of the run, as RunFailed's).
    print(f"error: {error}", file=sys.stderr)
    return error.exit_code
  except training.RunFailed as error:
    # A failure of the run itself (non-finite updates, a dead thread of the learner, a
    # checkpoint or log that could not be written); the message names the checkpoint kept.
    print(f"error: {error}", file=sys.stderr)
    return 1
  except replay_service.ReplayServiceUnavailable as error:
    # Not 2 ("bad flags"): the population driver restarts such a member (the service may be
    # back by then).
    print(f"error: {error}", file=sys.stderr)
    return 3
  return 0


TEST_STOPPED = 130  # The shell's code for a command ended by Ctrl-C.
# Seconds a stopped test waits for its evaluation threads to close their environments.
_TEST_STOP_GRACE_SECS = 30.0


def _test(config, evaluation):
  """Test mode; SIGINT or SIGTERM stops it (its environments closed, nothing written) with a
  "Stopped:" line and TEST_STOPPED."""
  sigterm = stop_signals.SigtermRaises()
  try:
    evaluation.evaluate(config)
  except (KeyboardInterrupt, stop_signals.Stopping) as interrupt:
    stop_signals.ignore_stop_signals()  # A second signal would cut the closing short.
    print(f"Stopped: interrupted ({stop_signals.interrupt_name(interrupt)}) while testing; "
          f"no results written.", flush=True)
    # evaluate closed its policy: the evaluation threads' next step fails, and each closes
    # its environments (their processes and shared memory) on its way out.
    _join_threads("evaluation-", _TEST_STOP_GRACE_SECS)
    return TEST_STOPPED
  finally:
    sigterm.restore()
  return 0


def _join_threads(prefix, timeout):
  """Waits up to `timeout` seconds in all for the threads whose name starts with prefix."""
  deadline = time.monotonic() + timeout
  for thread in threading.enumerate():
    if thread.name.startswith(prefix):
      thread.join(max(0.0, deadline - time.monotonic()))


# The start-up's stop handling (a signal raises Stopping), from run() or main() until main
# hands over to the run.
_startup = []


def _start_up():
  if not _startup:
    _startup.append(stop_signals.StopRequest().install())


def _started():
  while _startup:
    _startup.pop().restore()


def run():
  """Parses sys.argv and runs main; exits with its code (experiment.py and `-m` call this).

  A stop signal while the flags are parsed (before main) stops with a line too.
  """
  _start_up()
  try:
    app.run(main, flags_parser=parse_flags)
  except stop_signals.Stopping as interrupt:
    print(f"Stopped: interrupted ({interrupt}) while starting; nothing was started.",
          flush=True)
    sys.exit(TEST_STOPPED if "--mode=test" in sys.argv else 0)
  finally:
    _started()


if __name__ == "__main__":
  run()
