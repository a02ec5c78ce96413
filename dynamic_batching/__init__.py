"""Dynamic batching: many threads call a function on their rows, one computation serves them.

The paper's single-machine throughput (Espeholt et al., 2018, Table 1, "dyn. batch") comes
from this: many actor threads each ask for one action, and one forward pass of the policy
answers them all. The released code did it with a C++ op (batcher.cc) and a decorator; this
package keeps that decorator's names and semantics for TensorFlow 2:

    @dynamic_batching.batch_fn
    def policy(frame, state):          # tensors whose first dimension is the batch
      return network(frame, state)

    action, state = policy(frame[None], state[None])   # from any thread: a batch of one

Groups of rows: by default every call carries exactly one row (leading dimension 1), the
released code's contract. With `allow_groups=True` a call may carry a group of N >= 1 rows
(e.g. one actor thread's N environments) and gets its own N rows back, batched with other
threads' calls (groups and single rows mix freely):

    @dynamic_batching.batch_fn_with_options(maximum_batch_size=64, allow_groups=True)
    def policy(frame, state):
      return network(frame, state)

    action, state = policy(frames, states)   # frames [N, ...] -> action [N, ...]

Batch sizes count rows, not calls. A batch takes waiting rows in arrival order, up to
`maximum_batch_size`; a group that does not fit in what is left of a batch, or is larger than
`maximum_batch_size` itself, is split: its first rows complete the batch, the rest head the
next one, and the call returns once all its rows are computed. So no group is ever refused
for its size, and no batch exceeds `maximum_batch_size` rows.

How it works (batcher.cc has the details):
  * A caller's call runs the asynchronous BatcherCompute op: it queues the caller's inputs and
    returns when the caller's rows of the outputs arrive. Inside a tf.function the waiting
    caller holds no thread; eagerly, only its own (GIL released).
  * A dedicated serving thread (or several, `num_threads`) runs one tf.function holding a
    loop: BatcherGetInputs (ready when `minimum_batch_size` rows wait, or the oldest has
    waited `timeout_ms`; takes at most `maximum_batch_size` rows) -> the decorated function,
    traced once and optionally pinned to `device` -> BatcherSetOutputs, which completes the
    callers. The loop never returns to Python, so it never waits for the GIL.
  * Errors: an exception or op error inside the function, or outputs without the batch
    dimension, close the batcher with that error; every pending and every later caller
    receives it. A caller whose inputs do not have a leading dimension of 1 (with groups:
    one common leading dimension N >= 1), or do not match the function's input signature,
    gets its own error and the batcher carries on.
  * `close()` (also run when the object is garbage collected and at interpreter exit) fails
    pending callers with CancelledError and stops the serving threads.

The input signature (structure, dtypes, and shapes after the first dimension) is fixed by the
first call, as the released code's graph fixed it at construction. This package imports
nothing from scalable_agent_tf2.
"""
import contextlib
import ctypes
import functools
import itertools
import threading
import weakref

import numpy as np
import tensorflow as tf

from dynamic_batching import build

__all__ = ["batch_fn", "batch_fn_with_options", "BatchedFunction", "BuildError"]

BuildError = build.BuildError

# Compiled on first import, cached afterwards (see build.py). The same library also exports
# plain C functions for eager callers (DynamicBatchingCompute), reached through ctypes.
_ops = tf.load_op_library(build.library_path())
_direct = ctypes.CDLL(build.library_path())
_direct.DynamicBatchingAcquire.argtypes = [ctypes.c_char_p]
_direct.DynamicBatchingAcquire.restype = ctypes.c_void_p
_direct.DynamicBatchingRelease.argtypes = [ctypes.c_void_p]
_direct.DynamicBatchingRelease.restype = None
_direct.DynamicBatchingCompute.restype = ctypes.c_int
_ERROR_MESSAGE_CAPACITY = 4096
# TensorFlow error codes (tf.errors.*) and their exception classes, for the C entry point.
_ERROR_CLASSES = {
    tf.errors.CANCELLED: tf.errors.CancelledError,
    tf.errors.UNKNOWN: tf.errors.UnknownError,
    tf.errors.INVALID_ARGUMENT: tf.errors.InvalidArgumentError,
    tf.errors.DEADLINE_EXCEEDED: tf.errors.DeadlineExceededError,
    tf.errors.NOT_FOUND: tf.errors.NotFoundError,
    tf.errors.ALREADY_EXISTS: tf.errors.AlreadyExistsError,
    tf.errors.PERMISSION_DENIED: tf.errors.PermissionDeniedError,
    tf.errors.RESOURCE_EXHAUSTED: tf.errors.ResourceExhaustedError,
    tf.errors.FAILED_PRECONDITION: tf.errors.FailedPreconditionError,
    tf.errors.ABORTED: tf.errors.AbortedError,
    tf.errors.OUT_OF_RANGE: tf.errors.OutOfRangeError,
    tf.errors.UNIMPLEMENTED: tf.errors.UnimplementedError,
    tf.errors.INTERNAL: tf.errors.InternalError,
    tf.errors.UNAVAILABLE: tf.errors.UnavailableError,
    tf.errors.DATA_LOSS: tf.errors.DataLossError,
    tf.errors.UNAUTHENTICATED: tf.errors.UnauthenticatedError,
}

