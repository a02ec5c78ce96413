"""Tests of the dynamic_batching op and its batch_fn API.

Every test has a timeout (pytestmark below): a deadlock fails the test instead of hanging CI.
Threads started here are daemons, so a failing test cannot keep the interpreter alive either.
"""
import collections
import gc
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import dynamic_batching
from dynamic_batching import build

pytestmark = pytest.mark.timeout(60)

_ops = dynamic_batching._ops  # pylint: disable=protected-access


class Call(threading.Thread):
  """Runs fn(*args) on a daemon thread and keeps its result or its exception."""

  def __init__(self, fn, *args):
    super().__init__(daemon=True)
    self._fn, self._args = fn, args
    self.result, self.error = None, None
    self.start()

  def run(self):
    try:
      self.result = self._fn(*self._args)
    except Exception as error:  # pylint: disable=broad-except
      self.error = error

  def outcome(self, timeout=20.0):
    self.join(timeout)
    assert not self.is_alive(), "the call did not complete"
    return self.result, self.error


def wait_for(condition, timeout=10.0):
  deadline = time.monotonic() + timeout
  while not condition():
    assert time.monotonic() < deadline, "condition not reached in time"
    time.sleep(0.01)


def serving_threads():
  return [t for t in threading.enumerate() if t.name.startswith("dynamic_batching_server")]


def row(value, dtype=tf.float32):
  return tf.constant([value], dtype=dtype)


def times_two_with_batch_size(x):
  """[B, ...] -> (2x, the batch size repeated B times): callers can see their batch's size."""
  batch_size = tf.shape(x)[0]
  return x * 2, tf.fill([batch_size], batch_size)


@pytest.fixture
def batched():
  """Makes batched functions and closes them after the test."""
  made = []

  def make(f, **options):
    function = dynamic_batching.batch_fn_with_options(**options)(f)
    made.append(function)
    return function

  yield make
  for function in made:
    function.close()


# ---------------------------------------------------------------------------------------
# Results go to the right callers.


def test_single_caller_gets_its_result(batched):
  f = batched(times_two_with_batch_size)
  doubled, batch_size = f(row([1.0, 2.0]))
  np.testing.assert_allclose(np.asarray(doubled), [[2.0, 4.0]])
  assert np.asarray(batch_size).tolist() == [1]


def test_batch_fn_uses_the_released_defaults():
  f = dynamic_batching.batch_fn(times_two_with_batch_size)
  try:
    np.testing.assert_allclose(np.asarray(f(row([3.0]))[0]), [[6.0]])
    assert f._options["minimum_batch_size"] == 1  # pylint: disable=protected-access
    assert f._options["maximum_batch_size"] == 1024  # pylint: disable=protected-access
    assert f._options["timeout_ms"] == 100  # pylint: disable=protected-access
  finally:
    f.close()


def test_many_concurrent_callers_get_their_own_results(batched):
  f = batched(times_two_with_batch_size)
  num_threads, calls_per_thread = 32, 10
  start = threading.Barrier(num_threads)

  def caller(index):
    start.wait()
    sizes = []
    for step in range(calls_per_thread):
      value = float(1000 * index + step)
      doubled, batch_size = f(row([value, -value]))
      np.testing.assert_array_equal(np.asarray(doubled), [[2 * value, -2 * value]])
      sizes.append(int(np.asarray(batch_size)[0]))
    return sizes

  calls = [Call(caller, i) for i in range(num_threads)]
  sizes = []
  for call in calls:
    result, error = call.outcome(timeout=40)
    assert error is None, error
    sizes.extend(result)
  assert len(sizes) == num_threads * calls_per_thread
  assert max(sizes) > 1, "concurrent callers were never batched together"


def test_nested_inputs_outputs_and_keyword_arguments(batched):
  Pair = collections.namedtuple("Pair", "first second")

  def f(pair, scale, offsets=None):
    return {"sum": pair.first + pair.second * scale, "offsets": offsets["a"] + 1}

  f = batched(f, minimum_batch_size=2, timeout_ms=5000)
  calls = [Call(lambda v=v: f(Pair(row([v]), row([10 * v])), row([2.0]),
                              offsets={"a": row(int(v), tf.int64)}))
           for v in (1.0, 2.0)]
  for v, call in zip((1.0, 2.0), calls):
    result, error = call.outcome()
    assert error is None, error
    assert set(result) == {"sum", "offsets"}
    np.testing.assert_allclose(np.asarray(result["sum"]), [[v + 20 * v]])
    assert result["offsets"].dtype == tf.int64
    assert np.asarray(result["offsets"]).tolist() == [int(v) + 1]


