"""Starts (and stops) a whole cluster on this machine: one learner and N actor processes.

    python -m scalable_agent_tf2.run.launch --num_actor_processes=2 -- \\
        --level_name=atari/pong --num_actors=8 --logdir=/tmp/pong_cluster

Everything after "--" goes to every experiment.py process (the learner and the actors); the
cluster is {"learner": ["localhost:PORT"]} (loopback only). Output lines are prefixed with
the process's role. The launcher returns when the learner finishes (its actors then stop by
themselves); Ctrl-C or SIGTERM stops the learner (which writes its checkpoint) and the actors,
within about SIGNAL_STOP_SECS of the learner's checkpoint, whatever an actor process does (a
frozen one is killed).
An actor process that dies is reported with its last lines; the others and the learner go on.
A learner that fails or is killed is reported at once with its exit code and last lines, the
actors are stopped within seconds, and the launcher exits non-zero.

Only its own processes can join: the launcher draws a random secret for the cluster
(transport/credentials.py: every call to the learner must prove it) and hands it to its processes in
the environment (IMPALA_CLUSTER_SECRET; never on a command line, which `ps` shows anyone). It
is also written to <logdir>/cluster_secret (mode 0600), for an actor process started by hand
(--cluster_secret_file=<logdir>/cluster_secret). A secret the user gives (that environment
variable, or --cluster_secret_file among the experiment flags) is used instead.
"""
import collections
import json
import os
import secrets
import signal
import site
import socket
import subprocess
import sys
import threading
import time

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.runfiles import run_directory

# experiment.py's command line as a module of the package, so that an installed copy (pip
# install ., where no experiment.py is) starts its processes too.
EXPERIMENT_COMMAND = ("-m", "scalable_agent_tf2.run.experiment_main")
# The directory that holds the package: a checkout, or site-packages once installed.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


# Seconds the actors get to stop by themselves after the learner ended well (they notice at
# their next call to it), and after a SIGTERM when the learner failed; then they are killed.
ACTORS_STOP_SECS = 120.0
ACTORS_TERMINATE_SECS = 10.0
# A stop signal to the launcher: the learner and the actor processes get SIGTERM at once. An
# actor process still running this long after it (frozen by SIGSTOP, a hung machine) is
# killed: a healthy one stops in about a second and only the learner writes checkpoints. The
# learner is killed when it is still running this long after its `Stopped:` line (its final
# checkpoint is written by then; what is left is closing, and the final learning curve, which
# its own child process finishes). The launcher so returns within about 5 s of the learner's
# final checkpoint (docs/CLUSTERS.md).
SIGNAL_STOP_SECS = 5.0
# Lines of a process's output kept to show when it dies.
LAST_LINES = 20
# The generated secret's file, in the logdir.
SECRET_FILE_NAME = "cluster_secret"
# distributed.SECRET_ENVIRONMENT_VARIABLE (the launcher does not import TensorFlow).
SECRET_VARIABLE = "IMPALA_CLUSTER_SECRET"


class _Process:
  """One process of the cluster, its output forwarded with a prefix and its tail kept."""

  def __init__(self, role, command, env=None):
    self.role = role
    self.last_lines = collections.deque(maxlen=LAST_LINES)
    self.reported = False
    self.killed = False  # By the launcher, at a stop (not a death to report).
    self.stopped_at = None  # When it printed its `Stopped:` line (a learner's: saved).
    self.popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True, env=env)
    self._forwarder = threading.Thread(target=self._forward, daemon=True)
    self._forwarder.start()

  def _forward(self):
    for line in self.popen.stdout:
      self.last_lines.append(line.rstrip("\n"))
      if line.startswith("Stopped:") and self.stopped_at is None:
        self.stopped_at = time.monotonic()
      sys.stdout.write(f"[{self.role}] {line}")
      sys.stdout.flush()

  def tail(self):
    self._forwarder.join(timeout=2.0)  # The last lines a dead process wrote.
    return "\n".join(f"  {line}" for line in self.last_lines)

  def terminate(self):
    if self.popen.poll() is None:
      self.popen.send_signal(signal.SIGTERM)

  def kill(self, why):
    """Kills the process (this launcher's own child) at a stop, saying why."""
    if self.popen.poll() is None and not self.killed:
      self.killed = self.reported = True
      _say(f"{self.role} {why}; killing it.")
      self.popen.kill()


