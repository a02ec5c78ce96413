"""benchmarks/peers/learning_side_by_side: the comparison on synthetic curves, reading both
systems' episodes, stopping our run at a frame count, and bad input (the Pong runs themselves
are a benchmark, not a test)."""
import csv
import json
import os
import signal
import sys
import textwrap

import numpy as np
import pytest

from benchmarks.peers import learning_side_by_side as lsbs
from benchmarks.studies import runs


def test_frame_counts_end_at_the_budget():
  assert lsbs.frame_counts(20_000_000, 2_000_000) == [2_000_000 * i for i in range(1, 11)]
  assert lsbs.frame_counts(5_000_000, 2_000_000) == [2_000_000, 4_000_000, 5_000_000]
  assert lsbs.frame_counts(1_000, 2_000) == [1_000]


def test_curve_at_is_the_mean_of_the_last_100_returns_up_to_each_count():
  # Episode i (1-based) ends at frame 10 i with return i: the last 100 up to frame 2,000
  # are episodes 101..200 (mean 150.5); up to 505, episodes 1..50 (mean 25.5).
  frames = 10 * np.arange(1, 301)
  returns = np.arange(1, 301, dtype=float)
  values = lsbs.curve_at(frames, returns, reached_frames=3_005,
                         counts=[5, 505, 2_000, 3_000, 3_005, 4_000])
  assert values[0] is None  # No episode yet.
  assert values[1:5] == pytest.approx([25.5, 150.5, 250.5, 250.5])
  assert values[5] is None  # Not reached: the run's last value is not carried forward.


@pytest.mark.parametrize("ours, peer, expected", [
    (-15.0, [-18.0, -16.0], "above"), (-16.0, [-18.0, -16.0], "within"),
    (-17.0, [-16.0, -18.0], "within"), (-18.0, [-18.0, -16.0], "within"),
    (-18.5, [-18.0, -16.0], "below"), (None, [-18.0, -16.0], None),
    (-17.0, [-18.0, None], None), (-17.0, [], None)])
def test_standing_against_the_peers_seed_range(ours, peer, expected):
  assert lsbs.standing(ours, peer) == expected


def _rows(ours_by_seed, peer_by_seed, counts=(2_000_000, 4_000_000, 6_000_000)):
  return lsbs.comparison_rows(ours_by_seed, peer_by_seed, list(counts))


def test_rows_compare_the_mean_of_our_seeds_with_the_peers_range():
  rows = _rows({1: [-20.0, -16.0, -10.0], 2: [-21.0, -19.0, -14.0]},
               {1: [-20.0, -18.0, -9.0], 2: [-20.6, -17.0, -12.0]})
  assert [row["ours_mean"] for row in rows] == [-20.5, -17.5, -12.0]
  # -20.5 lies in [-20.6, -20]; -17.5 in [-18, -17]; -12 in [-12, -9].
  assert [row["standing"] for row in rows] == ["within", "within", "within"]
  assert lsbs.verdict(rows).startswith("goal met")
  text = lsbs.table(rows)
  lines = text.splitlines()
  assert lines[0].startswith("| frames | ours seed 1 | ours seed 2 | ours mean | SF seed 1 |")
  assert lines[3] == ("| 4M | -16.00 | -19.00 | -17.50 | -18.00 | -17.00 | [-18.00, -17.00] "
                      "| within |")


def test_the_goal_fails_at_the_counts_where_ours_is_below_the_peers_range():
  rows = _rows({1: [-20.0, -19.0, -5.0], 2: [-20.0, -19.0, -7.0]},
               {1: [-20.0, -15.0, -9.0], 2: [-21.0, -16.0, -12.0]})
  assert [row["standing"] for row in rows] == ["within", "below", "above"]
  assert lsbs.verdict(rows) == ("goal NOT met: ours is below Sample Factory's seed range at "
                                "4M frames")


