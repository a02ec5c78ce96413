"""The layers the agents are built from, as plain tf.Modules of tf.Variables.

No Keras (networks.py says why). Each layer's variables start from an initializer of one
seed, so one seed gives one network: `Initializer`, the released code's Sonnet 1 and TF1
defaults (Figure 3's agents), or `NormcInitializer`, RLlib's normc (the IMPACT paper's code
base, which its continuous-control networks ran with, section 4.3). The variables' attribute
paths (w, b, w_input, ...) are part of every checkpoint.
"""
import collections

import numpy as np
import tensorflow as tf

# Released code's LSTMBlockCell(forget_bias=1.0) default: added to the forget gate.
LSTM_FORGET_BIAS = 1.0

LSTMState = collections.namedtuple("LSTMState", "c h")


class Initializer:
  """Deterministic initial values from one seed (same seed, same network)."""

  def __init__(self, seed):
    self._generator = tf.random.Generator.from_seed(seed)

  def scaled_truncated_normal(self, shape, fan_in):
    # Sonnet 1's default for snt.Linear / snt.Conv2D, which the released code used:
    # truncated normal with stddev 1 / sqrt(fan_in).
    return self._generator.truncated_normal(shape, stddev=1.0 / np.sqrt(fan_in))

  def truncated_normal(self, shape):
    # Sonnet 1's snt.Embed default: unit truncated normal.
    return self._generator.truncated_normal(shape, stddev=1.0)

  def glorot_uniform(self, shape):
    # TF1 get_variable's default, used by the released code's LSTMBlockCell.
    limit = np.sqrt(6.0 / (shape[0] + shape[1]))
    return self._generator.uniform(shape, -limit, limit)

  def linear_kernel(self, shape):
    """A Linear layer's kernel [input_size, output_size] (Sonnet 1's snt.Linear)."""
    return self.scaled_truncated_normal(shape, shape[0])

  def for_hidden_layers(self):
    """The initializer of hidden Linear layers: Sonnet has one for every layer."""
    return self

  def for_output_layers(self):
    """The initializer of the heads' Linear layers: the same as the hidden layers'."""
    return self


# RLlib's fcnet (rllib/models/tf/fcnet.py), which the IMPACT paper's code base ran: normc(1.0)
# for hidden layers, normc(0.01) for the policy and value outputs.
HIDDEN_KERNEL_SCALE = 1.0
OUTPUT_KERNEL_SCALE = 0.01


class NormcInitializer:
  """RLlib's normc_initializer from one seed: N(0, 1) columns rescaled to norm `scale`.

  Hidden and output layers draw from the same generator (in the order the agent builds
  them), each with its own scale (for_hidden_layers, for_output_layers).
  """

  def __init__(self, seed):
    self._generator = tf.random.Generator.from_seed(seed)

  def normc(self, shape, scale):
    columns = self._generator.normal(shape)
    return columns * scale / tf.norm(columns, axis=0, keepdims=True)

  def for_hidden_layers(self):
    return _ScaledNormc(self, HIDDEN_KERNEL_SCALE)

  def for_output_layers(self):
    return _ScaledNormc(self, OUTPUT_KERNEL_SCALE)


class _ScaledNormc:
  """A NormcInitializer's kernels of one scale (what Linear asks for: linear_kernel)."""

  def __init__(self, normc, scale):
    self._normc = normc
    self._scale = scale

  def linear_kernel(self, shape):
    return self._normc.normc(shape, self._scale)


class Linear(tf.Module):
  """y = x W + b.  x: [N, input_size] -> [N, output_size].

  W starts as init.linear_kernel([input_size, output_size]) (Initializer's truncated normal
  or a NormcInitializer's normc), b at zeros.
  """

  def __init__(self, input_size, output_size, init, name=None):
    super().__init__(name=name)
    with self.name_scope:
      self.w = tf.Variable(init.linear_kernel([input_size, output_size]), name="w")
      self.b = tf.Variable(tf.zeros([output_size]), name="b")

  def __call__(self, x):
    return tf.matmul(x, self.w) + self.b


class Conv2D(tf.Module):
  """NHWC convolution with bias.  x: [N, H, W, C_in] -> [N, H', W', C_out]."""

  def __init__(self, in_channels, out_channels, kernel, stride, padding, init, name=None):
    super().__init__(name=name)
    self.stride = stride
    self.padding = padding
    with self.name_scope:
      self.w = tf.Variable(init.scaled_truncated_normal(
          [kernel, kernel, in_channels, out_channels], kernel * kernel * in_channels), name="w")
      self.b = tf.Variable(tf.zeros([out_channels]), name="b")

  def __call__(self, x):
    return tf.nn.conv2d(x, self.w, self.stride, self.padding) + self.b


class LSTM(tf.Module):
  """An LSTM layer over a time-major sequence, with optional per-step state resets.

  Gates (i, f, g, o) from one matmul; the forget gate gets LSTM_FORGET_BIAS as in the
  released code's LSTMBlockCell. The input projection of all steps is one matmul up front;
  only h_{t-1} W_h stays inside the (XLA-compilable) time loop.
  """

  def __init__(self, input_size, hidden_size, init, name=None):
    super().__init__(name=name)
    self.hidden_size = hidden_size
    with self.name_scope:
      # One [input + hidden, 4 * hidden] kernel as in LSTMBlockCell, stored in two parts.
      kernel = init.glorot_uniform([input_size + hidden_size, 4 * hidden_size])
      self.w_input = tf.Variable(kernel[:input_size], name="w_input")
      self.w_hidden = tf.Variable(kernel[input_size:], name="w_hidden")
      self.b = tf.Variable(tf.zeros([4 * hidden_size]), name="b")

  def initial_state(self, batch_size):
    zeros = tf.zeros([batch_size, self.hidden_size])
    return LSTMState(c=zeros, h=zeros)

  def __call__(self, inputs, state, reset=None, keep=None):
    """Runs the LSTM over time.

    Args:
      inputs: float32 [T, B, input_size].
      state: LSTMState of [B, hidden_size] before the first step.
      reset: optional bool [T, B]: where True, the state is zeroed BEFORE step t (a new
        episode starts at step t).
      keep: optional bool [T, B]: where False, step t leaves the state unchanged (padding).

    Returns:
      (outputs float32 [T, B, hidden_size], final LSTMState).
    """
    steps = tf.shape(inputs)[0]
    batch = tf.shape(inputs)[1]
    projected = tf.reshape(
        tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]), self.w_input) + self.b,
        [steps, batch, 4 * self.hidden_size])
    if reset is None:
      reset = tf.zeros([steps, batch], tf.bool)
    if keep is None:
      keep = tf.ones([steps, batch], tf.bool)

    def one_step(carry, elements):
      c, h, _ = carry
      x_projected, reset_t, keep_t = elements
      not_reset = tf.cast(~reset_t, tf.float32)[:, tf.newaxis]
      c, h = c * not_reset, h * not_reset
      i, f, g, o = tf.split(x_projected + tf.matmul(h, self.w_hidden), 4, axis=-1)
      new_c = tf.sigmoid(f + LSTM_FORGET_BIAS) * c + tf.sigmoid(i) * tf.tanh(g)
      new_h = tf.sigmoid(o) * tf.tanh(new_c)
      keep_t = keep_t[:, tf.newaxis]
      new_c = tf.where(keep_t, new_c, c)
      new_h = tf.where(keep_t, new_h, h)
      return new_c, new_h, new_h

    c, h, outputs = tf.scan(one_step, (projected, reset, keep),
                            initializer=(state.c, state.h, state.h))
    return outputs, LSTMState(c=c[-1], h=h[-1])
