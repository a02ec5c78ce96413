"""The running observation normaliser of every vector environment (MuJoCo's tasks, gymnasium's
Box (O,) observations): RLlib's MeanStdFilter and the running statistics under it.

    obs_filter = MeanStdFilter((11,))  # one per learner process, shared by its actors
    frame = obs_filter(output.observation.frame)                # training: updates, then filters
    frame = obs_filter(output.observation.frame, update=False)  # evaluation: frozen

Observation filter. The IMPACT paper does not say how observations were handled; its code base is
RLlib, whose default `observation_filter` is "NoFilter", but its APPO and PPO examples for
its MuJoCo tasks all set "MeanStdFilter" (ray-project/ray, rllib/tuned_examples/):
halfcheetah-appo.yaml (APPO with IMPACT's KL loss; its minibatch buffer 16, 32 SGD
iterations, grad clip 0.5, value coefficient 0.5, KL coefficient 1 and KL target 0.04 are Table
2's HalfCheetah values), halfcheetah-ppo.yaml, hopper-ppo.yaml, humanoid-ppo-gae.yaml.
MeanStdFilter (rllib/utils/filter.py, built by get_filter with clip=None) keeps a running
count n, mean and sum of squared deviations of every observation seen (Welford's update),
updates them with each new observation BEFORE filtering it, and returns
(x - mean) / (std + 1e-8), std = sqrt(S / (n - 1)) (|mean| while n < 2), unclipped.

Where the statistics live. RLlib gives every rollout worker a filter, merges the workers'
new observations into the driver's filter after each training iteration (about every 10 s)
and sends the merged filter back to all workers. Here one MeanStdFilter per learner process
is shared by all its actor threads (thread-safe): every actor normalises with the statistics of
all observations seen so far, never staler than RLlib's. The environment returns raw
observations, so an environment process that is restarted loses nothing. Actors in other
processes of a cluster keep a filter each and sync as RLlib does, at the start of every unroll
with the parameters (filter_sync.py): `take_delta()` on the actor process (the observations
since the last sync), `apply_delta()` on the learner's filter (the checkpointed one),
`load_state()` of the merged state on the actor process. The statistics are part of the policy
(the network was trained on filtered inputs): `state()` / `load_state()` save and restore them
with checkpoints, and evaluation uses the restored filter with update=False (RLlib's
compute_action does the same).

No TensorFlow here: environment processes and actor processes import it.
"""
import threading

import numpy as np

# RLlib's MeanStdFilter: x / (std + SMALL_NUMBER).
FILTER_EPSILON = 1e-8


class RunningStatistics:
  """Count n, mean [O] and sum of squared deviations m2 [O] of observations, in float64.

  RLlib's RunningStat (rllib/utils/filter.py): Welford's update for one observation, Chan et
  al.'s parallel formula to merge two sets (what `push_batch` and syncing use).
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self.count = 0
    self.mean = np.zeros(self.shape, np.float64)
    self.m2 = np.zeros(self.shape, np.float64)

  def push(self, x):
    """Adds one observation x [O]."""
    x = np.asarray(x, np.float64)
    if x.shape != self.shape:
      raise ValueError(f"Observation of shape {x.shape}; this filter is for {self.shape}.")
    self.count += 1
    delta = x - self.mean
    self.mean = self.mean + delta / self.count
    self.m2 = self.m2 + delta * (x - self.mean)

  def merge(self, other):
    """Adds the observations another RunningStatistics has seen (RLlib's update)."""
    if other.shape != self.shape:
      raise ValueError(f"Cannot merge statistics of shape {other.shape} into {self.shape}.")
    total = self.count + other.count
    if other.count == 0:
      return
    delta = other.mean - self.mean
    self.mean = self.mean + delta * (other.count / total)
    self.m2 = self.m2 + other.m2 + delta * delta * (self.count * other.count / total)
    self.count = total

  def push_batch(self, xs):
    """Adds observations xs [N, O]; the same statistics as N pushes, up to rounding."""
    xs = np.asarray(xs, np.float64)
    if xs.shape[1:] != self.shape:
      raise ValueError(f"Observations of shape {xs.shape}; expected [N, {self.shape}].")
    batch = RunningStatistics(self.shape)
    batch.count = xs.shape[0]
    if batch.count:
      batch.mean = xs.mean(axis=0)
      batch.m2 = ((xs - batch.mean) ** 2).sum(axis=0)
    self.merge(batch)

  @property
  def std(self):
    """sqrt(m2 / (n - 1)); RLlib's |mean| while n < 2."""
    if self.count < 2:
      return np.abs(self.mean)
    return np.sqrt(self.m2 / (self.count - 1))

  def copy(self):
    other = RunningStatistics(self.shape)
    other.count, other.mean, other.m2 = self.count, self.mean.copy(), self.m2.copy()
    return other


class MeanStdFilter:
  """RLlib's MeanStdFilter (observation_filter="MeanStdFilter", clip=None), thread-safe.

  __call__(x, update=True) adds x [O] (or a batch [N, O]) to the statistics, then returns
  float32 (x - mean) / (std + 1e-8). With no observation seen yet it returns x unchanged
  (RLlib would divide by 1e-8). See the module docstring for where one lives and how it syncs.
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self._lock = threading.Lock()
    self._statistics = RunningStatistics(self.shape)
    self._delta = RunningStatistics(self.shape)  # Seen since the last take_delta.

  def __call__(self, x, update=True):
    x = np.asarray(x, np.float64)
    batched = x.ndim == len(self.shape) + 1
    with self._lock:
      if update:
        for statistics in (self._statistics, self._delta):
          if batched:
            statistics.push_batch(x)
          else:
            statistics.push(x)
      if self._statistics.count == 0:
        return x.astype(np.float32)
      mean, std = self._statistics.mean, self._statistics.std
    return ((x - mean) / (std + FILTER_EPSILON)).astype(np.float32)

  @property
  def count(self):
    """How many observations the statistics hold."""
    with self._lock:
      return self._statistics.count

  def take_delta(self):
    """RunningStatistics of the observations added since the last call (and forgets them)."""
    with self._lock:
      delta, self._delta = self._delta, RunningStatistics(self.shape)
    return delta

  def apply_delta(self, delta):
    """Merges another filter's take_delta() into these statistics (RLlib's apply_changes)."""
    with self._lock:
      self._statistics.merge(delta)

  def state(self):
    """The statistics as numpy arrays (for checkpoints): count int64 [], mean / m2 [O]."""
    with self._lock:
      return {"count": np.int64(self._statistics.count),
              "mean": self._statistics.mean.copy(), "m2": self._statistics.m2.copy()}

  def load_state(self, state):
    """Replaces the statistics with `state()`'s (restore, or a learner's merged filter)."""
    mean = np.asarray(state["mean"], np.float64)
    m2 = np.asarray(state["m2"], np.float64)
    if mean.shape != self.shape or m2.shape != self.shape or int(state["count"]) < 0:
      raise ValueError(f"Filter state with mean {mean.shape}, m2 {m2.shape} and count "
                       f"{state['count']} does not fit a filter of shape {self.shape}: it was "
                       f"saved for another level.")
    with self._lock:
      self._statistics.count = int(state["count"])
      self._statistics.mean, self._statistics.m2 = mean.copy(), m2.copy()
