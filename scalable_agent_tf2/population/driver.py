"""The population-based training loop (IMPALA Appendix F): runs the members, evolves the ready
ones (pbt.evolve), restarts crashed ones. The command line is population.py's.

Each step of the loop: read every member's new log records (its episodes and frames), handle
members whose process ended (finished, refused its flags, crashed: restarted from its last
checkpoint), then evolve the ready members in random order: stop it (SIGTERM: it writes a
checkpoint), copy a better member's checkpoint into it when exploiting, append its new
generation to the lineage and restart it with the new hyperparameters as flags.
"""
import collections
import dataclasses
import os
import signal
import threading

import numpy as np

from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.population import exploit
from scalable_agent_tf2.population import pbt
from scalable_agent_tf2.population import processes
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog


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
  burn_in_frames: int = command_settings.BURN_IN_FRAMES
  ready_episodes: int = command_settings.READY_EPISODES
  exploit_threshold: float = command_settings.EXPLOIT_THRESHOLD
  perturb_probability: float = pbt.PERTURB_PROBABILITY
  perturb_factor: float = pbt.PERTURB_FACTOR
  seed: int = 1
  poll_secs: float = 10.0
  stop_timeout_secs: float = 300.0
  max_crashes: int = 3

  @property
  def population_size(self):
    return len(self.initial_hyperparameters)


def _size(path):
  try:
    return os.path.getsize(path)
  except FileNotFoundError:
    return 0


def _format(value):
  return "unknown" if value is None else f"{value:.3g}"


def _format_hyperparameters(hyperparameters):
  return ", ".join(f"{k} {v:.3g}" for k, v in sorted(hyperparameters.items()))


