"""The language input of Figure 3's agent (section 5, the DMLab-30 levels with instructions;
MiniGrid and BabyAI's missions, gym_env.py): instructions hashed into word ids in the actor,
never inside XLA (`hash_instructions`), and encoded by the network (`InstructionEncoder`:
embedding 20, LSTM 64, the output at the last real word).

Hashing in the actor keeps strings out of the learner's compiled update and off the wire: a
trajectory carries int32 word ids [..., MAX_INSTRUCTION_WORDS], a fixed length so that shapes
stay static under XLA. The ids are Fingerprint64's, the same in every process and on every
machine. The encoder's module name (instruction_encoder) is part of every checkpoint of an
agent with language (networks.Agent).
"""
import functools

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.agent import torsos

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
      self.lstm = torsos.LSTM(INSTRUCTION_EMBEDDING_SIZE, INSTRUCTION_LSTM_SIZE, init=init)

  def __call__(self, word_ids, trim_padding=False):
    """word_ids: int32 [N, MAX_INSTRUCTION_WORDS] from hash_instructions -> [N, 64].

    trim_padding: run the LSTM up to the last word of the longest instruction only (a
    data-dependent length: not under XLA). The steps dropped are padding in every row, which
    leave the state unchanged, so the encoding is the same; MiniGrid's missions (6 words of
    16) encode 2-3x faster (benchmarks/RESULTS.md, "The learner's time on small networks").
    """
    is_word = word_ids > 0
    if trim_padding:
      positions = tf.range(1, tf.shape(word_ids)[1] + 1) * tf.cast(is_word, tf.int32)
      length = tf.maximum(tf.reduce_max(positions), 1)  # One step at least: a [0, N] scan
      word_ids, is_word = word_ids[:, :length], is_word[:, :length]  # has no final state.
    embedded = tf.gather(self.embeddings, tf.maximum(word_ids - 1, 0))  # [N, L, 20]
    # Padding steps leave the state alone, so the final state is the last real word's.
    _, final_state = self.lstm(
        tf.transpose(embedded, [1, 0, 2]),
        self.lstm.initial_state(tf.shape(word_ids)[0]),
        keep=tf.transpose(is_word))
    return final_state.h
