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


# ---------------------------------------------------------------------------------------
# benchmarks/peers/sample_factory_gym: the gymnasium peer's settings, episodes and target.

import glob  # pylint: disable=g-import-not-at-top,wrong-import-position
import json  # pylint: disable=g-import-not-at-top,wrong-import-position
import os  # pylint: disable=g-import-not-at-top,wrong-import-position
import subprocess  # pylint: disable=g-import-not-at-top,wrong-import-position
import sys  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.peers import sample_factory_gym as sf_gym  # pylint: disable=g-import-not-at-top,wrong-import-position

SF_VENV = os.environ.get("SF_VENV", "/tmp/sf_venv")
SF_PYTHON = os.path.join(SF_VENV, "bin", "python")
# Installed by benchmarks/peers/setup_sample_factory.sh (a venv without it is not set up yet).
SF_INSTALLED = bool(glob.glob(os.path.join(SF_VENV, "lib", "python*", "site-packages",
                                           "sample_factory")))


def _gym_args(tmp_path, *flags):
  return sf_gym.parse_args([f"--output_dir={tmp_path}", "--mode=report", *flags])


def test_gym_peer_argv_is_table_g1s_learner_in_sample_factorys_units(tmp_path):
  words = sf_gym.sample_factory_argv(_gym_args(tmp_path, "--seed=3"), str(tmp_path), "x")
  assert words[-3:] == ["--encoder_mlp_layers", "256", "256"]  # Two tanh layers of 256.
  argv = dict(a[2:].split("=", 1) for a in words[:-3])
  assert (argv["rollout"], argv["recurrence"], argv["batch_size"]) == ("20", "20", "640")
  assert (argv["num_workers"], argv["num_envs_per_worker"]) == ("2", "24")  # 48 environments.
  assert (argv["with_vtrace"], argv["gamma"], argv["exploration_loss_coeff"]) == (
      "True", "0.99", "0.01")
  assert (argv["learning_rate"], argv["train_for_env_steps"]) == ("0.0006", "2000000")
  assert sf_gym.CHILD_DEFAULTS == dict(lr_schedule="linear_decay")
  assert (argv["reward_scale"], argv["normalize_returns"], argv["normalize_input"]) == (
      "1.0", "False", "True")
  assert float(argv["max_grad_norm"]) == pytest.approx(40 / 640)
  assert float(argv["adam_eps"]) == pytest.approx(0.1 / 640)
  assert (argv["env"], argv["seed"], argv["value_bootstrap"]) == ("CartPole-v1", "3", "True")


def test_gym_peer_runs_the_task_under_its_own_gymnasiums_id(tmp_path):
  # Sample Factory's gymnasium 0.29.1 has LunarLander-v2, not v3; ours runs v3.
  args = _gym_args(tmp_path, "--level=LunarLander-v3", "--steps=8000000")
  argv = dict(a[2:].split("=", 1) for a in sf_gym.sample_factory_argv(args, "d", "x")[:-3])
  assert argv["env"] == "LunarLander-v2"
  assert "--level_name=gym:LunarLander-v3" in sf_gym.ours_command(args, "d")
  assert argv["train_for_env_steps"] == "8000000"
  explicit = _gym_args(tmp_path, "--level=MyEnv-v0", "--peer_level=MyEnv-v1")
  assert explicit.peer_level == "MyEnv-v1"
  assert _gym_args(tmp_path, "--level=Acrobot-v1").peer_level == "Acrobot-v1"


