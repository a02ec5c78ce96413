"""--repeatable: the same seed and command give the same losses and parameters, update by update.

A debugging mode, not the paper's: IMPALA's actors never wait for the learner (section 3), and
that is why a default run cannot repeat itself. Its actor threads act while the learner
updates, so

  - which unrolls make up a batch, and in which order, is whichever reached the learner's
    queue first (thread scheduling, environment step times, the machine's load);
  - the parameters an unroll was acted with are whatever the learner had written when each
    of its steps ran: the policy lag (section 4) is a matter of timing, and an unroll may
    even straddle an update;
  - dynamic batching groups whichever actors wait at the same moment into one forward pass.

A different batch, or one logit acted with other parameters, changes the sampled actions from
then on, and the runs part after their first update (two runs of one seed measured here: losses 291 and 255).

This mode replaces timing with a fixed schedule, in ROUNDS (LockstepQueues):

  - a round is one unroll of every environment of every actor (S = --num_actors x
    --envs_per_actor trajectories), taken by the learner in stream order (actor 0's
    environments, then actor 1's, ...); consecutive groups of --batch_size of that sequence
    are the batches, so a batch may span two rounds;
  - the actors start round r only when the learner asks for its first trajectory, and the
    learner waits for the whole round before its next update: every unroll of round r is
    acted with the parameters of the learner's last update before that moment (with
    S = --batch_size: each batch is one unroll of every actor, acted with the parameters of
    the previous update);
  - the learner's batches are built on its own thread when it asks for them (lockstep_batches:
    no tf.data threads, nothing prefetched);
  - each actor computes its own forward pass on its group's rows (policies.PerActorPolicy):
    a pass's rows are always the same, whoever else is acting. Dynamic batching would not
    do: a row's logits depend on how many rows share its pass (measured on this project's
    2-core AMD machine, TensorFlow 2.21: up to 9e-8 apart between passes of 1 and of 24
    rows, for the toy level's network and Pong's), and lockstep runs with dynamic batching
    part after a few updates (tests/test_repeatable.py fails with it);
  - where acting changes state the actors share (the observation filter of vector
    observations, action_spaces.ObservationFilter), the actors of a round act one after
    another, in actor order;
  - TensorFlow's ops run deterministically (DeterministicOps).

What was already fixed by --seed: the network's initial weights (torsos.Initializer), each
environment's seed (assembly.derive_seed(seed, stream, restart)), each environment's action
generator (numpy, one per stream: assembly.actor_loop_factory), the replay buffers' sampling.
Every TensorFlow random op of the package takes its seed from --seed; with op determinism on,
TensorFlow raises on a random op without a seed, so one added later fails loudly instead of
varying quietly.

What it costs: actors and learner take turns (the learner idles while the actors act, the
actors idle while it updates) and there is no dynamic batching. Measured back to back on a
2-core machine loaded by other jobs (load average 20-28): toy/lit_side 423 and 512 frames/s
asynchronous, 152 and 242 repeatable; Pong with 2 actors x 4 games, batches of 8, unrolls of
20: 195 asynchronous, 194 and 200 repeatable (the learner's update, on saturated cores, bounds
both). Op determinism changed nothing measurable on this CPU (the tests pass without it); it
is there for GPUs (cuDNN's and XLA's algorithms). What it does not cover: a run resumed from a
checkpoint (its environments start new episodes), an environment that crashed and was
restarted, another machine (CPU, thread count, TensorFlow build), actor processes (a cluster),
several learners, a replay shared with other runs (the last three are refused: config.py's
checks and check_run).
"""
import hashlib
import threading

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.transport import distributed

# A stream's slot in the round being gathered before its trajectory arrives.
_MISSING = object()
# How often waiting threads look at the stop event (seconds).
_POLL_SECS = 0.1


