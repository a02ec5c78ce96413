"""benchmarks/peers/gym_defaults_side_by_side (and sb3_gym's stopping rule): the development
set, steps and time to a threshold from episode rows, medians with "not reached", the issue's
verdict, reading both systems' runs, and running them with stand-ins for both (the real runs
are a benchmark, not a test; no Stable-Baselines3 needed)."""
import dataclasses
import importlib
import json
import os
import sys
import textwrap

import pytest

from benchmarks.peers import gym_defaults_side_by_side as gds
from benchmarks.peers import sample_factory_gym as episode_file
from benchmarks.peers import sb3_gym
from benchmarks.studies import runs

# Issue 42's development set: threshold of each environment (None: side by side only).
ISSUE_THRESHOLDS = {
    ("CartPole-v1", ""): 475, ("LunarLander-v3", ""): 200,
    ("LunarLander-v3", '{"continuous": true}'): 200, ("Pendulum-v1", ""): -200,
    ("MiniGrid-Empty-8x8-v0", ""): 0.9, ("MiniGrid-Unlock-v0", ""): 0.8,
    ("MinAtar/Breakout-v1", ""): None, ("BipedalWalker-v3", ""): None,
    # Box actions on gymnasium's MuJoCo tasks: gymnasium's reward_threshold (none for Walker2d).
    ("Hopper-v5", ""): 3800.0, ("Walker2d-v5", ""): None, ("HalfCheetah-v5", ""): 4800.0,
    ("Reacher-v5", ""): -3.75}


def test_the_development_set_is_the_issues_with_its_thresholds():
  found = {(sb3_gym.registered_name(env.level), env.env_kwargs): env.threshold
           for env in gds.DEVELOPMENT_SET}
  assert found == ISSUE_THRESHOLDS
  assert len(gds.ENVIRONMENTS) == len(gds.DEVELOPMENT_SET)  # Names unique.
  assert [env.name for env in gds.DEVELOPMENT_SET if env.optional] == ["BipedalWalker-v3"]
  for env in gds.DEVELOPMENT_SET:
    assert env.budget >= 100_000 and "/" not in env.name
    assert env.env_kwargs == "" or isinstance(json.loads(env.env_kwargs), dict)
    module = env.level.rpartition(":")[0]
    if module:  # A registering module of the repository (gymnasium's module:id form).
      assert os.path.exists(os.path.join(runs.REPO_DIR, *module.split(".")) + ".py")


def _rows(returns, steps_per_episode=100, seconds_per_episode=2.0):
  return [(seconds_per_episode * (i + 1), steps_per_episode * (i + 1), float(r))
          for i, r in enumerate(returns)]


def test_steps_and_seconds_to_the_threshold_need_a_full_window():
  # 99 episodes of 500 are not a window; the 100th completes the first full one.
  rows = _rows([500.0] * 150)
  assert gds.steps_to_threshold(rows, 475) == dict(seconds=200.0, steps=10_000, episodes=100)
  # The mean of the last 100 reaches 475 at the episode where 75 of 100 are 500 and 25 are
  # 400: episodes 1..100 at 400 then 500s, the 75th 500 is episode 175.
  rows = _rows([400.0] * 100 + [500.0] * 100)
  assert gds.steps_to_threshold(rows, 475)["episodes"] == 175
  assert gds.steps_to_threshold(rows, 501) is None
  assert gds.steps_to_threshold(rows, None) is None  # Side by side only.
  summary = gds.run_summary(rows, 475, complete=True)
  assert summary == dict(steps_to=17_500, seconds_to=350.0, final=500.0, end_steps=20_000,
                         episodes=200, complete=True)
  assert gds.run_summary([], 475, complete=False)["final"] is None


