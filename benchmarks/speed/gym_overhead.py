"""Per-step overhead of the gymnasium family against gymnasium stepping the same environment
alone (issue 31).

    python -m benchmarks.speed.gym_overhead [--steps=20000] [--levels=gym:CartPole-v1,...]

For each level, microseconds per environment step (median of --repeats rounds):
  gymnasium:  env.step(action) of gymnasium.make(id) alone, resetting at episode ends;
  adapter:    GymEnvironment.step in this process (checks, conversion, auto-reset);
  group of 8: actor.EnvironmentGroup of 8 GymEnvironments, one group step per 8 environment
              steps (what an actor thread does with --envs_per_actor=8), per environment step;
  process:    one GymEnvironment in an EnvironmentProcess (pipe round trip), what the family
              would pay if it ran vector environments in processes.
Random actions drawn beforehand (the policy is not timed). No TensorFlow is loaded by the
environments; actor.py imports it, so the group's row needs it installed.
"""
import argparse
import statistics
import time

import numpy as np

from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import process


def _actions(spec, count, rng):
  if hasattr(spec, "action_size"):
    return list(rng.uniform(spec.action_low, spec.action_high,
                            size=(count, spec.action_size)).astype(np.float32))
  return [int(a) for a in rng.integers(spec.num_actions, size=count)]


def _time_gymnasium(env_id, actions):
  import gymnasium  # pylint: disable=g-import-not-at-top
  env = gymnasium.make(env_id)
  env.reset(seed=0)
  start = time.perf_counter()
  for action in actions:
    _, _, terminated, truncated, _ = env.step(action)
    if terminated or truncated:
      env.reset()
  elapsed = time.perf_counter() - start
  env.close()
  return elapsed / len(actions)


def _time_environment(env, actions):
  env.initial()
  start = time.perf_counter()
  for action in actions:
    env.step(action)
  elapsed = time.perf_counter() - start
  env.close()
  return elapsed / len(actions)


def _time_group(level_name, actions, size):
  from scalable_agent_tf2.acting import actor  # pylint: disable=g-import-not-at-top
  group = actor.EnvironmentGroup([gym_env.GymEnvironment(level_name, seed=s)
                                  for s in range(size)], level_name)
  group.initial()
  rounds = len(actions) // size
  start = time.perf_counter()
  for r in range(rounds):
    group.step(actions[r * size:(r + 1) * size])
  elapsed = time.perf_counter() - start
  group.close()
  return elapsed / (rounds * size)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=20000)
  parser.add_argument("--process_steps", type=int, default=3000)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--levels", default="gym:CartPole-v1,gym:Pendulum-v1")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  print(f"{'level':<20} {'gymnasium':>10} {'adapter':>10} {'group of 8':>11} {'process':>10}"
        "   (us per environment step, median of rounds)")
  for level_name in args.levels.split(","):
    spec = gym_env.GymEnvironment(level_name).spec
    actions = _actions(spec, args.steps, rng)
    env_id = level_name[len("gym:"):]
    rows = {name: [] for name in ("gymnasium", "adapter", "group", "process")}
    for _ in range(args.repeats):
      rows["gymnasium"].append(_time_gymnasium(env_id, actions))
      rows["adapter"].append(_time_environment(gym_env.GymEnvironment(level_name), actions))
      rows["group"].append(_time_group(level_name, actions, 8))
      rows["process"].append(_time_environment(
          process.EnvironmentProcess(gym_env.GymEnvironment, kwargs=dict(level_name=level_name)),
          actions[:args.process_steps]))
    us = {name: 1e6 * statistics.median(values) for name, values in rows.items()}
    print(f"{level_name:<20} {us['gymnasium']:>10.1f} {us['adapter']:>10.1f} "
          f"{us['group']:>11.1f} {us['process']:>10.1f}")


if __name__ == "__main__":
  main()