def test_callers_inside_tf_function(batched):
  f = batched(times_two_with_batch_size)

  @tf.function
  def actor_step(x):
    doubled, _ = f(x)
    return doubled + 1.0

  calls = [Call(lambda i=i: [actor_step(row([float(i)])) for _ in range(5)])
           for i in range(8)]
  for i, call in enumerate(calls):
    results, error = call.outcome()
    assert error is None, error
    for result in results:
      assert result.shape == (1, 1)
      np.testing.assert_allclose(np.asarray(result), [[2.0 * i + 1.0]])


def test_static_output_shapes_inside_tf_function(batched):
  f = batched(lambda x: tf.tile(x, [1, 2]))

  @tf.function
  def call(x):
    out = f(x)
    assert out.shape.as_list() == [1, 6], out.shape  # Known while tracing.
    return out

  np.testing.assert_allclose(np.asarray(call(row([1.0, 2.0, 3.0]))), [[1, 2, 3, 1, 2, 3]])


def test_computation_can_be_pinned_to_a_device(batched):
  traced_on = []

  def f(x):
    y = x + 1.0
    traced_on.append(y.device)
    return y

  f = batched(f, device="/device:CPU:0")
  np.testing.assert_allclose(np.asarray(f(row([1.0]))), [[2.0]])
  assert traced_on and traced_on[0].endswith("CPU:0")


# ---------------------------------------------------------------------------------------
# Batch formation: minimum and maximum batch size, timeout.


def test_minimum_batch_size_waits_for_enough_callers(batched):
  f = batched(times_two_with_batch_size, minimum_batch_size=4, timeout_ms=60_000)
  first = [Call(f, row([float(i)])) for i in range(3)]
  time.sleep(0.5)
  assert all(call.is_alive() for call in first), "a batch was formed below minimum_batch_size"
  last = Call(f, row([3.0]))
  for call in first + [last]:
    (_, batch_size), error = call.outcome()
    assert error is None, error
    assert np.asarray(batch_size).tolist() == [4]


def test_timeout_hands_out_a_partial_batch(batched):
  f = batched(times_two_with_batch_size, minimum_batch_size=8, timeout_ms=300)
  started = time.monotonic()
  calls = [Call(f, row([float(i)])) for i in range(2)]
  for i, call in enumerate(calls):
    (doubled, batch_size), error = call.outcome()
    assert error is None, error
    np.testing.assert_allclose(np.asarray(doubled), [[2.0 * i]])
    assert np.asarray(batch_size)[0] in (1, 2)
  elapsed = time.monotonic() - started
  assert 0.29 <= elapsed < 10.0, elapsed


def enqueue_raw(handle, value):
  """A raw BatcherCompute call with one float input and one float output."""
  return Call(lambda: _ops.batcher_compute(handle, [row([value])], Tout=[tf.float32])[0])


@pytest.fixture
def raw_batcher():
  handles = []

  def make(minimum_batch_size=1, maximum_batch_size=1024, timeout_ms=0, allow_groups=False):
    handle = _ops.batcher(minimum_batch_size=minimum_batch_size,
                          maximum_batch_size=maximum_batch_size, timeout_ms=timeout_ms,
                          allow_groups=allow_groups,
                          shared_name=f"test_batcher_{len(handles)}_{time.monotonic_ns()}")
    handles.append(handle)
    return handle

  yield make
  for handle in handles:
    _ops.batcher_close(handle, 0, "")
    tf.raw_ops.DestroyResourceOp(resource=handle, ignore_lookup_error=True)