def test_median_and_range_count_not_reached_above_every_number():
  assert gds.median_range([300, None, 100]) == dict(median=300.0, low=100.0, high=None,
                                                    reached=2, count=3)
  assert gds.median_range([None, 100, None])["median"] is None  # Most seeds did not.
  assert gds.median_range([100, 200])["median"] == 150.0
  assert gds.median_range([100, None])["median"] is None
  assert gds.median_range([])["count"] == 0
  text = gds.format_median_range(gds.median_range([120_000, None, 100_000]), gds.format_steps)
  assert text == "120k [100k, not reached] (2/3 reached)"
  assert gds.format_steps(1_250_000) == "1.25M"
  assert gds.format_seconds(90) == "90 s" and gds.format_seconds(900) == "15.0 min"
  assert gds.ratio(150, 100) == 1.5 and gds.ratio(None, 100) is None
  assert gds.ratio(100, None) is None


def _run(steps_to, seconds_to=None, final=500.0, complete=True):
  return dict(steps_to=steps_to, seconds_to=seconds_to if steps_to else None, final=final,
              end_steps=steps_to or 1_000_000, episodes=1000, complete=complete)


PPO_REACHES = [_run(100_000, 300), _run(120_000, 360), _run(140_000, 420)]


@pytest.mark.parametrize("ours, status, why", [
    # Every seed, within 1.5x the steps (150k / 120k = 1.25) and less wall time: met.
    ([_run(150_000, 200), _run(160_000, 210), _run(130_000, 190)], "met", "every seed"),
    # Exactly 1.5x PPO's median steps is within the limit.
    ([_run(180_000, 200)] * 3, "met", "every seed"),
    ([_run(181_000, 200)] * 3, "NOT met", "1.51x PPO's median steps"),
    ([_run(100_000, 360)] * 3, "NOT met", "360 s of wall time, PPO 360 s"),
    ([_run(100_000, 200), _run(100_000, 200), _run(None, final=400.0)], "NOT met",
     "ours reached it in 2 of 3 seeds"),
])
def test_the_verdict_where_ppo_reaches_the_threshold(ours, status, why):
  found_status, found_why = gds.verdict(475, ours, PPO_REACHES)
  assert found_status == status and why in found_why


PPO_MISSES = [_run(None, final=150.0), _run(None, final=180.0), _run(100_000, 300, 210.0)]


@pytest.mark.parametrize("ours, status, why", [
    ([_run(2_000_000, 900)] * 3, "met", "ours reached it in every seed"),
    # Mean of seeds 170 within PPO's finals [150, 210].
    ([_run(None, final=160.0), _run(None, final=180.0), _run(150_000, 400, 170.0)], "met",
     "within PPO's seed range"),
    ([_run(None, final=220.0)] * 3, "met", "above PPO's seed range"),
    ([_run(None, final=100.0), _run(None, final=120.0), _run(None, final=140.0)], "NOT met",
     "below PPO's seed range"),
])
def test_the_verdict_where_ppo_does_not_reach_the_threshold(ours, status, why):
  found_status, found_why = gds.verdict(200, ours, PPO_MISSES)
  assert found_status == status and why in found_why


def test_the_verdict_waits_for_every_run_and_has_nothing_to_say_without_a_threshold():
  ours = [_run(100_000, 200)] * 3
  assert gds.verdict(475, ours, PPO_REACHES[:2] + [None]) == ("not decided",
                                                             "5 of 6 runs finished")
  unfinished = [_run(100_000, 200), _run(100_000, 200), _run(None, complete=False)]
  assert gds.verdict(475, unfinished, PPO_REACHES)[0] == "not decided"
  assert gds.verdict(475, ours, [])[0] == "not decided"
  assert gds.verdict(None, ours, PPO_REACHES)[0] == "side by side only"


def test_the_table_has_a_row_per_system_with_the_ratios_of_the_medians():
  env = gds.ENVIRONMENTS["CartPole-v1"]
  text = gds.table(env, {gds.OURS: dict(enumerate([_run(150_000, 200), _run(130_000, 180),
                                                   None], 1)),
                         gds.PPO: dict(enumerate(PPO_REACHES, 1))}, [1, 2, 3])
  lines = text.splitlines()
  assert lines[0].startswith("| system | runs finished | steps to 475: median [range] |")
  assert lines[2].startswith("| this project (no flags) | 2/3 | 140k [130k, 150k] (2/2 "
                             "reached) | 190 s [180 s, 200 s] (2/2 reached) |")
  # ours / PPO: 140k / 120k steps, 190 s / 360 s.
  assert lines[3].endswith("| 1.17 | 0.53 |")


