"""Population-based training (IMPALA Appendix F): runs and evolves a population of members.

    python -m scalable_agent_tf2.population --logdir=/tmp/pbt --population_size=24 -- \\
        --level_name=dmlab30 --num_actors=150

Every member is an ordinary `experiment.py --mode=train` process (flags after "--" go to all
of them) with its own logdir, <logdir>/member_NN, its own seed and its own hyperparameters
(entropy cost, learning rate, RMSProp epsilon; on Atari also the gradient-norm clip), drawn
from Table D.1 (--initial_hyperparameters=table_d1, the paper's) or the same for all
(=flags). The driver reads each member's log.jsonl (monitoring.py); when a member is ready
(burn-in over and --ready_episodes new episodes, pbt.is_ready), it applies pbt.evolve: the
member is stopped (SIGTERM: it writes a checkpoint), a better member's latest checkpoint is
copied into it when exploiting, and it is restarted with the new hyperparameters as flags
(training restores the checkpoint, and the flags' hyperparameters win over the checkpoint's).
Every generation is a line of <logdir>/pbt_lineage.jsonl; `--curve_of=K` prints member K's
learning curve rebuilt across its ancestors (pbt.reconstruct_curve).

A member that crashes is restarted from its last checkpoint (with the same hyperparameters);
one that crashes --max_crashes times in a row without a new checkpoint stops the population.
Ctrl-C or SIGTERM stops every member (each writes its checkpoint); the same command resumes
the population from its lineage and the members' checkpoints.

With --shared_replay_capacity=N the members share one LASER episode replay (Schmitt et al.,
2019, section 5.4: the agents of a sweep or population feed and sample one replay): the driver
starts a replay service process (python -m scalable_agent_tf2.replay_service, its output in
<logdir>/replay_service.log) on a free loopback port, gives every member --laser_replay,
--shared_replay_address and --agent_tag=member_NN, restarts the service if it dies (empty; the
members reconnect within their --shared_replay_connect_secs) and stops it at the end. Members
restarted by PBT reconnect to the same service and keep feeding it. The flags after "--" must
include --replay_fraction (e.g. LASER's 0.875).

Members run as subprocesses of this driver, on this machine. On a cluster, give
--member_prefix a command that runs a process on another host and forwards SIGTERM (e.g.
"srun --nodes=1 --ntasks=1"; "{member}" is replaced by the member's index), with --logdir on
a file system every host shares.
"""
import argparse
import collections
import dataclasses
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

import numpy as np

from scalable_agent_tf2 import pbt

_REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EXPERIMENT = os.path.join(_REPO_DIR, "experiment.py")
# checkpoints.py's layout (CHECKPOINT_SUBDIR, and tf.train.CheckpointManager's state file);
# not imported, to keep this driver free of TensorFlow (tests check they agree).
CHECKPOINT_SUBDIR = "checkpoints"
CHECKPOINT_STATE_FILE = "checkpoint"
SETTINGS_FILE = "settings.json"
MEMBER_OUTPUT_FILE = "output.log"
REPLAY_SERVICE_OUTPUT_FILE = "replay_service.log"
TABLE_D1, FLAGS_INITIAL = "table_d1", "flags"
# experiment.py flags the driver sets for every member itself.
_DRIVER_FLAGS = ("logdir", "mode", "seed", "job_name", "task", "cluster")
# A replay service that ends sooner than this after its start counts as failing to start.
_SERVICE_MIN_SECS = 60.0


