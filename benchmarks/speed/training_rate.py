"""A training run's frames/s as the Table 1 benchmarks take it: `experiment.py --mode=train`
in a subprocess, timed over its steady window from update to update (steady_rate), the frames
counted as the actors delivered them (trained + queued: produced_frames).

throughput.py's (b) and (c) rows, throughput_gpu.py's end-to-end rows and mujoco_groups.py
measure their runs here; the config of a benchmark run is level_config's. TensorFlow-free: the
run's TensorFlow is the subprocess's.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.utils import profiling

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Table 1's tasks: an Atari game (Table G.1: B=32, T=20) and two DMLab levels (B=32, T=100).
ATARI_LEVELS = ("atari/pong",)
DMLAB_LEVELS = ("seekavoid_arena_01", "rooms_keys_doors_puzzle")
# Seconds between a rate's samples (throughput.py's environments alone and synchronous
# baseline); a training run's measured window is at least 4 of them.
INTERVAL_SECS = 5.0
# Training runs log every second, so that steady_rate times whole updates to within a second.
TRAINING_LOG_SECS = 1.0


def level_config(level, torso, num_actors, logdir="/tmp/unused", envs_per_actor=None,
                 level_cache_dir=""):
  """The resolved experiment config of a benchmark run (the level's presets otherwise;
  envs_per_actor None: the preset, which is 1 but for Atari's vector groups)."""
  return config_lib.resolve(config_lib.ExperimentConfig(
      level_name=level, torso=torso, num_actors=num_actors, batch_size=32, logdir=logdir,
      total_environment_frames=10**9, envs_per_actor=envs_per_actor,
      level_cache_dir=level_cache_dir))


def steady_rate(samples, warmup):
  """Frames/s over the steady window of [(time, frames)]: from the first sample after `warmup`
  s (counted from the first sample) at which the count moved to the last one at which it
  moved.

  Trained frames arrive one update at a time (B x T x repeats frames: 12,800 on DMLab, one
  every few seconds), so a median of short intervals would alternate between 0 and a peak;
  timing from one arrival to another counts only whole updates. A steadily moving count (the
  environments alone) gives the mean rate over the window.
  """
  start = samples[0][0]
  moved = [(t1, f1) for (t0, f0), (t1, f1) in zip(samples, samples[1:])
           if t0 - start >= warmup and f1 != f0]
  if len(moved) < 2 or moved[-1][0] <= moved[0][0]:
    raise RuntimeError("The run was too short for its warm-up (fewer than two updates after "
                       "it); raise --seconds.")
  (t_first, f_first), (t_last, f_last) = moved[0], moved[-1]
  return (f_last - f_first) / (t_last - t_first)


def run_training(config, seconds, warmup, batched_inference, num_cores):
  """(b) or (c): experiment.py training; (frames/s, per-stage profile rows or None)."""
  flags = [f"--level_name={config.level_name}", f"--torso={config.torso}",
           f"--num_actors={config.num_actors}", f"--envs_per_actor={config.envs_per_actor}",
           f"--batch_size={config.batch_size}",
           f"--unroll_length={config.unroll_length}",
           f"--{'' if batched_inference else 'no'}batched_inference"]
  if config.level_cache_dir:
    flags.append(f"--level_cache_dir={config.level_cache_dir}")
  rate, wall, groups, trained = measure_training(flags, config, seconds, warmup)
  return rate, profiling.format_profile(wall, groups, num_cores, trained)


def measure_training(flags, config, seconds, warmup, tree=REPO_DIR):
  """Trains `experiment.py --mode=train` of the project checkout `tree` with flags for
  `seconds` (config: the run's resolved config, for the queue's frames).

  Returns (frames/s by steady_rate of the delivered frames, wall seconds measured, {thread
  group: core-seconds} over them, frames trained over them).
  """
  with tempfile.TemporaryDirectory() as logdir:
    flags = flags + ["--total_environment_frames=1000000000", f"--log_secs={TRAINING_LOG_SECS}",
                     "--checkpoint_secs=1000000", f"--logdir={logdir}"]
    console_path = os.path.join(logdir, "console.txt")
    # The run's output goes to a file: a pipe that nothing drains while the run is measured
    # fills up (48 environment processes' warnings, a progress line a second) and blocks it.
    with open(console_path, "w") as console:
      process = subprocess.Popen([sys.executable, "experiment.py", "--mode=train"] + flags,
                                 cwd=tree, stdout=console, stderr=subprocess.STDOUT)
    sampler = profiling.CpuSampler(process.pid)
    log_path = runlog.log_path(logdir)
    try:
      # Start-up (TensorFlow, environments, every actor's first unroll: 40 s for 48 DMLab
      # actors here) is not training time: the clock starts at the first update.
      while not os.path.exists(log_path) or _latest_frames(log_path) == 0:
        if process.poll() is not None:
          raise RuntimeError(f"Training exited early: {_tail(console_path)}")
        time.sleep(0.5)
      time.sleep(warmup)
      sampler.start()
      frames_before = _latest_frames(log_path)
      time.sleep(max(seconds - warmup, 4 * INTERVAL_SECS))
      wall, groups = sampler.stop()
      trained = _latest_frames(log_path) - frames_before
    finally:
      stopped_at = time.time()  # Records after the stop (queues dropped) are not the run's.
      process.send_signal(signal.SIGTERM)
      try:
        process.wait(timeout=180)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.returncode not in (0, -signal.SIGTERM):
      raise RuntimeError(f"Training failed ({process.returncode}): {_tail(console_path)}")
    records = runlog.read_log(logdir)
  samples = training_samples(runlog.of_kind(records, runlog.PROGRESS), config, stopped_at)
  return steady_rate(samples, warmup), wall, groups, trained


def _tail(path, chars=2000):
  with open(path, errors="replace") as f:
    return f.read()[-chars:]


def training_samples(progress, config, stopped_at):
  """[(time, frames produced)] of a training run's progress records, from its first update
  (start-up is not training time) to the stop (after it the queues are dropped)."""
  first_update = next((i for i, r in enumerate(progress) if r["frames"] > 0), len(progress))
  return [(r["time"], produced_frames(r, config)) for r in progress[first_update:]
          if r["time"] < stopped_at]


def produced_frames(progress, config):
  """Frames the actors have delivered at a progress record: trained + waiting in the queues.

  Trained frames alone overstate the rate while the learner drains a backlog that the actors
  queued during start-up (its first update traces the graph): up to queue_capacity unrolls,
  51,200 frames on DMLab (128 x 100 x 4), about 10 s of production there.
  """
  queued = progress.get("queue_fill", 0.0) * config.queue_capacity * config.num_learners
  return progress["frames"] + queued * config.unroll_length * config.num_action_repeats


def _latest_frames(log_path):
  progress = runlog.of_kind(runlog.read_records(log_path)[0], runlog.PROGRESS)
  return progress[-1]["frames"] if progress else 0


def dmlab_available():
  """Whether DeepMind Lab is installed: its Table 1 tasks are measured only then."""
  from scalable_agent_tf2.environments import dmlab  # pylint: disable=g-import-not-at-top
  try:
    dmlab.import_deepmind_lab()  # Without its pkg_resources deprecation notice.
    return True
  except ImportError:
    return False