def test_sb3_gyms_stopping_rule_is_the_threshold_then_the_budget_then_the_time():
  returns = [500.0] * 100
  assert sb3_gym.target_reached(returns, 475, 100)
  assert not sb3_gym.target_reached(returns[:99], 475, 100)
  assert not sb3_gym.target_reached(returns, None, 100)
  stop = sb3_gym.stop_reason
  assert "reached 475" in stop(returns, 10_000, 5.0, 475, 100, 20_000, 60.0)
  assert stop(returns[:99], 20_000, 5.0, 475, 100, 20_000, 60.0) == "20,000 steps trained"
  assert "--max_seconds" in stop(returns[:99], 10_000, 60.0, 475, 100, 20_000, 60.0)
  assert stop(returns[:99], 10_000, 5.0, 475, 100, 20_000, 60.0) is None


def _write_log(logdir, records):
  os.makedirs(logdir, exist_ok=True)
  with open(os.path.join(logdir, "log.jsonl"), "w") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


def _episode(frames, episode_return):
  return dict(kind="episode", frames=frames, level="gym:CartPole-v1",
              episode_return=episode_return, episode_length=100)


def test_our_seconds_count_from_each_launch_and_skip_the_time_between_attempts(tmp_path):
  # Launched at 90 (imports until its START at 100), killed after its record at 110; launched
  # again at 1,000 (START at 1,010) from the checkpoint at 100 steps.
  _write_log(tmp_path, [dict(kind="start", time=100.0, frames=0), _episode(100, 10.0),
                        dict(kind="progress", time=110.0, frames=100, updates=1),
                        dict(kind="start", time=1010.0, frames=100), _episode(200, 20.0),
                        dict(kind="progress", time=1020.0, frames=200, updates=1)])
  with open(tmp_path / gds.LAUNCHES_FILE, "w") as f:
    json.dump([90.0, 1000.0], f)
  # 20 s of the first attempt, then 20 s into the second.
  assert gds.ours_rows(str(tmp_path)) == [(20.0, 100, 10.0), (40.0, 200, 20.0)]
  assert gds.ours_rows(str(tmp_path / "missing")) == []


def test_a_peers_episodes_without_the_line_being_written(tmp_path):
  episode_file.write_episodes(str(tmp_path / "episodes.csv"), [(1.0, 10, 9.0), (2.0, 20, 11.0)])
  with open(tmp_path / "episodes.csv", "a") as f:
    f.write("3.0,3")
  assert gds.episode_rows(str(tmp_path)) == [(1.0, 10, 9.0), (2.0, 20, 11.0)]
  assert gds.episode_rows(str(tmp_path / "missing")) == []


FAKE_TRAINER = textwrap.dedent("""
    import json, signal, sys, time
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])
    logdir, budget = flags["logdir"], int(flags["total_environment_frames"])
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    log = open(logdir + "/log.jsonl", "a")
    log.write(json.dumps(dict(kind="start", time=time.time(), frames=0)) + "\\n")
    frames = 0
    while not stop and frames < budget:
      frames += 100
      log.write(json.dumps(dict(kind="episode", frames=frames, level="gym:CartPole-v1",
                                episode_return=frames / 100, episode_length=100)) + "\\n")
      log.write(json.dumps(dict(kind="progress", time=time.time(), frames=frames,
                                updates=1)) + "\\n")
      log.flush()
      time.sleep(0.001)
    sys.exit(int(flags.get("exit_code", 0)))
    """)


def _fake_ours(tmp_path, monkeypatch, **extra):
  script = tmp_path / "fake_trainer.py"
  script.write_text(FAKE_TRAINER)
  monkeypatch.setattr(runs, "experiment_command", lambda logdir, **flags: [
      sys.executable, str(script), f"--logdir={logdir}"] + [
          f"--{k}={v}" for k, v in {**flags, **extra}.items()])
  monkeypatch.setattr(gds, "POLL_SECONDS", 0.05)


