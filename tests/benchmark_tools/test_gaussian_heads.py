"""benchmarks/studies/gaussian_heads.py: each head's rows from the runs a harness kept, the
threshold of an environment without one from PPO's runs, and runs not finished left out."""
import csv
import json

from benchmarks.peers import gym_defaults_side_by_side as harness
from benchmarks.studies import gaussian_heads

WALKER = harness.ENVIRONMENTS["Walker2d-v5"]


def _run(directory, system, seed, returns, finished=True):
  """A kept run: one episode per 10k steps with `returns`, 1 s apart (the harness's threshold
  takes a full window of 100 returns)."""
  run = directory / WALKER.name / f"{system}_seed_{seed}"
  run.mkdir(parents=True)
  with open(run / "episodes.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["seconds", "steps", "episode_return"])
    writer.writerows((i + 1.0, (i + 1) * 10_000, r) for i, r in enumerate(returns))
  if finished:
    (run / harness.COMPLETE_FILE).write_text(json.dumps(dict(reason="budget")))


def test_the_heads_rows_and_a_threshold_from_ppos_runs(tmp_path, capsys):
  ppo, state, free = tmp_path / "ppo", tmp_path / "state", tmp_path / "free"
  _run(ppo, harness.PPO, 1, [100.0] * 100)   # Ends at 100.
  _run(ppo, harness.PPO, 2, [300.0] * 100)   # Ends at 300: the threshold is 200.
  _run(state, harness.OURS, 1, [150.0] * 100)  # Never at 200.
  _run(free, harness.OURS, 1, [0.0] * 20 + [400.0] * 80)  # Full window at 1M.
  _run(free, harness.OURS, 2, [400.0] * 100, finished=False)  # Still running: left out.
  gaussian_heads.main([f"--heads=state:{state},free:{free}", f"--ppo={ppo}", "--seeds=1,2",
                       "--envs=Walker2d-v5"])
  printed = capsys.readouterr().out
  assert "Walker2d-v5 (threshold 200.00):" in printed
  assert "| state, 1 | 150 / 150 / 150 / 150 / 150 / 150 | not reached | 150 | 100 s |" in printed
  assert "| free, 1 | 0 / 0 / 133 / 240 / 293 / 320 | 1000k, 100 s | 320 | 100 s |" in printed
  assert "free, 2" not in printed
  assert "- free: 1 of 1 seeds reached it (median steps 1,000,000)" in printed
  assert "- PPO: 1 of 2 seeds reached it (median steps -)" in printed  # A full window of 300.
