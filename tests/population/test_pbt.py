"""Population-based training's decisions (IMPALA Appendix F, Table D.1) with seeded rngs."""
import json
import math
import os

import numpy as np
import pytest

from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.population import pbt
from scalable_agent_tf2.runfiles import runlog


def test_table_d1_sampler_ranges_and_distributions():
  rng = np.random.default_rng(0)
  draws = [pbt.sample_hyperparameters(rng) for _ in range(8000)]
  for name, (low, high) in (("entropy_cost", (5e-5, 1e-2)),
                            ("learning_rate", (5e-6, 5e-3))):
    values = np.array([d[name] for d in draws])
    assert values.min() >= low and values.max() <= high
    # Log-uniform: log10 of the values is uniform over [log10 low, log10 high].
    logs = (np.log(values) - math.log(low)) / (math.log(high) - math.log(low))
    np.testing.assert_allclose(np.histogram(logs, bins=4, range=(0, 1))[0] / len(draws),
                               0.25, atol=0.02)
  epsilons = [d["epsilon"] for d in draws]
  for choice in (1e-1, 1e-3, 1e-5, 1e-7):
    assert epsilons.count(choice) / len(draws) == pytest.approx(0.25, abs=0.02)
  assert set(epsilons) == {1e-1, 1e-3, 1e-5, 1e-7}


def test_perturbation_factors_and_frequencies():
  rng = np.random.default_rng(1)
  start = dict(entropy_cost=0.01, learning_rate=0.0006, epsilon=0.01, max_grad_norm=40.0,
               other=7.0)
  ratios = {name: [] for name in start}
  for _ in range(12000):
    after = pbt.perturb(start, pbt.ADAPTED_ATARI, rng)
    for name in start:
      ratios[name].append(after[name] / start[name])
  assert set(ratios["other"]) == {1.0}  # Not adapted: never changed.
  for name in pbt.ADAPTED_ATARI:
    values = np.array(ratios[name])
    up, down = np.isclose(values, 1.2), np.isclose(values, 1 / 1.2)
    assert np.all(up | down | (values == 1.0))
    # Appendix F: changed with probability 1/3, by 1.2 or 1/1.2 equally often.
    assert np.mean(up | down) == pytest.approx(1 / 3, abs=0.015)
    assert np.mean(up) == pytest.approx(1 / 6, abs=0.012)
    assert np.mean(down) == pytest.approx(1 / 6, abs=0.012)
  # Independently per hyperparameter: both of two change in about 1/9 of the draws.
  a = np.array(ratios["learning_rate"]) != 1.0
  b = np.array(ratios["entropy_cost"]) != 1.0
  assert np.mean(a & b) == pytest.approx(1 / 9, abs=0.012)


def test_fitness_is_mean_capped_human_normalised_on_suites_and_raw_on_a_level():
  level_a, level_b = "rooms_watermaze", "explore_goal_locations_small"
  random_a, human_a = suites.reference_scores(level_a)
  random_b, human_b = suites.reference_scores(level_b)
  # Level a at half human level (mean of two episodes), level b far above human (capped).
  half = random_a + 0.5 * (human_a - random_a)
  episodes = [(level_a, half - 1.0), (level_a, half + 1.0), (level_b, 10 * human_b)]
  assert pbt.fitness(episodes, multi_task=True) == pytest.approx(100 * (0.5 + 1.0) / 2)
  assert pbt.fitness([(level_b, random_b)], multi_task=True) == pytest.approx(0.0)
  assert pbt.fitness([("toy/lit_side", 3.0), ("toy/lit_side", 5.0)], False) == 4.0
  assert pbt.fitness([], multi_task=True) is None
  with pytest.raises(ValueError, match="reference scores"):
    pbt.fitness([("toy/lit_side", 1.0)], multi_task=True)


def test_ready_only_after_burn_in_and_enough_episodes():
  assert not pbt.is_ready(frames=19_999_999, generation_episodes=10_000)
  assert not pbt.is_ready(frames=25_000_000, generation_episodes=4_999)
  assert pbt.is_ready(frames=20_000_000, generation_episodes=5_000)
  assert pbt.is_ready(frames=10, generation_episodes=2, burn_in_frames=10, ready_episodes=2)


def test_exploit_only_more_than_five_points_better():
  assert not pbt.should_exploit(40.0, 45.0)
  assert pbt.should_exploit(40.0, 45.001)
  assert not pbt.should_exploit(40.0, 30.0)
  assert not pbt.should_exploit(None, 90.0) and not pbt.should_exploit(40.0, None)