# Where the batcher's ops run: batcher.cc has CPU kernels only. Placed there explicitly, so a
# caller or a serving loop on a GPU machine never asks for a GPU kernel, and the rows stay in
# host memory: a batch goes to the computation's device once (one host-to-device copy of the
# inputs) and its outputs come back once (one copy), whatever the number of callers.
BATCHER_DEVICE = "/device:CPU:0"
# How long close() waits for a serving thread that is in the middle of a computation.
_JOIN_TIMEOUT_S = 30.0
_names = itertools.count()


def batch_fn(f):
  """Batches calls to `f` with the released code's default options (see batch_fn_with_options)."""
  return batch_fn_with_options()(f)


def batch_fn_with_options(minimum_batch_size=1, maximum_batch_size=1024, timeout_ms=100, *,
                          allow_groups=False, device=None, num_threads=1):
  """Returns a decorator that batches calls to a function of (nested) tensors.

  The decorated function `f` takes and returns (nested structures of) tensors whose first
  dimension is the batch. Callers pass examples with a first dimension of 1 and receive their
  own row of every output, also with a first dimension of 1 (with `allow_groups`: N rows in,
  the same N rows out). It may be called from many Python threads at once, eagerly or inside
  a tf.function.

  Args:
    minimum_batch_size: a batch is formed as soon as this many rows wait (one per caller
      unless `allow_groups`)...
    maximum_batch_size: ...and holds at most this many rows;
    timeout_ms: ...or once the oldest waiting row has waited this long (if fewer than
      `minimum_batch_size` wait). None: no timeout, a batch waits for `minimum_batch_size`
      rows (the released code's meaning of None; there, 0 meant no timeout too, here 0 hands
      out whatever waits at once).
    allow_groups: False (the released code's contract): every call carries exactly one row.
      True: a call may carry a group of N >= 1 rows (the same N for all its inputs) and gets
      its N rows back; a group that does not fit in a batch is split across batches (see
      the module docstring), so groups larger than `maximum_batch_size` work too.
    device: if given (e.g. '/GPU:0'), the batched computation runs on this device (in the
      paper, the learner's GPU).
    num_threads: serving threads; more than one lets batches overlap (their computations
      may then finish out of order, which the op handles).

  Returns:
    A decorator turning `f` into a BatchedFunction.
  """
  def decorator(f):
    return BatchedFunction(f, minimum_batch_size=minimum_batch_size,
                           maximum_batch_size=maximum_batch_size, timeout_ms=timeout_ms,
                           allow_groups=allow_groups, device=device, num_threads=num_threads)
  return decorator


