"""A user's own gymnasium environment the first time (docs/ENVIRONMENTS.md, "Your own environment
class"), written as a user writes it, in a package of their own in a folder of their own
(tests/user_packages.py): the old Gym API's results and the docs' skeleton, a close() that
never returns, the command run from the folder that holds the package, a namespace package's
lines, observations outside their declared space, and faults on a small share of the steps."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.environments import LevelKeepsFailing
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import gym_outputs
from scalable_agent_tf2.runfiles import checkpoints
from tests import user_packages
from tests.environments.test_gym_family import _UniformPolicy

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def user_package(tmp_path, monkeypatch):
  """callable(source) -> UserPackage written under tmp_path, importable (tmp_path on
  sys.path, as the directory the command runs in is); forgotten afterwards."""
  import gymnasium  # pylint: disable=g-import-not-at-top
  before, names = set(gymnasium.registry), []
  monkeypatch.syspath_prepend(str(tmp_path))

  def write(source):
    package = user_packages.write_package(tmp_path, source)
    names.append(package.name)
    return package
  yield write
  for name in names:
    user_packages.forget(name, before)


def _documented_skeleton():
  """The environment class docs/ENVIRONMENTS.md shows under "Your own environment class"
  (my_package/envs.py), as a user copies it."""
  with open(os.path.join(REPO, "docs", "ENVIRONMENTS.md"), encoding="utf-8") as f:
    text = f.read()
  section = text[text.index("## Your own environment class"):]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


OLD_API = """
import gymnasium
import numpy as np
from gymnasium import spaces


class OldReset(gymnasium.Env):
  # The old Gym API: reset() returns the observation alone.
  def __init__(self):
    self.observation_space = spaces.Box(-1.0, 1.0, (6,))
    self.action_space = spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(6, np.float32)

  def step(self, action):
    return np.zeros(6, np.float32), 0.0, False, False, {}


class OldStep(gymnasium.Env):
  # The old Gym API: step() returns (observation, reward, done, info).
  def __init__(self):
    self.observation_space = spaces.Box(-1.0, 1.0, (6,))
    self.action_space = spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(6, np.float32), {}

  def step(self, action):  # Four values.
    return np.zeros(6, np.float32), 0.0, False, {}


