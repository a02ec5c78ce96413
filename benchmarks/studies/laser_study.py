"""LASER's replay and trust-region V-trace (Schmitt et al., 2019) at this machine's scale:
online V-trace against uniform trajectory replay, LASER's episode replay, and each of those
with the trust region, on one level with the same frame budget and seeds.

    python -m benchmarks.studies.laser_study --level=toy/lit_side_delayed --seeds=1,2,3 \
        --output_dir=/work/runs/laser_study
    python -m benchmarks.studies.laser_study --quick --output_dir=/tmp/laser_quick   # a check

Every run is `python experiment.py` with the variant's flags (VARIANTS); its command is in
<output_dir>/commands.txt and its logdir's run.json. Writes <output_dir>/laser_study.md
(final return = mean of the last 100 training episodes, mean return over the whole run, and
the share of time steps the trust region left out of the losses), laser_study.json and
laser_study.png (learning curves). Reruns skip finished runs and resume interrupted ones.
"""
import argparse
import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.studies import runs  # pylint: disable=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=wrong-import-position
from scalable_agent_tf2.runfiles import runlog  # pylint: disable=wrong-import-position

# IMPALA section 5.2.2 replays half of every batch; LASER replays 7 of 8 (section 5.3) but its
# online share is fed by many agents; with one agent half keeps the online data flowing.
REPLAY_FRACTION = 0.5


def _level_config(level):
  """The level's resolved settings (its presets, with no flag given)."""
  return config_lib.resolve(config_lib.ExperimentConfig(level_name=level))


def variants(threshold, level):
  """name -> experiment.py flags of each compared setting."""
  trust_region = dict(trust_region_threshold=threshold)
  uniform = dict(replay_fraction=REPLAY_FRACTION)
  # Replay within the batch and the level's gradient clip for both replays, so the two compare
  # on equal batches (LASER's own setup adds its replay to a full online batch and does not
  # clip: --laser_replay's defaults; the recorded study in RESULTS.md ran this way).
  laser = dict(replay_fraction=REPLAY_FRACTION, laser_replay=True,
               replay_mixing="within_batch",
               max_grad_norm=_level_config(level).max_grad_norm)
  return {"V-trace, online only": {},
          "uniform replay": uniform,
          "uniform replay + trust region": {**uniform, **trust_region},
          "LASER episode replay": laser,
          "LASER episode replay + trust region": {**laser, **trust_region}}


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--level", default="toy/lit_side_delayed")
  parser.add_argument("--total_environment_frames", type=int, default=None,
                      help="Frame budget of every run; default: the level's preset.")
  parser.add_argument("--num_actors", type=int, default=None,
                      help="Default: the level's preset.")
  parser.add_argument("--seeds", default="1", help="Comma-separated seeds: runs per variant.")
  parser.add_argument("--trust_region_threshold", type=float, default=0.01,
                      help="KL threshold of the trust region (LASER section 4.3; the paper's "
                           "value is not in our copy: 0.01 is our choice).")
  parser.add_argument("--quick", action="store_true",
                      help="A check of the whole script: 2,000 frames per run, 2 actors.")
  parser.add_argument("--extra_flags", default="",
                      help="More experiment.py flags for every run.")
  return parser.parse_args()


def rejected_share(logdir, steps_per_batch):
  """Mean over the run's progress records of the share of the batch's steps the trust region
  left out (the learner logs their number, trust_region_rejected); None without it."""
  counts = [r["trust_region_rejected"] for r in runlog.read_log(logdir)
            if r.get("trust_region_rejected") is not None]
  return float(np.mean(counts)) / steps_per_batch if counts else None


def main():
  args = parse_args()
  base = dict(level_name=args.level, checkpoint_secs=600, log_secs=5)
  if args.quick:
    args.total_environment_frames, args.num_actors = 2_000, 2
  if args.total_environment_frames:
    base["total_environment_frames"] = args.total_environment_frames
  if args.num_actors:
    base["num_actors"] = args.num_actors
  base.update(runs.parse_extra_flags(args.extra_flags))
  seeds = runs.parse_seeds(args.seeds)
  preset = _level_config(args.level)
  steps_per_batch = (int(base.get("batch_size", preset.batch_size)) *
                     int(base.get("unroll_length", preset.unroll_length)))
  log = runs.command_log(args.output_dir)

  results = {}  # variant -> [(seed, summary, rejected share)]
  for name, flags in variants(args.trust_region_threshold, args.level).items():
    for seed in seeds:
      logdir = os.path.join(args.output_dir, "runs",
                            name.replace(" + ", "_").replace(", ", "_").replace(" ", "_"),
                            f"seed{seed}")
      runs.run(runs.experiment_command(logdir, seed=seed, **base, **flags), logdir,
               None, log)
      results.setdefault(name, []).append(
          (seed, runs.summary(logdir), rejected_share(logdir, steps_per_batch)))
  write_table(args, seeds, results)
  plot(args, results)


def write_table(args, seeds, results):
  frames = next(iter(results.values()))[0][1]["frames"]
  lines = [f"{args.level}, about {frames:,} frames per run, seeds {', '.join(map(str, seeds))} "
           f"(mean ± standard deviation over seeds); trust-region threshold "
           f"{args.trust_region_threshold}; replayed share of each batch {REPLAY_FRACTION}; "
           f"machine: {runs.machine_description()}.", "",
           "| variant | final return | mean return over the run | steps left out by the "
           "trust region |", "|---|---:|---:|---:|"]
  for name, rows in results.items():
    lines.append(f"| {name} | {runs.mean_std([s['final_return'] for _, s, _ in rows])} | "
                 f"{runs.mean_std([s['mean_return'] for _, s, _ in rows])} | "
                 f"{runs.mean_std([share for _, _, share in rows])} |")
  lines += ["", "Commands:", ""] + [f"    {s['command']}" for rows in results.values()
                                     for _, s, _ in rows]
  text = "\n".join(lines) + "\n"
  with open(os.path.join(args.output_dir, "laser_study.md"), "w") as f:
    f.write(text)
  with open(os.path.join(args.output_dir, "laser_study.json"), "w") as f:
    json.dump([dict(variant=name, seed=seed, trust_region_rejected_share=share,
                    **{k: v for k, v in s.items() if k != "curves"})
               for name, rows in results.items() for seed, s, share in rows], f, indent=2)
  print(text)


def plot(args, results):
  figure, axes = plt.subplots(figsize=(8, 4.5))
  total = max(s["frames"] for rows in results.values() for _, s, _ in rows)
  scale, unit = runs.frame_scale(total)
  for index, (name, rows) in enumerate(results.items()):
    for row, (_, summary, _) in enumerate(rows):
      runs.plot_curves(axes, summary["curves"], "frames", name if row == 0 else None,
                       scale=scale, color=f"C{index}", linewidth=1)
  runs.save_return_plot(figure, axes, unit,
                        f"{args.level}: replay and trust-region V-trace (LASER)",
                        os.path.join(args.output_dir, "laser_study.png"), "lower right")
  plt.close(figure)


if __name__ == "__main__":
  main()