def test_counts_not_reached_by_every_run_leave_the_goal_undecided():
  # Our seed 2 has not reached 6M: no mean there, even though seed 1 is far above.
  rows = _rows({1: [-20.0, -15.0, 5.0], 2: [-20.0, -15.0, None]},
               {1: [-20.0, -16.0, -9.0], 2: [-21.0, -17.0, -12.0]})
  assert rows[2]["ours_mean"] is None and rows[2]["standing"] is None
  assert lsbs.verdict(rows).startswith("not decided yet: 2 of 3 frame counts")
  assert "| n/a |" in lsbs.table(rows).splitlines()[-1]
  # A count where one of our seeds is below is a failure whatever the missing ones say.
  rows = _rows({1: [-21.0, None, None]}, {1: [-20.0, None, None], 2: [-20.5, None, None]})
  assert lsbs.verdict(rows).startswith("goal NOT met")


def test_seed_band_spans_the_seeds_where_they_overlap_and_is_nan_where_none_does():
  grid = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
  curves = [(np.array([1.0, 3.0]), np.array([-20.0, -10.0])),   # -15 at 2
            (np.array([2.0, 4.0]), np.array([-18.0, -14.0]))]   # -16 at 3
  low, high = runs.seed_band(curves, grid)
  np.testing.assert_allclose(low, [np.nan, -20, -18, -16, -14, np.nan])
  np.testing.assert_allclose(high, [np.nan, -20, -15, -10, -14, np.nan])


def _write_log(logdir, records):
  os.makedirs(logdir, exist_ok=True)
  with open(os.path.join(logdir, "log.jsonl"), "w") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


def _episode(frames, episode_return):
  return dict(kind="episode", frames=frames, level="atari/pong",
              episode_return=episode_return, episode_length=1000)


def test_our_episodes_with_frames_hours_and_the_frames_reached(tmp_path):
  # One attempt from t=0: 3,600 s per 1,000 frames; one episode logged with the first
  # record, two with the second.
  _write_log(tmp_path, [dict(kind="start", time=0.0, frames=0), _episode(1000, -20.0),
                        dict(kind="progress", time=3600.0, frames=1000, updates=1),
                        _episode(2000, -21.0), _episode(2000, -19.0),
                        dict(kind="progress", time=7200.0, frames=2000, updates=2)])
  run = lsbs.read_ours(str(tmp_path))
  np.testing.assert_allclose(run["frames"], [1000, 1500, 2000])  # Spread between records.
  np.testing.assert_allclose(run["hours"], [1.0, 1.5, 2.0])
  np.testing.assert_allclose(run["returns"], [-20, -21, -19])
  assert run["reached"] == 2000
  assert lsbs.read_ours(str(tmp_path / "missing")) is None


def _write_peer(output_dir, rows, complete_frames=None):
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "episodes.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["seconds", "frames", "episode_return", "episode_frames", "seed"])
    writer.writerows([seconds, frames, episode_return, 3000, 1]
                     for seconds, frames, episode_return in rows)
  if complete_frames:
    with open(os.path.join(output_dir, lsbs.COMPLETE_FILE), "w") as f:
      json.dump(dict(frames=complete_frames), f)


def test_the_peers_episodes_and_a_finished_run_reaching_its_budget(tmp_path):
  _write_peer(tmp_path, [(1800.0, 990, -20.0), (3600.0, 1980, -18.0)], complete_frames=2000)
  run = lsbs.read_peer(str(tmp_path), 2000)
  np.testing.assert_allclose(run["frames"], [990, 1980])
  np.testing.assert_allclose(run["hours"], [0.5, 1.0])
  np.testing.assert_allclose(run["returns"], [-20, -18])
  assert run["reached"] == 2000
  # Without its mark (or for another budget) the run has reached only its last report: none.
  assert lsbs.read_peer(str(tmp_path), 4000)["reached"] == 0
  assert lsbs.read_peer(str(tmp_path / "missing"), 2000) is None


