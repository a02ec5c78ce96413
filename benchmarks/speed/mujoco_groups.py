"""MuJoCo: environment groups in the training process against one environment process per
actor, environments alone and in training.

    python -m benchmarks.speed.mujoco_groups --level=mujoco/hopper --seconds=120 --warmup=30 \\
        --baseline_tree=/path/to/a/checkout/before/the/groups

(a) environments alone, random actions in the action bounds, the IMPACT paper's 16 workers
    (section 4.3): as training lays them out now (families.base.actor_layout: on 2 cores 2 actor
    threads x 8 tasks stepped in this process) and as it did before (16 threads, each with
    one environment process). Steps/s and core-us per step (this process and its children).
(b) training, each --algorithms preset as experiment.py runs it from this tree (groups) and,
    with --baseline_tree, from that checkout of the project (run as it is there: one
    environment process per actor before the groups existed), one after the other. The rate
    is training_rate.steady_rate of the frames delivered (trained + queued) after --warmup s from
    the first update, as Table 1's benchmark takes it.

Prints a markdown table with the machine line. Agent steps are environment frames here
(MuJoCo repeats no action).
"""
import argparse
import os
import time

import numpy as np

from benchmarks.speed import stage_costs
from benchmarks.speed import throughput
from benchmarks.speed import training_rate
from benchmarks.speed.learner_step import machine_description
from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.utils import profiling

WORKERS = 16  # The IMPACT paper's 16 CPUs (section 4.3); mujoco_presets.


def random_actions(spec, count, rng):
  """count actions uniform in the spec's bounds, float32 [count, A]."""
  return rng.uniform(spec.action_low, spec.action_high,
                     size=(count, spec.action_size)).astype(np.float32)


def start_groups(config, in_process):
  """The WORKERS environments as training would step them: in_process, config's layout of
  groups; else WORKERS environment processes, one per group."""
  level = config.levels[0]
  if in_process:
    return [actor_lib.as_group(stage_costs.start_group(config, i), level)
            for i in range(config.num_actors)]
  make = assembly.default_environment_constructor(config)
  return [actor_lib.as_group(assembly.start_environment(make, level, i), level)
          for i in range(WORKERS)]


def environments_alone(config, in_process, seconds, warmup):
  """(steps/s, core-us per step) of the environments stepped by one thread per group."""
  groups = start_groups(config, in_process)
  # This process's threads and its live environment processes' (a finished child's CPU
  # would reach this process's own count only once it is reaped).
  sampler = profiling.CpuSampler(os.getpid())
  with throughput.playing(groups, lambda group, rng: random_actions(
      group.spec, group.num_envs, rng)) as steps:
    time.sleep(warmup)
    sampler.start()
    steps_before = steps()
    time.sleep(seconds - warmup)
    wall, cpu_by_group = sampler.stop()
    stepped = steps() - steps_before
  return stepped / wall, 1e6 * sum(cpu_by_group.values()) / max(stepped, 1)


def training(tree, flags, config, seconds, warmup):
  """(steps/s, core-us per step) of experiment.py in `tree` with flags (training_rate's
  rate)."""
  rate, _, groups, trained = training_rate.measure_training(flags, config, seconds, warmup,
                                                            tree)
  return rate, 1e6 * sum(groups.values()) / max(trained, 1)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--level", default="mujoco/hopper")
  parser.add_argument("--algorithms", default="impala,impact",
                      help="Comma-separated: each algorithm's Table 2 preset is trained.")
  # Table 2's batch is 32 x 1024 steps: at 1,500 steps/s (environment processes) an update
  # every 22 s, so the window must hold several.
  parser.add_argument("--seconds", type=float, default=120.0)
  parser.add_argument("--warmup", type=float, default=30.0)
  parser.add_argument("--baseline_tree", default=None,
                      help="A checkout of the project to train from too (e.g. the commit "
                           "before MuJoCo groups), for a side-by-side ratio.")
  parser.add_argument("--skip_alone", action="store_true", help="Only (b).")
  args = parser.parse_args(argv)
  if args.seconds <= args.warmup:
    parser.error("--seconds must exceed --warmup.")
  return args


def main(argv=None):
  args = parse_args(argv)
  config = config_lib.config_from_argv([f"--level_name={args.level}"])
  layout = f"{config.num_actors} x {config.envs_per_actor} in process"
  rows = []
  if not args.skip_alone:
    for name, in_process in ((layout, True), (f"{WORKERS} x 1 environment process", False)):
      rate, cost = environments_alone(config, in_process, args.seconds, args.warmup)
      rows.append(("(a) environments alone, random actions", name, rate, cost))
      print(rows[-1], flush=True)
  trees = [("this tree: " + layout, training_rate.REPO_DIR)]
  if args.baseline_tree:
    trees.append((f"{args.baseline_tree}: as that tree lays them out",
                  os.path.abspath(args.baseline_tree)))
  for algorithm in args.algorithms.split(","):
    flags = [f"--level_name={args.level}", f"--algorithm={algorithm}"]
    run_config = config_lib.config_from_argv(flags)
    for name, tree in trees:
      rate, cost = training(tree, flags, run_config, args.seconds, args.warmup)
      rows.append((f"(b) training, {algorithm.upper()} (Table 2 preset)", name, rate, cost))
      print(rows[-1], flush=True)
  print(f"\n{args.level}; machine: {machine_description()}\n")
  print("| what | environments | steps/s | core-us per step |\n|---|---|---:|---:|")
  for what, name, rate, cost in rows:
    print(f"| {what} | {name} | {rate:,.0f} | {cost:,.0f} |")


if __name__ == "__main__":
  main()
