"""benchmarks/studies/runs.py: a study's runs survive the end of a session (finished runs are not
rerun, interrupted ones resume and their wall time counts only time spent running)."""
import argparse
import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks.studies import runs
from scalable_agent_tf2.runfiles import plot as learning_curves


def _command(counter_path):
  """A stand-in for a training run: counts its launches, logs one progress record."""
  script = ("import json, sys, time; open(sys.argv[1], 'a').write('x');"
            "open(sys.argv[2], 'a').write(json.dumps(dict(kind='progress', time=time.time(),"
            " frames=10, updates=1)) + '\\n')")
  return [sys.executable, "-c", script, counter_path,
          os.path.join(os.path.dirname(counter_path), "log.jsonl")]


def _killed_attempt(logdir, command, started, end):
  """Writes the run record of an attempt killed with its session (no return code)."""
  with open(logdir / runs.RUN_FILE, "w") as f:
    json.dump(dict(command=runs.printable(command), returncode=None,
                   attempts=[dict(start=started, end=end)]), f)


def test_a_finished_run_is_not_run_again(tmp_path):
  counter = str(tmp_path / "launches")
  first = runs.run(_command(counter), str(tmp_path), print_fn=lambda line: None)
  second = runs.run(_command(counter), str(tmp_path), print_fn=lambda line: None)
  assert open(counter).read() == "x"
  assert second == first and len(first["attempts"]) == 1 and first["returncode"] == 0


def test_an_interrupted_run_resumes_and_counts_only_running_time(tmp_path):
  command = _command(str(tmp_path / "launches"))
  started = time.time() - 1000.0
  # A first attempt killed with the session: no end; its last progress record was written
  # 5 s after it started.
  _killed_attempt(tmp_path, command, started, None)
  with open(tmp_path / "log.jsonl", "w") as f:
    f.write(json.dumps(dict(kind="progress", time=started + 5.0, frames=5, updates=1)) + "\n")
  record = runs.run(command, str(tmp_path), print_fn=lambda line: None)
  assert open(tmp_path / "launches").read() == "x"
  assert len(record["attempts"]) == 2
  assert record["attempts"][0]["end"] == pytest.approx(started + 5.0)
  second = record["attempts"][1]["end"] - record["attempts"][1]["start"]
  summary = runs.summary(str(tmp_path))
  assert summary["wall_seconds"] == pytest.approx(5.0 + second)  # Not the 1000 s gap.


def test_running_seconds_skip_the_gaps_between_attempts():
  attempts = [dict(start=100.0, end=110.0), dict(start=500.0, end=520.0)]
  assert list(learning_curves.running_seconds(
      attempts, [100.0, 105.0, 110.0, 500.0, 515.0])) == [0.0, 5.0, 10.0, 10.0, 25.0]