def test_evolve_picks_another_member_uniformly_and_copies_only_a_better_one():
  hyperparameters = [dict(entropy_cost=0.01 * (i + 1), learning_rate=0.001 * (i + 1),
                          epsilon=0.1) for i in range(4)]
  fitnesses = [50.0, 56.0, 54.0, None]
  rng = np.random.default_rng(2)
  others, copies = [], []
  for _ in range(3000):
    decision = pbt.evolve(0, fitnesses, hyperparameters, pbt.ADAPTED, rng)
    others.append(decision.other)
    copies.append(decision.copy_from)
    start = hyperparameters[1] if decision.copy_from == 1 else hyperparameters[0]
    for name in pbt.ADAPTED:
      ratio = decision.hyperparameters[name] / start[name]
      assert min(abs(ratio - r) for r in (1.0, 1.2, 1 / 1.2)) < 1e-12
    assert decision.own_fitness == 50.0
    assert decision.other_fitness == fitnesses[decision.other]
  counts = np.bincount(others, minlength=4)
  assert counts[0] == 0  # Never itself.
  np.testing.assert_allclose(counts[1:] / 3000, 1 / 3, atol=0.03)
  # Only member 1 is more than 5 points better; 2 is 4 better, 3 unmeasured.
  assert {c for c in copies if c is not None} == {1}
  assert copies.count(1) == int(counts[1])

  # A population of one only explores.
  decision = pbt.evolve(0, [1.0], hyperparameters[:1], pbt.ADAPTED, np.random.default_rng(0))
  assert decision.other is None and decision.copy_from is None


def _write_log(population_dir, member, records):
  directory = pbt.member_dir(population_dir, member)
  os.makedirs(directory, exist_ok=True)
  path = runlog.log_path(directory)
  with open(path, "a") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
  return os.path.getsize(path)


def _record(member, generation, parent, frames, log_offset, copied=False):
  return pbt.LineageRecord(
      member=member, generation=generation, parent_member=parent and parent[0],
      parent_generation=parent and parent[1], copied=copied,
      hyperparameters={"learning_rate": 0.001}, frames=frames, fitness=None,
      other_member=None, other_fitness=None, log_offset=log_offset)


def test_learning_curve_follows_the_copied_checkpoints(tmp_path):
  """Member 1 copies member 0 at 300 frames, then keeps its weights at 500 frames; member
  0 goes on. Member 1's curve: member 0's records up to 300, then its own after the copy."""
  population = str(tmp_path)
  episode = lambda frames, who: dict(kind="episode", frames=frames, level="l",
                                     episode_return=float(who))
  _write_log(population, 0, [episode(f, 0) for f in (100, 200, 300)])
  end_of_first = _write_log(population, 1, [episode(f, 1) for f in (100, 200)])
  records = [_record(0, 0, None, 0, 0), _record(1, 0, None, 0, 0),
             _record(1, 1, (0, 0), 300, end_of_first, copied=True)]
  _write_log(population, 0, [episode(f, 0) for f in (400, 500)])  # Member 0 goes on.
  end_of_second = _write_log(population, 1, [episode(f, 1) for f in (400, 500)])
  records.append(_record(1, 2, (1, 1), 500, end_of_second))
  _write_log(population, 1, [episode(600, 1)])
  for record in records:
    pbt.append_lineage(population, record)

  read = pbt.read_lineage(population)
  assert read[2] == records[2]
  assert [(s.member, s.generation) for s in pbt.ancestry(read, 1)] == [(0, 0), (1, 1), (1, 2)]
  curve = pbt.reconstruct_curve(population, 1)
  assert [(r["frames"], r["episode_return"]) for r in curve] == [
      (100, 0.0), (200, 0.0), (300, 0.0), (400, 1.0), (500, 1.0), (600, 1.0)]
  assert [r["pbt_member"] for r in curve] == [0, 0, 0, 1, 1, 1]
  # Member 0's own curve is its whole log; generation 1 of member 1 ends at its 500 frames.
  assert [r["frames"] for r in pbt.reconstruct_curve(population, 0)] == [100, 200, 300, 400,
                                                                         500]
  assert [r["frames"] for r in pbt.reconstruct_curve(population, 1, generation=1)] == [
      100, 200, 300, 400, 500]
  with pytest.raises(ValueError, match="not a population"):
    pbt.reconstruct_curve(str(tmp_path / "elsewhere"), 0)
