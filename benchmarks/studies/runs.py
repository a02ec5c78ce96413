"""Shared by the study benchmarks (table2.py, impact_vs_impala.py, laser_study.py): run training
runs one after another, read their log.jsonl, summarise and plot them.

Each run is `python experiment.py --mode=train ...` in its own process, so the exact command
of every number is on record (RUN_FILE in its logdir: command, start and end time, exit code).
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

from scalable_agent_tf2.runfiles import plot as learning_curves

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable-next=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.runfiles import runlog

RUN_FILE = "run.json"
# "Final return": the mean of the last this many training episodes (monitoring.py's recent
# returns use 100 too).
FINAL_EPISODES = 100


def machine_description():
  """benchmarks.speed.learner_step's machine line (every benchmark's results share one),
  imported when called: that module loads TensorFlow, which running, reading and plotting
  runs do not need (the peers' drivers and their tests import this module)."""
  from benchmarks.speed import learner_step  # pylint: disable=g-import-not-at-top
  return learner_step.machine_description()


def experiment_command(logdir, mode="train", **flags):
  """argv of an experiment.py run (training unless mode="test") with these flags (values as
  given)."""
  return ([sys.executable, os.path.join(REPO_DIR, "experiment.py"), f"--mode={mode}",
           f"--logdir={logdir}"] + [f"--{name}={value}" for name, value in flags.items()])


# --quick of table2.py and impact_vs_impala.py: a check of the whole script in a few minutes.
QUICK_LEVEL = "atari/breakout"
QUICK_HELP = ("A check of the whole script in a few minutes: breakout, 8,000 frames per run, "
              "4 actors, batch 8")


def add_budget_arguments(parser, total_environment_frames, runs_per, quick_also=""):
  """The flags of a study whose runs all get one budget (table2.py, impact_vs_impala.py):
  --total_environment_frames, --num_actors, --seeds (runs_per: what each seed adds a run to),
  --max_seconds, --quick (quick_also: what else it shrinks) and --extra_flags."""
  parser.add_argument("--total_environment_frames", type=int,
                      default=total_environment_frames,
                      help="Frame budget of every run (the same for all runs).")
  parser.add_argument("--num_actors", type=int, default=None,
                      help="Actor threads of every run; default: the level's preset (Atari and "
                           "MuJoCo lay their environments out over the machine's cores).")
  parser.add_argument("--seeds", default="1", help=f"Comma-separated seeds: runs per {runs_per}.")
  parser.add_argument("--max_seconds", type=float, default=None,
                      help="Also stop each run after this many seconds (with a checkpoint; "
                           "the same wall clock for every run).")
  parser.add_argument("--quick", action="store_true", help=QUICK_HELP + quick_also + ".")
  parser.add_argument("--extra_flags", default="",
                      help="More experiment.py flags for every run, e.g. '--batch_size=16'.")


def quick_budget(args):
  """--quick's budget (QUICK_HELP), set on the parsed flags so that tables and plots show it."""
  args.total_environment_frames, args.num_actors = 8_000, 4


def budget_flags(args):
  """experiment.py flags of every run of a study with add_budget_arguments' flags: budget,
  actors, checkpoint and log intervals (--quick: batch 8, faster logs), then --extra_flags."""
  flags = dict(total_environment_frames=args.total_environment_frames, checkpoint_secs=600,
               log_secs=10)
  if args.num_actors is not None:
    flags["num_actors"] = args.num_actors
  if args.quick:
    flags.update(batch_size=8, log_secs=2)
  flags.update(parse_extra_flags(args.extra_flags))
  return flags


def parse_extra_flags(text):
  """--extra_flags="--a=1 --b=x" of a study -> {"a": "1", "b": "x"} (experiment.py flags)."""
  return dict(flag.lstrip("-").split("=", 1) for flag in text.split())


def parse_seeds(text):
  """--seeds="1,2,3" of a study -> [1, 2, 3]."""
  return [int(seed) for seed in text.split(",")]


def command_log(output_dir):
  """A print_fn for `run` that also appends every line to <output_dir>/commands.txt, so the
  exact command of every number is on record."""
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, "commands.txt")

  def log(line):
    print(line, flush=True)
    with open(path, "a") as f:
      f.write(line + "\n")
  return log


def printable(command):
  """The command as one would type it in the repository's directory."""
  argv = ["python", os.path.relpath(command[1], REPO_DIR)] + command[2:]
  return " ".join(shlex.quote(a) for a in argv)


