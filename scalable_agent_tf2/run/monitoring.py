"""What a researcher watches during training: a console line, TensorBoard, and the run log.

Actor threads report episodes and environment restarts; the training loop reports updates;
`write` (called every --log_secs from the supervising thread) turns them into:
  * a console line: frames, frames/s, updates/s, progress, recent mean return per level;
  * TensorBoard scalars under logdir (step = environment frames consumed by the learner);
  * logdir/log.jsonl (runlog.py): an EPISODE record per episode and a PROGRESS record per
    write, with the same numbers as TensorBoard, and a START record per (re)start of training
    (at the frame count it starts from).
"""
import collections
import math
import os
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import presets
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.configuration import suites

# Console and TensorBoard summaries average the last this many episodes per level.
RECENT_EPISODES = 100
# frames/s and updates/s are measured over at least this long and at least this many updates
# (when there were that many): a DMLab learner (batch 32 x unroll 100) updates every few
# seconds to tens of seconds on a small machine, so rates over one --log_secs interval
# alternate between 0 and their peak.
RATE_WINDOW_SECS = 60.0
RATE_WINDOW_UPDATES = 4


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


def start_banner(config, network, device, xla, checkpoint, frames, mode="train"):
  """The lines a run starts with: what it runs, on what, and where it starts from.

  Args:
    config: the run's config.ExperimentConfig.
    network: networks.NetworkConfig of the agent.
    device: where the learner and the batched inference run.
    xla: whether the learner's update is XLA-compiled.
    checkpoint: the checkpoint restored (None: a fresh start).
    frames: the frame count the run starts from.
    mode: "train" or "test".
  """
  levels = config.levels
  what = (f"{config.level_name} ({len(levels)} levels)" if len(levels) > 1
          else levels[0])
  lines = [f"{mode}: {what}"]
  sources = presets.describe_presets(config.level_name) if mode == "train" else None
  if sources:  # A level the papers did not run: where its presets come from.
    lines += ["  " + line for line in sources.splitlines()]
  if config.excluded_level_names:
    lines.append(f"  excluded levels: {', '.join(config.excluded_level_names)}")
  core = "LSTM" if network.use_lstm else "no LSTM"
  actions = (f"{network.num_actions} actions" if hasattr(network, "num_actions")
             else f"Gaussian actions of {network.action_size} dimensions")
  lines.append(f"  network: {network.torso} torso, {core}, {actions}, "
               f"observations {'x'.join(str(n) for n in network.frame_shape)}")
  if mode == "train":
    lines.append(f"  {config.algorithm}: {config.num_actors} actors, batch {config.batch_size}, "
                 f"unroll {config.unroll_length}, frame budget "
                 f"{config.total_environment_frames:,}")
    lines.append(f"  learning rate {config.learning_rate:g}, decaying linearly to 0 at "
                 f"{config.total_environment_frames:,} frames")
  else:
    lines.append(f"  {config.test_num_episodes} episodes per level, {config.num_actors} "
                 f"environments at once, seed {config.seed}")
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

  def __init__(self, logdir, levels, total_frames, print_fn=print, clock=time.monotonic):
    self._levels = tuple(levels)
    self._total_frames = total_frames
    self._print = print_fn
    self._clock = clock
    self._lock = threading.Lock()
    self._recent = {level: collections.deque(maxlen=RECENT_EPISODES) for level in levels}
    self._new_episodes = []
    self._num_episodes = 0
    self._num_restarts = 0
    self._last_update = {}
    self._num_updates = 0
    self._policy_lags = []
    self._policy_lag = float("nan")  # Mean lag of the latest updates (kept between writes).
    # (time, frames, updates) at each write, for windowed rates; a write every --log_secs.
    self._samples = collections.deque(maxlen=10_000)
    self._eta_estimate = None  # (time, seconds to go then).
    self._eta_frames = None
    self._start_time = None
    self._start_frames = None
    os.makedirs(logdir, exist_ok=True)
    self._writer = tf.summary.create_file_writer(logdir)
    self._log = runlog.Writer(logdir)

  def start(self, num_frames):
    """Marks the start of training at num_frames (rates are measured from here).

    Logs a START record: a resumed run starts at its checkpoint's frame count, and readers
    drop what an interrupted attempt logged beyond it (runlog.read_trained_records).
    """
    self._start_time, self._start_frames = self._clock(), num_frames
    self._samples.clear()
    self._samples.append((self._start_time, num_frames, self._num_updates))
    self._log.start(num_frames)

  # Reports (any thread).

  def record_episode(self, level, episode_return, episode_step):
    with self._lock:
      self._recent[level].append(float(episode_return))
      self._new_episodes.append((level, float(episode_return), int(episode_step)))
      self._num_episodes += 1

  def record_restart(self, level, error):
    with self._lock:
      self._num_restarts += 1
    self._print(f"Environment process for {level} failed and was restarted: {error}")

  def record_update(self, stats, policy_lags):
    """stats: dict of the learner's scalars (numpy); policy_lags: ints, one per trajectory."""
    with self._lock:
      self._last_update = {k: float(v) for k, v in stats.items()}
      self._num_updates += 1
      self._policy_lags.extend(policy_lags)

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
      lags, self._policy_lags = self._policy_lags, []
      update = dict(self._last_update)
      num_updates, num_episodes, num_restarts = (self._num_updates, self._num_episodes,
                                                 self._num_restarts)
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
    self._write_summaries(num_frames, episodes, record)
    for level, episode_return, episode_step in episodes:
      self._log.episode(num_frames, level, episode_return, episode_step)
    self._log.write(record)
    self._log.flush()
    self._print(self._console_line(record, returns))
    return record

  def _rates(self, now, num_frames, num_updates):
    """(frames/s and updates/s over the recent window, seconds to the frame budget).

    The time to go is estimated from the mean rate since the start when the frame count
    moves (an update), and counts down with the clock between updates, so it neither jumps
    up between DMLab's slow updates nor down at each one; nan until the run has made
    RATE_WINDOW_UPDATES updates (an earlier estimate is noise).
    """
    fps, updates_per_second = windowed_rates(self._samples, now, num_frames, num_updates)
    started_updates = self._samples[0][2] if self._samples else 0
    self._samples.append((now, num_frames, num_updates))
    if (self._start_time is not None and num_frames > self._start_frames
        and num_updates - started_updates >= RATE_WINDOW_UPDATES
        and num_frames != self._eta_frames):
      average_fps = (num_frames - self._start_frames) / max(now - self._start_time, 1e-9)
      self._eta_estimate = (now, max(self._total_frames - num_frames, 0) / average_fps)
      self._eta_frames = num_frames
    if self._eta_estimate is None:
      return fps, updates_per_second, float("nan")
    estimated_at, eta_seconds = self._eta_estimate
    return fps, updates_per_second, max(eta_seconds - (now - estimated_at), 0.0)

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

  def _console_line(self, record, returns):
    eta = record["eta_seconds"]
    if math.isnan(eta):
      eta = ""
    elif eta >= 3600:
      eta = f", {eta / 3600:.1f} h to go"
    else:
      eta = f", {eta / 60:.0f} min to go"
    parts = [f"frames {record['frames']:,} ({100 * record['progress']:.1f}%{eta})",
             f"{record['frames_per_second']:,.0f} fps",
             f"{record['updates_per_second']:.2f} updates/s",
             f"episodes {record['episodes']}"]
    if "total_loss" in record:
      parts.append(f"loss {record['total_loss']:.3g}")
    shown = [(level, value) for level, value in returns.items() if not math.isnan(value)]
    if len(shown) > 4:  # Suites: the summary, not 30 numbers.
      if "human_normalized_mean_capped" in record:
        parts.append(f"mean capped human-normalised {record['human_normalized_mean_capped']:.1f}%")
    else:
      parts.extend(f"{level} return {value:.2f}" for level, value in shown)
    return " | ".join(parts)

  def close(self):
    self._writer.close()
    self._log.close()