def test_report_only_prints_the_table_and_the_verdict_and_writes_the_figure(tmp_path, capsys):
  for seed, offset in ((1, 0.0), (2, 1.0)):
    _write_log(tmp_path / "ours" / f"seed_{seed}",
               [dict(kind="start", time=0.0, frames=0)]
               + [record for i in range(1, 11) for record in (
                   _episode(100 * i, -21.0 + i + offset),
                   dict(kind="progress", time=60.0 * i, frames=100 * i, updates=i))])
    _write_peer(tmp_path / "sample_factory" / f"seed_{seed}",
                [(30.0 * i, 100 * i, -21.0 + 0.5 * i + offset) for i in range(1, 11)],
                complete_frames=1000)
  figure = tmp_path / "figure.png"
  rows = lsbs.main([f"--output_dir={tmp_path}", "--frames=1000", "--every=500",
                    "--seeds=1,2", "--report_only", f"--figure={figure}"])
  output = capsys.readouterr().out
  # At 1,000 frames: ours -11 and -10 (episode means of 10), the peer -15.75 and -14.75.
  assert rows[-1]["ours_mean"] == pytest.approx(np.mean([-21 + i + 0.5 for i in range(1, 11)]))
  assert [row["standing"] for row in rows] == ["above", "above"]
  assert "goal met" in output and "| 1e-03M |" not in output
  assert figure.stat().st_size > 10_000


def test_our_side_can_come_from_a_recorded_table_when_the_logdir_is_gone(tmp_path, capsys):
  # The peer: Pong episodes every 100 frames, returns -21 + 0.5 i.
  _write_peer(tmp_path / "sample_factory" / "seed_1",
              [(30.0 * i, 100 * i, -21.0 + 0.5 * i) for i in range(1, 11)],
              complete_frames=1000)
  recorded = tmp_path / "ours.csv"  # As runfiles.plot --table_every=500 prints it.
  recorded.write_text("# seed_1: every 500 frames\nlevel,frames,hours,mean_return\n"
                      "atari/pong,500,0.1,-20.0\natari/pong,1000,0.2,-10.0\n")
  figure = tmp_path / "figure.png"
  rows = lsbs.main([f"--output_dir={tmp_path}", "--frames=1000", "--every=500", "--seeds=1",
                    "--report_only", f"--ours_table={recorded}", f"--figure={figure}"])
  # The peer's mean of its last 100 (all) episodes: -19.5 at 500 frames, -18.25 at 1,000.
  assert [(row["ours_mean"], row["standing"]) for row in rows] == [
      (-20.0, "below"), (-10.0, "above")]
  assert "goal NOT met" in capsys.readouterr().out and figure.stat().st_size > 10_000
  # A count the table does not have is not compared.
  rows = lsbs.main([f"--output_dir={tmp_path}", "--frames=1000", "--every=250", "--seeds=1",
                    "--report_only", f"--ours_table={recorded}", f"--figure={figure}"])
  assert [row["ours_mean"] for row in rows] == [None, -20.0, None, -10.0]
  # What is wrong with a table is named.
  for text, message in (("frames,return\n1,2\n", "expected a CSV with the columns"),
                        ("level,frames,hours,mean_return\natari/boxing,500,0.1,3\n",
                         "a run of atari/boxing, not atari/pong"),
                        ("level,frames,hours,mean_return\natari/pong,5e2,x,3\n",
                         "is not numbers")):
    recorded.write_text(text)
    with pytest.raises(SystemExit, match=message):
      lsbs.main([f"--output_dir={tmp_path}", "--frames=1000", "--seeds=1", "--report_only",
                 f"--ours_table={recorded}", f"--figure={figure}"])
  with pytest.raises(SystemExit):  # It replaces our runs: only in a report.
    lsbs.main([f"--output_dir={tmp_path}", f"--ours_table={recorded}", "--systems=ours"])
  assert "give it with --report_only" in capsys.readouterr().err


FAKE_TRAINER = textwrap.dedent("""
    import json, signal, sys, time
    logdir = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--logdir=")][0]
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    log = open(logdir + "/log.jsonl", "a")
    frames = 0
    for line in open(logdir + "/log.jsonl"):
      frames = max(frames, json.loads(line).get("frames", 0))
    log.write(json.dumps(dict(kind="start", time=time.time(), frames=frames)) + "\\n")
    while not stop and frames < 10_000:
      frames += 100
      log.write(json.dumps(dict(kind="progress", time=time.time(), frames=frames,
                                updates=1)) + "\\n")
      log.flush()
      time.sleep(0.02)
    """)


