"""LASER (Schmitt et al., 2019): what is LASER's, in one place.

    EpisodeReplay     sections 5.1, 5.4: whole episodes, FIFO by episode, uniform sampling,
                      shareable by several agents (tagged by agent); across processes
                      transport/replay_service.py serves one to agents elsewhere.
    EpisodeMixer      section 5.3, Appendix A.2: online and replayed trajectories in every
                      batch; episodes replayed from their start, core states recomputed.
    advance_state_fn  Appendix A.2: replayed episodes' LSTM states recomputed with the latest
                      parameters.
    online_mask, entropy_mask  section 5.1: the entropy cost on online trajectories only.

Its trust region (section 4.2, --trust_region_threshold) is V-trace's mask (vtrace.py,
losses.py), its replay's wiring run/input_pipeline.py's (with_laser_replay).
"""
import collections
import threading

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import settings

# One stored episode: agent (the tag of the agent whose actors produced it) and unrolls (the
# consecutive trajectories of one actor that cover the episode, from the one holding its first
# step to the one holding its last; the first may start with the previous episode's end).
Episode = collections.namedtuple("Episode", "agent unrolls")


def episode_starts(done):
  """Indices t in 1..T where an unroll's observation t starts a new episode.

  Args:
    done: bool [T+1], an unroll's env_outputs.done (done[t]: observation t starts an episode;
      step 0 repeats the previous unroll's last step, so it is not looked at).

  Returns:
    list of ints, increasing.
  """
  return [int(t) for t in np.flatnonzero(np.asarray(done)[1:]) + 1]


class EpisodeReplay:
  """Whole episodes of one or several agents: FIFO removal, uniform sampling by episode.

  Each actor stream (agent, actor) has an open episode, the unrolls since the one holding
  its first step. `add` appends an unroll to its stream; when the unroll holds an episode's
  end, the episode is stored whole and a new one opens (with this unroll if the next
  episode starts inside it). Capacity counts unrolls; storing an episode first removes the
  oldest episodes until it fits. An episode longer than the capacity cannot be stored: its
  stream drops unrolls until the next episode starts (counted in num_dropped_unrolls).
  Thread-safe; unrolls are kept by reference.
  """

  def __init__(self, capacity=settings.DEFAULT_REPLAY_CAPACITY, seed=0):
    """Args:
      capacity: most unrolls held (LASER section 5.3 counts observations: capacity x T).
      seed: seeds the sampling (numpy Generator).
    """
    if int(capacity) != capacity or capacity < 1:
      raise ValueError(f"The replay capacity must be a positive integer, got {capacity}.")
    self._capacity = int(capacity)
    self._episodes = collections.deque()
    self._num_unrolls = 0
    self._open = {}        # (agent, actor) -> list of unrolls, or None: dropping until a start.
    self._added = collections.Counter()  # agent -> episodes stored since creation.
    self.num_dropped_unrolls = 0
    self._rng = np.random.default_rng(seed)
    self._lock = threading.Lock()

  @property
  def capacity(self):
    return self._capacity

  def __len__(self):
    """Episodes held."""
    with self._lock:
      return len(self._episodes)

  @property
  def num_unrolls(self):
    with self._lock:
      return self._num_unrolls

  def episodes_by_agent(self):
    """dict agent -> episodes held now."""
    with self._lock:
      return dict(collections.Counter(episode.agent for episode in self._episodes))

  def added_by_agent(self):
    """dict agent -> episodes stored since creation (including those removed since)."""
    with self._lock:
      return dict(self._added)

  def add(self, unroll, agent, actor, done=None):
    """Appends an actor's next unroll (structures.Trajectory) to its stream.

    Args:
      unroll: the trajectory; its env_outputs.done [T+1] marks episode starts.
      agent: hashable tag of the agent (shared replay: one per agent).
      actor: the actor's index within the agent (unrolls of one stream are consecutive).
      done: bool [T+1], the unroll's env_outputs.done; give it when `unroll` is stored in
        another form (replay_service.py keeps unrolls as they came over the wire).
    """
    key = (agent, actor)
    unroll_done = unroll.env_outputs.done if done is None else done
    starts = episode_starts(unroll_done)
    with self._lock:
      steps = self._open.get(key, [])
      if steps is not None:
        steps.append(unroll)
        if starts:
          self._store(Episode(agent, tuple(steps)))
      elif starts:
        self.num_dropped_unrolls += 1
      else:  # Still inside an episode too long to keep.
        self.num_dropped_unrolls += 1
        return
      # The next episode opens with this unroll unless it starts at its last step (then the
      # next unroll's step 0 is the episode's first observation).
      if starts:
        unroll_length = len(unroll_done) - 1
        steps = [unroll] if starts[-1] < unroll_length else []
      if len(steps) > self._capacity:
        self.num_dropped_unrolls += len(steps)
        steps = None
      self._open[key] = steps

  def join_mid_episode(self, agent, actor):
    """Opens a stream whose unrolls continue an episode that started elsewhere (a shared
    replay service restarted under running agents): its unrolls are dropped until the next
    episode starts, as an episode must be replayed from its start (LASER section 5.1)."""
    with self._lock:
      self._open[(agent, actor)] = None

  def close_stream(self, agent, actor):
    """Forgets an actor stream's unfinished episode, counted in num_dropped_unrolls.

    For an actor that is gone (e.g. its process restarted): its episode will never end, and
    the unrolls of whatever streams next under the same (agent, actor) must not continue it.
    """
    with self._lock:
      steps = self._open.pop((agent, actor), None)
      if steps:
        self.num_dropped_unrolls += len(steps)

  def _store(self, episode):
    if len(episode.unrolls) > self._capacity:
      self.num_dropped_unrolls += len(episode.unrolls)
      return
    while self._num_unrolls + len(episode.unrolls) > self._capacity:
      self._num_unrolls -= len(self._episodes.popleft().unrolls)  # FIFO, whole episodes.
    self._episodes.append(episode)
    self._num_unrolls += len(episode.unrolls)
    self._added[episode.agent] += 1

  def sample(self):
    """An Episode, each held one with probability 1 / len(self) (uniform, with replacement).

    Raises:
      IndexError: no complete episode is held yet.
    """
    with self._lock:
      if not self._episodes:
        raise IndexError("Cannot sample from an episode replay with no complete episode.")
      return self._episodes[int(self._rng.integers(len(self._episodes)))]


