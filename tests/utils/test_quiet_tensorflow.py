"""TensorFlow's start-up notices are hidden by default and shown on request."""
import os
import subprocess
import sys

from scalable_agent_tf2.utils import quiet_tensorflow

# After the import, a graph of the kind that makes TensorFlow print its once-per-process oneDNN
# dtype notice on CPUs without AVX-512 (a Transpose of bools and one of bytes, as the learner's
# and actors' graphs contain).
_SCRIPT = ("from scalable_agent_tf2.utils import quiet_tensorflow as q; tf = q.import_tensorflow(); "
           "tf.function(tf.transpose)(tf.constant([[True, False]])); "
           "tf.function(tf.transpose)(tf.constant([[1, 2]], tf.uint8)); "
           "import sys; print('kept line', file=sys.stderr); print(tf.constant(1).numpy())")


def _stderr(**variables):
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet_tensorflow.SHOW_VARIABLE)}
  env.update(variables)
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, check=True)
  assert result.stdout.strip() == "1"
  return result.stderr


def test_filter_keeps_other_lines_in_order():
  text = ("I0000 port.cc:153] oneDNN custom operations are on. You may see ...\n"
          "real warning one\n"
          "E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n"
          "real warning two\n")
  assert quiet_tensorflow.filter_noise(text) == "real warning one\nreal warning two\n"


def test_a_cpu_start_is_quiet_and_other_output_is_kept():
  stderr = _stderr()
  assert "kept line" in stderr
  for noise in quiet_tensorflow.NOISE:
    assert noise not in stderr
  assert "oneDNN" not in stderr, stderr


def test_the_notices_show_when_asked():
  # Which notices TensorFlow prints depends on the CPU (oneDNN's on most x86 machines; on some
  # AMD ones only the CPU-feature and CUDA lines): asked for, those it prints are shown.
  stderr = _stderr(**{quiet_tensorflow.SHOW_VARIABLE: "1"})
  assert any(noise in stderr for noise in quiet_tensorflow.NOISE), stderr


def test_threads_per_op_are_set_before_the_first_op_so_training_can_keep_them():
  # experiment.py imports TensorFlow this way before training's assembly.configure_threads,
  # which raises when TensorFlow already runs with another setting.
  script = ("from scalable_agent_tf2.utils import quiet_tensorflow as q; "
            "tf = q.import_tensorflow(intra_op_threads=1); "
            "from scalable_agent_tf2.run import assembly; import types; "
            "assembly.configure_threads(types.SimpleNamespace(intra_op_threads=1)); "
            "print(tf.config.threading.get_intra_op_parallelism_threads())")
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
  assert result.stdout.strip() == "1"
