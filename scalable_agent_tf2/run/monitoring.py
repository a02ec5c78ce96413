"""What a researcher watches during training: a console line, TensorBoard, the run log and
its learning curve.

Actor threads report episodes and environment restarts; the training loop reports updates;
`write` (called every --log_secs from the supervising thread) turns them into:
  * a console line: frames, frames/s, updates/s, progress, the time to go, recent mean return
    per level (per-task PopArt: its smallest and largest sigma); while nothing moves, what the
    run waits for (waiting_message: environments starting, the first unroll or update, ...);
  * TensorBoard scalars under logdir (step = environment frames consumed by the learner;
    per-task PopArt's statistics per level, popart_sigma/<level>);
  * logdir/log.jsonl (runlog.py): an EPISODE record per episode (stamped with the learner's
    frame count when the episode ended), a PROGRESS record per write, with the same numbers
    as TensorBoard, and a START record per (re)start of training (at its frame count).
At each checkpoint (`checkpointed`) and at the stop (`close`) the learning curve
logdir/learning_curve.png is redrawn from log.jsonl (runfiles/plot.py) in a child process
(learning_curve.CurveWriter), never holding up the run. The console's pace is console_pace.py's.

A file that cannot be written (a full disk, a read-only or deleted logdir: log.jsonl,
TensorBoard's events file, the learning curve) raises run_failures.LogWriteFailed naming it,
once; the run then stops with its checkpoint (supervisor.py) and the files are left alone.
"""
import collections
import math
import os
import re
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.learning import popart
from scalable_agent_tf2.run import learning_curve
from scalable_agent_tf2.run.console_pace import RATE_WINDOW_UPDATES
from scalable_agent_tf2.run.console_pace import Activity
from scalable_agent_tf2.run.console_pace import eta_rate
from scalable_agent_tf2.run.console_pace import eta_window_start
from scalable_agent_tf2.run.console_pace import format_eta
from scalable_agent_tf2.run.console_pace import waiting_message
from scalable_agent_tf2.run.console_pace import windowed_rates
from scalable_agent_tf2.run.run_failures import LogWriteFailed
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import plot
from scalable_agent_tf2.runfiles import runlog

# Console and TensorBoard summaries average the last this many episodes per level.
RECENT_EPISODES = 100


def _mean(values):
  return float(np.mean(values)) if len(values) else float("nan")


def human_normalized_summary(level_returns):
  """Mean capped, mean and median human-normalised score (percent) over the levels given.

  Args:
    level_returns: dict level name -> mean return; levels without reference scores are left
      out.

  Returns:
    dict with mean_capped, mean, median (absent when no level has reference scores) and
    per-level normalised scores "<level>" (fractions).
  """
  per_level = {}
  for level, mean_return in level_returns.items():
    references = suites.reference_scores(level)
    if references is not None and not math.isnan(mean_return):
      per_level[level] = float(suites.human_normalized_score(mean_return, *references))
  if not per_level:
    return {}
  values = np.array(list(per_level.values()))
  return dict(per_level=per_level, mean_capped=100.0 * float(np.mean(np.minimum(values, 1.0))),
              mean=100.0 * float(np.mean(values)), median=100.0 * float(np.median(values)))


def learning_rate_in_words(config):
  """The learning rate's schedule and the scale of the values, for the start banner."""
  if config.learning_rate_schedule == settings.CONSTANT:
    words = f"learning rate {config.learning_rate:g}, constant"
  else:
    words = (f"learning rate {config.learning_rate:g}, decaying linearly to 0 at "
             f"{config.total_environment_frames:,} frames")
  tasks = checkpoints.popart_tasks(config) or ()
  if len(tasks) > 1:
    words += (f"; per-task PopArt on over {len(tasks)} tasks: one normalised value output and "
              "scale per level (Hessel et al. 2019; --popart)")
  elif config.popart:
    words += "; values learned in PopArt's normalised scale (--popart)"
  return words

