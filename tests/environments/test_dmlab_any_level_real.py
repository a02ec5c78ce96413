"""DeepMind Lab levels outside DMLab-30 ("dmlab:<level>") on the real deepmind_lab module.

Skipped when the module is not installed (BUILD.md, "DeepMind Lab"). Each level runs in an
environment process, as actors run it (the engine must not share a process with TensorFlow).
"""
import numpy as np
import pytest

pytest.importorskip("deepmind_lab", reason="deepmind_lab is not installed; see BUILD.md")

from scalable_agent_tf2 import environments
from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
from scalable_agent_tf2.environments.families import dmlab as dmlab_family


@pytest.mark.parametrize("level_name", ["dmlab:nav_maze_random_goal_01", "dmlab:lt_chasm"])
def test_a_level_outside_dmlab30_runs_with_dmlab30s_presets(level_name):
  config = config_lib.resolve(config_lib.ExperimentConfig(level_name=level_name))
  for name, value in dmlab_family.DMLAB_LEVEL.items():
    assert getattr(config, name) == value, name
  env = environments.create_environment(level_name, seed=1, **config.family.environment_options(config))
  try:
    first = env.initial()
    assert first.done and first.observation.frame.shape == (72, 96, 3)
    assert first.observation.frame.dtype == np.uint8
    outputs = [env.step(step % env.spec.num_actions) for step in range(20)]
    assert all(o.observation.frame.shape == (72, 96, 3) for o in outputs)
    assert all(np.isfinite(o.reward) for o in outputs)
  finally:
    env.close()


def test_a_level_the_installed_module_lacks_is_named_with_the_nearest():
  with pytest.raises(ValueError, match="no level 'nav_maze_random_goal_1'.*"
                                       "dmlab:nav_maze_random_goal_01"):
    config_lib.resolve(config_lib.ExperimentConfig(level_name="dmlab:nav_maze_random_goal_1"))