def test_our_run_is_stopped_by_sigint_at_the_frames_and_then_skipped(tmp_path, monkeypatch):
  script = tmp_path / "fake_trainer.py"
  script.write_text(FAKE_TRAINER)
  monkeypatch.setattr(runs, "experiment_command", lambda logdir, **flags: [
      sys.executable, str(script), f"--logdir={logdir}"] + [
          f"--{k}={v}" for k, v in flags.items()])
  monkeypatch.setattr(lsbs, "POLL_SECONDS", 0.05)
  lines = []
  logdir = str(tmp_path / "ours" / "seed_3")
  lsbs.run_ours(logdir, seed=3, frames=1_000, print_fn=lines.append)
  reached = lsbs.ours_frames(logdir)
  assert 1_000 <= reached < 10_000  # Stopped by the signal, not at the trainer's own end.
  assert "--seed=3" in lines[0] and "SIGINT at 1,000 frames" in lines[0]
  lsbs.run_ours(logdir, seed=3, frames=1_000, print_fn=lines.append)
  assert "already trained" in lines[-1] and lsbs.ours_frames(logdir) == reached
  # A larger budget resumes the same run from where it stopped.
  lsbs.run_ours(logdir, seed=3, frames=2_000, print_fn=lines.append)
  assert lsbs.ours_frames(logdir) >= 2_000
  # Another command (here another seed) in the same directory is refused.
  with pytest.raises(SystemExit, match="another command"):
    lsbs.run_ours(logdir, seed=4, frames=3_000, print_fn=lines.append)


FAKE_PEER = textwrap.dedent("""
    import os, sys
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])
    reached = int(flags["frames"]) // int(os.environ["FAKE_PEER_SHORTFALL"])
    os.makedirs(flags["output_dir"], exist_ok=True)
    with open(os.path.join(flags["output_dir"], "sample_factory.log"), "w") as f:
      f.write("[2024-05-01 12:00:00,000][7] Fps is (10 sec: 3500.0, 60 sec: 3500.0). "
              f"Total num frames: {reached}. Throughput: 0: 875.0. Samples: {reached // 4}.\\n")
    sys.exit(int(os.environ.get("FAKE_PEER_EXIT", "0")))
    """)


def test_the_peer_run_is_marked_complete_skipped_and_resumed_if_unfinished(
    tmp_path, monkeypatch):
  script = tmp_path / "fake_peer.py"
  script.write_text(FAKE_PEER)
  monkeypatch.setattr(lsbs, "PEER_SCRIPT", str(script))
  output_dir = str(tmp_path / "sample_factory" / "seed_1")
  os.makedirs(output_dir)  # An earlier, killed attempt: one report, a checkpoint.
  with open(os.path.join(output_dir, "sample_factory.log"), "w") as f:
    f.write("[2024-05-01 11:00:00,000][7] Fps is (10 sec: 3500.0, 60 sec: 3500.0). "
            "Total num frames: 3000. Throughput: 0: 875.0. Samples: 750.\n")
  os.makedirs(os.path.join(output_dir, "learning", "checkpoint_p0"))
  open(os.path.join(output_dir, "learning", "checkpoint_p0",
                    "checkpoint_000000004_2560.pth"), "w").close()
  lines = []
  monkeypatch.setenv("FAKE_PEER_SHORTFALL", "1")
  lsbs.run_peer(output_dir, 1, 8_000, str(tmp_path), lines.append)
  assert any("resumes" in line and "(launch 2)" in line and "at 2,560 frames" in line
             for line in lines), lines
  assert os.listdir(tmp_path / "sample_factory") == ["seed_1"]  # Resumed in place.
  assert "--save_every_sec=120" in lines[-2]
  assert lsbs.peer_complete(output_dir, 8_000) and not lsbs.peer_complete(output_dir, 9_000)
  lsbs.run_peer(output_dir, 1, 8_000, str(tmp_path), lines.append)
  assert "already finished" in lines[-1]
  # A run that stops well short of its budget is not complete: stopped (exit code 0), or
  # failed (any other).
  monkeypatch.setenv("FAKE_PEER_SHORTFALL", "2")
  with pytest.raises(lsbs.StoppedShort,
                     match="seed 1 at 4,500 of 9,000 frames; run the same command to resume"):
    lsbs.run_peer(output_dir, 1, 9_000, str(tmp_path), lines.append)
  assert not lsbs.peer_complete(output_dir, 9_000)
  monkeypatch.setenv("FAKE_PEER_EXIT", "3")
  with pytest.raises(RuntimeError, match="4,500 of 9,000 frames: exited with 3; see .*"
                                         "driver_console.txt"):
    lsbs.run_peer(output_dir, 1, 9_000, str(tmp_path), lines.append)
  assert not lsbs.peer_complete(output_dir, 9_000)


