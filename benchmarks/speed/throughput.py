"""The paper's Table 1 on this machine: environment frames/s of IMPALA and its baselines.

For each level (Atari Pong, B=32, T=20, Table G.1; with DeepMind Lab installed also
seekavoid_arena_01 and rooms_keys_doors_puzzle, B=32, T=100, Table 1), each network (shallow,
deep) and each --num_actors, back to back in one invocation:
  (a) environments alone: one thread per actor's environments (an environment process, or
      for Atari a vector group of --envs_per_actor games), uniformly random actions (the
      ceiling of the acting side);
  (b) IMPALA, dynamic batching: `experiment.py --mode=train` (the actors' forward passes
      batched by dynamic_batching);
  (c) IMPALA, each actor calling the network itself (`--nobatched_inference`);
  (d) a batched synchronous baseline (A2C-style, Table 1's "Batched A2C (sync step)"): the
      environments step in lock-step with one batched forward pass per step, and the update
      runs after every T steps of all B environments, with nothing overlapping.
Each rate is taken over the steady window after a warm-up, from the first update (or step count
change) in it to the last (training_rate.py's steady_rate).

Each alone, it also measures the core-seconds per environment frame of: environment stepping
(one environment process, or for Atari one actor's vector group with ale-py's threads,
random actions), acting inference (the acting network's
forward pass on a batch of --inference_batch, no environment), the learner update (batches of
B x T). The compute-bound limit is cores / (their sum): what the machine could do if it did
nothing else; every variant is reported as a fraction of it. For (b) the run is profiled per
stage (CPU of each group of threads, and of the environment processes; scalable_agent_tf2/
profiling.py).

Usage:
  python -m benchmarks.speed.throughput                # the full table (about 40 minutes here)
  python -m benchmarks.speed.throughput --quick        # about 2 minutes: Pong, shallow, (a)+(b)
  python -m benchmarks.speed.throughput --gpu          # on a GPU: throughput_gpu.py (learner
                                                       # update on the GPU, XLA on/off; end to end)
  python -m benchmarks.speed.throughput --levels atari/pong --torsos shallow --num_actors 2,4 \
      --envs_per_actor 16 --variants a,b,c,d --seconds 60 --warmup 25 --output /tmp/table1.md
Prints Markdown (and writes it to --output when given).
"""
import argparse
import concurrent.futures
import contextlib
import dataclasses
import os
import sys
import threading
import time

import numpy as np

# TensorFlow first, through quiet_tensorflow: its start-up notices (cuInit's failure on a machine
# without a GPU among them) say nothing actionable on a CPU machine, as in experiment.py.
from scalable_agent_tf2.utils import quiet_tensorflow

tf = quiet_tensorflow.import_tensorflow()

from benchmarks.speed import machine_load
from benchmarks.speed import stage_costs
from benchmarks.speed import training_rate
from benchmarks.speed.learner_step import machine_description  # One machine line for all.
from scalable_agent_tf2.acting import actor as actor_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.structures import AgentOutput

VARIANT_NAMES = {
    "a": "(a) environments alone, random actions",
    "b": "(b) IMPALA, dynamic batching",
    "c": "(c) IMPALA, each actor calls the network",
    "d": "(d) batched synchronous (A2C-style, sync step)",
}


def _sample_until(frames_so_far, seconds):
  """[(time, frames)] every training_rate.INTERVAL_SECS for `seconds` from a callable() ->
  frames."""
  samples = [(time.monotonic(), frames_so_far())]
  deadline = samples[0][0] + seconds
  while time.monotonic() < deadline:
    time.sleep(min(training_rate.INTERVAL_SECS, max(0.0, deadline - time.monotonic())))
    samples.append((time.monotonic(), frames_so_far()))
  return samples


# ---------------------------------------------------------------------------------------
# Variants.

