"""This project's README quick start against Sample Factory on Pong: interleaved rounds, medians.

    bash benchmarks/peers/setup_sample_factory.sh     # once: the peer's venv in /tmp/sf_venv
    python -m benchmarks.peers.side_by_side --rounds=3 --warmup=60 --seconds=240

Each round runs every system once, one after the other, on the whole machine:
  ours: `experiment.py --mode=train --level_name=atari/pong` exactly as README's quick start
    types it (the Table G.1 preset; actors laid out for this machine's cores by
    families.atari.atari_actor_layout), in a fresh logdir; the rate is the learner's frames over
    --seconds, counted from --warmup seconds after the first trained frames, from log.jsonl.
  ours_subprocess (optional, --systems): the same with `--num_actors=32 --envs_per_actor=1`,
    one environment per subprocess (the layout before the in-process vector groups).
  ours_one_intra_op_thread (optional): the quick start with `--intra_op_threads=1` (the
    Atari preset's count on machines of at most 2 cores, presets.intra_op_threads).
  ours_tf_default_threads (optional): the quick start with `--intra_op_threads=0`,
    TensorFlow's default of one thread per core for each op.
  --extra_flags: more experiment.py flags for every system of ours (e.g. `--torso=deep`, to
    compare our variants on another network; the peer runs as always).
  sample_factory: benchmarks/peers/sample_factory_pong.py --mode=throughput (its docstring
    lists the setting and every difference), the median of its 10-second reports in the same
    window.
Frames are emulator frames trained by the learner in every system. The table prints each
round's frames/s, the median, and each system's median over the first system's.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.studies import runs
from scalable_agent_tf2.runfiles import runlog

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEMS = {  # experiment.py flags beyond the README quick start's.
    "ours": {},
    "ours_subprocess": dict(num_actors=32, envs_per_actor=1),
    "ours_one_intra_op_thread": dict(intra_op_threads=1),
    "ours_tf_default_threads": dict(intra_op_threads=0),
}
LABELS = {
    "ours": "this project, README quick start (Table G.1, shallow, B=32, T=20)",
    "ours_subprocess": "this project, 32 actors x 1 environment in a subprocess each",
    "ours_one_intra_op_thread": "this project, README quick start with one TensorFlow thread "
                                "per op (--intra_op_threads=1)",
    "ours_tf_default_threads": "this project, README quick start with TensorFlow's default "
                               "threads per op (--intra_op_threads=0)",
    "sample_factory": "Sample Factory 2.1.1, APPO + V-trace (2 workers x 16 envs, rollout 20, "
                      "batch 640)",
}


def window_rate(progress, warmup, seconds):
  """Frames/s over [first trained frames + warmup, + seconds] from progress records
  (dicts with 'time' and 'frames'), interpolating the frame count at both ends."""
  trained = [r for r in progress if r["frames"] > 0]
  if not trained:
    raise ValueError("no progress record with trained frames")
  start = trained[0]["time"] + warmup
  end = start + seconds
  if progress[-1]["time"] < end:
    raise ValueError(f"the log ends {end - progress[-1]['time']:.0f} s before the window does")

  def frames_at(t):
    for before, after in zip(progress, progress[1:]):
      if before["time"] <= t <= after["time"]:
        span = after["time"] - before["time"]
        share = (t - before["time"]) / span if span else 1.0
        return before["frames"] + share * (after["frames"] - before["frames"])
    raise ValueError(f"time {t} is outside the log")

  return (frames_at(end) - frames_at(start)) / seconds


def run_ours(extra_flags, warmup, seconds, setup_timeout=600):
  """Trains Pong as README's quick start does until the window is over; returns frames/s."""
  logdir = tempfile.mkdtemp(prefix="side_by_side_")
  command = runs.experiment_command(logdir, level_name="atari/pong", log_secs=5, **extra_flags)
  console_path = os.path.join(logdir, "console.txt")
  try:
    with open(console_path, "w") as console:
      process = subprocess.Popen(command, cwd=REPOSITORY, stdout=console,
                                 stderr=subprocess.STDOUT)
      try:
        return _rate_once_measured(process, logdir, warmup, seconds, setup_timeout,
                                   console_path)
      finally:
        runs.interrupt(process, 120)  # A user's Ctrl-C: stops with a checkpoint.
  finally:
    shutil.rmtree(logdir, ignore_errors=True)