def _zeros_like(state):
  """A core state (a tuple or namedtuple of arrays, or ()) of zeros."""
  zeros = [np.zeros_like(part) for part in state]
  return type(state)(*zeros) if hasattr(state, "_fields") else tuple(zeros)


class EpisodeMixer:
  """callable() -> the next trajectory of a batch stream mixing online and replayed ones.

  Like ReplayMixer, batches are consecutive groups of `batch_size` calls: the first batch_size -
  num_replayed come from `next_online` (each added to the replay after it is drawn: LASER
  section 5.3 uses fresh experience before replaying it), the last num_replayed from replay
  lanes. Lane j plays one sampled episode from its first unroll to its last, one unroll per
  batch, then samples another. The first unroll keeps the actor's core state if this agent made
  the episode, else starts from zeros (the LSTM resets where the episode starts, so the
  episode's own steps are unaffected by it); each later unroll's state is recomputed with
  `advance_state` from the previous unroll and its (recomputed) state, when the unroll is handed
  out, so with the parameters of that moment (LASER Appendix A.2). Before the replay holds a
  complete episode, replayed places are filled with online trajectories (added to the replay
  like the others; counted in num_online_fill, and not as frames: docs/LASER.md, "Departures").
  """

  def __init__(self, next_online, replay, batch_size, num_replayed, agent, advance_state):
    """Args:
      next_online: callable() -> (the next online trajectory, the index of the actor that
        produced it: its stream in the replay), or None when the stream ends.
      replay: an EpisodeReplay (possibly shared with other agents).
      batch_size: trajectories per batch.
      num_replayed: replayed trajectories per batch, 0 < num_replayed < batch_size.
      agent: this agent's tag in the replay.
      advance_state: callable(trajectory, state) -> the core state before the next unroll
        (the network run over the trajectory's steps 0..T-1 from `state`, no gradient: the
        steps the actor read between the two unrolls' starts); never
        called when states are () (feed-forward agents).
    """
    if not 0 < num_replayed < batch_size:
      raise ValueError(f"num_replayed must be in (0, batch_size = {batch_size}), got "
                       f"{num_replayed}: online data must keep flowing (LASER section 5.3).")
    self._next_online = next_online
    self._replay = replay
    self._batch_size = batch_size
    self._num_online = batch_size - num_replayed
    self._agent = agent
    self._advance_state = advance_state
    # Lane j: [episode, index of the unroll handed out last, its core state].
    self._lanes = [None] * num_replayed
    self._position = 0
    self.sampled_agents = collections.Counter()  # agent -> episodes sampled by this mixer.
    self.num_replayed = 0       # Replayed trajectories handed out.
    self.num_online_fill = 0    # Replayed places filled online (replay still empty).
    self._lock = threading.Lock()

  def __call__(self):
    with self._lock:
      position = self._position
      self._position = (position + 1) % self._batch_size
      if position >= self._num_online:
        replayed = self._next_replayed(position - self._num_online)
        if replayed is not None:
          self.num_replayed += 1
          return replayed
        self.num_online_fill += 1
      item = self._next_online()
      if item is None:
        return None
      trajectory, actor = item
      self._replay.add(trajectory, self._agent, actor)
      return trajectory

  def _next_replayed(self, lane_index):
    lane = self._lanes[lane_index]
    if lane is not None and lane[1] + 1 < len(lane[0].unrolls):
      episode, index, state = lane
      previous = episode.unrolls[index]
      if len(state):  # () for a feed-forward agent: nothing to recompute.
        state = self._advance_state(previous, state)
      index += 1
    else:
      try:
        episode = self._replay.sample()
      except IndexError:
        return None
      self.sampled_agents[episode.agent] += 1
      index, state = 0, episode.unrolls[0].agent_state
      if episode.agent != self._agent:
        # Another agent's network made that state (section 5.1: "arbitrarily different state
        # representations"); zeros, the state an episode starts from, mean the same to all.
        state = _zeros_like(state)
    self._lanes[lane_index] = [episode, index, state]
    return episode.unrolls[index]._replace(agent_state=state)


