"""benchmarks/peers: resuming Sample Factory's learning run (sample_factory_pong.py
--mode=learning) after a stop or a kill, on synthetic logs and games of several launches and
with a stand-in for Sample Factory: the launches' files kept, episodes.csv stitched (frames
from each launch's reports, running seconds, games trained again dropped), the resume asked
of Sample Factory, a run of another setting refused. Without Sample Factory's venv."""
import csv
import datetime
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from benchmarks.peers import learning_side_by_side as lsbs
from benchmarks.peers import sample_factory_pong as sfp

T0 = 1_800_000_000.0  # Launch 1's start (unix time).


def _stamp(when):
  return datetime.datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def _report(when, frames, samples):
  """A 5-second report as Sample Factory 2.1.1 writes it to the log (a real line, colours
  included, with its time, frames and samples replaced)."""
  return (f"\x1b[36m[{_stamp(when)}][10303] Fps is (10 sec: 3840.0, 60 sec: 2503.1, 300 sec: "
          f"2503.1). Total num frames: {frames}. Throughput: 0: 606.2. Samples: {samples}. "
          "Policy #0 lag: (min: 0.0, avg: 0.7, max: 2.0)\x1b[0m\n")


def _loaded(when, frames):
  """The learner's line after it restored the checkpoint at frames (learner.py)."""
  return (f"\x1b[36m[{_stamp(when)}][10322] Loaded experiment state at "
          f"self.train_step={frames // 640}, self.env_steps={frames}\x1b[0m\n")


def _write_launch(output_dir, index, started, lines, games, ended=None):
  """One launch's log and games (one CSV per worker, as GameLog appends them) and its
  record appended to launches.json."""
  log, games_dir = sfp.launch_files(index)
  with open(os.path.join(output_dir, log), "w") as f:
    f.write(f"[{_stamp(started + 1)}][10303] Starting all processes...\n")
    f.writelines(lines)
  os.makedirs(os.path.join(output_dir, games_dir))
  for worker, rows in enumerate((games[::2], games[1::2])):
    with open(os.path.join(output_dir, games_dir, f"games_{worker}.csv"), "w") as f:
      f.writelines(f"{when:.3f},{episode_return:g},7141\n" for when, episode_return in rows)
  launches = sfp.read_launches(output_dir) if index > 1 else []
  record = dict(log=log, games=games_dir, started=started, pid=99_999_999)
  if ended is not None:
    record["ended"] = ended
  sfp.write_launches(output_dir, launches + [record])


def _three_launches(output_dir):
  """Launch 1 (killed: no end recorded; its last checkpoint at 100,000 frames, its reports
  to 160,000), launch 2 (killed while starting: no report), launch 3 (resumed from
  100,000, stopped cleanly at 200,000), with gaps between them (the machine's other work)."""
  os.makedirs(output_dir, exist_ok=True)
  # Launch 1: 0 -> 160,000 frames from T0+40 to T0+120 (2,000 frames/s); a game every 10 s
  # from T0+60: at 40,000, 60,000, ..., 160,000 frames; the last line (a report) at T0+120.
  _write_launch(output_dir, 1, T0,
                [_report(T0 + 40 + 5 * i, 10_000 * i, 2_500 * i) for i in range(17)],
                [(T0 + 60 + 10 * i, -10.0 + i) for i in range(7)])
  # Launch 2, 1,000 s later: setup only, killed 30 s after its start.
  _write_launch(output_dir, 2, T0 + 1_000, [], [])
  with open(os.path.join(output_dir, sfp.launch_files(2)[0]), "a") as f:
    f.write(f"[{_stamp(T0 + 1_030)}][20000] Initializing the learner...\n")
  # Launch 3, from T0+5,000: the learner loads the checkpoint at 100,000 frames; reports
  # from T0+5,040 (100,000) to T0+5,090 (200,000); games at 120,000, 160,000, 200,000.
  _write_launch(output_dir, 3, T0 + 5_000,
                [_loaded(T0 + 5_020, 100_000)]
                + [_report(T0 + 5_040 + 5 * i, 100_000 + 10_000 * i, 2_500 * i)
                   for i in range(11)],
                [(T0 + 5_050, 5.0), (T0 + 5_070, 7.0), (T0 + 5_090, 9.0)],
                ended=T0 + 5_100)