@contextlib.contextmanager
def playing(groups, actions):
  """Steps each group (actor.EnvironmentGroup or AtariVectorGroup) on a thread of its own with
  actions(group, rng) until the block ends, then closes them; yields a callable() -> agent
  steps so far, all groups together."""
  stop = threading.Event()
  steps = [0] * len(groups)

  def play(index):
    group, rng = groups[index], np.random.default_rng(index)
    group.initial()
    while not stop.is_set():
      group.step(actions(group, rng))
      steps[index] += group.num_envs
  threads = [threading.Thread(target=play, args=(i,), daemon=True) for i in range(len(groups))]
  for thread in threads:
    thread.start()
  try:
    yield lambda: sum(steps)
  finally:
    stop.set()
    for thread in threads:
      thread.join(30)
    for group in groups:
      group.close()


def run_environments_alone(config, seconds, warmup):
  """(a): one thread per actor's environments (a process, or an Atari vector group), random
  actions; frames/s."""
  make = assembly.default_environment_constructor(config)
  if config.uses_atari_groups:
    envs = [stage_costs.start_group(config, i) for i in range(config.num_actors)]
  else:
    envs = [actor_lib.as_group(
        assembly.start_environment(make, config.levels[i % len(config.levels)], i), "")
            for i in range(config.num_actors)]
  with playing(envs, lambda group, rng: rng.integers(group.spec.num_actions,
                                                      size=group.num_envs)) as steps:
    samples = _sample_until(lambda: steps() * config.num_action_repeats, seconds)
  return training_rate.steady_rate(samples, warmup), None


class _LockStepProcesses:
  """B environment processes stepped together by a thread pool, seen as one group."""

  def __init__(self, config, batch):
    make = assembly.default_environment_constructor(config)
    self._envs = [assembly.start_environment(make, config.levels[i % len(config.levels)], i)
                  for i in range(batch)]
    self._pool = concurrent.futures.ThreadPoolExecutor(batch)

  def initial(self):
    return self._stack(self._pool.map(lambda env: env.initial(), self._envs))

  def step(self, actions):
    return self._stack(self._pool.map(lambda pair: pair[0].step(int(pair[1])),
                                      zip(self._envs, actions)))

  @staticmethod
  def _stack(outputs):
    return tf.nest.map_structure(lambda *xs: np.stack(xs), *outputs)

  def close(self):
    self._pool.shutdown(wait=False)
    for env in self._envs:
      env.close()


def _env_batch(outputs):
  """A group's outputs [B] with word ids for instructions, in the dtypes of
  assembly.trajectory_signature."""
  batched = policies.encode_group_instructions(outputs)
  return batched._replace(reward=batched.reward.astype(np.float32),
                          episode_return=batched.episode_return.astype(np.float32),
                          episode_step=batched.episode_step.astype(np.int32))


