"""A toy training in its own process, for tests that send it signals:
python -u -m tests.toy_training_process LOGDIR (from the repository root; prints its console
lines).

Everything is imported under __main__: environment processes start by "spawn" and re-import
this module, and must not import TensorFlow.
"""
import sys

if __name__ == "__main__":
  from tests.run.test_training import toy_config  # pylint: disable=g-import-not-at-top
  from tests.run.test_training import train_toy  # pylint: disable=g-import-not-at-top
  train_toy(toy_config(sys.argv[1], total_frames=100_000_000, num_actors=4, log_secs=1.0))
  print("exited normally", flush=True)
