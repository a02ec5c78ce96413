"""Random batches in the shapes the agent and the learner expect, fixed by a seed.

The tests feed them to the networks and the learner; the learner benchmarks
(benchmarks/speed/learner_step.py, stage_costs.py, throughput_gpu.py) time updates on them and
benchmarks/tools/update_numbers.py records the numbers of updates on them. They are built from
the package's public pieces (a network config, the records) and the package never uses them:
they are the tests' own, which the benchmarks, run from a checkout, borrow (tests import no
benchmark).
"""
import numpy as np

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.structures import AgentOutput
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

_INSTRUCTIONS = ("pick the red hat", "go to the blue room", "")


def random_env_outputs(config, leading_shape, seed=0, done_probability=0.1):
  """EnvOutput of numpy arrays [*leading_shape, ...] for a networks.NetworkConfig.

  Frames are uniform uint8, rewards standard normal, instructions hashed from a few phrases
  (zero-width when the network takes no instruction).
  """
  rng = np.random.default_rng(seed)
  leading_shape = tuple(leading_shape)
  if config.use_instruction:
    instructions = language.hash_instructions(rng.choice(_INSTRUCTIONS, size=leading_shape))
  else:
    instructions = np.zeros(leading_shape + (0,), np.int32)
  return EnvOutput(
      reward=rng.normal(size=leading_shape).astype(np.float32),
      done=rng.random(leading_shape) < done_probability,
      observation=Observation(
          frame=rng.integers(0, 256, leading_shape + tuple(config.frame_shape), np.uint8),
          instruction=instructions),
      episode_return=np.zeros(leading_shape, np.float32),
      episode_step=np.zeros(leading_shape, np.int32),
      truncated=np.zeros(leading_shape, bool))  # Nothing truncated: the numbers stay.


def random_learner_batch(config, unroll_length, batch_size, seed=0):
  """(env_outputs, agent_outputs) of a random learner batch [T+1, B] with an off-policy
  behaviour policy (standard normal logits, uniformly random actions)."""
  leading_shape = (unroll_length + 1, batch_size)
  rng = np.random.default_rng(seed + 1)
  agent_outputs = AgentOutput(
      action=rng.integers(0, config.num_actions, leading_shape).astype(np.int32),
      policy_params=rng.normal(size=leading_shape + (config.num_actions,)).astype(np.float32),
      baseline=rng.normal(size=leading_shape).astype(np.float32))
  return random_env_outputs(config, leading_shape, seed), agent_outputs
