"""Per-task PopArt (Hessel et al. 2019) on a suite whose tasks differ in reward scale: one agent
trained without and with --popart, each task's return against its frames.

    python -m benchmarks.studies.popart_suite --output_dir=/work/runs/popart_suite
    python -m benchmarks.studies.popart_suite --seeds=1,2,3 --alone ... # and each task alone

The suite (--level, a list of toy levels) is by default toy/lit_side,toy/lit_side_x1000: one
task paying 1 and 1,000 per success, the same frames (one policy serves both); without PopArt
the large rewards take the gradient and the small task lags, with a scale and a value output
per task both learn. --level=toy/lit_side,toy/unlit_side_x1000 puts two tasks in conflict (the
frames tell them apart, the right action is the opposite side; environments/families/toy.py).
--alone also trains each level on its own with the per-task budget (IMPALA, the toy presets):
the pace of either alone.

Writes <output_dir>/popart_suite.md (per run and task: the final return, the mean of the last
100 training episodes; its normalised score, 0 at random play and 1 at the optimum; the frames
of the task by which its running mean first reached --threshold of the optimum's normalised
score), popart_suite.json and popart_suite.png (each task's running-mean return against the
frames of that task, a line per seed, both systems). --report_only rewrites them from the runs.
"""
import argparse
import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.studies import runs  # pylint: disable=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.environments import families  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.environments import toy  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.environments.families import toy as toy_family  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.runfiles import runlog  # pylint: disable=g-import-not-at-top

SYSTEMS = ("impala", "popart")  # --popart=false and --popart=true on the suite.
ALONE = "alone"  # Each task trained on its own (--alone).
# A toy task's returns: a uniformly random policy's and the optimum's (environments/toy.py).
RANDOM_RETURN, OPTIMAL_RETURN = toy.EPISODE_LENGTH / 3, float(toy.EPISODE_LENGTH)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--level", default=",".join(toy_family.REWARD_SCALE_LEVELS),
                      help="A suite of toy levels (comma-separated).")
  parser.add_argument("--total_environment_frames", type=int, default=60_000,
                      help="Frames of each suite run (the tasks share them: each gets about "
                           "its share); --alone runs get one task's share.")
  parser.add_argument("--seeds", default="1", help="Comma-separated seeds: runs per system.")
  parser.add_argument("--alone", action="store_true",
                      help="Also train each task alone (IMPALA) on its share of the frames.")
  parser.add_argument("--threshold", type=float, default=0.8,
                      help="The normalised score whose first frame the table reports.")
  parser.add_argument("--extra_flags", default="",
                      help="More experiment.py flags for every run, e.g. '--num_actors=8'.")
  parser.add_argument("--report_only", action="store_true",
                      help="Run nothing: write the table and figure from the runs there.")
  return parser.parse_args(argv)


def normalised(episode_return, level):
  """A toy task's return as 0 at random play, 1 at the optimum (its reward scale taken out)."""
  scale = toy_family.LEVEL_OPTIONS[level].get("reward_scale", 1.0)
  return (episode_return / scale - RANDOM_RETURN) / (OPTIMAL_RETURN - RANDOM_RETURN)


def task_curves(logdir, levels):
  """{level: (frames of that task [E], running mean of the last FINAL_EPISODES returns [E])}
  from a run's log: the run's frames divided among its tasks (actors play them round-robin)."""
  episodes = runlog.of_kind(runlog.read_trained_records(logdir)[0], runlog.EPISODE)
  curves = {}
  for level in levels:
    mine = sorted((e["frames"], e["episode_return"]) for e in episodes if e["level"] == level)
    if not mine:
      continue
    frames, returns = (np.asarray(column, np.float64) for column in zip(*mine))
    window = runs.FINAL_EPISODES
    cumulative = np.concatenate([[0.0], np.cumsum(returns)])
    counts = np.minimum(np.arange(1, len(returns) + 1), window)
    means = (cumulative[1:] - cumulative[np.maximum(np.arange(1, len(returns) + 1) - window,
                                                    0)]) / counts
    curves[level] = (frames / len(levels), means)
  return curves


def first_frames(curve, level, threshold):
  """The task's frames at which its running mean first reached `threshold` (normalised)."""
  frames, means = curve
  reached = np.flatnonzero(normalised(means, level) >= threshold)
  return float(frames[reached[0]]) if len(reached) else None


