"""The processes of a population (driver.py): its members, each an ordinary
`experiment.py --mode=train` run, and optionally one shared LASER replay service.

TensorFlow-free: the driver reads the members' run logs (runlog.py) and checkpoint files
(checkpoints.py) and talks to its children only through signals and exit codes.
"""
import collections
import dataclasses
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Callable
from typing import Optional

from scalable_agent_tf2.population import pbt
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog

# Children run in the directory that holds the package, so that `-m` finds it.
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# experiment.py's command line as a module of the package, so that an installed copy (pip
# install ., where no experiment.py is) runs its members too.
EXPERIMENT_COMMAND = ("-m", "scalable_agent_tf2.run.experiment_main")
MEMBER_OUTPUT_FILE = "output.log"
REPLAY_SERVICE_OUTPUT_FILE = "replay_service.log"
# A replay service that ends sooner than this after its start counts as failing to start.
_SERVICE_MIN_SECS = 60.0


def tail_text(path, lines=15):
  """The last lines of a process's output file (to show why it stopped)."""
  try:
    with open(path, errors="replace") as f:
      return "".join(collections.deque(f, maxlen=lines))
  except FileNotFoundError:
    return "(no output)"


def checkpoint_frames(logdir):
  """Frames of a run's newest checkpoint (0 without one)."""
  latest = checkpoints.latest_checkpoint(logdir)
  return latest[1] if latest else 0


@dataclasses.dataclass
class Member:
  """The driver's view of one member."""
  index: int
  logdir: str
  record: pbt.LineageRecord          # Its current generation.
  recent: collections.deque          # (frames, level, return) along its lineage.
  tail: runlog.LogTail
  generation_episodes: int = 0       # Episodes in its current generation.
  frames: int = 0                    # Its learner's frames (latest progress record).
  process: Optional[subprocess.Popen] = None
  starts: int = 0
  crashes: int = 0                   # Consecutive crashes without a new checkpoint.
  frames_at_start: int = -1
  finished: bool = False

  @property
  def hyperparameters(self):
    return self.record.hyperparameters

  @property
  def output_path(self):
    return os.path.join(self.logdir, MEMBER_OUTPUT_FILE)

  def episodes(self):
    return [(level, episode_return) for _, level, episode_return in self.recent]

  def read_log(self):
    """Takes in what the member logged since the last call: episodes and its frames."""
    for record in self.tail.read():
      if record.get("kind") == runlog.EPISODE:
        self.recent.append((record["frames"], record["level"], record["episode_return"]))
        self.generation_episodes += 1
      elif record.get("kind") == runlog.PROGRESS:
        self.frames = int(record["frames"])

  def start(self, argv):
    """Starts the member's process (its output appended to MEMBER_OUTPUT_FILE)."""
    self.starts += 1
    self.frames_at_start = checkpoint_frames(self.logdir)
    with open(self.output_path, "a") as output:
      self.process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=REPO_DIR)


def stop_members(members, timeout_secs, print_fn):
  """SIGTERM to every running member (each writes its checkpoint), then waits for them; one
  that takes longer than timeout_secs is killed."""
  running = [m for m in members if m.process is not None and m.process.poll() is None]
  for member in running:
    member.process.send_signal(signal.SIGTERM)
  for member in running:
    try:
      member.process.wait(timeout_secs)
    except subprocess.TimeoutExpired:
      print_fn(f"[pbt] member {member.index} did not stop within {timeout_secs:.0f} s; "
               f"killed (its last checkpoint is older).")
      member.process.kill()
      member.process.wait()


CommandFn = Callable[[int, str, int, dict], list]


def experiment_command(experiment_flags, member_prefix=""):
  """CommandFn for experiment.py members: (member, logdir, seed, hyperparameters) -> argv.

  Args:
    experiment_flags: experiment.py flags every member gets.
    member_prefix: a command put before each member's (e.g. a cluster launcher); "{member}"
      in it is replaced by the member's index.
  """
  def command(member, logdir, seed, hyperparameters):
    prefix = shlex.split(member_prefix.replace("{member}", str(member)))
    return [*prefix, sys.executable, *EXPERIMENT_COMMAND, "--mode=train", f"--logdir={logdir}",
            f"--seed={seed}", *experiment_flags,
            *(f"--{name}={value!r}" for name, value in sorted(hyperparameters.items()))]
  return command


def free_loopback_address():
  """"localhost:PORT" with a port nothing listens on now (the OS's choice)."""
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return f"localhost:{s.getsockname()[1]}"


@dataclasses.dataclass(frozen=True)
class SharedReplay:
  """One replay service process every member feeds and samples (LASER section 5.4).

  Attributes:
    address: "host:port" the service listens on (loopback: members run on this machine).
    capacity: unrolls it holds (FIFO by episode).
    seed: seeds its sampling.
  """
  address: str
  capacity: int
  seed: int = 0

  def service_command(self):
    """argv of the replay service process."""
    return [sys.executable, "-m", "scalable_agent_tf2.transport.replay_service",
            f"--address={self.address}", f"--replay_capacity={self.capacity}",
            f"--seed={self.seed}"]

  def member_flags(self, logdir):
    """experiment.py flags that make a member (logdir .../member_NN) share the replay, under
    its member name."""
    return ["--laser_replay", f"--shared_replay_address={self.address}",
            f"--agent_tag={os.path.basename(os.path.normpath(logdir))}"]


class ReplayService:
  """The shared replay service's process: started, restarted when it ends, stopped."""

  def __init__(self, shared_replay, logdir, max_failures, print_fn):
    """Args:
      shared_replay: SharedReplay.
      logdir: the population's directory (the service's output goes to
        REPLAY_SERVICE_OUTPUT_FILE there).
      max_failures: quick exits in a row (within _SERVICE_MIN_SECS of a start) that stop
        the population.
    """
    self.shared_replay = shared_replay
    self.output_path = os.path.join(logdir, REPLAY_SERVICE_OUTPUT_FILE)
    self.process = None
    self._max_failures = max_failures
    self._print = print_fn
    self._started_at = 0.0
    self._failures = 0  # Consecutive quick exits.

  def start(self):
    self._started_at = time.monotonic()
    with open(self.output_path, "a") as output:
      self.process = subprocess.Popen(self.shared_replay.service_command(), stdout=output,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      cwd=REPO_DIR)

  def check(self):
    """Restarts a service that ended (its members reconnect to the new one).

    Returns:
      1 (the exit code to stop with) when it ended within _SERVICE_MIN_SECS of its start more
      than max_failures times in a row (e.g. its address is taken), else None.
    """
    code = self.process.poll()
    if code is None:
      return None
    quick = time.monotonic() - self._started_at < _SERVICE_MIN_SECS
    self._failures = self._failures + 1 if quick else 1
    if self._failures > self._max_failures:
      self._print(f"[pbt] the replay service keeps stopping at once (exit code {code}); "
                  f"stopping. See {self.output_path}:\n{tail_text(self.output_path)}")
      return 1
    self.start()
    self._print(f"[pbt] the replay service stopped (exit code {code}); restarted, empty, at "
                f"{self.shared_replay.address}. See {self.output_path}.")
    return None

  def stop(self):
    if self.process is None or self.process.poll() is not None:
      return
    self.process.send_signal(signal.SIGTERM)  # It prints its final contents and exits.
    try:
      self.process.wait(30)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()
