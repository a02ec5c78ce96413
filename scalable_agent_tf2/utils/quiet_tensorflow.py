"""Imports TensorFlow without its start-up notices on a CPU machine.

Importing TensorFlow 2.21 and finding its devices prints, whatever TF_CPP_MIN_LOG_LEVEL says
(they are written before TensorFlow's logging reads it): a oneDNN notice twice, "All log
messages before absl::InitializeLog() ..." and, without a GPU, "failed call to cuInit ...".
None of them is actionable on a CPU machine. A fourth comes later, at the first graph that
transposes a non-float tensor on a CPU without AVX-512 ("oneDNN supports DT_BOOL only on
platforms with AVX-512. Falling back to the default Eigen-based implementation"): TensorFlow
prints it once per process, then never again. `import_tensorflow()` catches the process's
stderr (file descriptor 2, where C++ writes) while TensorFlow loads, lists its devices and runs
one such tiny graph (so that the once-per-process notice is spent there), and passes on every
line that is not one of those notices.

Set SCALABLE_AGENT_TF_STARTUP_LOGS=1, or TF_CPP_MIN_LOG_LEVEL to 0 or 1 yourself, to see them.

`without_log_messages` drops TensorFlow's Python log messages that only repeat an error the
caller reports itself (a failed checkpoint restore's "unrestored values": runfiles/checkpoints.py).
"""
import contextlib
import logging
import os
import sys
import tempfile

SHOW_VARIABLE = "SCALABLE_AGENT_TF_STARTUP_LOGS"

# Substrings of the start-up lines that say nothing a user can act on.
NOISE = (
    "oneDNN custom operations are on",
    "All log messages before absl::InitializeLog() is called",
    "failed call to cuInit",
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "computation placer already registered",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "To enable the following instructions",
    "Could not find cuda drivers on your machine",
    "TF-TRT Warning",
    "only on platforms with AVX-512. Falling back to the default Eigen-based implementation",
)


def show_startup_logs():
  """True when the user asked to see TensorFlow's start-up notices."""
  return (os.environ.get(SHOW_VARIABLE, "") not in ("", "0")
          or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") in ("0", "1"))


def filter_noise(text):
  """`text` without its noise lines (kept in order; other lines unchanged)."""
  lines = text.splitlines(keepends=True)
  return "".join(line for line in lines if not any(noise in line for noise in NOISE))


def _spend_once_per_process_notices(tf):
  """Runs the smallest graph after which oneDNN's dtype notice has been printed (a Transpose
  of a bool tensor that the graph optimizer cannot fold away; 2x1 is not a no-op)."""
  tf.function(tf.transpose)(tf.constant([[True], [False]]))


def configure_gpu_memory(gpu_memory, tf=None):
  """Applies --gpu_memory to every GPU TensorFlow sees; must run before TensorFlow's first
  op (it cannot change afterwards). Returns the number of GPUs configured (0 on a CPU).

  gpu_memory: "growth" (the default: memory taken as needed, so that DeepMind Lab's hardware
    renderer in environment processes, an evaluation or a second run can share the GPU),
    "all" (TensorFlow's own default: nearly the whole GPU at its first op), or a number of
    MiB: one logical device of that size per GPU.
  """
  if tf is None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top,redefined-outer-name
  gpus = tf.config.list_physical_devices("GPU")
  for gpu in gpus:
    if gpu_memory == "growth":
      tf.config.experimental.set_memory_growth(gpu, True)
    elif gpu_memory != "all":
      tf.config.set_logical_device_configuration(
          gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(gpu_memory))])
  return len(gpus)


def import_tensorflow(intra_op_threads=0, gpu_memory="growth"):
  """Imports TensorFlow and lists its devices (where cuInit runs); returns the module.

  intra_op_threads: TensorFlow threads per op (--intra_op_threads), set before the first op
    runs here (it cannot change afterwards); 0: TensorFlow's default.
  gpu_memory: --gpu_memory (configure_gpu_memory), applied before the first op too.
  """
  if show_startup_logs():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.list_physical_devices()
    if intra_op_threads:
      tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
    configure_gpu_memory(gpu_memory, tf)
    return tf
  sys.stderr.flush()
  saved_fd = os.dup(2)
  with tempfile.TemporaryFile(mode="w+b") as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf.config.list_physical_devices()
      if intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
      configure_gpu_memory(gpu_memory, tf)  # Before the graph below, TensorFlow's first op.
      _spend_once_per_process_notices(tf)
    finally:
      sys.stderr.flush()
      os.dup2(saved_fd, 2)
      os.close(saved_fd)
      captured.seek(0)
      remaining = filter_noise(captured.read().decode("utf-8", "replace"))
      if remaining:
        sys.stderr.write(remaining)
        sys.stderr.flush()
  return tf


class _Drop(logging.Filter):

  def __init__(self, prefixes):
    super().__init__()
    self._prefixes = tuple(prefixes)

  def filter(self, record):
    return not str(record.getMessage()).startswith(self._prefixes)


@contextlib.contextmanager
def without_log_messages(tf, prefixes):
  """TensorFlow's Python logger drops the messages that start with one of `prefixes` while
  this is active, unless TF_CPP_MIN_LOG_LEVEL=0 (debugging: every message shown)."""
  if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
    yield
    return
  logger, quiet = tf.get_logger(), _Drop(prefixes)
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)
