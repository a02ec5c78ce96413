"""IMPACT against IMPALA on one level: the same frame budget on the same machine, compared
by frames and by wall-clock time (the IMPACT paper's Figure 6, at this machine's scale).

    python -m benchmarks.studies.impact_vs_impala --output_dir=/work/runs/impact_vs_impala
    python -m benchmarks.studies.impact_vs_impala --level=toy/lit_side_delayed --seeds=1,2,3 ...
    python -m benchmarks.studies.impact_vs_impala --quick --output_dir=/tmp/impact_quick  # a check

Each algorithm runs with its own presets (configuration/config.py: Table G.1 for IMPALA; IMPACT's
Table 1 settings for --algorithm=impact) and the same level, batch, unroll, actors, seeds and
--total_environment_frames; the runs take turns on the machine, one after the other.
--max_seconds also gives them the same wall-clock budget (each is stopped, with a checkpoint,
after that many seconds).

Writes <output_dir>/impact_vs_impala.md (final return = mean of the last 100 training
episodes; the return each run had reached at the frames and at the running time every run
reached; with --test_episodes, the mean return of the last checkpoint played in test mode;
wall time, frames/s, learner steps), impact_vs_impala.json and impact_vs_impala.png (returns
against frames and against wall-clock time, a line per seed, the seed range shaded).
--report_only rewrites them from the runs as they are, running nothing.

Returns plotted are the training episodes' (the actors' sampled policy), as RLlib's
episode_reward_mean that the IMPACT paper plotted; test mode also samples its actions.
"""
import argparse
import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.studies import runs  # pylint: disable=g-import-not-at-top,wrong-import-position

ALGORITHMS = ("impala", "impact")


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--level", default="atari/breakout",
                      help="Level name; the IMPACT paper's Figure 6 has atari/breakout, "
                           "atari/space_invaders and atari/pong.")
  runs.add_budget_arguments(parser, total_environment_frames=10_000_000, runs_per="algorithm")
  parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                      help="Comma-separated, from impala and impact: run (or report) only "
                           "these, e.g. one algorithm again with other --extra_flags.")
  parser.add_argument("--test_episodes", type=int, default=0,
                      help="After each run, also play its last checkpoint for this many "
                           "episodes in test mode (experiment.py --mode=test) and report "
                           "their mean return; 0: no test.")
  parser.add_argument("--report_only", action="store_true",
                      help="Run nothing: write the table and figure from the runs in "
                           "--output_dir as they are (unfinished ones up to where they are).")
  return parser.parse_args()


def main():
  args = parse_args()
  asked = args.algorithms.split(",")
  algorithms = [a for a in ALGORITHMS if a in asked]
  if set(asked) - set(ALGORITHMS) or not algorithms:
    raise SystemExit(f"--algorithms={args.algorithms}: choose from {', '.join(ALGORITHMS)}.")
  if args.quick:
    args.level = runs.QUICK_LEVEL
    runs.quick_budget(args)
  flags = dict(level_name=args.level)
  flags.update(runs.budget_flags(args))  # --extra_flags may name the level too.
  seeds = runs.parse_seeds(args.seeds)
  log = runs.command_log(args.output_dir)
  results = {}  # (algorithm, seed) -> summary
  for seed in seeds:
    for algorithm in algorithms:
      logdir = os.path.join(args.output_dir, "runs", algorithm,
                            *([f"seed{seed}"] if len(seeds) > 1 else []))
      if args.report_only:
        if not os.path.exists(os.path.join(logdir, runs.RUN_FILE)):
          continue
      else:
        run_flags = dict(algorithm=algorithm, seed=seed, **flags)
        runs.run(runs.experiment_command(logdir, **run_flags), logdir, args.max_seconds, log)
        if args.test_episodes:
          runs.test_return(runs.experiment_command(
              logdir, mode="test", test_num_episodes=args.test_episodes, **run_flags),
              logdir, log)
      results[(algorithm, seed)] = dict(runs.summary(logdir),
                                        test=runs.read_test_return(logdir))
  if not results:
    raise SystemExit(f"No runs in {args.output_dir} yet.")
  report(args, flags, seeds, results)