def test_gym_peer_under_impact_is_table_2s_setting_at_batch_4_x_256(tmp_path):
  args = _gym_args(tmp_path, "--level=Pendulum-v1", "--algorithm=impact", "--discounting=0.9",
                   "--steps=1000000")
  words = sf_gym.sample_factory_argv(args, "d", "x")
  argv = dict(a[2:].split("=", 1) for a in words[:-3])
  assert (argv["rollout"], argv["batch_size"], argv["num_epochs"]) == ("256", "1024", "20")
  assert (argv["num_workers"], argv["num_envs_per_worker"]) == ("2", "8")  # 16 environments.
  assert (argv["learning_rate"], argv["gamma"], argv["exploration_loss_coeff"]) == (
      "0.0003", "0.9", "0.0")
  assert float(argv["max_grad_norm"]) == pytest.approx(0.5)  # Table 2's clip on the mean.
  assert float(argv["adam_eps"]) == pytest.approx(1e-8 / 1024)
  assert (argv["ppo_clip_ratio"], argv["kl_loss_coeff"], argv["value_loss_coeff"]) == (
      "0.4", "1.0", "0.5")
  assert argv["actor_critic_share_weights"] == "False"
  ours = sf_gym.ours_command(args, "d")
  for flag in ("--algorithm=impact", "--batch_size=4", "--unroll_length=256",
               "--discounting=0.9", "--level_name=gym:Pendulum-v1",
               "--total_environment_frames=1000000"):
    assert flag in ours
  # Without --discounting each system keeps its setting's own (ours: the preset's).
  plain = _gym_args(tmp_path)
  assert not any(w.startswith("--discounting") for w in sf_gym.ours_command(plain, "d"))
  assert "--gamma=0.99" in sf_gym.sample_factory_argv(plain, "d", "x")


def test_gym_peer_bad_input_is_refused_with_what_to_do(tmp_path, capsys):
  for flags, message in (
      (["--workers=5"], "even share of the 48"),
      (["--workers=3", "--algorithm=impact"], "even share of the 16 environments "
       "(worker_num_splits=2): 1, 2, 4, 8"),
      ([f"--output_dir={sf_gym.REPOSITORY}/runs"], "inside the repository"),
      (["--mode=side_by_side", f"--venv={tmp_path}/none"], "setup_sample_factory.sh")):
    with pytest.raises(SystemExit):
      sf_gym.parse_args([f"--output_dir={tmp_path}", *flags])
    assert message in capsys.readouterr().err


def test_the_target_needs_a_full_window_at_its_mean():
  assert sf_gym.first_reaching([500.0] * 99, 500, 100) is None
  assert sf_gym.first_reaching([10.0] + [500.0] * 100, 500, 100) == 100
  assert sf_gym.first_reaching([500.0] * 100 + [10.0], 500, 100) == 99
  assert sf_gym.first_reaching([400.0, 600.0, 500.0], 500, 2) == 1
  assert sf_gym.first_reaching([400.0, 599.0, 500.0], 500, 2) == 2


def test_episodes_csv_round_trips_and_gives_steps_and_time_to_the_target(tmp_path):
  rows = [(float(i), 100 * i, 20.0 if i < 3 else 500.0) for i in range(10)]
  path = sf_gym.write_episodes(str(tmp_path / "episodes.csv"), rows)
  assert sf_gym.read_episodes(path) == rows
  assert sf_gym.reached(rows, 500, 4) == dict(seconds=6.0, steps=600, episodes=7)
  assert sf_gym.reached(rows, 501, 4) is None
  assert sf_gym.mean_at(rows, 450, 4) == pytest.approx((20 * 2 + 500 * 2) / 4)  # Steps 100-400.
  assert sf_gym.mean_at(rows, 50, 4) == 20.0 and sf_gym.mean_at(rows, -1, 4) is None
  (tmp_path / "other.csv").write_text("a,b\n1,2\n")
  with pytest.raises(ValueError, match="header"):
    sf_gym.read_episodes(str(tmp_path / "other.csv"))