class BatchedFunction:
  """A function whose calls are batched; see batch_fn_with_options."""

  def __init__(self, f, minimum_batch_size=1, maximum_batch_size=1024, timeout_ms=100,
               allow_groups=False, device=None, num_threads=1):
    if not 1 <= minimum_batch_size <= maximum_batch_size:
      raise ValueError(f"Need 1 <= minimum_batch_size <= maximum_batch_size, got "
                       f"{minimum_batch_size} and {maximum_batch_size}.")
    if timeout_ms is not None and timeout_ms < 0:
      raise ValueError(f"timeout_ms must be >= 0, or None for no timeout; got {timeout_ms}.")
    if not isinstance(allow_groups, bool):
      raise TypeError(f"allow_groups must be True or False, got {allow_groups!r}.")
    if num_threads < 1:
      raise ValueError(f"num_threads must be >= 1, got {num_threads}.")
    functools.update_wrapper(self, f, updated=())
    self._f = f
    self._options = dict(minimum_batch_size=int(minimum_batch_size),
                         maximum_batch_size=int(maximum_batch_size),
                         timeout_ms=None if timeout_ms is None else int(timeout_ms),
                         allow_groups=allow_groups, device=device,
                         num_threads=int(num_threads))
    self._lock = threading.Lock()
    self._server = None  # Created by the first call, which fixes the input signature.
    self._closed = False

  def __call__(self, *args, **kwargs):
    inputs = (args, kwargs)
    flat_inputs = tf.nest.flatten(inputs)
    server = self._server or self._start(inputs, flat_inputs)
    server.check_structure(inputs, flat_inputs)
    if tf.executing_eagerly():
      flat_outputs = server.call_directly(flat_inputs)
      if flat_outputs is None:  # Not eligible: the op runs the call, or explains why not.
        with tf.device(BATCHER_DEVICE):
          flat_outputs = [t.numpy() for t in _ops.batcher_compute(
              server.handle, flat_inputs, Tout=server.output_dtypes)]
      return server.pack_outputs(flat_outputs)
    # Inside a tf.function: the BatcherCompute op. Static shapes are checked once per trace;
    # the op checks every call again at run time.
    flat_inputs = [tf.convert_to_tensor(x) for x in flat_inputs]
    server.check_signature(flat_inputs)
    with tf.device(BATCHER_DEVICE):
      flat_outputs = _ops.batcher_compute(server.handle, flat_inputs,
                                          Tout=server.output_dtypes)
    for output, shape in zip(flat_outputs, server.output_shapes(flat_inputs)):
      output.set_shape(shape)
    return tf.nest.pack_sequence_as(server.output_structure, flat_outputs)

  def placement(self):
    """Where the traced ops run (_Server.placement); None before the first call."""
    server = self._server
    return None if server is None else server.placement()

  def close(self):
    """Fails pending callers with CancelledError and stops the serving threads. Idempotent."""
    with self._lock:
      self._closed = True
      server = self._server
    if server is not None:
      server.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()

  @property
  def closed(self):
    return self._closed

  def _start(self, inputs, flat_inputs):
    with self._lock:
      if self._closed:
        raise tf.errors.CancelledError(None, None, "The batched function is closed.")
      if self._server is None:
        server = _Server(self._f, inputs, flat_inputs, **self._options)
        self._server = server
        # Closes the batcher when this object goes away, or at interpreter exit, whichever
        # comes first; the server holds no reference back to `self`.
        weakref.finalize(self, server.close, destroy=True)
      return self._server


