"""Replay buffer, replay mixing and IMPACT's circular buffer against simple ground truths."""
import collections
import threading

import numpy as np
import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import buffers
from scalable_agent_tf2.learning import impact


def test_replay_removes_first_in_first_out_and_holds_at_most_its_capacity():
  replay = buffers.ReplayBuffer(capacity=3)
  held = []
  for item in range(8):
    replay.add(item)
    held = (held + [item])[-3:]  # Ground truth: the last `capacity` items.
    assert replay.items() == held
    assert len(replay) == len(held) <= 3
  assert replay.num_added == 8
  assert {replay.sample() for _ in range(200)} == {5, 6, 7}


def test_replay_samples_uniformly():
  replay = buffers.ReplayBuffer(capacity=10, seed=3)
  for item in range(14):  # Holds 4..13.
    replay.add(item)
  draws = 20_000
  counts = collections.Counter(replay.sample() for _ in range(draws))
  assert set(counts) == set(range(4, 14))
  # Each of the 10 items has probability 1/10: 2,000 expected, standard deviation 42.
  assert max(abs(c - draws / 10) for c in counts.values()) < 5 * np.sqrt(draws * 0.1 * 0.9)
  # Seeded: the same seed draws the same sequence.
  twins = [buffers.ReplayBuffer(capacity=10, seed=3) for _ in range(2)]
  for twin in twins:
    for item in range(14):
      twin.add(item)
  assert [twins[0].sample() for _ in range(50)] == [twins[1].sample() for _ in range(50)]


def test_replay_keeps_items_by_reference_and_refuses_bad_use():
  replay = buffers.ReplayBuffer(capacity=2)
  trajectory = {"frames": np.zeros(4)}
  replay.add(trajectory)
  assert replay.sample() is trajectory  # No copy: replayed data is the stored object.
  with pytest.raises(IndexError, match="empty"):
    buffers.ReplayBuffer(capacity=2).sample()
  with pytest.raises(ValueError, match="positive integer"):
    buffers.ReplayBuffer(capacity=0)


def test_replay_is_thread_safe():
  replay = buffers.ReplayBuffer(capacity=50)

  def add(offset):
    for item in range(1000):
      replay.add(offset + item)
      replay.sample()
  threads = [threading.Thread(target=add, args=(k * 10_000,)) for k in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert replay.num_added == 4000 and len(replay) == 50 and len(set(replay.items())) == 50


@pytest.mark.parametrize("batch_size,fraction,want", [
    (32, 0.0, 0), (32, 0.5, 16), (8, 0.5, 4), (10, 0.25, 2), (4, 0.75, 3)])
def test_num_replayed_per_batch(batch_size, fraction, want):
  assert config_lib.num_replayed_per_batch(batch_size, fraction) == want


@pytest.mark.parametrize("batch_size,fraction,message", [
    (32, 1.0, "online data must keep flowing"), (32, -0.1, r"\[0, 1\)"),
    (32, 1.5, r"\[0, 1\)"), (4, 0.9, "no online trajectory"), (4, 0.1, "no replayed")])
def test_bad_replay_fractions_are_clear_errors(batch_size, fraction, message):
  with pytest.raises(ValueError, match=message):
    config_lib.num_replayed_per_batch(batch_size, fraction)


def test_mixer_puts_exactly_the_replayed_share_in_every_batch():
  online = iter(range(1000))
  replay = buffers.ReplayBuffer(capacity=5, seed=0)
  mix = buffers.ReplayMixer(lambda: next(online), replay, batch_size=4, num_replayed=2)
  seen_online = []
  for _ in range(50):
    batch = [mix() for _ in range(4)]
    # First the 2 online items (the next ones of the stream, in order), then 2 replayed.
    assert batch[:2] == list(range(len(seen_online), len(seen_online) + 2))
    seen_online.extend(batch[:2])
    # Replayed items come from the buffer's FIFO window (the last 5 online items).
    assert set(batch[2:]) <= set(seen_online[-5:])
  assert replay.num_added == 100


def test_mixer_ends_with_the_online_stream():
  online = iter([1, 2, 3])
  mix = buffers.ReplayMixer(lambda: next(online, None), buffers.ReplayBuffer(10), 4, 2)
  assert [mix(), mix()] == [1, 2]
  assert mix() in (1, 2) and mix() in (1, 2)
  assert mix() == 3
  assert mix() is None


def test_circular_buffer_uses_each_batch_exactly_k_times_then_drops_it():
  for num_batches, max_uses in [(1, 1), (1, 2), (4, 2), (3, 5)]:
    ring = impact.CircularBuffer(num_batches, max_uses)
    stream = iter(range(20))
    order = []
    while (step := ring.next(lambda stream=stream: next(stream, None))) is not None:
      batch, use = step
      assert use == order.count(batch)  # Uses are numbered 0..K-1.
      order.append(batch)
      assert len(ring.held()) <= num_batches
      if use == max_uses - 1:  # Its K-th use: dropped, never seen again.
        assert batch not in ring.held()
    counts = collections.Counter(order)
    finished = [b for b in range(20) if counts[b] == max_uses]
    # Every batch fetched is used exactly K times, except those still in the ring when the
    # stream ended (at most N, used fewer times).
    assert len(counts) == 20
    assert 20 - len(finished) <= num_batches
    assert all(counts[b] <= max_uses for b in counts)
    for b in finished:
      last_use = len(order) - 1 - order[::-1].index(b)
      assert b not in order[last_use + 1:]


def test_circular_buffer_order_is_round_robin():
  ring = impact.CircularBuffer(num_batches=2, max_uses=2)
  stream = iter("abcdef")
  steps = [ring.next(lambda: next(stream, None)) for _ in range(8)]
  assert steps == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("c", 0), ("d", 0), ("c", 1),
                   ("d", 1)]
  # N = K = 1 is IMPALA's pipeline: every batch once, in order.
  ring = impact.CircularBuffer(1, 1)
  stream = iter("xyz")
  assert [ring.next(lambda: next(stream, None)) for _ in range(4)] == [
      ("x", 0), ("y", 0), ("z", 0), None]


def test_circular_buffer_refuses_bad_sizes():
  with pytest.raises(ValueError, match="num_batches"):
    impact.CircularBuffer(0, 2)
  with pytest.raises(ValueError, match="max_uses"):
    impact.CircularBuffer(2, 0)
