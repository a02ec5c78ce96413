"""RMSProp with TensorFlow 1 semantics, and the paper's linear learning-rate schedule.

IMPALA was tuned with tf.compat.v1.train.RMSPropOptimizer (released code, experiment.py;
paper Tables D.1, D.3, G.1). Its update differs from Keras 3's RMSprop in two ways that
matter at the paper's epsilon of 0.1 (DMLab) and 0.01 (Atari):
  * the mean-square accumulator starts at ONES (Keras: zeros), and
  * epsilon is added INSIDE the square root (Keras: outside).
Per variable:  ms  <- decay * ms + (1 - decay) * g^2
               mom <- momentum * mom + lr * g / sqrt(ms + epsilon)
               var <- var - mom
"""
import tensorflow as tf


def linear_decay(initial_learning_rate, num_env_frames, total_environment_frames):
  """The paper's learning rate, annealed linearly to 0 over training (Tables D.3, G.1).

  Same as the released code's tf.train.polynomial_decay(lr, frames, total, 0) with power 1:
  lr * (1 - min(frames, total) / total).

  Args:
    initial_learning_rate: float scalar.
    num_env_frames: int64 or float scalar, environment frames consumed before this update.
    total_environment_frames: the training budget in environment frames.

  Returns:
    float32 scalar.
  """
  frames = tf.cast(num_env_frames, tf.float64)
  total = tf.cast(total_environment_frames, tf.float64)
  remaining = 1.0 - tf.minimum(frames, total) / total
  return tf.cast(initial_learning_rate, tf.float32) * tf.cast(remaining, tf.float32)


class RMSProp(tf.Module):
  """tf.compat.v1.train.RMSPropOptimizer's update as a checkpointable tf.Module.

  Slots are created for the given variables at construction, so the optimizer state is part
  of any tf.train.Checkpoint that tracks this module, and `apply_gradients` is safe to call
  inside a tf.function compiled with XLA.
  """

  def __init__(self, variables, decay=0.99, momentum=0.0, epsilon=0.1,
               initial_mean_square=1.0, name="rmsprop"):
    """Args:
      variables: the trainable tf.Variables this optimizer updates, in a fixed order.
      decay: discount of the mean-square accumulator (0.99: Table D.3 / released code).
      momentum: 0 (Table D.3: "RMSProp momentum 0").
      epsilon: added inside the square root (DMLab 0.1: released code; Atari 0.01:
        Table G.1).
      initial_mean_square: where the mean-square accumulator starts: 1 in TF1 (the
        paper's optimizer). With the small gradients of these networks (per-parameter RMS
        ~0.02 under Atari's global-norm clip) the accumulator needs ~log(0.01)/log(0.99) =
        460 updates to decay to epsilon's scale, so the first ~1M frames (at 2,560 frames
        per update) take steps 10-50x smaller than later ones; irrelevant over the paper's
        budgets. 0 starts at full step size (as PyTorch's and Keras' RMSprop do).
      name: module name.
    """
    if not initial_mean_square >= 0:
      raise ValueError(f"initial_mean_square must be >= 0, got {initial_mean_square}.")
    super().__init__(name=name)
    self._variables = tuple(variables)
    self.decay = decay
    self.momentum = momentum
    with self.name_scope:
      # A variable, not a constant, so population-based training (Appendix F) can change it
      # without retracing the compiled update, and a checkpoint carries it.
      self.epsilon = tf.Variable(epsilon, dtype=tf.float32, trainable=False, name="epsilon")
      # TF1 initialises the mean square to ones (rmsprop.py, _create_slots).
      self.mean_squares = [
          tf.Variable(tf.fill(tf.shape(v), tf.cast(initial_mean_square, v.dtype)),
                      trainable=False, name=_slot_name(v, "rms"))
          for v in self._variables]
      self.moments = [
          tf.Variable(tf.zeros_like(v), trainable=False, name=_slot_name(v, "momentum"))
          for v in self._variables]
      self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")

  def apply_gradients(self, gradients, learning_rate):
    """One update of every variable.

    Args:
      gradients: a sequence of tensors, one per variable given at construction, same order.
      learning_rate: float32 scalar for this step.
    """
    if len(gradients) != len(self._variables):
      raise ValueError(f"Got {len(gradients)} gradients for {len(self._variables)} "
                       "variables.")
    learning_rate = tf.cast(learning_rate, tf.float32)
    for var, grad, ms, mom in zip(self._variables, gradients, self.mean_squares,
                                  self.moments):
      if grad is None:
        raise ValueError(f"No gradient for variable {var.name}.")
      ms.assign(self.decay * ms + (1.0 - self.decay) * tf.square(grad))
      mom.assign(self.momentum * mom + learning_rate * grad * tf.math.rsqrt(ms + self.epsilon))
      var.assign_sub(mom)
    self.iterations.assign_add(1)


def _slot_name(variable, slot):
  return variable.name.split(":")[0].replace("/", "_") + "_" + slot
