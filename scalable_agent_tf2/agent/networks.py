"""The agents of the paper's Figure 3, built from tf.Variables and tf.nn ops.

Plain tf.Modules, no Keras: Keras 3 layers are not tf.Modules, and plain ops keep
the learner's update a single XLA-compilable function.

    frame [H, W, C] uint8 --/255--> torso (shallow|deep|impact_cnn): 256 -----+
      (or vector [O] float32 --> mlp torso: 256; index [] int32 --> one-hot [n])
    reward --clip [-1, 1]-----------------------------------------------------+--> core
    previous action --one-hot-------------------------------------------------+   (LSTM 256
    instruction --hash 1000 buckets--> embedding 20 --> LSTM 64 (last token)--+    or none)
                                                                                   |
                                                            policy logits <-- linear --+
                                                            baseline V(x) <-- linear --+

Two APIs share the same variables:
  * acting:   `initial_state(batch_size)`, then `step(prev_action, env_output, core_state)`
              on a batch of any size, one time step;
  * learning: `unroll(prev_actions, env_outputs, core_state)` over [T+1, B], applying the
              torso to all T+1 frames at once (section 3: "folding time into the batch
              dimension") and resetting the core wherever an episode ended.

This module holds the agent, its config and its language input (hashing, encoder); the
layers (Linear, Conv2D, LSTM) are in layers.py, the torsos in torsos.py.

The observation's kind (NetworkConfig.observation_kind, torsos.torso_for_observation) picks
the torso: image frames take the paper's (Figure 3), float vectors the MLP (IMPACT section
4.3's sizes), a Discrete observation's index its one-hot; the rest of the agent (reward and
previous action inputs, core, heads) is the same for all.
"""
import collections
import dataclasses
import functools
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import layers
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration.settings import (  # --torso's choices.
    DEEP, IMPACT_CNN, SHALLOW, SHALLOW_MIN_FRAME_SIZE, TORSOS)
from scalable_agent_tf2.structures import AgentOutput

# Instruction encoder (section 5, Figure 3): words hashed into 1000 buckets, embedding 20,
# LSTM 64 (released code: tf.string_to_hash_bucket_fast(words, 1000), snt.Embed(1000, 20),
# LSTMBlockCell(64)).
INSTRUCTION_HASH_BUCKETS = 1000
INSTRUCTION_EMBEDDING_SIZE = 20
INSTRUCTION_LSTM_SIZE = 64
# Fixed instruction length so shapes stay static under XLA. The DMLab-30 README's example
# instructions ("Pick the red object in the blue room.", "Get the red hat from the blue
# room.") have 8 words; longer instructions are truncated to their first 16 words.
MAX_INSTRUCTION_WORDS = 16

CORE_LSTM_SIZE = 256  # Figure 3: "LSTM 256".
# The learner's deep torso runs in chunks of at most this many frames, each chunk's activations
# recomputed in the backward pass (chunked_torso). Not in the paper: a memory choice. DMLab,
# B=32, T=100 (benchmarks/speed/learner_memory.py): the training process's peak RSS falls from
# 8.3 GB to 1.8 GB (256 frames: 2.2 GB); the shallow torso's activations (0.4 GB) are left alone.
DEEP_TORSO_CHUNK_FRAMES = 128
PIXEL_MAX = 255.0  # uint8 pixels span [0, 255]; the torso takes them divided by it.

