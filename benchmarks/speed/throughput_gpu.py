"""Table 1 on a GPU: the learner update's time on the GPU, and IMPALA's frames/s end to end.

The paper's Table 1 rows with a GPU ran the learner (and, for "dyn. batch", the actors'
batched forward passes) on one NVIDIA P100 (Table 1, footnote 1). This measures, on the GPU
TensorFlow sees first:
  (1) the learner update alone, on one fixed random batch of B=32 trajectories: T=20 with
      Atari's inputs (84x84x4, feed-forward; Table G.1) and T=100 with DeepMind Lab's
      (96x72x3, LSTM, instructions; Table D.3), shallow and deep network (Figure 3), XLA on
      and off; the first update (tracing and XLA compilation: the start-up cost) and the
      median of the timed ones;
  (2) end to end, `experiment.py --mode=train` with dynamic batching (Table 1's "IMPALA (dyn.
      batch)") on Atari Pong (and DeepMind Lab's two Table 1 tasks where it is installed),
      shallow and deep, the actors laid out by the level's preset for this machine's cores
      (Atari: one actor thread per core, 48 environments shared among them,
      families.atari.atari_actor_layout; DeepMind Lab: Table 1's 48 actors); frames/s by
      training_rate.steady_rate.
Without a GPU it says so and exits 0: nothing here measures a CPU (throughput.py does).

    python -m benchmarks.speed.throughput --gpu --output_dir=/tmp/gpu_results
    python -m benchmarks.speed.throughput_gpu --quick        # fewer updates, shorter runs
Writes gpu_benchmark.md and gpu_benchmark.json into --output_dir (and prints the Markdown).
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from benchmarks.speed import training_rate  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.learning import learner as learner_lib  # pylint: disable=g-import-not-at-top
from tests import random_batches  # pylint: disable=g-import-not-at-top

NUM_ACTION_REPEATS = 4  # Tables D.3 and G.1: an agent step is 4 environment frames.
BATCH_SIZE = 32  # Table 1: "batch size 32 if not otherwise mentioned"; Tables D.3, G.1.
# T -> (inputs, learner preset): T=20 is Atari's (Table G.1), T=100 DeepMind Lab's (Table D.3).
UNROLL_LENGTHS = (20, 100)
NO_GPU_MESSAGE = ("No GPU: TensorFlow sees none (tf.config.list_physical_devices('GPU') is "
                  "empty), so the GPU benchmark measures nothing here. It needs an NVIDIA GPU, "
                  "its driver and tensorflow[and-cuda] (benchmarks/gpu/README.md).")
# IMPALA Table 1 (frames/s, shallow network, B=32; GPU: one NVIDIA P100): task 1
# seekavoid_arena_01, task 2 rooms_keys_doors_puzzle. (architecture, CPUs, GPUs, task 1, task 2)
PAPER_TABLE1 = (
    ("A3C 32 workers", 64, 0, "6.5K", "9K"),
    ("Batched A2C (sync step)", 48, 0, "9K", "5K"),
    ("Batched A2C (sync step)", 48, 1, "13K", "5.5K"),
    ("Batched A2C (sync traj.)", 48, 0, "16K", "17.5K"),
    ("Batched A2C (dyn. batch)", 48, 1, "16K", "13K"),
    ("IMPALA 48 actors", 48, 0, "17K", "20.5K"),
    ("IMPALA (dyn. batch) 48 actors", 48, 1, "21K", "24K"),
    ("A3C (distributed)", 200, 0, "46K", "50K"),
    ("IMPALA (distributed)", 150, 1, "80K", ""),
    ("IMPALA (optimised)", 375, 1, "200K", ""),
    ("IMPALA (optimised) batch 128", 500, 1, "250K", ""),
)


def gpu_device():
  """The first GPU's device name, or None."""
  gpus = tf.config.list_logical_devices("GPU")
  return gpus[0].name if gpus else None


def network_for(torso, unroll_length, frame_shape=None):
  """(network config, learner config) of the update benchmark: Atari's inputs for T=20,
  DeepMind Lab's otherwise (frame_shape overrides the frames: the smoke test's tiny ones)."""
  if unroll_length <= 20:
    config = networks.atari_config(num_actions=6, torso=torso,
                                   frame_shape=frame_shape or (84, 84, 4))
    return config, config_lib.config_from_argv(["--level_name=atari/pong"]).learner_config()
  config = networks.dmlab_config(torso=torso, frame_shape=frame_shape or (72, 96, 3))
  return config, config_lib.LearnerConfig()  # DMLab-30's presets.