def test_the_resume_argv_asks_sample_factory_to_resume_and_to_save_often():
  argv = sfp.sample_factory_argv(sfp.parse_args(["--mode=learning"]), "/tmp/t", "learning")
  assert "--restart_behavior=resume" in argv
  assert f"--save_every_sec={sfp.DEFAULT_SAVE_EVERY_SEC}" in argv
  assert sfp.DEFAULT_SAVE_EVERY_SEC <= 300  # A kill loses minutes at most.
  argv = sfp.sample_factory_argv(sfp.parse_args(["--save_every_sec=30"]), "/tmp/t", "learning")
  assert "--save_every_sec=30" in argv
  # The side-by-side driver passes its --peer_save_every_sec on; Sample Factory resumes.
  command = lsbs.peer_command("/tmp/sf/seed_1", 1, 1000, "/tmp/venv", "boxing", 30)
  assert "--save_every_sec=30" in command
  sf_argv = lsbs.peer_sf_argv(command)
  assert "--restart_behavior=resume" in sf_argv and "--save_every_sec=30" in sf_argv
  assert "--train_dir=/tmp/sf/seed_1" in sf_argv and "--seed=1" in sf_argv
  assert lsbs.parse_args(["--output_dir=/tmp/x", "--report_only",
                          "--peer_save_every_sec=30"]).peer_save_every_sec == 30


def test_the_real_report_and_loaded_lines_are_parsed(tmp_path):
  log = tmp_path / "sample_factory.log"
  log.write_text(_loaded(T0 - 1, 128_000) + _report(T0, 194_560, 32_136))
  assert sfp.read_reports(str(log)) == [(T0, 3840.0, 194_560, 606.2, 32_136)]
  assert sfp.resumed_from(str(log)) == 128_000


def test_episodes_are_stitched_across_launches(tmp_path):
  _three_launches(str(tmp_path))
  assert [sfp.resumed_from(str(tmp_path / sfp.launch_files(i)[0])) for i in (1, 2, 3)] == [
      0, None, 100_000]
  rows, dropped = sfp.stitched_games(str(tmp_path))
  # Launch 1's games at 120,000, 140,000 and 160,000 frames were trained again by launch 3
  # (from 100,000): dropped. Launch 2 trained nothing and bounds nothing.
  assert dropped == 3
  frames = [row[1] for row in rows]
  assert frames == [40_000, 60_000, 80_000, 100_000, 120_000, 160_000, 200_000]
  assert frames == sorted(frames)
  assert [row[2] for row in rows] == [-10, -9, -8, -7, 5, 7, 9]
  # Running seconds: launch 1 ran 120 s (to its last line), launch 2 30 s, then launch 3's
  # games at 50, 70 and 90 s after its start; the gaps between launches are not counted.
  np.testing.assert_allclose([row[0] for row in rows],
                             [60, 70, 80, 90, 150 + 50, 150 + 70, 150 + 90], atol=0.01)
  assert sfp.running_seconds(str(tmp_path)) == pytest.approx(120 + 30 + 100)
  assert sfp.reached_frames(str(tmp_path)) == 200_000


def test_a_killed_launch_reached_its_last_report_until_the_next_one_reports(tmp_path):
  _three_launches(str(tmp_path))
  launches = sfp.read_launches(str(tmp_path))
  sfp.write_launches(str(tmp_path), launches[:2])  # Before launch 3.
  assert sfp.reached_frames(str(tmp_path)) == 160_000
  rows, dropped = sfp.stitched_games(str(tmp_path))
  assert len(rows) == 7 and dropped == 0  # Nothing has resumed from a checkpoint yet.
  sfp.write_launches(str(tmp_path), launches)
  assert sfp.reached_frames(str(tmp_path)) == 200_000


