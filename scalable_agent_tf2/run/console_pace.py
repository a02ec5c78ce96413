"""The pace on a training run's console line: frames/s, updates/s, the time to go, and what a
run that does not move waits for.

Rates are measured over a window of at least RATE_WINDOW_SECS and RATE_WINDOW_UPDATES, not one
--log_secs interval: a DeepMind Lab learner (batch 32 x unroll 100) updates every few seconds
to tens of seconds on a small machine, so a rate over one interval alternates between 0 and its
peak. The time to go is measured between the writes at which the frame count
moved (eta_window_start), so that a window never counts one update too many. Before the first
update, and when updates stop, the line says what the run waits for instead (waiting_message:
environments starting, the first unroll, the first update, an update that is overdue).
monitoring.Monitor writes the line every --log_secs.
"""
import dataclasses
import math
from typing import Optional

# frames/s and updates/s are measured over at least this long and at least this many updates
# (when there were that many): a DMLab learner (batch 32 x unroll 100) updates every few
# seconds to tens of seconds on a small machine, so rates over one --log_secs interval
# alternate between 0 and their peak.
RATE_WINDOW_SECS = 60.0
RATE_WINDOW_UPDATES = 4
# The console says "no update for N s" once the last update is older than this: longer than
# the rate window, so a DMLab learner's normal pace (an update every 10-20 s on a small
# machine) never reads as a stall.
STALL_SECS = 2 * RATE_WINDOW_SECS


def windowed_rates(samples, now, num_frames, num_updates,
                   window_secs=RATE_WINDOW_SECS, window_updates=RATE_WINDOW_UPDATES):
  """(frames/s, updates/s) from the newest earlier sample that spans the window.

  Args:
    samples: earlier (time, frames, updates) tuples, oldest first.
    now, num_frames, num_updates: the current sample.
    window_secs, window_updates: the window spans at least this long and this many updates,
      or reaches back to the oldest sample.

  Returns:
    (frames per second, updates per second); (0, 0) without an earlier sample.
  """
  chosen = None
  for sample in reversed(samples):
    chosen = sample
    time_, _, updates = sample
    if now - time_ >= window_secs and num_updates - updates >= window_updates:
      break
  if chosen is None:
    return 0.0, 0.0
  elapsed = max(now - chosen[0], 1e-9)
  return (num_frames - chosen[1]) / elapsed, (num_updates - chosen[2]) / elapsed


def eta_window_start(changes, now, window_secs=RATE_WINDOW_SECS):
  """Where the rate for the time to go is measured from: the newest frame change at least
  window_secs before `now`, else the oldest one; None without an earlier change.

  Args:
    changes: (time, frames) of the writes at which the learner's frame count had moved since
      the write before, oldest first (the first one is the first update's, so the start-up's
      wait is never in the rate).
    now: the current write's time.

  Measured between frame changes, the window holds whole update intervals: windowed_rates'
  window (which starts at any write) counts one update too many when it starts just after
  one, 20% too fast at DMLab's pace.
  """
  chosen = None
  for change in reversed(changes):
    if change[0] >= now:
      continue
    chosen = change
    if now - change[0] >= window_secs:
      break
  return chosen


def eta_rate(changes, now, num_frames, window_secs=RATE_WINDOW_SECS):
  """frames/s from eta_window_start to (now, num_frames); None when unknown (no earlier
  change, or no frames since)."""
  start = eta_window_start(changes, now, window_secs)
  if start is None or num_frames <= start[1]:
    return None
  return (num_frames - start[1]) / max(now - start[0], 1e-9)


def format_eta(seconds):
  """The console's time to go: "" when unknown (nan) or done (0), else hours, minutes or
  seconds (never "0 min" while frames remain: under 2 minutes it is counted in seconds)."""
  if seconds is None or math.isnan(seconds) or seconds <= 0:  # Unknown, or done.
    return ""
  if seconds >= 3600:
    return f", {seconds / 3600:.1f} h to go"
  if seconds >= 120:
    return f", {seconds / 60:.0f} min to go"
  return f", {max(seconds, 1):.0f} s to go"


@dataclasses.dataclass(frozen=True)
class Activity:
  """What the actors have done so far, for the console's waiting line; None: not known.

  environments: environments the run starts (all actors'); environments_ready: those started
  (built and reset); unrolls: trajectories delivered to the learner's input.
  """
  environments: Optional[int] = None
  environments_ready: Optional[int] = None
  unrolls: Optional[int] = None


def activity_of(actors, group_size):
  """Activity of a training run's actors: local actor threads (environments of group_size
  each, acting.actor.ActorThread) or a cluster's remote actor processes (only the unrolls
  they delivered are known here)."""
  threads = getattr(actors, "threads", None)
  if threads is None:
    return Activity(unrolls=actors.delivered()["produced"])
  return Activity(environments=len(threads) * group_size,
                  environments_ready=sum(getattr(t, "num_envs_ready", 0) for t in threads),
                  unrolls=sum(t.num_trajectories for t in threads))


def waiting_message(elapsed, num_updates, since_update, activity=Activity()):
  """What the run waits for, or None while it moves.

  Args:
    elapsed: seconds since training started (Monitor.start).
    num_updates: learner updates since then.
    since_update: seconds since the last update (None before the first).
    activity: Activity of the actors.
  """
  if num_updates == 0:
    if (activity.environments and activity.environments_ready is not None
        and activity.environments_ready < activity.environments):
      return (f"starting {activity.environments} environments: "
              f"{activity.environments_ready} ready ({elapsed:.0f} s)")
    if activity.unrolls == 0:
      return f"waiting for the first unroll ({elapsed:.0f} s)"
    delivered = f": {activity.unrolls} unrolls delivered" if activity.unrolls else ""
    return f"waiting for the first update{delivered} ({elapsed:.0f} s)"
  if since_update is not None and since_update >= STALL_SECS:
    return f"no update for {since_update:.0f} s"
  return None
