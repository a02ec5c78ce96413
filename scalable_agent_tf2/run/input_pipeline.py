"""The learner's input: from the actors' trajectories to the batches of its updates.

    actors -> LearnerQueues (one bounded queue per learner)
      [-> --replay_fraction > 0: IMPALA's experience replay (buffers.ReplayMixer), or with
          --laser_replay LASER's episode replay (laser.EpisodeMixer): this run's own, one
          shared with other agents' runs in this process, or a replay service's]
      -> tf.data: batches of --batch_size trajectories (x --num_learners; with
         --replay_mixing=added, LASER's default, plus the replayed ones), time-major, the
         next one prefetched, with each trajectory's task: its level's index in the run's
         levels (make_dataset; replay keeps trajectories whole, level names included)
      [-> --algorithm=impact: the circular buffer, each batch used K times (learner_steps)]

With --repeatable the queues are repeatable.LockstepQueues (rounds: one unroll of every
actor's environments, in order, acted when the learner asks for them) and the batches are
built on the learner's thread (repeatable.lockstep_batches) instead of by tf.data.
"""
import dataclasses
import os
import queue
from typing import Optional

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.learning import buffers
from scalable_agent_tf2.learning import impact
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.run import repeatable
from scalable_agent_tf2.run.assembly import derive_seed
from scalable_agent_tf2.run.assembly import environment_group_size
from scalable_agent_tf2.run.assembly import layout_settings
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import replay_client
from scalable_agent_tf2.utils import profiling

# Seeds the replay buffer's sampling, apart from the actors' seeds (derive_seed(seed, index)).
_REPLAY_SEED_TAG = 1_000_003