def report(args, flags, seeds, results):
  """Writes the table (.md), the summaries (.json) and the figure (.png) of `results`
  ({(algorithm, seed): runs.summary}) into args.output_dir."""
  # The wall clock and the frames every run reached: compare returns there too.
  common_seconds = min(s["wall_seconds"] for s in results.values())
  common_frames = min(s["frames"] for s in results.values())
  tested = {s["test"][1] for s in results.values() if s["test"]}
  test_episodes = f" ({', '.join(map(str, sorted(tested)))} episodes)" if tested else ""
  lines = [f"{flags['level_name']}, {flags['total_environment_frames']:,} frames per run"
           f"{'' if args.max_seconds is None else f' or {args.max_seconds:.0f} s'}; machine: "
           f"{runs.machine_description()}. Final return: mean of the last "
           f"{runs.FINAL_EPISODES} training episodes; mean return: of every episode of the "
           f"run.", "",
           f"| algorithm | seed | frames | wall (s) | frames/s | learner steps | episodes | "
           f"final return | mean return | return at {common_frames:,} frames | "
           f"return at {common_seconds:.0f} s | test return{test_episodes} |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  reached = lambda s: (runs.return_at(s["curves"], "frames", common_frames),
                       runs.return_at(s["curves"], "seconds", common_seconds),
                       s["test"][0] if s["test"] else None)
  for (algorithm, seed), s in results.items():
    at_frames, at_seconds, tested = reached(s)
    lines.append(
        f"| {algorithm.upper()} | {seed} | {s['frames']:,} | {s['wall_seconds']:.0f} | "
        f"{s['frames_per_second']:,.0f} | {s['updates']:,} | {s['episodes']:,} | "
        f"{runs.fmt(s['final_return'], 2)} | {runs.fmt(s['mean_return'], 2)} | "
        f"{runs.fmt(at_frames, 2)} | {runs.fmt(at_seconds, 2)} | {runs.fmt(tested, 2)} |")
  if len(seeds) > 1:
    for algorithm in ALGORITHMS:
      mine = [s for (a, _), s in results.items() if a == algorithm]
      if not mine:
        continue
      at_frames, at_seconds, tested = zip(*map(reached, mine))
      lines.append(
          f"| {algorithm.upper()}, mean | | | "
          f"{np.mean([s['wall_seconds'] for s in mine]):.0f} | "
          f"{np.mean([s['frames_per_second'] for s in mine]):,.0f} | | | "
          f"{runs.mean_std([s['final_return'] for s in mine])} | "
          f"{runs.mean_std([s['mean_return'] for s in mine])} | "
          f"{runs.mean_std(at_frames)} | {runs.mean_std(at_seconds)} | "
          f"{runs.mean_std(tested)} |")
  lines += ["", "Commands:", ""] + [f"    {s['command']}" for s in results.values()]
  text = "\n".join(lines) + "\n"
  with open(os.path.join(args.output_dir, "impact_vs_impala.md"), "w") as f:
    f.write(text)
  with open(os.path.join(args.output_dir, "impact_vs_impala.json"), "w") as f:
    json.dump([dict(algorithm=a, seed=seed, **{k: v for k, v in s.items() if k != "curves"})
               for (a, seed), s in results.items()], f, indent=2)
  print(text)

  figure, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
  colours = dict(zip(ALGORITHMS, ("C0", "C3")))
  scale, unit = runs.frame_scale(int(flags["total_environment_frames"]))
  for axes, key, key_scale in ((by_frames, "frames", scale), (by_time, "seconds", 60.0)):
    for algorithm in ALGORITHMS:
      runs.plot_seeds(axes, [runs.running_mean_curve(s["curves"], key, key_scale)
                             for (a, _), s in results.items() if a == algorithm],
                      algorithm.upper(), colours[algorithm])
  # A MuJoCo task's frame is one environment step (the paper's "timesteps", Figure 5).
  counted = "steps" if flags["level_name"].startswith("mujoco/") else "frames"
  by_frames.set_xlabel(f"environment {counted} ({unit})")
  by_time.set_xlabel("wall-clock time (minutes of running)")
  by_frames.set_ylabel(f"episode return (mean of last {runs.FINAL_EPISODES})")
  for axes in (by_frames, by_time):
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
  figure.suptitle(f"{flags['level_name']}: IMPACT vs IMPALA")
  figure.tight_layout()
  path = os.path.join(args.output_dir, "impact_vs_impala.png")
  figure.savefig(path, dpi=100)
  print(f"Wrote {path}")


if __name__ == "__main__":
  main()