class _Server:
  """The batcher resource, the traced computation and its serving threads."""

  def __init__(self, f, inputs, flat_inputs, minimum_batch_size, maximum_batch_size,
               timeout_ms, allow_groups, device, num_threads):
    flat_inputs = [tf.convert_to_tensor(x) for x in flat_inputs]
    self._structure = inputs
    self._input_dtypes = [t.dtype for t in flat_inputs]
    # The batch dimension is left open; the rest of each shape is fixed by the first call.
    self._input_specs = [tf.TensorSpec([None] + t.shape[1:].as_list(), t.dtype)
                         for t in flat_inputs]
    self._row_shapes = [spec.shape[1:] for spec in self._input_specs]
    self._allow_groups = allow_groups
    self._close_lock = threading.Lock()
    self._closed = False
    self._destroyed = False

    def computation(*batched_inputs):
      args, kwargs = tf.nest.pack_sequence_as(inputs, list(batched_inputs))
      # Inside the traced body, so that the device sticks to every op of `f`.
      with _device_scope(device):
        return f(*args, **kwargs)

    # Everything below is eager even when the first call happens inside a tf.function trace.
    with tf.init_scope():
      # Traced here, in the first caller's thread, so that an exception raised while tracing
      # `f` reaches that caller directly (and every later caller, which retraces).
      self._computation = tf.function(computation).get_concrete_function(*self._input_specs)
      outputs = self._computation.structured_outputs
      flat_outputs = tf.nest.flatten(outputs)
      if not flat_outputs or not all(isinstance(t, tf.Tensor) for t in flat_outputs):
        raise TypeError(f"A batched function must return a (nested) structure of at least "
                        f"one tensor, got {outputs!r}.")
      self.output_structure = outputs
      self.pack_outputs = _packer(outputs)
      self.output_dtypes = [t.dtype for t in flat_outputs]
      # Each output's shape after its batch dimension (None: not even the rank is known).
      self._output_row_shapes = [t.shape[1:] if t.shape.rank else None for t in flat_outputs]
      self._one_row_output_shapes = [
          tf.TensorShape(None) if row_shape is None else
          tf.TensorShape([1]).concatenate(row_shape) for row_shape in self._output_row_shapes]
      shared_name = f"dynamic_batching_{next(_names)}"
      with tf.device(BATCHER_DEVICE):
        self.handle = _ops.batcher(
            minimum_batch_size=minimum_batch_size, maximum_batch_size=maximum_batch_size,
            timeout_ms=-1 if timeout_ms is None else timeout_ms, allow_groups=allow_groups,
            input_dtypes=self._input_dtypes, input_row_shapes=self._row_shapes,
            shared_name=shared_name)
    self._direct_call = None
    if all(row_shape is not None for row_shape in self._output_row_shapes):
      self._direct_call = _DirectCall.create(
          shared_name, flat_inputs, self.output_dtypes, self._output_row_shapes, allow_groups)
    self._serve_forever = self._serving_loop()
    self._threads = [
        threading.Thread(target=_serve, args=(self.handle, self._serve_forever),
                         name=f"dynamic_batching_server_{i}", daemon=True)
        for i in range(num_threads)]
    for thread in self._threads:
      thread.start()

  def _serving_loop(self):
    """A tf.function that serves batches until the batcher closes (then it raises).

    The whole loop runs inside TensorFlow: the serving Python thread makes one call and
    releases the GIL for good. A Python loop making three eager calls per batch would need
    the GIL back three times per batch, and with dozens of busy actor threads each wait costs
    up to the interpreter's switch interval (5 ms): measured, that made the batcher slower
    than a plain Python queue (benchmarks/RESULTS.md, "Dynamic batching").
    """
    handle, computation, specs = self.handle, self._computation, self._input_specs
    input_dtypes = self._input_dtypes

    @tf.function
    def serve_forever():
      def serve_one_batch(count):
        # The batcher's ops and the loop's counter on the CPU; the computation where its
        # `device` (or, without one, TensorFlow) puts it: it is outside these scopes.
        with tf.device(BATCHER_DEVICE), tf.control_dependencies([count]):
          computation_id, batched_inputs = _ops.batcher_get_inputs(handle, Tin=input_dtypes)
        for tensor, spec in zip(batched_inputs, specs):
          tensor.set_shape(spec.shape)
        outputs = computation(*batched_inputs)
        with tf.device(BATCHER_DEVICE):
          handed_back = _ops.batcher_set_outputs(handle, computation_id,
                                                 tf.nest.flatten(outputs))
          with tf.control_dependencies([handed_back]):
            return count + 1
      # Ends only with an error: CancelledError from close(), or the error that closed it.
      with tf.device(BATCHER_DEVICE):
        start = tf.constant(0, tf.int64)
      tf.while_loop(lambda count: tf.constant(True), serve_one_batch, [start],
                    parallel_iterations=1)

    return serve_forever

  def placement(self):
    """{"batcher": devices of the batcher's ops in the serving loop, "computation": devices
    of the computation's ops} as traced ("" where TensorFlow chooses at run time)."""
    loop = self._serve_forever.get_concrete_function().graph.as_graph_def()
    nodes = list(loop.node) + [node for function in loop.library.function
                               for node in function.node_def]
    batcher = {node.device for node in nodes if node.op.startswith("Batcher")}
    # Inputs, outputs and variable reads (which run where their variable lives) have none.
    computation = {op.device for op in self._computation.graph.get_operations()
                   if op.type not in ("Placeholder", "Identity", "NoOp", "ReadVariableOp")}
    return dict(batcher=batcher, computation=computation)

  def output_shapes(self, flat_inputs):
    """The static shapes of one call's outputs inside a tf.function: [rows] + row shape."""
    if not self._allow_groups:
      return self._one_row_output_shapes
    rows = flat_inputs[0].shape[:1] if flat_inputs[0].shape.rank else tf.TensorShape([None])
    return [tf.TensorShape(None) if row_shape is None else rows.concatenate(row_shape)
            for row_shape in self._output_row_shapes]

  def call_directly(self, flat_inputs):
    """Runs one eager call through the C entry point; None if it is not eligible."""
    if self._direct_call is None:
      return None
    return self._direct_call(flat_inputs)

  def check_structure(self, inputs, flat_inputs):
    """Rejects a call whose number of inputs differs from the first call's."""
    if len(flat_inputs) != len(self._input_dtypes):
      tf.nest.assert_same_structure(self._structure, inputs)  # Raises, naming the difference.
      raise ValueError(f"This call passes {len(flat_inputs)} inputs but the batched function "
                       f"takes {len(self._input_dtypes)}.")

  def check_signature(self, flat_inputs):
    """Rejects (at trace time) a call that does not match the first call's dtypes and shapes;
    the op makes the same check on every call at run time."""
    for index, (tensor, dtype, row_shape) in enumerate(
        zip(flat_inputs, self._input_dtypes, self._row_shapes)):
      if tensor.dtype != dtype or not row_shape.is_compatible_with(tensor.shape[1:]):
        raise ValueError(
            f"Input {index} of this call is {tensor.dtype.name} {tensor.shape} but the batched "
            f"function was first called with {dtype.name} {'[N]' if self._allow_groups else '[1]'}"
            f" + {row_shape}: every call must "
            f"pass the same dtypes, and the same shapes after the first (batch) dimension.")

  def close(self, destroy=False):
    # The finalizer can run in any thread at any moment, including while some other
    # tf.function is being traced: init_scope runs these ops eagerly instead of adding them
    # to that graph (where XLA, for one, cannot compile DestroyResourceOp).
    with self._close_lock, tf.init_scope():
      if not self._closed:
        self._closed = True
        _ops.batcher_close(self.handle, 0, "")
        for thread in self._threads:
          if thread is not threading.current_thread():
            thread.join(_JOIN_TIMEOUT_S)
      if destroy and not self._destroyed:
        self._destroyed = True
        tf.raw_ops.DestroyResourceOp(resource=self.handle, ignore_lookup_error=True)