def _say(message):
  print(f"[launch] {message}", flush=True)


def _stop_actors(actors, wait_secs, terminate_secs=ACTORS_TERMINATE_SECS):
  """Waits up to `wait_secs` for the actors to end, SIGTERMs them, waits `terminate_secs`
  more, then kills stragglers."""
  deadline = time.monotonic() + wait_secs
  for actor in actors:
    try:
      actor.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      actor.terminate()
  deadline = time.monotonic() + terminate_secs
  for actor in actors:
    try:
      actor.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      actor.kill("did not stop")
    actor.popen.wait()


def _kill_what_does_not_stop(learner, actors, signalled_at):
  """After a stop signal: kills the actor processes still running SIGNAL_STOP_SECS after it,
  and the learner SIGNAL_STOP_SECS after its `Stopped:` line."""
  now = time.monotonic()
  if now - signalled_at >= SIGNAL_STOP_SECS:
    for actor in actors:
      actor.kill(f"did not stop within {SIGNAL_STOP_SECS:g} s of the stop signal (frozen or "
                 "hung)")
  if learner.stopped_at is not None and now - learner.stopped_at >= SIGNAL_STOP_SECS:
    learner.kill(f"wrote its final checkpoint but was still closing {SIGNAL_STOP_SECS:g} s "
                 "later")


def _report_dead_actors(actors):
  for actor in actors:
    code = actor.popen.poll()
    if code is not None and code != 0 and not actor.reported:
      actor.reported = True
      _say(f"{actor.role} exited with code {code}; the learner trains on the other actor "
           f"processes. Its last lines:\n{actor.tail()}")


def _check_flags(experiment_flags):
  """The experiment flags checked once, here, before any process starts: (logdir, error text
  or None).

  Otherwise each of the 1 + N processes would print the same error and the launcher would
  report dead actors of a cluster whose learner never started.
  """
  try:
    config = config_lib.config_from_argv(["--mode=train", *experiment_flags])
    run_directory.check_usable(config.logdir)
  except ValueError as error:
    return None, str(error)
  return config.logdir, None


def _secret_file_flag(experiment_flags):
  """--cluster_secret_file's value among the experiment flags, or ""."""
  found = ""
  for index, flag in enumerate(experiment_flags):
    if flag.startswith("--cluster_secret_file="):
      found = flag.split("=", 1)[1]
    elif flag == "--cluster_secret_file" and index + 1 < len(experiment_flags):
      found = experiment_flags[index + 1]
  return found


def _protect(logdir, experiment_flags, environ):
  """The environment of the cluster's processes (with its secret) and the line that says how
  the cluster is protected.

  A secret the user gave (IMPALA_CLUSTER_SECRET, or --cluster_secret_file, which the
  processes read themselves) is kept; otherwise a random one is drawn and written to
  <logdir>/cluster_secret, readable by this user alone.

  Raises:
    ValueError: a given secret file that cannot be read or is empty, or the secret file that
      cannot be written.
  """
  env = dict(environ)
  secret_file = _secret_file_flag(experiment_flags)
  if secret_file:
    try:  # Checked once, here (as distributed.cluster_secret will in every process).
      with open(secret_file, "rb") as f:
        given = f.read().strip()
    except OSError as error:
      raise ValueError(f"Cannot read the cluster secret file {secret_file} "
                       f"({error.strerror or error}).") from error
    if not given:
      raise ValueError(f"The cluster secret file {secret_file} is empty; write the secret "
                       f"into it.")
    return env, f"The cluster is protected by the secret in {secret_file}."
  if environ.get(SECRET_VARIABLE, "").strip():
    return env, f"The cluster is protected by the secret in {SECRET_VARIABLE}."
  secret = secrets.token_hex(32)
  path = os.path.join(logdir, SECRET_FILE_NAME)
  try:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # A file left by an earlier run keeps no wider mode.
    with os.fdopen(descriptor, "w") as f:
      f.write(secret + "\n")
  except OSError as error:
    raise ValueError(f"Cannot write the cluster's secret to {path} "
                     f"({error.strerror or error}).") from error
  env[SECRET_VARIABLE] = secret
  return env, (f"The cluster is protected by a generated secret; to add an actor process by "
               f"hand, pass it --cluster_secret_file={path}.")


