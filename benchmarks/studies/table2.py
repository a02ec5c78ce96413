"""IMPALA's Table 2 at this machine's scale: four off-policy corrections, without and with
experience replay, on a few levels, each run with the same frame budget.

    python -m benchmarks.studies.table2 --output_dir=/work/runs/table2
    python -m benchmarks.studies.table2 --levels=toy/lit_side_delayed --seeds=1,2,3 --output_dir=...
    # a check of the script
    python -m benchmarks.studies.table2 --quick --output_dir=/tmp/table2_quick

The paper (section 5.2.2, Table 2) trains the shallow network on 5 DeepMind Lab tasks for 1e9
frames, 24 hyperparameter samples per cell, and reports the mean final return of the 3 best;
"with replay" draws 50% of each batch uniformly from a 10,000-trajectory replay (Table D.3).
Here: Atari games (DeepMind Lab cannot be installed on this machine) or the diagnostic toy
levels, the level's presets (one setting; --seeds per cell), --total_environment_frames per
run. Every
run is `python experiment.py` with --off_policy_correction and --replay_fraction; its command
is in <output_dir>/commands.txt and its logdir's run.json.

Writes <output_dir>/table2.md (the table: final return = mean of the last 100 training
episodes, and the mean return over the whole run, averaged over seeds), table2.json, and
table2_<level>.png (learning curves: one colour per correction,
solid without replay, dashed with replay). Reruns resume unfinished runs (experiment.py's
checkpoints) and only summarise finished ones.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.studies import runs  # pylint: disable=g-import-not-at-top,wrong-import-position

# Table 2's rows, in the paper's order (section 5.2.2).
CORRECTIONS = ("vtrace", "one_step_is", "epsilon", "none")
CORRECTION_NAMES = {"vtrace": "V-trace", "one_step_is": "1-Step", "epsilon": "ε-correction",
                    "none": "No-correction"}
# Section 5.2.2: "we draw 50% of the items in each batch uniformly at random from the replay
# buffer".
REPLAY_FRACTION = 0.5
REPLAY_SETTINGS = (("without", 0.0), ("with", REPLAY_FRACTION))


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--levels", default="atari/breakout,atari/space_invaders,atari/qbert",
                      help="Comma-separated level names (Atari games or toy levels).")
  parser.add_argument("--replay_capacity", type=int, default=10_000,
                      help="Table D.3: 10,000 trajectories.")
  parser.add_argument("--corrections", default=",".join(CORRECTIONS))
  runs.add_budget_arguments(parser, total_environment_frames=3_000_000, runs_per="cell",
                            quick_also=", replay capacity 100")
  return parser.parse_args()


def main():
  args = parse_args()
  if args.quick:
    args.levels, args.replay_capacity = runs.QUICK_LEVEL, 100
    runs.quick_budget(args)
  levels = args.levels.split(",")
  seeds = runs.parse_seeds(args.seeds)
  corrections = args.corrections.split(",")
  log = runs.command_log(args.output_dir)

  results = {}  # (level, replay, correction) -> [summary per seed]
  for level in levels:
    for replay, fraction in REPLAY_SETTINGS:
      for correction in corrections:
        for seed in seeds:
          logdir = os.path.join(args.output_dir, "runs", level.replace("/", "_"),
                                f"{replay}_replay", correction,
                                *([f"seed{seed}"] if len(seeds) > 1 else []))
          flags = dict(level_name=level, off_policy_correction=correction, seed=seed,
                       **runs.budget_flags(args))
          if fraction:
            flags.update(replay_fraction=fraction, replay_capacity=args.replay_capacity)
          runs.run(runs.experiment_command(logdir, **flags), logdir, args.max_seconds, log)
          results.setdefault((level, replay, correction), []).append(runs.summary(logdir))
  write_table(args, levels, seeds, corrections, results)
  plot(args, levels, corrections, results)


def write_table(args, levels, seeds, corrections, results):
  lines = [f"Final return (mean of the last {runs.FINAL_EPISODES} training episodes) and, in "
           f"brackets, the mean return over the whole run, after "
           f"{args.total_environment_frames:,} frames per run; "
           f"{'seed ' if len(seeds) == 1 else 'mean ± standard deviation over seeds '}"
           f"{', '.join(map(str, seeds))}; machine: {runs.machine_description()}.", "",
           "| | " + " | ".join(levels) + " |", "|---|" + "---:|" * len(levels)]
  for replay, _ in REPLAY_SETTINGS:
    lines.append(f"| **{replay.capitalize()} replay** |" + " |" * len(levels))
    for correction in corrections:
      cells = []
      for level in levels:
        summaries = results[(level, replay, correction)]
        cells.append(f"{runs.mean_std([s['final_return'] for s in summaries])} "
                     f"({runs.mean_std([s['mean_return'] for s in summaries])})")
      lines.append(f"| {CORRECTION_NAMES[correction]} | " + " | ".join(cells) + " |")
  lines += ["", "| level | replay | correction | seed | frames | updates | episodes | "
            "wall (s) | frames/s | final return |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
  for (level, replay, correction), summaries in results.items():
    for seed, s in zip(seeds, summaries):
      lines.append(f"| {level} | {replay} | {correction} | {seed} | {s['frames']:,} | "
                   f"{s['updates']:,} | {s['episodes']:,} | {s['wall_seconds']:.0f} | "
                   f"{s['frames_per_second']:,.0f} | {runs.fmt(s['final_return'], 2)} |")
  text = "\n".join(lines) + "\n"
  with open(os.path.join(args.output_dir, "table2.md"), "w") as f:
    f.write(text)
  with open(os.path.join(args.output_dir, "table2.json"), "w") as f:
    json.dump([dict(level=level, replay=replay, correction=correction, seed=seed,
                    **{k: v for k, v in s.items() if k != "curves"})
               for (level, replay, correction), summaries in results.items()
               for seed, s in zip(seeds, summaries)], f, indent=2)
  print(text)


def plot(args, levels, corrections, results):
  colours = dict(zip(CORRECTIONS, ("C0", "C1", "C2", "C3")))
  scale, unit = runs.frame_scale(args.total_environment_frames)
  for level in levels:
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for replay, _ in REPLAY_SETTINGS:
      for correction in corrections:
        for index, summary in enumerate(results[(level, replay, correction)]):
          runs.plot_curves(axes, summary["curves"], "frames",
                           f"{CORRECTION_NAMES[correction]}, {replay} replay" if index == 0
                           else None, scale=scale, color=colours[correction],
                           linestyle="-" if replay == "without" else "--", linewidth=1)
    runs.save_return_plot(
        figure, axes, unit, f"{level}: off-policy corrections without / with replay (Table 2)",
        os.path.join(args.output_dir, f"table2_{level.replace('/', '_')}.png"))
    plt.close(figure)


if __name__ == "__main__":
  main()
