"""What experiment.py answers before TensorFlow loads (issue 33, point 4).

Each command runs experiment.py under a wrapper whose audit hook writes TENSORFLOW_MARK to
stderr when `import tensorflow` starts (and can send the process a signal then), so "before
TensorFlow" is checked as the order of events in the process, never with a wall-clock limit:
an answer with no mark before it came while `tensorflow` was not in sys.modules.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import run_directory

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TENSORFLOW_MARK = "[import tensorflow starts]"
SIGNAL_MARK = "[signal sent while importing]"
TOY = "--level_name=toy/lit_side"
# The toy level's presets (families/toy.py): what its checkpoint's settings.json holds.
TOY_SETTINGS = dict(level_name="toy/lit_side", torso="shallow", width=20, height=20,
                    algorithm="impala")

# Runs experiment.py with sys.argv[1:]; marks the start of TensorFlow's import on stderr and,
# with SIGNAL_WHILE_IMPORTING=<SIGINT|SIGTERM>, sends that signal to itself once TensorFlow's
# own modules import (tensorflow.python.*: in the middle of the import, not before it).
_WRAPPER = textwrap.dedent(f"""
    import os, runpy, signal, sys
    stop = os.environ.get("SIGNAL_WHILE_IMPORTING")
    at = os.environ.get("SIGNAL_AT_IMPORT_OF", "tensorflow.python")
    sent = []
    def hook(event, args):
      if event != "import":
        return
      name = str(args[0])
      if name == "tensorflow" and "tensorflow" not in sys.modules:
        os.write(2, b"{TENSORFLOW_MARK}\\n")
      if stop and not sent and name.startswith(at):
        sent.append(name)
        os.write(2, b"{SIGNAL_MARK}\\n")
        os.kill(os.getpid(), getattr(signal, stop))
    sys.addaudithook(hook)
    sys.path[0] = {REPO_DIR!r}
    sys.argv = ["experiment.py"] + sys.argv[1:]
    runpy.run_path(os.path.join({REPO_DIR!r}, "experiment.py"), run_name="__main__")
""")


def run_experiment(*flags, stop_signal=None, timeout=240, signal_at="tensorflow.python"):
  """Runs experiment.py with `flags` under _WRAPPER; with stop_signal ("SIGINT", "SIGTERM"),
  sends it when the module `signal_at` (or the first of its submodules) starts to import."""
  env = dict(os.environ)
  env.pop("SIGNAL_WHILE_IMPORTING", None)
  env["SIGNAL_AT_IMPORT_OF"] = signal_at
  if stop_signal:
    env["SIGNAL_WHILE_IMPORTING"] = stop_signal
  # SIGINT as a terminal gives it (an ignored SIGINT would be inherited by the child).
  return subprocess.run([sys.executable, "-c", _WRAPPER, *flags], capture_output=True,
                        text=True, timeout=timeout, cwd=REPO_DIR, env=env,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def assert_answered_before_tensorflow(result, message):
  """The `error:` line holds `message`, exit 2, and TensorFlow never started to import."""
  assert result.returncode == 2, result.stdout + result.stderr
  assert "error: " in result.stderr and message in result.stderr, result.stderr
  assert TENSORFLOW_MARK not in result.stderr, result.stderr
  assert "Traceback" not in result.stderr, result.stderr


def fake_checkpoint(logdir, names=("ckpt-100",), **settings):
  """A run's checkpoint files as checkpoints.py reads them (no tensors: nothing here reads
  them before TensorFlow), with settings.json of the toy level's settings and `settings`."""
  directory = checkpoints.checkpoint_dir(str(logdir))
  os.makedirs(directory)
  for name in names:
    for suffix in (".index", ".data-00000-of-00001"):
      with open(os.path.join(directory, name + suffix), "wb") as f:
        f.write(b"not read before TensorFlow")
  checkpoints.write_state(directory, list(names))
  with open(checkpoints.settings_path(str(logdir)), "w") as f:
    json.dump({**TOY_SETTINGS, **settings}, f)


def test_the_wrapper_sees_tensorflow_import():
  """The mark is written when TensorFlow does import (else the tests below prove nothing)."""
  result = subprocess.run([sys.executable, "-c", _WRAPPER.replace(
      'runpy.run_path(os.path.join', 'import tensorflow  # noqa\n#')], capture_output=True,
                          text=True, timeout=240, cwd=REPO_DIR)
  assert TENSORFLOW_MARK in result.stderr, result.stderr


def test_a_test_without_a_logdir_is_refused_and_creates_nothing(tmp_path):
  logdir = tmp_path / "not_there" / "run"
  result = run_experiment("--mode=test", TOY, f"--logdir={logdir}")
  assert_answered_before_tensorflow(
      result, f"No checkpoint in {logdir}/checkpoints: train first (--mode=train "
      f"--logdir={logdir}).")
  assert not (tmp_path / "not_there").exists()


