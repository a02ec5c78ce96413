"""benchmarks/tools/call_path.py: the files one learner update and one actor step run through,
as a reader follows them (the measure of how many files a change to the loss, or to acting,
has to read), within the bound of 7 files and 20 calls from one file into another, and
docs/ARCHITECTURE.md's reading path as the tool prints it."""
import os

import pytest

from benchmarks.tools import call_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def paths():
  return call_path.measured_paths()


def test_the_learner_update_path_is_recorded_from_the_update_to_vtrace_and_the_optimizer(
    paths):
  summary = paths["learner_update"]
  files = summary["files"]
  # The reading order starts at the learner's update and reaches V-trace's math and the
  # optimizer's step: the two ends of the path a researcher changing the loss follows.
  assert files[0] == "scalable_agent_tf2/learning/learner.py"
  assert summary["entries"][files[0]][0] == "Learner.update"
  assert "scalable_agent_tf2/learning/vtrace.py" in files
  assert "scalable_agent_tf2/learning/optimizers.py" in files
  assert summary["num_files"] == len(files) == len(set(files))
  # Every recorded crossing leaves one of the path's files for another of them.
  for call in summary["cross_file_calls"]:
    caller, callee = call.split(" -> ")
    caller_file, callee_file = caller.split(":")[0], callee.split(":")[0]
    assert caller_file != callee_file and {caller_file, callee_file} <= set(files)
    assert callee.split(":")[1] in summary["entries"][callee_file]
  assert summary["num_cross_file_calls"] == len(summary["cross_file_calls"]) > 0
  assert summary["num_cross_file_call_sites"] >= summary["num_cross_file_calls"]


def test_the_actor_step_path_goes_from_the_loop_through_the_network_to_the_games(paths):
  files = paths["actor_step"]["files"]
  assert files[0] == "scalable_agent_tf2/acting/actor.py"
  assert "scalable_agent_tf2/agent/networks.py" in files
  assert "scalable_agent_tf2/environments/atari_vector.py" in files
  # No instruction on Atari: the step never enters the language channel.
  assert "scalable_agent_tf2/agent/language.py" not in files


@pytest.mark.parametrize("name", ["learner_update", "actor_step"])
def test_each_path_stays_within_seven_files_and_twenty_cross_file_calls(paths, name):
  summary = paths[name]
  assert summary["num_files"] <= call_path.MAX_FILES, summary["files"]
  assert summary["num_cross_file_calls"] <= call_path.MAX_CROSS_FILE_CALLS, (
      summary["cross_file_calls"])


def test_architecture_names_every_file_of_both_paths_in_reading_order(paths):
  with open(os.path.join(REPO, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
    document = f.read()
  printed = call_path.markdown(paths)
  assert printed in document, ("docs/ARCHITECTURE.md's reading path differs from `python -m "
                               "benchmarks.tools.call_path --markdown`; paste its output.")
  for summary in paths.values():
    for filename in summary["files"]:
      assert f"`{filename}`" in printed
