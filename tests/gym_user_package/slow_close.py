"""A user's environment whose close() takes seconds (a simulator that saves its state or
shuts a server down), for tests that signal a process while it stops.

    --level_name=gym:tests.gym_user_package.slow_close:UserSlowClose-v0

UserSlowClose-v0 is UserTarget-v0 (envs.py), except that close(), once the environment has
stepped, writes the file closing-<pid> into the folder named by the variable
USER_CLOSE_MARKER_DIR (so a test knows the process is stopping) and then waits until the test
writes the file `release` there (at most CLOSE_SECONDS): the process is held in its stop for as
long as the test needs, however loaded the machine, instead of for a fixed time.
"""
import os
import time

import gymnasium

from tests.gym_user_package import envs

# Below the environment process's grace for a close and its join (process.py: 5 s each), so
# that a close that is never released still ends the way a slow one does.
CLOSE_SECONDS = 8.0
RELEASE_FILE = "release"


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
      deadline = time.monotonic() + CLOSE_SECONDS
      while (not os.path.exists(os.path.join(folder, RELEASE_FILE))
             and time.monotonic() < deadline):
        time.sleep(0.05)
    super().close()


gymnasium.register(id="UserSlowClose-v0", entry_point=UserSlowClose,
                   max_episode_steps=envs.EPISODE_STEPS)
