"""Starts (and stops) a whole cluster on this machine: one learner and N actor processes.

    python -m scalable_agent_tf2.launch --num_actor_processes=2 -- \\
        --level_name=atari/pong --num_actors=8 --logdir=/tmp/pong_cluster

Everything after "--" goes to every experiment.py process (the learner and the actors); the
cluster is {"learner": ["localhost:PORT"]} (loopback only). Output lines are prefixed with
the process's role. The launcher returns when the learner finishes (its actors then stop by
themselves); Ctrl-C or SIGTERM stops the learner (which writes its checkpoint) and the actors.
An actor process that dies is reported; the others and the learner go on.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading

_EXPERIMENT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "experiment.py")


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _forward(prefix, stream):
  for line in stream:
    sys.stdout.write(f"[{prefix}] {line}")
    sys.stdout.flush()


def launch(num_actor_processes, experiment_flags, port=None):
  """Runs the cluster; returns the learner's exit code."""
  address = f"localhost:{port or _free_port()}"
  cluster = json.dumps({"learner": [address]})
  common = [sys.executable, _EXPERIMENT, "--mode=train", f"--cluster={cluster}",
            *experiment_flags]
  roles = [("learner", common + ["--job_name=learner"])]
  roles += [(f"actor {k}", common + ["--job_name=actor", f"--task={k}"])
            for k in range(num_actor_processes)]
  processes = []
  for role, command in roles:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    threading.Thread(target=_forward, args=(role, process.stdout), daemon=True).start()
    processes.append((role, process))
  learner = processes[0][1]

  def stop(signum=None, frame=None):
    del signum, frame
    for _, process in processes:
      if process.poll() is None:
        process.send_signal(signal.SIGTERM)

  previous = signal.signal(signal.SIGTERM, stop)
  try:
    while True:
      try:
        learner.wait(timeout=1.0)
        break
      except subprocess.TimeoutExpired:
        pass
      for role, process in processes[1:]:
        if process.poll() is not None and process.returncode != 0 and not getattr(
            process, "reported", False):
          process.reported = True
          print(f"[launch] {role} exited with code {process.returncode}; training goes on.")
  except KeyboardInterrupt:
    stop()
  finally:
    signal.signal(signal.SIGTERM, previous)
    learner.wait()
    for role, process in processes[1:]:
      try:
        process.wait(timeout=120)
      except subprocess.TimeoutExpired:
        print(f"[launch] {role} did not stop; killing it.")
        process.kill()
        process.wait()
  return learner.returncode


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_actor_processes", type=int, default=2)
  parser.add_argument("--port", type=int, default=None, help="Learner port (default: free).")
  args, rest = parser.parse_known_args(argv)
  if rest and rest[0] == "--":
    rest = rest[1:]
  if args.num_actor_processes < 1:
    parser.error("--num_actor_processes must be at least 1.")
  return launch(args.num_actor_processes, rest, args.port)


if __name__ == "__main__":
  sys.exit(main())
