"""A diagnostic level that trains in a minute on a CPU: point at the lit side.

    python experiment.py --mode=train --level_name=toy/lit_side_delayed --logdir=/tmp/toy

Not from the paper: it checks a setup and gives studies a task where learning happens within
a small budget (benchmarks/studies/table2.py, impact_vs_impala.py, laser_study.py;
benchmarks/RESULTS.md "Short budgets"). Levels:
"toy/lit_side" (reward at every step), "toy/lit_side_delayed" (the episode's reward at its
end, so learning needs credit assignment across steps), and the levels of reward-scale
diagnostics for suites (Hessel et al. 2019, "Multi-task Deep Reinforcement Learning with
PopArt": tasks whose rewards differ by orders of magnitude, as Atari-57's unclipped):

  "toy/lit_side_x1000": toy/lit_side paying 1,000 per success: the same frames and dynamics
      under the same seed and actions, the rewards x1000. With toy/lit_side, a suite whose
      tasks differ only in reward scale: one policy serves both (their frames are the same),
      so it checks that a scale per task keeps each task's values without disturbing a shared
      task; it cannot show one task starving the other.
  "toy/unlit_side", "toy/unlit_side_x1000": point at the dark half, the lit half shining at
      UNLIT_BRIGHTNESS (the agent tells these levels from toy/lit_side by the frame); paying
      1 and 1,000 per success. With toy/lit_side, a suite of two tasks equally hard and in
      conflict (one frame side, opposite actions), so each needs its own learning: at equal
      scales (toy/unlit_side) they learn at one pace; with toy/unlit_side_x1000 the large
      rewards take the shared network's gradient unless each task has its own scale.

Each episode has EPISODE_LENGTH steps. The frame (20x20x1 uint8) is lit on its left or right
half; the side follows a fixed pseudo-random sequence drawn from the seed. Action 0 means
"left", 1 "right", 2 "neither" (never right). Reward 1 for the lit side (the dark side with
`unlit`), else 0. Optimal return: EPISODE_LENGTH; a uniformly random policy gets
EPISODE_LENGTH / 3.

Implements scalable_agent_tf2.environments.base.Environment (numpy only, so it runs in an
EnvironmentProcess); its family is environments/families/toy.py. `crash_after_steps` makes the
process die and `refuse` the constructor fail, to test restarts. With
`delayed_reward`, every episode's reward comes at its last step (the number of correct choices),
so learning needs credit assignment across steps (discounting, V-trace targets, bootstrapping).
`step_secs` slows every step down (population tests pace their members with it).
`reward_scale` multiplies every reward (and so the episode's return); `unlit` rewards the dark
side and lights the lit one at UNLIT_BRIGHTNESS.
"""
import os
import time

import numpy as np

from scalable_agent_tf2.environments import base

EPISODE_LENGTH = 10
NUM_ACTIONS = 3
FRAME_SHAPE = (20, 20, 1)
# Videos of the toy levels (test mode's --record_video_episodes) show an agent step for 1/5 s:
# an episode in 2 s. Not a measured speed: the level has no time of its own.
VIDEO_FPS = 5
LEVEL_NAME = "toy/lit_side"
DELAYED_LEVEL_NAME = "toy/lit_side_delayed"
# The lit half of the unlit levels: half the lit levels' 255, so a frame tells which it is.
UNLIT_BRIGHTNESS = 128


class LitSideEnvironment(base.Environment):
  """See the module docstring."""

  def __init__(self, seed=0, crash_after_steps=0, refuse=False, delayed_reward=False,
               step_secs=0.0, reward_scale=1.0, unlit=False):
    if refuse:
      raise RuntimeError("this toy environment refuses to start")
    self._delayed_reward = delayed_reward
    self._reward_scale = float(reward_scale)
    self._unlit = unlit
    self._step_secs = step_secs
    self._num_correct = 0
    self._rng = np.random.default_rng(seed)
    self._crash_after_steps = crash_after_steps
    self._num_steps = 0
    self._statistics = base.EpisodeStatistics()
    self._side = 0
    self._step_in_episode = 0

  @property
  def spec(self):
    return base.EnvSpec(num_actions=NUM_ACTIONS, frame_shape=FRAME_SHAPE)

  def _frame(self):
    frame = np.zeros(FRAME_SHAPE, np.uint8)
    half = FRAME_SHAPE[1] // 2
    brightness = UNLIT_BRIGHTNESS if self._unlit else 255
    if self._side == 0:
      frame[:, :half] = brightness
    else:
      frame[:, half:] = brightness
    return frame

  def _new_side(self):
    self._side = int(self._rng.integers(2))

  def initial(self):
    self._statistics.restart()
    self._num_correct = 0
    self._step_in_episode = 0
    self._new_side()
    return base.make_env_output(0.0, True, self._frame(), "", 0.0, 0)

  def step(self, action):
    action = base.check_action(action, NUM_ACTIONS)
    if self._step_secs:
      time.sleep(self._step_secs)
    self._num_steps += 1
    if self._crash_after_steps and self._num_steps >= self._crash_after_steps:
      os._exit(3)  # An environment process that dies without a word.
    paid_side = 1 - self._side if self._unlit else self._side
    reward = self._reward_scale if action == paid_side else 0.0
    self._step_in_episode += 1
    done = self._step_in_episode >= EPISODE_LENGTH
    if self._delayed_reward:  # All of the episode's reward arrives at its last step.
      self._num_correct += reward
      reward = self._num_correct if done else 0.0
      if done:
        self._num_correct = 0
    episode_return, episode_step = self._statistics.record(reward, episode_ended=done)
    if done:
      self._step_in_episode = 0
    self._new_side()
    return base.make_env_output(reward, done, self._frame(), "", episode_return, episode_step)

  def render(self):
    """The current frame as RGB (the grey frame in all three channels), 20x20."""
    return np.repeat(self._frame(), 3, axis=-1)

  def render_fps(self):
    return VIDEO_FPS

  def close(self):
    pass

