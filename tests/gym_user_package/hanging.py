"""A user's environment whose step never returns (issue 41, item 3): a simulator that hangs.

    --level_name=gym:tests.gym_user_package.hanging:UserHangs-v0

UserHangs-v0 is UserTarget-v0 (envs.py), except that the step `HANG_AT_STEP` of every
environment's life blocks forever (an uninterruptible wait, like a C extension stuck in a socket
read). UserHangsOnce-v0: only the first `HANGING_ENVIRONMENTS` environments made in a process
hang; those made later (the replacements) run normally.
"""
import threading

import gymnasium

from tests.gym_user_package import envs

HANG_AT_STEP = 30


HANGING_ENVIRONMENTS = 2
_made = []


class UserHangs(envs.UserTarget):

  def __init__(self, hangs=True):
    super().__init__()
    self._life_steps = 0
    self._hangs = hangs

  def step(self, action):
    self._life_steps += 1
    if self._hangs and self._life_steps == HANG_AT_STEP:
      threading.Event().wait()  # Never set: the step never returns.
    return super().step(action)


def hangs_once():
  _made.append(None)
  return UserHangs(hangs=len(_made) <= HANGING_ENVIRONMENTS)


gymnasium.register(id="UserHangs-v0", entry_point=UserHangs,
                   max_episode_steps=envs.EPISODE_STEPS)
gymnasium.register(id="UserHangsOnce-v0", entry_point=hangs_once,
                   max_episode_steps=envs.EPISODE_STEPS)
