"""Learning curves of training runs, as PNG files, from their log.jsonl (runlog.py).

    python -m scalable_agent_tf2.runfiles.plot LOGDIR
    python -m scalable_agent_tf2.runfiles.plot RUN_A RUN_B --labels=lr_6e-4,lr_3e-4 --output=ab.png

With one LOGDIR and no --output, the run's own curve files are (re)drawn in LOGDIR: what every
training run writes at each checkpoint and at its stop (monitoring.Monitor). With several
LOGDIRs the runs are overlaid, one colour each, labelled with --labels (default: the logdirs'
names).

A figure has two columns: episode return against environment frames (the learner's frame
count at the episode's end) and against time of training (the running time of the run's
attempts: from each START record of the log to its last record, so a run that was stopped and
resumed does not count the time in between), each axis in units that suit the run's length
(frames, thousands or millions; seconds, minutes or hours: axis_unit). One row per level
(dots: every episode; line: the mean of the last --window episodes) for runs of up to
MAX_LEVEL_ROWS levels. A run whose
monitor logged human-normalised scores (a suite: Atari-57, DMLab-30, or several levels with
reference scores) gets a first row of those scores (the mean capped and the median over levels
of each level's recent mean return, as the monitor computed them); runs of more levels than
MAX_LEVEL_ROWS get their per-level curves in a second file, <output>_levels.png, one small
panel per level. A resumed run shows what led to its parameters (runlog.read_trained_records).

TensorFlow-free; matplotlib (Agg backend: no display needed) is imported only when a figure
is drawn, so nothing that merely imports this module pays for it. Files are written under a
temporary name and renamed (os.replace): a reader never sees half a PNG.
"""
import argparse
import collections
import dataclasses
import os
import sys

import numpy as np

if __package__ in (None, ""):  # Run as a file: the package is two folders up.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
from scalable_agent_tf2.runfiles import runlog  # pylint: disable=wrong-import-position

# The curve files a training run keeps in its logdir.
CURVE_FILE = "learning_curve.png"
# The exit code of a drawing whose file could not be written (a full disk, a read-only
# folder), after an `error:` line: a training run stops on it (learning_curve.CurveWriter).
WRITE_FAILED = 3
LEVELS_SUFFIX = "_levels"
# Runs of more levels than this get the per-level grid file instead of one row per level.
MAX_LEVEL_ROWS = 4
# Episodes in the running mean (the monitor's console and TensorBoard average 100 too:
# monitoring.RECENT_EPISODES).
DEFAULT_WINDOW = 100
# Figure geometry: inches per panel at DPI dots per inch (so a one-level run's figure, one row
# of two panels, is 1300 x 400 pixels); the grid has GRID_COLUMNS small panels a row.
PANEL_WIDTH_IN, PANEL_HEIGHT_IN, DPI = 6.5, 4.0, 100
GRID_COLUMNS, GRID_PANEL_WIDTH_IN, GRID_PANEL_HEIGHT_IN = 6, 3.0, 2.2
# Drawing every one of a long run's episodes (an Atari-57 run logs millions) would take
# minutes; dots are thinned to at most this many per run and level, the mean line to
# MAX_LINE_POINTS (both evenly spaced, the last point kept).
MAX_DOTS, MAX_LINE_POINTS = 4000, 2000
# The human-normalised scores the monitor logs in its PROGRESS records (monitoring.py).
SCORES = (("human_normalized_mean_capped", "mean capped"),
          ("human_normalized_median", "median"))


class NoCurve(ValueError):
  """A logdir with nothing to plot yet: its run has not finished an episode."""


class NotARun(NoCurve):
  """A folder without log.jsonl: not a training run's logdir."""


def read_episodes(logdir):
  """dict level -> (frames [N], returns [N]) of the episodes runlog.read_trained_records
  keeps."""
  by_level = collections.defaultdict(lambda: ([], []))
  for record in runlog.read_trained_records(logdir)[0]:
    frames, returns = by_level[record["level"]]
    frames.append(record["frames"])
    returns.append(record["episode_return"])
  return {level: (np.array(f), np.array(r, np.float64)) for level, (f, r) in by_level.items()}


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
  records = runlog.read_log(logdir)
  return _hours_of(runlog.read_trained_records(logdir, records)[1], records)(frames)


