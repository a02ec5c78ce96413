"""How large the steps of TF1's RMSProp are, per layer, in a run's checkpoints.

    python -m benchmarks.tools.optimizer_steps --logdir=/tmp/pong

TF1's RMSProp (the released code's optimizer, scalable_agent_tf2/learning/optimizers.py) moves a
parameter by lr * g / sqrt(ms + epsilon), where ms is the decayed mean of g^2 (decay 0.99,
starting at 1) and epsilon sits inside the square root (0.01 in Table G.1 and Table D.3). For
a gradient of the size the accumulator has seen, |g| = sqrt(ms), the step is

    step / lr = sqrt(ms / (ms + epsilon))

which is ~1 where gradients are large (ms >> epsilon: the step is the learning rate, as in
Adam) and ~sqrt(ms / epsilon) where they are small (the optimizer is then plain SGD with a
learning rate of lr / sqrt(epsilon)). This tool reads every kept checkpoint of a run and
prints that ratio per variable (median and 10th/90th percentiles over its parameters), and
the median over all parameters: a direct reading of how much of the learning rate each
layer actually gets.
"""
import argparse
import os

import numpy as np

from scalable_agent_tf2.utils import quiet_tensorflow


def step_fraction(mean_square, epsilon):
  """step / learning rate of TF1 RMSProp for a gradient of magnitude sqrt(mean_square)."""
  mean_square = np.asarray(mean_square, np.float64)
  return np.sqrt(mean_square / (mean_square + epsilon))


def _variable_names(reader):
  """Index in the optimizer's lists -> the variable's path under the agent (e.g.
  'torso/fc/w'), from the checkpoint's object graph."""
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=g-import-not-at-top
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  paths, stack, seen = {}, [(0, ())], set()
  while stack:
    node, path = stack.pop()
    paths.setdefault(node, []).append("/".join(path))
    if node not in seen:
      seen.add(node)
      stack.extend((child.node_id, path + (child.local_name,))
                   for child in graph.nodes[node].children)
  names = {}
  for node_paths in paths.values():
    indices = [p.rsplit("/", 1)[1] for p in node_paths if p.startswith("learner/_variables/")]
    agent = [p.split("agent/", 1)[1] for p in node_paths if "agent/" in p]
    if indices:
      names[int(indices[0])] = agent[0] if agent else f"variable {indices[0]}"
  return names


def checkpoint_steps(path, tf):
  """(frames, iterations, epsilon, [(name, size, ms median, fraction p10/p50/p90)], overall
  median fraction) of one checkpoint."""
  reader = tf.train.load_checkpoint(path)
  read = lambda name: reader.get_tensor(f"learner/{name}/.ATTRIBUTES/VARIABLE_VALUE")
  epsilon = float(read("optimizer/epsilon"))
  names = _variable_names(reader)
  rows, fractions = [], []
  for index in sorted(names):
    mean_square = read(f"optimizer/mean_squares/{index}")
    fraction = step_fraction(mean_square, epsilon)
    fractions.append(fraction.ravel())
    rows.append((names[index], mean_square.size, float(np.median(mean_square)),
                 *np.percentile(fraction, [10, 50, 90])))
  return (int(read("num_env_frames")), int(read("optimizer/iterations")), epsilon, rows,
          float(np.median(np.concatenate(fractions))))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--logdir", required=True, help="A training run's --logdir.")
  args = parser.parse_args(argv)
  tf = quiet_tensorflow.import_tensorflow()
  state = tf.train.get_checkpoint_state(os.path.join(args.logdir, "checkpoints"))
  if state is None:
    parser.error(f"no checkpoint in {args.logdir}/checkpoints")
  for path in state.all_model_checkpoint_paths:
    frames, iterations, epsilon, rows, overall = checkpoint_steps(path, tf)
    print(f"\n{os.path.basename(path)}: {frames:,} frames, {iterations:,} updates, "
          f"epsilon {epsilon:g}; median step/lr over all parameters {overall:.3f}")
    print(f"  {'variable':<18} {'params':>8} {'ms median':>10} {'step/lr p10':>11} "
          f"{'median':>7} {'p90':>6}")
    for name, size, ms_median, p10, p50, p90 in rows:
      print(f"  {name:<18} {size:>8,} {ms_median:>10.2e} {p10:>11.3f} {p50:>7.3f} {p90:>6.3f}")


if __name__ == "__main__":
  main()