def test_episodes_csv_is_rebuilt_from_every_launch_and_read_by_the_report(tmp_path):
  output_dir = tmp_path / "sample_factory" / "seed_1"
  _three_launches(str(output_dir))
  path, rows, dropped = sfp.write_episodes(str(output_dir), seed=1)
  with open(path) as f:
    written = list(csv.DictReader(f))
  assert len(written) == len(rows) == 7 and dropped == 3
  assert [int(r["frames"]) for r in written] == [row[1] for row in rows]
  assert {r["seed"] for r in written} == {"1"}
  # The comparison reads it: hours of running time, reached = the last report (unfinished).
  run = lsbs.read_peer(str(output_dir), 400_000)
  np.testing.assert_allclose(run["hours"] * 3600, [row[0] for row in rows], atol=0.1)
  assert np.all(np.diff(run["frames"]) >= 0) and run["reached"] == 200_000


def test_a_run_from_before_launches_json_is_one_launch(tmp_path):
  with open(tmp_path / "sample_factory.log", "w") as f:
    f.write(f"[{_stamp(T0 + 1)}][7] Starting...\n" + _report(T0 + 10, 5_000, 1_250))
  os.makedirs(tmp_path / "games")
  (tmp_path / "games" / "games_7.csv").write_text(f"{T0 + 10:.3f},-3,7141\n")
  assert sfp.read_launches(str(tmp_path)) == [
      dict(log="sample_factory.log", games="games", started=pytest.approx(T0 + 1))]
  rows, dropped = sfp.stitched_games(str(tmp_path))
  assert rows == [(pytest.approx(9.0), 5_000, -3.0, 7141)] and dropped == 0
  assert sfp.launch_files(2) == ("sample_factory.launch2.log", "games.launch2")


def test_a_game_line_cut_short_by_a_kill_is_skipped(tmp_path):
  os.makedirs(tmp_path / "games")
  (tmp_path / "games" / "games_1.csv").write_text(f"{T0:.3f},2,7141\n{T0 + 1:.3f},-")
  assert sfp.games(str(tmp_path)) == [(T0, 2.0, 7141)]


# A stand-in for the venv's Python running Sample Factory (sample_factory_pong.py --sf_child
# <argv>): resumes from the last checkpoint in <train_dir>/learning/checkpoint_p0 (the loaded
# line), trains 10,000 frames per report to train_for_env_steps or to FAKE_SF_STOP_AT (then it
# dies as if killed: no final checkpoint, a save cut short left behind), saves a checkpoint
# at FAKE_SF_SAVE_AT and at its end, logs a game (its return: frames / 10,000) shortly before
# every second report (so the game's frames lie between those of the report and the one
# before).
FAKE_SF = textwrap.dedent("""
    import datetime, glob, os, sys, time
    flags = dict(a[2:].split("=", 1) for a in sys.argv if a.startswith("--") and "=" in a)
    assert flags["restart_behavior"] == "resume"
    ckpt = os.path.join(flags["train_dir"], "learning", "checkpoint_p0")
    os.makedirs(ckpt, exist_ok=True)
    def say(message):
      stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
      print(f"[{stamp}][{os.getpid()}] {message}", flush=True)
    names = sorted(glob.glob(os.path.join(ckpt, "checkpoint_*")))
    assert not any(n.endswith("checkpoint_temp") for n in names), "temp not removed"
    frames = int(names[-1].rsplit("_", 1)[1][:-4]) if names else 0
    if names:
      say(f"Loaded experiment state at self.train_step={frames // 640}, self.env_steps={frames}")
    start, stop_at = frames, int(os.environ.get("FAKE_SF_STOP_AT", "0")) or None
    games = os.path.join(os.environ["SF_ATARI_EPISODE_DIR"], f"games_{os.getpid()}.csv")
    while frames < int(flags["train_for_env_steps"]):
      frames += 10_000
      time.sleep(0.02)
      if frames // 10_000 % 2 == 0:  # A game ends just before the report of these frames.
        with open(games, "a") as f:
          f.write(f"{time.time():.3f},{frames / 10_000:g},7141\\n")
      time.sleep(0.02)
      say(f"Fps is (10 sec: 2000.0, 60 sec: 2000.0, 300 sec: 2000.0). Total num frames: "
          f"{frames}. Throughput: 0: 500.0. Samples: {(frames - start) // 4}. Policy #0 lag: "
          "(min: 0.0, avg: 0.5, max: 1.0)")
      if frames == int(os.environ.get("FAKE_SF_SAVE_AT", "-1")):
        open(os.path.join(ckpt, f"checkpoint_{frames // 640:09d}_{frames}.pth"), "w").close()
      if frames == stop_at:
        open(os.path.join(ckpt, "checkpoint_temp"), "w").close()
        sys.exit(-9)
    open(os.path.join(ckpt, f"checkpoint_{frames // 640:09d}_{frames}.pth"), "w").close()
    """)