def run(command, logdir, max_seconds=None, print_fn=print):
  """Runs one training command to its end (or SIGTERM once its attempts have run
  max_seconds in all: it stops with a checkpoint); console output goes to logdir/console.txt.
  Returns the RUN_FILE record.

  A study can outlive a session: a run already finished with this command is not run again,
  and an unfinished one (its process killed) resumes from its logdir's last checkpoint. The
  record lists every attempt's start and end, so wall time counts only time spent running
  (a killed attempt ends at its last progress record). Attempts of another command (flags
  changed since) are not counted."""
  os.makedirs(logdir, exist_ok=True)
  record = _read_record(logdir)
  if record and record.get("returncode") == 0 and record["command"] == printable(command):
    print_fn(f"$ {printable(command)}\n  already finished ({_wall_seconds(record):.0f} s)")
    return record
  attempts = record["attempts"] if record and record["command"] == printable(command) else []
  if attempts and attempts[-1].get("end") is None:
    attempts[-1]["end"] = _last_progress_time(logdir, attempts[-1]["start"])
    print_fn("  resuming an interrupted run from its last checkpoint")
  print_fn(f"$ {printable(command)}")
  budget = None
  if max_seconds is not None:
    budget = max(0.0, max_seconds - sum(a["end"] - a["start"] for a in attempts))
  attempts.append(dict(start=time.time(), end=None))
  record = dict(command=printable(command), attempts=attempts, returncode=None)
  _write_record(logdir, record)
  with open(os.path.join(logdir, "console.txt"), "a") as console:
    process = subprocess.Popen(command, cwd=REPO_DIR, stdout=console, stderr=subprocess.STDOUT)
    try:
      process.wait(timeout=budget)
    except subprocess.TimeoutExpired:
      process.send_signal(signal.SIGTERM)
      process.wait()
      record["stopped_after_seconds"] = max_seconds
  attempts[-1]["end"] = time.time()
  record["returncode"] = process.returncode
  _write_record(logdir, record)
  if process.returncode != 0:
    raise RuntimeError(f"{record['command']} exited with {process.returncode}; see "
                       f"{os.path.join(logdir, 'console.txt')}.")
  print_fn(f"  done in {attempts[-1]['end'] - attempts[-1]['start']:.0f} s")
  return record


# Where experiment.py --mode=test writes its results in a logdir (evaluation.py).
TEST_RESULTS = os.path.join("evaluation", "results.json")


def test_return(command, logdir, print_fn=print):
  """Mean return of the test run `command` (experiment.py --mode=test on logdir's last
  checkpoint, experiment_command(logdir, mode="test", ...)) over its episodes of the run's
  one level. A test newer than every checkpoint is not run again. Console output goes to
  logdir/test_console.txt."""
  results_path = os.path.join(logdir, TEST_RESULTS)
  checkpoints = os.path.join(logdir, "checkpoints")
  names = os.listdir(checkpoints) if os.path.isdir(checkpoints) else []
  newest_checkpoint = max((os.path.getmtime(os.path.join(checkpoints, name)) for name in names),
                          default=0.0)
  if not (os.path.exists(results_path)
          and os.path.getmtime(results_path) > newest_checkpoint):
    print_fn(f"$ {printable(command)}")
    with open(os.path.join(logdir, "test_console.txt"), "w") as console:
      subprocess.run(command, cwd=REPO_DIR, stdout=console, stderr=subprocess.STDOUT,
                     check=True)
  return read_test_return(logdir)


def read_test_return(logdir):
  """(mean return, episodes) of the run's one level from its test results; None if none."""
  path = os.path.join(logdir, TEST_RESULTS)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    rows = json.load(f)["levels"]
  if len(rows) != 1:
    raise ValueError(f"{path} has {len(rows)} levels; a study's run has one.")
  return rows[0]["mean_return"], rows[0]["episodes"]


def interrupt(process, grace_seconds):
  """SIGINT (a training run stops cleanly, with a checkpoint), then SIGKILL after
  grace_seconds."""
  if process.poll() is None:
    process.send_signal(signal.SIGINT)
    try:
      process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


def _last_progress_time(logdir, since):
  """Time of logdir's last progress record at or after `since` (`since` when none): where an
  attempt without an end (killed, or still running) has got to."""
  progress = runlog.of_kind(runlog.read_log(logdir), runlog.PROGRESS)
  return max([p["time"] for p in progress if p["time"] >= since], default=since)


