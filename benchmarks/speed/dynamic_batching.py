"""Acting throughput with dynamic batching (the paper's Table 1, "dyn. batch").

N Python threads each play one actor: they call the shallow DMLab network's acting step
(`policies.acting_step`, batch of one, LSTM state fed back) as fast as they can. Three ways to
serve them, side by side in one run:

  op      dynamic_batching.batch_fn: the C++ batcher op; one serving thread runs the step on
          the concatenated batch (what the actors use).
  direct  every thread calls the step itself (a tf.function, batch of one).
  queue   a plain Python batcher: a queue.Queue of requests, one serving thread that drains
          it, concatenates with numpy, runs the same step on the batch and hands the rows
          back through threading.Event (the obvious alternative without a custom op).

All three run the same traced step (the batched ones with the batch dimension left open, so
no batch size retraces). Reported per mode and thread count: calls/s (all threads together)
and per-call latency (median and 99th percentile).

Groups (`--groups=TxN`): the op serving T threads that each submit a group of N rows per
call (`allow_groups=True`, e.g. one actor thread's N environments) against T*N threads that
each submit one row (the default contract), side by side in one run: the same rows per
batch at best, from T calls instead of T*N. Reported: calls/s, rows/s (= actor steps/s) and
per-call latency.

    python -m benchmarks.speed.dynamic_batching                       # 1, 8, 32, 64 threads
    python -m benchmarks.speed.dynamic_batching --threads=8 --seconds=2
    python -m benchmarks.speed.dynamic_batching --groups=4x8 --network=atari
"""
import argparse
import os
import platform
import queue
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import dynamic_batching  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.acting import policies  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.agent import language  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.structures import EnvOutput  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.structures import Observation  # pylint: disable=g-import-not-at-top

MODES = ("op", "direct", "queue")
# The smallest networks of the project: the shallow torso (Figure 3 left) with DMLab's LSTM
# and language input, or Atari's feed-forward one (Pong's minimal action set: 6 actions).
NETWORKS = {
    "dmlab": lambda: networks.dmlab_config(torso=networks.SHALLOW),
    "atari": lambda: networks.atari_config(num_actions=6, torso=networks.SHALLOW),
}
# Released code's batch_fn defaults; the actors' batcher uses the same.
MAXIMUM_BATCH_SIZE = 1024
TIMEOUT_MS = 100


def actor_inputs(config, seed, rows=1):
  """One actor's (prev_action, env_output, core_state), each with a leading dimension of
  `rows` (its environments)."""
  rng = np.random.default_rng(seed)
  env_output = EnvOutput(
      reward=np.zeros([rows], np.float32),
      done=np.zeros([rows], bool),
      observation=Observation(
          frame=rng.integers(0, 256, (rows,) + config.frame_shape, dtype=np.uint8),
          instruction=language.hash_instructions(["pick the red object"] * rows)),
      episode_return=np.zeros([rows], np.float32),
      episode_step=np.zeros([rows], np.int32), truncated=np.zeros([rows], bool))
  state = ()
  if config.use_lstm:
    state = torsos.LSTMState(c=np.zeros([rows, networks.CORE_LSTM_SIZE], np.float32),
                             h=np.zeros([rows, networks.CORE_LSTM_SIZE], np.float32))
  return np.zeros([rows], np.int32), env_output, state


def agent_step(agent):
  """The actors' step of the network (policies.acting_step) on one actor's (prev_action,
  env_output, core_state): (policy_params, baseline, core_state)."""
  step = policies.acting_step(agent)

  def call(prev_action, env_output, core_state):
    observation = env_output.observation
    return step(prev_action, env_output.reward, env_output.done, observation.frame,
                observation.instruction, core_state)
  return call


def batched_step_function(agent, example):
  """agent_step traced once with an open batch dimension (for the batched modes)."""
  specs = tf.nest.map_structure(
      lambda x: tf.TensorSpec((None,) + np.shape(x)[1:], tf.as_dtype(np.asarray(x).dtype)),
      example)
  return tf.function(agent_step(agent)).get_concrete_function(*specs)


