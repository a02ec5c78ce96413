"""Environment processes leave no process behind: what a child started (DeepMind Lab's map
compilers: compile_map.sh, q3map2, bspc) ends with it, whether it is closed or dies."""
import os
import signal
import subprocess
import time

import pytest

from scalable_agent_tf2.environments import process
from tests.environments.test_process import ScriptedEnvironment, is_gone, wait_until_gone


class EnvironmentWithACompiler(ScriptedEnvironment):
  """Starts a long `sleep` child, as DeepMind Lab starts a map compiler, and writes its pid;
  its close leaves the compiler running, as an engine killed mid-compilation would."""

  def __init__(self, pid_path):
    super().__init__()
    self._compiler = subprocess.Popen(["sleep", "300"])
    with open(pid_path, "w") as f:
      f.write(str(self._compiler.pid))


def _start(tmp_path):
  pid_path = tmp_path / "compiler.pid"
  env = process.EnvironmentProcess(EnvironmentWithACompiler, kwargs=dict(pid_path=str(pid_path)))
  compiler_pid = int(pid_path.read_text())
  assert not is_gone(compiler_pid)
  assert os.getpgid(compiler_pid) == env.pid != os.getpgrp()  # The child's own group.
  return env, compiler_pid


@pytest.mark.timeout(60)
def test_closing_an_environment_ends_the_processes_it_started(tmp_path):
  env, compiler_pid = _start(tmp_path)
  env.close()
  assert wait_until_gone(compiler_pid)


@pytest.mark.timeout(60)
def test_a_dead_environment_leaves_no_orphan(tmp_path):
  env, compiler_pid = _start(tmp_path)
  os.kill(env.pid, signal.SIGKILL)
  deadline = time.monotonic() + 20
  while not is_gone(env.pid) and time.monotonic() < deadline:
    time.sleep(0.05)
  with pytest.raises(process.EnvironmentProcessDied):
    env.step(0)
  assert wait_until_gone(compiler_pid)