def test_our_run_stops_at_the_threshold_with_sigint_and_is_then_skipped(tmp_path, monkeypatch):
  _fake_ours(tmp_path, monkeypatch)
  env = gds.Environment("Fake", "CartPole-v1", threshold=250.0, budget=10_000_000)
  logdir = str(tmp_path / "ours_seed_1")
  lines = []
  # Returns 1, 2, 3, ...: the mean of the last 100 reaches 250 at episode 300 (30,000 steps).
  assert gds.run_ours(env, 1, logdir, float("inf"), lines.append) is None
  complete = json.load(open(os.path.join(logdir, gds.COMPLETE_FILE)))
  assert "reached 250 at" in complete["reason"] and complete["steps"] < 10_000_000
  rows = episode_file.read_episodes(os.path.join(logdir, "episodes.csv"))
  assert gds.steps_to_threshold(rows, 250.0)["steps"] == 30_000
  assert "--seed=1" in lines[0]
  gds.run_ours(env, 1, logdir, float("inf"), lines.append)
  assert lines[-1].endswith("already finished")


def test_our_run_stops_at_its_budget_and_a_failure_is_reported_not_raised(tmp_path,
                                                                          monkeypatch):
  _fake_ours(tmp_path, monkeypatch)
  env = gds.Environment("Fake", "CartPole-v1", threshold=None, budget=2_000)
  logdir = str(tmp_path / "ours_seed_2")
  assert gds.run_ours(env, 2, logdir, float("inf"), print) is None
  assert json.load(open(os.path.join(logdir, gds.COMPLETE_FILE)))["reason"] == (
      "2,000 steps trained")
  _fake_ours(tmp_path, monkeypatch, exit_code=1)
  logdir = str(tmp_path / "ours_seed_3")
  error = gds.run_ours(env, 3, logdir, float("inf"), print)
  assert error.startswith("exited with 1 at 2,000 steps")
  assert not os.path.exists(os.path.join(logdir, gds.COMPLETE_FILE))
  assert gds.read_run(str(tmp_path), env, gds.OURS, 3)[2] is None  # Not under <output>/Fake.


FAKE_PEER = textwrap.dedent("""
    import json, os, sys
    flags = dict(a[2:].split("=", 1) for a in sys.argv[2:])
    if os.environ.get("FAKE_PEER_FAILS"):
      sys.exit("Traceback: ValueError: no such environment")
    with open(os.path.join(flags["output_dir"], "episodes.csv"), "w") as f:
      f.write("seconds,steps,episode_return\\n1.0,500,20\\n")
    with open(os.path.join(flags["output_dir"], "complete.json"), "w") as f:
      json.dump(dict(reason=flags["steps"] + " steps trained"), f)
    """)


def _fake_peer(tmp_path, monkeypatch):
  """FAKE_PEER as sb3_gym.py, under a venv whose Python is this one; returns the venv."""
  script = tmp_path / "fake_peer.py"
  script.write_text(FAKE_PEER)
  monkeypatch.setattr(gds, "PEER_SCRIPT", str(script))
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  os.symlink(sys.executable, venv / "bin" / "python")
  return venv


def test_a_peer_run_restarts_from_zero_is_skipped_when_done_and_a_failure_is_kept(
    tmp_path, monkeypatch):
  venv = _fake_peer(tmp_path, monkeypatch)
  env = gds.ENVIRONMENTS["CartPole-v1"]
  output_dir = str(tmp_path / "out")
  directory = gds.run_directory(output_dir, env, gds.PPO, 1)
  monkeypatch.setenv("FAKE_PEER_FAILS", "1")
  lines = []
  error = gds.run_peer(env, 1, gds.PPO, directory, str(venv), 60.0, lines.append)
  assert "no such environment" in error
  assert gds.read_run(output_dir, env, gds.PPO, 1) == ([], False, error)
  monkeypatch.delenv("FAKE_PEER_FAILS")
  assert gds.run_peer(env, 1, gds.PPO, directory, str(venv), 120.0, lines.append) is None
  assert any("restarts from zero" in line for line in lines)
  assert "--max_seconds=120" in lines[-2] and "--target=475" in lines[-2]
  assert gds.read_run(output_dir, env, gds.PPO, 1) == ([(1.0, 500, 20.0)], True, None)
  gds.run_peer(env, 1, gds.PPO, directory, str(venv), 120.0, lines.append)
  assert lines[-1].endswith("already finished")
  # Another budget in the same directory is another run: refused.
  with pytest.raises(SystemExit, match="another command"):
    gds.run_peer(gds.Environment("CartPole-v1", "CartPole-v1", 475.0, 1_000), 1, gds.PPO,
                 directory, str(venv), 120.0, lines.append)