class PythonQueueBatcher:
  """Dynamic batching without a custom op: a queue, a serving thread, numpy concatenation."""

  def __init__(self, step, maximum_batch_size):
    self._step = step
    self._maximum_batch_size = maximum_batch_size
    self._requests = queue.Queue()
    self._thread = threading.Thread(target=self._serve, daemon=True)
    self._thread.start()

  def __call__(self, *args):
    request = [args, threading.Event(), None]
    self._requests.put(request)
    request[1].wait()
    if isinstance(request[2], BaseException):
      raise request[2]
    return request[2]

  def close(self):
    self._requests.put(None)
    self._thread.join()

  def _serve(self):
    while True:
      batch = [self._requests.get()]  # Blocks for the first request...
      while len(batch) < self._maximum_batch_size:  # ...then takes whatever else waits.
        try:
          batch.append(self._requests.get_nowait())
        except queue.Empty:
          break
      stop = any(request is None for request in batch)
      batch = [request for request in batch if request is not None]
      if batch:
        try:
          inputs = tf.nest.map_structure(lambda *rows: np.concatenate(rows),
                                         *[request[0] for request in batch])
          outputs = tf.nest.map_structure(lambda t: t.numpy(), self._step(*inputs))
          for i, request in enumerate(batch):
            request[2] = tf.nest.map_structure(lambda x, i=i: x[i:i + 1], outputs)
        except Exception as error:  # pylint: disable=broad-except
          for request in batch:
            request[2] = error
        for request in batch:
          request[1].set()
      if stop:
        return


def run(call, num_threads, seconds, config, rows=1):
  """Each thread calls `call` (with `rows` rows) in a loop for `seconds`; returns the
  latencies of all calls, in s."""
  start_barrier = threading.Barrier(num_threads + 1)
  stop = threading.Event()
  latencies = [[] for _ in range(num_threads)]
  errors = []

  def actor(index):
    prev_action, env_output, state = actor_inputs(config, seed=index, rows=rows)
    start_barrier.wait()
    try:
      while not stop.is_set():
        started = time.perf_counter()
        agent_output, state = call(prev_action, env_output, state)
        latencies[index].append(time.perf_counter() - started)
        prev_action = agent_output.action
    except Exception as error:  # pylint: disable=broad-except
      errors.append(error)

  threads = [threading.Thread(target=actor, args=(i,), daemon=True) for i in range(num_threads)]
  for thread in threads:
    thread.start()
  start_barrier.wait()
  time.sleep(seconds)
  stop.set()
  for thread in threads:
    thread.join()
  if errors:
    raise errors[0]
  return [latency for per_thread in latencies for latency in per_thread]


def measure(mode, agent, num_threads, seconds, warmup_seconds):
  """One timed run of one mode: dict of calls/s and latency statistics."""
  config = agent.config
  example = actor_inputs(config, seed=0)
  closer = None
  if mode == "direct":
    call = tf.function(agent_step(agent))
  elif mode == "op":
    call = dynamic_batching.batch_fn_with_options(
        minimum_batch_size=1, maximum_batch_size=MAXIMUM_BATCH_SIZE, timeout_ms=TIMEOUT_MS)(
            agent_step(agent))
    closer = call.close
  else:
    call = PythonQueueBatcher(batched_step_function(agent, example), MAXIMUM_BATCH_SIZE)
    closer = call.close
  try:
    run(call, num_threads, warmup_seconds, config)  # Tracing, thread start-up, caches.
    latencies = run(call, num_threads, seconds, config)
  finally:
    if closer is not None:
      closer()
  latencies_ms = np.asarray(latencies) * 1000.0
  return dict(mode=mode, threads=num_threads, calls_per_s=len(latencies) / seconds,
              median_ms=float(np.median(latencies_ms)),
              p99_ms=float(np.percentile(latencies_ms, 99)), calls=len(latencies))


def measure_layout(agent, num_threads, rows, seconds, warmup_seconds):
  """The op serving `num_threads` threads of `rows` rows per call (groups if rows > 1)."""
  call = dynamic_batching.batch_fn_with_options(
      minimum_batch_size=1, maximum_batch_size=MAXIMUM_BATCH_SIZE, timeout_ms=TIMEOUT_MS,
      allow_groups=rows > 1)(agent_step(agent))
  try:
    run(call, num_threads, warmup_seconds, agent.config, rows)  # Tracing, start-up, caches.
    latencies = run(call, num_threads, seconds, agent.config, rows)
  finally:
    call.close()
  latencies_ms = np.asarray(latencies) * 1000.0
  calls_per_s = len(latencies) / seconds
  return dict(threads=num_threads, rows=rows, calls_per_s=calls_per_s,
              rows_per_s=calls_per_s * rows, median_ms=float(np.median(latencies_ms)),
              p99_ms=float(np.percentile(latencies_ms, 99)))