def _rate_once_measured(process, logdir, warmup, seconds, setup_timeout, console_path):
  """Waits for the run's log to cover the window; returns window_rate."""
  deadline = time.time() + setup_timeout
  while True:
    if process.poll() is not None:
      with open(console_path) as f:
        raise RuntimeError(f"{runs.printable(process.args)} exited with code "
                           f"{process.returncode}:\n{f.read()[-2000:]}")
    progress = _progress(logdir)
    trained = [r for r in progress if r["frames"] > 0]
    if trained and progress[-1]["time"] >= trained[0]["time"] + warmup + seconds + 5:
      return window_rate(progress, warmup, seconds)
    if not trained and time.time() > deadline:
      raise RuntimeError(f"no frame trained within {setup_timeout} s")
    time.sleep(2)


def _progress(logdir):
  if not os.path.exists(runlog.log_path(logdir)):
    return []
  return runlog.of_kind(runlog.read_log(logdir), runlog.PROGRESS)


def run_sample_factory(warmup, seconds, venv):
  output_dir = tempfile.mkdtemp(prefix="side_by_side_sf_")
  try:
    subprocess.run([sys.executable, os.path.join(REPOSITORY, "benchmarks", "peers",
                                                 "sample_factory_pong.py"),
                    "--mode=throughput", f"--warmup={warmup}", f"--seconds={seconds}",
                    f"--venv={venv}", f"--output_dir={output_dir}"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(output_dir, "throughput.json")) as f:
      return json.load(f)["median_fps_10s"]
  finally:
    shutil.rmtree(output_dir, ignore_errors=True)


def table(rates, systems, extra_flags=""):
  """Markdown: one row per system, its rounds, median and ratio to the first system; our
  systems' labels name extra_flags."""
  rounds = len(rates[systems[0]])
  lines = ["| system (Pong, this machine) | " + " | ".join(f"round {i + 1}" for i in
                                                         range(rounds))
           + " | median frames/s | vs first |",
           "|---|" + "---:|" * (rounds + 2)]
  first = statistics.median(rates[systems[0]])
  for system in systems:
    median = statistics.median(rates[system])
    label = LABELS[system] + (f", with `{extra_flags}`" if extra_flags and system in SYSTEMS
                              else "")
    lines.append(f"| {label} | " + " | ".join(f"{r:,.0f}" for r in rates[system])
                 + f" | **{median:,.0f}** | {median / first:.2f}x |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--systems", default="ours,sample_factory",
                      help=f"Comma-separated, in round order; from {sorted(LABELS)}.")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--warmup", type=float, default=60)
  parser.add_argument("--seconds", type=float, default=240)
  parser.add_argument("--venv", default=os.environ.get("SF_VENV", "/tmp/sf_venv"))
  parser.add_argument("--output", help="Also write the results (JSON) here.")
  parser.add_argument("--extra_flags", default="",
                      help="More experiment.py flags for every system of ours, e.g. "
                           "'--torso=deep'.")
  args = parser.parse_args(argv)
  systems = args.systems.split(",")
  unknown = set(systems) - set(LABELS)
  if unknown:
    parser.error(f"unknown systems {sorted(unknown)}; choose from {sorted(LABELS)}")
  if "sample_factory" in systems and not os.path.exists(os.path.join(args.venv, "bin",
                                                                      "python")):
    parser.error(f"no Sample Factory venv at {args.venv}: run "
                 "bash benchmarks/peers/setup_sample_factory.sh first")
  extra = runs.parse_extra_flags(args.extra_flags)
  rates = {system: [] for system in systems}
  for round_index in range(args.rounds):
    for system in systems:
      if system == "sample_factory":
        rate = run_sample_factory(args.warmup, args.seconds, args.venv)
      else:
        rate = run_ours(dict(SYSTEMS[system], **extra), args.warmup, args.seconds)
      rates[system].append(rate)
      print(f"round {round_index + 1}: {system} {rate:,.0f} frames/s", flush=True)
  print(table(rates, systems, args.extra_flags))
  if args.output:
    with open(args.output, "w") as f:
      json.dump(dict(rates=rates, warmup=args.warmup, seconds=args.seconds,
                     extra_flags=args.extra_flags), f, indent=1)


if __name__ == "__main__":
  main()