def update_time(device, torso, unroll_length, jit_compile, batch_size=BATCH_SIZE,
                timed_updates=10, frame_shape=None):
  """One row of (1): the update on `device`, timed (the loss fetched to the host each time,
  as training does)."""
  network_config, learner_config = network_for(torso, unroll_length, frame_shape)
  with tf.device(device):
    agent = networks.Agent(network_config, seed=0)
    the_learner = learner_lib.Learner(agent, learner_config, jit_compile=jit_compile)
    env_outputs, agent_outputs = tf.nest.map_structure(
        tf.constant, random_batches.random_learner_batch(network_config, unroll_length,
                                                      batch_size))
    state = agent.initial_state(batch_size)

    def one_update():
      start = time.perf_counter()
      the_learner.update(state, env_outputs, agent_outputs)["total_loss"].numpy()
      return time.perf_counter() - start
    first = one_update()  # Tracing and, with XLA, compilation.
    one_update()  # Warm-up (autotuning of the GPU's kernels).
    durations = [one_update() for _ in range(timed_updates)]
  seconds = statistics.median(durations)
  frames = batch_size * unroll_length * NUM_ACTION_REPEATS
  return dict(device=device, torso=torso, batch_size=batch_size, unroll_length=unroll_length,
              xla=bool(jit_compile), first_update_s=first, median_s=seconds,
              frames_per_s=frames / seconds, timed_updates=timed_updates,
              jit_compile_used=the_learner.jit_compile)


def update_rows(device, torsos=("shallow", "deep"), unroll_lengths=UNROLL_LENGTHS,
                xla_modes=(True, False), batch_size=BATCH_SIZE, timed_updates=10,
                frame_shape=None, log=print):
  """All rows of (1), XLA on and off back to back for each shape."""
  rows = []
  for unroll_length in unroll_lengths:
    for torso in torsos:
      for xla in xla_modes:
        row = update_time(device, torso, unroll_length, xla, batch_size, timed_updates,
                          frame_shape)
        log(f"  update T={unroll_length} {torso} xla={'on' if xla else 'off'}: "
            f"{row['median_s'] * 1000:.1f} ms (first {row['first_update_s']:.1f} s)")
        rows.append(row)
  return rows


def end_to_end_rows(levels, torsos, seconds, warmup, log=print):
  """(2): IMPALA with dynamic batching, the learner on the GPU (experiment.py chooses it).
  A run that fails is a row with its error (the other rows and (1) are kept)."""
  rows = []
  for level in levels:
    for torso in torsos:
      config = training_rate.level_config(level, torso, None)
      row = dict(level=level, torso=torso, num_actors=config.num_actors,
                 envs_per_actor=config.envs_per_actor, batch_size=config.batch_size,
                 unroll_length=config.unroll_length, seconds=seconds, warmup=warmup)
      try:
        row["frames_per_s"], _ = training_rate.run_training(config, seconds, warmup, True,
                                                            os.cpu_count())
        log(f"  end to end {level} {torso}: {row['frames_per_s']:,.0f} frames/s")
      except Exception as error:  # pylint: disable=broad-except
        row.update(frames_per_s=None, error=f"{type(error).__name__}: {error}"[-2000:])
        log(f"  end to end {level} {torso} FAILED: {row['error']}")
      rows.append(row)
  return rows


