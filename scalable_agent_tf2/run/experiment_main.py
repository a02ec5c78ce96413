"""The start of experiment.py's command (`python -m scalable_agent_tf2.run.experiment_main` once
installed): the one layer that owns SIGINT and SIGTERM and resolves the run's configuration.

    run()  1. installs the command's stop_signals.StopRequest, before anything else loads;
           2. parses the flags (configuration/experiment_flags.py: --help, --show_settings, every
              check the flags alone allow) into one resolved config, the only resolution;
           3. takes the logdir and checks its checkpoint, then imports TensorFlow;
           4. hands that config, and the same StopRequest, to the run: training.train (whose
              supervisor turns the request into its wake-up once the run's threads start, so
              that the final checkpoint is written), the test (evaluation.evaluate) or an actor
              process (actor_process.run_actor_process).

Until a supervisor takes the request over, a stop signal raises stop_signals.Stopping wherever
the main thread is (the command's modules loading, TensorFlow's import, the run being built):
nothing has started that a stop could lose, and this module prints the `Stopped:` line instead
of a traceback. The handler comes first because a SIGTERM half a second after the start used to
end the process by the default action, without that line: this module imports nothing
heavy before it is installed.

Exit codes: configuration/experiment_flags.py's docstring (--help), which is the command's.
"""
import os
import sys
import threading
import time

from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.utils import stop_signals

# TensorFlow's C++ INFO and WARNING lines (CUDA probing, oneDNN notices, the batcher's
# cancellation at shutdown) are noise for a training run; errors still print. Set the
# variable yourself to see them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TEST_STOPPED = 130  # The shell's code for a command ended by Ctrl-C.
# The training run's thread that may still be inside a TensorFlow call when the command ends
# (supervisor.Run's learner thread: a stop waits STOP_JOIN_SECS for it; its first update may
# still be compiling then).
_THREADS_IN_TENSORFLOW = ("learner",)
# Seconds a stopped test waits for its evaluation threads to close their environments.
_TEST_STOP_GRACE_SECS = 30.0


def run():
  """Runs the command of sys.argv and exits with its code (experiment.py and `-m` call this)."""
  stop_request = stop_signals.StopRequest().install()  # The command's one handler.
  try:
    from absl import app  # pylint: disable=g-import-not-at-top
    command = _Command(stop_request)
    try:
      app.run(command.main, flags_parser=command.parse_flags)
    except SystemExit as exit_:
      _end_past_threads_in_tensorflow(exit_)
      raise
  except stop_signals.Stopping as interrupt:
    # absl, the settings or the flags were loading: nothing has started.
    print(f"Stopped: interrupted ({interrupt}) while starting; nothing was started.",
          flush=True)
    sys.exit(TEST_STOPPED if "--mode=test" in sys.argv else 0)
  finally:
    stop_request.restore()


def _end_past_threads_in_tensorflow(exit_):
  """Ends the process now, with the command's exit code, if a thread of the run is still
  inside TensorFlow. Python 3.11 ends a daemon thread that returns to Python while the
  interpreter shuts down with pthread_exit, whose unwinding through TensorFlow's C++ frames
  aborts the process ("FATAL: exception not rethrown", exit -6) after the command's last line.
  By now everything the command writes (checkpoint, logs, its last line) is written, and its
  environment processes die with it (process_child.py's PR_SET_PDEATHSIG)."""
  running = [t for t in threading.enumerate()
             if t.name in _THREADS_IN_TENSORFLOW and t.is_alive()]
  if not running:
    return
  code = exit_.code
  if isinstance(code, str):  # sys.exit("message"): Python prints it and exits with 1.
    print(code, file=sys.stderr)
    code = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0 if code is None else int(code))  # pylint: disable=protected-access


class _Command:
  """absl's flags parser and main for one start: main runs what the parser resolved."""

  def __init__(self, stop_request):
    self._stop_request = stop_request
    self._parsed = None

  def parse_flags(self, argv):
    # pylint: disable-next=g-import-not-at-top
    from scalable_agent_tf2.configuration import experiment_flags  # absl's flags, settings.
    self._parsed = experiment_flags.parse_command_line(argv)
    return self._parsed.argv

  def main(self, argv):
    del argv  # parse_flags took everything.
    return main(self._parsed.config, self._parsed.cluster, self._stop_request)


def main(config, cluster, stop_request):
  """Runs the resolved `config` in this process's place in the cluster
  (settings.ClusterSettings); returns the exit code. A stop before the run's threads start
  (stop_request raises Stopping until then) prints the "Stopped:" line."""
  # pylint: disable=g-import-not-at-top
  from absl import logging

  from scalable_agent_tf2.configuration import settings
  logging.set_verbosity(logging.WARNING)  # TensorFlow's Python INFO lines (checkpointing).
  try:
    _check_and_import_tensorflow(config, cluster)
    return _run(config, cluster, stop_request)
  except stop_signals.Stopping as interrupt:
    print(stopped_before_start(config, interrupt, cluster.job_name), flush=True)
    return TEST_STOPPED if config.mode == settings.TEST else 0


def _check_and_import_tensorflow(config, cluster):
  """The logdir and its checkpoint (exit 2 with an `error:` line), then TensorFlow."""
  from scalable_agent_tf2.utils import quiet_tensorflow  # pylint: disable=g-import-not-at-top
  check_before_tensorflow(config, cluster.job_name)
  # Threads per op and GPU memory can only be set before TensorFlow's first op, which this
  # import runs.
  quiet_tensorflow.import_tensorflow(config.intra_op_threads, config.gpu_memory)


