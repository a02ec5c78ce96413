"""Two Gaussian heads for Box actions side by side (--log_std: state, the policy layer's; free,
one vector) on the gym_defaults_side_by_side harness's MuJoCo environments, from the runs'
kept episodes, with Stable-Baselines3 PPO's defaults beside them: per run, the running mean
of 100 returns at a few steps, the steps and seconds to the threshold and the return at the
end; per head, how many seeds reached the threshold and the returns at the end over seeds.

    python -m benchmarks.studies.gaussian_heads \\
        --heads=state:benchmarks/results/gym_defaults,free:benchmarks/results/gym_free_log_std \\
        --ppo=benchmarks/results/gym_defaults --seeds=1,2,3,4,5

Each directory holds the harness's <env>/<system>_seed_<n> runs (--archive_dir's layout);
seeds without a finished run there are left out. Thresholds are the harness's, Walker2d's
(none in gymnasium) PPO's median return at the end over the seeds of --ppo that finished.
Prints markdown.
"""
import argparse

import numpy as np

from benchmarks.peers import gym_defaults_side_by_side as harness

MARKS = (100_000, 200_000, 300_000, 500_000, 750_000, 1_000_000)
ENVS = ("Walker2d-v5", "HalfCheetah-v5", "Hopper-v5", "Reacher-v5")


def running_mean_at(rows, steps, window=harness.WINDOW):
  """The mean of the last `window` returns of the episodes ended by `steps` (None: none)."""
  returns = [r for _, n, r in rows if n <= steps][-window:]
  return float(np.mean(returns)) if returns else None


def finished_runs(directory, env, system, seeds):
  """{seed: rows} of the runs of `directory` that finished."""
  runs = {}
  for seed in seeds:
    rows, complete, _ = harness.read_run(directory, env, system, seed)
    if complete and rows:
      runs[seed] = rows
  return runs


def number(value, digits=0):
  return "-" if value is None else f"{value:,.{digits}f}"


def env_table(env, heads, ppo_dir, seeds):
  """The markdown lines of one environment."""
  ppo = finished_runs(ppo_dir, env, harness.PPO, seeds)
  env = harness.threshold_of(env, [(rows, True) for rows in ppo.values()])
  digits = 2 if abs(env.threshold or 100) < 100 else 0
  lines = [f"{env.name} (threshold {number(env.threshold, 2)}):", "",
           "| head, seed | " + " / ".join(f"{m // 1000}k" for m in MARKS)
           + " | to the threshold | return at the end | wall time |", "|---|---|---|---:|---:|"]
  summaries = {}
  for head, directory, system in [*((h, d, harness.OURS) for h, d in heads),
                                  ("PPO", ppo_dir, harness.PPO)]:
    runs = (ppo if system == harness.PPO else finished_runs(directory, env, system, seeds))
    summaries[head] = [harness.run_summary(rows, env.threshold, True) for rows in runs.values()]
    for (seed, rows), summary in zip(runs.items(), summaries[head]):
      marks = " / ".join(number(running_mean_at(rows, m), digits) for m in MARKS)
      reached = (f"{summary['steps_to'] / 1000:.0f}k, {summary['seconds_to']:.0f} s"
                 if summary["steps_to"] is not None else "not reached")
      lines.append(f"| {head}, {seed} | {marks} | {reached} | "
                   f"{number(summary['final'], digits)} | {rows[-1][0]:.0f} s |")
  lines.append("")
  for head, runs in summaries.items():
    steps = harness.median_range([s["steps_to"] for s in runs])
    finals = [s["final"] for s in runs]
    if finals:
      lines.append(f"- {head}: {steps['reached']} of {steps['count']} seeds reached it (median "
                   f"steps {number(steps['median'])}); return at the end: median "
                   f"{number(float(np.median(finals)), digits)}, mean "
                   f"{number(float(np.mean(finals)), digits)} [{number(min(finals), digits)}, "
                   f"{number(max(finals), digits)}]")
  return lines


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--heads", required=True,
                      help="Comma-separated name:directory pairs of our runs, one per head.")
  parser.add_argument("--ppo", required=True, help="The directory of PPO's runs.")
  parser.add_argument("--seeds", default="1,2,3,4,5")
  parser.add_argument("--envs", default=",".join(ENVS))
  args = parser.parse_args(argv)
  args.heads = [tuple(pair.split(":", 1)) for pair in args.heads.split(",")]
  if any(len(pair) != 2 for pair in args.heads):
    parser.error(f"--heads: name:directory pairs, got {args.heads}")
  args.seeds = [int(s) for s in args.seeds.split(",")]
  args.envs = [harness.ENVIRONMENTS[name] for name in args.envs.split(",")]
  return args


def main(argv=None):
  args = parse_args(argv)
  for env in args.envs:
    print("\n".join(env_table(env, args.heads, args.ppo, args.seeds)) + "\n")


if __name__ == "__main__":
  main()
