"""The learner's memory: peak and steady RSS of the update, against what the arithmetic needs.

Each configuration runs in a fresh subprocess that builds the agent and the learner as training
does (assembly.build_agent, assembly.make_learner from the run's resolved flags) and runs a few
updates on one synthetic batch of the run's shape (uint8 frames [T+1, B, 72, 96, 3],
instructions, ...: assembly.trajectory_signature). It reports the process's peak RSS
(VmHWM in /proc/self/status), its RSS after the updates, and the seconds of an update. The
environment is a stand-in with DeepMind Lab's spec (build_agent reads only its spec).

The arithmetic printed next to it:
  * one batch: B x the bytes of one trajectory of the signature (frames dominate: 101 x
    72 x 96 x 3 bytes = 2.1 MB per trajectory);
  * the actors' queue: --queue_capacity trajectories (4 batches: config.preset_values); the tf.data
    pipeline holds one batch being built, one prefetched (input_pipeline.make_dataset) and the
    update's own;
  * the torso's activations kept for backprop: N = B x (T+1) frames times the float32 values
    per frame that the gradient needs (`activation_floats_per_frame`: every convolution's and
    fully connected layer's input, every max-pool's input and output, every ReLU's output).
    With NetworkConfig.torso_chunk_frames > 0 (torsos.chunked_torso) only one chunk's
    activations live at a time, in the backward pass.

    python -m benchmarks.speed.learner_memory                       # shallow and deep, B=32, T=100
    python -m benchmarks.speed.learner_memory --torsos=deep --chunks=0,128 --updates=3
    python -m benchmarks.speed.learner_memory --malloc_arena_max=2  # glibc arenas' effect

"""
import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MB = 1e6
FLOAT32_BYTES = 4


def proc_status_bytes(field):
  """A memory field of /proc/self/status (e.g. VmHWM, VmRSS) in bytes."""
  with open("/proc/self/status") as status:
    for line in status:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise ValueError(f"{field} is not in /proc/self/status (Linux only).")