def run_synchronous(config, network_config, seconds, warmup):
  """(d): B environments in lock-step, one forward pass per step, an update every T steps.

  The environments are stepped as training steps them: Atari's as one vector group of B games
  (ale-py's threads), the others as B environment processes stepped together."""
  batch, unroll = config.batch_size, config.unroll_length
  envs = (stage_costs.start_group(dataclasses.replace(config, envs_per_actor=batch), 0)
          if config.uses_atari_groups else _LockStepProcesses(config, batch))
  try:
    agent = networks.Agent(network_config, seed=0)
    learner = learner_lib.Learner(agent, config.learner_config(),
                                  jit_compile=config.jit_compile_choice())
    step = tf.function(policies.acting_step(agent))
    rng = np.random.default_rng(0)
    stack = lambda *xs: np.stack(xs)
    current = _env_batch(envs.initial())
    agent_output = AgentOutput(action=np.zeros(batch, np.int32),
                               policy_params=np.zeros((batch, network_config.num_actions),
                                                      np.float32),
                               baseline=np.zeros(batch, np.float32))
    state = agent.initial_state(batch)
    frames, stop_at = 0, time.monotonic() + seconds
    samples = [(time.monotonic(), 0)]
    while time.monotonic() < stop_at:
      initial_state, env_steps, agent_steps = state, [current], [agent_output]
      for _ in range(unroll):
        instruction = (current.observation.instruction if network_config.use_instruction
                       else ())
        logits, baselines, state = step(agent_output.action, current.reward, current.done,
                                        current.observation.frame, instruction, state)
        logits, baselines = logits.numpy(), baselines.numpy()
        actions = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1).astype(np.int32)
        current = _env_batch(envs.step(actions))
        agent_output = AgentOutput(action=actions, policy_params=logits, baseline=baselines)
        env_steps.append(current)
        agent_steps.append(agent_output)
      learner.update(initial_state, tf.nest.map_structure(stack, *env_steps),
                     tf.nest.map_structure(stack, *agent_steps))["total_loss"].numpy()
      frames += batch * unroll * config.num_action_repeats
      now = time.monotonic()
      if now - samples[-1][0] >= training_rate.INTERVAL_SECS:
        samples.append((now, frames))
    return training_rate.steady_rate(samples, warmup), None
  finally:
    envs.close()


# ---------------------------------------------------------------------------------------

def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="About 2 minutes: Pong, shallow, the preset's actors, variants a and "
                      "b.")
  parser.add_argument("--levels", default=None,
                      help="Comma-separated; default Pong (+ the DMLab tasks if installed).")
  parser.add_argument("--torsos", default="shallow,deep")
  parser.add_argument("--num_actors", default="",
                      help="Comma-separated sweep of actor threads for (a)-(c); default: the "
                      "level's preset (Atari: families.atari.atari_actor_layout). (d) uses B "
                      "environments.")
  parser.add_argument("--envs_per_actor", type=int, default=None,
                      help="Environments per actor thread (Atari vector groups); default: "
                      "the preset (families.atari.atari_actor_layout for Atari, else 1).")
  parser.add_argument("--variants", default="a,b,c,d")
  parser.add_argument("--seconds", type=float, default=75.0, help="Length of each run.")
  parser.add_argument("--warmup", type=float, default=30.0,
                      help="Seconds of each run left out of its rate.")
  parser.add_argument("--cost_seconds", type=float, default=10.0,
                      help="Length of each cost measurement.")
  parser.add_argument("--inference_batch", type=int, default=16,
                      help="Batch of the acting forward pass in the inference cost.")
  parser.add_argument("--level_cache_dir", default="",
                      help="DMLab: compiled-map cache for every run (as experiment.py's flag).")
  parser.add_argument("--output", default="", help="Also write the Markdown here.")
  args = parser.parse_args(argv)
  if args.quick:
    args.levels, args.torsos, args.num_actors, args.variants = "atari/pong", "shallow", "", "a,b"
    args.seconds, args.warmup, args.cost_seconds = 40.0, 15.0, 5.0
  if args.levels is None:
    args.levels = ",".join(training_rate.ATARI_LEVELS + (
        training_rate.DMLAB_LEVELS if training_rate.dmlab_available() else ()))
  unknown = set(args.variants.split(",")) - set(VARIANT_NAMES)
  if unknown:
    parser.error(f"--variants: unknown {', '.join(sorted(unknown))}; use a, b, c, d")
  return args


def _log(text):
  print(text, file=sys.stderr, flush=True)


def _run_variant(variant, config, network_config, args, cores):
  """(frames/s, profile rows or None) of one variant's run."""
  if variant == "a":
    return run_environments_alone(config, args.seconds, args.warmup)
  if variant in ("b", "c"):
    return training_rate.run_training(config, args.seconds, args.warmup, variant == "b",
                                      cores)
  return run_synchronous(config, network_config, args.seconds, args.warmup)