def test_maximum_batch_size_caps_each_batch(raw_batcher):
  handle = raw_batcher(minimum_batch_size=1, maximum_batch_size=3)
  calls = []
  for i in range(5):
    calls.append(enqueue_raw(handle, float(i)))
    time.sleep(0.05)  # Keeps the arrival order, which is the order inside a batch.
  time.sleep(0.3)  # All five wait before the first batch is formed.
  first_id, (first,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  second_id, (second,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  np.testing.assert_array_equal(np.asarray(first), [[0.0], [1.0], [2.0]])
  np.testing.assert_array_equal(np.asarray(second), [[3.0], [4.0]])
  assert int(first_id) != int(second_id)
  _ops.batcher_set_outputs(handle, first_id, [first + 10.0])
  _ops.batcher_set_outputs(handle, second_id, [second + 10.0])
  for i, call in enumerate(calls):
    result, error = call.outcome()
    assert error is None, error
    np.testing.assert_array_equal(np.asarray(result), [[i + 10.0]])


def test_computations_may_finish_out_of_order(raw_batcher):
  handle = raw_batcher(maximum_batch_size=1)
  early = enqueue_raw(handle, 1.0)
  early_id, (early_input,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  late = enqueue_raw(handle, 2.0)
  late_id, (late_input,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  _ops.batcher_set_outputs(handle, late_id, [late_input * 100.0])
  result, error = late.outcome()
  assert error is None, error
  np.testing.assert_array_equal(np.asarray(result), [[200.0]])
  assert early.is_alive(), "the first computation's caller completed before its outputs"
  _ops.batcher_set_outputs(handle, early_id, [early_input * 100.0])
  result, error = early.outcome()
  assert error is None, error
  np.testing.assert_array_equal(np.asarray(result), [[100.0]])


def test_get_inputs_waits_for_the_timeout_with_one_caller(raw_batcher):
  handle = raw_batcher(minimum_batch_size=4, timeout_ms=250)
  call = enqueue_raw(handle, 5.0)
  started = time.monotonic()
  computation_id, (inputs,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  assert time.monotonic() - started >= 0.2
  np.testing.assert_array_equal(np.asarray(inputs), [[5.0]])
  _ops.batcher_set_outputs(handle, computation_id, [inputs])
  assert call.outcome()[1] is None


def test_unequal_shapes_within_a_batch_fail_every_caller_of_the_op(raw_batcher):
  handle = raw_batcher(minimum_batch_size=2, timeout_ms=60_000)
  narrow = Call(lambda: _ops.batcher_compute(handle, [row([1.0])], Tout=[tf.float32]))
  wide = Call(lambda: _ops.batcher_compute(handle, [row([1.0, 2.0])], Tout=[tf.float32]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="unequal shapes"):
    _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  for call in (narrow, wide):
    _, error = call.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert "unequal shapes" in str(error)
  # The error closed the batcher: later callers learn why.
  _, error = enqueue_raw(handle, 1.0).outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError) and "unequal shapes" in str(error)


def test_unknown_computation_id_is_an_error(raw_batcher):
  handle = raw_batcher()
  call = enqueue_raw(handle, 1.0)
  computation_id, (inputs,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  with pytest.raises(tf.errors.InvalidArgumentError, match="unknown computation id"):
    _ops.batcher_set_outputs(handle, computation_id + 1, [inputs])
  _, error = call.outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError), error


# ---------------------------------------------------------------------------------------
# Errors reach every caller concerned, and nothing hangs.


def test_input_whose_first_dimension_is_not_one_is_rejected(batched):
  f = batched(times_two_with_batch_size)
  with pytest.raises(tf.errors.InvalidArgumentError, match="leading dimension of 1"):
    f(tf.constant([[1.0], [2.0]]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="leading dimension of 1"):
    f(tf.zeros([0, 1]))
  # Only that caller was concerned: the batcher still serves.
  doubled, _ = f(row([4.0]))
  np.testing.assert_allclose(np.asarray(doubled), [[8.0]])


def test_call_that_does_not_match_the_first_signature_is_rejected(batched):
  f = batched(times_two_with_batch_size)
  f(row([1.0, 2.0]))
  # Checked by the op on every eager call (InvalidArgumentError), and at trace time inside
  # a tf.function (ValueError).
  with pytest.raises(tf.errors.InvalidArgumentError, match="same shapes after the first"):
    f(row([1.0, 2.0, 3.0]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="same dtypes"):
    f(row([1, 2], tf.int32))
  with pytest.raises(tf.errors.InvalidArgumentError, match="is double"):
    f(np.array([[1.0, 2.0]]))  # numpy's default float64, passed straight to the op.
  with pytest.raises(ValueError, match="same shapes after the first"):
    tf.function(f)(row([1.0, 2.0, 3.0]))
  with pytest.raises((ValueError, TypeError)):
    f(row([1.0, 2.0]), row([1.0, 2.0]))
  np.testing.assert_allclose(np.asarray(f(row([3.0, 4.0]))[0]), [[6.0, 8.0]])


def test_unequal_shapes_within_a_batch_fail_every_caller(batched):
  f = batched(lambda x: x * 2.0, minimum_batch_size=2, timeout_ms=60_000)
  # Shapes unknown while tracing: only the op can see that the two callers disagree.
  call = tf.function(f, input_signature=[tf.TensorSpec([1, None], tf.float32)])
  calls = [Call(call, row([1.0])), Call(call, row([1.0, 2.0]))]
  for c in calls:
    _, error = c.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert "unequal shapes" in str(error)


@pytest.mark.parametrize("f, message", [
    (tf.reduce_sum, "leading \\(batch\\) dimension"),
    (lambda x: tf.concat([x, x], axis=0), "leading \\(batch\\) dimension of size 2"),
], ids=["no_batch_dimension", "wrong_batch_dimension"])
def test_outputs_without_the_batch_dimension_fail_every_caller(batched, f, message):
  f = batched(f, minimum_batch_size=2, timeout_ms=60_000)
  calls = [Call(f, row([1.0])), Call(f, row([2.0]))]
  for call in calls:
    _, error = call.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert re.search(message, str(error)), error
  # The batcher closed with that error: later calls fail the same way, they do not hang.
  _, error = Call(f, row([3.0])).outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError), error


def test_op_error_inside_f_reaches_every_caller(batched):
  def must_be_negative(x):
    with tf.control_dependencies([tf.debugging.assert_negative(x, message="not negative")]):
      return tf.identity(x)

  f = batched(must_be_negative, minimum_batch_size=2, timeout_ms=60_000)
  calls = [Call(f, row([1.0])), Call(f, row([-1.0]))]
  for call in calls:
    _, error = call.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert "not negative" in str(error)
  _, error = Call(f, row([-2.0])).outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError), error


def test_python_exception_inside_f_reaches_every_caller(batched):
  def broken(x):
    raise ValueError("broken on purpose")

  before = len(serving_threads())
  f = batched(broken)
  for _ in range(2):  # Every caller, not only the first.
    with pytest.raises(ValueError, match="broken on purpose"):
      f(row([1.0]))
  assert len(serving_threads()) == before  # Nothing was started for a function that fails.


def test_function_returning_no_tensor_is_a_clear_error(batched):
  f = batched(lambda x: None)
  with pytest.raises(TypeError, match="at least one tensor"):
    f(row([1.0]))


def test_close_cancels_waiting_callers_and_stops_the_server():
  before = len(serving_threads())
  f = dynamic_batching.batch_fn_with_options(minimum_batch_size=100, timeout_ms=60_000)(
      times_two_with_batch_size)
  calls = [Call(f, row([float(i)])) for i in range(3)]
  wait_for(lambda: len(serving_threads()) == before + 1)
  time.sleep(0.2)
  assert all(call.is_alive() for call in calls)
  f.close()
  for call in calls:
    _, error = call.outcome(timeout=10)
    assert isinstance(error, tf.errors.CancelledError), error
  assert len(serving_threads()) == before
  with pytest.raises(tf.errors.CancelledError, match="closed"):
    f(row([1.0]))
  f.close()  # Idempotent.


def test_close_before_the_first_call():
  f = dynamic_batching.batch_fn(times_two_with_batch_size)
  f.close()
  with pytest.raises(tf.errors.CancelledError, match="closed"):
    f(row([1.0]))


def test_dropping_the_function_closes_it():
  before = len(serving_threads())
  f = dynamic_batching.batch_fn(times_two_with_batch_size)
  f(row([1.0]))
  assert len(serving_threads()) == before + 1
  del f
  gc.collect()
  wait_for(lambda: len(serving_threads()) == before)


def test_a_function_collected_during_another_trace_adds_nothing_to_that_graph():
  """The garbage collector may finalize a dropped batched function while an unrelated
  tf.function is being traced; its close must run eagerly, outside that graph (XLA, for
  one, cannot compile the DestroyResourceOp it would add)."""
  before = len(serving_threads())
  f = dynamic_batching.batch_fn(times_two_with_batch_size)
  f(row([1.0]))
  cycle = [f]
  cycle.append(cycle)  # Reachable only through a cycle: freed by gc.collect(), not del.
  del f, cycle

  @tf.function
  def traced(x):
    gc.collect()  # Where a collection may happen: while tracing.
    return x + 1

  graph = traced.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
  op_types = {op.type for op in graph.get_operations()}
  assert not op_types & {"DestroyResourceOp", "BatcherClose"}, op_types
  wait_for(lambda: len(serving_threads()) == before)


@pytest.mark.timeout(90)
def test_interpreter_exit_does_not_hang_with_a_waiting_caller():
  script = textwrap.dedent("""
      import threading, time
      import tensorflow as tf
      import dynamic_batching
      f = dynamic_batching.batch_fn_with_options(minimum_batch_size=10, timeout_ms=600000)(
          lambda x: x + 1)
      threading.Thread(target=f, args=(tf.constant([[1.0]]),), daemon=True).start()
      time.sleep(0.5)
      print("exiting", flush=True)
  """)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.dirname(os.path.dirname(dynamic_batching.__file__)),
       os.environ.get("PYTHONPATH", "")]))
  result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=80)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "exiting" in result.stdout


def test_invalid_options_are_rejected():
  with pytest.raises(ValueError):
    dynamic_batching.batch_fn_with_options(minimum_batch_size=4, maximum_batch_size=2)(tf.abs)
  with pytest.raises(ValueError, match="None for no timeout"):
    dynamic_batching.batch_fn_with_options(timeout_ms=-1)(tf.abs)
  with pytest.raises(ValueError):
    dynamic_batching.batch_fn_with_options(num_threads=0)(tf.abs)


def test_several_serving_threads(batched):
  f = batched(times_two_with_batch_size, num_threads=2, maximum_batch_size=2)
  calls = [Call(lambda i=i: [f(row([float(i)]))[0] for _ in range(5)]) for i in range(8)]
  for i, call in enumerate(calls):
    results, error = call.outcome()
    assert error is None, error
    for result in results:
      np.testing.assert_allclose(np.asarray(result), [[2.0 * i]])


# ---------------------------------------------------------------------------------------
# Groups of rows (allow_groups=True): one call carries N >= 1 rows and gets its own rows back.


def group(values, dtype=tf.float32):
  """A group of rows, one value per row: [N, 1]."""
  return tf.constant([[value] for value in values], dtype=dtype)


def tagged(thread, step, num_rows):
  """Values unique to (thread, step, row), so a row that reaches the wrong caller shows."""
  return [1000.0 * thread + 10.0 * step + row for row in range(num_rows)]


def doubled_tag_and_batch_size(x, tag):
  """Two inputs that must stay aligned row by row, and the batch's number of rows."""
  batch_size = tf.shape(x)[0]
  return {"x": x * 2.0, "tag": tag + 1, "batch_size": tf.fill([batch_size], batch_size)}


def test_groups_and_single_rows_from_many_threads_get_exactly_their_own_rows(batched):
  f = batched(doubled_tag_and_batch_size, allow_groups=True, maximum_batch_size=16)
  # Group sizes 1 (single-row callers), 2, 3, 5, 8, and 20 (> maximum_batch_size: split).
  sizes = [1, 1, 1, 2, 3, 5, 8, 20]
  start = threading.Barrier(len(sizes))

  def caller(thread, num_rows):
    start.wait()
    batch_sizes = set()
    for step in range(8):
      values = tagged(thread, step, num_rows)
      tags = np.array([int(v) for v in values], np.int64)[:, None]
      out = f(group(values), tf.constant(tags))
      np.testing.assert_array_equal(out["x"], 2.0 * np.array(values)[:, None])
      np.testing.assert_array_equal(out["tag"], tags + 1)
      assert out["x"].shape == (num_rows, 1)
      batch_sizes.update(np.asarray(out["batch_size"]).tolist())
    return batch_sizes

  calls = [Call(caller, thread, num_rows) for thread, num_rows in enumerate(sizes)]
  batch_sizes = set()
  for call in calls:
    result, error = call.outcome(timeout=40)
    assert error is None, error
    batch_sizes |= result
  assert max(batch_sizes) <= 16, "a batch held more rows than maximum_batch_size"
  assert max(batch_sizes) > 8, "groups of several threads were never batched together"


def test_groups_inside_tf_function_have_static_row_counts(batched):
  f = batched(lambda x: tf.tile(x, [1, 2]), allow_groups=True)

  @tf.function
  def step(x):
    out = f(x)
    assert out.shape.as_list() == [3, 4], out.shape  # Known while tracing.
    return out

  np.testing.assert_array_equal(step(group([1.0, 2.0, 3.0]) * [[1.0, 10.0]]),
                                [[1, 10, 1, 10], [2, 20, 2, 20], [3, 30, 3, 30]])
  g = batched(lambda x: tf.tile(x, [1, 2]), allow_groups=True)
  unknown_rows = tf.function(g, input_signature=[tf.TensorSpec([None, 1], tf.float32)])
  assert unknown_rows.get_concrete_function().structured_outputs.shape.as_list() == [None, 2]
  calls = [Call(unknown_rows, group(tagged(i, 0, i + 1))) for i in range(4)]
  for i, call in enumerate(calls):
    result, error = call.outcome()
    assert error is None, error
    np.testing.assert_array_equal(result, np.tile(np.array(tagged(i, 0, i + 1))[:, None], 2))


def test_group_larger_than_maximum_batch_size_is_split_across_batches(raw_batcher):
  handle = raw_batcher(maximum_batch_size=2, allow_groups=True)
  call = Call(lambda: _ops.batcher_compute(handle, [group([0.0, 1.0, 2.0, 3.0, 4.0])],
                                           Tout=[tf.float32])[0])
  batches = [_ops.batcher_get_inputs(handle, Tin=[tf.float32]) for _ in range(3)]
  assert [np.asarray(inputs).ravel().tolist() for _, (inputs,) in batches] == [
      [0.0, 1.0], [2.0, 3.0], [4.0]]
  # The pieces may finish in any order; the call returns once the last one has.
  for computation_id, (inputs,) in (batches[2], batches[0]):
    _ops.batcher_set_outputs(handle, computation_id, [inputs + 100.0])
  time.sleep(0.2)
  assert call.is_alive(), "the call returned before all its rows were computed"
  _ops.batcher_set_outputs(handle, batches[1][0], [batches[1][1][0] + 100.0])
  result, error = call.outcome()
  assert error is None, error
  np.testing.assert_array_equal(result, [[100.0], [101.0], [102.0], [103.0], [104.0]])


def test_group_that_does_not_fit_fills_the_batch_and_heads_the_next(raw_batcher):
  handle = raw_batcher(maximum_batch_size=4, allow_groups=True)
  first = Call(lambda: _ops.batcher_compute(handle, [group([1.0, 2.0, 3.0])], Tout=[tf.float32]))
  wait_for(lambda: first.is_alive())
  time.sleep(0.1)  # Arrival order is batch order.
  second = Call(lambda: _ops.batcher_compute(handle, [group([4.0, 5.0, 6.0])],
                                             Tout=[tf.float32]))
  time.sleep(0.3)
  batches = [_ops.batcher_get_inputs(handle, Tin=[tf.float32]) for _ in range(2)]
  assert [np.asarray(inputs).ravel().tolist() for _, (inputs,) in batches] == [
      [1.0, 2.0, 3.0, 4.0], [5.0, 6.0]]
  for computation_id, (inputs,) in batches:
    _ops.batcher_set_outputs(handle, computation_id, [-inputs])
  for call, values in ((first, [1.0, 2.0, 3.0]), (second, [4.0, 5.0, 6.0])):
    (result,), error = call.outcome()
    assert error is None, error
    np.testing.assert_array_equal(result, -np.array(values)[:, None])


def test_split_groups_with_several_serving_threads(batched):
  f = batched(times_two_with_batch_size, allow_groups=True, maximum_batch_size=3,
              num_threads=2)
  calls = [Call(lambda i=i: [f(group(tagged(i, step, 7))) for step in range(4)])
           for i in range(4)]
  for i, call in enumerate(calls):
    results, error = call.outcome(timeout=40)
    assert error is None, error
    for step, (doubled, batch_size) in enumerate(results):
      np.testing.assert_array_equal(doubled, 2.0 * np.array(tagged(i, step, 7))[:, None])
      assert np.asarray(batch_size).max() <= 3


def test_minimum_batch_size_counts_rows_of_groups(batched):
  f = batched(times_two_with_batch_size, allow_groups=True, minimum_batch_size=6,
              timeout_ms=60_000)
  four = Call(f, group([1.0, 2.0, 3.0, 4.0]))
  time.sleep(0.5)
  assert four.is_alive(), "a batch of 4 rows was formed below minimum_batch_size=6"
  two = Call(f, group([5.0, 6.0]))
  for call, values in ((four, [1.0, 2.0, 3.0, 4.0]), (two, [5.0, 6.0])):
    (doubled, batch_size), error = call.outcome()
    assert error is None, error
    np.testing.assert_array_equal(doubled, 2.0 * np.array(values)[:, None])
    assert np.asarray(batch_size).tolist() == [6] * len(values)


def test_timeout_hands_out_a_partial_batch_of_a_group(batched):
  f = batched(times_two_with_batch_size, allow_groups=True, minimum_batch_size=8,
              timeout_ms=300)
  started = time.monotonic()
  (doubled, batch_size), error = Call(f, group([1.0, 2.0, 3.0])).outcome()
  elapsed = time.monotonic() - started
  assert error is None, error
  np.testing.assert_array_equal(doubled, [[2.0], [4.0], [6.0]])
  assert np.asarray(batch_size).tolist() == [3, 3, 3]
  assert 0.29 <= elapsed < 10.0, elapsed


def test_timeout_none_means_no_timeout(batched):
  # The released code's batch_fn_with_options(timeout_ms=None): a batch waits for
  # minimum_batch_size rows however long that takes.
  f = batched(times_two_with_batch_size, minimum_batch_size=2, timeout_ms=None)
  first = Call(f, row([1.0]))
  time.sleep(1.0)
  assert first.is_alive(), "timeout_ms=None timed out"
  second = Call(f, row([2.0]))
  for call, value in ((first, 1.0), (second, 2.0)):
    (doubled, batch_size), error = call.outcome()
    assert error is None, error
    np.testing.assert_array_equal(doubled, [[2.0 * value]])
    assert np.asarray(batch_size).tolist() == [2]
  # With the default minimum_batch_size of 1, no timeout is needed at all.
  g = batched(times_two_with_batch_size, timeout_ms=None)
  np.testing.assert_array_equal(g(row([3.0]))[0], [[6.0]])
  assert g._options["timeout_ms"] is None  # pylint: disable=protected-access


def test_timeout_none_with_groups_waits_for_enough_rows(raw_batcher):
  handle = raw_batcher(minimum_batch_size=3, timeout_ms=-1, allow_groups=True)
  call = Call(lambda: _ops.batcher_compute(handle, [group([1.0, 2.0])], Tout=[tf.float32]))
  getter = Call(lambda: _ops.batcher_get_inputs(handle, Tin=[tf.float32]))
  time.sleep(0.8)
  assert getter.is_alive() and call.is_alive(), "a batch below minimum_batch_size was formed"
  other = Call(lambda: _ops.batcher_compute(handle, [group([3.0])], Tout=[tf.float32]))
  (computation_id, (inputs,)), error = getter.outcome()
  assert error is None, error
  np.testing.assert_array_equal(np.asarray(inputs).ravel(), [1.0, 2.0, 3.0])
  _ops.batcher_set_outputs(handle, computation_id, [inputs * 10.0])
  assert np.asarray(call.outcome()[0][0]).ravel().tolist() == [10.0, 20.0]
  assert np.asarray(other.outcome()[0][0]).ravel().tolist() == [30.0]


def test_op_error_reaches_every_group_of_the_batch_and_later_callers(batched):
  def must_be_negative(x):
    with tf.control_dependencies([tf.debugging.assert_negative(x, message="not negative")]):
      return tf.identity(x)

  f = batched(must_be_negative, allow_groups=True, minimum_batch_size=5, timeout_ms=60_000)
  calls = [Call(f, group([-1.0, -2.0, -3.0])), Call(f, group([-4.0, 5.0])), Call(f, row([-6.0]))]
  for call in calls[:2]:
    _, error = call.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert "not negative" in str(error)
  # The third caller came after the failed batch (or joined it): it fails the same way.
  _, error = calls[2].outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError), error
  assert "not negative" in str(error)