class LearnerQueues:
  """The trajectories waiting for the learners, one bounded queue per learner.

  With several learners (Figure 1 right), learner r trains on the trajectories of actors
  r, r + N, r + 2N, ...: `get` hands out B trajectories from learner 0's queue, then B from
  learner 1's, and so on, so a dataset batching N * B in order gives learner r (which takes
  slice r of the batch, learner.Learner) its own actors' trajectories. One learner: one FIFO
  queue. Blocking calls give up (put -> False, get -> None) once `stop_event` is set.
  """

  def __init__(self, num_learners, capacity, batch_size, stop_event):
    self._queues = [queue.Queue(maxsize=capacity) for _ in range(num_learners)]
    self._capacity = capacity
    self._batch_size = batch_size
    self._stop_event = stop_event
    self._taken = 0  # Only `get` (the dataset's one generator thread) changes it.

  def put(self, trajectory, actor_index):
    """Queues for learner actor_index % N; blocks while full; False if stopping."""
    target = self._queues[actor_index % len(self._queues)]
    while not self._stop_event.is_set():
      try:
        target.put(trajectory, timeout=0.1)
        return True
      except queue.Full:
        pass
    return False

  def get(self):
    """The next trajectory in batch order (see the class doc), or None once stopping."""
    source = self._queues[(self._taken // self._batch_size) % len(self._queues)]
    while not self._stop_event.is_set():
      try:
        trajectory = source.get(timeout=0.1)
        self._taken += 1
        return trajectory
      except queue.Empty:
        pass
    return None

  def fill(self):
    """Fraction of the queues' capacity in use."""
    return sum(q.qsize() for q in self._queues) / (len(self._queues) * self._capacity)


def task_index(levels):
  """callable(level_name) -> its task: the level's index in the run's ordered levels
  (config.levels; settings.json keeps them where per-task PopArt reads the index). A trajectory
  of a level outside them cannot come from this run's actors (the wire sends the index too):
  ValueError naming it."""
  index = {level: task for task, level in enumerate(levels)}

  def task(level_name):
    if level_name not in index:
      raise ValueError(f"A trajectory of {level_name!r}, which is not one of this run's "
                       f"levels ({', '.join(levels)}).")
    return index[level_name]
  return task


def make_dataset(next_trajectory, signature, batch_size, levels):
  """tf.data pipeline: trajectories -> time-major batches, the next one prefetched.

  Args:
    next_trajectory: callable() -> structures.Trajectory, or None to end the dataset.
    signature: assembly.trajectory_signature(...).
    batch_size: B.
    levels: the run's levels, in order (config.levels): a trajectory's task is its level's
      index (task_index).

  Returns:
    Dataset of (policy_version [B], agent_state [B, ...], env_outputs [T+1, B, ...],
    agent_outputs [T+1, B, ...], tasks int32 [B]).
  """
  task = task_index(levels)

  def generate():
    profiling.name_this_thread("input")  # A tf.data thread: the input pipeline's Python part.
    while True:
      trajectory = next_trajectory()
      if trajectory is None:
        return
      yield (trajectory.policy_version, trajectory.agent_state, trajectory.env_outputs,
             trajectory.agent_outputs, task(trajectory.level_name))

  def time_major(policy_version, agent_state, env_outputs, agent_outputs, tasks):
    swap = lambda t: tf.transpose(t, tf.concat([[1, 0], tf.range(2, tf.rank(t))], 0))
    return (policy_version, agent_state, tf.nest.map_structure(swap, env_outputs),
            tf.nest.map_structure(swap, agent_outputs), tasks)

  dataset = tf.data.Dataset.from_generator(
      generate, output_signature=(*signature, tf.TensorSpec([], tf.int32)))
  return (dataset.batch(batch_size, drop_remainder=True)
          .map(time_major, num_parallel_calls=1)
          .prefetch(1))


def trajectory_nbytes(signature):
  """Bytes of one trajectory of `signature` (what replay stores per trajectory)."""
  return sum(int(np.prod(spec.shape)) * spec.dtype.size for spec in tf.nest.flatten(signature))


def with_laser_replay(next_online, config, agent, replay, agent_tag, print_fn, device):
  """A laser.EpisodeMixer: LASER's episode replay (Schmitt et al., 2019, section 5).

  next_online yields (trajectory, actor index). `replay` is a laser.EpisodeReplay, shared
  with other agents' runs (section 5.4) or this run's own; this run's episodes carry
  agent_tag.
  """
  num_replayed = config.num_replayed_per_batch
  print_fn(f"LASER replay: {num_replayed} of each batch of {config.learner_batch_size} "
           f"trajectories{_added_note(config)} from episodes replayed from their start "
           f"(agent {agent_tag!r}; replay of "
           f"{replay.capacity:,} unrolls, FIFO by episode); entropy cost on "
           f"{'online trajectories only' if config.entropy_on_online_only else 'all'}.")
  return laser.EpisodeMixer(next_online, replay, config.learner_batch_size, num_replayed,
                              agent_tag, laser.advance_state_fn(agent, device))


def _added_note(config):
  """For the console: where the replayed trajectories of a batch come from."""
  if config.replays_added:
    return f" (added to {config.batch_size} online ones: --replay_mixing=added)"
  return ""  # within_batch: a share of --batch_size, IMPALA's replay.


def with_replay(next_trajectory, config, signature, print_fn):
  """next_trajectory, or with --replay_fraction > 0 a buffers.ReplayMixer over it.

  IMPALA section 5.2.2: each batch draws round(fraction x batch size) trajectories uniformly
  from a replay of the last --replay_capacity online trajectories (Table D.3: 10,000, FIFO);
  with --replay_mixing=added they join --batch_size online ones instead
  (config.num_replayed_added).
  Replayed trajectories keep their behaviour policy and initial core state. Prints the memory
  bound (capacity x bytes per trajectory).
  """
  num_replayed = config.num_replayed_per_batch
  if not num_replayed:
    return next_trajectory  # The pipeline as it is, untouched.
  capacity = config.replay_capacity
  nbytes = trajectory_nbytes(signature)
  print_fn(f"Experience replay (IMPALA 5.2.2): {num_replayed} of each batch of "
           f"{config.learner_batch_size} trajectories{_added_note(config)} drawn "
           f"uniformly from the last {capacity:,} "
           f"(FIFO); memory at most {capacity:,} x {nbytes:,} bytes = "
           f"{capacity * nbytes / 1e9:.2f} GB.")
  try:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    physical = None
  if physical and capacity * nbytes > 0.8 * physical:
    print_fn(f"Warning: a full replay ({capacity * nbytes / 1e9:.1f} GB) would take more than "
             f"80% of this machine's {physical / 1e9:.1f} GB; lower --replay_capacity.")
  replay = buffers.ReplayBuffer(capacity, seed=derive_seed(config.seed, _REPLAY_SEED_TAG))
  return buffers.ReplayMixer(next_trajectory, replay, config.learner_batch_size, num_replayed)


def connect_shared_replay(config, network_config, signature, agent_tag, print_fn,
                          secret=None):
  """The replay_client.ReplayClient of --shared_replay_address, connected as agent_tag
  (proving the cluster's `secret`, bytes or None).

  LASER section 5.4 across processes: the replay service's first agent sets the trajectory
  layout; this agent must have the same (else distributed.PeerRejected names what differs).

  Raises:
    replay_service.ReplayServiceUnavailable: no answer within --shared_replay_connect_secs.
    distributed.PeerRejected: the service refused this agent's layout.
  """
  client = replay_client.ReplayClient(
      config.shared_replay_address, agent_tag, signature,
      layout_settings(config, network_config), config.levels,
      connect_timeout_secs=config.shared_replay_connect_secs, print_fn=print_fn,
      secret=secret)
  print_fn(f"Sharing the LASER replay of {config.shared_replay_address} as agent "
           f"{agent_tag!r}.")
  return client


def ending_on_lost_replay(source, lost):
  """callable() -> source(), or None (the end of the stream) once the replay service is lost.

  A shared replay service that stays unreachable past the client's reconnection budget, or
  that came back and refuses this agent, ends the learner's input: the learner finishes its
  update and the run stops as at its frame budget, writing its checkpoint; the error is
  appended to `lost` for train to raise afterwards. Only the replay's contents are lost.
  """
  def next_item():
    try:
      return source()
    except (distributed.ServiceUnavailable, distributed.PeerRejected) as error:
      lost.append(error)
      return None
  return next_item


def learner_steps(dataset, learner, config):
  """The learner's steps: (policy_versions [B], learner.update's keyword arguments for the
  batch (agent_state, env_outputs, agent_outputs, tasks: each trajectory's level's index;
  IMPACT's add target_policy_params), number of new trajectories in the batch).

  IMPALA: one step per batch. IMPACT (Algorithm 1 lines 6, 7, 10): batches pass through a
  impact.CircularBuffer of --circular_buffer_size batches, each used
  --circular_buffer_max_uses times; the target network's policy on a batch is evaluated when
  it enters. Only a batch's first use brings new trajectories (and of those, not
  the replayed ones): frames are counted once.
  """
  if config.algorithm == settings.IMPACT:
    yield from impact.steps(dataset, learner, config)
    return
  num_new = config.num_learners * config.num_online_per_batch  # Replay: one learner.
  for policy_versions, agent_state, env_outputs, agent_outputs, tasks in dataset:
    yield policy_versions, dict(agent_state=agent_state, env_outputs=env_outputs,
                                agent_outputs=agent_outputs, tasks=tasks), num_new


@dataclasses.dataclass(frozen=True)
class ReplayAccounts:
  """What a LASER run's replay held and gave (training.TrainResult.replay).

  episodes_by_agent: episodes held at the end, by agent tag (None: the shared service did
    not answer). sampled_by_agent: episodes this run replayed, by the tag of the agent that
    made them. num_replayed: replayed trajectories trained on. num_online_fill: replayed
    places filled with online trajectories while the replay held no complete episode.
  """
  episodes_by_agent: Optional[dict]
  sampled_by_agent: dict
  num_replayed: int
  num_online_fill: int


def non_finite_fields(trajectory):
  """Names of the trajectory's floating-point fields holding NaN or Inf, with their counts
  (e.g. ["env_outputs/reward (3)"]); empty for a trajectory the learner may train on.

  Integer fields (Atari's and DMLab's uint8 frames, actions) cannot hold either. Checked in
  numpy as each trajectory arrives (a few microseconds for an Atari unroll's rewards, logits
  and baselines): one NaN reward or logit in a batch makes the loss NaN, and RMSProp would
  write it into every parameter.
  """
  names = []
  for part in ("env_outputs", "agent_outputs"):
    value = getattr(trajectory, part)
    for name, array in zip(_field_names(value), tf.nest.flatten(value)):
      array = np.asarray(array)
      if array.dtype.kind == "f":
        bad = array.size - int(np.count_nonzero(np.isfinite(array)))
        if bad:
          names.append(f"{part}/{name} ({bad})")
  return names


def _field_names(structure, prefix=""):
  """Names of tf.nest.flatten(structure)'s leaves ("observation/frame"), namedtuples only."""
  if hasattr(structure, "_fields"):
    return [name for field, value in zip(structure._fields, structure)
            for name in _field_names(value, f"{prefix}{field}/")]
  return [prefix.rstrip("/")]


class LearnerInput:
  """One run's learner input: the actors' queues, then (dataset) the batches over them.

  LASER keeps each actor's stream of unrolls, so with --laser_replay the queues carry
  (trajectory, actor index). A lost shared replay service ends the dataset; its error is in
  `lost_replay`. With --repeatable the queues are a repeatable.LockstepQueues, whose
  actor_turn the actor threads wait on before each unroll.
  """

  def __init__(self, config, stop_event, print_fn=print):
    self._config = config
    self._print = print_fn
    self.dropped_trajectories = 0  # Non-finite numbers (put_trajectory).
    self.dropped_fields = []
    if config.repeatable:
      self.queues = repeatable.LockstepQueues(config.num_actors, environment_group_size(config),
                                              stop_event)
    else:
      self.queues = LearnerQueues(config.num_learners, config.queue_capacity,
                                  config.batch_size, stop_event)
    self.replay = None  # LASER: the laser.EpisodeReplay or replay_client.ReplayClient.
    self.mixer = None   # LASER: its laser.EpisodeMixer.
    self.lost_replay = []

  def actor_turn(self, actor_index):
    """What actor thread `actor_index` waits on before each unroll (callable() -> bool,
    False once stopping): with --repeatable, the learner's call for its next round; None
    otherwise (actors never wait for the learner)."""
    if not self._config.repeatable:
      return None
    return lambda: self.queues.actor_turn(actor_index)

  def put_trajectory(self, trajectory, actor_index):
    """Queues an actor's trajectory; blocks while full; False once stopping.

    A trajectory with NaN or Inf in its observations, rewards or behaviour-policy outputs
    (from a local actor or over the wire) is dropped and logged with its actor instead: it
    is never trained on (non_finite_fields says why).
    """
    bad = non_finite_fields(trajectory)
    if bad:
      self.dropped_trajectories += 1
      self.dropped_fields = bad  # The newest drop's: what the progress watch names.
      self._print(f"Dropped a trajectory of actor {actor_index} ({trajectory.level_name}): "
                  f"non-finite {', '.join(bad)}; not trained on "
                  f"({self.dropped_trajectories} dropped so far).")
      if self._config.repeatable:  # Its place in the round stays empty (LockstepQueues).
        return self.queues.put(None, actor_index)
      return True
    if self._config.laser_replay:
      return self.queues.put((trajectory, actor_index), actor_index)
    return self.queues.put(trajectory, actor_index)

  def dataset(self, agent, signature, shared_replay, agent_tag, device, print_fn,
              secret=None):
    """The dataset of batches (make_dataset) over the queues and the run's replay; prints
    the IMPACT and replay settings. shared_replay, agent_tag and secret (cluster_secret):
    as training.train's."""
    config = self._config
    if config.algorithm == settings.IMPACT:
      print_fn(f"IMPACT: circular buffer of N = {config.circular_buffer_size} batch(es), each "
               f"used K = {config.circular_buffer_max_uses} times; target network refreshed "
               f"every {config.target_update_period} learner steps.")
      if config.kl_target is not None:
        print_fn(f"IMPACT: KL coefficient {config.kl_cost} adapting towards a mean KL of "
                 f"{config.kl_target} at each target refresh.")
    if config.laser_replay:
      self.replay = shared_replay
      if self.replay is None and config.shared_replay_address:
        self.replay = connect_shared_replay(config, agent.config, signature, agent_tag,
                                            print_fn, secret)
      elif self.replay is None:
        self.replay = laser.EpisodeReplay(config.replay_capacity,
                                            seed=derive_seed(config.seed, _REPLAY_SEED_TAG))
      self.mixer = with_laser_replay(self.queues.get, config, agent, self.replay, agent_tag,
                                     print_fn, device)
      source = ending_on_lost_replay(self.mixer, self.lost_replay)
    else:
      source = with_replay(self.queues.get, config, signature, print_fn)
    if config.repeatable:
      return self._lockstep_dataset(agent, source, signature, print_fn)
    return make_dataset(source, signature, config.num_learners * config.learner_batch_size,
                        config.levels)

  def _lockstep_dataset(self, agent, source, signature, print_fn):
    """--repeatable's batches (repeatable.lockstep_batches); the actors act one at a time
    where they share an observation filter."""
    config, queues = self._config, self.queues
    queues.one_at_a_time = agent.observation_filter is not None
    print_fn(f"Repeatable (--repeatable): rounds of {queues.num_streams} unrolls (one per "
             f"environment of {config.num_actors} actor(s), in order), acted "
             f"{'one actor after another ' if queues.one_at_a_time else ''}with the "
             f"parameters of the learner's last update when it asks for the round; batches "
             f"of {config.learner_batch_size} in that order; each actor runs its own forward "
             f"pass; deterministic TensorFlow ops. One line per update follows.")
    return repeatable.lockstep_batches(source, signature, config.learner_batch_size,
                                       task_index(config.levels))

  @property
  def online_fill(self):
    """LASER's replayed places filled with online trajectories so far (0 without LASER)."""
    return self.mixer.num_online_fill if self.mixer is not None else 0

  def replay_accounts(self, print_fn):
    """ReplayAccounts of a LASER run, else None."""
    if self.mixer is None:
      return None
    try:
      held = self.replay.episodes_by_agent()
    except (distributed.ServiceUnavailable, distributed.PeerRejected) as error:
      # The run itself is complete and checkpointed; only this statistic is missing.
      print_fn(f"The shared replay's final contents are unknown: {error}")
      held = None
    return ReplayAccounts(episodes_by_agent=held, sampled_by_agent=dict(self.mixer.sampled_agents),
                          num_replayed=self.mixer.num_replayed,
                          num_online_fill=self.mixer.num_online_fill)