def test_a_stopped_comparison_ends_with_one_line_saying_how_to_resume(
    tmp_path, monkeypatch, capsys):
  line = "stopped: our seed 1 at 5 of 9 frames; run the same command to resume"
  def stopped_short(*unused_args):
    raise lsbs.StoppedShort(line)
  monkeypatch.setattr(lsbs, "run_ours", stopped_short)
  with pytest.raises(SystemExit) as exit_info:
    lsbs.main([f"--output_dir={tmp_path}", "--seeds=1", "--systems=ours"])
  assert exit_info.value.code == line  # Python prints it alone to stderr; exit status 1.
  def interrupted(*unused_args):
    raise KeyboardInterrupt()
  monkeypatch.setattr(lsbs, "run_ours", interrupted)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    lsbs.main([f"--output_dir={tmp_path}", "--seeds=1", "--systems=ours"])
  assert exit_info.value.code == 130
  assert capsys.readouterr().err.strip() == (
      "stopped by SIGINT; run the same command to resume")


def test_the_driver_stops_on_sigint_when_started_with_it_ignored(tmp_path, monkeypatch):
  # A job that a non-interactive shell starts with & inherits SIGINT ignored.
  monkeypatch.setattr(lsbs, "report", lambda *args: [])
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    lsbs.main([f"--output_dir={tmp_path}", "--seeds=1", "--systems=ours", "--report_only"])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  finally:
    signal.signal(signal.SIGINT, previous)


def test_bad_input_is_refused_with_what_to_do(tmp_path, capsys):
  with pytest.raises(SystemExit):
    lsbs.main([f"--output_dir={tmp_path}", "--report_only", "--frame=100"])
  assert "unrecognized arguments: --frame=100" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    lsbs.main([f"--output_dir={tmp_path}", f"--venv={tmp_path / 'none'}"])
  assert "setup_sample_factory.sh" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    lsbs.main([f"--output_dir={os.path.join(runs.REPO_DIR, 'runs')}", "--report_only"])
  assert "inside the repository" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    lsbs.main([f"--output_dir={tmp_path}", "--report_only", "--seeds=1,two"])
  assert "--seeds=1,two" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    lsbs.main([f"--output_dir={tmp_path}", "--report_only", "--systems=ours,torchbeast"])
  assert "--systems" in capsys.readouterr().err


def test_systems_makes_only_the_named_systems_runs(tmp_path, monkeypatch):
  made = []
  monkeypatch.setattr(lsbs, "run_ours",
                      lambda logdir, seed, *rest: made.append((lsbs.OURS, seed)))
  monkeypatch.setattr(lsbs, "run_peer", lambda out, seed, *rest: made.append((lsbs.PEER, seed)))
  monkeypatch.setattr(lsbs, "report", lambda *args: [])
  # No Sample Factory venv is needed when only our runs are made.
  lsbs.main([f"--output_dir={tmp_path}", "--seeds=1,2", "--systems=ours",
             f"--venv={tmp_path / 'none'}"])
  assert made == [(lsbs.OURS, 1), (lsbs.OURS, 2)]
  made.clear()
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  (venv / "bin" / "python").write_text("")
  lsbs.main([f"--output_dir={tmp_path}", "--seeds=1,2", f"--venv={venv}",
             "--systems=sample_factory"])
  assert made == [(lsbs.PEER, 1), (lsbs.PEER, 2)]
