"""Learner update throughput: updates/s and learner frames/s, XLA-compiled vs. not, side by side.

Each configuration trains on one fixed random batch of the paper's shape (DMLab: B=32,
T=100, Table D.3 and released code; Atari: B=32, T=20, Table G.1), or of a MiniGrid level at
the gym family's 4 x 64 (issue 42's small frames), so the numbers measure the update alone
(no environments, no input pipeline). Learner frames/s = B x T x action repeats (4; 1 for
MiniGrid) / seconds per update: the environment frames one update consumes.

    python -m benchmarks.speed.learner_step                      # all 8 configurations
    python -m benchmarks.speed.learner_step --quick              # fewer timed updates
    python -m benchmarks.speed.learner_step --torsos=shallow --shapes=atari
    python -m benchmarks.speed.learner_step --shapes=minigrid --torsos=deep,mlp --xla=off
"""
import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.environments import base as env_base  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.environments.families import gym as gym_family  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.learning import learner  # pylint: disable=g-import-not-at-top
from tests import random_batches  # pylint: disable=g-import-not-at-top


def minigrid_config(torso):
  """A MiniGrid level's network as the gym family builds it (7x7x3 grid codes up to 10, 7
  actions, a text mission; families/gym.py's rules for the LSTM and the value torso)."""
  return networks.network_config_for_spec(
      env_base.EnvSpec(num_actions=7, frame_shape=(7, 7, 3)), torsos.FRAME, torso=torso,
      use_lstm=gym_family.uses_lstm(torsos.FRAME, False, torso), use_instruction=True,
      frame_max=10.0, separate_value_torso=gym_family.separate_value_torso(
          torsos.FRAME, False, torso))


def atari_learner_config():
  return config_lib.config_from_argv(["--level_name=atari/pong"]).learner_config()  # Table G.1.


# (network preset, learner preset, batch size, unroll length, frames per agent step) per
# shape: the papers' (Tables D.3 and G.1: 4 action repeats) and a gymnasium grid's at the gym
# family's batch of 4 x 64 (one frame a step).
SHAPES = {
    "dmlab": (networks.dmlab_config, config_lib.LearnerConfig, 32, 100, 4),  # DMLab-30's.
    "atari": (lambda torso: networks.atari_config(num_actions=6, torso=torso),
              atari_learner_config, 32, 20, 4),
    "minigrid": (minigrid_config, atari_learner_config, 4, 64, 1),
}


def measure(shape, torso, jit_compile, timed_updates):
  """Returns a dict of measurements for one configuration."""
  network_preset, learner_preset, batch_size, unroll_length, repeats = SHAPES[shape]
  agent = networks.Agent(network_preset(torso=torso))
  update = learner.Learner(agent, learner_preset(), jit_compile=jit_compile)
  env_outputs, agent_outputs = tf.nest.map_structure(
      tf.constant, random_batches.random_learner_batch(agent.config, unroll_length, batch_size))
  state = agent.initial_state(batch_size)

  start = time.perf_counter()
  update.update(state, env_outputs, agent_outputs)["total_loss"].numpy()
  first_update = time.perf_counter() - start  # Tracing and compilation included.
  update.update(state, env_outputs, agent_outputs)["total_loss"].numpy()  # Warm-up.
  durations = []
  for _ in range(timed_updates):
    start = time.perf_counter()
    update.update(state, env_outputs, agent_outputs)["total_loss"].numpy()
    durations.append(time.perf_counter() - start)
  seconds = statistics.median(durations)
  frames_per_update = batch_size * unroll_length * repeats
  return dict(shape=shape, torso=torso, xla=jit_compile, batch_size=batch_size,
              unroll_length=unroll_length, first_update_s=first_update, median_s=seconds,
              updates_per_s=1.0 / seconds, frames_per_s=frames_per_update / seconds,
              timed_updates=timed_updates)


def machine_description():
  model = "unknown CPU"
  try:
    with open("/proc/cpuinfo") as cpuinfo:
      for line in cpuinfo:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  try:
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  except (ValueError, OSError):
    memory_gib = float("nan")
  return (f"{model}, {os.cpu_count()} cores, {memory_gib:.0f} GiB; Python "
          f"{platform.python_version()}, TensorFlow {tf.__version__}; GPUs: "
          f"{len(tf.config.list_physical_devices('GPU'))}")


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="atari,dmlab")
  parser.add_argument("--torsos", default="shallow,deep")
  parser.add_argument("--xla", default="on,off", help="on, off or both (on,off).")
  parser.add_argument("--timed_updates", type=int, default=10)
  parser.add_argument("--quick", action="store_true", help="3 timed updates each.")
  args = parser.parse_args()
  timed_updates = 3 if args.quick else args.timed_updates

  print(f"Machine: {machine_description()}")
  print(f"Command: python -m benchmarks.speed.learner_step {' '.join(sys.argv[1:])}".rstrip())
  rows = []
  for shape in args.shapes.split(","):
    for torso in args.torsos.split(","):
      # Compiled and uncompiled back to back, so their ratio shares the machine's state.
      for xla in args.xla.split(","):
        result = measure(shape, torso, xla == "on", timed_updates)
        rows.append(result)
        print(f"  {shape} {torso} xla={xla}: {result['median_s'] * 1000:.1f} ms/update",
              flush=True)

  print()
  print("| shape (B, T) | torso | XLA | first update (s) | ms / update (median) | updates/s "
        "| learner frames/s | XLA speed-up |")
  print("|---|---|---|---:|---:|---:|---:|---:|")
  for row in rows:
    partner = [r for r in rows if (r["shape"], r["torso"]) == (row["shape"], row["torso"])
               and r["xla"] != row["xla"]]
    speedup = ""
    if row["xla"] and partner:
      speedup = f"{partner[0]['median_s'] / row['median_s']:.2f}x"
    print(f"| {row['shape']} ({row['batch_size']}, {row['unroll_length']}) | {row['torso']} "
          f"| {'on' if row['xla'] else 'off'} | {row['first_update_s']:.1f} "
          f"| {row['median_s'] * 1000:.0f} | {row['updates_per_s']:.2f} "
          f"| {row['frames_per_s']:,.0f} | {speedup} |")
  print(f"\nMedian of {timed_updates} timed updates after one compile and one warm-up update.")


if __name__ == "__main__":
  main()
