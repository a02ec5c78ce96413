"""benchmarks/peers/side_by_side: the measured window and the table (the runs themselves are
benchmarks, not tests)."""
import pytest

from benchmarks.peers import side_by_side


def _progress(points):
  return [dict(time=t, frames=f) for t, f in points]


def test_window_starts_warmup_seconds_after_the_first_trained_frames():
  # 1,000 frames/s from t=10 (first trained frames at t=12), 3,000 frames/s from t=40.
  points = [(0, 0), (10, 0)] + [(t, (t - 10) * 1000) for t in range(12, 41, 2)]
  points += [(t, 30_000 + (t - 40) * 3000) for t in range(42, 101, 2)]
  progress = _progress(points)
  # Window [12 + 28, 40 + 60] = [40, 100]: 3,000 frames/s throughout.
  assert side_by_side.window_rate(progress, warmup=28, seconds=60) == pytest.approx(3000)
  # Window [12 + 8, 20 + 40] = [20, 60]: 20 s at 1,000 and 20 s at 3,000.
  assert side_by_side.window_rate(progress, warmup=8, seconds=40) == pytest.approx(2000)
  # Window [21, 51], between records at both ends: 11,000 frames at t=21 (halfway from
  # 10,000 to 12,000) and 63,000 at t=51 (halfway from 60,000 to 66,000).
  assert side_by_side.window_rate(progress, warmup=9, seconds=30) == pytest.approx(
      (63_000 - 11_000) / 30)


def test_a_log_that_ends_before_the_window_is_refused():
  with pytest.raises(ValueError, match="before the window"):
    side_by_side.window_rate(_progress([(0, 0), (5, 100), (10, 200)]), warmup=5, seconds=30)
  with pytest.raises(ValueError, match="no progress record"):
    side_by_side.window_rate(_progress([(0, 0), (5, 0)]), warmup=1, seconds=1)


def test_table_has_each_round_the_median_and_the_ratio_to_the_first_system():
  text = side_by_side.table({"ours": [9000, 9500, 8800], "sample_factory": [3500, 3600, 3000]},
                            ["ours", "sample_factory"])
  rows = text.splitlines()
  assert len(rows) == 4 and "round 3" in rows[0]
  assert "| 9,000 | 9,500 | 8,800 | **9,000** | 1.00x |" in rows[2]
  assert "| 3,500 | 3,600 | 3,000 | **3,500** | 0.39x |" in rows[3]


def test_unknown_system_or_missing_venv_is_refused(capsys, tmp_path):
  with pytest.raises(SystemExit):
    side_by_side.main(["--systems=ours,torchbeast"])
  assert "unknown systems ['torchbeast']" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    side_by_side.main([f"--venv={tmp_path}"])
  assert "setup_sample_factory.sh" in capsys.readouterr().err


def test_extra_flags_reach_every_system_of_ours_and_its_label(monkeypatch, capsys):
  launched = []
  monkeypatch.setattr(side_by_side, "run_ours",
                      lambda flags, warmup, seconds: launched.append(flags) or 1000.0)
  side_by_side.main(["--systems=ours,ours_one_intra_op_thread", "--rounds=1",
                     "--extra_flags=--torso=deep"])
  assert launched == [{"torso": "deep"}, {"torso": "deep", "intra_op_threads": 1}]
  rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| this")]
  assert len(rows) == 2 and all(", with `--torso=deep` |" in row for row in rows)