def test_finished_runs_are_kept_in_the_archive_and_not_made_again_on_another_machine(
    tmp_path, monkeypatch, capsys):
  _fake_ours(tmp_path, monkeypatch)
  venv = _fake_peer(tmp_path, monkeypatch)
  archive = tmp_path / "archive"
  argv = [f"--archive_dir={archive}", "--envs=CartPole-v1", "--seeds=1", "--steps=2000",
          "--systems=ours,sb3_ppo", f"--venv={venv}"]
  first, second = str(tmp_path / "first_machine"), str(tmp_path / "second_machine")
  assert gds.main([f"--output_dir={first}"] + argv) == 0
  env = dataclasses.replace(gds.ENVIRONMENTS["CartPole-v1"], budget=2000)
  for system in (gds.OURS, gds.PPO):  # The small files only: no log, no checkpoint.
    assert sorted(os.listdir(gds.run_directory(str(archive), env, system, 1))) == sorted(
        gds.ARCHIVED_FILES)
  ours_first = gds.read_run(first, env, gds.OURS, 1)
  assert len(ours_first[0]) == 20 and ours_first[1]
  capsys.readouterr()
  # The next machine: nothing is run again (both systems would fail now), the report reads
  # the archived episodes.
  monkeypatch.setenv("FAKE_PEER_FAILS", "1")
  (tmp_path / "fake_trainer.py").write_text("raise SystemExit(1)\n")  # The same command.
  assert gds.main([f"--output_dir={second}"] + argv) == 0
  output = capsys.readouterr().out
  assert output.count("already finished") == 2 and "finished in" in output
  assert gds.read_run(second, env, gds.OURS, 1) == ours_first
  assert gds.read_run(second, env, gds.PPO, 1) == gds.read_run(first, env, gds.PPO, 1)
  assert "| this project (no flags) | 1/1 |" in output
  # A candidate's command finds the defaults' finished runs there: refused, not reported as its.
  with pytest.raises(SystemExit, match="holds a finished run of another command"):
    gds.main([f"--output_dir={tmp_path / 'third_machine'}", "--ours_flags=--gae_lambda=0.9"]
             + argv)


def _write_finished(output_dir, env, system, seed, rows):
  """A finished run of system as it leaves its directory (ours: its log; a peer: episodes.csv)."""
  directory = gds.run_directory(str(output_dir), env, system, seed)
  os.makedirs(directory)
  if system == gds.OURS:
    _write_log(directory, [dict(kind="start", time=1000.0, frames=0)] + [
        record for seconds, frames, value in rows for record in (
            _episode(frames, value),
            dict(kind="progress", time=1000.0 + seconds, frames=frames, updates=1))])
    with open(os.path.join(directory, gds.LAUNCHES_FILE), "w") as f:
      json.dump([1000.0], f)
  else:
    episode_file.write_episodes(os.path.join(directory, "episodes.csv"), rows)
  with open(os.path.join(directory, gds.COMPLETE_FILE), "w") as f:
    json.dump(dict(reason="test"), f)