@dataclasses.dataclass(frozen=True)
class Settings:
  """A population run. Defaults: IMPALA Appendix F (see pbt.py for the sources).

  Attributes:
    logdir: the population's directory (members in logdir/member_NN).
    initial_hyperparameters: one dict per member (its generation 0), keyed by experiment.py
      flag names; its length is the population size.
    adapted: the names pbt.perturb changes (pbt.ADAPTED, or pbt.ADAPTED_ATARI).
    multi_task: fitness as mean capped human-normalised score (suites) or raw return.
    burn_in_frames, ready_episodes, exploit_threshold, perturb_probability, perturb_factor:
      Appendix F's 20M frames, 5,000 episodes, 5 points, 1/3 and 1.2.
    seed: seeds the driver's decisions and (with the member index) the members' --seed.
    poll_secs: how often the members' logs and processes are checked.
    stop_timeout_secs: how long a stopping member may take to write its checkpoint.
    max_crashes: consecutive crashes of one member without a new checkpoint that stop the
      population.
  """
  logdir: str
  initial_hyperparameters: tuple
  adapted: tuple = pbt.ADAPTED
  multi_task: bool = True
  burn_in_frames: int = pbt.BURN_IN_FRAMES
  ready_episodes: int = pbt.READY_EPISODES
  exploit_threshold: float = pbt.EXPLOIT_THRESHOLD
  perturb_probability: float = pbt.PERTURB_PROBABILITY
  perturb_factor: float = pbt.PERTURB_FACTOR
  seed: int = 1
  poll_secs: float = 10.0
  stop_timeout_secs: float = 300.0
  max_crashes: int = 3

  @property
  def population_size(self):
    return len(self.initial_hyperparameters)


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
    return [sys.executable, "-m", "scalable_agent_tf2.replay_service",
            f"--address={self.address}", f"--replay_capacity={self.capacity}",
            f"--seed={self.seed}"]

  def member_flags(self, logdir):
    """experiment.py flags that make a member (logdir .../member_NN) share the replay, under
    its member name."""
    return ["--laser_replay", f"--shared_replay_address={self.address}",
            f"--agent_tag={os.path.basename(os.path.normpath(logdir))}"]


def free_loopback_address():
  """"localhost:PORT" with a port nothing listens on now (the OS's choice)."""
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return f"localhost:{s.getsockname()[1]}"


# ---------------------------------------------------------------------------------------------
# Checkpoint files.
# ---------------------------------------------------------------------------------------------


class CopyError(RuntimeError):
  """A checkpoint could not be copied intact."""