class Population:
  """Runs the members, evolves them (pbt.evolve), restarts crashed ones; see the module doc."""

  def __init__(self, settings, command_fn, print_fn=print, shared_replay=None):
    """Args:
      settings: Settings.
      command_fn: processes.CommandFn, the argv that starts a member.
      print_fn: where the driver's lines go.
      shared_replay: a processes.SharedReplay: its service runs while the
        population does, and every member's argv gets its member_flags; None: each member
        keeps its own replay, if any.
    """
    self.settings = settings
    self._command = command_fn
    self.shared_replay = shared_replay
    self.service = None  # processes.ReplayService while shared_replay is set.
    if shared_replay is not None:
      self.service = processes.ReplayService(shared_replay, settings.logdir,
                                             settings.max_crashes, print_fn)
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
      member = (self._resumed_member(index, records) if records
                else self._new_member(index))
      member.frames = processes.checkpoint_frames(member.logdir)
      self.members.append(member)
    if records:
      self._print(f"[pbt] Resuming a population of {settings.population_size} from "
                  f"{pbt.LINEAGE_FILE}.")

  def _member(self, index, record, generation_episodes=0):
    logdir = pbt.member_dir(self.settings.logdir, index)
    log_path = runlog.log_path(logdir)
    return processes.Member(
        index=index, logdir=logdir, record=record,
        recent=collections.deque(maxlen=self.settings.ready_episodes),
        tail=runlog.LogTail(log_path, _size(log_path)),
        generation_episodes=generation_episodes, starts=record.generation)

  def _new_member(self, index):
    """Generation 0 of a member, appended to the lineage."""
    logdir = pbt.member_dir(self.settings.logdir, index)
    if os.path.exists(checkpoints.checkpoint_dir(logdir)):
      raise ValueError(f"{logdir} has checkpoints but {self.settings.logdir} has no "
                       f"{pbt.LINEAGE_FILE}: use a new --logdir.")
    os.makedirs(logdir, exist_ok=True)
    record = pbt.LineageRecord(
        member=index, generation=0, parent_member=None, parent_generation=None,
        copied=False, hyperparameters=dict(self.settings.initial_hyperparameters[index]),
        frames=0, fitness=None, other_member=None, other_fitness=None,
        log_offset=_size(runlog.log_path(logdir)))
    pbt.append_lineage(self.settings.logdir, record)
    return self._member(index, record)

  def _resumed_member(self, index, records):
    """A member of a stopped population: its latest generation, and its recent episodes
    along its lineage."""
    population_dir = self.settings.logdir
    current = pbt.read_segment(population_dir, pbt.ancestry(records, index)[-1])
    member = self._member(index, pbt.latest_generations(records)[index],
                          generation_episodes=len(runlog.of_kind(current, runlog.EPISODE)))
    for entry in runlog.of_kind(pbt.reconstruct_curve(population_dir, index), runlog.EPISODE):
      member.recent.append((entry["frames"], entry["level"], entry["episode_return"]))
    return member

  # Processes.

  def _start(self, member):
    settings = self.settings
    seed = settings.seed + member.index + settings.population_size * member.starts
    argv = self._command(member.index, member.logdir, seed, member.hyperparameters)
    if self.shared_replay is not None:
      argv = [*argv, *self.shared_replay.member_flags(member.logdir)]
    member.start(argv)

  def _stop(self, members):
    processes.stop_members(members, self.settings.stop_timeout_secs, self._print)

  def _check_process(self, member):
    """Handles a member whose process ended by itself. Returns an exit code to stop with."""
    code = member.process.poll()
    if code is None:
      return None
    member.process = None
    member.read_log()
    if code == 0:
      member.finished = True
      self._print(f"[pbt] member {member.index} finished ({member.frames:,} frames).")
      return None
    output = member.output_path
    if code == 2:  # experiment.py's "bad flags or unusable checkpoint".
      self._print(f"[pbt] member {member.index} refused to run (exit code 2); see {output}:"
                  f"\n{processes.tail_text(output)}")
      return 2
    progressed = processes.checkpoint_frames(member.logdir) > member.frames_at_start
    member.crashes = 1 if progressed else member.crashes + 1
    if member.crashes > self.settings.max_crashes:
      self._print(f"[pbt] member {member.index} crashed {member.crashes} times in a row "
                  f"without a new checkpoint (exit code {code}); stopping. See {output}:\n"
                  f"{processes.tail_text(output)}")
      return 1
    self._start(member)
    self._print(f"[pbt] member {member.index} crashed (exit code {code}); restarted from "
                f"its last checkpoint ({member.frames_at_start:,} frames).")
    return None

  # Evolution.

  def _decide(self, member):
    """pbt.evolve for a ready member; a member without a checkpoint yet has nothing to copy:
    its fitness counts as unknown."""
    settings = self.settings
    fitnesses = [pbt.fitness(m.episodes(), settings.multi_task)
                 if checkpoints.latest_checkpoint(m.logdir) is not None else None
                 for m in self.members]
    return pbt.evolve(
        member.index, fitnesses, [m.hyperparameters for m in self.members], settings.adapted,
        self._rng, threshold=settings.exploit_threshold,
        probability=settings.perturb_probability, factor=settings.perturb_factor)

  def _exploit(self, member, decision):
    """Copies the chosen member's checkpoint into the stopped `member`. Returns (decision,
    frames of the checkpoint it goes on from, (member, generation) that checkpoint is of);
    a failed copy turns the decision into a perturbation of its own hyperparameters."""
    settings = self.settings
    if decision.copy_from is not None:
      parent = self.members[decision.copy_from]
      try:
        frames = exploit.copy_checkpoint(parent.logdir, member.logdir)
      except exploit.CopyError as error:
        self._print(f"[pbt] member {member.index}: {error} It keeps its own weights.")
        decision = dataclasses.replace(decision, copy_from=None, hyperparameters=pbt.perturb(
            member.hyperparameters, settings.adapted, self._rng,
            settings.perturb_probability, settings.perturb_factor))
    if decision.copy_from is None:
      return decision, processes.checkpoint_frames(member.logdir), (
          member.index, member.record.generation)
    # Its recent episodes are now the parent's: the weights played them.
    member.recent = collections.deque(((f, l, r) for f, l, r in parent.recent if f <= frames),
                                      maxlen=settings.ready_episodes)
    return decision, frames, (parent.index, parent.record.generation)

  def _evolve(self, member):
    decision = self._decide(member)
    self._stop([member])
    member.process = None
    member.read_log()
    decision, frames, parent_key = self._exploit(member, decision)
    member.record = pbt.LineageRecord(
        member=member.index, generation=member.record.generation + 1,
        parent_member=parent_key[0], parent_generation=parent_key[1],
        copied=decision.copy_from is not None, hyperparameters=decision.hyperparameters,
        frames=frames, fitness=decision.own_fitness, other_member=decision.other,
        other_fitness=decision.other_fitness, log_offset=member.tail.offset)
    pbt.append_lineage(self.settings.logdir, member.record)
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

  def _step(self):
    """One pass over the members. Returns an exit code to stop with, or None to go on."""
    if self.service is not None and self.service.check():
      return 1
    for member in self.members:
      member.read_log()
      if member.process is not None:
        code = self._check_process(member)
        if code:
          return code
    if all(m.finished for m in self.members):
      self._print("[pbt] every member finished.")
      return 0
    for index in self._rng.permutation(len(self.members)):
      member = self.members[index]
      if member.process is not None and pbt.is_ready(
          member.frames, member.generation_episodes, self.settings.burn_in_frames,
          self.settings.ready_episodes):
        self._evolve(member)
    return None

  def _start_all(self):
    if self.service is not None:
      self.service.start()
      self._print(f"[pbt] replay service shared by every member at "
                  f"{self.shared_replay.address} ({self.shared_replay.capacity:,} unrolls; "
                  f"output in {processes.REPLAY_SERVICE_OUTPUT_FILE}).")
    for member in self.members:
      self._start(member)
    self._print(f"[pbt] {len(self.members)} members started under {self.settings.logdir}.")

  def run(self):
    """Runs until every member finished, `stop`, SIGTERM or Ctrl-C. Returns an exit code:
    0, 1 (a member or the shared replay service keeps crashing) or 2 (a member refuses its
    flags; bad set-up)."""
    try:
      self._setup()
    except (ValueError, OSError) as error:
      self._print(f"error: {error}")
      return 2
    previous = {}
    if threading.current_thread() is threading.main_thread():
      # Signals end the loop between steps: an evolution step is never cut.
      for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: self.stop())
    try:
      self._start_all()
      while not self._stop_event.wait(self.settings.poll_secs):
        code = self._step()
        if code is not None:
          return code
      return 0
    finally:
      self._stop(self.members)
      if self.service is not None:
        self.service.stop()  # After the members: none of them loses it while stopping.
      for signum, handler in previous.items():
        signal.signal(signum, handler)
      lineage = os.path.join(self.settings.logdir, pbt.LINEAGE_FILE)
      self._print(f"[pbt] stopped; lineage in {lineage}.")