class _NotPackable(Exception):
  """A structure _packer leaves to tf.nest."""


def _packer(structure):
  """A function that packs a flat list into `structure`, like tf.nest.pack_sequence_as.

  Built once per batched function: tf.nest.pack_sequence_as re-inspects the structure on
  every call (about 100 us for an agent's outputs here), GIL time that every eager caller
  pays. Handles tuples, namedtuples, lists and dicts (keys in sorted order, as tf.nest);
  any other structure falls back to tf.nest.
  """
  def build(node):
    """A function from an iterator of leaves to `node` rebuilt from them."""
    if isinstance(node, dict) and type(node) is dict:  # pylint: disable=unidiomatic-typecheck
      keys = sorted(node)
      children = [build(node[key]) for key in keys]
      return lambda leaves: {key: child(leaves) for key, child in zip(keys, children)}
    if isinstance(node, tuple) and hasattr(type(node), "_fields"):  # A namedtuple.
      children, node_type = [build(child) for child in node], type(node)
      return lambda leaves: node_type(*[child(leaves) for child in children])
    if type(node) in (list, tuple):
      children, node_type = [build(child) for child in node], type(node)
      return lambda leaves: node_type([child(leaves) for child in children])
    if tf.nest.is_nested(node):
      raise _NotPackable()
    return next

  try:
    pack = build(structure)
  except _NotPackable:
    return lambda flat: tf.nest.pack_sequence_as(structure, flat)
  return lambda flat: pack(iter(flat))


def _device_scope(device):
  return tf.device(device) if device is not None else contextlib.nullcontext()


def _serve(handle, serving_loop):
  """A serving thread. Holds no reference to the BatchedFunction, so dropping that closes
  the batcher (weakref finalizer), which ends this thread."""
  try:
    serving_loop()
  except tf.errors.OpError as error:
    # CancelledError after close() (the batcher is already closed: no effect), or an error
    # of the batched computation; keeping its class (e.g. InvalidArgumentError) for callers.
    _close_with_error(handle, error.error_code, error.message)
  except Exception as error:  # pylint: disable=broad-except
    _close_with_error(handle, tf.errors.UNKNOWN,
                      f"The batched function raised {type(error).__name__}: {error}")


def _close_with_error(handle, code, message):
  try:
    _ops.batcher_close(handle, int(code), message)
  except tf.errors.OpError:
    pass  # The batcher was destroyed meanwhile: nobody is left to tell.



