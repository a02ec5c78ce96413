"""The torsos of the paper's Figure 3 and of the IMPACT paper (--torso): frames in [0, 1]
(to_unit_float) to the 256 features the agent's core and heads read.

    shallow:    Figure 3 (left), two convolutions and FC 256;
    deep:       Figure 3 (right), the 15-layer residual network;
    impact_cnn: the IMPACT paper's Atari network (section 4.3), 42x42 frames;
    mlp:        the frame flattened into the MLP below (small symbolic frames: a grid's
                encoding such as MiniGrid's 7x7 view, where convolutions built for 84x84
                pixels cost more than they give).

For the observations of other environment families (environments/families, gym_env.py):

    mlp:        float vectors [O] -> fully connected tanh layers (the IMPACT paper's MLP
                sizes, section 4.3), for gymnasium's Box (O,) observations;
    one_hot:    Discrete(n) observations (an index) -> their one-hot [n].

`torso_for_observation` chooses one from an observation's kind and shape (a pure function).
The Agent (networks.py) picks one by NetworkConfig.torso; each torso's module name
(shallow_torso, deep_torso, impact_torso, mlp_torso, one_hot_torso) is part of every
checkpoint.
"""
import collections

import tensorflow as tf

from scalable_agent_tf2.agent.layers import Conv2D
from scalable_agent_tf2.agent.layers import Linear

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

  The layers' kernels come from `init`'s hidden-layer initializer (layers.Initializer's for
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
