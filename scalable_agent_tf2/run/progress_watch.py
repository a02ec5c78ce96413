"""Progress is watched, not assumed: what stops a run that has stopped making progress.

A run can go on forever without training: every trajectory dropped as non-finite (diverged
parameters make the actors' outputs NaN; an environment returns NaN), actors that deliver
nothing (an environment or the inference stuck), or a learner that gets trajectories and makes
no update. The supervisor (supervisor.Run.watch) feeds `ProgressWatch.observe` its counters on
every tick; the first stall that lasts --stall_secs becomes the run's `error:` line.

No TensorFlow here: the rules are plain arithmetic on counters and a clock, tested with a fake
one (tests/run/test_progress_watch.py). The clock is the run's RunningClock (below).
"""
import dataclasses
import math
import threading
import time

# A gap this long between two of the supervisor's ticks (it ticks every half second) means the
# whole process was not running: stopped (SIGSTOP, Ctrl-Z, a job scheduler's suspend) or its
# machine paused. RunningClock leaves such gaps out, so that the watches (this one and the
# environment watchdog, acting/watchdog.py) do not count them against the run: a resumed process
# would otherwise find every clock minutes behind at once (seen: a training run suspended for 18
# minutes replaced an actor as hung and stopped 5 s after SIGCONT with "no learner update for
# 1118 s").
SUSPENSION_SECS = 30.0


class RunningClock:
  """time.monotonic less the gaps of SUSPENSION_SECS or more between ticks: the time the process
  ran. The supervisor ticks it on every pass of its watch; any thread may read it.

  A gap is found at the first tick after it, so a reading taken between the resume and that
  tick is up to the gap later than the tick's clock: a call timed from there looks younger than
  it is until its next tick (a stall found later, never one that was not there)."""

  def __init__(self, clock=time.monotonic):
    self._clock = clock
    self._lock = threading.Lock()
    self._last = clock()
    self._skipped = 0.0

  def tick(self):
    """Takes the time since the last tick; returns the running time now."""
    with self._lock:
      now = self._clock()
      if now - self._last >= SUSPENSION_SECS:
        self._skipped += now - self._last
      self._last = now
      return now - self._skipped

  def __call__(self):
    with self._lock:
      return self._clock() - self._skipped


# Fields of a trajectory written by the actors' network (behaviour-policy outputs): when these
# are non-finite the parameters that produced them have diverged, not the environment.
BEHAVIOUR_PARTS = ("agent_outputs/",)


@dataclasses.dataclass(frozen=True)
class Counters:
  """What the supervisor reads from the run at one moment."""
  produced: int        # Trajectories the actors delivered (dropped ones included).
  dropped: int         # Of them, dropped for non-finite numbers (never trained on).
  num_updates: int     # Learner updates applied.
  actors_alive: bool   # Whether any actor (thread or process) is still running.
  skipped_in_a_row: int = 0  # Learner updates skipped as non-finite since the last applied.


def _are_behaviour_outputs(fields):
  return any(field.startswith(BEHAVIOUR_PARTS) for field in fields)


def describe_fields(fields):
  """(what non-finite fields are, their cause), in words."""
  if _are_behaviour_outputs(fields):
    return ("carried non-finite behaviour outputs (" + ", ".join(fields) + ")",
            "the parameters have diverged")
  return ("carried non-finite numbers from the environment (" + ", ".join(fields) + ")",
          "an environment returns NaN or Inf")


def parameters_healthy(global_norm, max_norm):
  """Whether parameters with this global norm may be trained on and checkpointed: finite
  and at most --max_parameter_norm."""
  return math.isfinite(global_norm) and global_norm <= max_norm


class ProgressWatch:
  """Finds a stall: the same condition for `stall_secs` on end.

  Stalls, checked in this order:
    diverged: trajectories arrive and every one since `stall_secs` ago was dropped;
    learner: after the run's first update, at least a batch of trajectories was accepted
      since the last update, and no update came for `stall_secs` (the learner is stuck; the
      queue then fills and the actors block, which is why this is checked before the next).
      Not before the first update: it traces (and with XLA compiles) the update, which takes
      from seconds to minutes by network and machine;
    actors: no trajectory arrived for `stall_secs` while actors are alive, once the first
      one has arrived (before it, environments may still be starting: DeepMind Lab compiles
      its maps at the first reset; a step that hangs is the environment watchdog's).
  """

  def __init__(self, stall_secs, batch_size, now):
    self._stall_secs = stall_secs
    self._batch_size = batch_size
    self._last = Counters(produced=0, dropped=0, num_updates=0, actors_alive=True)
    self._accepted_at = now       # The last trajectory trained on (or the start).
    self._produced_at = now       # The last trajectory delivered.
    self._update_at = now         # The last update.
    self._accepted_since_update = 0
    self._dropped_since_accepted = 0
    self._dropped_fields = ()
    self.stall_diverged = False  # Whether the stall found is a divergence (not stuck).

  def observe(self, counters, now, dropped_fields=()):
    """Takes the counters at `now` (and the fields of the newest dropped trajectory); returns
    None, or the stall's description (a sentence: what was seen, then its cause). A learner
    that skipped every update since the last one as non-finite is the cause whatever was
    seen: training has diverged (`stall_diverged`)."""
    last, self._last = self._last, counters
    dropped = counters.dropped - last.dropped
    accepted = (counters.produced - last.produced) - dropped
    if counters.produced > last.produced:
      self._produced_at = now
    if accepted > 0:
      self._accepted_at = now
      self._dropped_since_accepted = 0
    self._dropped_since_accepted += dropped
    if dropped:
      self._dropped_fields = tuple(dropped_fields)
    if counters.num_updates > last.num_updates:
      self._update_at = now
      self._accepted_since_update = 0
    self._accepted_since_update += max(accepted, 0)
    stall = self._stall(counters, now)
    if stall is None:
      return None
    seen, cause = stall
    if counters.skipped_in_a_row:
      cause = (f"the last {counters.skipped_in_a_row} updates were skipped for a non-finite "
               f"loss or gradient norm, training has diverged")
    self.stall_diverged = bool(counters.skipped_in_a_row) or self.diverged
    return f"{seen}: {cause}"

  def _stall(self, counters, now):
    """(what was seen, its cause) of the first stall, or None."""
    stalled = self._stall_secs
    if self._dropped_since_accepted and now - self._accepted_at >= stalled:
      fields, cause = describe_fields(self._dropped_fields or ["(fields not recorded)"])
      return (f"every trajectory for {now - self._accepted_at:.0f} s "
              f"({self._dropped_since_accepted} of them) {fields}", cause)
    if (counters.num_updates > 0 and self._accepted_since_update >= self._batch_size
        and now - self._update_at >= stalled):
      return (f"no learner update for {now - self._update_at:.0f} s although "
              f"{self._accepted_since_update} trajectories arrived since the last one (a batch "
              f"is {self._batch_size})", "the learner is stuck")
    if (counters.produced > 0 and counters.actors_alive
        and now - self._produced_at >= stalled):
      return (f"no trajectory from the actors for {now - self._produced_at:.0f} s while they "
              f"are alive", "an environment or the actors' inference is stuck")
    return None

  @property
  def diverged(self):
    """Whether every trajectory since the last accepted one was dropped for non-finite
    behaviour outputs: the parameters have diverged, and no checkpoint of them may become the
    newest."""
    return self._dropped_since_accepted > 0 and _are_behaviour_outputs(self._dropped_fields)
