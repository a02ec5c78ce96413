"""benchmarks/speed/mujoco_groups.py: its actions, its layouts and a short measurement."""
import numpy as np
import pytest

from benchmarks.speed import mujoco_groups
from scalable_agent_tf2.configuration import config as config_lib


def test_random_actions_stay_in_the_bounds():
  config = config_lib.config_from_argv(["--level_name=mujoco/humanoid"])
  groups = mujoco_groups.start_groups(config, in_process=True)
  try:
    spec = groups[0].spec
    actions = mujoco_groups.random_actions(spec, 1000, np.random.default_rng(0))
    assert actions.shape == (1000, spec.action_size) and actions.dtype == np.float32
    assert (actions >= spec.action_low).all() and (actions <= spec.action_high).all()
    assert actions.min() < 0.9 * spec.action_low.min()  # Spread over the box, not near 0.
    # The preset's layout holds the paper's 16 workers.
    assert sum(g.num_envs for g in groups) >= mujoco_groups.WORKERS
    assert len(groups) == config.num_actors
  finally:
    for group in groups:
      group.close()


def test_environments_alone_in_process_gives_a_rate_and_a_cost():
  config = config_lib.config_from_argv(["--level_name=mujoco/hopper", "--num_actors=2",
                                        "--envs_per_actor=2"])
  rate, cost = mujoco_groups.environments_alone(config, True, seconds=2.0, warmup=0.5)
  assert rate > 0 and cost > 0


def test_seconds_must_exceed_the_warmup(capsys):
  with pytest.raises(SystemExit):
    mujoco_groups.parse_args(["--seconds=10", "--warmup=10"])
  assert "--seconds must exceed --warmup" in capsys.readouterr().err