def test_a_resumed_runs_training_hours_come_from_its_start_records(tmp_path):
  # Attempt 1: 0-3600 s, checkpoint at 100 frames; attempt 2 starts 10 hours later there.
  logged = [dict(kind="start", time=0.0, frames=0),
            dict(kind="progress", time=1800.0, frames=50, updates=1),
            dict(kind="progress", time=3600.0, frames=100, updates=2),
            dict(kind="start", time=39600.0, frames=100),
            dict(kind="progress", time=43200.0, frames=300, updates=2)]
  with open(tmp_path / "log.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in logged)
  assert learning_curves.attempts_from_log(logged) == [
      dict(start=0.0, end=3600.0), dict(start=39600.0, end=43200.0)]
  hours = learning_curves.training_hours(str(tmp_path), [50, 100, 200, 300])
  assert list(hours) == pytest.approx([0.5, 1.0, 1.5, 2.0])  # Not the 10-hour gap.


def test_a_resumed_runs_curve_drops_the_lost_episodes(tmp_path):
  logged = [(0, 1.0), (100, 2.0), (200, 3.0), (300, 4.0),  # Killed; checkpoint at 100.
            (100, 5.0), (250, 6.0)]
  with open(tmp_path / "log.jsonl", "w") as f:
    for frames, episode_return in logged:
      f.write(json.dumps(dict(kind="episode", level="a", frames=frames,
                              episode_return=episode_return)) + "\n")
  frames, returns = learning_curves.read_episodes(str(tmp_path))["a"]
  assert list(frames) == [0, 100, 100, 250] and list(returns) == [1.0, 2.0, 5.0, 6.0]


def test_episodes_logged_together_are_spread_between_progress_records():
  spread = runs.spread_frames([0, 0, 100, 100, 100, 100, 150])
  assert list(spread) == [0.0, 0.0, 25.0, 50.0, 75.0, 100.0, 150.0]


def test_a_resumed_runs_summary_follows_the_parameters_it_kept(tmp_path):
  # Attempt 1 (1000-1040 s) was killed after its checkpoint at 150 frames; attempt 2 starts
  # there ("start" record). What attempt 1 logged beyond 150 frames is dropped, even the
  # episode at 200 (below the first resumed episode's 250), and updates add up over attempts.
  logged = [dict(kind="start", time=1000.0, frames=0),
            dict(kind="progress", time=1010.0, frames=100, updates=10),
            dict(kind="episode", level="a", frames=200, episode_return=1.0),
            dict(kind="progress", time=1020.0, frames=200, updates=20),
            dict(kind="episode", level="a", frames=300, episode_return=2.0),
            dict(kind="progress", time=1030.0, frames=300, updates=30),
            dict(kind="start", time=2000.0, frames=150),
            dict(kind="episode", level="a", frames=250, episode_return=3.0),
            dict(kind="progress", time=2010.0, frames=250, updates=5),
            dict(kind="episode", level="a", frames=350, episode_return=4.0),
            dict(kind="progress", time=2020.0, frames=350, updates=15)]
  with open(tmp_path / "log.jsonl", "w") as f:
    f.writelines(json.dumps(record) + "\n" for record in logged)
  with open(tmp_path / runs.RUN_FILE, "w") as f:
    json.dump(dict(command="python experiment.py", returncode=0,
                   attempts=[dict(start=1000.0, end=1040.0), dict(start=2000.0, end=2020.0)]),
              f)
  summary = runs.summary(str(tmp_path))
  assert summary["updates"] == 10 + 15 and summary["frames"] == 350
  assert list(summary["curves"]["frames"]) == [250, 350]
  assert list(summary["curves"]["returns"]) == [3.0, 4.0]
  # Running seconds: 40 s of attempt 1, then 10 and 20 s into attempt 2.
  assert list(summary["curves"]["seconds"]) == [50.0, 60.0]
  assert summary["wall_seconds"] == 60.0


def _sleeper(counter_path):
  """A stand-in run that counts its launches and stops cleanly on SIGTERM (as training)."""
  script = ("import signal, sys, time; open(sys.argv[1], 'a').write('x');"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(60)")
  return [sys.executable, "-c", script, counter_path]


def test_the_time_budget_spans_attempts_and_a_changed_command_starts_afresh(tmp_path):
  command = _sleeper(str(tmp_path / "launches"))
  started = time.time() - 1000.0
  # An attempt killed after 28 s of a 30 s budget: the resumed attempt gets the 2 s left.
  _killed_attempt(tmp_path, command, started, started + 28.0)
  record = runs.run(command, str(tmp_path), max_seconds=30.0, print_fn=lambda line: None)
  assert len(record["attempts"]) == 2 and record["returncode"] == 0
  assert record["attempts"][1]["end"] - record["attempts"][1]["start"] < 20.0  # Not 30 s.
  # Another command in the same logdir: the earlier attempts are not its own.
  record = runs.run(command + ["changed"], str(tmp_path), max_seconds=1.0,
                    print_fn=lambda line: None)
  assert len(record["attempts"]) == 1 and open(tmp_path / "launches").read() == "xx"


def test_study_flags_parse_and_the_command_log_keeps_every_line(tmp_path, capsys):
  assert runs.parse_extra_flags("--log_secs=1 --level_name=a=b") == dict(
      log_secs="1", level_name="a=b")
  assert runs.parse_extra_flags("") == {}
  assert runs.parse_seeds("1,2,3") == [1, 2, 3]
  log = runs.command_log(str(tmp_path / "study"))
  log("$ python experiment.py --seed=1")
  log("  done in 3 s")
  assert (tmp_path / "study" / "commands.txt").read_text() == (
      "$ python experiment.py --seed=1\n  done in 3 s\n")
  assert capsys.readouterr().out == "$ python experiment.py --seed=1\n  done in 3 s\n"


def test_a_study_leaves_the_actor_layout_to_the_preset_unless_told():
  parser = argparse.ArgumentParser()
  runs.add_budget_arguments(parser, total_environment_frames=1000, runs_per="level")
  flags = runs.budget_flags(parser.parse_args([]))
  assert "num_actors" not in flags and flags["total_environment_frames"] == 1000
  flags = runs.budget_flags(parser.parse_args(["--num_actors=4", "--extra_flags=--seed=2"]))
  assert (flags["num_actors"], flags["seed"]) == (4, "2")


def _fake_run(logdir, episodes, seconds_per_100_frames):
  """A finished run's logdir: one attempt from t=1000, progress every 100 frames, an episode
  (return = `episodes[i]`) logged with each progress record."""
  os.makedirs(logdir)
  logged = [dict(kind="start", time=1000.0, frames=0)]
  for i, episode_return in enumerate(episodes):
    frames = 100 * (i + 1)
    logged += [dict(kind="episode", level="mujoco/hopper", frames=frames,
                    episode_return=episode_return),
               dict(kind="progress", time=1000.0 + seconds_per_100_frames * (i + 1),
                    frames=frames, updates=i + 1)]
  with open(os.path.join(logdir, "log.jsonl"), "w") as f:
    f.writelines(json.dumps(record) + "\n" for record in logged)
  with open(os.path.join(logdir, runs.RUN_FILE), "w") as f:
    json.dump(dict(command=f"python experiment.py --logdir={logdir}", returncode=0,
                   attempts=[dict(start=1000.0, end=1000.0 + seconds_per_100_frames
                                  * len(episodes))]), f)


def test_impact_vs_impala_compares_at_the_frames_and_the_time_every_run_reached(
    tmp_path, monkeypatch, capsys):
  from benchmarks.studies import impact_vs_impala  # pylint: disable=import-outside-toplevel
  # IMPALA: 4 episodes, 10 s per 100 frames; IMPACT: 2 episodes (200 frames), 30 s each.
  # Common frames 200: IMPALA's return there is the mean of its first two (1, 2); common
  # time 40 s: IMPACT's only episode by then is its first (at 30 s). Seed 2 has no runs yet.
  _fake_run(str(tmp_path / "runs" / "impala" / "seed1"), [1.0, 2.0, 3.0, 4.0], 10.0)
  _fake_run(str(tmp_path / "runs" / "impact" / "seed1"), [10.0, 20.0], 30.0)
  monkeypatch.setattr(sys, "argv", [
      "impact_vs_impala", f"--output_dir={tmp_path}", "--level=mujoco/hopper",
      "--seeds=1,2", "--report_only"])
  impact_vs_impala.main()
  table = open(tmp_path / "impact_vs_impala.md").read()
  assert "return at 200 frames | return at 40 s | test return |" in table
  rows = {line.split(" | ")[0]: line.split(" | ") for line in table.splitlines()
          if line.startswith("| IMPA")}
  assert rows["| IMPALA"][-3:] == ["1.50", "2.50", "n/a |"]  # At 200 frames; at 40 s: all.
  assert rows["| IMPACT"][-3:] == ["15.00", "10.00", "n/a |"]
  assert os.path.getsize(tmp_path / "impact_vs_impala.png") > 0
  assert "already finished" not in capsys.readouterr().out  # Nothing was run.


def test_impact_vs_impala_report_only_says_so_when_there_are_no_runs(tmp_path, monkeypatch):
  from benchmarks.studies import impact_vs_impala  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(sys, "argv", ["impact_vs_impala", f"--output_dir={tmp_path}",
                                    "--report_only"])
  with pytest.raises(SystemExit, match="No runs in"):
    impact_vs_impala.main()


def test_impact_vs_impala_runs_and_reports_only_the_algorithms_asked_for(tmp_path,
                                                                          monkeypatch):
  from benchmarks.studies import impact_vs_impala  # pylint: disable=import-outside-toplevel
  _fake_run(str(tmp_path / "runs" / "impala"), [1.0, 2.0], 10.0)
  _fake_run(str(tmp_path / "runs" / "impact"), [3.0, 4.0], 10.0)
  monkeypatch.setattr(sys, "argv", ["impact_vs_impala", f"--output_dir={tmp_path}",
                                    "--level=mujoco/hopper", "--algorithms=impala",
                                    "--report_only"])
  impact_vs_impala.main()
  table = open(tmp_path / "impact_vs_impala.md").read()
  assert "| IMPALA | 1 |" in table and "| IMPACT" not in table
  monkeypatch.setattr(sys, "argv", ["impact_vs_impala", f"--output_dir={tmp_path}",
                                    "--algorithms=impala,ppo", "--report_only"])
  with pytest.raises(SystemExit, match="--algorithms=impala,ppo: choose from impala, impact"):
    impact_vs_impala.main()


def _fake_test_command(logdir, mean_return):
  """A stand-in for experiment.py --mode=test: counts its launches, writes results.json."""
  script = ("import json, os, sys; open(sys.argv[1] + '/launches', 'a').write('x');"
            "os.makedirs(sys.argv[1] + '/evaluation', exist_ok=True);"
            "json.dump(dict(levels=[dict(level='mujoco/hopper', episodes=3, "
            f"mean_return={mean_return})], summary={{}}), "
            "open(sys.argv[1] + '/evaluation/results.json', 'w'))")
  return [sys.executable, "-c", script, str(logdir)]


def test_a_runs_test_is_played_once_per_checkpoint(tmp_path):
  os.makedirs(tmp_path / "checkpoints")
  open(tmp_path / "checkpoints" / "ckpt-1.index", "w").close()
  quiet = lambda line: None
  assert runs.test_return(_fake_test_command(tmp_path, 12.5), str(tmp_path), quiet) == (12.5, 3)
  assert runs.test_return(_fake_test_command(tmp_path, 99.0), str(tmp_path), quiet) == (12.5, 3)
  assert open(tmp_path / "launches").read() == "x"
  # A newer checkpoint (the run was resumed) is tested again.
  later = os.path.getmtime(tmp_path / runs.TEST_RESULTS) + 10
  os.utime(tmp_path / "checkpoints" / "ckpt-1.index", (later, later))
  assert runs.test_return(_fake_test_command(tmp_path, 30.0), str(tmp_path), quiet) == (30.0, 3)
  assert open(tmp_path / "launches").read() == "xx"


def test_the_study_reports_each_runs_test_return(tmp_path, monkeypatch):
  from benchmarks.studies import impact_vs_impala  # pylint: disable=import-outside-toplevel
  _fake_run(str(tmp_path / "runs" / "impala"), [1.0, 2.0], 10.0)
  _fake_run(str(tmp_path / "runs" / "impact"), [3.0, 4.0], 10.0)
  # IMPACT's run was tested (3 episodes, mean 250), IMPALA's not.
  subprocess.run(_fake_test_command(tmp_path / "runs" / "impact", 250.0), check=True)
  monkeypatch.setattr(sys, "argv", ["impact_vs_impala", f"--output_dir={tmp_path}",
                                    "--level=mujoco/hopper", "--report_only"])
  impact_vs_impala.main()
  table = open(tmp_path / "impact_vs_impala.md").read()
  assert "| test return (3 episodes) |" in table
  rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| IMPA")}
  assert rows["| IMPACT"].endswith("| 250.00 |") and rows["| IMPALA"].endswith("| n/a |")


def test_a_test_command_is_the_training_command_in_test_mode():
  command = runs.experiment_command("/tmp/run", mode="test", test_num_episodes=5, seed=2)
  assert command[2:] == ["--mode=test", "--logdir=/tmp/run", "--test_num_episodes=5",
                         "--seed=2"]
  assert runs.experiment_command("/tmp/run", seed=2)[2] == "--mode=train"


def test_a_running_or_killed_attempt_counts_up_to_its_last_progress_record(tmp_path):
  logdir = tmp_path / "run"
  _fake_run(str(logdir), [1.0, 2.0, 3.0], 10.0)  # Progress at 1010, 1020, 1030.
  record = json.load(open(logdir / runs.RUN_FILE))
  record["attempts"][-1]["end"], record["returncode"] = None, None
  json.dump(record, open(logdir / runs.RUN_FILE, "w"))
  summary = runs.summary(str(logdir))
  assert summary["wall_seconds"] == 30.0 and summary["frames_per_second"] == 10.0
  assert list(summary["curves"]["seconds"]) == [10.0, 20.0, 30.0]
