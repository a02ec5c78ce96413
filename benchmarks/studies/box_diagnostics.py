"""What a Box-action run's log says about its learning, at a few points of its steps: the
return, the Gaussian's scale, the value loss, PopArt's scale, the KL term, the updates per
step, and how its episodes end (terminated, or cut by the time limit and bootstrapped).

    python -m benchmarks.studies.box_diagnostics /work/runs/mujoco58/Hopper-v5/ours_seed_1 \\
        --action_size=3 --time_limit=1000

Read from the run's log.jsonl (runlog: progress records hold the learner's last update's
statistics, episode records each episode's return and length). The Gaussian's scale comes
from the entropy the learner logs even at entropy_cost 0 (entropy_loss = -sum of the T x B
steps' entropies, losses.entropy_loss): a diagonal Gaussian of A dimensions has entropy
A (1/2) log(2 pi e) + sum_a log std_a, so the mean log std is H / A - (1/2) log(2 pi e).
The per-update losses are sums over the batch's T x B steps (--steps_per_batch: the run's
batch_size x unroll_length), so they are divided by it. Prints a markdown table.
"""
import argparse
import math

import numpy as np

from scalable_agent_tf2.runfiles import runlog

WINDOW = 100  # The running mean of the returns, as the side by side's thresholds.


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("logdir")
  parser.add_argument("--action_size", type=int, required=True,
                      help="The Box action's dimensions (Hopper 3, Walker2d 6, Reacher 2).")
  parser.add_argument("--time_limit", type=int, required=True,
                      help="The environment's max_episode_steps (gymnasium's spec).")
  parser.add_argument("--steps_per_batch", type=int, default=256,
                      help="T x B of one update (the gym defaults: 4 x 64).")
  parser.add_argument("--at", default="50000,100000,200000,300000,500000,750000,1000000",
                      help="Comma-separated agent steps to report at.")
  return parser.parse_args(argv)


def mean_log_std(entropy_loss, steps_per_batch, action_size):
  """The mean log standard deviation of a diagonal Gaussian policy from -sum of entropies."""
  entropy = -entropy_loss / steps_per_batch
  return entropy / action_size - 0.5 * math.log(2 * math.pi * math.e)


def rows_at(records, points, args):
  """One dict per point: the last progress record at or before it, and the episodes so far."""
  progress = [r for r in runlog.of_kind(records, runlog.PROGRESS) if "entropy_loss" in r]
  episodes = list(runlog.of_kind(records, runlog.EPISODE))
  out = []
  for point in points:
    before = [r for r in progress if r["frames"] <= point]
    done = [e for e in episodes if e["frames"] <= point]
    if not before or not done or (out and out[-1]["steps"] == before[-1]["frames"]):
      continue  # Before the first update, or past the run's end.
    last, recent = before[-1], done[-WINDOW:]
    lengths = np.array([e["episode_length"] for e in recent])
    out.append(dict(
        steps=last["frames"],
        seconds=last["time"] - records[0]["time"],
        running_mean=float(np.mean([e["episode_return"] for e in recent])),
        mean_length=float(np.mean(lengths)),
        cut_by_time_limit=float(np.mean(lengths >= args.time_limit)),
        log_std=mean_log_std(last["entropy_loss"], args.steps_per_batch, args.action_size),
        baseline_loss=last["baseline_loss"] / args.steps_per_batch,
        kl=last["kl_loss"] / args.steps_per_batch,
        kl_coefficient=last.get("kl_coefficient", float("nan")),
        sigma=float(np.ravel(last["popart_sigma"])[0]) if "popart_sigma" in last else float("nan"),
        grad_norm=last["grad_norm"],
        updates_per_step=last["updates"] / max(last["frames"], 1),
        ppo_clipped=last.get("ppo_clipped_fraction", float("nan"))))
  return out


def table(rows):
  header = ("| steps | s | return (mean of 100) | episode length | cut at the limit | mean log std "
            "| value loss / step | PopArt sigma | KL / step | KL coefficient | PPO-clipped | "
            "grad norm | updates / step |")
  lines = [header, "|" + "---:|" * (header.count("|") - 1)]
  for r in rows:
    lines.append(
        f"| {r['steps']:,} | {r['seconds']:.0f} | {r['running_mean']:.0f} | "
        f"{r['mean_length']:.0f} | {r['cut_by_time_limit']:.0%} | {r['log_std']:.2f} | "
        f"{r['baseline_loss']:.3g} | {r['sigma']:.3g} | {r['kl']:.3g} | "
        f"{r['kl_coefficient']:.3g} | {r['ppo_clipped']:.2f} | {r['grad_norm']:.3g} | "
        f"{r['updates_per_step']:.3f} |")
  return "\n".join(lines)


def main(argv=None):
  args = parse_args(argv)
  records = runlog.read_log(args.logdir)
  points = [int(p) for p in args.at.split(",") if p]
  print(table(rows_at(records, points, args)))


if __name__ == "__main__":
  main()
