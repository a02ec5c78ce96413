"""The run directory's checks and its one-process lock (scalable_agent_tf2/runfiles/run_directory.py)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from scalable_agent_tf2.runfiles import run_directory

_HOLDER = textwrap.dedent("""
    import sys, time
    from scalable_agent_tf2.runfiles import run_directory
    run_directory.hold(sys.argv[1], "training")
    print("held", flush=True)
    time.sleep(600)
""")


def _start_holder(logdir):
  process = subprocess.Popen([sys.executable, "-c", _HOLDER, logdir], stdout=subprocess.PIPE,
                             text=True)
  assert process.stdout.readline().strip() == "held"
  return process


def test_a_file_is_not_a_logdir(tmp_path):
  path = tmp_path / "file"
  path.write_text("x")
  with pytest.raises(run_directory.RunDirectoryError, match="is a file"):
    run_directory.check_usable(str(path))


def test_a_path_under_proc_is_refused():
  with pytest.raises(run_directory.RunDirectoryError, match="cannot be written"):
    run_directory.check_usable("/proc/self/agent_logdir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_refused(tmp_path):
  tmp_path.chmod(0o500)
  try:
    with pytest.raises(run_directory.RunDirectoryError, match="cannot be written"):
      run_directory.check_usable(str(tmp_path / "run"))
  finally:
    tmp_path.chmod(0o700)


def test_a_second_process_is_refused_with_the_holder_named(tmp_path):
  logdir = str(tmp_path / "run")
  holder = _start_holder(logdir)
  try:
    with pytest.raises(run_directory.RunDirectoryError) as raised:
      run_directory.hold(logdir, "test")
    message = str(raised.value)
    assert f"process {holder.pid}" in message
    assert "training" in message
  finally:
    holder.kill()
    holder.wait()


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
  logdir = str(tmp_path / "run")
  holder = _start_holder(logdir)
  os.kill(holder.pid, signal.SIGKILL)
  holder.wait()
  assert os.path.exists(os.path.join(logdir, run_directory.LOCK_FILE))
  with run_directory.hold(logdir, "training") as lock:
    assert lock.logdir == logdir


def test_release_lets_the_next_run_in(tmp_path):
  logdir = str(tmp_path / "run")
  first = run_directory.hold(logdir, "training")
  first.release()
  second = run_directory.hold(logdir, "training")
  second.release()


def test_the_lock_is_held_within_one_process_too(tmp_path):
  # A second hold in the same process (two runs in one test, say) is refused as well: flock
  # locks belong to open files, not processes.
  logdir = str(tmp_path / "run")
  with run_directory.hold(logdir, "training"):
    with pytest.raises(run_directory.RunDirectoryError, match=f"process {os.getpid()}"):
      run_directory.hold(logdir, "training")


# Slow tier (two whole experiment.py starts): the default tier keeps the lock's refusal of a
# second holder, naming the process that holds it (the test above).
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_training_on_a_logdir_in_use_is_refused(tmp_path):
  logdir = str(tmp_path / "run")
  command = [sys.executable, "experiment.py", "--mode=train", "--level_name=toy/lit_side",
             "--total_environment_frames=100000000", f"--logdir={logdir}"]
  first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    for line in first.stdout:
      if line.startswith("frames"):
        break
    second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"is in use by process {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    # Refused before any work: the second run wrote no checkpoint and no log line.
    assert first.poll() is None
  finally:
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
  assert first.returncode == 0


@pytest.mark.parametrize("holder_role, role, says, not_said", [
    ("train of toy/lit_side", "train of toy/lit_side",
     "overwrite each other's checkpoints", "results"),
    ("train of toy/lit_side", "test of toy/lit_side",
     "restore a checkpoint while the training writes new ones", "overwrite"),
    ("test of toy/lit_side", "train of toy/lit_side",
     "restore a checkpoint while the training writes new ones", "overwrite"),
    ("test of toy/lit_side", "test of toy/lit_side",
     "write over each other's results (evaluation/results.json", "checkpoints"),
])
def test_the_refusal_says_what_the_two_runs_would_do_to_each_other(
    tmp_path, holder_role, role, says, not_said):
  """A test writes no checkpoint: the refusal of a test said that the two runs "overwrite
  each other's checkpoints"."""
  logdir = str(tmp_path / "run")
  with run_directory.hold(logdir, holder_role):
    with pytest.raises(run_directory.RunDirectoryError) as refused:
      run_directory.hold(logdir, role)
  message = str(refused.value)
  assert f"({holder_role}, started" in message, message
  clash = message.rsplit(": stop that process", 1)[0].rsplit("). ", 1)[1]
  assert says in clash and not_said not in clash, message
