"""The costs of Table 1's stages, each measured alone: core-seconds per environment frame of
environment stepping, of the acting forward pass and of the learner update (their sum bounds
what the machine can do: benchmarks/speed/throughput.py)."""
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.utils import profiling
from tests import random_batches


def environment_cost(config, seconds):
  """Core-seconds per frame of one environment, random actions: for Atari vector groups, of
  one actor's group stepped in this process (ale-py's threads included); otherwise of one
  environment in its own process, as training runs it (DeepMind Lab segfaults at reset in a
  process that has TensorFlow loaded), counting that process's CPU only (the pipe's other end
  is the actor's)."""
  if config.uses_atari_groups:
    return _group_cost(config, seconds)
  env = assembly.start_environment(assembly.default_environment_constructor(config),
                                   config.levels[0], 0)
  try:
    rng = np.random.default_rng(0)
    env.initial()
    steps = 0
    start_cpu, deadline = profiling.process_cpu_seconds(env.pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
      env.step(int(rng.integers(env.spec.num_actions)))
      steps += 1
    cpu = profiling.process_cpu_seconds(env.pid) - start_cpu
  finally:
    env.close()
  return cpu / (steps * config.num_action_repeats)


def start_group(config, index):
  """Actor `index`'s group (Atari's vector group; MuJoCo's list of tasks), as training starts
  it (assembly.group_factory)."""
  size = config.envs_per_actor
  return assembly.group_factory(config, assembly.default_environment_constructor(config),
                                config.levels[index % len(config.levels)],
                                lambda attempt: list(range(index * size, (index + 1) * size)))(0)


def _group_cost(config, seconds):
  group = start_group(config, 0)
  rng = np.random.default_rng(0)
  group.initial()
  steps = 0
  start_cpu, deadline = time.process_time(), time.monotonic() + seconds
  while time.monotonic() < deadline:
    group.step(rng.integers(group.spec.num_actions, size=group.num_envs))
    steps += group.num_envs
  cpu = time.process_time() - start_cpu
  group.close()
  return cpu / (steps * config.num_action_repeats)


def network_config(config):
  """The level's network config; its action count from an environment process (DeepMind Lab
  created next to TensorFlow in this process crashes it, at reset or at exit)."""
  env = assembly.start_environment(assembly.default_environment_constructor(config),
                                   config.levels[0], 0)
  try:
    num_actions = env.spec.num_actions
  finally:
    env.close()
  return config.network_config(num_actions)


def inference_cost(config, network_config, batch_size, seconds):
  """Core-seconds per frame of the acting forward pass on batches of `batch_size`."""
  agent = networks.Agent(network_config, seed=0)
  step = tf.function(policies.acting_step(agent))
  rng = np.random.default_rng(0)
  inputs = (np.zeros(batch_size, np.int32), np.zeros(batch_size, np.float32),
            np.zeros(batch_size, bool),
            rng.integers(0, 256, (batch_size,) + tuple(network_config.frame_shape),
                         dtype=np.uint8),
            np.zeros((batch_size, language.MAX_INSTRUCTION_WORDS), np.int32)
            if network_config.use_instruction else (),
            agent.initial_state(batch_size))
  step(*inputs)  # Trace.
  calls = 0
  start_cpu, deadline = time.process_time(), time.monotonic() + seconds
  while time.monotonic() < deadline:
    tf.nest.map_structure(lambda t: t.numpy(), step(*inputs))
    calls += 1
  return (time.process_time() - start_cpu) / (calls * batch_size * config.num_action_repeats)


def _random_batch(network_config, config, rng):
  return random_batches.random_learner_batch(
      network_config, unroll_length=config.unroll_length, batch_size=config.batch_size,
      seed=int(rng.integers(1 << 30)))


def learner_cost(config, network_config, seconds):
  """Core-seconds per frame of the learner update (B x T x action repeats frames each)."""
  agent = networks.Agent(network_config, seed=0)
  learner = learner_lib.Learner(agent, config.learner_config(),
                                jit_compile=config.jit_compile_choice())
  rng = np.random.default_rng(0)
  env_outputs, agent_outputs = _random_batch(network_config, config, rng)
  state = agent.initial_state(config.batch_size)
  learner.update(state, env_outputs, agent_outputs)  # Trace.
  updates = 0
  start_cpu, start = time.process_time(), time.monotonic()
  while updates < 2 or time.monotonic() - start < seconds:
    learner.update(state, env_outputs, agent_outputs)["total_loss"].numpy()
    updates += 1
  frames = updates * config.batch_size * config.unroll_length * config.num_action_repeats
  return (time.process_time() - start_cpu) / frames