def _fake_venv(tmp_path):
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  python = venv / "bin" / "python"
  python.write_text(f"#!{sys.executable}\n" + FAKE_SF)
  python.chmod(0o755)
  return str(venv)


def test_a_killed_run_resumes_from_its_checkpoint_keeping_each_launchs_files(
    tmp_path, monkeypatch, capsys):
  output_dir = str(tmp_path / "run")
  os.makedirs(output_dir)
  flags = ["--mode=learning", "--game=boxing", "--frames=100000", f"--output_dir={output_dir}",
           f"--venv={_fake_venv(tmp_path)}"]
  # Launch 1: a checkpoint at 40,000 frames, killed at 70,000.
  monkeypatch.setenv("FAKE_SF_SAVE_AT", "40000")
  monkeypatch.setenv("FAKE_SF_STOP_AT", "70000")
  sfp.run_learning(sfp.parse_args(flags), output_dir)
  assert "launch 1 started at 0 frames" in capsys.readouterr().out
  assert sfp.reached_frames(output_dir) == 70_000
  first_log = open(os.path.join(output_dir, "sample_factory.log")).read()
  # Launch 2: the same command resumes at 40,000 and finishes.
  monkeypatch.delenv("FAKE_SF_STOP_AT")
  sfp.run_learning(sfp.parse_args(flags), output_dir)
  output = capsys.readouterr().out
  assert "resumes from Sample Factory's checkpoint at 40,000 frames" in output
  assert "removed" in output and "checkpoint_temp" in output
  assert "launch 2 started at 40,000 frames" in output and "1 dropped" in output
  # Each launch's files are kept: launch 1's log as it was, its games in games/.
  assert open(os.path.join(output_dir, "sample_factory.log")).read() == first_log
  assert sorted(os.listdir(output_dir)) == [
      "command.json", "episodes.csv", "games", "games.launch2", "launches.json", "learning",
      "sample_factory.launch2.log", "sample_factory.log"]
  launches = sfp.read_launches(output_dir)
  assert [(r["log"], r["checkpoint_frames"]) for r in launches] == [
      ("sample_factory.log", 0), ("sample_factory.launch2.log", 40_000)]
  assert all(r["ended"] >= r["started"] for r in launches)
  with open(os.path.join(output_dir, "episodes.csv")) as f:
    rows = list(csv.DictReader(f))
  # Launch 1's games at (just under) 20,000 and 40,000 kept, 60,000 dropped (launch 2 redid
  # those frames, from 40,000); launch 2's at 60,000, 80,000, 100,000.
  assert [float(r["episode_return"]) for r in rows] == [2, 4, 6, 8, 10]
  for row, report in zip(rows, (20_000, 40_000, 60_000, 80_000, 100_000)):
    assert report - 10_000 < int(row["frames"]) <= report, row
  frames = [int(r["frames"]) for r in rows]
  assert frames == sorted(frames)
  seconds = [float(r["seconds"]) for r in rows]
  assert seconds == sorted(seconds) and seconds[-1] <= sfp.running_seconds(output_dir) + 0.1


