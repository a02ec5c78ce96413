"""EnvironmentProcess with real child processes: results, errors, deaths, hangs, clean-up."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import process
from scalable_agent_tf2.environments.atari import AtariEnvironment

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)

# Actions of ScriptedEnvironment.
NORMAL, RAISE, SLEEP = 0, 1, 2


class CustomError(Exception):
  """An exception type only this module knows: it must still arrive as itself."""


class UnpicklableError(Exception):

  def __init__(self, message, handle):
    super().__init__(message)
    self.handle = handle


class ScriptedEnvironment(base.Environment):
  """A tiny environment whose actions misbehave on purpose (built in the child by name)."""

  def __init__(self, fail_in_constructor=False):
    if fail_in_constructor:
      raise CustomError("constructor refused")
    self._steps = 0

  @property
  def spec(self):
    return base.EnvSpec(num_actions=4, frame_shape=(3, 5, 2))

  def initial(self):
    return base.make_env_output(0.0, True, np.zeros((3, 5, 2), np.uint8), "go", 0.0, 0)

  def step(self, action):
    if action == RAISE:
      self._raise_deep_inside()
    if action == SLEEP:
      time.sleep(60)
    if action == 3:
      raise UnpicklableError("cannot travel", handle=threading.Lock())
    self._steps += 1
    return base.make_env_output(1.0, False, np.full((3, 5, 2), self._steps, np.uint8), "go",
                                float(self._steps), self._steps)

  def _raise_deep_inside(self):
    raise CustomError("step %d went wrong" % self._steps)

  def close(self):
    pass


def is_gone(pid):
  """True when pid no longer runs (a zombie waiting to be reaped counts as gone)."""
  try:
    with open("/proc/%d/stat" % pid) as f:
      return f.read().rsplit(")", 1)[1].split()[0] == "Z"
  except FileNotFoundError:
    return True


def wait_until_gone(pid, seconds=10.0):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    if is_gone(pid):
      return True
    time.sleep(0.05)
  return False


@pytest.fixture
def scripted():
  env = process.EnvironmentProcess(ScriptedEnvironment)
  yield env
  env.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_memory", [True, False])
def test_same_outputs_as_in_process(shared_memory):
  local = AtariEnvironment("pong", seed=11)
  remote = process.EnvironmentProcess(AtariEnvironment, kwargs=dict(game="pong", seed=11),
                                      shared_memory=shared_memory)
  try:
    assert remote.spec == local.spec
    pairs = [(local.initial(), remote.initial())]
    for action in np.random.default_rng(0).integers(6, size=40):
      pairs.append((local.step(action), remote.step(action)))
    for expected, got in pairs:  # Checked at the end: earlier frames were not overwritten.
      np.testing.assert_array_equal(got.observation.frame, expected.observation.frame)
      assert got._replace(observation=None) == expected._replace(observation=None)
      assert got.observation.instruction == ""
  finally:
    remote.close()


@pytest.mark.timeout(60)
def test_child_exception_arrives_with_its_type_and_traceback(scripted):
  scripted.initial()
  with pytest.raises(CustomError, match="step 0 went wrong") as raised:
    scripted.step(RAISE)
  cause = raised.value.__cause__
  assert isinstance(cause, process.RemoteTraceback)
  assert "_raise_deep_inside" in cause.traceback_text  # The child's frames, not ours.
  assert "_raise_deep_inside" in str(cause)
  assert scripted.step(NORMAL).episode_step == 1  # The child survived and still serves.


@pytest.mark.timeout(60)
def test_unpicklable_child_exception_still_arrives(scripted):
  with pytest.raises(RuntimeError, match="UnpicklableError: cannot travel") as raised:
    scripted.step(3)
  assert "UnpicklableError" in raised.value.__cause__.traceback_text


@pytest.mark.timeout(60)
def test_constructor_exception_arrives_and_leaves_no_process():
  with pytest.raises(CustomError, match="constructor refused"):
    process.EnvironmentProcess(ScriptedEnvironment, kwargs=dict(fail_in_constructor=True))
  with pytest.raises(ValueError, match="no ROM"):
    process.EnvironmentProcess(AtariEnvironment, kwargs=dict(game="no_such_game"))
  import multiprocessing  # pylint: disable=g-import-not-at-top
  assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_bad_action_is_caught_before_the_round_trip(scripted):
  with pytest.raises(ValueError, match="out of range"):
    scripted.step(4)


@pytest.mark.timeout(60)
def test_killed_child_is_reported_not_waited_for(scripted):
  scripted.initial()
  os.kill(scripted.pid, signal.SIGKILL)
  start = time.monotonic()
  with pytest.raises(process.EnvironmentProcessDied, match="killed by signal SIGKILL"):
    scripted.step(NORMAL)
  assert time.monotonic() - start < 10
  with pytest.raises(RuntimeError, match="closed"):
    scripted.step(NORMAL)


@pytest.mark.timeout(60)
def test_child_killed_during_a_call_is_reported_at_once(scripted):
  killer = threading.Timer(0.5, os.kill, args=(scripted.pid, signal.SIGKILL))
  killer.start()
  start = time.monotonic()
  with pytest.raises(process.EnvironmentProcessDied, match="SIGKILL"):
    scripted.step(SLEEP)  # The child would sleep 60 s.
  assert time.monotonic() - start < 10
  killer.join()


@pytest.mark.timeout(60)
def test_unresponsive_child_times_out_and_is_killed():
  env = process.EnvironmentProcess(ScriptedEnvironment, timeout=1.0)
  pid = env.pid
  with pytest.raises(process.EnvironmentProcessTimeout,
                     match=r"did not answer within 1.0 s \(its step\(\) hung\)"):
    env.step(SLEEP)
  assert wait_until_gone(pid)
  env.close()


@pytest.mark.timeout(60)
def test_close_terminates_joins_and_frees_shared_memory():
  env = process.EnvironmentProcess(ScriptedEnvironment)
  env.initial()
  shared_memory_path = "/dev/shm/" + env._shared.name.lstrip("/")  # pylint: disable=protected-access
  # Unlinked as soon as the child has mapped it (process.py): nothing left however it ends.
  assert not os.path.exists(shared_memory_path)
  env.close()
  assert is_gone(env.pid)
  assert not os.path.exists(shared_memory_path)
  env.close()  # A second close is harmless.
  with pytest.raises(RuntimeError, match="closed"):
    env.initial()


def run_parent_script(body):
  """Starts a Python parent that creates an environment process and prints the child's pid."""
  script = textwrap.dedent("""
      import signal, sys, time
      # Ctrl-C raises KeyboardInterrupt here whatever SIGINT state the test runner passed on
      # (an ignored or blocked SIGINT is inherited by children).
      signal.signal(signal.SIGINT, signal.default_int_handler)
      signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
      from scalable_agent_tf2.environments import process
      from tests.environments.test_process import ScriptedEnvironment, SLEEP
      env = process.EnvironmentProcess(ScriptedEnvironment)
      print(env.pid, flush=True)
  """) + textwrap.dedent(body)
  parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO_DIR)
  child_pid = int(parent.stdout.readline())
  return parent, child_pid