def test_the_report_prints_each_table_and_verdict_and_writes_the_figure(tmp_path, capsys):
  env = gds.ENVIRONMENTS["CartPole-v1"]
  for seed in (1, 2):
    for system, steps in ((gds.OURS, 100), (gds.PPO, 200)):
      _write_finished(tmp_path, env, system, seed,
                      _rows([500.0] * 120, steps_per_episode=steps, seconds_per_episode=steps / 100))
  assert gds.main([f"--output_dir={tmp_path}", "--mode=report", "--envs=CartPole-v1",
                   "--seeds=1,2"]) == 0
  output = capsys.readouterr().out
  # Ours reaches 475 at its 100th episode: 10k steps, 100 s; PPO at 20k steps, 200 s.
  assert "| this project (no flags) | 2/2 | 10k [10k, 10k] (2/2 reached) | 100 s" in output
  assert "| 0.50 | 0.50 |" in output
  assert "verdict: met (ours reached it in every seed" in output
  assert os.path.getsize(tmp_path / "CartPole-v1.png") > 10_000


def test_without_a_reward_threshold_ppos_median_return_at_the_end_is_the_threshold(tmp_path,
                                                                                   capsys):
  env = gds.ENVIRONMENTS["Walker2d-v5"]
  assert env.threshold is None and env.threshold_from_ppo
  # PPO's seeds end at 1,000 and 2,000 (the mean of their last 100): the threshold is 1,500,
  # which PPO's seed 2 reaches at its 100th episode (100k steps) and seed 1 never.
  _write_finished(tmp_path, env, gds.PPO, 1, _rows([1000.0] * 200, 1000, 2.0))
  _write_finished(tmp_path, env, gds.PPO, 2, _rows([2000.0] * 200, 1000, 2.0))
  _write_finished(tmp_path, env, gds.OURS, 1, _rows([1500.0] * 200, 1000, 1.0))
  assert gds.main([f"--output_dir={tmp_path}", "--mode=report", "--envs=Walker2d-v5",
                   "--seeds=1,2"]) == 0
  output = capsys.readouterr().out
  assert "threshold 1500 (PPO's median return at the end)" in output
  assert "| SB3 PPO (its defaults) | 2/2 | not reached [100k, not reached] (1/2 reached)" in output
  assert "verdict: not decided (3 of 4 runs finished)" in output
  # Until PPO's runs have finished there is no threshold to judge at.
  unfinished = gds.threshold_of(env, [([(1.0, 1000, 5.0)], True), None])
  assert unfinished.threshold is None
  assert "PPO's median return at the end, when its runs finish" in gds.title(unfinished, [1, 2])
  assert gds.threshold_of(env, [([(1.0, 1, 5.0)], True), ([(1.0, 1, 7.0)], True)]).threshold == 6
  # An environment with a reward threshold keeps it.
  hopper = gds.ENVIRONMENTS["Hopper-v5"]
  assert gds.threshold_of(hopper, [([(1.0, 1, 5.0)], True)]) is hopper


def test_bad_input_is_refused_with_what_to_do(tmp_path, capsys):
  for argv, message in (
      ([f"--output_dir={os.path.join(runs.REPO_DIR, 'runs')}"], "inside the repository"),
      ([f"--output_dir={tmp_path}", "--envs=CartPole"], "choose among CartPole-v1"),
      ([f"--output_dir={tmp_path}", "--systems=ours,torchbeast"], "--systems"),
      ([f"--output_dir={tmp_path}", "--seeds=1,two"], "--seeds=1,two"),
      ([f"--output_dir={tmp_path}", f"--venv={tmp_path / 'none'}"], "setup_sb3.sh"),
      ([f"--output_dir={tmp_path}", "--ours_flags=gae_lambda=0.95"], "--name=value"),
      ([f"--output_dir={tmp_path}", "--ours_flags=--gae_lambda"], "--name=value"),
      ([f"--output_dir={tmp_path}", "--ours_flags=--seed=2"], "harness's own"),
      ([f"--output_dir={tmp_path}", "--ours_flags=--gae_lambda=0.9", "--figures"],
       "under a name of its own")):
    with pytest.raises(SystemExit):
      gds.parse_args(argv)
    assert message in capsys.readouterr().err
  args = gds.parse_args([f"--output_dir={tmp_path}", "--mode=report", "--steps=20000"])
  assert [env.name for env in args.envs] == [
      env.name for env in gds.DEVELOPMENT_SET if not env.optional]
  assert {env.budget for env in args.envs} == {20_000} and args.seeds == [1, 2, 3]
  assert args.systems == [gds.OURS, gds.PPO] and args.ours_flags == {}