def test_a_run_of_another_setting_or_still_running_is_refused(tmp_path):
  output_dir = str(tmp_path / "sample_factory" / "seed_1")
  os.makedirs(output_dir)
  command = lsbs.peer_command(output_dir, 1, 1_000, "/tmp/venv", "boxing")
  with open(os.path.join(output_dir, "command.json"), "w") as f:
    json.dump(["python", "sample_factory_pong.py", "--sf_child",
               *lsbs.peer_sf_argv(command)], f)
  # A larger budget or another save interval resumes the same run.
  for other in (lsbs.peer_command(output_dir, 1, 9_000, "/tmp/venv", "boxing", 30),):
    assert sfp.argv_conflict(output_dir, lsbs.peer_sf_argv(other)) is None
  # Another seed (or schedule, or game) does not.
  other = lsbs.peer_sf_argv(lsbs.peer_command(output_dir, 2, 1_000, "/tmp/venv", "boxing"))
  assert "seed: 1 -> 2" in sfp.argv_conflict(output_dir, other)
  with pytest.raises(SystemExit, match="another setting.*seed: 1 -> 2"):
    lsbs.run_peer(output_dir, 2, 1_000, "/tmp/venv", print, "boxing")
  with pytest.raises(SystemExit, match="run of atari_boxing, not atari_pong"):
    lsbs.run_peer(output_dir, 1, 1_000, "/tmp/venv", print, "pong")
  assert sorted(os.listdir(tmp_path / "sample_factory")) == ["seed_1"]  # Nothing moved.
  # An earlier launch's Sample Factory process still alive (its driver killed alone).
  process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              "--sf_child", f"--train_dir={output_dir}"])
  try:
    deadline = time.time() + 30
    while b"--sf_child" not in open(f"/proc/{process.pid}/cmdline", "rb").read():
      assert time.time() < deadline  # Not yet exec'd: the cmdline is still pytest's.
      time.sleep(0.05)
    sfp.write_launches(output_dir, [dict(log="sample_factory.log", games="games",
                                         started=time.time(), pid=process.pid)])
    assert sfp.still_running(output_dir, sfp.read_launches(output_dir)) == process.pid
    venv = _fake_venv(tmp_path)
    args = sfp.parse_args([*command[2:], f"--venv={venv}"])  # The same setting.
    with pytest.raises(SystemExit, match=f"process {process.pid} .* still trains"):
      sfp.launch(args, output_dir, "learning")
  finally:
    process.kill()
    process.wait()
  assert sfp.still_running(output_dir, sfp.read_launches(output_dir)) is None


def test_the_child_stops_on_sigint_even_if_started_with_it_ignored(monkeypatch):
  # A driver started with & by a script ignores SIGINT, and so would Sample Factory: no
  # checkpoint when stopped, no stop when the driver dies. The child restores it.
  handlers = {}
  monkeypatch.setattr(sfp.signal, "getsignal", lambda signum: sfp.signal.SIG_IGN)
  monkeypatch.setattr(sfp.signal, "signal", lambda signum, handler: handlers.update(
      {signum: handler}))
  monkeypatch.setitem(sys.modules, "sample_factory", None)  # Stops at the first import.
  with pytest.raises(ImportError):
    sfp.child_main(["--env=atari_boxing"])
  assert handlers == {sfp.signal.SIGINT: sfp.signal.default_int_handler}
