"""IMPALA's experience replay (IMPACT's circular buffer is impact.py's, LASER's episode replay
laser.py's).

    ReplayBuffer    IMPALA section 5.2.2 / Table D.3: trajectories, fixed capacity (10,000),
                    uniform sampling, first-in-first-out removal.
    ReplayMixer     draws a fixed number of each batch's trajectories from a ReplayBuffer and
                    the rest from the online stream (section 5.2.2: "50% of the items in each
                    batch").

Plain Python and numpy: the items are whatever the caller stores (trajectories, batches) and
are kept by reference, never copied. Every method is thread-safe.
"""
import threading

import numpy as np

from scalable_agent_tf2.configuration import settings


class ReplayBuffer:
  """A fixed-capacity store of items with uniform sampling and first-in-first-out removal."""

  def __init__(self, capacity=settings.DEFAULT_REPLAY_CAPACITY, seed=0):
    """Args:
      capacity: most items held; adding to a full buffer removes the oldest item.
      seed: seeds the sampling (numpy Generator).
    """
    if int(capacity) != capacity or capacity < 1:
      raise ValueError(f"The replay capacity must be a positive integer, got {capacity}.")
    self._capacity = int(capacity)
    self._items = [None] * self._capacity
    self._next = 0     # Slot the next item goes to; once full, the oldest item's slot.
    self._size = 0
    self._num_added = 0
    self._rng = np.random.default_rng(seed)
    self._lock = threading.Lock()

  @property
  def capacity(self):
    return self._capacity

  @property
  def num_added(self):
    """Items added since creation (including those removed since)."""
    with self._lock:
      return self._num_added

  def __len__(self):
    with self._lock:
      return self._size

  def add(self, item):
    """Stores `item`; when full, first removes the oldest item (FIFO)."""
    with self._lock:
      self._items[self._next] = item
      self._next = (self._next + 1) % self._capacity
      self._size = min(self._size + 1, self._capacity)
      self._num_added += 1

  def sample(self):
    """One stored item, each with probability 1 / len(self) (uniform, with replacement).

    Raises:
      IndexError: the buffer is empty.
    """
    with self._lock:
      if not self._size:
        raise IndexError("Cannot sample from an empty replay buffer.")
      return self._items[int(self._rng.integers(self._size))]

  def items(self):
    """The stored items, oldest first."""
    with self._lock:
      if self._size < self._capacity:
        return list(self._items[:self._size])
      return self._items[self._next:] + self._items[:self._next]


class ReplayMixer:
  """callable() -> the next item of a batch stream mixing online and replayed items.

  Batches are consecutive groups of `batch_size` calls. In each, the first
  batch_size - num_replayed items come from `next_online` (and are added to the buffer), the
  last num_replayed are sampled uniformly from the buffer. The online items of a batch are
  in the buffer before its replayed ones are drawn, so the buffer is never empty when sampled
  and every batch has exactly num_replayed replayed items. Replayed items are the stored
  objects themselves: a trajectory keeps its behaviour policy and initial core state.
  """

  def __init__(self, next_online, buffer, batch_size, num_replayed):
    """Args:
      next_online: callable() -> the next online item, or None when the stream ends (the
        mixer then returns None too).
      buffer: a ReplayBuffer.
      batch_size: items per batch.
      num_replayed: replayed items per batch, 0 < num_replayed < batch_size.
    """
    if not 0 < num_replayed < batch_size:
      raise ValueError(f"num_replayed must be in (0, batch_size = {batch_size}), got "
                       f"{num_replayed}.")
    self._next_online = next_online
    self._buffer = buffer
    self._num_online = batch_size - num_replayed
    self._batch_size = batch_size
    self._position = 0  # Within the current batch.
    self._lock = threading.Lock()

  def __call__(self):
    with self._lock:
      if self._position < self._num_online:
        item = self._next_online()
        if item is None:
          return None
        self._buffer.add(item)
      else:
        item = self._buffer.sample()
      self._position = (self._position + 1) % self._batch_size
      return item


# LASER (Schmitt et al., 2019): episode replay, sampled and replayed from the start.
#
#     EpisodeReplay   section 5.1: whole episodes stored, removed first-in-first-out, sampled
#                     uniformly; one replay can be shared by several agents (section 5.4),
#                     every episode tagged with the agent that produced it.
#     EpisodeMixer    section 5.3: each batch holds online trajectories and a fixed number of
#                     replayed ones (never only replayed ones); replay lanes play sampled
#                     episodes from their start as consecutive unrolls, the core state
#                     recomputed with the current parameters (section 5.1, Appendix A.2).