def test_a_test_of_an_empty_logdir_leaves_it_as_it_was(tmp_path):
  result = run_experiment("--mode=test", TOY, f"--logdir={tmp_path}")
  assert_answered_before_tensorflow(result, "No checkpoint in")
  assert os.listdir(tmp_path) == []  # No .lock, no evaluation/.


@pytest.mark.parametrize("mode", ["train", "test"])
def test_a_checkpoint_of_other_settings_is_refused(tmp_path, mode):
  fake_checkpoint(tmp_path)
  result = run_experiment(f"--mode={mode}", TOY, f"--logdir={tmp_path}", "--width=30",
                          "--height=30")
  assert_answered_before_tensorflow(
      result, f"The checkpoint in {tmp_path}/checkpoints was trained with different settings "
      "(--width: checkpoint 20, now 30, --height: checkpoint 20, now 30). Rerun with the "
      "checkpoint's values, or use another --logdir.")
  assert not (tmp_path / "evaluation").exists()


def test_a_checkpoint_trained_without_popart_names_the_flag(tmp_path):
  """A settings file from before PopArt (issue 42) means PopArt off: resuming with it on (the
  gymnasium levels' default now) is refused, naming the flag to pass."""
  fake_checkpoint(tmp_path)
  result = run_experiment("--mode=train", TOY, f"--logdir={tmp_path}", "--popart=true")
  assert_answered_before_tensorflow(
      result, f"The checkpoint in {tmp_path}/checkpoints was trained with different settings "
      "(--popart: checkpoint False, now True). Rerun with the checkpoint's values, or use "
      "another --logdir.")


def test_a_restore_checkpoint_that_is_not_there_is_refused(tmp_path):
  fake_checkpoint(tmp_path, names=("ckpt-100", "ckpt-200"))
  result = run_experiment("--mode=train", TOY, f"--logdir={tmp_path}",
                          "--restore_checkpoint=ckpt-150")
  assert_answered_before_tensorflow(
      result, f"--restore_checkpoint=ckpt-150: no such checkpoint in {tmp_path}/checkpoints "
      "(give the name of one there); available: ckpt-100, ckpt-200.")


@pytest.mark.parametrize("mode", ["train", "test"])
def test_a_logdir_that_is_a_file_is_refused(tmp_path, mode):
  path = tmp_path / "a_file"
  path.write_text("not a directory")
  result = run_experiment(f"--mode={mode}", TOY, f"--logdir={path}")
  assert_answered_before_tensorflow(result, f"--logdir={path} is a file, not a directory")


def test_a_logdir_that_cannot_be_written_is_refused():
  result = run_experiment("--mode=train", TOY, "--logdir=/proc/no_such_run")
  assert_answered_before_tensorflow(result, "--logdir=/proc/no_such_run cannot be written")


@pytest.mark.parametrize("mode", ["train", "test"])
def test_a_logdir_held_by_a_live_run_is_refused(tmp_path, mode):
  fake_checkpoint(tmp_path)
  with run_directory.hold(str(tmp_path), role="train of toy/lit_side"):
    result = run_experiment(f"--mode={mode}", TOY, f"--logdir={tmp_path}")
  assert_answered_before_tensorflow(result, f"--logdir={tmp_path} is in use by process "
                                    f"{os.getpid()}")


def test_the_checks_before_tensorflow_compare_only_what_the_flags_know(tmp_path):
  """A network whose torso the environment chooses (--torso unset) is not refused for it."""
  fake_checkpoint(tmp_path, torso="mlp")
  current = {k: v for k, v in TOY_SETTINGS.items() if k != "torso"}
  checkpoints.check_before_restore(str(tmp_path), current, required=True)
  with pytest.raises(checkpoints.UnusableCheckpoint, match="--torso: checkpoint 'mlp'"):
    checkpoints.check_before_restore(str(tmp_path), TOY_SETTINGS)


# Ctrl-C (SIGINT) or SIGTERM while TensorFlow imports: README's stop line, no traceback.


def _assert_stopped_while_importing(result, line, code):
  text = result.stdout + result.stderr
  assert SIGNAL_MARK in result.stderr, text  # The signal came while the module imported.
  assert result.returncode == code, text
  assert line in result.stdout, text
  assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


