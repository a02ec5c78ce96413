"""The records that cross room boundaries: what an environment returns, what the agent emits.

No TensorFlow here: environments (which run in cheap subprocesses) and the TF rooms share these.
Every field is time-major when batched for learning: [T+1, B, ...] (the last step of one
unroll is the first of the next, as in the released code's actor loop).
"""
import collections

# One observation. frame: uint8 [H, W, C] (DMLab: 72x96x3 RGB; Atari: 84x84x4 stacked grey
# frames), or float32 [O] for continuous control (MuJoCo's observation vector). instruction: on
# the environment side a str ('' when the level has none); on the agent side int32 word ids
# [MAX_INSTRUCTION_WORDS] from language.hash_instructions (strings never enter XLA,
# docs/ARCHITECTURE.md "Records").
Observation = collections.namedtuple("Observation", "frame instruction")


# What the agent sees after each environment step. reward: float32 (unclipped: clipping is the
# learner's job). done: bool, True when this observation is the first of a NEW episode (the
# previous one ended and the environment reset itself, as in the released code).
# episode_return / episode_step: statistics of the episode that is running (or, when done, of
# the episode that just ended), for logging only. truncated: bool, True when this observation is
# the last of an episode a time limit cut (environments/truncation.py): the next step's action
# is ignored and that step starts the next episode; the learner cuts the transition leaving this
# observation, so that the return into it bootstraps from its value (losses.py). [T+1, B] in a
# batch like `done`. Every field is given: an environment that cannot truncate says False (or
# zeros of done's shape).
EnvOutput = collections.namedtuple(
    "EnvOutput", "reward done observation episode_return episode_step truncated")


# What the agent emits at each step, for every action distribution (agent/distributions.py):
# action, the sample (int32 [] of a categorical policy; float32 [A] of a diagonal Gaussian, the
# UNCLIPPED sample: its log-probability is mu's density, only the environment's copy is
# clipped, action_spaces.ActionSpace.to_environment); policy_params float32 [P], the behaviour
# policy mu's flat parameters, needed by V-trace (the logits [N]; a Gaussian's means then log
# standard deviations [2A]); baseline float32 V(x).
AgentOutput = collections.namedtuple("AgentOutput", "action policy_params baseline")

# What an actor sends to the learner. level_name: str. policy_version: int, the number of
# learner updates when the unroll began (policy lag = updates at consumption - this).
# agent_state: core state before step 0 (numpy, no batch dimension; () without an LSTM).
# env_outputs / agent_outputs: numpy [T+1, ...] (instruction as int32 word ids).
Trajectory = collections.namedtuple(
    "Trajectory", "level_name policy_version agent_state env_outputs agent_outputs")