def measure_table(level, torso, args, cores):
  """One level and network: the costs, the limit and every variant; (lines, profile lines)."""
  actor_counts = [int(n) for n in args.num_actors.split(",") if n]
  base = training_rate.level_config(
      level, torso, actor_counts[0] if actor_counts else None,
      envs_per_actor=args.envs_per_actor, level_cache_dir=args.level_cache_dir)
  network_config = stage_costs.network_config(base)
  costs = dict(environment=stage_costs.environment_cost(base, args.cost_seconds),
               inference=stage_costs.inference_cost(base, network_config, args.inference_batch,
                                        args.cost_seconds),
               learner=stage_costs.learner_cost(base, network_config, args.cost_seconds))
  limit = cores / sum(costs.values())
  _log(f"{level} {torso}: costs {costs}, limit {limit:,.0f}")
  lines = [f"### {level}, {torso} network, B={base.batch_size}, T={base.unroll_length}", "",
           "Core-microseconds per environment frame, each alone: environment "
           f"{1e6 * costs['environment']:.1f}, acting inference (batch "
           f"{args.inference_batch}) {1e6 * costs['inference']:.1f}, learner update "
           f"{1e6 * costs['learner']:.1f}. Compute-bound limit: {cores} cores / "
           f"{1e6 * sum(costs.values()):.1f} us = **{limit:,.0f} frames/s**.", "",
           "| variant | actors x environments each | frames/s | of the limit |",
           "|---|---:|---:|---:|"]
  profiles = []
  for variant in args.variants.split(","):
    counts = [base.batch_size] if variant == "d" else actor_counts or [base.num_actors]
    for count in counts:
      config = dataclasses.replace(base, num_actors=count)
      fps, profile = _run_variant(variant, config, network_config, args, cores)
      _log(f"  {VARIANT_NAMES[variant]}, {count} actors: {fps:,.0f} frames/s")
      if variant != "d":
        layout = f"{count} x {config.envs_per_actor}"
      else:  # One vector group of B games (Atari), or B environment processes.
        layout = f"1 x {count}" if config.uses_atari_groups else f"{count} x 1"
      lines.append(f"| {VARIANT_NAMES[variant]} | {layout} | {fps:,.0f} | {fps / limit:.0%} |")
      if profile:
        profiles += ["", f"Profile of {VARIANT_NAMES[variant]}, {level}, {torso}, "
                     f"{count} actors (steady state):", ""] + profile
  return lines + [""], profiles


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  if "--gpu" in argv:  # Table 1's GPU rows: throughput_gpu.py (says so and exits 0 without one).
    from benchmarks.speed import throughput_gpu  # pylint: disable=g-import-not-at-top
    return throughput_gpu.main([argument for argument in argv if argument != "--gpu"])
  args = parse_args(argv)
  cores = os.cpu_count()
  # Other processes' load, before and during: a rate measured beside them is not the idle
  # machine's that README and RESULTS compare it with (machine_load.py).
  before, load_average = machine_load.before()
  for line in machine_load.report_lines(before, load_average, None, cores):
    _log(line)
  watch = machine_load.OtherLoad()
  lines = [f"Machine: {machine_description()}.", "",
           f"Command: `python -m benchmarks.speed.throughput {' '.join(sys.argv[1:])}`", ""]
  if not training_rate.dmlab_available():
    lines += ["DeepMind Lab is not installed: its tasks (seekavoid_arena_01, "
              "rooms_keys_doors_puzzle) are left out.", ""]
  profiles = []
  for level in args.levels.split(","):
    for torso in args.torsos.split(","):
      table, profile = measure_table(level, torso, args, cores)
      lines += table
      profiles += profile
  load = machine_load.report_lines(before, load_average, watch.cores(), cores)
  lines[2:2] = load + [""] if load else []  # Beside the machine line.
  text = "\n".join(lines + profiles) + "\n"
  print(text)
  if args.output:
    with open(args.output, "w") as f:
      f.write(text)


if __name__ == "__main__":
  sys.exit(main())
