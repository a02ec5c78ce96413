"""IMPALA (Espeholt et al., 2018) in TensorFlow 2: train or test one agent.

    python experiment.py --mode=train --level_name=atari/pong --logdir=/tmp/pong
    python experiment.py --mode=test  --level_name=atari/pong --logdir=/tmp/pong

(From a checkout; installed with pip, `python -m scalable_agent_tf2.run.experiment_main` is the same
command, and the one the launcher and the population driver run.)

--algorithm=impact trains with IMPACT (Luo et al., 2020) instead; --replay_fraction mixes
experience replay into every batch (IMPALA section 5.2.2); --laser_replay replays whole
episodes (LASER, Schmitt et al., 2019), shared with agents in other processes through a replay
service with --shared_replay_address (scalable_agent_tf2/transport/replay_service.py).

Exit codes: 0 done (also when stopped by SIGINT or SIGTERM, with a checkpoint); 1 the run
failed (updates that stay non-finite, a dead thread of the learner, a checkpoint or log that
cannot be written: the newest good checkpoint is kept); 2 bad flags, unusable checkpoint or
logdir, levels that cannot run here, or refused by a learner or replay service; 3 the shared
replay service unreachable or lost (the checkpoint is written).

--level_name takes a level ("atari/pong", "explore_goal_locations_small") or a suite
("atari57", "dmlab30"). Flags left unset take the paper's value for that level or suite
(scalable_agent_tf2/configuration/presets.py: Table G.1 for Atari, Table D.3 and the released code for
DeepMind Lab); a flag you set always wins. Every flag, its default, source and check is a
setting of scalable_agent_tf2/configuration/settings.py; this module only parses them and wires the rooms.
"""
import os
import sys

from absl import app
from absl import flags
from absl import logging

# The settings and their checks import no TensorFlow: a bad flag is reported at once.
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.utils import quiet_tensorflow
from scalable_agent_tf2.runfiles import run_directory
from scalable_agent_tf2.configuration import settings

# TensorFlow's C++ INFO and WARNING lines (CUDA probing, oneDNN notices, the batcher's
# cancellation at shutdown) are noise for a training run; errors still print. Set the
# variable yourself to see them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The project's TensorFlow modules are imported in main(), not here: a bad flag is reported
# before TensorFlow's import (environment processes do not re-import this file either:
# environments/process.py starts them without the parent's main script).

settings.define_flags(flags.FLAGS)
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
    print(f"{__doc__}\nFlags (python experiment.py --flag=value):\n{settings.help_text()}")
    sys.exit(0)
  try:
    argv = FLAGS(argv)
  except flags.Error as error:
    _bad_flags(error)
  if len(argv) > 1:
    _bad_flags(f"unexpected arguments: {' '.join(argv[1:])} (flags are --name=value).")
  try:  # Before TensorFlow loads (main), so a bad value is reported in well under a second.
    config_lib.check_levels_can_run(config_from_flags())
    settings.check_values(settings.ClusterSettings(
        **{name: FLAGS[name].value for name in settings.CLUSTER_SETTINGS}))
  except (ValueError, ModuleNotFoundError) as error:
    _bad_flags(error)
  return argv


def _hold_logdir(config):
  """Checks --logdir and takes it for this process, before TensorFlow loads (exit 2 if not).

  Actor processes of a cluster write nothing there (the learner owns the run), so they
  share the learner's --logdir without holding it.
  """
  try:
    run_directory.check_usable(config.logdir)
    if FLAGS.job_name == "actor":
      return None
    return run_directory.hold(config.logdir, role=f"{config.mode} of {config.level_name}")
  except run_directory.RunDirectoryError as error:
    _bad_flags(error)


def main(argv):
  del argv  # parse_flags took everything.
  logging.set_verbosity(logging.WARNING)  # TensorFlow's Python INFO lines (checkpointing).
  held_config = config_from_flags()
  _hold_logdir(held_config)  # Held until this process ends.
  # Threads per op can only be set before TensorFlow's first op, which this import runs.
  quiet_tensorflow.import_tensorflow(held_config.intra_op_threads)
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import actor_process
  from scalable_agent_tf2.run import checkpoints
  from scalable_agent_tf2.transport import distributed
  from scalable_agent_tf2.run import evaluation
  from scalable_agent_tf2.transport import replay_service
  from scalable_agent_tf2.run import training
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
      if config.mode != config_lib.TRAIN:
        raise ValueError("--job_name is for training; test on one machine (--job_name=).")
      learner_address = distributed.parse_cluster(FLAGS.cluster)[distributed.LEARNER_JOB][0]
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  try:
    if config.mode == config_lib.TEST:
      evaluation.evaluate(config)
    elif job_name == distributed.ACTOR_JOB:
      actor_process.run_actor_process(config, learner_address, task, secret=secret)
    else:
      training.train(config, listen_address=learner_address, cluster_secret=secret,
                     insecure_open_cluster=FLAGS.insecure_open_cluster)
  except (ModuleNotFoundError, checkpoints.CheckpointError, distributed.LearnerUnavailable,
          distributed.PeerRejected, distributed.ClusterError, run_directory.RunDirectoryError,
          training.LevelsCannotRun) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
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


def run():
  """Parses sys.argv and runs main; exits with its code (experiment.py and `-m` call this)."""
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  run()