def run_all(args, levels, seeds):
  """Trains every run (or, --report_only, finds those there); {(system, seed): {level: logdir}}."""
  extra = runs.parse_extra_flags(args.extra_flags)
  log = runs.command_log(args.output_dir)
  logdirs = {}
  for seed in seeds:
    for system in SYSTEMS + ((ALONE,) if args.alone else ()):
      jobs = ([(level, level, args.total_environment_frames // len(levels)) for level in levels]
              if system == ALONE else [(None, args.level, args.total_environment_frames)])
      for task, level_name, frames in jobs:
        logdir = os.path.join(args.output_dir, "runs", system, *([task] if task else []),
                              f"seed{seed}")
        flags = dict(level_name=level_name, total_environment_frames=frames, seed=seed,
                     log_secs=5, checkpoint_secs=600, **extra)
        if system != ALONE:
          flags["popart"] = str(system == "popart").lower()
        if not args.report_only:
          runs.run(runs.experiment_command(logdir, **flags), logdir, print_fn=log)
        if os.path.exists(os.path.join(logdir, runs.RUN_FILE)):
          for level in ([task] if task else levels):
            logdirs.setdefault((system, seed), {})[level] = logdir
  return logdirs


def main(argv=None):
  args = parse_args(argv)
  levels = families.level_names(args.level)
  seeds = runs.parse_seeds(args.seeds)
  logdirs = run_all(args, levels, seeds)
  if not logdirs:
    raise SystemExit(f"No runs in {args.output_dir} yet.")
  results = {}  # (system, seed, level) -> dict(curve, final, normalised, first, command)
  for (system, seed), by_level in logdirs.items():
    for level, logdir in by_level.items():
      tasks = [level] if system == ALONE else levels
      curve = task_curves(logdir, tasks).get(level)
      if curve is None:
        continue
      final = float(curve[1][-1])
      results[(system, seed, level)] = dict(
          curve=curve, final=final, normalised=normalised(final, level),
          first=first_frames(curve, level, args.threshold),
          command=runs.summary(logdir)["command"])
  report(args, levels, results)


def report(args, levels, results):
  """The table (.md, .json) and the figure (.png) of `results`."""
  lines = [f"{args.level} ({', '.join(levels)}), {args.total_environment_frames:,} frames per "
           f"suite run (about {args.total_environment_frames // len(levels):,} per task); "
           f"machine: {runs.machine_description()}. Final: the mean return of the last "
           f"{runs.FINAL_EPISODES} training episodes of the task; normalised: 0 at random play, "
           f"1 at the optimum; reached: the task's frames when its running mean first reached "
           f"{args.threshold:g}.", "",
           "| system | seed | task | final return | normalised | reached at (task frames) |",
           "|---|---:|---|---:|---:|---:|"]
  for (system, seed, level), r in sorted(results.items()):
    reached = "never" if r["first"] is None else f"{r['first']:,.0f}"
    lines.append(f"| {system} | {seed} | {level} | {r['final']:,.2f} | {r['normalised']:.2f} "
                 f"| {reached} |")
  lines += ["", "Commands:", ""] + sorted({f"    {r['command']}" for r in results.values()})
  text = "\n".join(lines) + "\n"
  with open(os.path.join(args.output_dir, "popart_suite.md"), "w") as f:
    f.write(text)
  with open(os.path.join(args.output_dir, "popart_suite.json"), "w") as f:
    json.dump([dict(system=system, seed=seed, level=level,
                    **{k: v for k, v in r.items() if k != "curve"})
               for (system, seed, level), r in sorted(results.items())], f, indent=2)
  print(text)
  figure, axes_row = plt.subplots(1, len(levels), figsize=(6 * len(levels), 4.5))
  colours = dict(impala="C3", popart="C0", alone="C7")
  for axes, level in zip(np.atleast_1d(axes_row), levels):
    for system in colours:
      mine = [r["curve"] for (s, _, lv), r in sorted(results.items()) if s == system and lv == level]
      for index, (frames, means) in enumerate(mine):
        axes.plot(frames / 1e3, means, color=colours[system], alpha=0.8,
                  label=system if index == 0 else None)
    axes.set_title(level)
    axes.set_xlabel("frames of this task (thousands)")
    axes.set_ylabel(f"episode return (mean of last {runs.FINAL_EPISODES})")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
  figure.suptitle(f"{args.level}: IMPALA without and with per-task PopArt")
  figure.tight_layout()
  path = os.path.join(args.output_dir, "popart_suite.png")
  figure.savefig(path, dpi=100)
  print(f"Wrote {path}")


if __name__ == "__main__":
  main()
