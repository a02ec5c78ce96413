"""benchmarks/tools/call_path.py: the files one learner update runs through, as a reader follows
it (the measure of how many files a change to the loss has to read)."""
from benchmarks.tools import call_path


def test_the_learner_update_path_is_recorded_from_the_update_to_vtrace_and_the_optimizer():
  summary = call_path.learner_update_path()
  files = summary["files"]
  # The reading order starts at the learner's update and reaches V-trace's math and the
  # optimizer's step: the two ends of the path a researcher changing the loss follows.
  assert files[0] == "scalable_agent_tf2/learning/learner.py"
  assert "scalable_agent_tf2/learning/vtrace.py" in files
  assert "scalable_agent_tf2/learning/optimizers.py" in files
  assert summary["num_files"] == len(files) == len(set(files))
  # Every recorded crossing leaves one of the path's files for another of them.
  for call in summary["cross_file_calls"]:
    caller, callee = call.split(" -> ")
    caller_file, callee_file = caller.split(":")[0], callee.split(":")[0]
    assert caller_file != callee_file and {caller_file, callee_file} <= set(files)
  assert summary["num_cross_file_calls"] == len(summary["cross_file_calls"]) > 0
  assert summary["num_cross_file_call_sites"] >= summary["num_cross_file_calls"]