def latest_checkpoint(logdir):
  """(file-name prefix, frames) of a run's newest checkpoint ("ckpt-1200", 1200), or None.

  Reads the CheckpointManager's state file (text: model_checkpoint_path: "ckpt-N"); N is the
  frame count (checkpoints.Checkpointer.save numbers checkpoints by frames).
  """
  path = os.path.join(logdir, CHECKPOINT_SUBDIR, CHECKPOINT_STATE_FILE)
  try:
    with open(path) as f:
      text = f.read()
  except FileNotFoundError:
    return None
  match = re.search(r'^model_checkpoint_path: "([^"]+)"', text, re.M)
  if match is None:
    return None
  prefix = os.path.basename(match.group(1))
  number = re.search(r"-(\d+)$", prefix)
  return prefix, int(number.group(1)) if number else 0


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def copy_checkpoint(source_logdir, target_logdir, attempts=3):
  """Replaces the target run's checkpoints with the source run's newest one, verified.

  The source may be training (and checkpointing) meanwhile: the files named by its state file
  are complete (TensorFlow writes the state file last) and survive several more saves
  (CheckpointManager keeps 5). The files are copied to a staging directory and every one's
  SHA-256 is checked against its source before the target's own checkpoints are replaced, so
  a failed copy leaves the target as it was.

  Returns:
    The copied checkpoint's frames.

  Raises:
    CopyError: no checkpoint in the source, or no intact copy after `attempts`.
  """
  source_dir = os.path.join(source_logdir, CHECKPOINT_SUBDIR)
  target_dir = os.path.join(target_logdir, CHECKPOINT_SUBDIR)
  staging = target_dir + ".incoming"
  error = None
  for _ in range(attempts):
    latest = latest_checkpoint(source_logdir)
    if latest is None:
      raise CopyError(f"No checkpoint in {source_dir} to copy.")
    prefix, frames = latest
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
      names = sorted(n for n in os.listdir(source_dir) if n.startswith(prefix + "."))
      if not any(n.endswith(".index") for n in names):
        raise CopyError(f"{prefix}.index missing")
      if os.path.exists(os.path.join(source_dir, SETTINGS_FILE)):
        names.append(SETTINGS_FILE)
      for name in names:
        source = os.path.join(source_dir, name)
        shutil.copyfile(source, os.path.join(staging, name))
        if _sha256(source) != _sha256(os.path.join(staging, name)):
          raise CopyError(f"{name} changed while it was copied")
    except (OSError, CopyError) as failure:  # E.g. deleted by the source's manager meanwhile.
      error = failure
      continue
    os.makedirs(target_dir, exist_ok=True)
    for name in os.listdir(target_dir):
      path = os.path.join(target_dir, name)
      if os.path.isdir(path) and name.startswith("ckpt-"):  # A save cut short (*_temp).
        shutil.rmtree(path)
      elif name.startswith("ckpt-") or name == CHECKPOINT_STATE_FILE:
        os.remove(path)
    for name in names:
      os.replace(os.path.join(staging, name), os.path.join(target_dir, name))
    os.rmdir(staging)
    state = os.path.join(target_dir, CHECKPOINT_STATE_FILE)
    with open(state + ".tmp", "w") as f:
      f.write(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')
    os.replace(state + ".tmp", state)
    return frames
  shutil.rmtree(staging, ignore_errors=True)
  raise CopyError(f"Could not copy the checkpoint of {source_dir} intact: {error}.")


# ---------------------------------------------------------------------------------------------
# Members.
# ---------------------------------------------------------------------------------------------


class LogTail:
  """Reads the complete lines appended to a file since the last read."""

  def __init__(self, path, offset=0):
    self.path = path
    self.offset = offset

  def read(self):
    """New records (dicts); a last line still being written waits for the next call."""
    try:
      with open(self.path, "rb") as f:
        f.seek(self.offset)
        data = f.read()
    except FileNotFoundError:
      return []
    end = data.rfind(b"\n") + 1
    self.offset += end
    records = []
    for line in data[:end].decode().splitlines():
      try:
        records.append(json.loads(line))
      except ValueError:
        pass
    return records


@dataclasses.dataclass
class Member:
  """The driver's view of one member."""
  index: int
  logdir: str
  record: pbt.LineageRecord          # Its current generation.
  recent: collections.deque          # (frames, level, return) along its lineage.
  tail: LogTail
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

  def episodes(self):
    return [(level, episode_return) for _, level, episode_return in self.recent]


CommandFn = Callable[[int, str, int, dict], list]


def experiment_command(experiment_flags, member_prefix=""):
  """CommandFn for experiment.py members: (member, logdir, seed, hyperparameters) -> argv."""
  def command(member, logdir, seed, hyperparameters):
    prefix = shlex.split(member_prefix.replace("{member}", str(member)))
    return [*prefix, sys.executable, _EXPERIMENT, "--mode=train", f"--logdir={logdir}",
            f"--seed={seed}", *experiment_flags,
            *(f"--{name}={value!r}" for name, value in sorted(hyperparameters.items()))]
  return command


class Population:
  """Runs the members, evolves them (pbt.evolve), restarts crashed ones; see the module doc."""

  def __init__(self, settings, command_fn, print_fn=print, shared_replay=None):
    """Args:
      settings: Settings.
      command_fn: CommandFn, the argv that starts a member.
      print_fn: where the driver's lines go.
      shared_replay: a SharedReplay: its service runs while the population does, and every
        member's argv gets its member_flags; None: each member keeps its own replay, if any.
    """
    self.settings = settings
    self._command = command_fn
    self.shared_replay = shared_replay
    self.service = None  # The replay service's subprocess.Popen.
    self._service_started_at = 0.0
    self._service_failures = 0  # Consecutive quick exits of the service.
    self._print = print_fn
    self._rng = np.random.default_rng(settings.seed)
    self._stop_event = threading.Event()
    self.members = []

  # Set-up: a new population, or one resumed from its lineage.

  def _setup(self):
    settings = self.settings
    os.makedirs(settings.logdir, exist_ok=True)
    records = pbt.read_lineage(settings.logdir)
    latest = pbt.latest_generations(records)
    if records and sorted(latest) != list(range(settings.population_size)):
      raise ValueError(f"{settings.logdir} holds a population of {len(latest)} members; "
                       f"--population_size is {settings.population_size}.")
    for index in range(settings.population_size):
      logdir = pbt.member_dir(settings.logdir, index)
      log_path = os.path.join(logdir, pbt.MEMBER_LOG_FILE)
      recent = collections.deque(maxlen=settings.ready_episodes)
      if records:
        record = latest[index]
        for entry in pbt.reconstruct_curve(settings.logdir, index):
          if entry.get("kind") == "episode":
            recent.append((entry["frames"], entry["level"], entry["episode_return"]))
        current = pbt.read_segment(settings.logdir, pbt.ancestry(records, index)[-1])
        generation_episodes = sum(e.get("kind") == "episode" for e in current)
      else:
        if os.path.exists(os.path.join(logdir, CHECKPOINT_SUBDIR)):
          raise ValueError(f"{logdir} has checkpoints but {settings.logdir} has no "
                           f"{pbt.LINEAGE_FILE}: use a new --logdir.")
        os.makedirs(logdir, exist_ok=True)
        record = pbt.LineageRecord(
            member=index, generation=0, parent_member=None, parent_generation=None,
            copied=False, hyperparameters=dict(settings.initial_hyperparameters[index]),
            frames=0, fitness=None, other_member=None, other_fitness=None,
            log_offset=_size(log_path))
        pbt.append_lineage(settings.logdir, record)
        generation_episodes = 0
      latest_saved = latest_checkpoint(logdir)
      member = Member(index=index, logdir=logdir, record=record, recent=recent,
                      tail=LogTail(log_path, _size(log_path)),
                      generation_episodes=generation_episodes, starts=record.generation,
                      frames=latest_saved[1] if latest_saved else 0)
      self.members.append(member)
    if records:
      self._print(f"[pbt] Resuming a population of {settings.population_size} from "
                  f"{pbt.LINEAGE_FILE}.")

  # Processes.

  def _start(self, member):
    seed = self.settings.seed + member.index + self.settings.population_size * member.starts
    member.starts += 1
    latest = latest_checkpoint(member.logdir)
    member.frames_at_start = latest[1] if latest else 0
    argv = self._command(member.index, member.logdir, seed, member.hyperparameters)
    if self.shared_replay is not None:
      argv = [*argv, *self.shared_replay.member_flags(member.logdir)]
    with open(os.path.join(member.logdir, MEMBER_OUTPUT_FILE), "a") as output:
      member.process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT,
                                        start_new_session=True, cwd=_REPO_DIR)

  def _start_service(self):
    self._service_started_at = time.monotonic()
    with open(os.path.join(self.settings.logdir, REPLAY_SERVICE_OUTPUT_FILE), "a") as output:
      self.service = subprocess.Popen(self.shared_replay.service_command(), stdout=output,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      cwd=_REPO_DIR)

  def _check_service(self):
    """Restarts a replay service that ended (its members reconnect to the new one).

    Returns:
      1 (the exit code to stop with) when it ended within _SERVICE_MIN_SECS of its start more
      than --max_crashes times in a row (e.g. its address is taken), else None.
    """
    code = self.service.poll()
    if code is None:
      return None
    output = os.path.join(self.settings.logdir, REPLAY_SERVICE_OUTPUT_FILE)
    quick = time.monotonic() - self._service_started_at < _SERVICE_MIN_SECS
    self._service_failures = self._service_failures + 1 if quick else 1
    if self._service_failures > self.settings.max_crashes:
      self._print(f"[pbt] the replay service keeps stopping at once (exit code {code}); "
                  f"stopping. See {output}:\n{_tail_text(output)}")
      return 1
    self._start_service()
    self._print(f"[pbt] the replay service stopped (exit code {code}); restarted, empty, at "
                f"{self.shared_replay.address}. See {output}.")
    return None

  def _stop_service(self):
    if self.service is None or self.service.poll() is not None:
      return
    self.service.send_signal(signal.SIGTERM)  # It prints its final contents and exits.
    try:
      self.service.wait(30)
    except subprocess.TimeoutExpired:
      self.service.kill()
      self.service.wait()

  def _stop(self, members):
    """SIGTERM to every running member (each writes its checkpoint), then waits for them."""
    running = [m for m in members if m.process is not None and m.process.poll() is None]
    for member in running:
      member.process.send_signal(signal.SIGTERM)
    for member in running:
      try:
        member.process.wait(self.settings.stop_timeout_secs)
      except subprocess.TimeoutExpired:
        self._print(f"[pbt] member {member.index} did not stop within "
                    f"{self.settings.stop_timeout_secs:.0f} s; killed (its last checkpoint "
                    f"is older).")
        member.process.kill()
        member.process.wait()

  def _read_logs(self, member):
    for record in member.tail.read():
      if record.get("kind") == "episode":
        member.recent.append((record["frames"], record["level"], record["episode_return"]))
        member.generation_episodes += 1
      elif record.get("kind") == "progress":
        member.frames = int(record["frames"])

  def _check_process(self, member):
    """Handles a member whose process ended by itself. Returns an exit code to stop with."""
    code = member.process.poll()
    if code is None:
      return None
    member.process = None
    self._read_logs(member)
    if code == 0:
      member.finished = True
      self._print(f"[pbt] member {member.index} finished ({member.frames:,} frames).")
      return None
    output = os.path.join(member.logdir, MEMBER_OUTPUT_FILE)
    if code == 2:  # experiment.py's "bad flags or unusable checkpoint".
      self._print(f"[pbt] member {member.index} refused to run (exit code 2); see {output}:"
                  f"\n{_tail_text(output)}")
      return 2
    latest = latest_checkpoint(member.logdir)
    progressed = latest is not None and latest[1] > member.frames_at_start
    member.crashes = 1 if progressed else member.crashes + 1
    if member.crashes > self.settings.max_crashes:
      self._print(f"[pbt] member {member.index} crashed {member.crashes} times in a row "
                  f"without a new checkpoint (exit code {code}); stopping. See {output}:\n"
                  f"{_tail_text(output)}")
      return 1
    self._start(member)
    self._print(f"[pbt] member {member.index} crashed (exit code {code}); restarted from "
                f"its last checkpoint ({member.frames_at_start:,} frames).")
    return None

  # Evolution.

  def _evolve(self, member):
    settings = self.settings
    members = self.members
    # A member without a checkpoint yet has nothing to copy: its fitness counts as unknown.
    fitnesses = [pbt.fitness(m.episodes(), settings.multi_task)
                 if latest_checkpoint(m.logdir) is not None else None for m in members]
    decision = pbt.evolve(
        member.index, fitnesses, [m.hyperparameters for m in members], settings.adapted,
        self._rng, threshold=settings.exploit_threshold,
        probability=settings.perturb_probability, factor=settings.perturb_factor)
    self._stop([member])
    member.process = None
    self._read_logs(member)
    if decision.copy_from is not None:
      parent = members[decision.copy_from]
      try:
        frames = copy_checkpoint(parent.logdir, member.logdir)
      except CopyError as error:
        self._print(f"[pbt] member {member.index}: {error} It keeps its own weights.")
        decision = dataclasses.replace(decision, copy_from=None,
                                       hyperparameters=pbt.perturb(
                                           member.hyperparameters, settings.adapted,
                                           self._rng, settings.perturb_probability,
                                           settings.perturb_factor))
    if decision.copy_from is not None:
      # Its recent episodes are now the parent's: the weights played them.
      member.recent = collections.deque(((f, l, r) for f, l, r in parent.recent if f <= frames),
                                        maxlen=settings.ready_episodes)
      parent_key = (parent.index, parent.record.generation)
    else:
      latest = latest_checkpoint(member.logdir)
      frames = latest[1] if latest else 0
      parent_key = (member.index, member.record.generation)
    member.record = pbt.LineageRecord(
        member=member.index, generation=member.record.generation + 1,
        parent_member=parent_key[0], parent_generation=parent_key[1],
        copied=decision.copy_from is not None, hyperparameters=decision.hyperparameters,
        frames=frames, fitness=decision.own_fitness, other_member=decision.other,
        other_fitness=decision.other_fitness, log_offset=member.tail.offset)
    pbt.append_lineage(settings.logdir, member.record)
    member.generation_episodes = 0
    member.crashes = 0
    member.frames = frames
    self._start(member)
    action = (f"copied member {decision.copy_from}" if decision.copy_from is not None
              else "kept its weights")
    self._print(f"[pbt] member {member.index} generation {member.record.generation}: "
                f"fitness {_format(decision.own_fitness)} vs member {decision.other}'s "
                f"{_format(decision.other_fitness)}: {action} ({frames:,} frames); "
                f"hyperparameters {_format_hyperparameters(decision.hyperparameters)}.")

  # The loop.

  def stop(self):
    """Asks `run` to stop every member and return (any thread)."""
    self._stop_event.set()

  def run(self):
    """Runs until every member finished, `stop`, SIGTERM or Ctrl-C. Returns an exit code:
    0, 1 (a member or the shared replay service keeps crashing) or 2 (a member refuses its
    flags; bad set-up)."""
    try:
      self._setup()
    except (ValueError, OSError) as error:
      self._print(f"error: {error}")
      return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:  # Signals end the loop between steps: an evolution step is never cut.
      for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: self.stop())
    code = 0
    try:
      if self.shared_replay is not None:
        self._start_service()
        self._print(f"[pbt] replay service shared by every member at "
                    f"{self.shared_replay.address} ({self.shared_replay.capacity:,} unrolls; "
                    f"output in {REPLAY_SERVICE_OUTPUT_FILE}).")
      for member in self.members:
        self._start(member)
      self._print(f"[pbt] {len(self.members)} members started under {self.settings.logdir}.")
      while not self._stop_event.wait(self.settings.poll_secs):
        if self.shared_replay is not None and self._check_service():
          return 1
        for member in self.members:
          self._read_logs(member)
          if member.process is not None:
            code = self._check_process(member) or 0
            if code:
              return code
        if all(m.finished for m in self.members):
          self._print("[pbt] every member finished.")
          return 0
        for member in self._rng.permutation(len(self.members)):
          member = self.members[member]
          if member.process is not None and pbt.is_ready(
              member.frames, member.generation_episodes, self.settings.burn_in_frames,
              self.settings.ready_episodes):
            self._evolve(member)
      return code
    finally:
      self._stop(self.members)
      self._stop_service()  # After the members: none of them loses it while stopping.
      for signum, handler in previous.items():
        signal.signal(signum, handler)
      lineage = os.path.join(self.settings.logdir, pbt.LINEAGE_FILE)
      self._print(f"[pbt] stopped; lineage in {lineage}.")