def check_run(listen_address, shared_replay):
  """What train() is given that --repeatable cannot repeat (config.py checks the flags).

  Raises:
    distributed.ClusterError: a cluster's learner (actor processes send their unrolls when
      they are ready, over the network).
    ValueError: a replay shared with other runs (they add episodes when they are ready).
  """
  if listen_address is not None:
    raise distributed.ClusterError(
        "--repeatable runs the actors in the learner's process, in lockstep with it; actor "
        "processes (--job_name, TF_CONFIG, the launcher) send their unrolls whenever they are "
        "ready, so a cluster cannot repeat a run. Drop --repeatable, or train on one machine "
        "(no --job_name).")
  if shared_replay is not None:
    raise ValueError("--repeatable cannot repeat a run whose LASER replay is shared with "
                     "other runs (they add episodes whenever they are ready): give the run its "
                     "own replay, or drop --repeatable.")


class DeterministicOps:
  """TensorFlow's op determinism (tf.config.experimental.enable_op_determinism) for one run.

  It is a switch of the whole process: `restore` puts back what the process had, so a
  library caller (a test) that trains once with --repeatable keeps its other TensorFlow work
  as it was (with determinism on, prefetching behind a Python generator stops and unseeded
  random ops raise).
  """

  def __init__(self, enabled):
    self._enabled = enabled
    self._was = None
    if enabled:
      self._was = _op_determinism_enabled()
      tf.config.experimental.enable_op_determinism()

  def restore(self):
    if self._enabled and self._was is False:
      _disable_op_determinism()


def _op_determinism_enabled():
  """Whether op determinism is on; None where this TensorFlow cannot say."""
  try:
    # pylint: disable-next=g-import-not-at-top
    from tensorflow.python.framework import config as tf_config
    return bool(tf_config.is_op_determinism_enabled())
  except (ImportError, AttributeError):
    return None


def _disable_op_determinism():
  # TensorFlow exports the switch on, not off (tf.config.experimental); its own module has both.
  try:
    # pylint: disable-next=g-import-not-at-top
    from tensorflow.python.framework import config as tf_config
    tf_config.disable_op_determinism()
  except (ImportError, AttributeError):
    pass


class LockstepQueues:
  """The actors' unrolls for the learner in rounds (see the module docstring); the interface
  of input_pipeline.LearnerQueues (put, get, fill) plus `actor_turn`.

  Streams: actor i's environments are streams i x G .. i x G + G - 1 (G environments per
  actor, assembly.actor_loop_factory). A stream whose trajectory was dropped (non-finite
  numbers, input_pipeline.LearnerInput) delivers None: the round completes without it and
  the learner's sequence skips it.
  """

  def __init__(self, num_actors, envs_per_actor, stop_event, one_at_a_time=False):
    """Args:
      num_actors, envs_per_actor: the run's actors and environments per actor.
      stop_event: threading.Event; once set, waiting calls give up (actor_turn and put ->
        False, get -> None).
      one_at_a_time: the actors of a round act one after another, in actor order (they
        share state that acting changes); may be set until the actors start.
    """
    self._num_actors = num_actors
    self._group = envs_per_actor
    self._num_streams = num_actors * envs_per_actor
    self._stop_event = stop_event
    self.one_at_a_time = one_at_a_time
    self._condition = threading.Condition()
    self._requested = -1  # The last round the learner asked for.
    self._rounds_done = [0] * num_actors  # Rounds each actor has delivered.
    self._gathering = [_MISSING] * self._num_streams  # The requested round, by stream.
    self._delivered = 0
    self._round = []  # The last complete round, handed out by `get` in stream order.
    self._position = 0

  @property
  def num_streams(self):
    return self._num_streams

  def actor_turn(self, actor_index):
    """Blocks until actor `actor_index` may act its next unroll: the learner has asked for
    its next round (and, one at a time, the actors before it have delivered theirs). False
    once stopping."""
    with self._condition:
      while not self._stop_event.is_set():
        if self._may_act(actor_index):
          return True
        self._condition.wait(_POLL_SECS)
    return False

  def _may_act(self, actor_index):
    round_ = self._rounds_done[actor_index]
    if self._requested < round_:
      return False
    return not self.one_at_a_time or all(
        done > round_ for done in self._rounds_done[:actor_index])

  def put(self, trajectory, stream):
    """Delivers stream `stream`'s unroll of the requested round (None: dropped). Never
    blocks: the actor waits in actor_turn before its next unroll."""
    if self._stop_event.is_set():
      return False
    with self._condition:
      if not 0 <= stream < self._num_streams:
        raise ValueError(f"Stream {stream} is not one of this run's {self._num_streams} "
                         f"(--num_actors x --envs_per_actor).")
      if self._gathering[stream] is not _MISSING:
        raise RuntimeError(f"Stream {stream} delivered twice in round {self._requested}: an "
                           f"actor acted without waiting for its turn (actor_turn).")
      self._gathering[stream] = trajectory
      self._delivered += 1
      actor = stream // self._group
      first = actor * self._group
      if all(item is not _MISSING for item in self._gathering[first:first + self._group]):
        self._rounds_done[actor] += 1
      self._condition.notify_all()
    return True

  def get(self):
    """The next trajectory in (round, stream) order; at a round's first, asks the actors for
    it and waits for all of it. None once stopping."""
    while True:
      if self._position == len(self._round):
        if not self._next_round():
          return None
      item = self._round[self._position]
      self._position += 1
      if item is not None:  # Dropped trajectories leave a hole in the round.
        return item

  def _next_round(self):
    with self._condition:
      self._requested += 1
      self._condition.notify_all()
      while self._delivered < self._num_streams:
        if self._stop_event.is_set():
          return False
        self._condition.wait(_POLL_SECS)
      self._round, self._position = self._gathering, 0
      self._gathering, self._delivered = [_MISSING] * self._num_streams, 0
      return True

  def fill(self):
    """Fraction of the requested round delivered so far (the console's queue fill)."""
    return self._delivered / self._num_streams