# Output of `unroll`: the learner's own view of the trajectory.
NetworkOutput = collections.namedtuple("NetworkOutput", "policy_logits baseline")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
  """Everything that fixes the network's shapes.

  Attributes:
    num_actions: size of the policy (DMLab: 9, Table D.2; Atari: the game's minimal set,
      or 18 for the multi-task agent, Appendix G).
    frame_shape: the shape of observation.frame: (height, width, channels) of the uint8
      frame; (O,) of a float32 vector; () of a Discrete observation's int32 index.
    torso: frames: 'shallow' (Figure 3 left), 'deep' (Figure 3 right) or 'impact_cnn' (the
      IMPACT paper's Atari network, section 4.3; 42x42 frames); vectors: 'mlp'; indices:
      'one_hot' (torsos.torso_for_observation).
    use_lstm: LSTM 256 core (DMLab) or none (Atari: "the deep network (without the LSTM)",
      section 5.3.2).
    use_instruction: whether the observation carries a language instruction (DMLab).
    torso_chunk_frames: None: DEEP_TORSO_CHUNK_FRAMES for the deep torso, else 0. 0: backprop
      keeps the torso's activations of all T x B frames (the
      deep torso's: 2 MB per 72x96 frame, 6.3 GB for B=32, T=100). N > 0: the learner's
      unroll runs the torso over chunks of at most N frames and recomputes each chunk's
      activations in the backward pass (chunked_torso): the same gradients, one chunk's
      activations in memory, one more forward pass of the torso.
    observation_kind: torsos.FRAME (uint8 [H, W, C]), torsos.VECTOR (float32 [O]) or
      torsos.INDEX (a Discrete(n) observation: int32 []).
    num_observation_values: n of a Discrete(n) observation (INDEX only): the one-hot's size.
    mlp_hidden_sizes: the MLP torso's layers (VECTOR only; IMPACT section 4.3's 256, 256).
    frame_max: the largest value of a frame's uint8 entries (FRAME only): frames reach the
      torso divided by it (to_unit_float), so they span [0, 1]. 255 for pixels; MiniGrid and
      BabyAI's image is the grid's encoding, indices of at most 10 (gym_env.frame_max).
  """
  num_actions: int
  frame_shape: Tuple[int, ...]
  torso: str = DEEP
  use_lstm: bool = True
  use_instruction: bool = True
  torso_chunk_frames: Optional[int] = None
  observation_kind: str = torsos.FRAME
  num_observation_values: Optional[int] = None
  mlp_hidden_sizes: Tuple[int, ...] = torsos.MLP_HIDDEN_SIZES
  frame_max: float = PIXEL_MAX

  @property
  def frame_dtype(self):
    """observation.frame's dtype (batch_checks.check_batch, assembly.trajectory_signature):
    uint8 frames, float32 vectors, int32 indices (environments/base.py's dtypes)."""
    return {torsos.FRAME: "uint8", torsos.VECTOR: "float32",
            torsos.INDEX: "int32"}[self.observation_kind]

  @property
  def torso_choice(self):
    """The torsos.TorsoChoice of this config (what Agent builds)."""
    if self.observation_kind == torsos.INDEX:
      shape = (self.num_observation_values,)
    else:
      shape = self.frame_shape
    return torsos.torso_for_observation(
        self.observation_kind, shape,
        self.torso if self.observation_kind == torsos.FRAME else None,
        has_instruction=self.use_instruction and self.observation_kind == torsos.FRAME,
        hidden_sizes=self.mlp_hidden_sizes)

  @property
  def action_distribution(self):
    """The policy's distributions family: categorical over num_actions (softmax of the
    logits, IMPALA section 4)."""
    return distributions.CategoricalFamily(self.num_actions)

  def __post_init__(self):
    if self.torso_chunk_frames is None:
      object.__setattr__(self, "torso_chunk_frames",
                         DEEP_TORSO_CHUNK_FRAMES if self.torso == DEEP else 0)
    if self.num_actions < 1:
      raise ValueError(f"num_actions must be positive, got {self.num_actions}.")
    if self.torso_chunk_frames < 0:
      raise ValueError(f"torso_chunk_frames must be 0 (no chunks) or positive, got "
                       f"{self.torso_chunk_frames}.")
    if self.observation_kind != torsos.FRAME:
      self._check_non_frame()
      return
    if self.torso not in TORSOS:
      raise ValueError(f"Unknown torso {self.torso!r}; expected one of {TORSOS} for frames "
                       f"({torsos.MLP!r} and {torsos.ONE_HOT!r} take observation_kind "
                       f"{torsos.VECTOR!r} and {torsos.INDEX!r}).")
    if len(self.frame_shape) != 3 or min(self.frame_shape) < 1:
      raise ValueError(f"frame_shape must be (height, width, channels), got "
                       f"{self.frame_shape}.")
    if self.torso == SHALLOW and min(self.frame_shape[:2]) < SHALLOW_MIN_FRAME_SIZE:
      raise ValueError(f"The shallow torso's VALID convolutions (Figure 3 left: 8x8/4, then "
                       f"4x4/2) need frames of at least {SHALLOW_MIN_FRAME_SIZE}x"
                       f"{SHALLOW_MIN_FRAME_SIZE}, got {self.frame_shape[:2]}: use the deep "
                       "torso (--torso=deep, SAME padding), or larger frames.")
    impact_frame = (torsos.IMPACT_CNN_FRAME_SIZE,) * 2
    if self.torso == IMPACT_CNN and tuple(self.frame_shape[:2]) != impact_frame:
      raise ValueError(f"The impact_cnn torso is the IMPACT paper's network for 42x42 frames "
                       f"(its 11x11 layer covers the whole map left), got "
                       f"{self.frame_shape[:2]}: use 42x42 frames (--width=42 --height=42).")

  def _check_non_frame(self):
    """Vectors take the MLP torso, indices the one-hot; neither carries an instruction."""
    kinds = {torsos.VECTOR: torsos.MLP, torsos.INDEX: torsos.ONE_HOT}
    if self.observation_kind not in kinds:
      raise ValueError(f"Unknown observation_kind {self.observation_kind!r}; expected one of "
                       f"{(torsos.FRAME,) + tuple(kinds)}.")
    wanted = kinds[self.observation_kind]
    if self.torso != wanted:
      raise ValueError(f"{self.observation_kind} observations take the {wanted!r} torso "
                       f"(torsos.torso_for_observation), got torso {self.torso!r}.")
    if self.use_instruction:
      raise ValueError(f"An instruction goes with image frames (Figure 3); got "
                       f"{self.observation_kind} observations.")
    if self.observation_kind == torsos.VECTOR:
      if len(self.frame_shape) != 1 or self.frame_shape[0] < 1:
        raise ValueError(f"A vector observation has frame_shape (O,), got {self.frame_shape}.")
    elif tuple(self.frame_shape) != () or not self.num_observation_values or (
        self.num_observation_values < 1):
      raise ValueError(f"A Discrete(n) observation is an index: frame_shape () and "
                       f"num_observation_values n >= 1, got {self.frame_shape} and "
                       f"{self.num_observation_values}.")
    self.torso_choice  # pylint: disable=pointless-statement  (its own checks: hidden sizes.)


