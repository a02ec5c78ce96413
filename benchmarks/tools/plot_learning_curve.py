"""Learning curve of a training run: episode returns against environment frames, as a PNG.

    python -m benchmarks.tools.plot_learning_curve --logdir=/tmp/pong --output=pong.png
    python -m benchmarks.tools.plot_learning_curve --logdir=/tmp/pong --output=pong.png --time

With --time a second panel puts the same returns against hours of training: the running time
of the run's attempts (from each "start" record of the log to its last progress record), so a
run that was stopped and resumed does not count the time in between.

Reads --logdir/log.jsonl (scalable_agent_tf2/runfiles/runlog.py): every episode's return (dots)
and, per level, the mean of the last --window episodes (line). Frames are the learner's
frame count when the episode was logged; a resumed run shows what led to its parameters
(runlog.read_trained_records).
"""
import argparse
import collections
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scalable_agent_tf2.runfiles import runlog  # pylint: disable=g-import-not-at-top,wrong-import-position


def read_episodes(logdir):
  """dict level -> (frames [N], returns [N]) of the episodes runlog.read_trained_records
  keeps."""
  by_level = collections.defaultdict(lambda: ([], []))
  for record in runlog.read_trained_records(logdir)[0]:
    frames, returns = by_level[record["level"]]
    frames.append(record["frames"])
    returns.append(record["episode_return"])
  return {level: (np.array(f), np.array(r)) for level, (f, r) in by_level.items()}


def attempts_from_log(records):
  """[dict(start, end)] of a run's attempts: each START record's time to the time of the last
  record before the next START (None if the attempt logged nothing after starting)."""
  attempts = []
  for record in records:
    if record.get("kind") == runlog.START:
      attempts.append(dict(start=record["time"], end=None))
    elif attempts and "time" in record:
      attempts[-1]["end"] = record["time"]
  return attempts


def running_seconds(attempts, times):
  """Seconds of running time (inside attempts only) at each wall-clock time in `times`."""
  times = np.asarray(times, np.float64)
  seconds = np.zeros_like(times)
  elapsed = 0.0
  for attempt in attempts:
    end = attempt["end"] if attempt.get("end") is not None else np.inf
    inside = (times >= attempt["start"]) & (times <= end)
    seconds[inside] = elapsed + times[inside] - attempt["start"]
    seconds[times > end] = elapsed + end - attempt["start"]
    elapsed += end - attempt["start"]
  return seconds


def training_hours(logdir, frames):
  """Hours of training (running_seconds / 3600) at which the run had trained `frames`,
  interpolated between its progress records."""
  progress = runlog.read_trained_records(logdir)[1]
  if not progress:
    return np.zeros(len(frames))
  seconds = running_seconds(attempts_from_log(runlog.read_log(logdir)),
                            [p["time"] for p in progress])
  return np.interp(frames, [p["frames"] for p in progress], seconds) / 3600


def running_mean(values, window):
  """Mean of the last `window` values at each position (fewer at the start)."""
  cumulative = np.cumsum(np.insert(values.astype(np.float64), 0, 0.0))
  ends = np.arange(1, len(values) + 1)
  starts = np.maximum(ends - window, 0)
  return (cumulative[ends] - cumulative[starts]) / (ends - starts)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--logdir", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--window", type=int, default=100)
  parser.add_argument("--title", default="")
  parser.add_argument("--time", action="store_true",
                      help="Add a panel of the returns against hours of training.")
  parser.add_argument("--legend_loc", default="lower right")
  args = parser.parse_args(argv)

  episodes = read_episodes(args.logdir)
  if not episodes:
    raise SystemExit(f"No episodes in {runlog.log_path(args.logdir)}.")
  figure, panels = plt.subplots(1, 2 if args.time else 1, figsize=(14 if args.time else 8, 4.5),
                                sharey=True, squeeze=False)
  for level, (frames, returns) in sorted(episodes.items()):
    x_axes = [(frames / 1e6, "environment frames (millions)")]
    if args.time:
      x_axes.append((training_hours(args.logdir, frames), "hours of training"))
    for axes, (x, label) in zip(panels[0], x_axes):
      axes.scatter(x, returns, s=2, alpha=0.25)
      axes.plot(x, running_mean(returns, args.window),
                label=f"{level} (mean of last {args.window})")
      axes.set_xlabel(label)
      axes.grid(alpha=0.3)
      axes.legend(loc=args.legend_loc)
  panels[0][0].set_ylabel("episode return")
  figure.suptitle(args.title or "Episode return against environment frames"
                  + (" and training time" if args.time else ""))
  figure.tight_layout()
  figure.savefig(args.output, dpi=100)
  for level, (frames, returns) in sorted(episodes.items()):
    print(f"{level}: {len(returns)} episodes, {frames[-1]:,} frames, mean of last "
          f"{args.window}: {running_mean(returns, args.window)[-1]:.2f}")


if __name__ == "__main__":
  main()
