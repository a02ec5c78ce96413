"""Writes a run's checkpoint on one device and reads it on another: one side per process, so
that "a CPU-only machine" is a process whose TensorFlow sees no GPU (CUDA_VISIBLE_DEVICES=).

    python -m benchmarks.gpu.checkpoint_roundtrip write --logdir=/tmp/ck --device=/GPU:0
    CUDA_VISIBLE_DEVICES= python -m benchmarks.gpu.checkpoint_roundtrip read --logdir=/tmp/ck

`write` builds update_numbers' Atari case on --device (XLA there when it is a GPU, as training
compiles it), trains it --updates updates on its fixed batches and saves agent and learner
(runfiles/checkpoints.py, as training does); `read` builds the same case on --device and restores
the newest checkpoint. Each prints one JSON line: the digest of every variable of the learner
(agent, RMSProp slots, frame counter, learning rate, entropy cost) and the devices that held
them. Equal digests: the checkpoint carried the bits across devices
(comparisons.digest_mismatch).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from benchmarks.gpu import comparisons  # pylint: disable=g-import-not-at-top
from benchmarks.tools import update_numbers  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.runfiles import checkpoints  # pylint: disable=g-import-not-at-top

CASE = "impala_atari_shallow"
SETTINGS = {"torso": "shallow", "case": CASE}


def _learner_on(device):
  on_gpu = tf.DeviceSpec.from_string(device).device_type == "GPU"
  the_learner, batch = comparisons.build_case(CASE, device, jit_compile=on_gpu)
  return the_learner, batch


def _record(the_learner):
  return dict(digest=comparisons.parameters_digest(the_learner.variables),
              devices=sorted(comparisons.variable_devices(the_learner.variables)),
              num_env_frames=int(the_learner.num_env_frames.numpy()))


def write(logdir, device, updates=1):
  """Trains the case `updates` updates on device and checkpoints it; its record."""
  the_learner, batch = _learner_on(device)
  with tf.device(device):
    update_numbers.case_updates(CASE, the_learner, batch, comparisons.T, comparisons.B,
                                updates)
  checkpointer = checkpoints.Checkpointer(logdir, SETTINGS, agent=the_learner.agent,
                                          learner=the_learner)
  checkpointer.save(int(the_learner.num_env_frames.numpy()))
  return _record(the_learner)


def read(logdir, device):
  """The case built on device with the newest checkpoint of logdir restored; its record."""
  the_learner, _ = _learner_on(device)
  checkpointer = checkpoints.Checkpointer(logdir, SETTINGS, agent=the_learner.agent,
                                          learner=the_learner)
  checkpointer.restore(required=True)
  return _record(the_learner)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("action", choices=("write", "read"))
  parser.add_argument("--logdir", required=True)
  parser.add_argument("--device", default="/CPU:0")
  parser.add_argument("--updates", type=int, default=1, help="write: updates before saving.")
  args = parser.parse_args(argv)
  if args.action == "write":
    record = write(args.logdir, args.device, args.updates)
  else:
    record = read(args.logdir, args.device)
  record.update(action=args.action, device=args.device,
                gpus_seen=len(tf.config.list_physical_devices("GPU")))
  print(json.dumps(record))
  return 0


if __name__ == "__main__":
  sys.exit(main())
