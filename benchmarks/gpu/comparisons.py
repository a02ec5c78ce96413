"""What the gpu test tier (tests/benchmark_tools/test_gpu.py) compares, as functions that run anywhere.

Each GPU test is one of these comparisons with the GPU on one side. The same functions run
CPU against CPU in the default tier (tests/benchmark_tools/test_gpu_readiness.py), once where the two sides
must agree (XLA against TensorFlow's own kernels: another order of float32 arithmetic, as on
a GPU) and once with a forced difference that they must report (a learning rate 10% higher,
rows handed to the wrong caller, another agent's parameters). So the tier can fail.

Tolerances (update_mismatches). A GPU computes the same float32 update in another order:
XLA fuses and reorders reductions, cuDNN picks its own convolution algorithms (some
accumulate differently), sums over T x B run in parallel. Each of these moves a float32 result
by a few units in the last place per operation, about 1e-6 relative; over a loss summed over
T x B steps and three updates it stays well under 1e-4 relative. So:
  - every floating-point statistic of every update (losses, gradient norm, learning rate):
    |gpu - cpu| <= STAT_ATOL + STAT_RTOL * max(|gpu|, |cpu|), STAT_RTOL = 1e-3;
  - integer and boolean statistics (frames, target refreshes, trust-region rejections):
    equal;
  - the parameters' change over the updates: ||change_gpu - change_cpu|| / ||change_cpu||
    <= CHANGE_TOLERANCE = 1e-2 (all trainable variables as one vector). The change, not the
    parameters, because the parameters move by about 1e-3 relative in three updates: a
    tolerance on them would not see a wrong update.
A learning rate 10% off moves the learning-rate statistic by 1e-1 relative and the change by
about 1e-1: both are caught with two orders of magnitude to spare (measured in
tests/benchmark_tools/test_gpu_readiness.py). TensorFloat-32 (on by default on Ampere and Hopper GPUs for
float32 matrix products and convolutions) rounds their inputs to 10 bits of mantissa, about
5e-4 relative per product: the tier turns it off (without_tensor_float_32) to compare float32
with float32; training keeps TensorFlow's default.
"""
import contextlib
import hashlib

import numpy as np
import tensorflow as tf

from benchmarks.tools import update_numbers

STAT_RTOL = 1e-3
STAT_ATOL = 1e-5
CHANGE_TOLERANCE = 1e-2
# The batch and the number of updates of every comparison (update_numbers' defaults: small
# enough for a CPU, enough steps for the optimizer's state to matter).
T, B, UPDATES = 5, 4, 3
NO_GPU = ("TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') is empty): the gpu "
          "tier needs an NVIDIA GPU, its driver and tensorflow[and-cuda] "
          "(benchmarks/gpu/README.md).")


def no_gpu_reason():
  """Why the gpu tier cannot run here (NO_GPU), or None when TensorFlow sees a GPU."""
  return None if tf.config.list_physical_devices("GPU") else NO_GPU


@contextlib.contextmanager
def without_tensor_float_32():
  """float32 matrix products and convolutions in full float32 on GPUs that have TF32."""
  was = tf.config.experimental.tensor_float_32_execution_enabled()
  tf.config.experimental.enable_tensor_float_32_execution(False)
  try:
    yield
  finally:
    tf.config.experimental.enable_tensor_float_32_execution(was)


def build_case(name, device, jit_compile, strategy=None, learning_rate=None):
  """update_numbers.build_case with the learner's variables created on `device` (ignored
  with a strategy, which places them on its own devices)."""
  scope = tf.device(device) if strategy is None else contextlib.nullcontext()
  with scope:
    return update_numbers.build_case(name, jit_compile=jit_compile, strategy=strategy,
                                     learning_rate=learning_rate)