def test_both_systems_episodes_are_read_as_seconds_steps_return(tmp_path):
  # Ours: progress every 5 s (steps 0, 0, 1000, 3000), episodes at 1000 and 2000 steps.
  records = [dict(kind="start", time=100.0, frames=0)]
  records += [dict(kind="progress", time=100.0 + 5 * i, frames=f)
              for i, f in enumerate([0, 0, 1000, 3000])]
  records.insert(4, dict(kind="episode", frames=1000, level="gym:CartPole-v1",
                         episode_return=30.0, episode_length=30))
  records.insert(5, dict(kind="episode", frames=2000, level="gym:CartPole-v1",
                         episode_return=40.0, episode_length=40))
  (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  # 1000 steps first at t=110, 3000 at t=115: 2000 steps at 112.5.
  assert sf_gym.ours_episodes(str(tmp_path)) == [(10.0, 1000, 30.0), (12.5, 2000, 40.0)]
  assert sf_gym.ours_episodes(str(tmp_path), launched=90.0)[0] == (20.0, 1000, 30.0)
  # Sample Factory: the reports' trained steps, interpolated at each episode's own time.
  peer = tmp_path / "peer"
  (peer / "games").mkdir(parents=True)
  stamp = lambda s: f"[2026-01-01 00:00:{s:02d},000][123]"
  (peer / "sample_factory.log").write_text("".join(
      f"{stamp(s)} Fps is (10 sec: 1.0, 60 sec: nan, 300 sec: nan). Total num frames: {n}. "
      f"Throughput: 0: 1.0. Samples: {n}. Policy #0 lag: (min: 0.0)\n"
      for s, n in ((10, 0), (15, 640), (20, 1920))))
  t0 = sf_gym.read_reports(str(peer / "sample_factory.log"))[0][0]
  (peer / "games" / "episodes_1.csv").write_text(f"{t0 + 7.5},25,25\n")
  (peer / "games" / "episodes_2.csv").write_text(f"{t0 + 2.5},12,12\n")
  assert sf_gym.peer_episodes(str(peer), launched=t0 - 10) == [
      (12.5, 320, 12.0), (17.5, 1280, 25.0)]


@pytest.mark.skipif(not SF_INSTALLED,
                    reason="no Sample Factory venv: bash benchmarks/peers/setup_sample_factory.sh")
def test_sample_factory_takes_the_gym_peers_command_line(tmp_path):
  # Sample Factory's own parser reads every override with the value meant (a renamed or
  # retyped option of another release would fail here, not an hour into a run).
  script = ("import json, sys\n"
            "from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args\n"
            "parser, _ = parse_sf_args(argv=sys.argv[1:])\n"
            f"parser.set_defaults(**{sf_gym.CHILD_DEFAULTS!r})\n"
            "cfg = parse_full_cfg(parser, sys.argv[1:])\n"
            "print(json.dumps(dict(vars(cfg)), default=str))\n")
  def parsed(*flags):
    argv = sf_gym.sample_factory_argv(_gym_args(tmp_path, *flags), str(tmp_path), "x")
    out = subprocess.run([SF_PYTHON, "-c", script, *argv], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
  impact = parsed("--algorithm=impact")
  assert (impact["num_epochs"], impact["ppo_clip_ratio"], impact["kl_loss_coeff"]) == (
      20, 0.4, 1.0)
  assert impact["actor_critic_share_weights"] is False
  cfg = parsed()
  assert (cfg["batch_size"], cfg["rollout"], cfg["num_envs_per_worker"]) == (640, 20, 24)
  assert cfg["encoder_mlp_layers"] == [256, 256] and cfg["nonlinearity"] == "tanh"
  assert cfg["lr_schedule"] == "linear_decay" and cfg["with_vtrace"] is True
  assert cfg["decoder_mlp_layers"] == [] and cfg["normalize_input"] is True
  assert cfg["value_bootstrap"] is True


def test_report_run_as_a_script_reads_our_log_and_the_steps_to_the_target(tmp_path):
  # As the README runs it (python benchmarks/peers/...py): the repository's package must be
  # importable from the script, and our episodes reach the target at the 100th episode.
  logdir = tmp_path / "ours_seed_1"
  logdir.mkdir()
  records = [dict(kind="start", time=0.0, frames=0), dict(kind="progress", time=0.0, frames=0)]
  records += [dict(kind="episode", frames=1000 * i, level="gym:CartPole-v1",
                   episode_return=500.0, episode_length=500) for i in range(1, 101)]
  records.append(dict(kind="progress", time=50.0, frames=100_000))
  (logdir / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  out = subprocess.run([sys.executable, os.path.join("benchmarks", "peers",
                                                     "sample_factory_gym.py"),
                        "--mode=report", f"--output_dir={tmp_path}"], cwd=sf_gym.REPOSITORY,
                       capture_output=True, text=True, timeout=120, check=True).stdout
  assert "ours seed 1: reached 500 at 100,000 steps, 50 s" in out