def start_banner(config, network, device, xla, checkpoint, frames, mode="train",
                 remote_actors=False):
  """The lines a run starts with: what it runs, on what, and where it starts from.

  Args:
    config: the run's config.ExperimentConfig.
    network: networks.NetworkConfig of the agent.
    device: where the learner and the batched inference run.
    xla: whether the learner's update is XLA-compiled.
    checkpoint: the checkpoint restored (None: a fresh start).
    frames: the frame count the run starts from.
    mode: "train" or "test".
    remote_actors: a cluster's learner: its actors are actor processes' threads
      (--num_actors in each), as many processes as connect.
  """
  levels = config.levels
  what = (f"{config.level_name} ({len(levels)} levels)" if len(levels) > 1
          else levels[0])
  lines = [f"{mode}: {what}"]
  summary = config.family.preset_summary(config) if mode == "train" else None
  if summary:  # A level the papers did not run: which defaults apply, and why.
    lines.append("  " + summary)
  if config.excluded_level_names:
    lines.append(f"  excluded levels: {', '.join(config.excluded_level_names)}")
  lines.append("  " + family_base.network_in_words(
      network.torso, network.use_lstm, **network.action_distribution.layout(),
      observation_shape=network.frame_shape, instruction=network.use_instruction,
      separate_value=network.separate_value_torso,
      free_log_std=not network.state_dependent_log_std))
  if mode == "train":
    batch_frames = config_lib.frames_per_batch(config.batch_size, config.unroll_length,
                                               config.num_action_repeats)
    actors = (f"actor processes of {config.num_actors} actors each (as many as connect)"
              if remote_actors else f"{config.num_actors} actors")
    lines.append(f"  {config.algorithm}: {actors}, batch {config.batch_size}, "
                 f"unroll {config.unroll_length}, frame budget "
                 f"{config.total_environment_frames:,} (frames are counted a batch of "
                 f"{batch_frames:,} at a time: the run stops at the first update that reaches "
                 f"the budget, less than one batch past it)")
    lines.append("  " + learning_rate_in_words(config))
  else:
    lines.append(f"  {config.test_num_episodes} episodes per level, {config.num_actors} "
                 f"environments at once, seed {config.seed}")
  if mode == "train":  # Where to look while it trains.
    logdir = config.logdir.rstrip("/") or "/"
    lines.append(f"  learning curve: {os.path.join(logdir, plot.CURVE_FILE)} (redrawn at each "
                 f"checkpoint and at the stop); every number: "
                 f"{runlog.log_path(logdir)} and `tensorboard --logdir {logdir}`")
  lines.append(f"  device {device}, XLA {'on' if xla else 'off'}, logdir {config.logdir}")
  if mode != "train":
    lines.append(f"Testing {checkpoint} ({frames:,} training frames).")
  elif checkpoint is None:
    lines.append(f"Fresh start: no checkpoint in {config.logdir}.")
  else:
    lines.append(f"Resumed from {checkpoint} at {frames:,} frames.")
  return lines