def lockstep_batches(next_trajectory, signature, batch_size, task):
  """input_pipeline.make_dataset's batches, built on the calling thread when asked for: the
  same tensors (policy_version [B], agent_state [B, ...], env_outputs and agent_outputs
  [T+1, B, ...], the signature's dtypes; tasks int32 [B], `task` of each level name:
  input_pipeline.task_index), without tf.data's threads and prefetching, which would ask the
  actors for the next round while the learner updates.

  Yields until next_trajectory returns None.
  """
  def stacked(spec, *leaves):
    return np.stack([np.asarray(leaf) for leaf in leaves]).astype(spec.dtype.as_numpy_dtype)

  def time_major(array):
    return np.swapaxes(array, 0, 1)

  while True:
    items = []
    for _ in range(batch_size):
      trajectory = next_trajectory()
      if trajectory is None:
        return
      items.append((np.int64(trajectory.policy_version), trajectory.agent_state,
                    trajectory.env_outputs, trajectory.agent_outputs,
                    np.int32(task(trajectory.level_name))))
    policy_version, agent_state, env_outputs, agent_outputs, tasks = tf.nest.map_structure(
        stacked, (*signature, tf.TensorSpec([], tf.int32)), *items)
    yield tf.nest.map_structure(tf.convert_to_tensor, (
        policy_version, agent_state, tf.nest.map_structure(time_major, env_outputs),
        tf.nest.map_structure(time_major, agent_outputs), tasks))


def parameter_digest(variables):
  """The first 16 hex digits of the SHA-256 of the variables' bytes, in order: equal digests,
  equal parameters (bit for bit)."""
  digest = hashlib.sha256()
  for variable in variables:
    digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
  return digest.hexdigest()[:16]


# The learner's statistics an update line shows, when the learner returns them.
UPDATE_LINE_STATS = ("total_loss", "pg_loss", "baseline_loss", "entropy_loss", "kl_loss",
                     "grad_norm")


def update_line(num_updates, stats, variables):
  """The console line of one update in --repeatable mode, e.g.
  "update 3: total_loss=291.03766 ... params=9f2c01d4aa5e3b70": losses at float32's full
  precision (the shortest decimal that reads back as the same float32) and the parameters'
  digest after the update, so two runs' consoles can be compared with diff."""
  parts = [f"{name}={str(np.float32(stats[name]))}" for name in UPDATE_LINE_STATS
           if name in stats]
  return (f"update {num_updates}: {' '.join(parts)} frames={int(stats['num_env_frames'])} "
          f"params={parameter_digest(variables)}")