@pytest.mark.timeout(300)
def test_ctrl_c_while_tensorflow_imports_stops_training_with_the_stop_line(tmp_path):
  fake_checkpoint(tmp_path)
  before = sorted(os.listdir(checkpoints.checkpoint_dir(str(tmp_path))))
  result = run_experiment("--mode=train", TOY, f"--logdir={tmp_path}", stop_signal="SIGINT")
  _assert_stopped_while_importing(
      result, f"Stopped: interrupted (SIGINT) before training started; checkpoint "
      f"{tmp_path}/checkpoints/ckpt-100 unchanged at 100 frames.", 0)
  assert sorted(os.listdir(checkpoints.checkpoint_dir(str(tmp_path)))) == before


@pytest.mark.timeout(300)
def test_sigterm_while_tensorflow_imports_stops_a_test_with_the_stop_line(tmp_path):
  fake_checkpoint(tmp_path)
  result = run_experiment("--mode=test", TOY, f"--logdir={tmp_path}", stop_signal="SIGTERM")
  _assert_stopped_while_importing(
      result, "Stopped: interrupted (SIGTERM) before testing started; nothing was played.", 130)
  assert not (tmp_path / "evaluation").exists()


def test_ctrl_c_while_the_command_loads_prints_a_line_not_a_traceback(tmp_path):
  """Before experiment_main's handling starts (numpy loads with the settings' modules)."""
  result = run_experiment("--mode=train", TOY, f"--logdir={tmp_path}/run", stop_signal="SIGINT",
                          signal_at="numpy")
  _assert_stopped_while_importing(
      result, "Stopped: interrupted (SIGINT) while starting; nothing was started.", 0)
  assert not (tmp_path / "run").exists()


# No resource_tracker warning at any stop.


_PARENT = textwrap.dedent("""
    import os, signal, sys, time
    from scalable_agent_tf2.environments import process
    from tests.environments.test_process import ScriptedEnvironment
    env = process.EnvironmentProcess(ScriptedEnvironment)
    env.initial()
    print(env._shared.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # No clean-up of any kind (as a third Ctrl-C's quit).
""")


@pytest.mark.timeout(120)
def test_a_killed_parent_leaves_no_shared_memory_and_no_warning():
  """The frame buffer's name is unlinked once the child has mapped it (process.py): however
  the parent ends, the resource tracker has nothing to report and /dev/shm nothing left."""
  result = subprocess.run([sys.executable, "-c", _PARENT], capture_output=True, text=True,
                          timeout=100, cwd=REPO_DIR)
  assert result.returncode == -signal.SIGKILL, result.stderr
  name = result.stdout.split()[-1].lstrip("/")
  assert not os.path.exists(f"/dev/shm/{name}")
  assert "resource_tracker" not in result.stderr, result.stderr


def _start(flags):
  return subprocess.Popen([sys.executable, "-u", "experiment.py", *flags],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO_DIR,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stop_when(process, starts_with, signum):
  """Sends `signum` once a stdout line starts with `starts_with`; (rc, stdout, stderr). The
  resource tracker writes its warning after the process ends, to the stderr it inherited:
  communicate() returns once it too has closed it."""
  lines = []
  for line in process.stdout:
    lines.append(line)
    if line.startswith(starts_with):
      break
  time.sleep(2)  # Environments step, frames move through the shared memory.
  process.send_signal(signum)
  out, err = process.communicate(timeout=240)
  return process.returncode, "".join(lines) + out, err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_then_test_on_the_toy_level_stopped_by_sigterm_warn_of_no_leak(tmp_path):
  logdir = f"--logdir={tmp_path}"
  code, out, err = _stop_when(_start(["--mode=train", TOY, logdir, "--log_secs=1"]),
                              "frames ", signal.SIGTERM)
  assert code == 0, out + err
  assert "Stopped: interrupted (SIGTERM)" in out, out
  assert "resource_tracker" not in err, err
  code, out, err = _stop_when(_start(["--mode=test", TOY, logdir, "--test_num_episodes=100000"]),
                              "Testing ", signal.SIGTERM)
  assert code == 130, out + err
  assert "Stopped: interrupted (SIGTERM) while testing; no results written." in out, out
  assert "resource_tracker" not in err and "Traceback" not in err, err
  assert not (tmp_path / "evaluation").exists()


@pytest.mark.parametrize("signal_at", ["numpy", "absl"])
def test_sigterm_while_the_command_loads_prints_a_line_not_a_traceback(tmp_path, signal_at):
  """Issue 41, item 7: SIGTERM 0.5 s after the start (the command's own modules still
  loading) ended the process by the default action: rc -15, no `Stopped:` line."""
  result = run_experiment("--mode=train", TOY, f"--logdir={tmp_path}/run",
                          stop_signal="SIGTERM", signal_at=signal_at)
  _assert_stopped_while_importing(
      result, "Stopped: interrupted (SIGTERM) while starting; nothing was started.", 0)
  assert not (tmp_path / "run").exists()
