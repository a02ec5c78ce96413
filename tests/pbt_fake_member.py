"""A stand-in for `experiment.py --mode=train` in population tests: no TensorFlow, fast.

It keeps experiment.py's contract with the population driver: it resumes from
<logdir>/checkpoints (a CheckpointManager-style state file naming ckpt-<frames>), appends
"episode" and "progress" records to <logdir>/log.jsonl, writes a checkpoint every few ticks,
on SIGTERM (then exits 0) and at --total_environment_frames (exits 0). Its "weights" are a
JSON payload that records which member wrote them, so tests can follow copies. Every episode
returns 1000 * learning_rate, so fitness follows the learning rate.
"""
import argparse
import json
import os
import signal
import sys
import time

LEVEL = "toy/lit_side"


def add_member_flags(parser):
  """The flags the population driver gives every member (shared with pbt_toy_member.py):
  --logdir, --seed, the hyperparameters every member evolves (pbt.ADAPTED) and, with a shared
  replay (population --shared_replay_capacity), --laser_replay, --shared_replay_address and
  --agent_tag."""
  parser.add_argument("--logdir", required=True)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--entropy_cost", type=float, required=True)
  parser.add_argument("--learning_rate", type=float, required=True)
  parser.add_argument("--epsilon", type=float, required=True)
  parser.add_argument("--laser_replay", action="store_true")
  parser.add_argument("--shared_replay_address", default="")
  parser.add_argument("--agent_tag", default="")


def parse(argv):
  parser = argparse.ArgumentParser()
  add_member_flags(parser)  # A shared replay's flags are accepted; nothing is sent.
  parser.add_argument("--mode", default="train")
  parser.add_argument("--max_grad_norm", type=float, default=None)  # Atari (pbt.ADAPTED_ATARI).
  parser.add_argument("--total_environment_frames", type=int, default=10_000)
  parser.add_argument("--frames_per_tick", type=int, default=100)
  parser.add_argument("--tick_secs", type=float, default=0.01)
  parser.add_argument("--checkpoint_ticks", type=int, default=3)
  parser.add_argument("--crash_at_frames", type=int, default=0,
                      help="Exit with code 3 once (a marker file remembers) at these frames.")
  parser.add_argument("--always_crash", action="store_true")
  parser.add_argument("--refuse", action="store_true", help="Exit with code 2 at once.")
  return parser.parse_args(argv)


def main(argv):
  args = parse(argv)
  if args.refuse:
    print("error: --refuse given", file=sys.stderr)
    return 2
  directory = os.path.join(args.logdir, "checkpoints")
  os.makedirs(directory, exist_ok=True)
  state_path = os.path.join(directory, "checkpoint")
  frames, weights = 0, {"written_by": args.logdir, "frames": 0}
  if os.path.exists(state_path):
    prefix = open(state_path).read().split('"')[1]
    with open(os.path.join(directory, prefix + ".data-00000-of-00001")) as f:
      weights = json.load(f)
    frames = weights["frames"]
    print(f"Resumed from {prefix} at {frames:,} frames; weights written by "
          f"{weights['written_by']}.", flush=True)
  hyperparameters = dict(entropy_cost=args.entropy_cost, learning_rate=args.learning_rate,
                         epsilon=args.epsilon, max_grad_norm=args.max_grad_norm)
  saved = sorted(int(n[5:].split(".")[0]) for n in os.listdir(directory)
                 if n.startswith("ckpt-") and n.endswith(".index"))

  def save():
    weights.update(frames=frames, written_by=args.logdir, hyperparameters=hyperparameters)
    prefix = f"ckpt-{frames}"
    with open(os.path.join(directory, prefix + ".data-00000-of-00001"), "w") as f:
      json.dump(weights, f)
    with open(os.path.join(directory, prefix + ".index"), "w") as f:
      f.write("index")
    if frames not in saved:
      saved.append(frames)
    while len(saved) > 5:  # CheckpointManager(max_to_keep=5).
      old = saved.pop(0)
      for suffix in (".index", ".data-00000-of-00001"):
        os.remove(os.path.join(directory, f"ckpt-{old}{suffix}"))
    with open(state_path + ".tmp", "w") as f:
      f.write(f'model_checkpoint_path: "{prefix}"\n')
    os.replace(state_path + ".tmp", state_path)

  stopping = []
  signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
  marker = os.path.join(args.logdir, "crashed_once")
  with open(os.path.join(args.logdir, "log.jsonl"), "a") as log:
    tick = 0
    while not stopping and frames < args.total_environment_frames:
      time.sleep(args.tick_secs)
      frames += args.frames_per_tick
      tick += 1
      log.write(json.dumps(dict(kind="episode", frames=frames, level=LEVEL,
                                episode_return=1000.0 * args.learning_rate,
                                episode_length=10)) + "\n")
      log.write(json.dumps(dict(kind="progress", frames=frames, **hyperparameters)) + "\n")
      log.flush()
      if args.always_crash or (args.crash_at_frames and frames >= args.crash_at_frames
                               and not os.path.exists(marker)):
        open(marker, "w").close()
        os._exit(3)  # pylint: disable=protected-access
      if tick % args.checkpoint_ticks == 0:
        save()
  save()
  print(f"Stopped at {frames:,} frames.", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
