"""The agent's building blocks: the layers (plain tf.Modules of tf.Variables, no Keras:
networks.py says why) and the torsos of the paper's Figure 3 and of the IMPACT paper
(--torso), which take frames in [0, 1] (to_unit_float) to the features the core and heads read.

    shallow:    Figure 3 (left), two convolutions and FC 256;
    deep:       Figure 3 (right), the 15-layer residual network;
    impact_cnn: the IMPACT paper's Atari network (section 4.3), 42x42 frames;
    mlp:        fully connected tanh layers (the IMPACT paper's sizes, section 4.3) on float
                vectors [O] (gymnasium's Box (O,)), or on a small symbolic frame flattened (a
                grid's encoding such as MiniGrid's 7x7 view, where convolutions built for 84x84
                pixels cost more than they give);
    one_hot:    Discrete(n) observations (an index) -> their one-hot [n].

Each layer's variables start from an initializer of one seed, so one seed gives one network:
`Initializer`, the released code's Sonnet 1 and TF1 defaults (Figure 3's agents), or
`NormcInitializer`, RLlib's normc (the IMPACT paper's code base, which its continuous-control
networks ran with, section 4.3). `torso_for_observation` chooses a torso from an observation's
kind and shape (a pure function); the Agent (networks.py) builds it by NetworkConfig.torso.
The variables' attribute paths (w, b, w_input, ...) and each torso's module name
(shallow_torso, deep_torso, impact_torso, mlp_torso, one_hot_torso) are part of every
checkpoint.
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


PIXEL_MAX = 255.0  # uint8 pixels span [0, 255]; the torso takes them divided by it.
TORSO_OUTPUT_SIZE = 256  # Figure 3: "FC 256" after the convolutions.
# Figure 3 (right): three sections of [16, 32, 32] channels, two residual blocks each.
DEEP_SECTIONS = ((16, 2), (32, 2), (32, 2))
# The IMPACT paper's Atari network (section 4.3: "three 4x4 and one 11x11 conv layer", ReLU, on
# "a stack of four 42x42 down-sampled images"), as (channels, kernel, stride, padding): the
# default vision network of RLlib (the paper's code base) for 42x42 inputs, whose filter table
# is [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]] with SAME padding for all but the
# last layer, which is VALID and so fully connected on the 11x11 map left (RLlib
# models/visionnet.py, _get_filter_config and VisionNetwork). That is two 4x4 layers, not the
# text's three: three stride-2 4x4 layers would leave 6x6, which an 11x11 VALID layer cannot
# cover. The policy and the value heads are linear on its 256 outputs ("The critic network
# shares weights with the policy network").
IMPACT_CNN_LAYERS = ((16, 4, 2, "SAME"), (32, 4, 2, "SAME"), (256, 11, 1, "VALID"))
IMPACT_CNN_FRAME_SIZE = 42  # Section 4.3.


class ShallowTorso(tf.Module):
  """Figure 3 (left): conv 8x8/4 16ch, ReLU, conv 4x4/2 32ch, ReLU, FC 256, ReLU.

  VALID padding: on 72x96 frames it gives 17x23x16 -> 7x10x32 and the paper's 1.2M total.
  """

  def __init__(self, frame_shape, init, name="shallow_torso"):
    super().__init__(name=name)
    height, width, channels = frame_shape
    with self.name_scope:
      self.conv1 = Conv2D(channels, 16, kernel=8, stride=4, padding="VALID", init=init)
      self.conv2 = Conv2D(16, 32, kernel=4, stride=2, padding="VALID", init=init)
      height, width = _valid_size(height, 8, 4), _valid_size(width, 8, 4)
      height, width = _valid_size(height, 4, 2), _valid_size(width, 4, 2)
      self.fc = Linear(height * width * 32, TORSO_OUTPUT_SIZE, init=init)

  def __call__(self, frames):
    """frames: float32 [N, H, W, C] in [0, 1] -> [N, 256]."""
    x = tf.nn.relu(self.conv1(frames))
    x = tf.nn.relu(self.conv2(x))
    return tf.nn.relu(self.fc(tf.reshape(x, [tf.shape(x)[0], -1])))


class DeepTorso(tf.Module):
  """Figure 3 (right): the 15-layer residual network.

  Three sections of [16, 32, 32] channels, each conv 3x3/1 -> max-pool 3x3/2 (SAME) -> two
  residual blocks (ReLU, conv 3x3, ReLU, conv 3x3, + input); then ReLU, FC 256, ReLU.
  """

  def __init__(self, frame_shape, init, name="deep_torso"):
    super().__init__(name=name)
    height, width, channels = frame_shape
    self.sections = []
    with self.name_scope:
      for index, (section_channels, num_blocks) in enumerate(DEEP_SECTIONS):
        with tf.name_scope(f"section_{index}"):
          conv = Conv2D(channels, section_channels, kernel=3, stride=1, padding="SAME",
                        init=init)
          blocks = [
              (Conv2D(section_channels, section_channels, 3, 1, "SAME", init=init),
               Conv2D(section_channels, section_channels, 3, 1, "SAME", init=init))
              for _ in range(num_blocks)]
        self.sections.append((conv, blocks))
        channels = section_channels
        height, width = -(-height // 2), -(-width // 2)  # SAME pooling, stride 2.
      self.fc = Linear(height * width * channels, TORSO_OUTPUT_SIZE, init=init)

  def __call__(self, frames):
    """frames: float32 [N, H, W, C] in [0, 1] -> [N, 256]."""
    x = frames
    for conv, blocks in self.sections:
      x = tf.nn.max_pool2d(conv(x), ksize=3, strides=2, padding="SAME")
      for first, second in blocks:
        x = x + second(tf.nn.relu(first(tf.nn.relu(x))))
    x = tf.nn.relu(x)
    return tf.nn.relu(self.fc(tf.reshape(x, [tf.shape(x)[0], -1])))


class ImpactTorso(tf.Module):
  """The IMPACT paper's Atari network (section 4.3; IMPACT_CNN_LAYERS): 42x42x4 frames,
  conv 4x4/2 16ch SAME, ReLU -> 21x21x16, conv 4x4/2 32ch SAME, ReLU -> 11x11x32,
  conv 11x11/1 256ch VALID, ReLU -> 1x1x256 (a fully connected layer of 256 units).

  Two departures from RLlib's network: the weights start as the other torsos' (Sonnet 1's
  truncated normal, stddev 1/sqrt(fan_in); RLlib's tf.layers.conv2d: Glorot uniform), and the
  Agent adds the clipped reward and the previous action to the heads' input as for every torso
  (Figure 3), where RLlib's heads see the 256 units only.
  """

  def __init__(self, frame_shape, init, name="impact_torso"):
    super().__init__(name=name)
    height, width, channels = frame_shape
    self.layers = []
    with self.name_scope:
      for out_channels, kernel, stride, padding in IMPACT_CNN_LAYERS:
        self.layers.append(Conv2D(channels, out_channels, kernel, stride, padding, init=init))
        channels = out_channels
        if padding == "SAME":
          height, width = -(-height // stride), -(-width // stride)
        else:
          height, width = _valid_size(height, kernel, stride), _valid_size(width, kernel, stride)
    if (height, width, channels) != (1, 1, TORSO_OUTPUT_SIZE):
      raise ValueError(f"The impact_cnn torso needs 42x42 frames, got {frame_shape[:2]}.")

  def __call__(self, frames):
    """frames: float32 [N, 42, 42, C] in [0, 1] -> [N, 256]."""
    x = frames
    for layer in self.layers:
      x = tf.nn.relu(layer(x))
    return tf.reshape(x, [tf.shape(x)[0], TORSO_OUTPUT_SIZE])


def _valid_size(size, kernel, stride):
  """Output length of a VALID convolution."""
  return (size - kernel) // stride + 1


# The IMPACT paper's MLP (section 4.3: "two fully-connected layers of 256 units", tanh), the
# default for vector observations, with discrete or continuous actions.
MLP_HIDDEN_SIZES = (256, 256)
# torso_for_observation's kinds of observation (environments/gym_env.py's names).
FRAME, VECTOR, INDEX = "frame", "vector", "index"
MLP, ONE_HOT = "mlp", "one_hot"
FRAME_TORSOS = ("shallow", "deep", "impact_cnn", MLP)  # settings.TORSOS (not imported: no cycle).


class MlpTorso(tf.Module):
  """Fully connected tanh layers on float vectors (IMPACT section 4.3's sizes by default).

  The layers' kernels come from `init`'s hidden-layer initializer (Initializer's for
  Figure 3's agents, RLlib's normc(1.0) for the IMPACT paper's continuous-control MLPs).
  """

  def __init__(self, observation_size, init, hidden_sizes=MLP_HIDDEN_SIZES, name="mlp_torso"):
    super().__init__(name=name)
    if not hidden_sizes or min(hidden_sizes) < 1:
      raise ValueError(f"hidden_sizes must be positive layer sizes, got {hidden_sizes}.")
    self.output_size = hidden_sizes[-1]
    self.layers = []
    with self.name_scope:
      for size in hidden_sizes:
        self.layers.append(Linear(observation_size, size, init=init.for_hidden_layers()))
        observation_size = size

  def __call__(self, observations):
    """observations: float32 [N, O] (normalised by the run's filter), or frames [N, H, W, C]
    in [0, 1] (flattened to [N, H * W * C]) -> [N, hidden_sizes[-1]]."""
    x = tf.cast(observations, tf.float32)
    if x.shape.rank != 2:
      x = tf.reshape(x, [tf.shape(x)[0], -1])
    for layer in self.layers:
      x = tf.tanh(layer(x))
    return x


class OneHotTorso(tf.Module):
  """Discrete(n) observations: the index as a one-hot vector [n] (no variables)."""

  def __init__(self, num_values, name="one_hot_torso"):
    super().__init__(name=name)
    if num_values < 1:
      raise ValueError(f"A Discrete observation space has at least 1 value, got {num_values}.")
    self.num_values = self.output_size = int(num_values)

  def __call__(self, indices):
    """indices: int [N] (or [N, 1]) in [0, n) -> float32 [N, n]."""
    indices = tf.reshape(tf.cast(indices, tf.int32), [-1])
    return tf.one_hot(indices, self.num_values, dtype=tf.float32)


# The choice: which torso, its constructor's arguments besides `init`, and whether the agent
# encodes an instruction next to it (the paper's language levels, Figure 3).
TorsoChoice = collections.namedtuple("TorsoChoice", "name torso_class kwargs use_instruction")


def torso_for_observation(kind, shape, torso=None, has_instruction=False,
                          hidden_sizes=MLP_HIDDEN_SIZES):
  """The torso for an observation (a pure function: nothing is built).

  Args:
    kind: FRAME (uint8 [H, W, C]), VECTOR (float [O]) or INDEX (Discrete(n): shape (n,) here,
      the number of values).
    shape: (H, W, C), (O,) or (n,).
    torso: --torso for frames ("shallow", "deep", "impact_cnn", "mlp"; None: shallow,
      Figure 3 left); must be None for other kinds.
    has_instruction: frames with a text mission (a dict observation of an image and a
      string): the frame torso plus the paper's instruction encoder (language.py).
    hidden_sizes: the MLP's layer sizes for VECTOR and flattened frames (default IMPACT
      section 4.3's).

  Returns:
    TorsoChoice.

  Raises:
    ValueError: a kind or shape it cannot take, naming what it takes.
  """
  shape = tuple(int(n) for n in shape)
  if kind == FRAME:
    name = torso or FRAME_TORSOS[0]
    if name not in FRAME_TORSOS or len(shape) != 3:
      raise ValueError(f"Frames need a frame torso {FRAME_TORSOS} and shape (H, W, C); got "
                       f"torso {name!r}, shape {shape}.")
    if name == MLP:
      return TorsoChoice(MLP, MlpTorso, dict(observation_size=shape[0] * shape[1] * shape[2],
                                             hidden_sizes=tuple(hidden_sizes)),
                         has_instruction)
    torso_class = {"shallow": ShallowTorso, "deep": DeepTorso, "impact_cnn": ImpactTorso}[name]
    return TorsoChoice(name, torso_class, dict(frame_shape=shape), has_instruction)
  if torso is not None:
    raise ValueError(f"--torso={torso} is for image frames; {kind} observations of shape "
                     f"{shape} take the {MLP if kind == VECTOR else ONE_HOT} torso.")
  if has_instruction:
    raise ValueError(f"An instruction goes with image frames (Figure 3); got {kind} "
                     "observations.")
  if kind == VECTOR and len(shape) == 1:
    return TorsoChoice(MLP, MlpTorso, dict(observation_size=shape[0],
                                           hidden_sizes=tuple(hidden_sizes)), False)
  if kind == INDEX and len(shape) == 1:
    return TorsoChoice(ONE_HOT, OneHotTorso, dict(num_values=shape[0]), False)
  raise ValueError(f"No torso for {kind} observations of shape {shape}; torsos take "
                   f"{FRAME} [H, W, C], {VECTOR} [O] and {INDEX} (n,).")


def build_torso(choice, init, name=None):
  """The tf.Module of a TorsoChoice (OneHotTorso takes no initializer); name: the module's
  name (None: the torso's own, e.g. mlp_torso)."""
  names = {} if name is None else dict(name=name)
  if choice.torso_class is OneHotTorso:
    return OneHotTorso(**choice.kwargs, **names)
  return choice.torso_class(init=init, **choice.kwargs, **names)


def to_unit_float(frames, frame_max=PIXEL_MAX):
  """uint8 frames whose entries are at most frame_max -> float32 in [0, 1] (the torso's
  input)."""
  return tf.cast(frames, tf.float32) / frame_max


def chunked_torso(torso, frames, chunk_frames, frame_max=PIXEL_MAX):
  """torso(to_unit_float(frames, frame_max)), chunk by chunk, with a gradient that recomputes.

  Backprop through the torso over all N frames at once keeps every layer's activations of
  the N frames until the backward pass (the deep torso: 6.3 GB for N = 32 x 101 DMLab
  frames). Here the forward pass keeps only the torso's outputs; the backward pass reruns the
  torso on one chunk at a time (a sequential loop) and adds up the variables' gradients, so
  one chunk's activations live at a time. The gradients are those of the plain torso up to
  float rounding (a sum over chunks instead of one reduction over N frames). No gradient
  flows to the frames (uint8 observations).

  Args:
    torso: a torso module (torsos.py): float [n, H, W, C] -> [n, torsos.TORSO_OUTPUT_SIZE].
    frames: uint8 [N, H, W, C].
    chunk_frames: the most frames per chunk; N is split into ceil(N / chunk_frames) chunks of
      equal size (the last one padded with zero frames, whose outputs are dropped).

  Returns:
    float32 [N, torsos.TORSO_OUTPUT_SIZE].
  """
  num_frames = tf.shape(frames)[0]
  num_chunks = (num_frames + chunk_frames - 1) // chunk_frames
  chunk_size = (num_frames + num_chunks - 1) // num_chunks
  padded = tf.pad(frames, [[0, num_chunks * chunk_size - num_frames]] + [[0, 0]] * 3)
  chunks = tf.reshape(padded, tf.concat([[num_chunks, chunk_size], tf.shape(frames)[1:]], 0))
  apply_torso = lambda chunk: torso(to_unit_float(chunk, frame_max))

  @tf.custom_gradient
  def run(chunks):
    outputs = tf.map_fn(apply_torso, chunks, parallel_iterations=1,
                        fn_output_signature=tf.float32)

    def gradient(d_outputs, variables):
      def add_chunk(index, sums):
        with tf.GradientTape() as tape:
          output = apply_torso(chunks[index])
        grads = tape.gradient(output, variables, output_gradients=d_outputs[index],
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return index + 1, [total + grad for total, grad in zip(sums, grads)]
      # parallel_iterations=1: one chunk's activations at a time.
      _, sums = tf.while_loop(lambda index, _: index < num_chunks, add_chunk,
                              (tf.constant(0), [tf.zeros_like(v) for v in variables]),
                              parallel_iterations=1)
      return None, sums
    return outputs, gradient

  outputs = run(chunks)
  return tf.reshape(outputs, [-1, outputs.shape[-1]])[:num_frames]
