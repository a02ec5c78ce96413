"""A user's environment whose close() takes seconds (a simulator that saves its state or
shuts a server down), for tests that signal a process while it stops.

    --level_name=gym:tests.gym_user_package.slow_close:UserSlowClose-v0

UserSlowClose-v0 is UserTarget-v0 (envs.py), except that close(), once the environment has
stepped, writes the file closing-<pid> into the folder named by the variable
USER_CLOSE_MARKER_DIR (so a test knows the process is stopping) and then takes CLOSE_SECONDS.
"""
import os
import time

import gymnasium

from tests.gym_user_package import envs

CLOSE_SECONDS = 3.0  # Below the environment process's grace for a close (process.py: 5 s).


class UserSlowClose(envs.UserTarget):

  def __init__(self):
    super().__init__()
    self._stepped = False

  def step(self, action):
    self._stepped = True
    return super().step(action)

  def close(self):
    folder = os.environ.get("USER_CLOSE_MARKER_DIR")
    if self._stepped and folder:
      with open(os.path.join(folder, f"closing-{os.getpid()}"), "w") as f:
        f.write("closing\n")
      time.sleep(CLOSE_SECONDS)
    super().close()


gymnasium.register(id="UserSlowClose-v0", entry_point=UserSlowClose,
                   max_episode_steps=envs.EPISODE_STEPS)