def _hours_of(progress, records):
  """callable(frames) -> hours of training at those frames (training_hours), for one run's
  progress records (the log's records give its attempts)."""
  if not progress:
    return lambda frames: np.zeros(len(frames))
  seconds = running_seconds(attempts_from_log(records), [p["time"] for p in progress])
  progress_frames = [p["frames"] for p in progress]
  return lambda frames: np.interp(frames, progress_frames, seconds) / 3600


def running_mean(values, window):
  """Mean of the last `window` values at each position (fewer at the start)."""
  cumulative = np.cumsum(np.insert(np.asarray(values, np.float64), 0, 0.0))
  ends = np.arange(1, len(values) + 1)
  starts = np.maximum(ends - window, 0)
  return (cumulative[ends] - cumulative[starts]) / (ends - starts)


@dataclasses.dataclass
class Curve:
  """One line: x in frames and in hours of training, y; for a level, `dots` are the episodes."""
  frames: np.ndarray
  hours: np.ndarray
  values: np.ndarray
  dots: np.ndarray = None  # Episode returns (None: a score, no dots).


@dataclasses.dataclass
class RunCurves:
  """What one logdir plots: per level, its episodes' running mean (window); per logged
  human-normalised score, its progress records' values."""
  label: str
  levels: dict   # level -> Curve.
  scores: dict   # "mean capped" / "median" -> Curve.


def read_run(logdir, label=None, window=DEFAULT_WINDOW):
  """RunCurves of a logdir; raises NoCurve when it has nothing to plot."""
  if not os.path.exists(runlog.log_path(logdir)):
    raise NotARun(f"{logdir} has no {runlog.LOG_FILE}: it is not the logdir of a training run "
                  "(or the run has not started yet). Give the --logdir a run was trained with.")
  records = runlog.read_log(logdir)
  episodes, progress = runlog.read_trained_records(logdir, records)
  by_level = collections.defaultdict(lambda: ([], []))
  for record in episodes:
    if record.get("episode_return") is None:  # Not a number (runlog writes NaN as null).
      continue
    frames, returns = by_level[record["level"]]
    frames.append(record["frames"])
    returns.append(record["episode_return"])
  if not by_level:
    raise NoCurve(f"No finished episode in {runlog.log_path(logdir)} yet.")
  hours = _hours_of(progress, records)
  levels = {}
  for level, (frames, returns) in sorted(by_level.items()):
    frames, returns = np.asarray(frames, np.float64), np.asarray(returns, np.float64)
    levels[level] = Curve(frames, hours(frames), running_mean(returns, window), dots=returns)
  scores = {}
  for key, name in SCORES:
    kept = [p for p in progress if p.get(key) is not None]
    if kept:
      frames = np.array([p["frames"] for p in kept], np.float64)
      scores[name] = Curve(frames, hours(frames), np.array([p[key] for p in kept], np.float64))
  return RunCurves(label if label is not None else _default_label(logdir), levels, scores)


def _default_label(logdir):
  return os.path.basename(os.path.normpath(logdir)) or logdir


def layout(runs):
  """(rows of the main figure, levels for the grid file).

  rows: "score" first if any run logged normalised scores, then one row per level when there
  are at most MAX_LEVEL_ROWS levels; otherwise the levels go to the grid (second list)."""
  levels = sorted({level for run in runs for level in run.levels})
  rows = ["score"] if any(run.scores for run in runs) else []
  if len(levels) <= MAX_LEVEL_ROWS:
    return rows + levels, []
  return rows, levels


def figure_pixels(num_rows, with_time=True):
  """(width, height) in pixels of the main figure with num_rows rows."""
  columns = 2 if with_time else 1
  return (round(columns * PANEL_WIDTH_IN * DPI), round(num_rows * PANEL_HEIGHT_IN * DPI))


