"""The observation filter of a cluster (agents on observation vectors: MuJoCo, gymnasium's
Box (O,) with discrete or continuous actions), synced between actor processes and learner.

RLlib, the IMPACT paper's code base, gives every rollout worker a MeanStdFilter and, after
every training iteration, has the driver collect each worker's new statistics (the changes
since its last sync), merge them into the driver's filter and send the merged filter back to
every worker (rllib/utils/filter_manager.py, FilterManager.synchronize). A cluster does the
same over the learner's RPC service (learner_service.py), one actor process at a time:

    actor process:  FilterSync(client, obs_filter).sync()
                      take_delta()                    the observations since its last sync
                      client.sync_filter(delta)  ->   learner: "filter_sync" RPC method
                                                        apply_delta() on the learner's filter
                                                        (the one checkpointed with the agent)
                                                  <-    its merged state()
                      load_state(merged)
    learner:        learner_methods(agent) -> [("filter_sync", tf.function)], registered on
                    learner_service.TrajectoryServer

Only three arrays cross the wire, each way: count int64 [], mean float64 [O], m2 float64 [O]
(normalization.RunningStatistics). Agents without a filter (frames, indices) get no method and make
no call: nothing changes for them. The learner's filter is the restored one when it resumed
from a checkpoint, so an actor process's first sync (before its actors start) hands it over.

When: with every parameter refresh, i.e. at the start of every unroll, once per wave of unroll
starts in a process (like service_client.ParameterSync). The filter is part of the policy (the
network was trained on filtered observations), so an unroll starts from the learner's latest
parameters and its latest merged statistics together; and an unroll's observations reach the
learner's filter at the next unroll start, about when its trajectory reaches the learner. That
is more often than RLlib's once per training iteration (about every 10 s), for three arrays of
O numbers per unroll (O = 11 to 348). As in RLlib, the observations an actor process filters
while its sync is on the way are in its next delta, not in the merged state it loads.

Only finite statistics are merged (normalization.py says why): the learner refuses a delta
with NaN or an infinity, logs it and keeps its statistics (DeltaMerger).

A call that fails because the learner restarted is sent again to the restarted learner, so that
delta is kept (what the learner merged after its last checkpoint is gone, like its updates
since then: the actor processes load the restored statistics). A delta whose reply alone was
lost (the learner still up) would be merged twice on the retry; unlike trajectories, deltas
carry no sequence number: a few observations counted twice shift the statistics negligibly.
"""
import sys
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.environments import normalization

METHOD_NAME = "filter_sync"  # What service_client.LearnerClient.sync_filter calls.


def statistics_arrays(statistics):
  """(count int64 [], mean float64 [O], m2 float64 [O]) of a normalization.RunningStatistics or a
  MeanStdFilter.state() dict: what crosses the wire."""
  if isinstance(statistics, dict):
    count, mean, m2 = statistics["count"], statistics["mean"], statistics["m2"]
  else:
    count, mean, m2 = statistics.count, statistics.mean, statistics.m2
  return np.int64(count), np.asarray(mean, np.float64), np.asarray(m2, np.float64)


def statistics_from_arrays(count, mean, m2):
  """The normalization.RunningStatistics of statistics_arrays' output.

  Raises:
    ValueError: a negative count, or mean and m2 of different shapes (not a filter's delta);
      normalization.NonFiniteStatistics (a ValueError): NaN or an infinity in mean or m2.
  """
  mean, m2 = np.asarray(mean, np.float64), np.asarray(m2, np.float64)
  if int(count) < 0 or mean.shape != m2.shape:
    raise ValueError(f"Not a filter's statistics: count {int(count)}, mean of shape "
                     f"{mean.shape}, m2 of shape {m2.shape}.")
  statistics = normalization.RunningStatistics(mean.shape)
  statistics.assign((int(count), mean.copy(), m2.copy()), "Not a filter's statistics")
  return statistics


class DeltaMerger:
  """The learner's half of a sync: merges an actor process's delta into the learner's filter (a
  normalization.MeanStdFilter) and returns its merged statistics as statistics_arrays.

  A delta that is not a filter's statistics (NaN or an infinity, a negative count, another
  shape) is refused, counted and logged, and the learner's statistics stay as they were: one
  actor process must not poison the filter every actor normalises with. The actor process
  gets the unchanged merged statistics back and plays on (its own filter refuses non-finite
  observations, so such a delta means a bug or a corrupted message, not a bad environment).
  """

  def __init__(self, obs_filter, log=None):
    """log: callable(line) for a refused delta; None: sys.stderr."""
    self._filter = obs_filter
    self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    self.refused = 0

  def __call__(self, count, mean, m2):
    try:
      self._filter.apply_delta(statistics_from_arrays(count, mean, m2))
    except ValueError as error:
      self.refused += 1
      self._log(f"Learner: refused an actor process's observation statistics: {error} "
                f"({self.refused} refused so far).")
    return statistics_arrays(self._filter.state())


def learner_methods(agent):
  """[(METHOD_NAME, tf.function)] for the learner's RPC server, or [] for an agent without an
  observation filter.

  The tf.function runs a DeltaMerger in the learner process (tf.numpy_function). Keep the
  returned functions referenced as long as the server serves them: the Python function lives
  only as long as the tf.function's graph.
  """
  observation_filter = agent.observation_filter
  if observation_filter is None:
    return []
  obs_filter = observation_filter.filter
  shape = list(obs_filter.shape)
  merge = DeltaMerger(obs_filter)

  @tf.function(input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec(shape, tf.float64),
                                tf.TensorSpec(shape, tf.float64)])
  def filter_sync(count, mean, m2):
    merged = tf.numpy_function(merge, [count, mean, m2], [tf.int64, tf.float64, tf.float64],
                               stateful=True)
    return [tf.ensure_shape(merged[0], []), tf.ensure_shape(merged[1], shape),
            tf.ensure_shape(merged[2], shape)]
  return [(METHOD_NAME, filter_sync)]


class FilterSync:
  """Keeps an actor process's observation filter in step with the learner's (thread-safe).

  `sync()` runs at the start of every unroll, with the parameter refresh (see the module
  docstring for why). Like service_client.ParameterSync, a sync that another thread started after
  this one asked is good enough, so a process syncs once per wave of unroll starts.
  """

  def __init__(self, client, obs_filter):
    """Args:
      client: has sync_filter(count, mean, m2) -> (count, mean, m2), the learner's merged
        statistics (service_client.LearnerClient).
      obs_filter: this process's normalization.MeanStdFilter, shared by its actor threads.
    """
    self._client = client
    self._filter = obs_filter
    self._lock = threading.Lock()
    self._synced_at = -float("inf")

  def sync(self):
    """Sends the observations since the last sync; loads the learner's merged statistics.

    A failed call (the learner is gone: the actor process stops) drops this delta with it.
    """
    asked_at = time.monotonic()
    with self._lock:
      if self._synced_at >= asked_at:
        return
      started = time.monotonic()
      delta = self._filter.take_delta()
      count, mean, m2 = self._client.sync_filter(*statistics_arrays(delta))
      self._filter.load_state({"count": count, "mean": mean, "m2": m2})
      self._synced_at = started


def for_actor_process(client, agent):
  """A FilterSync for an actor process's agent, or None when it has no observation filter."""
  observation_filter = agent.observation_filter
  if observation_filter is None:
    return None
  return FilterSync(client, observation_filter.filter)


__all__ = ["DeltaMerger", "FilterSync", "METHOD_NAME", "for_actor_process", "learner_methods",
           "statistics_arrays", "statistics_from_arrays"]