def _size(path):
  try:
    return os.path.getsize(path)
  except FileNotFoundError:
    return 0


def _tail_text(path, lines=15):
  try:
    with open(path, errors="replace") as f:
      return "".join(collections.deque(f, maxlen=lines))
  except FileNotFoundError:
    return "(no output)"


def _format(value):
  return "unknown" if value is None else f"{value:.3g}"


def _format_hyperparameters(hyperparameters):
  return ", ".join(f"{k} {v:.3g}" for k, v in sorted(hyperparameters.items()))


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def _resolve_experiment(experiment_flags, logdir, shared_replay=None):
  """The members' resolved config.ExperimentConfig (their flags checked before any start).

  Args:
    shared_replay: a SharedReplay whose member flags the members will get, or None.

  Raises:
    ValueError: a bad flag, with the message experiment.py would give.
  """
  driver_flags = _DRIVER_FLAGS
  if shared_replay is not None:
    driver_flags += ("shared_replay_address", "agent_tag")
  for flag in experiment_flags:
    name = flag.lstrip("-").split("=")[0]
    if name in driver_flags:
      raise ValueError(f"--{name} is set by the population driver for each member; leave it "
                       f"out of the flags after '--'.")
  if shared_replay is not None:
    experiment_flags = [*experiment_flags, *shared_replay.member_flags(logdir)]
  if _REPO_DIR not in sys.path:
    sys.path.insert(0, _REPO_DIR)
  import experiment  # pylint: disable=g-import-not-at-top
  from absl import flags as absl_flags  # pylint: disable=g-import-not-at-top
  try:
    experiment.FLAGS(["experiment.py", f"--logdir={logdir}", *experiment_flags])
    return experiment.config_from_flags()
  except absl_flags.Error as error:
    raise ValueError(str(error)) from error
  finally:
    experiment.FLAGS.unparse_flags()