gymnasium.register(id="OldReset-v0", entry_point=OldReset)
gymnasium.register(id="OldStep-v0", entry_point=OldStep)
gymnasium.register(id="OldStepUnchecked-v0", entry_point=OldStep, disable_env_checker=True)
"""


def test_an_old_api_reset_is_an_environment_fault_naming_the_users_method(user_package):
  package = user_package(OLD_API)
  env = gym_env.GymEnvironment(package.level("OldReset-v0"))
  with pytest.raises(base.EnvironmentOutputError) as raised:
    env.initial()
  env.close()
  where = package.where("def reset", "reset")
  assert str(raised.value) == (
      f"{package.level('OldReset-v0')}: step 0 of episode 1: the environment's reset() "
      "returned a ndarray of shape (6,) and dtype float32 (the old Gym API's reset() returned "
      "the observation alone); gymnasium's reset() returns (observation, info) (your reset() "
      f"is at {where}).")
  assert raised.value.user_frame == where
  assert isinstance(raised.value, actor.ENVIRONMENT_FAILURES)  # Replaced, then reported.


def test_an_old_api_step_is_an_environment_fault_with_or_without_gymnasiums_checker(
    user_package):
  package = user_package(OLD_API)
  where = package.where("def step(self, action):  # Four values.", "step")
  env = gym_env.GymEnvironment(package.level("OldStepUnchecked-v0"))
  env.initial()
  with pytest.raises(base.EnvironmentOutputError) as raised:
    env.step(0)
  env.close()
  assert str(raised.value).endswith(
      ": step 1 of episode 1: the environment's step() returned a tuple of 4 values (the old "
      "Gym API's step() returned 4 values, with one `done`); gymnasium's step() returns "
      f"(observation, reward, terminated, truncated, info) (your step() is at {where}).")
  # With gymnasium's checker (its default), the checker unpacks the 4 values itself and
  # raises: no line of the user's code is in that traceback, so the message names their
  # step().
  env = gym_env.GymEnvironment(package.level("OldStep-v0"))
  env.initial()
  with pytest.raises(gym_env.EnvironmentStepFailed) as raised:
    env.step(0)
  env.close()
  assert "not enough values to unpack (expected 5, got 4)" in str(raised.value)
  assert str(raised.value).endswith(f"(no line of your code in its traceback; your step() is "
                                    f"at {where}).")
  assert raised.value.user_frame == where


def test_the_documented_skeleton_says_what_its_reset_returned(user_package):
  package = user_package(_documented_skeleton())
  env = gym_env.GymEnvironment(package.level("MyEnv-v0"))
  with pytest.raises(base.EnvironmentOutputError,
                     match=r"the environment's reset\(\) returned None \(does it end without "
                           r"`return`\? a body of `...` returns None\); gymnasium's reset\(\) "
                           r"returns \(observation, info\)"):
    env.initial()
  env.close()


@pytest.mark.timeout(300)
def test_the_documented_skeleton_run_from_its_folder_ends_in_one_error_line_and_no_checkpoint(
    tmp_path):
  """The docs' skeleton as my_package/envs.py, `python experiment.py` run in the folder that
  holds my_package/ (no PYTHONPATH), as docs/ENVIRONMENTS.md says: one `error:` line naming
  the user's reset(), exit 2, no traceback, and no checkpoint at 0 frames that would refuse
  the fixed environment."""
  package = user_packages.write_package(tmp_path, _documented_skeleton(), name="my_package")
  logdir = tmp_path / "run"
  environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  run = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiment.py"),
       "--level_name=gym:my_package.envs:MyEnv-v0", f"--logdir={logdir}",
       "--total_environment_frames=2000"],
      cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=240)
  output = run.stdout + run.stderr
  assert run.returncode == 2, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
  assert errors == ["error: 1 level(s) cannot run here:"], run.stderr[-3000:]
  assert (f"the environment's reset() returned None (does it end without `return`? a body of "
          f"`...` returns None); gymnasium's reset() returns (observation, info) (your reset() "
          f"is at {package.where('def reset', 'reset')})") in run.stderr
  assert run.stderr.rstrip().endswith("Nothing was trained; no checkpoint was written.")
  assert checkpoints.latest_checkpoint(str(logdir)) is None


HANGING_CLOSE = """
import threading

import gymnasium
import numpy as np
from gymnasium import spaces


class HangsOnClose(gymnasium.Env):
  def __init__(self):
    self.observation_space = spaces.Box(-1.0, 1.0, (2,))
    self.action_space = spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(2, np.float32), {}

  def step(self, action):
    return np.zeros(2, np.float32), 0.0, False, False, {}

  def close(self):
    threading.Event().wait()  # Never set: a simulator that never lets go.


gymnasium.register(id="HangsOnClose-v0", entry_point=HangsOnClose)
"""


@pytest.mark.timeout(120)  # The old description step waited for this close() for ever.
def test_describing_a_level_whose_close_hangs_goes_on_and_says_so(user_package, capfd):
  package = user_package(HANGING_CLOSE)
  level = package.level("HangsOnClose-v0")
  description = gym_env.describe(gym_env.gym_id(level), {})
  assert description.observation_shape == (2,) and description.step_seconds is not None
  noted = [line for line in capfd.readouterr().err.splitlines() if line.startswith("note:")]
  assert noted == [f"note: {level}: the environment's close() did not return within "
                   f"{gym_env.CLOSING_TIMEOUT_SECONDS:g} s; it is left running in a thread of "
                   "its own and the command goes on (a close() that hangs holds what the "
                   "environment holds until the process ends)."]


WORKING = """
import gymnasium
import numpy as np
from gymnasium import spaces


class MyEnv(gymnasium.Env):
  def __init__(self, difficulty=1):
    self.observation_space = spaces.Box(-1.0, 1.0, (6,))
    self.action_space = spaces.Box(-1.0, 1.0, (2,))

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(6, np.float32), {}

  def step(self, action):
    return np.zeros(6, np.float32), 0.0, False, False, {}


