"""DeepMind Lab environments alone: frames/s with random actions, no agent (Table 1's ceiling).

For each level, one and two environments, each stepped by its own thread (as actor threads
do), with the adapter's defaults (96x72 frames, software renderer, 4 action repeats: Table
D.3):
  * inprocess: environments.dmlab.DmLabEnvironment called directly;
  * process: an environment process (environments.EnvironmentProcess, frames in shared
    memory), what training uses.
Frames/s counts rendered-and-simulated frames: agent steps x action repeats. The first reset
(map compilation, with a level cache in a temporary directory) is not timed; the resets at
episode ends inside the window are, as an actor pays them.

Needs the deepmind_lab module (BUILD.md, "DeepMind Lab").

Usage:
  python -m benchmarks.speed.dmlab_env_throughput [--seconds 20] \
      [--levels seekavoid_arena_01,rooms_keys_doors_puzzle]
Prints a Markdown table. "frames per CPU-second" divides the frames by the CPU time the
environments used (this process's for inprocess, the environment processes' for process, with
their map compilers): on a
shared machine it estimates what one free core would give better than frames/s of wall time.
"RSS" is each environment process's resident memory at the end.
"""
import argparse
import os
import tempfile
import threading
import time

import numpy as np

from scalable_agent_tf2 import environments
from scalable_agent_tf2.environments import dmlab
from scalable_agent_tf2.utils import profiling

MODES = ("inprocess", "process")


def _resident_megabytes(pid):
  """VmRSS of process pid in MB (Linux /proc), or None elsewhere."""
  try:
    with open("/proc/%d/status" % pid) as status:
      for line in status:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024.0
  except OSError:
    return None
  return None


def _environments_cpu_seconds(envs, mode):
  if mode == "process":
    return sum(profiling.process_cpu_seconds(env.pid) for env in envs)
  return profiling.process_cpu_seconds(os.getpid())


def measure(level_name, mode, num_envs, seconds, level_cache_dir):
  """(frames/s, frames per CPU-second, episodes ended, RSS MB of each process), summed over
  num_envs environments."""
  envs = [environments.create_environment(
      level_name, seed=seed, in_subprocess=(mode == "process"),
      level_cache_dir=level_cache_dir) for seed in range(num_envs)]
  steps = [0] * num_envs
  episodes = [0] * num_envs
  start = threading.Barrier(num_envs + 1)
  stop = threading.Event()

  def run(index):
    env = envs[index]
    env.initial()  # Compiles or loads the map: not timed.
    actions = np.random.default_rng(index).integers(env.spec.num_actions, size=100000)
    start.wait()
    while not stop.is_set():
      output = env.step(int(actions[steps[index] % len(actions)]))
      steps[index] += 1
      episodes[index] += int(output.done)

  threads = [threading.Thread(target=run, args=(i,)) for i in range(num_envs)]
  for thread in threads:
    thread.start()
  start.wait()
  begin = time.perf_counter()
  cpu_begin = _environments_cpu_seconds(envs, mode)
  time.sleep(seconds)
  stop.set()
  for thread in threads:
    thread.join()
  elapsed = time.perf_counter() - begin
  cpu_seconds = _environments_cpu_seconds(envs, mode) - cpu_begin
  resident = [_resident_megabytes(env.pid) for env in envs if mode == "process"]
  for env in envs:
    env.close()
  frames = sum(steps) * dmlab.DEFAULT_NUM_ACTION_REPEATS
  return frames / elapsed, frames / cpu_seconds, sum(episodes), resident


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per cell")
  parser.add_argument("--levels", default="seekavoid_arena_01,rooms_keys_doors_puzzle")
  parser.add_argument("--level_cache_dir", default="",
                      help="compiled maps (default: a temporary directory)")
  args = parser.parse_args()
  dmlab.check_deepmind_lab_available()
  print("Load average at start: %.1f %.1f %.1f; %d cores." % (os.getloadavg() + (os.cpu_count(),)))
  print("| level | mode | envs | frames/s (total) | frames per CPU-second | episodes ended "
        "| RSS per process (MB) |")
  print("|---|---|---:|---:|---:|---:|---|")
  with tempfile.TemporaryDirectory(prefix="dmlab_level_cache_") as temporary_cache:
    cache = args.level_cache_dir or temporary_cache
    for level_name in args.levels.split(","):
      for mode in MODES:
        for num_envs in (1, 2):
          rate, per_cpu_second, ended, resident = measure(level_name, mode, num_envs,
                                                          args.seconds, cache)
          rss = ", ".join("%.0f" % r for r in resident if r is not None) or "-"
          print("| %s | %s | %d | %.0f | %.0f | %d | %s |" % (
              level_name, mode, num_envs, rate, per_cpu_second, ended, rss), flush=True)


if __name__ == "__main__":
  main()
