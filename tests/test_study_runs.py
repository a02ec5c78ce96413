"""benchmarks/runs.py: a study's runs survive the end of a session (finished runs are not
rerun, interrupted ones resume and their wall time counts only time spent running)."""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import runs  # pylint: disable=wrong-import-position


def _command(counter_path):
  """A stand-in for a training run: counts its launches, logs one progress record."""
  script = ("import json, sys, time; open(sys.argv[1], 'a').write('x');"
            "open(sys.argv[2], 'a').write(json.dumps(dict(kind='progress', time=time.time(),"
            " frames=10, updates=1)) + '\\n')")
  return [sys.executable, "-c", script, counter_path,
          os.path.join(os.path.dirname(counter_path), "log.jsonl")]


def test_a_finished_run_is_not_run_again(tmp_path):
  counter = str(tmp_path / "launches")
  first = runs.run(_command(counter), str(tmp_path), print_fn=lambda line: None)
  second = runs.run(_command(counter), str(tmp_path), print_fn=lambda line: None)
  assert open(counter).read() == "x"
  assert second == first and len(first["attempts"]) == 1 and first["returncode"] == 0


def test_an_interrupted_run_resumes_and_counts_only_running_time(tmp_path):
  counter = str(tmp_path / "launches")
  command = _command(counter)
  started = time.time() - 1000.0
  # A first attempt killed with the session: no end, no return code; its last progress
  # record was written 5 s after it started.
  with open(tmp_path / runs.RUN_FILE, "w") as f:
    json.dump(dict(command=runs.printable(command), returncode=None,
                   attempts=[dict(start=started, end=None)]), f)
  with open(tmp_path / "log.jsonl", "w") as f:
    f.write(json.dumps(dict(kind="progress", time=started + 5.0, frames=5, updates=1)) + "\n")
  record = runs.run(command, str(tmp_path), print_fn=lambda line: None)
  assert open(counter).read() == "x"
  assert len(record["attempts"]) == 2
  assert record["attempts"][0]["end"] == pytest.approx(started + 5.0)
  second = record["attempts"][1]["end"] - record["attempts"][1]["start"]
  summary = runs.summary(str(tmp_path))
  assert summary["wall_seconds"] == pytest.approx(5.0 + second)  # Not the 1000 s gap.


def test_running_seconds_skip_the_gaps_between_attempts():
  record = dict(attempts=[dict(start=100.0, end=110.0), dict(start=500.0, end=520.0)])
  assert list(runs._running_seconds(record, [100.0, 105.0, 110.0, 500.0, 515.0])) == [
      0.0, 5.0, 10.0, 10.0, 25.0]


def test_a_resumed_runs_curve_drops_the_lost_episodes(tmp_path):
  import plot_learning_curve  # pylint: disable=import-outside-toplevel
  logged = [(0, 1.0), (100, 2.0), (200, 3.0), (300, 4.0),  # Killed; checkpoint at 100.
            (100, 5.0), (250, 6.0)]
  with open(tmp_path / "log.jsonl", "w") as f:
    for frames, episode_return in logged:
      f.write(json.dumps(dict(kind="episode", level="a", frames=frames,
                              episode_return=episode_return)) + "\n")
  frames, returns = plot_learning_curve.read_episodes(str(tmp_path))["a"]
  assert list(frames) == [0, 100, 100, 250] and list(returns) == [1.0, 2.0, 5.0, 6.0]


def test_episodes_logged_together_are_spread_between_progress_records():
  spread = runs.spread_frames([0, 0, 100, 100, 100, 100, 150])
  assert list(spread) == [0.0, 0.0, 25.0, 50.0, 75.0, 100.0, 150.0]