def copy_state(source, target):
  """The networks' variables of learner `source` (its agent's and, for IMPACT, its target
  network's) assigned to `target`'s, so that two learners built apart start from the same
  bits (initializers need not draw the same numbers on every device). The rest of a new
  learner's state starts equal by construction (RMSProp's slots, the counters) or is what a
  side may change on purpose (the learning rate: the forced difference)."""
  def networks_of(the_learner):
    agents = [the_learner.agent] + [a for a in [getattr(the_learner, "target_agent", None)]
                                    if a is not None]
    return [v for agent in agents for v in agent.variables]
  sources, targets = networks_of(source), networks_of(target)
  if [v.shape for v in sources] != [v.shape for v in targets]:
    raise ValueError("The two learners do not have the same variables: build them from the "
                     "same case.")
  for s, t in zip(sources, targets):
    t.assign(s.numpy())


def run_case(name, the_learner, batch, device):
  """The case's updates on `device`: {"updates": [{stat: value}], "initial": [arrays],
  "final": [arrays], "devices": the devices of the variables and of the last statistics}."""
  initial = [v.numpy() for v in the_learner.agent.trainable_variables]
  with tf.device(device):
    updates = update_numbers.case_updates(name, the_learner, batch, T, B, UPDATES)
  final = [v.numpy() for v in the_learner.agent.trainable_variables]
  return dict(updates=updates, initial=initial, final=final,
              devices=sorted(variable_devices(the_learner.agent.trainable_variables)))


def variable_devices(variables):
  """The devices that hold `variables` (every component of a mirrored variable)."""
  devices = set()
  for variable in variables:
    for component in getattr(variable, "values", (variable,)):
      devices.add(tf.DeviceSpec.from_string(component.device).device_type or "?")
  return devices


def _is_exact(value):
  return isinstance(value, (bool, int, np.integer, np.bool_))


def stat_mismatches(reference, candidate, rtol=STAT_RTOL, atol=STAT_ATOL):
  """Lines naming each statistic of each update that differs beyond the tolerance."""
  lines = []
  if len(reference) != len(candidate):
    return [f"{len(candidate)} updates, expected {len(reference)}"]
  for index, (want, have) in enumerate(zip(reference, candidate)):
    for key, value in sorted(want.items()):
      if key not in have:
        lines.append(f"update {index} {key}: missing")
        continue
      other = have[key]
      if _is_exact(value) or _is_exact(other):
        if other != value:
          lines.append(f"update {index} {key}: {other!r}, expected {value!r} (exactly)")
      elif not abs(other - value) <= atol + rtol * max(abs(other), abs(value)):
        lines.append(f"update {index} {key}: {other!r}, expected {value!r} (relative "
                     f"difference {abs(other - value) / max(abs(value), 1e-30):.2e}, "
                     f"tolerance {rtol:g})")
  return lines


def change_difference(reference, candidate):
  """||change_candidate - change_reference|| / ||change_reference|| of the trainable
  parameters over the updates (run_case's "initial" and "final")."""
  flat = lambda arrays: np.concatenate([np.ravel(a).astype(np.float64) for a in arrays])
  start = flat(reference["initial"])
  if not np.array_equal(start, flat(candidate["initial"])):
    raise ValueError("The two runs did not start from the same parameters (copy_state).")
  want = flat(reference["final"]) - start
  have = flat(candidate["final"]) - start
  norm = np.linalg.norm(want)
  if norm == 0:
    raise ValueError("The reference's updates did not change the parameters: nothing to "
                     "compare.")
  return float(np.linalg.norm(have - want) / norm)


def update_mismatches(reference, candidate, rtol=STAT_RTOL, atol=STAT_ATOL,
                      change_tolerance=CHANGE_TOLERANCE):
  """Lines naming what differs between two run_case results beyond the tolerances (module
  docstring); empty when they agree."""
  lines = stat_mismatches(reference["updates"], candidate["updates"], rtol, atol)
  difference = change_difference(reference, candidate)
  if not difference <= change_tolerance:
    lines.append(f"parameter change: relative difference {difference:.2e}, tolerance "
                 f"{change_tolerance:g}")
  return lines