def settings_from_arguments(args, experiment_flags, shared_replay=None):
  """(Settings, the members' config) from the driver's arguments and experiment.py flags.

  Args:
    shared_replay: the SharedReplay the members will share, or None.

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  if args.population_size < 1:
    raise ValueError(f"--population_size must be at least 1, got {args.population_size}.")
  for name in ("ready_episodes", "poll_secs", "stop_timeout_secs", "max_crashes"):
    if getattr(args, name) <= 0:
      raise ValueError(f"--{name} must be positive, got {getattr(args, name)}.")
  if args.burn_in_frames < 0 or math.isnan(args.exploit_threshold):
    raise ValueError("--burn_in_frames must be >= 0 and --exploit_threshold a number.")
  config = _resolve_experiment(experiment_flags, pbt.member_dir(args.logdir, 0),
                               shared_replay)
  adapted = pbt.ADAPTED
  if config.is_atari and config.max_grad_norm > 0:
    adapted = pbt.ADAPTED_ATARI  # Section 5.3.2, Table G.1: the clip is adapted on Atari.
  given = [n for n in pbt.ADAPTED
           if any(f.lstrip("-").split("=")[0] == n for f in experiment_flags)]
  if args.initial_hyperparameters == TABLE_D1 and given:
    raise ValueError(f"--initial_hyperparameters={TABLE_D1} draws {', '.join(given)} from "
                     f"Table D.1; leave them out of the flags after '--', or use "
                     f"--initial_hyperparameters={FLAGS_INITIAL}.")
  rng = np.random.default_rng(args.seed)
  initial = []
  for _ in range(args.population_size):
    values = {name: float(getattr(config, name)) for name in adapted}
    if args.initial_hyperparameters == TABLE_D1:
      values.update(pbt.sample_hyperparameters(rng))
    initial.append(values)
  settings = Settings(
      logdir=args.logdir, initial_hyperparameters=tuple(initial), adapted=adapted,
      multi_task=config.is_multi_task, burn_in_frames=args.burn_in_frames,
      ready_episodes=args.ready_episodes, exploit_threshold=args.exploit_threshold,
      seed=args.seed, poll_secs=args.poll_secs, stop_timeout_secs=args.stop_timeout_secs,
      max_crashes=args.max_crashes)
  return settings, config


def _parser():
  parser = argparse.ArgumentParser(
      prog="python -m scalable_agent_tf2.population",
      description="Population-based training (IMPALA Appendix F) of experiment.py members. "
                  "Flags after '--' go to every member.")
  parser.add_argument("--logdir", required=True, help="The population's directory.")
  parser.add_argument("--population_size", type=int, default=pbt.POPULATION_SIZE,
                      help="Members (Tables D.1 and G.1: 24).")
  parser.add_argument("--initial_hyperparameters", choices=(TABLE_D1, FLAGS_INITIAL),
                      default=TABLE_D1, help="table_d1: each member draws entropy cost, "
                      "learning rate and RMSProp epsilon from Table D.1 (the paper); flags: "
                      "every member starts from the level's presets and the flags.")
  parser.add_argument("--burn_in_frames", type=int, default=pbt.BURN_IN_FRAMES,
                      help="No evolution before a member has trained this many frames "
                      "(Appendix F: 20M).")
  parser.add_argument("--ready_episodes", type=int, default=pbt.READY_EPISODES,
                      help="A member evolves after this many new episodes; its fitness is "
                      "measured on its last this many (Appendix F: 5,000).")
  parser.add_argument("--exploit_threshold", type=float, default=pbt.EXPLOIT_THRESHOLD,
                      help="Copy a member whose fitness is more than this higher (Appendix F: "
                      "5 points of mean capped human-normalised score; raw return on a "
                      "single level).")
  parser.add_argument("--seed", type=int, default=1,
                      help="Seeds the sampling, the decisions and the members' seeds.")
  parser.add_argument("--poll_secs", type=float, default=10.0,
                      help="Seconds between checks of the members.")
  parser.add_argument("--stop_timeout_secs", type=float, default=300.0,
                      help="A stopping member has this long to write its checkpoint.")
  parser.add_argument("--max_crashes", type=int, default=3,
                      help="Stop when a member crashes this many times in a row without a "
                      "new checkpoint.")
  parser.add_argument("--member_prefix", default="",
                      help='Command put before each member\'s "python experiment.py ..." '
                      '(a cluster launcher, e.g. "srun --nodes=1 --ntasks=1"); {member} is '
                      "replaced by the member's index.")
  parser.add_argument("--shared_replay_capacity", type=int, default=0,
                      help="Unrolls of one LASER episode replay shared by every member "
                      "(Schmitt et al. 2019, section 5.4), served by a replay service process "
                      "the driver runs on a free loopback port; members get --laser_replay, "
                      "--shared_replay_address and --agent_tag=member_NN (give "
                      "--replay_fraction after '--'). 0: off.")
  parser.add_argument("--curve_of", type=int, default=None,
                      help="Do not train: print member K's learning curve across its "
                      "ancestors (JSON lines, log.jsonl records) and exit.")
  return parser


def main(argv=None):
  args, rest = _parser().parse_known_args(argv)
  if args.curve_of is not None:
    try:
      curve = pbt.reconstruct_curve(args.logdir, args.curve_of)
    except (ValueError, KeyError) as error:
      print(f"error: {error!r}", file=sys.stderr)
      return 2
    try:
      for record in curve:
        print(json.dumps(record))
    except BrokenPipeError:  # E.g. piped into head.
      sys.stderr.close()
    return 0
  if rest and rest[0] == "--":
    rest = rest[1:]
  shared_replay = None
  try:
    if args.shared_replay_capacity < 0:
      raise ValueError(f"--shared_replay_capacity must be >= 0 (0: off), got "
                       f"{args.shared_replay_capacity}.")
    if args.shared_replay_capacity:
      shared_replay = SharedReplay(free_loopback_address(), args.shared_replay_capacity,
                                   seed=args.seed)
    settings, _ = settings_from_arguments(args, rest, shared_replay)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  population = Population(settings, experiment_command(rest, args.member_prefix),
                          print_fn=lambda line: print(line, flush=True),
                          shared_replay=shared_replay)
  return population.run()


if __name__ == "__main__":
  sys.exit(main())
