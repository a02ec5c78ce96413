"""The MiniGrid instruction study's control level (benchmarks/studies/minigrid_controls.py):
the same rooms, images and rewards as MiniGrid-Fetch-5x5-N2-v0 for the same seed, only the
mission blanked. Skipped, with the install command, without the benchmark-only minigrid."""
import numpy as np
import pytest

pytest.importorskip(
    "minigrid", reason="minigrid is a benchmark-only package, not in requirements.txt: "
    "pip install --no-deps -r benchmarks/requirements-minigrid.txt")

# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks.studies import minigrid_controls
from scalable_agent_tf2.environments import gym_env


def test_the_blanked_level_differs_from_fetch_only_in_its_mission():
  fetch = gym_env.GymEnvironment(f"gym:{minigrid_controls.FETCH_LEVEL}", seed=5)
  blank = gym_env.GymEnvironment(minigrid_controls.BLANK_LEVEL, seed=5)
  try:
    outputs = [(fetch.initial(), blank.initial())]
    rng = np.random.default_rng(0)
    for _ in range(200):  # Several episodes: pickups end them, with and without reward.
      action = int(rng.integers(7))
      outputs.append((fetch.step(action), blank.step(action)))
  finally:
    fetch.close()
    blank.close()
  missions = set()
  for real, blanked in outputs:
    np.testing.assert_array_equal(real.observation.frame, blanked.observation.frame)
    assert (real.reward, real.done) == (blanked.reward, blanked.done)
    assert blanked.observation.instruction == minigrid_controls.BLANK_MISSION
    missions.add(real.observation.instruction)
  assert sum(real.done for real, _ in outputs) >= 3
  # The real missions name an object: several of them, none of them the blank text.
  assert len(missions) >= 3 and minigrid_controls.BLANK_MISSION not in missions