def _read_record(logdir):
  path = os.path.join(logdir, RUN_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    record = json.load(f)
  if "attempts" not in record:  # Written before attempts were recorded: one attempt.
    record["attempts"] = [dict(start=record["start"], end=record.get("end"))]
  return record


def _write_record(logdir, record):
  path = os.path.join(logdir, RUN_FILE)
  with open(path + ".tmp", "w") as f:
    json.dump(record, f, indent=2)
  os.replace(path + ".tmp", path)


def _wall_seconds(record):
  return sum(a["end"] - a["start"] for a in record["attempts"] if a.get("end") is not None)


def summary(logdir):
  """dict of one finished run: frames, wall_seconds, frames_per_second (whole run), updates,
  episodes, final_return (mean of the last FINAL_EPISODES episodes; None without episodes),
  mean_return (of every episode: the area under the learning curve, per episode),
  and curves: frames [N], seconds [N] (running time of the run's attempts when the episode
  was logged) and returns [N] of the episodes, in order. A resumed run counts what led to its
  final parameters (runlog.read_trained_records); an attempt without an end (killed, or still
  running) counts up to its last progress record."""
  record = _read_record(logdir)
  if record["attempts"] and record["attempts"][-1].get("end") is None:  # Killed or running.
    record["attempts"][-1]["end"] = _last_progress_time(logdir, record["attempts"][-1]["start"])
  progress = runlog.read_trained_records(logdir)[1]
  episodes = learning_curves.read_episodes(logdir)
  frames, returns = (np.concatenate([e[i] for e in episodes.values()]) if episodes
                     else np.zeros(0) for i in (0, 1))
  frames = spread_frames(frames)
  progress_frames = np.array([p["frames"] for p in progress], np.float64)
  progress_seconds = learning_curves.running_seconds(record["attempts"],
                                                      [p["time"] for p in progress])
  # An episode is logged with the frame count of the progress record written with it.
  seconds = (np.interp(frames, progress_frames, progress_seconds) if len(progress)
             else np.zeros_like(frames))
  wall = _wall_seconds(record)
  last = progress[-1] if progress else {}
  return dict(
      command=record["command"], frames=int(last.get("frames", 0)), wall_seconds=wall,
      frames_per_second=last.get("frames", 0) / wall if wall > 0 else 0.0,
      updates=int(last.get("total_updates", 0)), episodes=len(returns),
      final_return=float(np.mean(returns[-FINAL_EPISODES:])) if len(returns) else None,
      mean_return=float(np.mean(returns)) if len(returns) else None,
      curves=dict(frames=frames, seconds=seconds, returns=returns))


def spread_frames(frames):
  """Episodes are logged with the frame count of the progress record written with them, so
  all episodes that ended between two records share one count. Spreads each such group
  evenly over (previous count, its count], in logged order: frames [N] -> float [N]."""
  frames = np.asarray(frames, np.float64)
  spread = frames.copy()
  values, starts, counts = np.unique(frames, return_index=True, return_counts=True)
  previous = 0.0
  for value, start, count in zip(values, starts, counts):
    if count > 1 and np.all(frames[start:start + count] == value):
      spread[start:start + count] = previous + (value - previous) * (
          np.arange(1, count + 1) / count)
    previous = value
  return spread


def return_at(curves, key, value):
  """Mean of the last FINAL_EPISODES episode returns logged at or before curves[key] <=
  value (e.g. key="seconds": the return a run had reached after `value` seconds)."""
  mask = curves[key] <= value
  if not mask.any():
    return None
  return float(np.mean(curves["returns"][mask][-FINAL_EPISODES:]))


def fmt(value, digits=1):
  return "n/a" if value is None else f"{value:.{digits}f}"


def mean_std(values, digits=2):
  """'mean ± std' over seeds of the values that are not None ('n/a' for none; one: as is)."""
  values = [v for v in values if v is not None]
  if len(values) < 2:
    return fmt(values[0] if values else None, digits)
  return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def frame_scale(total_frames):
  """(divisor, unit name) for a frame axis up to total_frames."""
  return (1e6, "millions") if total_frames >= 1e6 else (1e3, "thousands")


def save_return_plot(figure, axes, unit, title, path, legend_loc="upper left"):
  """Labels a plot of returns against frames (plot_curves) and writes it as a PNG."""
  axes.set_xlabel(f"environment frames ({unit})")
  axes.set_ylabel(f"episode return (mean of last {FINAL_EPISODES})")
  axes.set_title(title)
  axes.grid(alpha=0.3)
  axes.legend(loc=legend_loc, fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  print(f"Wrote {path}")


def seed_band(curves, grid):
  """(low, high) over seeds of curves [(x, y)] interpolated on grid; NaN where no curve
  covers a grid point (a curve covers [its first x, its last x])."""
  values = np.full((len(curves), len(grid)), np.nan)
  for i, (x, y) in enumerate(curves):
    if len(x):
      inside = (grid >= x[0]) & (grid <= x[-1])
      values[i, inside] = np.interp(grid[inside], x, y)
  covered = ~np.all(np.isnan(values), axis=0)
  low, high = np.full(len(grid), np.nan), np.full(len(grid), np.nan)
  low[covered] = np.nanmin(values[:, covered], axis=0)
  high[covered] = np.nanmax(values[:, covered], axis=0)
  return low, high


def plot_seeds(axes, curves, label, color):
  """One system's seeds on axes: a thin line per seed (curves [(x, y)]) and the seed range
  shaded, labelled `label, N seeds (range)`."""
  curves = [(x, y) for x, y in curves if len(x)]
  for x, y in curves:
    axes.plot(x, y, color=color, linewidth=0.8, alpha=0.8)
  if curves:
    grid = np.linspace(0, max(x[-1] for x, _ in curves), 400)
    low, high = seed_band(curves, grid)
    axes.fill_between(grid, low, high, color=color, alpha=0.25,
                      label=f"{label}, {len(curves)} seed{'s' * (len(curves) > 1)} (range)")


def running_mean_curve(curves, key, scale=1.0):
  """(curves[key] / scale, running mean (FINAL_EPISODES) of the returns): one seed's line."""
  return (curves[key] / scale,
          learning_curves.running_mean(curves["returns"], FINAL_EPISODES))


def plot_curves(axes, curves, key, label, scale=1.0, **style):
  """Running mean (FINAL_EPISODES) of the episode returns against curves[key] / scale."""
  if len(curves["returns"]):
    axes.plot(*running_mean_curve(curves, key, scale), label=label, **style)