def test_ours_flags_join_our_command_after_the_harnesss(tmp_path, monkeypatch):
  _fake_ours(tmp_path, monkeypatch)
  args = gds.parse_args([f"--output_dir={tmp_path}", "--mode=report",
                         "--ours_flags=--gae_lambda=0.95 --log_std=state"])
  assert args.ours_flags == {"gae_lambda": "0.95", "log_std": "state"}
  env = gds.Environment("Fake", "CartPole-v1", threshold=None, budget=2_000)
  command = gds.ours_command(env, 3, "/tmp/x", args.ours_flags)
  assert command[-4:] == ["--seed=3", "--total_environment_frames=2000",
                          "--gae_lambda=0.95", "--log_std=state"]
  logdir = str(tmp_path / "ours_seed_3")
  assert gds.run_ours(env, 3, logdir, float("inf"), print, args.ours_flags) is None
  assert "--gae_lambda=0.95" in json.load(open(os.path.join(logdir, gds.COMPLETE_FILE)))[
      "command"]
  # Its table and figure name the flags: they are not the defaults' numbers.
  summary = gds.run_summary(gds.ours_rows(logdir), None, True)
  labels = gds.labels_for(args.ours_flags)
  row = gds.table(env, {gds.OURS: {3: summary}}, [3], labels).splitlines()[-1]
  assert row.startswith("| this project (--gae_lambda=0.95 --log_std=state) |")
  assert gds.labels_for({})[gds.OURS] == "this project (no flags)"


def test_a_missing_benchmark_package_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
  # The MinAtar run of 2026-11-29 failed after launching ours ("No module named 'minatar'");
  # the harness now refuses first and names the requirements file to install.
  present = {"minigrid"}
  monkeypatch.setattr(gds.importlib.util, "find_spec",
                      lambda name: object() if name in present else None)
  argv = [f"--output_dir={tmp_path}", "--envs=MinAtar-Breakout-v1,MiniGrid-Unlock-v0",
          "--systems=ours", "--seeds=1"]
  with pytest.raises(SystemExit):
    gds.parse_args(argv)
  error = capsys.readouterr().err
  assert ("MinAtar-Breakout-v1 needs minatar" in error
          and "benchmarks/requirements-minatar.txt" in error and "minigrid" not in error)
  for env in gds.DEVELOPMENT_SET:  # Every package named has its requirements file.
    if env.requires:
      assert os.path.exists(os.path.join(runs.REPO_DIR, "benchmarks",
                                         f"requirements-{env.requires}.txt"))
  present.add("minatar")
  assert gds.parse_args(argv).envs[0].name == "MinAtar-Breakout-v1"
  present.clear()  # The peers alone run in their own venv: nothing asked of this one.
  gds.parse_args(argv[:-2] + [f"--venv={sys.prefix}", "--systems=sb3_ppo", "--seeds=1"])
  gds.parse_args(argv[:-2] + ["--mode=report", "--systems=ours", "--seeds=1"])


def test_the_minatar_registering_module_names_its_install_without_minatar(monkeypatch):
  # What ours' start-up prints (its error: line) for gym:benchmarks.peers.register_minatar:...
  # on a venv without minatar: the missing module and the command that installs it.
  monkeypatch.setitem(sys.modules, "minatar", None)  # `import minatar...` raises ImportError.
  monkeypatch.setitem(sys.modules, "minatar.gym", None)
  monkeypatch.delitem(sys.modules, "benchmarks.peers.register_minatar", raising=False)
  with pytest.raises(ImportError, match="minatar.*benchmark-only package; pip install "
                                        "--no-deps -r benchmarks/requirements-minatar.txt"):
    importlib.import_module("benchmarks.peers.register_minatar")