def dmlab_config(torso=DEEP, num_actions=9, frame_shape=(72, 96, 3)):
  """DeepMind Lab preset: 96x72 RGB (Table D.3), 9 actions (Table D.2), LSTM, language."""
  return NetworkConfig(num_actions=num_actions, frame_shape=tuple(frame_shape), torso=torso,
                       use_lstm=True, use_instruction=True)


def atari_config(num_actions, torso=SHALLOW, frame_shape=(84, 84, 4)):
  """Atari preset: 4 stacked 84x84 grey frames, feed-forward, no language (Table G.1)."""
  return NetworkConfig(num_actions=num_actions, frame_shape=tuple(frame_shape), torso=torso,
                       use_lstm=False, use_instruction=False)


def vector_config(num_actions, observation_size, use_lstm=False,
                  hidden_sizes=torsos.MLP_HIDDEN_SIZES):
  """Discrete actions on a float32 vector [O] (e.g. gym:CartPole-v1): the MLP torso (IMPACT
  section 4.3's two tanh layers of 256), feed-forward by default: a vector of a gymnasium
  task is the full state, as MuJoCo's is for the IMPACT paper's feed-forward MLPs."""
  return NetworkConfig(num_actions=num_actions, frame_shape=(int(observation_size),),
                       torso=torsos.MLP, use_lstm=use_lstm, use_instruction=False,
                       observation_kind=torsos.VECTOR, mlp_hidden_sizes=tuple(hidden_sizes))


def index_config(num_actions, num_values, use_lstm=False):
  """Discrete actions on a Discrete(n) observation (its int32 index, e.g. gym:FrozenLake-v1):
  the one-hot [n] torso, feed-forward by default (the index is the state)."""
  return NetworkConfig(num_actions=num_actions, frame_shape=(), torso=torsos.ONE_HOT,
                       use_lstm=use_lstm, use_instruction=False,
                       observation_kind=torsos.INDEX, num_observation_values=int(num_values))


# ---------------------------------------------------------------------------------------
# The language input: instructions hashed in the actor (never inside XLA), encoded by the
# network.