def compare_groups(agent, threads, rows, args):
  """`threads` x `rows` rows as groups vs. threads * rows single-row threads, interleaved
  rounds, the median round (by rows/s) of each."""
  layouts = [(threads, rows), (threads * rows, 1)]
  runs = {layout: [] for layout in layouts}
  for _ in range(args.repeats):
    for layout in layouts:
      r = measure_layout(agent, *layout, args.seconds, args.warmup_seconds)
      runs[layout].append(r)
      print(f"  {layout[0]:3d} threads x {layout[1]:2d} rows: {r['calls_per_s']:8.0f} calls/s, "
            f"{r['rows_per_s']:8.0f} rows/s, median {r['median_ms']:7.2f} ms, "
            f"p99 {r['p99_ms']:7.2f} ms", flush=True)
  print()
  print("| layout | calls/s | rows/s | median / p99 ms per call |")
  print("|---|---:|---:|---:|")
  medians = {}
  for layout in layouts:
    ordered = sorted(runs[layout], key=lambda r: r["rows_per_s"])
    r = medians[layout] = ordered[len(ordered) // 2]
    name = (f"{layout[0]} threads x {layout[1]} rows (groups)" if layout[1] > 1 else
            f"{layout[0]} threads x 1 row")
    print(f"| {name} | {r['calls_per_s']:.0f} | {r['rows_per_s']:.0f} | "
          f"{r['median_ms']:.2f} / {r['p99_ms']:.2f} |")
  ratio = medians[layouts[0]]["rows_per_s"] / medians[layouts[1]]["rows_per_s"]
  print(f"\nGroups vs. single rows: {ratio:.2f}x the rows/s.")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--threads", default="1,8,32,64",
                      help="comma-separated numbers of actor threads")
  parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of "
                      f"{MODES}")
  parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per cell")
  parser.add_argument("--warmup_seconds", type=float, default=1.5,
                      help="untimed seconds per cell before the timed ones")
  parser.add_argument("--repeats", type=int, default=3,
                      help="rounds over the modes per thread count; each cell reports the "
                      "run with the median calls/s (rounds interleave the modes, so a slow "
                      "spell of the machine does not land on one mode only)")
  parser.add_argument("--network", default="dmlab", choices=sorted(NETWORKS),
                      help="the shallow network of this domain")
  parser.add_argument("--groups", default=None, metavar="TxN",
                      help="instead of the modes: T threads x N rows per call (groups) vs. "
                      "T*N single-row threads, e.g. 4x8")
  args = parser.parse_args()

  agent = networks.Agent(NETWORKS[args.network]())
  if args.groups:
    threads, rows = (int(n) for n in args.groups.lower().split("x"))
    print(f"Python {platform.python_version()}, TensorFlow {tf.__version__}, numpy "
          f"{np.__version__}, {os.cpu_count()} CPUs; shallow {args.network} network; "
          f"{args.seconds:g} s per cell after {args.warmup_seconds:g} s warm-up; median of "
          f"{args.repeats} interleaved rounds.")
    compare_groups(agent, threads, rows, args)
    return
  thread_counts = [int(n) for n in args.threads.split(",")]
  modes = args.modes.split(",")
  print(f"Python {platform.python_version()}, TensorFlow {tf.__version__}, numpy "
        f"{np.__version__}, {os.cpu_count()} CPUs; shallow {args.network} network, step on a batch "
        f"of 1 per call; {args.seconds:g} s per cell after {args.warmup_seconds:g} s warm-up; "
        f"median of {args.repeats} interleaved rounds.")
  results = {}
  for num_threads in thread_counts:
    runs = {mode: [] for mode in modes}
    for _ in range(args.repeats):
      for mode in modes:
        r = measure(mode, agent, num_threads, args.seconds, args.warmup_seconds)
        runs[mode].append(r)
        print(f"  {mode:6s} {num_threads:3d} threads: {r['calls_per_s']:8.0f} calls/s, "
              f"median {r['median_ms']:7.2f} ms, p99 {r['p99_ms']:7.2f} ms", flush=True)
    for mode in modes:
      ordered = sorted(runs[mode], key=lambda r: r["calls_per_s"])
      results[mode, num_threads] = ordered[len(ordered) // 2]

  print()
  header = "| threads | " + " | ".join(
      f"{mode} calls/s | {mode} median / p99 ms" for mode in modes)
  if "op" in modes:
    header += " | op vs. best other |"
  else:
    header += " |"
  print(header)
  print("|---:|" + "---:|---:|" * len(modes) + ("---:|" if "op" in modes else ""))
  for num_threads in thread_counts:
    cells = []
    for mode in modes:
      r = results[mode, num_threads]
      cells.append(f"{r['calls_per_s']:.0f} | {r['median_ms']:.2f} / {r['p99_ms']:.2f}")
    line = f"| {num_threads} | " + " | ".join(cells)
    if "op" in modes:
      others = [results[m, num_threads]["calls_per_s"] for m in modes if m != "op"]
      ratio = results["op", num_threads]["calls_per_s"] / max(others) if others else 1.0
      line += f" | {ratio:.2f}x"
    print(line + " |")


if __name__ == "__main__":
  main()