def markdown(machine, command, updates, end_to_end):
  """The results as Markdown, with the paper's Table 1 beside them."""
  lines = [f"Machine: {machine}.", "", f"Command: `{command}`", "",
           "Learner update on the GPU (one fixed random batch; frames = B x T x 4):", "",
           "| T (inputs) | network | XLA | first update (s) | ms / update (median) | "
           "learner frames/s | XLA speed-up |", "|---|---|---|---:|---:|---:|---:|"]
  for row in updates:
    partner = [r for r in updates if (r["torso"], r["unroll_length"]) == (
        row["torso"], row["unroll_length"]) and r["xla"] != row["xla"]]
    speedup = (f"{partner[0]['median_s'] / row['median_s']:.2f}x"
               if row["xla"] and partner else "")
    inputs = "Atari 84x84x4" if row["unroll_length"] <= 20 else "DMLab 96x72x3, LSTM"
    lines.append(f"| {row['unroll_length']} ({inputs}) | {row['torso']} | "
                 f"{'on' if row['xla'] else 'off'} | {row['first_update_s']:.1f} | "
                 f"{row['median_s'] * 1000:.1f} | {row['frames_per_s']:,.0f} | {speedup} |")
  if end_to_end:
    lines += ["", "End to end, IMPALA with dynamic batching, learner on the GPU:", "",
              "| level | network | actors x environments | B, T | frames/s |",
              "|---|---|---:|---|---:|"]
    for row in end_to_end:
      rate = (f"{row['frames_per_s']:,.0f}" if row.get("frames_per_s") is not None
              else f"failed: {row.get('error', '?')[:200]}")
      lines.append(f"| {row['level']} | {row['torso']} | {row['num_actors']} x "
                   f"{row['envs_per_actor']} | {row['batch_size']}, {row['unroll_length']} | "
                   f"{rate} |")
  lines += ["", "The paper's Table 1 (frames/s, shallow network, B=32, one NVIDIA P100 where "
            "GPUs = 1; task 1 seekavoid_arena_01, task 2 rooms_keys_doors_puzzle):", "",
            "| architecture | CPUs | GPUs | task 1 | task 2 |", "|---|---:|---:|---:|---:|"]
  lines += [f"| {name} | {cpus} | {gpus} | {one} | {two} |"
            for name, cpus, gpus, one, two in PAPER_TABLE1]
  return "\n".join(lines) + "\n"


def write_results(output_dir, text, record):
  """gpu_benchmark.md and gpu_benchmark.json in output_dir (created)."""
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "gpu_benchmark.md"), "w") as f:
    f.write(text)
  with open(os.path.join(output_dir, "gpu_benchmark.json"), "w") as f:
    json.dump(record, f, indent=1)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="3 timed updates each; end-to-end runs of 40 s after 15 s.")
  parser.add_argument("--torsos", default="shallow,deep")
  parser.add_argument("--unroll_lengths", default="20,100")
  parser.add_argument("--xla", default="on,off", help="on, off or both (on,off).")
  parser.add_argument("--timed_updates", type=int, default=10)
  parser.add_argument("--levels", default=None,
                      help="End-to-end levels; default Pong (+ the DMLab tasks if installed); "
                      "'none' skips the end-to-end runs.")
  parser.add_argument("--seconds", type=float, default=75.0)
  parser.add_argument("--warmup", type=float, default=30.0)
  parser.add_argument("--output_dir", default="")
  args = parser.parse_args(argv)
  if args.quick:
    args.timed_updates, args.seconds, args.warmup = 3, 40.0, 15.0
  return args


def main(argv=None):
  args = parse_args(argv)
  device = gpu_device()
  if device is None:
    print(NO_GPU_MESSAGE)
    if args.output_dir:
      write_results(args.output_dir, NO_GPU_MESSAGE + "\n", dict(gpu=None,
                                                                message=NO_GPU_MESSAGE))
    return 0
  # pylint: disable=g-import-not-at-top
  from benchmarks.speed.learner_step import machine_description
  log = lambda text: print(text, file=sys.stderr, flush=True)
  torsos = args.torsos.split(",")
  updates = update_rows(device, torsos, [int(t) for t in args.unroll_lengths.split(",")],
                        [mode == "on" for mode in args.xla.split(",")],
                        timed_updates=args.timed_updates, log=log)
  if args.levels is None:
    levels = list(training_rate.ATARI_LEVELS) + (
        list(training_rate.DMLAB_LEVELS) if training_rate.dmlab_available() else [])
  else:
    levels = [] if args.levels == "none" else args.levels.split(",")
  end_to_end = end_to_end_rows(levels, torsos, args.seconds, args.warmup, log)
  machine = f"{machine_description()}; {device}: {gpu_name()}"
  command = f"python -m benchmarks.speed.throughput_gpu {' '.join(argv or sys.argv[1:])}"
  text = markdown(machine, command.strip(), updates, end_to_end)
  print(text)
  if args.output_dir:
    write_results(args.output_dir, text, dict(machine=machine, command=command, gpu=device,
                                              updates=updates, end_to_end=end_to_end))
  return 1 if any(row.get("error") for row in end_to_end) else 0


def gpu_name():
  """The first GPU's name as TensorFlow reports it (e.g. "NVIDIA H100 80GB HBM3")."""
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return "no GPU"
  details = tf.config.experimental.get_device_details(gpus[0])
  return (f"{details.get('device_name', 'GPU')}, compute capability "
          f"{details.get('compute_capability', '?')}")


if __name__ == "__main__":
  sys.exit(main())
