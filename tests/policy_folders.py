"""Policy folders for the tests of policy.py and the SavedModel export, made with the project's
own pieces (a run's agent and checkpointer, as training saves one), and the project's own
network's outputs on a sequence of steps (test mode's restore, then policies.acting_step)."""
import os

import numpy as np

from scalable_agent_tf2.agent import language
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from tests.agent_steps import acting_step

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BREAKOUT = os.path.join(REPO, "benchmarks", "agents", "breakout")
BOXING = os.path.join(REPO, "benchmarks", "agents", "boxing")
# An LSTM 256 core and the instruction encoder on 24x24 pixels (tests/gym_policy_envs.py).
PIXEL_MISSION = "gym:tests.gym_policy_envs:TestPixelMission-v0"
# A vector observation: the network reads it through the run's observation filter.
CART_POLE = "gym:CartPole-v1"


def config(logdir, level_name, mode="test", *flags):
  return config_lib.config_from_argv([f"--mode={mode}", f"--level_name={level_name}",
                                      f"--logdir={logdir}", "--seed=5", *flags])


def new_folder(logdir, level_name, *flags, filter_observations=None, frames=1000):
  """A run's logdir with one checkpoint of a new agent at `frames` (the weights a training
  run starts from), trained with `flags`; filter_observations [N, O]: what its observation
  filter has seen."""
  train = config(logdir, level_name, "train", *flags)
  agent, env = assembly.build_agent(train, assembly.default_environment_constructor(train))
  env.close()
  if filter_observations is not None:
    agent.observation_filter(np.asarray(filter_observations, np.float64))
  learner = assembly.make_learner(train, agent)
  learner.num_env_frames.assign(frames)
  assembly.make_checkpointer(train, agent, learner).save(frames)
  return logdir


def restored_agent(logdir, level_name, *flags):
  """The agent of logdir as test mode restores it (with the flags it was trained with)."""
  test = config(logdir, level_name, "test", *flags)
  agent, _, _ = assembly.restore_agent(
      test, assembly.checked_environment_constructor(test, None, test_mode=True))
  return agent


def network_outputs(agent, steps):
  """[(policy_params [B, P], baseline [B], core)] of policies.acting_step over `steps`: dicts of
  observation [B, ...], reward [B], first [B], prev_action [B, ...], instruction (B strings or
  None); observations filtered and instructions hashed as actors do."""
  observation_filter = agent.observation_filter
  core = agent.initial_state(len(steps[0]["reward"]))
  outputs = []
  for step in steps:
    frame = step["observation"]
    if observation_filter is not None:
      frame = observation_filter(frame)
    batch = len(step["reward"])
    instruction = (language.hash_instructions(list(step["instruction"]))
                   if step.get("instruction") is not None
                   else language.empty_instructions([batch]))
    env_output = EnvOutput(reward=np.asarray(step["reward"], np.float32),
                           done=np.asarray(step["first"], bool),
                           observation=Observation(frame=frame, instruction=instruction),
                           episode_return=np.zeros(batch, np.float32),
                           episode_step=np.zeros(batch, np.int32),
                           truncated=np.zeros(batch, bool))
    params, baseline, core = acting_step(agent, step["prev_action"], env_output, core)
    outputs.append((params.numpy(), baseline.numpy(),
                    [c.numpy() for c in core] if agent.config.use_lstm else []))
  return outputs