def checkpoint_settings(config):
  """The settings a checkpoint is checked against (checkpoints.COMPARED_SETTINGS), as far as
  the flags tell them: the torso of a network that the environment's spec chooses (gymnasium,
  MuJoCo: --torso unset) is left to the restore, which knows the network."""
  values = {name: getattr(config, name) for name in checkpoints.SHAPE_SETTINGS}
  values[checkpoints.TASKS_SETTING] = checkpoints.popart_tasks(config)  # None: one task.
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
  from scalable_agent_tf2.configuration import settings  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.runfiles import run_directory  # pylint: disable=g-import-not-at-top
  testing = config.mode == settings.TEST
  try:
    run_directory.check_path(config.logdir)
    if job_name == "actor":
      run_directory.check_usable(config.logdir)
      return
    if testing:
      checkpoints.check_before_restore(config.logdir, checkpoint_settings(config),
                                       required=True)
    # Held until this process ends.
    run_directory.hold(config.logdir, role=f"{config.mode} of {config.level_name}")
    if testing:
      run_directory.check_creatable(os.path.join(config.logdir, "evaluation"))
    else:
      checkpoints.check_before_restore(config.logdir, checkpoint_settings(config),
                                       restore_from=config.restore_checkpoint)
  except (run_directory.RunDirectoryError, checkpoints.UnusableCheckpoint) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def _cluster_role(config, cluster, distributed):
  """(job name, task, learner address or None, secret) of this process: the flags, else
  TF_CONFIG. Raises ValueError (distributed.ClusterError among them) for a bad one."""
  # pylint: disable-next=g-import-not-at-top
  from scalable_agent_tf2.configuration import settings
  job_name, task = distributed.task_from_environment()
  job_name = cluster.job_name or job_name or ""
  task = cluster.task if cluster.task is not None else (task or 0)
  if task < 0:
    raise ValueError(f"--task must be >= 0, got {task}.")
  learner_address = None
  # Raises distributed.ClusterError (a ValueError) for an unreadable or empty file.
  secret = distributed.cluster_secret(cluster.cluster_secret_file)
  if job_name:
    if config.mode != settings.TRAIN:
      raise ValueError("--job_name is for training; test on one machine (--job_name=).")
    learner_address = distributed.parse_cluster(cluster.cluster)[distributed.LEARNER_JOB][0]
  return job_name, task, learner_address, secret


def _run(config, cluster, stop_request):
  """Tests, acts or trains; the exit code of what ended it (experiment_flags.py's docstring).
  The run's modules load here, TensorFlow's ops and the custom batching op with them: a stop
  meanwhile is still main's "Stopped:" line."""
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.configuration import settings
  from scalable_agent_tf2.run import actor_process
  from scalable_agent_tf2.run import training
  from scalable_agent_tf2.runfiles import run_directory
  from scalable_agent_tf2.transport import distributed
  from scalable_agent_tf2.transport import replay_service
  try:
    job_name, task, learner_address, secret = _cluster_role(config, cluster, distributed)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  try:
    if config.mode == settings.TEST:
      return _test(config, stop_request)
    elif job_name == distributed.ACTOR_JOB:
      actor_process.run_actor_process(config, learner_address, task, secret=secret,
                                      stop_request=stop_request)
    else:
      training.train(config, listen_address=learner_address, cluster_secret=secret,
                     insecure_open_cluster=cluster.insecure_open_cluster,
                     stop_request=stop_request)
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


def _test(config, stop_request):
  """Test mode; SIGINT or SIGTERM (the command's StopRequest raises Stopping) stops it, its
  environments closed, with a "Stopped:" line and TEST_STOPPED: nothing written, or (a signal
  while the results were written, which waits for them) both results files written."""
  from scalable_agent_tf2.run import evaluation  # pylint: disable=g-import-not-at-top
  try:
    evaluation.evaluate(config, stop_request=stop_request)
  except (KeyboardInterrupt, stop_signals.Stopping) as interrupt:
    stop_signals.ignore_stop_signals()  # A second signal would cut the closing short.
    name = stop_signals.interrupt_name(interrupt)
    written = getattr(interrupt, "paths", None)  # evaluation.StoppedAfterWriting's.
    print(f"Stopped: interrupted ({name}) while writing the results; both were written "
          f"first: {written[0]}, {written[1]}." if written else
          f"Stopped: interrupted ({name}) while testing; no results written.", flush=True)
    # evaluate closed its policy: the evaluation threads' next step fails, and each closes
    # its environments (their processes and shared memory) on its way out.
    _join_threads("evaluation-", _TEST_STOP_GRACE_SECS)
    return TEST_STOPPED
  return 0


def _join_threads(prefix, timeout):
  """Waits up to `timeout` seconds in all for the threads whose name starts with prefix."""
  deadline = time.monotonic() + timeout
  for thread in threading.enumerate():
    if thread.name.startswith(prefix):
      thread.join(max(0.0, deadline - time.monotonic()))


def stopped_before_start(config, interrupt, job_name=""):
  """The "Stopped:" line of a run stopped before its threads started (training.py's words)."""
  # pylint: disable-next=g-import-not-at-top
  from scalable_agent_tf2.configuration import settings
  name = stop_signals.interrupt_name(interrupt)
  if config.mode == settings.TEST:
    return f"Stopped: interrupted ({name}) before testing started; nothing was played."
  if job_name == "actor":  # The learner owns the run's checkpoints.
    return f"Stopped: interrupted ({name}) before acting started."
  latest = checkpoints.latest_checkpoint(config.logdir)
  if latest is None:
    return (f"Stopped: interrupted ({name}) before training started; nothing trained, "
            "nothing to save.")
  path = os.path.join(checkpoints.checkpoint_dir(config.logdir), latest[0])
  return (f"Stopped: interrupted ({name}) before training started; checkpoint {path} "
          f"unchanged at {latest[1]:,} frames.")


if __name__ == "__main__":
  run()
