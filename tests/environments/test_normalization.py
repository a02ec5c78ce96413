"""The observation normaliser of vector environments (environments/normalization.py): RLlib's
MeanStdFilter and its running statistics."""
import threading

import numpy as np
import pytest

from scalable_agent_tf2.environments.normalization import MeanStdFilter
from scalable_agent_tf2.environments.normalization import NonFiniteObservation
from scalable_agent_tf2.environments.normalization import NonFiniteStatistics
from scalable_agent_tf2.environments.normalization import RunningStatistics


def test_running_statistics_match_numpy():
  xs = np.random.default_rng(0).normal(3.0, 2.0, size=(50, 4))
  one_by_one, batched, merged, second = (RunningStatistics((4,)) for _ in range(4))
  for x in xs:
    one_by_one.push(x)
  batched.push_batch(xs)
  merged.push_batch(xs[:17])
  second.push_batch(xs[17:])
  merged.merge(second)
  for statistics in (one_by_one, batched, merged):
    assert statistics.count == 50
    np.testing.assert_allclose(statistics.mean, xs.mean(axis=0))
    np.testing.assert_allclose(statistics.std, xs.std(axis=0, ddof=1))
  single = RunningStatistics((2,))
  single.push(np.array([-3.0, 4.0]))
  np.testing.assert_array_equal(single.std, [3.0, 4.0])  # RLlib's |mean| while n < 2.


def test_mean_std_filter_updates_then_normalises():
  xs = np.random.default_rng(1).normal(-1.0, 5.0, size=(20, 3))
  obs_filter = MeanStdFilter((3,))
  np.testing.assert_array_equal(obs_filter(xs[0], update=False), xs[0].astype(np.float32))
  np.testing.assert_array_equal(obs_filter(xs[0]), np.zeros(3, np.float32))  # (x - x) / ...
  for t in range(1, 20):
    got = obs_filter(xs[t])
    seen = xs[:t + 1]
    expected = (xs[t] - seen.mean(axis=0)) / (seen.std(axis=0, ddof=1) + 1e-8)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  frozen = obs_filter(xs[3], update=False)
  assert obs_filter.count == 20
  np.testing.assert_array_equal(obs_filter(xs[3], update=False), frozen)
  batch = obs_filter(xs[:5])  # A batch [N, O] is pushed, then filtered.
  assert batch.shape == (5, 3) and obs_filter.count == 25


def test_filters_sync_like_rllib_and_checkpoint_their_state():
  rng = np.random.default_rng(2)
  learner, actors, everything = MeanStdFilter((3,)), [MeanStdFilter((3,)) for _ in range(2)], []
  for _ in range(3):  # Three sync rounds: actors filter, the learner merges their deltas.
    for actor in actors:
      xs = rng.normal(2.0, 3.0, size=(7, 3))
      everything.append(xs)
      actor(xs)
    for actor in actors:
      learner.apply_delta(actor.take_delta())
    for actor in actors:
      actor.load_state(learner.state())
  reference = MeanStdFilter((3,))
  reference(np.concatenate(everything))
  probe = rng.normal(size=3)
  for synced in [learner] + actors:
    assert synced.count == 42
    np.testing.assert_allclose(synced(probe, update=False), reference(probe, update=False),
                               rtol=1e-6)
  restored = MeanStdFilter((3,))
  restored.load_state(learner.state())
  np.testing.assert_array_equal(restored(probe, update=False), learner(probe, update=False))
  with pytest.raises(ValueError, match="another level"):
    MeanStdFilter((4,)).load_state(learner.state())


def test_filter_is_shared_safely_by_threads():
  obs_filter = MeanStdFilter((2,))
  rows = np.random.default_rng(3).normal(size=(400, 2))

  def act(part):
    for x in part:
      obs_filter(x)
  threads = [threading.Thread(target=act, args=(rows[i::4],)) for i in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  state = obs_filter.state()
  assert state["count"] == 400
  np.testing.assert_allclose(state["mean"], rows.mean(axis=0))
  np.testing.assert_allclose(state["m2"], ((rows - rows.mean(axis=0)) ** 2).sum(axis=0))


def _state(statistics):
  return statistics.count, statistics.mean.copy(), statistics.m2.copy()


def _assert_same_state(a, b):
  assert a[0] == b[0]
  np.testing.assert_array_equal(a[1], b[1])
  np.testing.assert_array_equal(a[2], b[2])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_running_statistics_refuse_non_finite_observations_and_stay_as_they_were(bad):
  statistics = RunningStatistics((3,))
  statistics.push_batch(np.random.default_rng(4).normal(size=(5, 3)))
  before = _state(statistics)
  with pytest.raises(NonFiniteObservation, match=r"at \(1,\)"):
    statistics.push(np.array([0.0, bad, 0.0]))
  with pytest.raises(NonFiniteObservation, match=r"at \(2, 0\)"):
    statistics.push_batch(np.array([[0.0] * 3, [1.0] * 3, [bad, 0.0, 0.0]]))
  poisoned = RunningStatistics((3,))
  poisoned.count, poisoned.mean, poisoned.m2 = 2, np.array([bad, 0.0, 0.0]), np.zeros(3)
  with pytest.raises(NonFiniteStatistics, match="mean holds"):
    statistics.merge(poisoned)
  _assert_same_state(_state(statistics), before)


def test_an_update_that_would_overflow_is_refused():
  statistics = RunningStatistics((1,))
  statistics.push(np.array([-1e300]))
  before = _state(statistics)
  with pytest.raises(NonFiniteStatistics, match="overflow"):
    statistics.push(np.array([1e300]))  # (x - mean)^2 overflows to inf.
  _assert_same_state(_state(statistics), before)


def test_the_filter_refuses_non_finite_numbers_and_normalises_on_unchanged():
  rng = np.random.default_rng(5)
  obs_filter = MeanStdFilter((3,))
  obs_filter(rng.normal(size=(10, 3)))
  probe = rng.normal(size=3)
  expected = obs_filter(probe, update=False)
  state = obs_filter.state()
  for bad in ([np.nan, 0.0, 0.0], [[1.0, 2.0, 3.0], [0.0, np.inf, 0.0]]):
    for update in (True, False):  # A non-finite observation is never normalised either.
      with pytest.raises(NonFiniteObservation, match="finite numbers"):
        obs_filter(np.array(bad), update=update)
  # Nor is the delta an actor process sends at its next sync touched.
  assert obs_filter.take_delta().count == 10
  poisoned = {"count": np.int64(11), "mean": np.array([np.nan, 0.0, 0.0]), "m2": np.zeros(3)}
  with pytest.raises(NonFiniteStatistics, match="state to load"):
    obs_filter.load_state(poisoned)
  delta = RunningStatistics((3,))
  delta.count, delta.mean, delta.m2 = 1, np.zeros(3), np.array([0.0, -np.inf, 0.0])
  with pytest.raises(NonFiniteStatistics, match="m2 holds -inf"):
    obs_filter.apply_delta(delta)
  assert obs_filter.count == 10
  np.testing.assert_array_equal(obs_filter(probe, update=False), expected)
  for key in ("mean", "m2"):
    np.testing.assert_array_equal(obs_filter.state()[key], state[key])