def test_error_in_one_piece_fails_a_split_group(batched):
  def fails_on_big_values(x):
    with tf.control_dependencies([tf.debugging.assert_less(x, 100.0, message="too big")]):
      return tf.identity(x)

  f = batched(fails_on_big_values, allow_groups=True, maximum_batch_size=2)
  _, error = Call(f, group([1.0, 2.0, 3.0, 400.0, 5.0])).outcome()
  assert isinstance(error, tf.errors.InvalidArgumentError), error
  assert "too big" in str(error)


def test_outputs_with_the_wrong_row_count_fail_every_group(batched):
  f = batched(lambda x: tf.concat([x, x], axis=0), allow_groups=True, minimum_batch_size=3,
              timeout_ms=60_000)
  calls = [Call(f, group([1.0, 2.0])), Call(f, group([3.0]))]
  for call in calls:
    _, error = call.outcome()
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert "leading (batch) dimension of size 3" in str(error)


def test_close_with_a_group_split_between_a_computation_and_the_queue(raw_batcher):
  handle = raw_batcher(maximum_batch_size=2, allow_groups=True)
  call = Call(lambda: _ops.batcher_compute(handle, [group([1.0, 2.0, 3.0])], Tout=[tf.float32]))
  computation_id, (inputs,) = _ops.batcher_get_inputs(handle, Tin=[tf.float32])
  assert np.asarray(inputs).ravel().tolist() == [1.0, 2.0]
  _ops.batcher_close(handle, 0, "")  # Rows 0-1 computing, row 2 queued: one failure.
  _, error = call.outcome()
  assert isinstance(error, tf.errors.CancelledError), error
  with pytest.raises(tf.errors.CancelledError):
    _ops.batcher_set_outputs(handle, computation_id, [inputs])