def grid_pixels(num_levels):
  """(width, height) in pixels of the per-level grid of num_levels panels."""
  rows = -(-num_levels // GRID_COLUMNS)
  return (round(GRID_COLUMNS * GRID_PANEL_WIDTH_IN * DPI),
          round(rows * GRID_PANEL_HEIGHT_IN * DPI))


def levels_path(output):
  """The grid file that goes with `output`: pong.png -> pong_levels.png."""
  stem, extension = os.path.splitext(output)
  return f"{stem}{LEVELS_SUFFIX}{extension or '.png'}"


def _thinned(count, limit):
  """Indices of at most `limit` evenly spaced points out of `count`, the last one kept."""
  if count <= limit:
    return np.arange(count)
  return np.unique(np.append(np.linspace(0, count - 1, limit).astype(int), count - 1))


def _pyplot():
  """matplotlib's pyplot on the Agg backend (files only; no display), imported on first use."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


# The x axes' units, chosen from the run's length (axis_unit) so that a short run's axis reads
# 0-25 thousand frames and 0-23 seconds, not 0.000-0.025 million and 0.0015-0.0065 hours:
# (size in frames or seconds, axis label), smallest first. The largest unit of which the
# longest curve holds at least AXIS_UNITS_FROM is used.
FRAME_UNITS = ((1, "environment frames"), (1e3, "environment frames (thousands)"),
               (1e6, "environment frames (millions)"))
TIME_UNITS = ((1, "seconds of training"), (60, "minutes of training"),
              (3600, "hours of training"))
AXIS_UNITS_FROM = 2


def _x_values(curve, x_name):
  """A curve's x values in frames or seconds."""
  return curve.frames if x_name == "frames" else curve.hours * 3600


def axis_unit(curves, x_name):
  """(size, label) of the unit for an axis of `x_name` ("frames" or "hours") on which these
  Curves are drawn, from the largest value among them (FRAME_UNITS, TIME_UNITS)."""
  units = FRAME_UNITS if x_name == "frames" else TIME_UNITS
  longest = max((float(np.max(_x_values(c, x_name))) for c in curves if len(c.frames)),
                default=0.0)
  fitting = [unit for unit in units if longest >= AXIS_UNITS_FROM * unit[0]]
  return fitting[-1] if fitting else units[0]


def _curves_of(runs, rows):
  """Every Curve the main figure draws in these rows."""
  return [curve for run in runs for name in rows
          for curve in (run.scores.values() if name == "score"
                        else [run.levels[name]] if name in run.levels else [])]


def _draw(axes, curve, x_name, colour, label, linestyle="-", unit=1):
  x = _x_values(curve, x_name) / unit
  if curve.dots is not None:
    dots = _thinned(len(x), MAX_DOTS)
    axes.scatter(x[dots], curve.dots[dots], s=2, alpha=0.25, color=colour)
  line = _thinned(len(x), MAX_LINE_POINTS)
  axes.plot(x[line], curve.values[line], color=colour, linestyle=linestyle, label=label)


def _save(figure, path):
  """Writes the figure as PNG under a temporary name in path's folder, then renames it."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
  try:
    figure.savefig(temporary, dpi=DPI, format="png")
    os.replace(temporary, path)
  except OSError as error:  # Named by the file it was for, not by its temporary name.
    raise OSError(error.errno, error.strerror or str(error), path) from error
  finally:
    if os.path.exists(temporary):
      os.remove(temporary)


def plot_runs(runs, output, window=DEFAULT_WINDOW, title="", with_time=True,
              legend_loc="best"):
  """Draws RunCurves (one colour each) into `output` and, for runs of many levels, the grid
  file levels_path(output). Returns the paths written."""
  plt = _pyplot()
  rows, grid_levels = layout(runs)
  x_names = ["frames", "hours"] if with_time else ["frames"]
  paths = []
  if rows:
    width, height = figure_pixels(len(rows), with_time)
    figure, panels = plt.subplots(len(rows), len(x_names), figsize=(width / DPI, height / DPI),
                                  squeeze=False)
    units = {x_name: axis_unit(_curves_of(runs, rows), x_name) for x_name in x_names}
    for row, name in enumerate(rows):
      for column, x_name in enumerate(x_names):
        axes = panels[row][column]
        unit, x_label = units[x_name]
        for index, run in enumerate(runs):
          colour = f"C{index % 10}"
          if name == "score":
            for (score, curve), style in zip(run.scores.items(), ("-", "--")):
              _draw(axes, curve, x_name, colour, f"{run.label}: {score}", style, unit)
          elif name in run.levels:
            _draw(axes, run.levels[name], x_name, colour,
                  f"{run.label} (mean of last {window})" if len(runs) > 1
                  else f"mean of last {window}", unit=unit)
        axes.set_title("human-normalised score (%)" if name == "score" else name, fontsize=10)
        axes.set_xlabel(x_label)
        axes.set_ylabel("score (%)" if name == "score" else "episode return")
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
          axes.legend(loc=legend_loc, fontsize=8)
    figure.suptitle(title or ("Learning curve" + (f": {runs[0].label}" if len(runs) == 1
                                                  else "s")))
    figure.tight_layout()
    _save(figure, output)
    plt.close(figure)
    paths.append(output)
  if grid_levels:
    path = levels_path(output)
    _plot_grid(plt, runs, grid_levels, path, window, title)
    paths.append(path)
  return paths


def _plot_grid(plt, runs, levels, path, window, title):
  """One small panel per level: each run's mean of the last `window` returns against frames."""
  width, height = grid_pixels(len(levels))
  rows = -(-len(levels) // GRID_COLUMNS)
  figure, panels = plt.subplots(rows, GRID_COLUMNS, figsize=(width / DPI, height / DPI),
                                squeeze=False)
  unit, x_label = axis_unit([run.levels[level] for run in runs for level in levels
                             if level in run.levels], "frames")
  for index, axes in enumerate(panels.flat):
    if index >= len(levels):
      axes.axis("off")
      continue
    for run_index, run in enumerate(runs):
      if levels[index] in run.levels:
        curve = run.levels[levels[index]]
        line = _thinned(len(curve.frames), MAX_LINE_POINTS)
        axes.plot(curve.frames[line] / unit, curve.values[line], color=f"C{run_index % 10}",
                  label=run.label, linewidth=1)
    axes.set_title(levels[index], fontsize=7)
    axes.tick_params(labelsize=6)
    axes.grid(alpha=0.3)
  if len(runs) > 1:
    panels.flat[0].legend(fontsize=6)
  # Fixed margins (in inches): tight_layout measures every one of 57 panels' labels, seconds.
  width_in, height_in = width / DPI, height / DPI
  figure.suptitle((title + ": " if title else "")
                  + f"mean of the last {window} episode returns against {x_label}",
                  y=1 - 0.08 / height_in, va="top")
  figure.subplots_adjust(left=0.35 / width_in, right=1 - 0.1 / width_in,
                         bottom=0.25 / height_in, top=1 - 0.6 / height_in,
                         wspace=0.25, hspace=0.55)
  _save(figure, path)
  plt.close(figure)


def write_run_curves(logdir, window=DEFAULT_WINDOW):
  """A training run's own curve files in its logdir (CURVE_FILE, and the grid file for many
  levels); [] while it has no finished episode. Returns the paths written."""
  try:
    run = read_run(logdir, window=window)
  except NoCurve:
    return []
  return plot_runs([run], os.path.join(logdir, CURVE_FILE), window=window)


TABLE_COLUMNS = ("level", "frames", "hours", "mean_return")


def table_rows(run, every):
  """The run's curve as rows of TABLE_COLUMNS at every `every` frames: per level, at each
  multiple of `every` the run has passed, the mean of the last --window episodes that ended
  at or before it and the hours of training then. What a report quotes of a run (and what
  benchmarks/peers/learning_side_by_side.py's --ours_table reads once the logdir is gone)."""
  rows = []
  for level, curve in run.levels.items():
    for count in range(every, int(curve.frames[-1]) + 1, every):
      last = np.searchsorted(curve.frames, count, side="right") - 1
      if last >= 0:
        rows.append(dict(level=level, frames=count, hours=round(float(np.interp(
            count, curve.frames, curve.hours)), 3), mean_return=round(float(
                curve.values[last]), 3)))
  return rows


def summary_lines(runs):
  """The console's lines: per run and level, episodes, frames and the last running mean."""
  lines = []
  for run in runs:
    for level, curve in run.levels.items():
      lines.append(f"{run.label}: {level}: {len(curve.dots)} episodes, "
                   f"{int(curve.frames[-1]):,} frames, mean of last: {curve.values[-1]:.2f}")
  return lines


def _parser():
  parser = argparse.ArgumentParser(
      prog="python -m scalable_agent_tf2.runfiles.plot",
      description=__doc__.split("\n", maxsplit=1)[0],
      epilog="With one LOGDIR and no --output, the run's own curve files are redrawn in it.")
  parser.add_argument("logdirs", nargs="+", metavar="LOGDIR",
                      help="training runs' logdirs (their log.jsonl)")
  parser.add_argument("--output", default=None,
                      help=f"the PNG to write (default with one LOGDIR: LOGDIR/{CURVE_FILE}); "
                           f"runs of more than {MAX_LEVEL_ROWS} levels also get "
                           f"<output>{LEVELS_SUFFIX}.png")
  parser.add_argument("--labels", default=None,
                      help="comma-separated names of the runs, one per LOGDIR (default: the "
                           "logdirs' names)")
  parser.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                      help="episodes in the running mean (default %(default)s)")
  parser.add_argument("--title", default="")
  parser.add_argument("--frames_only", action="store_true",
                      help="leave out the panels against time of training")
  parser.add_argument("--legend_loc", default="best", help="matplotlib's legend location")
  parser.add_argument("--table_every", type=int, default=None, metavar="FRAMES",
                      help="also print each run's curve as CSV rows (level, frames, hours, "
                           "mean_return: the mean of the last --window episodes) at every "
                           "FRAMES frames, the table a report quotes")
  parser.add_argument("--nice", type=int, default=0,
                      help="lower this process's priority by this much (a training run's own "
                           "redraws use 10, so that they take CPU from nothing else)")
  return parser


def main(argv=None):
  parser = _parser()
  args = parser.parse_args(argv)
  if args.nice:
    os.nice(args.nice)
  labels = [None] * len(args.logdirs)
  if args.labels is not None:
    labels = args.labels.split(",")
    if len(labels) != len(args.logdirs):
      parser.error(f"--labels names {len(labels)} runs but {len(args.logdirs)} LOGDIRs were "
                   "given: give one label per LOGDIR, in the same order.")
  if args.window < 1:
    parser.error(f"--window={args.window}: the running mean needs at least 1 episode.")
  if args.table_every is not None and args.table_every < 1:
    parser.error(f"--table_every={args.table_every}: give a positive number of frames.")
  if args.output is None and len(args.logdirs) > 1:
    parser.error("several LOGDIRs need --output=FILE.png (where the overlaid curves go).")
  try:
    runs = [read_run(logdir, label, args.window) for logdir, label in zip(args.logdirs, labels)]
  except NoCurve as error:
    if args.output is None and not isinstance(error, NotARun):
      print(f"{error} Nothing to draw.")  # A run's own redraw before its first episode.
      return
    raise SystemExit(str(error)) from None
  output = args.output or os.path.join(args.logdirs[0], CURVE_FILE)
  try:
    paths = plot_runs(runs, output, window=args.window, title=args.title,
                      with_time=not args.frames_only, legend_loc=args.legend_loc)
  except OSError as error:  # A full disk, a read-only folder: the previous file stays whole.
    reason = f"[Errno {error.errno}] {error.strerror}" if error.errno else str(error)
    print(f"error: cannot write {error.filename or output}: {reason}", file=sys.stderr)
    raise SystemExit(WRITE_FAILED) from None
  for line in summary_lines(runs):
    print(line)
  print("Wrote " + ", ".join(paths))
  if args.table_every:
    for run in runs:
      print(f"# {run.label}: every {args.table_every:,} frames")
      print(",".join(TABLE_COLUMNS))
      for row in table_rows(run, args.table_every):
        print(",".join(str(row[column]) for column in TABLE_COLUMNS))


if __name__ == "__main__":
  main()
