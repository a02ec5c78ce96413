"""Test mode's results files, results.json and results.csv: a kill, a full disk or a stop
signal at the moment they are written leaves the previous results or this test's, whole, and
the `Stopped:` line says which.

The faults land at the exact write: an audit hook in the experiment.py process sends the
signal when the process opens a results file for writing (a `python -c` wrapper, as
test_before_tensorflow.py's), and a file object that writes half its text, then fails.
"""
import builtins
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from scalable_agent_tf2.run import evaluation

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD_RUN = os.path.join(REPO_DIR, "tests", "data", "run_before_rooms")
PREVIOUS = {"results.json": '{"previous": true}', "results.csv": "previous\n"}

# experiment.py with sys.argv[1:]; SIGNAL_AT_OPEN=<name>:<signal> sends <signal> to this
# process when it first opens a file whose name starts with <name> for writing.
_WRAPPER = textwrap.dedent(f"""
    import os, runpy, signal, sys
    name, _, signal_name = os.environ["SIGNAL_AT_OPEN"].partition(":")
    sent = []
    def hook(event, args):
      if event != "open" or sent or not isinstance(args[0], str):
        return
      path, mode, flags = args
      writing = "w" in (mode or "") or flags & (os.O_WRONLY | os.O_RDWR)
      if writing and os.path.basename(path).startswith(name):
        sent.append(path)
        os.write(1, ("[signal at the open of " + path + "]\\n").encode())
        os.kill(os.getpid(), getattr(signal, signal_name))
    sys.addaudithook(hook)
    sys.path[0] = {REPO_DIR!r}
    sys.argv = ["experiment.py"] + sys.argv[1:]
    runpy.run_path(os.path.join({REPO_DIR!r}, "experiment.py"), run_name="__main__")
""")


def _logdir_with_previous_results(tmp_path):
  """A logdir holding a toy/lit_side checkpoint and an earlier test's results files."""
  logdir = tmp_path / "run"
  shutil.copytree(os.path.join(OLD_RUN, "checkpoints"), logdir / "checkpoints")
  (logdir / evaluation.RESULTS_SUBDIR).mkdir()
  for name, text in PREVIOUS.items():
    (logdir / evaluation.RESULTS_SUBDIR / name).write_text(text)
  return logdir


def _results(logdir):
  directory = logdir / evaluation.RESULTS_SUBDIR
  return {name: (directory / name).read_text() for name in PREVIOUS}


def _state(results):
  """"previous" or "this test's": each file whole, both from the same test."""
  if results == PREVIOUS:
    return "previous"
  levels = json.loads(results["results.json"])["levels"]
  assert [row["level"] for row in levels] == ["toy/lit_side"], results
  assert results["results.csv"].startswith("level,test_level,episodes,mean_return"), results
  assert results["results.csv"].count("\n") == 2, results  # The header and one level.
  return "this test's"


def _test_with_signal_at_open(logdir, name, signal_name):
  env = dict(os.environ, SIGNAL_AT_OPEN=f"{name}:{signal_name}")
  return subprocess.run(
      [sys.executable, "-c", _WRAPPER, "--mode=test", "--level_name=toy/lit_side",
       f"--logdir={logdir}", "--num_actors=1", "--test_num_episodes=2"],
      capture_output=True, text=True, timeout=240, cwd=REPO_DIR, env=env)


@pytest.mark.timeout(300)
def test_a_sigkill_while_the_results_are_written_leaves_both_files_of_one_test(tmp_path):
  """The kill lands when results.csv is opened: results.json was rewritten in place before
  it, beside the previous results.csv."""
  logdir = _logdir_with_previous_results(tmp_path)
  result = _test_with_signal_at_open(logdir, "results.csv", "SIGKILL")
  assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
  assert "[signal at the open of" in result.stdout, result.stdout + result.stderr
  assert _state(_results(logdir)) == "previous"


@pytest.mark.timeout(300)
def test_a_sigterm_while_the_results_are_written_waits_for_both_and_says_so(tmp_path):
  """It printed "no results written" and exited 130, having rewritten results.json and
  emptied results.csv."""
  logdir = _logdir_with_previous_results(tmp_path)
  result = _test_with_signal_at_open(logdir, "results.csv", "SIGTERM")
  out = result.stdout
  assert result.returncode == 130, out + result.stderr
  assert "Traceback" not in result.stderr, result.stderr
  directory = logdir / evaluation.RESULTS_SUBDIR
  assert (f"Stopped: interrupted (SIGTERM) while writing the results; both were written "
          f"first: {directory}/results.json, {directory}/results.csv.") in out, out
  assert _state(_results(logdir)) == "this test's"
  assert not [name for name in os.listdir(directory) if name not in PREVIOUS], (
      os.listdir(directory))  # No temporary file left.


class _Cut(BaseException):
  """The process ends in the middle of a write (what a SIGKILL or a power loss does)."""


class _FileCutShort:
  """A file object that writes the first half of its first write, then the process ends."""

  def __init__(self, file_object):
    self._file = file_object

  def write(self, text):
    self._file.write(text[:len(text) // 2])
    self._file.flush()
    raise _Cut()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self._file.close()

  def __getattr__(self, name):
    return getattr(self._file, name)


@pytest.mark.parametrize("cut", ["results.json", "results.csv"])
def test_a_write_cut_short_leaves_the_previous_results_whole(tmp_path, monkeypatch, cut):
  """results.json was left at half its text (0 bytes when the kill came before the first
  write), or rewritten beside a half results.csv."""
  directory = tmp_path / evaluation.RESULTS_SUBDIR
  directory.mkdir()
  for name, text in PREVIOUS.items():
    (directory / name).write_text(text)
  real_open = builtins.open

  def open_cut_short(file, mode="r", *args, **kwargs):
    opened = real_open(file, mode, *args, **kwargs)
    if "w" in mode and os.path.basename(str(file)).startswith(cut):
      return _FileCutShort(opened)
    return opened
  monkeypatch.setattr(builtins, "open", open_cut_short)
  row = dict(level="toy/lit_side", episodes=2, mean_return=1.0, std_return=0.0,
             mean_length=10.0)
  with pytest.raises(_Cut):
    evaluation.write_results([row], {}, str(directory))
  monkeypatch.undo()
  assert {name: (directory / name).read_text() for name in PREVIOUS} == PREVIOUS