def advance_state_fn(agent, device):
  """callable(trajectory, state) -> the core state before the trajectory's successor: the
  current network run (no gradient) over steps 0..T-1 from `state`, as the actor ran it (it
  reads observation t to choose the action of step t+1; step T is the successor's step 0).
  LASER Appendix A.2: replayed episodes' LSTM states recomputed with the latest
  parameters."""
  @tf.function
  def advance(prev_actions, env_outputs, state):
    _, state = agent.unroll(prev_actions, env_outputs, state)
    return state

  def advance_state(trajectory, state):
    batched = lambda x: tf.convert_to_tensor(x)[:-1, tf.newaxis]
    with tf.device(device):
      state = advance(batched(trajectory.agent_outputs.action),
                      tf.nest.map_structure(batched, trajectory.env_outputs),
                      tf.nest.map_structure(lambda s: tf.convert_to_tensor(s)[tf.newaxis],
                                            state))
    return tf.nest.map_structure(lambda s: s.numpy()[0], state)
  return advance_state


def online_mask(batch_size, num_replayed):
  """float32 [B]: 1 for a batch's online trajectories, 0 for its replayed ones (the last
  num_replayed: buffers.ReplayMixer, buffers.EpisodeMixer)."""
  return tf.concat([tf.ones([batch_size - num_replayed]), tf.zeros([num_replayed])], 0)


def entropy_mask(config):
  """The learner's entropy mask for a run's LASER settings (learner.Learner's entropy_mask):
  section 5.1's online_mask, the entropy cost on each batch's online trajectories only; None
  (every trajectory) without --entropy_on_online_only."""
  if not config.entropy_on_online_only:
    return None
  return online_mask(config.learner_batch_size, config.num_replayed_per_batch)