gymnasium.register(id="MyEnv-v0", entry_point=MyEnv, max_episode_steps=500)
"""


@pytest.mark.timeout(120)
def test_the_command_finds_the_package_in_the_folder_it_runs_from(tmp_path):
  """`python <repo>/experiment.py` puts the script's folder on the import path, not the one
  it runs in; the docs (and the not-found message) say to run from the folder that holds
  my_package/, and that works, without PYTHONPATH."""
  user_packages.write_package(tmp_path, WORKING, name="my_package")
  environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  run = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiment.py"),
       "--level_name=gym:my_package.envs:MyEnv-v0", f"--logdir={tmp_path / 'run'}",
       "--show_settings"],
      cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=100)
  assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
  assert run.stdout.startswith("train: gym:my_package.envs:MyEnv-v0, with these settings")
  # From another folder the message says which folder to run from.
  (tmp_path / "elsewhere").mkdir()
  elsewhere = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiment.py"),
       "--level_name=gym:my_package.envs:MyEnv-v0", f"--logdir={tmp_path / 'run'}",
       "--show_settings"],
      cwd=tmp_path / "elsewhere", env=environ, capture_output=True, text=True, timeout=100)
  assert elsewhere.returncode == 2 and "No module named 'my_package'" in elsewhere.stderr
  assert (f"run from the directory that holds my_package/ or my_package.py (this one, "
          f"{tmp_path / 'elsewhere'}, does not)") in elsewhere.stderr


RAISING = """
import gymnasium
import numpy as np
from gymnasium import spaces


class Raising(gymnasium.Env):
  def __init__(self, refuse=False):
    if refuse:
      raise RuntimeError("no licence for the simulator")
    self.observation_space = spaces.Box(-1.0, 1.0, (2,))
    self.action_space = spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(2, np.float32), {}

  def step(self, action):
    raise RuntimeError("the simulator lost its connection")


gymnasium.register(id="Raising-v0", entry_point=Raising)
"""


def test_a_namespace_packages_errors_name_the_users_lines(user_package):
  """docs/ENVIRONMENTS.md's my_package/ has no __init__.py: a namespace package, without
  __file__; its lines are found all the same."""
  package = user_package(RAISING)
  assert not os.path.exists(os.path.join(package.folder, package.name, "__init__.py"))
  env = gym_env.GymEnvironment(package.level("Raising-v0"))
  env.initial()
  with pytest.raises(gym_env.EnvironmentStepFailed) as raised:
    env.step(0)
  env.close()
  where = package.where("the simulator lost", "step")
  assert raised.value.user_frame == where and str(raised.value).endswith(f"(at {where}).")
  with pytest.raises(gym_env.EnvironmentCannotBeMade) as raised:
    gym_env.GymEnvironment(package.level("Raising-v0"), env_kwargs={"refuse": True})
  assert raised.value.user_frame == package.where("no licence", "__init__")


OUT_OF_SPACE = """
import gymnasium
import numpy as np
from gymnasium import spaces


class OutOfSpace(gymnasium.Env):
  # Declares float32 values in [-1, 1]; from step `wrong_from` on returns 1e30 of `dtype`.
  def __init__(self, dtype="float64", wrong_from=1):
    self.observation_space = spaces.Box(-1.0, 1.0, (6,), np.float32)
    self.action_space = spaces.Discrete(2)
    self._dtype, self._wrong_from, self._steps = dtype, wrong_from, 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(6, np.float32), {}

  def step(self, action):
    self._steps += 1
    if self._dtype == "list":  # Python floats, in the Box.
      return [0.5] * 6, 0.0, False, False, {}
    if self._steps >= self._wrong_from:
      return np.full(6, 1e30, self._dtype), 0.0, False, False, {}
    return np.zeros(6, np.float32), 0.0, False, False, {}