class Monitor:
  """Collects statistics from actor threads and the learner; writes them out on `write`."""

  def __init__(self, logdir, levels, total_frames, print_fn=print, clock=time.monotonic,
               tasks=()):
    self._logdir = logdir
    self._levels = tuple(levels)
    self._tasks = tuple(tasks)  # Per-task PopArt's levels in order: its [N] statistics'.
    self._total_frames = total_frames
    self._print = print_fn
    self._clock = clock
    self._lock = threading.Lock()
    self._recent = {level: collections.deque(maxlen=RECENT_EPISODES) for level in levels}
    self._new_episodes = []
    self._new_failures = []  # record_restart's, until the next write logs them.
    self._new_actor_processes = []  # record_actor_process's, likewise.
    self._num_episodes = 0
    self._num_restarts = 0
    self._last_update = {}
    self._num_updates = 0
    self._policy_lags = []
    self._policy_lag = float("nan")  # Mean lag of the latest updates (kept between writes).
    # (time, frames, updates) at each write, for windowed rates; a write every --log_secs.
    self._samples = collections.deque(maxlen=10_000)
    # (time, frames) of the writes at which the frame count had moved (eta_rate).
    self._frame_changes = collections.deque(maxlen=10_000)
    self._eta_estimate = None  # (time, seconds to go then, the rate's window start).
    self._start_time = None
    self._start_frames = None
    self._start_updates = 0
    # The learner's frame count after its latest update: each episode is stamped with it when
    # it ends (record_episode), so a curve has a point per episode, not a step per write.
    self._learner_frames = 0
    self._logged_frames = 0  # The frame count of the last PROGRESS record.
    self._last_update_time = None
    self._activity = Activity
    os.makedirs(logdir, exist_ok=True)
    # A resumed run has episodes to draw before it finishes one of its own.
    self._curve_data = os.path.exists(runlog.log_path(logdir)) and bool(
        os.path.getsize(runlog.log_path(logdir)))
    self._logdir = logdir
    self._writer = tf.summary.create_file_writer(logdir)
    self._log = runlog.Writer(logdir)
    self._curves = learning_curve.CurveWriter(logdir, print_fn)
    # The first file that could not be written (LogWriteFailed): raised once, by the write
    # or close that met it; the run's files are not written again after it.
    self._write_error = None
    self._closed = False

  def start(self, num_frames):
    """Marks the start of training at num_frames (rates are measured from here).

    Logs a START record: a resumed run starts at its checkpoint's frame count, and readers
    drop what an interrupted attempt logged beyond it (runlog.read_trained_records).
    """
    self._start_time, self._start_frames = self._clock(), num_frames
    self._start_updates = self._num_updates
    with self._lock:  # A resumed run's count goes on from the episodes that trained it.
      self._num_episodes = self._trained_episodes(num_frames) + self._num_episodes
    self._learner_frames = self._logged_frames = int(num_frames)
    self._last_update_time = None
    self._frame_changes.clear()
    self._samples.clear()
    self._samples.append((self._start_time, num_frames, self._num_updates))
    try:
      self._log.start(num_frames)
    except OSError as error:
      self._write_error = LogWriteFailed(f"Cannot write the run's log: {error}")
      raise self._write_error from error

  def _trained_episodes(self, num_frames):
    """Episodes of the log up to num_frames that lead to the parameters the run starts from
    (runlog.read_trained_records, as a reader of the log counts them once this start's
    record drops what a lost attempt logged beyond them); 0 without a log."""
    if not self._curve_data:
      return 0
    episodes, _ = runlog.read_trained_records(self._logdir)
    return sum(1 for record in episodes if record["frames"] <= num_frames)

  def watch_activity(self, activity):
    """activity: callable() -> Activity, asked at each write (the supervising thread) while
    the run waits for its first update."""
    self._activity = activity

  # Reports (any thread).

  def record_episode(self, level, episode_return, episode_step):
    """An episode that ended now: stamped with the learner's frame count at this moment.

    The learner's count rather than the actors' own: it is the axis of everything else the
    run logs and decides by (PROGRESS records, TensorBoard's step, the frame budget, the
    learning rate's decay, checkpoints, the cut of a resumed run's log), and it says what the
    parameters that played the episode had been trained on. Actors count frames before the
    learner consumes them (ahead of it by the queues' contents, and counting unrolls dropped
    at a stop or, with LASER, replaced). Its resolution is one update's frames.
    """
    with self._lock:
      self._recent[level].append(float(episode_return))
      self._new_episodes.append((level, float(episode_return), int(episode_step),
                                 self._learner_frames))
      self._num_episodes += 1

  def record_restart(self, level, error):
    """An environment of `level` failed (error) and was replaced: a console line now, a
    runlog ENVIRONMENT_FAILURE record at the next write. The error's message names the step,
    the episode and, for an environment's own exception, the file and line it raised at
    (environments.EnvironmentFault.user_frame, kept in the record's "where")."""
    with self._lock:
      self._num_restarts += 1
      self._new_failures.append((level, str(error), type(error).__name__,
                                 getattr(error, "user_frame", None), self._learner_frames))
    self._print(f"Environment for {level} failed and was restarted: {error}")

  def record_actor_process(self, task, event, seconds, sending):
    """A cluster's actor process `task` joined (its first trajectory), fell silent (nothing
    for `seconds`: stopped, frozen or cut off) or sent again (learner_service.SenderWatch);
    `sending`: the processes sending now. A console line now, a runlog ACTOR_PROCESS record
    at the next write."""
    if event == "joined":
      line = f"Actor process {task}: first trajectory received ({sending} sending)."
    elif event == "silent":
      line = (f"Actor process {task} has sent nothing for {seconds:.0f} s (stopped, frozen "
              f"or cut off); training goes on with the {sending} sending.")
    else:
      line = f"Actor process {task} sends again, after {seconds:.0f} s of silence."
    with self._lock:
      self._new_actor_processes.append((task, event, round(seconds, 1), self._learner_frames))
    self._print(line)

  @property
  def num_restarts(self):
    """Environments replaced after a failure so far."""
    with self._lock:
      return self._num_restarts

  def record_update(self, stats, policy_lags):
    """stats: dict of the learner's scalars (numpy); policy_lags: ints, one per trajectory."""
    with self._lock:
      self._last_update = popart.per_task_scalars(stats, self._tasks)
      self._num_updates += 1
      self._policy_lags.extend(policy_lags)
      if "num_env_frames" in stats:
        self._learner_frames = int(stats["num_env_frames"])
      self._last_update_time = self._clock()

  # Output (the supervising thread).

  def recent_returns(self):
    """dict level -> mean of its last RECENT_EPISODES returns (nan when none yet)."""
    with self._lock:
      return {level: _mean(returns) for level, returns in self._recent.items()}

  def write(self, num_frames, queue_fill):
    """Writes one progress record (console, TensorBoard, JSONL) at `num_frames` frames."""
    now = self._clock()
    with self._lock:
      episodes, self._new_episodes = self._new_episodes, []
      failures, self._new_failures = self._new_failures, []
      actor_processes, self._new_actor_processes = self._new_actor_processes, []
      lags, self._policy_lags = self._policy_lags, []
      update = dict(self._last_update)
      num_updates, num_episodes, num_restarts = (self._num_updates, self._num_episodes,
                                                 self._num_restarts)
      last_update_time = self._last_update_time
    returns = self.recent_returns()
    if lags:
      self._policy_lag = _mean(lags)
    fps, updates_per_second, eta_seconds = self._rates(now, num_frames, num_updates)
    record = dict(kind=runlog.PROGRESS, time=time.time(), frames=int(num_frames),
                  progress=num_frames / self._total_frames, eta_seconds=eta_seconds,
                  frames_per_second=fps,
                  updates=num_updates, updates_per_second=updates_per_second,
                  episodes=num_episodes, environment_restarts=num_restarts,
                  queue_fill=queue_fill, policy_lag=self._policy_lag, **update)
    for level, value in returns.items():
      record[f"episode_return/{level}"] = value
    normalized = human_normalized_summary(returns)
    if len(self._levels) > 1 and normalized:
      for level, value in normalized["per_level"].items():
        record[f"human_normalized/{level}"] = value
      for key in ("mean_capped", "mean", "median"):
        record[f"human_normalized_{key}"] = normalized[key]
    error = None
    if self._write_error is None:
      error = self._write_files(num_frames, episodes, failures, actor_processes, record)
    self._curve_data = self._curve_data or bool(episodes)
    self._curves.poll()  # Reports a drawing that failed.
    if error is None and self._write_error is None and self._curves.write_error:
      error = LogWriteFailed(f"Cannot write the learning curve: {self._curves.write_error}")
    waiting = None
    if self._start_time is not None:
      waiting = waiting_message(
          now - self._start_time, num_updates,
          None if last_update_time is None else now - last_update_time,
          self._activity() if num_updates == 0 else Activity())
    self._print(self._console_line(record, returns, waiting))
    if error is not None:
      self._write_error = error
      raise error
    return record

  def _write_files(self, num_frames, episodes, failures, actor_processes, record):
    """A write's TensorBoard scalars and log.jsonl records; the LogWriteFailed of a file that
    could not be written (a full disk, a read-only or deleted logdir), or None."""
    try:
      self._write_summaries(num_frames, [e[:3] for e in episodes], record)
    except tf.errors.OpError as error:
      return LogWriteFailed(f"Cannot write TensorBoard's events file in {self._logdir}: "
                            f"{_op_error_text(error)}")
    for level, episode_return, episode_step, frames in episodes:
      # Within the PROGRESS records around it, so the log's frames never go back (a write
      # can read the learner's count before its latest update reached record_update).
      frames = min(max(frames, self._logged_frames), int(num_frames))
      self._log.episode(frames, level, episode_return, episode_step)
    for level, error, error_type, where, frames in failures:
      frames = min(max(frames, self._logged_frames), int(num_frames))
      self._log.environment_failure(frames, level, error, error_type, where)
    for task, event, seconds, frames in actor_processes:
      self._log.actor_process(min(max(frames, self._logged_frames), int(num_frames)), task,
                              event, seconds)
    self._logged_frames = int(num_frames)
    self._log.write(record)
    try:
      self._log.flush()
    except OSError as error:  # runlog cut the file back to its last complete line.
      return LogWriteFailed(f"Cannot write the run's log: {error}")
    return None

  def checkpointed(self):
    """A checkpoint was written: the learning curve is redrawn (CurveWriter.request)."""
    if self._curve_data:
      self._curves.request()

  def _rates(self, now, num_frames, num_updates):
    """(frames/s and updates/s over the recent window, seconds to the frame budget).

    The time to go is the frames left at the recent rate (eta_rate: over the last
    RATE_WINDOW_SECS of frame changes, so it follows a run that speeds up or slows down; the
    start-up's wait is never in it). It is estimated when the frame count moves (an update)
    and counts down with the clock between updates, so it neither jumps up between DMLab's
    slow updates nor down at each one; should the countdown run out before the budget (the
    run slowed down), the rate from the same window start to now takes over. nan (no time to
    go shown) until the run has made RATE_WINDOW_UPDATES updates: the rate is not known yet.
    """
    previous_frames = self._samples[-1][1] if self._samples else None
    moved = previous_frames is not None and num_frames != previous_frames
    if moved and not self._frame_changes:
      # The first update's write: the rates' windows start here, never in the start-up's wait.
      self._samples.clear()
    if len(self._frame_changes) + moved >= 2:
      fps, updates_per_second = windowed_rates(self._samples, now, num_frames, num_updates)
    else:  # Fewer than two updates seen: no rate to tell yet (nan: "measuring fps").
      fps = updates_per_second = float("nan")
    self._samples.append((now, num_frames, num_updates))
    remaining = max(self._total_frames - num_frames, 0)
    if moved:
      start = eta_window_start(self._frame_changes, now)
      rate = eta_rate(self._frame_changes, now, num_frames)
      self._frame_changes.append((now, num_frames))
      if rate is not None and num_updates - self._start_updates >= RATE_WINDOW_UPDATES:
        self._eta_estimate = (now, remaining / rate, start)
    if self._eta_estimate is None:
      return fps, updates_per_second, float("nan")
    estimated_at, eta_seconds, (start_time, start_frames) = self._eta_estimate
    countdown = eta_seconds - (now - estimated_at)
    if not remaining:
      return fps, updates_per_second, 0.0
    if countdown > 0:
      return fps, updates_per_second, countdown
    rate = (num_frames - start_frames) / max(now - start_time, 1e-9)
    return fps, updates_per_second, remaining / rate if rate > 0 else float("nan")

  def _write_summaries(self, num_frames, episodes, record):
    """TensorBoard: every episode's return and length, and the progress record's numbers."""
    with self._writer.as_default(step=int(num_frames)):
      for level, episode_return, episode_step in episodes:
        tf.summary.scalar(f"episode_return/{level}", episode_return)
        tf.summary.scalar(f"episode_length/{level}", episode_step)
      for key, value in record.items():
        if key not in ("kind", "time", "frames") and not key.startswith("episode_return/"):
          if not (isinstance(value, float) and math.isnan(value)):
            tf.summary.scalar(key, value)
    self._writer.flush()

  def _console_line(self, record, returns, waiting=None):
    """The console's line of a write; `waiting` (waiting_message) says what the run waits
    for: before the first update it replaces the rates (all 0), later it follows them."""
    eta = "" if waiting else format_eta(record["eta_seconds"])
    parts = [f"frames {record['frames']:,} ({100 * record['progress']:.1f}%{eta})"]
    if waiting and not record["updates"]:
      parts.append(waiting)
      if record["episodes"]:
        parts.append(f"episodes {record['episodes']}")
      return " | ".join(parts)
    if math.isnan(record["frames_per_second"]):  # The first update's write: no rate yet.
      updates = record["updates"]
      parts.append(f"{updates} update{'s' if updates != 1 else ''}, measuring fps")
    else:
      parts += [f"{record['frames_per_second']:,.0f} fps",
                f"{record['updates_per_second']:.2f} updates/s"]
    parts.append(f"episodes {record['episodes']}")
    if waiting:
      parts.append(waiting)
    if "total_loss" in record:
      parts.append(f"loss {record['total_loss']:.3g}")
    parts += [words for words in [popart.sigmas_in_words(record, self._tasks)] if words]
    shown = [(level, value) for level, value in returns.items() if not math.isnan(value)]
    if len(shown) > 4:  # Suites: the summary, not 30 numbers.
      if "human_normalized_mean_capped" in record:
        parts.append(f"mean capped human-normalised {record['human_normalized_mean_capped']:.1f}%")
    else:
      parts.extend(f"{level} return {value:.2f}" for level, value in shown)
    return " | ".join(parts)

  def close(self):
    """Closes the logs and draws the final learning curve (waits for it: CurveWriter).

    Raises:
      LogWriteFailed: a file that could not be written here first (TensorBoard's last
        events, the final curve on a disk that filled at the stop); one that failed before
        was raised by its write, and the curve is then not drawn again.
    """
    if self._closed:
      return
    self._closed = True
    error = None
    try:
      self._writer.close()
    except tf.errors.OpError as close_error:
      error = LogWriteFailed(f"Cannot write TensorBoard's events file in {self._logdir}: "
                             f"{_op_error_text(close_error)}")
    try:
      self._log.close()
    except OSError as close_error:  # Records not flushed yet: none after a write.
      error = error or LogWriteFailed(f"Cannot write the run's log: {close_error}")
    if self._curve_data and self._write_error is None:
      self._curves.finish()
      if error is None and self._curves.write_error:
        error = LogWriteFailed(f"Cannot write the learning curve: {self._curves.write_error}")
    if error is not None and self._write_error is None:
      self._write_error = error
      raise error


def _op_error_text(error):
  """A TensorFlow error's first line without its op's prefix ("{{function_node ...}} ")."""
  return re.sub(r"^\{\{[^}]*\}\}\s*", "", str(error.message).splitlines()[0])