def activation_floats_per_frame(network_config):
  """float32 values per frame the torso's backprop keeps (see the module doc).

  Shallow (VALID convs): input H*W*C + conv1 output (ReLU) + conv2 output (ReLU) + FC 256.
  Deep, per section of c channels on an h x w input of c_in channels: conv input h*w*c_in,
  conv output h*w*c (max-pool input), pool output h'*w'*c (h' = ceil(h/2)), and per residual
  block 2 * h'*w'*c (the two ReLU outputs that feed its convolutions); then the last ReLU's
  output and FC 256.
  """
  from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
  height, width, channels = network_config.frame_shape
  if network_config.torso == networks.SHALLOW:
    # pylint: disable-next=protected-access
    h1, w1 = torsos._valid_size(height, 8, 4), torsos._valid_size(width, 8, 4)
    # pylint: disable-next=protected-access
    h2, w2 = torsos._valid_size(h1, 4, 2), torsos._valid_size(w1, 4, 2)
    return height * width * channels + h1 * w1 * 16 + h2 * w2 * 32 + torsos.TORSO_OUTPUT_SIZE
  if network_config.torso != networks.DEEP:
    raise ValueError(f"No activation formula for torso {network_config.torso!r}.")
  total = 0
  for section_channels, num_blocks in torsos.DEEP_SECTIONS:
    total += height * width * channels + height * width * section_channels
    height, width, channels = -(-height // 2), -(-width // 2), section_channels
    total += height * width * channels * (1 + 2 * num_blocks)
  return total + height * width * channels + torsos.TORSO_OUTPUT_SIZE


def synthetic_batch(signature, batch_size, seed=0):
  """(agent_state, env_outputs, agent_outputs) numpy arrays of one batch, time-major."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from scalable_agent_tf2.agent import language  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  _, state_spec, env_spec, agent_spec = signature

  def fill(spec):
    shape = [spec.shape[0], batch_size] + list(spec.shape[1:])
    if spec.dtype == tf.uint8:
      return rng.integers(0, 256, shape, np.uint8)
    if spec.dtype == tf.bool:
      return rng.random(shape) < 0.01
    if spec.dtype == tf.int32:
      return rng.integers(0, 9, shape).astype(np.int32)
    return rng.normal(size=shape).astype(np.float32)
  env_outputs, agent_outputs = tf.nest.map_structure(fill, (env_spec, agent_spec))
  instructions = language.hash_instructions(
      rng.choice(["pick the red hat", "go to the blue room", ""], size=shape_of(env_outputs)))
  env_outputs = env_outputs._replace(
      observation=env_outputs.observation._replace(instruction=instructions))
  state = tf.nest.map_structure(
      lambda s: np.zeros([batch_size] + list(s.shape), np.float32), state_spec)
  return state, env_outputs, agent_outputs


def shape_of(env_outputs):
  return env_outputs.reward.shape


def child(args):
  """Measures one configuration in this (fresh) process; prints one JSON line."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  rss_start = proc_status_bytes("VmRSS")
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import assembly  # pylint: disable=g-import-not-at-top

  flags = [f"--level_name={args.level_name}", f"--torso={args.torso}",
           f"--batch_size={args.batch_size}", f"--unroll_length={args.unroll_length}",
           f"--logdir={tempfile.mkdtemp(prefix='learner_memory_')}"]
  config = config_lib.config_from_argv(flags)
  network_config = config.network_config(9)
  if args.chunk is not None:
    network_config = dataclasses.replace(network_config, torso_chunk_frames=args.chunk)
  agent = networks.Agent(network_config, seed=config.seed)  # The network measured, built alone.
  learner = assembly.make_learner(config, agent)
  policy_state = lambda: tf.nest.map_structure(lambda t: t[0].numpy(), agent.initial_state(1))
  signature = assembly.trajectory_signature(
      network_config, config.unroll_length, type("Policy", (), {"initial_state": policy_state}))
  state, env_outputs, agent_outputs = synthetic_batch(signature, config.batch_size)
  batch_bytes = sum(np.asarray(a).nbytes for a in tf.nest.flatten((state, env_outputs,
                                                                     agent_outputs)))
  rss_built = proc_status_bytes("VmRSS")
  durations = []
  for _ in range(args.updates):
    start = time.perf_counter()
    learner.update(state, env_outputs, agent_outputs)["total_loss"].numpy()
    durations.append(time.perf_counter() - start)
  frames = config.batch_size * (config.unroll_length + 1)
  print(json.dumps(dict(
      torso=args.torso, chunk=network_config.torso_chunk_frames, batch_size=config.batch_size,
      unroll_length=config.unroll_length, queue_capacity=config.queue_capacity,
      jit_compile=learner.jit_compile, malloc_arena_max=os.environ.get("MALLOC_ARENA_MAX"),
      rss_start=rss_start, rss_built=rss_built, rss_steady=proc_status_bytes("VmRSS"),
      rss_peak=proc_status_bytes("VmHWM"), batch_bytes=batch_bytes,
      trajectory_bytes=batch_bytes // config.batch_size,
      activation_bytes=frames * activation_floats_per_frame(network_config) * FLOAT32_BYTES,
      first_update_s=durations[0],
      update_s=statistics.median(durations[1:]) if len(durations) > 1 else None,
      durations=durations)), flush=True)


def run_child(torso, chunk, args):
  """Runs one configuration in a fresh process; returns its measurements."""
  command = [sys.executable, "-m", "benchmarks.speed.learner_memory", "--child",
             f"--torso={torso}", f"--level_name={args.level_name}",
             f"--batch_size={args.batch_size}", f"--unroll_length={args.unroll_length}",
             f"--updates={args.updates}"]
  if chunk is not None:
    command.append(f"--chunk={chunk}")
  env = dict(os.environ)
  if args.malloc_arena_max:
    env["MALLOC_ARENA_MAX"] = str(args.malloc_arena_max)
  output = subprocess.run(command, env=env, check=True, capture_output=True, text=True,
                          cwd=REPO_DIR).stdout
  return json.loads(output.strip().splitlines()[-1])


def describe(row):
  """One table row; the arithmetic: batch, queue, pipeline (3 batches), activations."""
  chunk = row["chunk"] or "none"
  queue = row["queue_capacity"] * row["trajectory_bytes"]
  update = f"{row['update_s']:.1f}" if row["update_s"] is not None else "-"
  return (f"| {row['torso']} | {chunk} | {row['malloc_arena_max'] or '-'} "
          f"| {row['rss_built'] / MB:,.0f} | {row['rss_peak'] / MB:,.0f} "
          f"| {row['rss_steady'] / MB:,.0f} | {row['batch_bytes'] / MB:,.0f} "
          f"| {queue / MB:,.0f} | {3 * row['batch_bytes'] / MB:,.0f} "
          f"| {row['activation_bytes'] / MB:,.0f} | {row['first_update_s']:.1f} | {update} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--torso", default="deep", help=argparse.SUPPRESS)
  parser.add_argument("--chunk", type=int, default=None, help=argparse.SUPPRESS)
  parser.add_argument("--torsos", default="shallow,deep")
  parser.add_argument("--chunks", default="default",
                      help="NetworkConfig.torso_chunk_frames values to compare, e.g. 0,256 "
                           "(0: no chunks); 'default': the network's default.")
  parser.add_argument("--level_name", default="dmlab30")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--unroll_length", type=int, default=100)
  parser.add_argument("--updates", type=int, default=3,
                      help="Updates per configuration (the first one traces the function).")
  parser.add_argument("--rounds", type=int, default=1,
                      help="Rounds over the configurations, interleaved (shared machines).")
  parser.add_argument("--malloc_arena_max", type=int, default=0,
                      help="Sets MALLOC_ARENA_MAX in the children (0: glibc's default).")
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  chunks = [None if c == "default" else int(c) for c in args.chunks.split(",")]
  print(f"Command: python -m benchmarks.speed.learner_memory {' '.join(sys.argv[1:])}".rstrip())
  print("| torso | chunk frames | MALLOC_ARENA_MAX | RSS built (MB) | peak RSS (MB) "
        "| RSS after (MB) | batch (MB) | queue (MB) | pipeline 3 batches (MB) "
        "| activations (MB) | first update (s) | update (s) |")
  print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for _ in range(args.rounds):
    for torso in args.torsos.split(","):
      for chunk in chunks:
        print(describe(run_child(torso, chunk, args)), flush=True)
  print("\nRSS built: after building the agent and the learner, before the first update. "
        "Activations: B x (T+1) frames x activation_floats_per_frame x 4 bytes (no chunks).")


if __name__ == "__main__":
  main()