def _finds_package(env):
  """The processes' environment with the package's directory on PYTHONPATH where needed.

  They run the experiment as a module (-m) in the launcher's working directory, which need not
  hold a checkout's package (a launcher started from elsewhere, or a test's); an installed
  package is on their path already.
  """
  if _PACKAGE_PARENT in (*site.getsitepackages(), site.getusersitepackages()):
    return env
  paths = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
  if _PACKAGE_PARENT in paths:
    return env
  return dict(env, PYTHONPATH=os.pathsep.join([_PACKAGE_PARENT, *paths]))


def launch(num_actor_processes, experiment_flags, port=None):
  """Runs the cluster; returns the learner's exit code (1 if it died by a signal, 2 for bad
  flags, found before any process starts)."""
  logdir, error = _check_flags(experiment_flags)
  if not error:
    try:
      env, protection = _protect(logdir, experiment_flags, os.environ)
    except ValueError as secret_error:
      error = str(secret_error)
  if error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  _say(protection)
  env = _finds_package(env)
  address = f"localhost:{port or _free_port()}"
  cluster = json.dumps({"learner": [address]})
  common = [sys.executable, *EXPERIMENT_COMMAND, "--mode=train", f"--cluster={cluster}",
            *experiment_flags]
  learner = _Process("learner", common + ["--job_name=learner"], env)
  actors = [_Process(f"actor {k}", common + ["--job_name=actor", f"--task={k}"], env)
            for k in range(num_actor_processes)]
  signalled = []  # When the first stop signal came.

  def stop(signum=None, frame=None):
    del frame
    if not signalled:
      name = signal.Signals(signum).name if signum else "SIGINT"
      _say(f"{name}: stopping; the learner saves a checkpoint, the actors stop.")
      signalled.append(time.monotonic())
    for process in [learner] + actors:  # Again at a repeated signal: it counts there too.
      process.terminate()

  previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
  try:
    while learner.popen.poll() is None:
      time.sleep(0.5)
      _report_dead_actors(actors)
      if signalled:
        _kill_what_does_not_stop(learner, actors, signalled[0])
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  code = learner.popen.wait()
  if signalled:  # The actors had SIGTERM with the learner; those still running are killed.
    _stop_actors(actors, signalled[0] + SIGNAL_STOP_SECS - time.monotonic(), terminate_secs=0)
  if code == 0 or learner.killed:  # Killed after its final checkpoint.
    _stop_actors(actors, ACTORS_STOP_SECS)
    return 0
  how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
  _say(f"the learner {how}; stopping the actors. Its last lines:\n{learner.tail()}")
  _stop_actors(actors, 0.0)
  return code if code > 0 else 1


def _parser():
  """The command line: command_settings.LaunchSettings' flags (defaults, help, checks there)."""
  return command_line.CommandParser(
      command_settings.LaunchSettings, prog="python -m scalable_agent_tf2.run.launch",
      usage="python -m scalable_agent_tf2.run.launch [flags] -- [experiment.py flags of every "
            "process]",
      description=__doc__.split("\n")[0] + " Flags after '--' go to every experiment process.")


def main(argv=None):
  """Exit code: the learner's, or 2 for bad flags (found before any process starts)."""
  try:
    args, rest = _parser().parse_settings(argv, known_only=True)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  if rest and rest[0] == "--":
    rest = rest[1:]
  return launch(args.num_actor_processes, rest, args.port)


if __name__ == "__main__":
  sys.exit(main())