@functools.lru_cache(maxsize=4096)
def _hash_instruction(instruction):
  """Word ids of one instruction: bucket + 1 per word (0 is padding), as a tuple."""
  words = instruction.split()[:MAX_INSTRUCTION_WORDS]
  if not words:
    return ()
  # Fingerprint64 of each word: the same ids in every process and on every machine
  # (unlike Python's salted hash()).
  buckets = tf.strings.to_hash_bucket_fast(words, INSTRUCTION_HASH_BUCKETS).numpy()
  return tuple(int(b) + 1 for b in buckets)


def hash_instructions(instructions):
  """Hashes instructions into padded word ids.

  Args:
    instructions: a str, or a sequence / numpy array of str (or bytes), shape [...].

  Returns:
    int32 numpy array [..., MAX_INSTRUCTION_WORDS]: the words (split on white space) of each
    instruction hashed into buckets 1..1000, zero-padded; an empty instruction is all zeros.
  """
  array = np.asarray(instructions, dtype=object)
  out = np.zeros(array.shape + (MAX_INSTRUCTION_WORDS,), dtype=np.int32)
  for index, instruction in np.ndenumerate(array):
    if isinstance(instruction, bytes):
      instruction = instruction.decode("utf-8")
    ids = _hash_instruction(str(instruction))
    out[index][:len(ids)] = ids
  return out


def empty_instructions(batch_shape):
  """int32 zeros [*batch_shape, MAX_INSTRUCTION_WORDS]: the ids of '' (no instruction)."""
  return np.zeros(tuple(batch_shape) + (MAX_INSTRUCTION_WORDS,), dtype=np.int32)


class InstructionEncoder(tf.Module):
  """Word ids -> embedding 20 -> LSTM 64; the encoding is the output at the last real word.

  An empty instruction (all padding) encodes to zeros, as in the released code.
  """

  def __init__(self, init, name="instruction_encoder"):
    super().__init__(name=name)
    with self.name_scope:
      self.embeddings = tf.Variable(
          init.truncated_normal([INSTRUCTION_HASH_BUCKETS, INSTRUCTION_EMBEDDING_SIZE]),
          name="embeddings")
      self.lstm = layers.LSTM(INSTRUCTION_EMBEDDING_SIZE, INSTRUCTION_LSTM_SIZE, init=init)

  def __call__(self, word_ids):
    """word_ids: int32 [N, MAX_INSTRUCTION_WORDS] from hash_instructions -> [N, 64]."""
    is_word = word_ids > 0
    embedded = tf.gather(self.embeddings, tf.maximum(word_ids - 1, 0))  # [N, L, 20]
    # Padding steps leave the state alone, so the final state is the last real word's.
    _, final_state = self.lstm(
        tf.transpose(embedded, [1, 0, 2]),
        self.lstm.initial_state(tf.shape(word_ids)[0]),
        keep=tf.transpose(is_word))
    return final_state.h


# ---------------------------------------------------------------------------------------
# The agent.


