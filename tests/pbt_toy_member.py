"""A population member that really trains: experiment.py's training on the toy task.

Takes the flags the population driver gives experiment.py (--logdir, --seed and the
hyperparameters; with a shared replay --laser_replay, --shared_replay_address and --agent_tag)
and runs training.train on the toy task (tests/toy_families.py, steps slowed) with small
batches, so population tests exercise real checkpoints, restores and hyperparameter changes.
Its last line is "RESULT <json>": train's result (frames, updates, LASER replay counts).
"""
import argparse
import dataclasses
import json
import os
import sys

from tests import pbt_fake_member  # Run with -m from the repository root.

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv):
  parser = argparse.ArgumentParser()
  pbt_fake_member.add_member_flags(parser)
  parser.add_argument("--total_environment_frames", type=int, required=True)
  parser.add_argument("--step_secs", type=float, default=0.01,
                      help="Seconds per environment step (paces the member).")
  parser.add_argument("--replay_fraction", type=float, default=0.0)
  parser.add_argument("--shared_replay_connect_secs", type=float, default=60.0)
  args = parser.parse_args(argv)
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.configuration import config as config_lib
  from scalable_agent_tf2.run import training
  from scalable_agent_tf2.transport import replay_service
  from tests import toy_families
  config = config_lib.resolve(config_lib.ExperimentConfig(
      level_name="atari/pong", logdir=args.logdir, seed=args.seed, num_actors=2,
      batch_size=4, unroll_length=10, total_environment_frames=args.total_environment_frames,
      entropy_cost=args.entropy_cost, learning_rate=args.learning_rate, epsilon=args.epsilon,
      log_secs=0.5, checkpoint_secs=2.0, jit_compile="off", laser_replay=args.laser_replay,
      replay_fraction=args.replay_fraction, shared_replay_address=args.shared_replay_address,
      agent_tag=args.agent_tag, shared_replay_connect_secs=args.shared_replay_connect_secs))
  # The toy task, each step slowed down (--step_secs paces the member).
  config = toy_families.with_faults(config, step_secs=args.step_secs)
  try:
    result = training.train(config, print_fn=lambda line: print(line, flush=True))
  except replay_service.ReplayServiceUnavailable as error:
    print(f"error: {error}", flush=True)
    return 3  # As experiment.py: the population driver restarts the member.
  print("RESULT " + json.dumps(dataclasses.asdict(result), default=str), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