def test_malformed_groups_are_rejected_and_the_batcher_carries_on(batched):
  f = batched(lambda x, y: x + y, allow_groups=True)
  with pytest.raises(tf.errors.InvalidArgumentError, match="same leading dimension"):
    f(group([1.0, 2.0]), group([1.0, 2.0, 3.0]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least one row"):
    f(tf.zeros([0, 1]), tf.zeros([0, 1]))
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[N\] \+ \[1\]"):
    f(tf.zeros([2, 3]), tf.zeros([2, 3]))
  np.testing.assert_array_equal(f(group([1.0, 2.0]), group([10.0, 20.0])), [[11.0], [22.0]])


def test_groups_are_opt_in(batched):
  f = batched(times_two_with_batch_size)  # The released contract: one row per call.
  with pytest.raises(tf.errors.InvalidArgumentError, match="leading dimension of 1"):
    f(group([1.0, 2.0]))
  with pytest.raises(TypeError, match="allow_groups"):
    dynamic_batching.batch_fn_with_options(allow_groups=1)(tf.abs)
  with pytest.raises(tf.errors.InvalidArgumentError, match="timeout_ms"):
    _ops.batcher(minimum_batch_size=1, maximum_batch_size=1, timeout_ms=-2)


# ---------------------------------------------------------------------------------------
# Building the op library.

FAKE_COMPILER = """#!{python}
# Stands in for g++: records the call, takes its time, writes the -o file.
import sys, time
with open({log!r}, "a") as log:
    log.write("compiled\\n")
time.sleep(1.0)
output = sys.argv[sys.argv.index("-o") + 1]
with open(output, "w") as f:
    f.write("not really a library")
"""


def fake_compiler(tmp_path):
  log = tmp_path / "compiler.log"
  compiler = tmp_path / "fake-g++"
  compiler.write_text(FAKE_COMPILER.format(python=sys.executable, log=str(log)))
  compiler.chmod(0o755)
  return str(compiler), log


def test_cache_is_keyed_by_source_tensorflow_and_flags(tmp_path):
  compiler, log = fake_compiler(tmp_path)
  source = tmp_path / "op.cc"
  source.write_text("// version 1")
  cache = str(tmp_path / "cache")

  def path(**overrides):
    arguments = dict(source=str(source), cache_dir=cache, compiler=[compiler],
                     tf_version="2.21.0", compile_flags=["-DA"], link_flags=["-lB"])
    arguments.update(overrides)
    return build.library_path(**arguments)

  first = path()
  assert os.path.exists(first) and path() == first
  assert log.read_text().count("compiled") == 1  # Second call: cached.
  assert path(tf_version="2.22.0") != first
  assert path(compile_flags=["-DOTHER"]) != first
  source.write_text("// version 2")
  assert path() != first
  assert log.read_text().count("compiled") == 4
  assert not [name for name in os.listdir(cache) if name.endswith(".partial")]


def test_two_processes_building_at_once_compile_once(tmp_path):
  compiler, log = fake_compiler(tmp_path)
  source = tmp_path / "op.cc"
  source.write_text("// op")
  script = textwrap.dedent(f"""
      import importlib.util
      spec = importlib.util.spec_from_file_location("build", {build.__file__!r})
      build = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(build)
      print(build.library_path(source={str(source)!r}, cache_dir={str(tmp_path / "cache")!r},
                               compiler=[{compiler!r}], tf_version="x", compile_flags=[],
                               link_flags=[]))
  """)
  processes = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
  outputs = [process.communicate(timeout=30) for process in processes]
  assert [process.returncode for process in processes] == [0, 0], outputs
  paths = {stdout.strip() for stdout, _ in outputs}
  assert len(paths) == 1 and os.path.exists(paths.pop())
  assert log.read_text().count("compiled") == 1


def test_missing_compiler_is_a_clear_error(tmp_path):
  source = tmp_path / "op.cc"
  source.write_text("// op")
  with pytest.raises(build.BuildError, match="no-such-g\\+\\+.*not found.*apt-get install g\\+\\+"):
    build.library_path(source=str(source), cache_dir=str(tmp_path), compiler=["no-such-g++"],
                       tf_version="x", compile_flags=[], link_flags=[])


def test_compile_failure_is_reported_with_the_command(tmp_path):
  source = tmp_path / "op.cc"
  source.write_text("this is not C++")
  with pytest.raises(build.BuildError, match="failed"):
    build.library_path(source=str(source), cache_dir=str(tmp_path),
                       compiler=["g++"] if build.shutil.which("g++") else ["false"],
                       tf_version="x", compile_flags=[], link_flags=[])


def test_compiler_comes_from_cxx(monkeypatch):
  monkeypatch.setenv("CXX", "ccache g++-12")
  assert build.default_compiler() == ["ccache", "g++-12"]
  monkeypatch.delenv("CXX")
  assert build.default_compiler() == ["g++"]


def test_output_packer_matches_tf_nest():
  Pair = collections.namedtuple("Pair", "first second")
  structure = (Pair(first=1, second={"b": 2, "a": [3, (4,)]}), [5], {"z": Pair(6, 7)}, 8)
  flat = tf.nest.flatten(structure)
  leaves = [f"leaf{i}" for i in range(len(flat))]
  assert dynamic_batching._packer(structure)(leaves) == tf.nest.pack_sequence_as(structure,
                                                                                 leaves)


def test_eager_calls_take_the_direct_path_and_return_numpy(batched):
  f = batched(times_two_with_batch_size)
  doubled, batch_size = f(np.array([[1.5, -2.0]], np.float32))
  assert isinstance(doubled, np.ndarray) and isinstance(batch_size, np.ndarray)
  np.testing.assert_array_equal(doubled, [[3.0, -4.0]])
  assert f._server._direct_call is not None  # pylint: disable=protected-access
  # An EagerTensor input is read without a copy and joins the same batcher.
  np.testing.assert_array_equal(f(tf.constant([[1.0, 1.0]]))[0], [[2.0, 2.0]])


def test_string_inputs_go_through_the_op(batched):
  """Strings cannot be copied as flat buffers: such calls use the BatcherCompute op."""
  f = batched(lambda words: tf.strings.join([words, words]))
  assert np.asarray(f(tf.constant(["ab"]))).tolist() == [b"abab"]
  assert f._server._direct_call is None  # pylint: disable=protected-access
