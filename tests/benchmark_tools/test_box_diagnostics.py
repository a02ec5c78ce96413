"""benchmarks/studies/box_diagnostics.py: the Gaussian's scale from the logged entropy, and the
table's rows from a run's log (the points, the running mean, the episodes cut by the limit)."""
import json
import math

import numpy as np
import tensorflow as tf

from benchmarks.studies import box_diagnostics
from scalable_agent_tf2.agent import distributions


def test_the_mean_log_std_is_read_back_from_the_summed_entropy():
  log_std = np.array([[-1.0, -0.5, 0.25]] * 6, np.float32)  # 6 steps, 3 dimensions.
  gaussian = distributions.DiagGaussian(tf.zeros_like(log_std), log_std)
  entropy_loss = -float(tf.reduce_sum(gaussian.entropy()))  # losses.entropy_loss's sign.
  got = box_diagnostics.mean_log_std(entropy_loss, steps_per_batch=6, action_size=3)
  assert math.isclose(got, float(np.mean(log_std)), abs_tol=1e-5)


def test_rows_come_from_the_last_update_before_each_point_and_the_episodes_so_far(tmp_path):
  records = [dict(kind="start", frames=0, time=100.0)]
  for frames, entropy_loss in ((1_000, -500.0), (2_000, -400.0)):
    records.append(dict(kind="progress", frames=frames, time=100.0 + frames / 100,
                        entropy_loss=entropy_loss, baseline_loss=2.56, kl_loss=0.256,
                        grad_norm=3.0, updates=frames // 10, popart_sigma=[4.0]))
  lengths = [1000, 10, 1000, 10]  # Two of four cut by the time limit.
  records += [dict(kind="episode", frames=500 * (i + 1), episode_return=float(i),
                   episode_length=n, level="gym:X") for i, n in enumerate(lengths)]
  with open(tmp_path / "log.jsonl", "w") as log:
    log.writelines(json.dumps(r) + "\n" for r in records)
  args = box_diagnostics.parse_args([str(tmp_path), "--action_size=3", "--time_limit=1000",
                                     "--steps_per_batch=256", "--at=1500,2000,9000"])
  rows = box_diagnostics.rows_at(records, [1500, 2000, 9000], args)
  assert [r["steps"] for r in rows] == [1000, 2000]  # 9,000: past the end, not repeated.
  first, last = rows
  assert first["running_mean"] == 1.0 and math.isclose(first["cut_by_time_limit"], 2 / 3)
  assert last["running_mean"] == 1.5 and last["seconds"] == 20.0
  assert last["sigma"] == 4.0 and last["updates_per_step"] == 0.1
  assert math.isclose(last["baseline_loss"], 0.01) and math.isclose(last["kl"], 0.001)
  assert math.isclose(last["log_std"], 400.0 / 256 / 3 - 0.5 * math.log(2 * math.pi * math.e))
  assert box_diagnostics.table(rows).count("\n") == 3  # Header, rule, two rows.