@pytest.mark.timeout(60)
def test_no_child_left_when_the_parent_is_interrupted():
  parent, child_pid = run_parent_script("env.step(SLEEP)\n")  # Parent waits on the child.
  time.sleep(0.5)
  parent.send_signal(signal.SIGINT)
  _, stderr = parent.communicate(timeout=30)
  assert "KeyboardInterrupt" in stderr
  assert wait_until_gone(child_pid)


@pytest.mark.timeout(60)
def test_no_child_left_when_the_parent_exits_without_close():
  parent, child_pid = run_parent_script("env.initial()\n")
  assert parent.wait(timeout=30) == 0
  assert wait_until_gone(child_pid)


@pytest.mark.timeout(60)
def test_no_child_left_when_the_parent_is_killed():
  parent, child_pid = run_parent_script("time.sleep(60)\n")
  parent.kill()  # SIGKILL: no Python clean-up runs in the parent.
  parent.wait(timeout=30)
  assert wait_until_gone(child_pid)  # PR_SET_PDEATHSIG / end-of-file on the pipe.


@pytest.mark.timeout(60)
def test_the_child_does_not_run_the_parents_main_script(tmp_path):
  # A driver script that imports TensorFlow at its top would load TensorFlow into DeepMind
  # Lab's process if the spawned child re-imported it, and the engine crashes at reset there.
  marks = tmp_path / "imports.txt"
  script = tmp_path / "driver.py"
  script.write_text(textwrap.dedent(f"""
      import os, sys
      with open({str(marks)!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")  # Every import of this script leaves its pid.
      sys.path.insert(0, {REPO_DIR!r})
      if __name__ == "__main__":
        from scalable_agent_tf2.environments import process
        from tests.environments.test_process import ScriptedEnvironment
        env = process.EnvironmentProcess(ScriptedEnvironment)
        env.initial()
        print(env.pid, flush=True)
        env.close()
  """))
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=REPO_DIR, timeout=50, check=True)
  child_pid = int(result.stdout.split()[-1])
  importers = [int(line) for line in marks.read_text().split()]
  assert child_pid not in importers
  assert len(importers) == 1