class Agent(tf.Module):
  """IMPALA's actor-critic network (Figure 3) with acting and learning entry points."""

  def __init__(self, config, seed=0, name="agent"):
    """Args:
      config: a NetworkConfig (see dmlab_config / atari_config).
      seed: seeds the initial weights and the action sampling.
      name: module name.
    """
    super().__init__(name=name)
    self.config = config
    init = layers.Initializer(seed)
    with self.name_scope:
      # The frame torsos are built as before this choice existed: the same module names and
      # order of variables, so old checkpoints restore and the same seed gives the same weights.
      self.torso = torsos.build_torso(config.torso_choice, init)
      torso_output_size = getattr(self.torso, "output_size", torsos.TORSO_OUTPUT_SIZE)
      core_input_size = torso_output_size + 1 + config.num_actions
      if config.use_instruction:
        self.instruction_encoder = InstructionEncoder(init=init)
        core_input_size += INSTRUCTION_LSTM_SIZE
      if config.use_lstm:
        self.core = layers.LSTM(core_input_size, CORE_LSTM_SIZE, init=init, name="core")
        core_output_size = CORE_LSTM_SIZE
      else:
        core_output_size = core_input_size
      self.policy = layers.Linear(core_output_size, config.num_actions, init=init, name="policy")
      self.baseline = layers.Linear(core_output_size, 1, init=init, name="baseline")
      self._sampler = tf.random.Generator.from_seed(seed + 1)

  def initial_state(self, batch_size):
    """The core state at the start of an episode: LSTMState of zeros [B, 256], or ()."""
    if self.config.use_lstm:
      return self.core.initial_state(batch_size)
    return ()

  def step(self, prev_action, env_output, core_state):
    """One acting step for a batch of any size B.

    Args:
      prev_action: int32 [B], the action that led to env_output.
      env_output: EnvOutput of [B, ...] tensors (frame uint8 [B, H, W, C], float32 [B, O]
        or int32 [B] by the config's observation_kind; instruction int32
        [B, MAX_INSTRUCTION_WORDS] when the config uses language).
      core_state: the state returned by the previous step, or initial_state(B).

    Returns:
      (AgentOutput(action int32 [B] sampled from the policy, policy_logits [B, A],
       baseline [B]), new core_state).
    """
    add_time = lambda t: tf.convert_to_tensor(t)[tf.newaxis]
    output, core_state = self.unroll(
        add_time(prev_action), tf.nest.map_structure(add_time, env_output), core_state)
    policy_logits, baseline = output.policy_logits[0], output.baseline[0]
    action = distributions.Categorical(policy_logits).sample(
        seed=self._sampler.make_seeds(1)[:, 0])
    return AgentOutput(action=action, policy_logits=policy_logits, baseline=baseline), core_state

  def unroll(self, prev_actions, env_outputs, core_state):
    """Runs the network over a time-major sequence.

    Args:
      prev_actions: int32 [T, B], prev_actions[t] is the action that led to env_outputs[t].
      env_outputs: EnvOutput of [T, B, ...] tensors (observation.frame [T, B, *frame_shape]
        of the config's frame_dtype); done[t] True means observation t starts a new episode,
        so the core state is reset before step t.
      core_state: the core state before step 0 (initial_state(B) or an actor's state).

    Returns:
      (NetworkOutput(policy_logits float32 [T, B, A], baseline float32 [T, B]),
       the core state after the last step).
    """
    frames = tf.convert_to_tensor(env_outputs.observation.frame)
    steps, batch = tf.shape(frames)[0], tf.shape(frames)[1]
    flat = lambda t: tf.reshape(t, tf.concat([[steps * batch], tf.shape(t)[2:]], 0))

    # Section 3: the torso runs on all T x B frames at once (chunked_torso: in chunks whose
    # activations are recomputed for the gradient; the same numbers).
    frames = flat(frames)
    chunk_frames = self.config.torso_chunk_frames
    if self.config.observation_kind != torsos.FRAME:
      torso_output = self.torso(frames)  # Vectors (already filtered) or indices: no /255.
    elif chunk_frames and (frames.shape[0] is None or frames.shape[0] > chunk_frames):
      torso_output = chunked_torso(self.torso, frames, chunk_frames, self.config.frame_max)
    else:
      torso_output = self.torso(to_unit_float(frames, self.config.frame_max))
    # The network's reward input is always clip(r, -1, 1) (released code).
    reward = tf.clip_by_value(tf.cast(flat(env_outputs.reward), tf.float32), -1.0, 1.0)
    parts = [torso_output, reward[:, tf.newaxis],
             tf.one_hot(flat(tf.cast(prev_actions, tf.int32)), self.config.num_actions)]
    if self.config.use_instruction:
      parts.append(self.instruction_encoder(
          flat(tf.cast(env_outputs.observation.instruction, tf.int32))))
    core_input = tf.concat(parts, axis=1)

    if self.config.use_lstm:
      core_input = tf.reshape(core_input, [steps, batch, core_input.shape[-1]])
      core_output, core_state = self.core(core_input, core_state,
                                          reset=tf.cast(env_outputs.done, tf.bool))
      core_output = flat(core_output)
    else:
      core_output = core_input
    policy_logits = tf.reshape(self.policy(core_output),
                               [steps, batch, self.config.num_actions])
    baseline = tf.reshape(self.baseline(core_output), [steps, batch])
    return NetworkOutput(policy_logits=policy_logits, baseline=baseline), core_state


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

