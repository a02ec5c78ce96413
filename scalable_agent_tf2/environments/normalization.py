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

Non-finite numbers. One NaN pushed into the statistics makes the mean NaN for good, and with
it every observation normalised afterwards: all trajectories would then be dropped as
non-finite and nothing trained. So the statistics take only finite numbers: an observation
with NaN or an infinity is refused (NonFiniteObservation) and so are statistics merged or
loaded from elsewhere (NonFiniteStatistics: an actor process's delta, a checkpoint's state),
and so is an update that would overflow them; each leaves the statistics as they were. The
actors check every environment output before it gets here (base.output_problem), so a
non-finite observation is an environment fault there: named, counted and the environment
replaced (acting/actor.py).

No TensorFlow here: environment processes and actor processes import it.
"""
import threading

import numpy as np

# RLlib's MeanStdFilter: x / (std + SMALL_NUMBER).
FILTER_EPSILON = 1e-8
# How many non-finite entries a message lists.
_ENTRIES_NAMED = 3


class NonFiniteObservation(ValueError):
  """An observation holding NaN or an infinity, refused: the statistics are unchanged. One such
  observation would make the mean NaN for good, and every observation normalised after it."""


class NonFiniteStatistics(ValueError):
  """Statistics holding NaN or an infinity (another filter's delta, a saved or merged state), or
  an update that would make them so (observations so large that their squares overflow):
  refused, the statistics unchanged."""


def non_finite_entries(x):
  """Where array x is not finite, in words ("nan at (0,), inf at (3,)"); "" when it is."""
  finite = np.isfinite(x)
  if finite.all():
    return ""
  bad = np.argwhere(~finite)
  named = [f"{x[tuple(index)]} at {tuple(int(i) for i in index)}"
           for index in bad[:_ENTRIES_NAMED]]
  more = f" and {len(bad) - _ENTRIES_NAMED} more" if len(bad) > _ENTRIES_NAMED else ""
  return ", ".join(named) + more


def check_finite_observation(x, what="observation"):
  """x itself; NonFiniteObservation naming the entries that are NaN or infinite."""
  entries = non_finite_entries(x)
  if entries:
    raise NonFiniteObservation(f"The {what} holds {entries}: the observation filter takes only "
                               "finite numbers (its statistics are unchanged).")
  return x


def _all_finite(*arrays):
  return all(np.isfinite(a).all() for a in arrays)


def _check_finite_statistics(moments, what):
  """NonFiniteStatistics naming what is wrong unless moments (count, mean, m2) has a count >= 0
  and finite mean and m2."""
  count, mean, m2 = moments
  if int(count) >= 0 and _all_finite(mean, m2):
    return
  problems = [f"{name} holds {entries}" for name, entries in (
      ("mean", non_finite_entries(mean)), ("m2", non_finite_entries(m2))) if entries]
  raise NonFiniteStatistics(f"{what}: count {int(count)}, "
                            f"{'; '.join(problems) or 'a negative count'}: refused (statistics "
                            "take a count >= 0 and finite numbers only); the statistics are "
                            "kept as they were.")


def _chan_merge(a, b):
  """(count, mean, m2) of two sets, each a (count, mean, m2): Chan et al.'s parallel formula."""
  (count_a, mean_a, m2_a), (count_b, mean_b, m2_b) = a, b
  if count_b == 0:
    return a
  total = count_a + count_b
  delta = mean_b - mean_a
  return (total, mean_a + delta * (count_b / total),
          m2_a + m2_b + delta * delta * (count_a * count_b / total))


_OVERFLOW = "Adding these observations would overflow the statistics"


class RunningStatistics:
  """Count n, mean [O] and sum of squared deviations m2 [O] of observations, in float64.

  RLlib's RunningStat (rllib/utils/filter.py): Welford's update for one observation, Chan et
  al.'s parallel formula to merge two sets (what `push_batch` and syncing use). They stay
  finite: a non-finite observation (NonFiniteObservation) or merged set (NonFiniteStatistics),
  or an update that would overflow (NonFiniteStatistics), is refused and leaves them as they
  were.
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self.count = 0
    self.mean = np.zeros(self.shape, np.float64)
    self.m2 = np.zeros(self.shape, np.float64)

  @property
  def moments(self):
    """(count, mean, m2). Set them only once checked (assign checks them)."""
    return self.count, self.mean, self.m2

  @moments.setter
  def moments(self, moments):
    self.count, self.mean, self.m2 = moments

  def assign(self, moments, what=_OVERFLOW):
    """Takes moments (count, mean, m2) if they are finite; else NonFiniteStatistics starting
    with `what`, and self unchanged."""
    _check_finite_statistics(moments, what)
    self.moments = moments

  def moments_with(self, x):
    """(count, mean, m2) with x added (one observation [O], or a batch [N, O], float64, checked
    finite by the caller); self unchanged. A finite x may still overflow them (assign refuses
    them then: numpy's own overflow warning would only repeat it)."""
    with np.errstate(over="ignore", invalid="ignore"):
      if x.shape == self.shape:  # Welford's update.
        count = self.count + 1
        delta = x - self.mean
        mean = self.mean + delta / count
        return count, mean, self.m2 + delta * (x - mean)
      if x.shape[1:] != self.shape:
        raise ValueError(f"Observations of shape {x.shape}; this filter is for {self.shape} "
                         f"(or a batch [N, {self.shape}]).")
      if not x.shape[0]:
        return self.moments
      batch_mean = x.mean(axis=0)
      return _chan_merge(self.moments,
                         (x.shape[0], batch_mean, ((x - batch_mean) ** 2).sum(axis=0)))

  def push(self, x):
    """Adds one observation x [O]."""
    x = np.asarray(x, np.float64)
    if x.shape != self.shape:
      raise ValueError(f"Observation of shape {x.shape}; this filter is for {self.shape}.")
    self.assign(self.moments_with(check_finite_observation(x)))

  def push_batch(self, xs):
    """Adds observations xs [N, O]; the same statistics as N pushes, up to rounding."""
    xs = np.asarray(xs, np.float64)
    if xs.shape[1:] != self.shape or xs.ndim != len(self.shape) + 1:
      raise ValueError(f"Observations of shape {xs.shape}; expected [N, {self.shape}].")
    self.assign(self.moments_with(check_finite_observation(xs, "batch of observations")))

  def merge(self, other):
    """Adds the observations another RunningStatistics has seen (RLlib's update)."""
    if other.shape != self.shape:
      raise ValueError(f"Cannot merge statistics of shape {other.shape} into {self.shape}.")
    _check_finite_statistics(other.moments, "Statistics to merge")
    self.assign(_chan_merge(self.moments, other.moments),
                "Merging these statistics would overflow")

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

  Only finite numbers get in: an observation with NaN or an infinity raises
  NonFiniteObservation, and statistics from elsewhere (apply_delta, load_state) that are not
  finite raise NonFiniteStatistics; either way the statistics stay as they were, so one bad
  number cannot turn every later observation into NaN.
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self._lock = threading.Lock()
    self._statistics = RunningStatistics(self.shape)
    self._delta = RunningStatistics(self.shape)  # Seen since the last take_delta.

  def __call__(self, x, update=True):
    x = check_finite_observation(np.asarray(x, np.float64))
    with self._lock:
      if update:
        # Both computed and checked before either is assigned: a refused update changes
        # neither.
        updated = [(statistics, statistics.moments_with(x))
                   for statistics in (self._statistics, self._delta)]
        for _, moments in updated:
          _check_finite_statistics(moments, _OVERFLOW)
        for statistics, moments in updated:
          statistics.moments = moments
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
    _check_finite_statistics((state["count"], mean, m2), "Observation filter state to load")
    with self._lock:
      self._statistics.count = int(state["count"])
      self._statistics.mean, self._statistics.m2 = mean.copy(), m2.copy()