gymnasium.register(id="OutOfSpace-v0", entry_point=OutOfSpace)
"""


@pytest.mark.parametrize("dtype, problem", [
    ("float64", "an observation of dtype float64; its observation space promises float32 "
                "(return float32 values, e.g. np.asarray(observation, np.float32), or declare "
                "the Box with dtype=np.float64)."),
    ("float32", "an observation outside its Box's bounds: 1e+30 at (0,) (bounds [-1, 1]), "
                "1e+30 at (1,) (bounds [-1, 1]), 1e+30 at (2,) (bounds [-1, 1]) and 3 more.")])
def test_an_observation_outside_its_declared_space_is_named(user_package, dtype, problem):
  package = user_package(OUT_OF_SPACE)
  env = gym_env.GymEnvironment(package.level("OutOfSpace-v0"), env_kwargs={"dtype": dtype})
  env.initial()
  with pytest.raises(base.EnvironmentOutputError) as raised:
    env.step(0)
  env.close()
  assert str(raised.value) == (f"{package.level('OutOfSpace-v0')}: step 1 of episode 1: the "
                               f"environment returned {problem}")


def test_a_list_is_read_in_the_declared_dtype_as_gymnasium_reads_it(user_package):
  package = user_package(OUT_OF_SPACE)
  env = gym_env.GymEnvironment(package.level("OutOfSpace-v0"), env_kwargs={"dtype": "list"})
  env.initial()
  frame = env.step(0).observation.frame
  env.close()
  assert frame.dtype == np.float32 and frame.tolist() == [0.5] * 6


def test_the_bounds_are_checked_on_the_first_observations_then_on_one_in_a_hundred(
    user_package):
  """What docs/ENVIRONMENTS.md says is checked (gym_outputs' docstring says why): values
  outside the Box from the 1,001st observation on are met at the first one checked after the
  first thousand, observation 1,100 (step 1,099; observation 1 is initial()'s)."""
  package = user_package(OUT_OF_SPACE)
  first, every = gym_outputs.BOUNDS_CHECKED_FIRST, gym_outputs.BOUNDS_CHECK_EVERY
  env = gym_env.GymEnvironment(package.level("OutOfSpace-v0"),
                               env_kwargs={"dtype": "float32", "wrong_from": first})
  env.initial()
  for _ in range(first + every - 2):
    env.step(0)
  with pytest.raises(base.EnvironmentOutputError, match=f"step {first + every - 1} of episode "
                                                        "1: .* outside its Box's bounds"):
    env.step(0)
  env.close()


NAN_REWARDS = """
import gymnasium
import numpy as np
from gymnasium import spaces


class NanRewards(gymnasium.Env):
  # A NaN reward on every `every`-th step of the environment's life; one endless episode.
  def __init__(self, every=1000):
    self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    self.action_space = spaces.Discrete(2)
    self._every, self._steps = every, 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(2, np.float32), {}

  def step(self, action):
    self._steps += 1
    reward = float("nan") if self._steps % self._every == 0 else 0.0
    return np.zeros(2, np.float32), reward, False, False, {}


gymnasium.register(id="NanRewards-v0", entry_point=NanRewards)
"""


def _nan_reward_loop(package, every):
  level = package.level("NanRewards-v0")
  return actor.EnvironmentLoop(
      lambda attempt: [gym_env.GymEnvironment(level, seed=attempt, env_kwargs={"every": every})],
      _UniformPolicy(), [np.random.default_rng(0)], level)


def test_a_fault_on_a_thousandth_of_the_steps_is_replaced_for_as_long_as_it_comes(user_package):
  """A NaN reward on 0.1% of the steps, however fast they come: each replaced, the run goes
  on (the crash loop is a rate of steps, actor.RestartPolicy; 5 within 60 s stopped it)."""
  loop = _nan_reward_loop(user_package(NAN_REWARDS), every=1000)
  replaced = 0
  while replaced < 12:  # 12,000 steps.
    try:
      loop.unroll(100)
    except actor.EnvironmentRestarted as restarted:
      assert "a reward of nan" in str(restarted)
      replaced += 1
  assert loop.num_crashes == 12
  loop.close()


def test_a_fault_on_a_twentieth_of_the_steps_is_a_crash_loop(user_package):
  loop = _nan_reward_loop(user_package(NAN_REWARDS), every=20)
  for _ in range(4):
    with pytest.raises(actor.EnvironmentRestarted):
      loop.unroll(100)
  with pytest.raises(LevelKeepsFailing) as raised:
    loop.unroll(100)
  assert re.match(r"its environment failed 5 times in its first 100 steps \(replaced each "
                  r"time; a level stops when its failures are more than 1% of its last "
                  r"10,000 steps, 5 at least\); the last failure: step 20 of episode 1: the "
                  r"environment returned a reward of nan", raised.value.reason), (
                      raised.value.reason)
  loop.close()