def compare_case(name, reference_side, candidate_side, learning_rate=None, strategy=None):
  """Builds case `name` twice, with the same starting state, and runs its updates on both.

  Args:
    reference_side, candidate_side: (device, jit_compile) of each side, e.g. ("/CPU:0",
      False) and ("/GPU:0", True).
    learning_rate: None, or the candidate's own learning rate (a forced difference).
    strategy: None, or the candidate's tf.distribute strategy.

  Returns:
    (mismatch lines, reference result, candidate result).
  """
  (ref_device, ref_xla), (cand_device, cand_xla) = reference_side, candidate_side
  reference_learner, batch = build_case(name, ref_device, ref_xla)
  candidate_learner, _ = build_case(name, cand_device, cand_xla, strategy=strategy,
                                    learning_rate=learning_rate)
  copy_state(reference_learner, candidate_learner)
  reference = run_case(name, reference_learner, batch, ref_device)
  candidate = run_case(name, candidate_learner, batch, cand_device)
  return update_mismatches(reference, candidate), reference, candidate


# ---------------------------------------------------------------------------------------
# Dynamic batching: many threads, each its own rows back.

def thread_inputs(policy, network_config, num_threads, group_size, seed=0):
  """One group of inputs per thread, all different: (prev_actions int32 [G], EnvOutput of
  numpy [G, ...], core states [G, ...]) with random LSTM states (so that a state handed to
  the wrong row shows)."""
  # pylint: disable=g-import-not-at-top
  from tests import random_batches
  inputs = []
  for thread in range(num_threads):
    rng = np.random.default_rng([seed, thread])
    env_outputs = random_batches.random_env_outputs(network_config, (group_size,),
                                                 seed=seed * 1000 + thread)
    states = tf.nest.map_structure(
        lambda s, rng=rng: rng.normal(size=s.shape).astype(np.float32),
        policy.initial_states(group_size))
    actions = rng.integers(0, network_config.num_actions, group_size).astype(np.int32)
    inputs.append((actions, env_outputs, states))
  return inputs


def batched_rows_mismatches(policy, reference, inputs, rounds=5, rtol=1e-3, atol=1e-4):
  """Calls policy(*inputs[i]) from one thread per group, all at once, `rounds` times each;
  returns lines naming each thread whose outputs differ from reference(*inputs[i]) (the
  same step on that group alone). Empty: every thread got its own rows back."""
  import threading  # pylint: disable=g-import-not-at-top
  want = [reference(*group) for group in inputs]
  barrier = threading.Barrier(len(inputs))
  got = [[] for _ in inputs]
  errors = []

  def call(index):
    try:
      barrier.wait()
      for _ in range(rounds):
        got[index].append(policy(*inputs[index]))
    except Exception as error:  # pylint: disable=broad-except
      errors.append(f"thread {index}: {type(error).__name__}: {error}")
  threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  lines = list(errors)
  for index, (expected, results) in enumerate(zip(want, got)):
    for round_index, result in enumerate(results):
      for have, should in zip(tf.nest.flatten(result), tf.nest.flatten(expected)):
        have, should = np.asarray(have), np.asarray(should)
        if have.shape != should.shape:
          lines.append(f"thread {index} round {round_index}: rows of shape {have.shape}, its "
                       f"own are {should.shape}")
          break
        if not np.allclose(have, should, rtol=rtol, atol=atol):
          lines.append(f"thread {index} round {round_index}: rows not its own (largest "
                       f"difference {np.max(np.abs(have - should)):.3g})")
          break
  return lines


# ---------------------------------------------------------------------------------------
# Checkpoints across devices.

def parameters_digest(variables):
  """A digest of variables' values (bits, in order)."""
  digest = hashlib.sha256()
  for variable in variables:
    digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
  return digest.hexdigest()[:16]


def digest_mismatch(written, restored):
  """A line if the restored parameters are not the written ones (checkpoint_roundtrip's
  JSON records), else None."""
  if written["digest"] != restored["digest"]:
    return (f"restored parameters {restored['digest']} on {restored['devices']} are not the "
            f"written {written['digest']} from {written['devices']}")
  return None