class _DirectCall:
  """An eager call without an eager op: numpy buffers straight into the batcher.

  Every eager TensorFlow op costs a few hundred microseconds of GIL time once dozens of
  threads contend (TensorFlow 2.21 runs each eager op as a function), which made the batcher
  slower than a plain Python queue with 32-64 actor threads (benchmarks/RESULTS.md,
  "Dynamic batching").
  Here a call costs a few numpy attribute reads and one ctypes call, which releases the GIL
  while it waits. Eligible: numeric inputs and outputs whose shapes after the batch dimension
  are fully known. A call whose inputs do not match the first call's dtypes and shapes
  exactly goes through the op instead, which explains the mismatch.
  """

  def __init__(self, pointer, flat_inputs, output_dtypes, output_row_shapes, allow_groups):
    self._pointer = pointer
    self._release = _direct.DynamicBatchingRelease  # Still reachable at interpreter exit.
    self._allow_groups = allow_groups
    self._input_dtypes = [t.dtype.as_numpy_dtype for t in flat_inputs]
    self._input_row_shapes = [tuple(t.shape[1:].as_list()) for t in flat_inputs]
    self._output_dtypes = [dtype.as_numpy_dtype for dtype in output_dtypes]
    self._output_row_shapes = [tuple(shape.as_list()) for shape in output_row_shapes]
    num_inputs, num_outputs = len(flat_inputs), len(output_dtypes)
    dims = [d for shape in self._input_row_shapes for d in shape]
    self._input_arguments = (
        ctypes.c_int(num_inputs),
        (ctypes.c_int * num_inputs)(*[t.dtype.as_datatype_enum for t in flat_inputs]),
        (ctypes.c_int * num_inputs)(*[len(shape) for shape in self._input_row_shapes]),
        (ctypes.c_int64 * max(1, len(dims)))(*dims))
    self._output_arguments = (
        ctypes.c_int(num_outputs),
        (ctypes.c_int * num_outputs)(*[dtype.as_datatype_enum for dtype in output_dtypes]),
        (ctypes.c_int64 * num_outputs)(*[
            int(np.prod(shape)) * np.dtype(dtype).itemsize
            for shape, dtype in zip(self._output_row_shapes, self._output_dtypes)]))
    self._input_pointers = ctypes.c_void_p * num_inputs
    self._output_pointers = ctypes.c_void_p * num_outputs
    self._one_row = ctypes.c_int64(1)

  @classmethod
  def create(cls, shared_name, flat_inputs, output_dtypes, output_row_shapes, allow_groups):
    """A _DirectCall for the batcher `shared_name`, or None if its signature is not eligible."""
    def plain(dtype):
      return dtype.is_numpy_compatible and dtype not in (tf.string, tf.resource, tf.variant)
    if not all(plain(t.dtype) and t.shape[1:].is_fully_defined() for t in flat_inputs):
      return None
    if not all(plain(dtype) for dtype in output_dtypes) or not all(
        shape.is_fully_defined() for shape in output_row_shapes):
      return None
    pointer = _direct.DynamicBatchingAcquire(("/" + shared_name).encode())
    if not pointer:
      return None
    return cls(pointer, flat_inputs, output_dtypes, output_row_shapes, allow_groups)

  def __call__(self, flat_inputs):
    """The outputs (numpy arrays) of one call, or None if the inputs are not eligible."""
    arrays = []
    rows = (1,)  # The call's leading dimension; a group's is set by its first input.
    for value, dtype, row_shape in zip(flat_inputs, self._input_dtypes, self._input_row_shapes):
      # pylint: disable-next=unidiomatic-typecheck
      array = value if type(value) is np.ndarray else np.asarray(value)
      shape = array.shape
      if self._allow_groups and not arrays:
        rows = shape[:1]
      if (array.dtype != dtype or shape[:1] != rows or shape[1:] != row_shape or
          not array.flags.c_contiguous):
        return None  # The op explains what is wrong (or runs the call, e.g. float64 lists).
      arrays.append(array)
    outputs = [np.empty(rows + shape, dtype)
               for shape, dtype in zip(self._output_row_shapes, self._output_dtypes)]
    message = ctypes.create_string_buffer(_ERROR_MESSAGE_CAPACITY)
    code = _direct.DynamicBatchingCompute(
        ctypes.c_void_p(self._pointer),
        ctypes.c_int64(rows[0]) if self._allow_groups else self._one_row,
        *self._input_arguments,
        self._input_pointers(*[a.__array_interface__["data"][0] for a in arrays]),
        *self._output_arguments,
        self._output_pointers(*[o.__array_interface__["data"][0] for o in outputs]),
        message, ctypes.c_int(_ERROR_MESSAGE_CAPACITY))
    if code != 0:
      raise _ERROR_CLASSES.get(code, tf.errors.UnknownError)(
          None, None, message.value.decode("utf-8", "replace"))
    return outputs

  def __del__(self):
    # Runs only once nothing can call this object any more: callers hold the BatchedFunction,
    # which holds the server, which holds this.
    if getattr(self, "_pointer", None):
      self._release(self._pointer)
      self._pointer = None
