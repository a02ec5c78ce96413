"""Training frames/s: one process vs. a learner with 1 and 2 actor processes.

Runs, back to back, the same training (Atari Pong, Table G.1: shallow network, B=32, T=20,
the same total number of actor threads) as:
  * single: `experiment.py --mode=train` (actor threads and learner in one process);
  * learner+1: `python -m scalable_agent_tf2.run.launch --num_actor_processes=1` (gRPC on
    localhost between the learner and one actor process with all the threads);
  * learner+2: the launcher with 2 actor processes, half of the threads each.
Each variant trains for --seconds; its throughput is the frames the learner trained on
between the first progress record after --warmup seconds and the last one, over that time
(from the run's logdir/log.jsonl). With --rounds > 1 the variants alternate and the median is
reported.

Usage:
  python -m benchmarks.speed.distributed [--num_actors 16] [--seconds 150] [--warmup 45]
      [--rounds 1]
Prints a Markdown table.
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable-next=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.runfiles import runlog


def experiment_flags(num_actors, logdir):
  return ["--mode=train", "--level_name=atari/pong", f"--num_actors={num_actors}",
          "--batch_size=32", "--unroll_length=20", "--total_environment_frames=1000000000",
          "--log_secs=5", "--checkpoint_secs=100000", f"--logdir={logdir}"]


def command(variant, num_actors, logdir):
  """The command line of a variant ("single", "learner+1", "learner+2")."""
  if variant == "single":
    return [sys.executable, "experiment.py"] + experiment_flags(num_actors, logdir)
  processes = int(variant.split("+")[1])
  if num_actors % processes:
    raise ValueError(f"--num_actors {num_actors} does not split over {processes} processes.")
  return ([sys.executable, "-m", "scalable_agent_tf2.run.launch",
           f"--num_actor_processes={processes}", "--"]
          + experiment_flags(num_actors // processes, logdir))


def steady_fps(log_path, warmup):
  """Frames/s between the first progress record after `warmup` seconds and the last one."""
  progress = runlog.of_kind(runlog.read_records(log_path)[0], runlog.PROGRESS)
  if not progress:
    raise RuntimeError(f"No progress records in {log_path}.")
  start_time = progress[0]["time"]
  steady = [r for r in progress if r["time"] - start_time >= warmup]
  if len(steady) < 2:
    raise RuntimeError(f"Run too short for a {warmup} s warm-up: {log_path}.")
  first, last = steady[0], steady[-1]
  return (last["frames"] - first["frames"]) / (last["time"] - first["time"])


def run_variant(variant, num_actors, seconds, warmup):
  with tempfile.TemporaryDirectory() as logdir:
    process = subprocess.Popen(command(variant, num_actors, logdir), cwd=REPO_DIR,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
      time.sleep(seconds)
    finally:
      # The trainer (or the launcher, for its cluster) stops cleanly on it; the environment
      # processes go with their parent.
      process.send_signal(signal.SIGTERM)
      try:
        process.wait(120)
      except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return steady_fps(runlog.log_path(logdir), warmup)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_actors", type=int, default=16,
                      help="Actor threads in total (split over the actor processes).")
  parser.add_argument("--seconds", type=float, default=150.0, help="Training time per run.")
  parser.add_argument("--warmup", type=float, default=45.0,
                      help="Seconds of each run left out (start-up, first compilations).")
  parser.add_argument("--rounds", type=int, default=1)
  parser.add_argument("--variants", default="single,learner+1,learner+2")
  args = parser.parse_args()
  variants = args.variants.split(",")
  results = {v: [] for v in variants}
  for round_index in range(args.rounds):
    for variant in variants:
      fps = run_variant(variant, args.num_actors, args.seconds, args.warmup)
      results[variant].append(fps)
      print(f"round {round_index + 1} {variant}: {fps:,.0f} frames/s", file=sys.stderr,
            flush=True)
  baseline = statistics.median(results[variants[0]])
  print(f"Atari Pong, shallow, B=32, T=20, {args.num_actors} actor threads in total, "
        f"{args.seconds:.0f} s per run ({args.warmup:.0f} s warm-up left out), median of "
        f"{args.rounds} round(s).\n")
  print(f"| variant | frames/s | vs {variants[0]} |")
  print("|---|---:|---:|")
  for variant in variants:
    fps = statistics.median(results[variant])
    print(f"| {variant} | {fps:,.0f} | {fps / baseline:.2f}x |")


if __name__ == "__main__":
  main()
