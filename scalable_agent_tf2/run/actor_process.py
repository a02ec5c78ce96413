"""Actor processes of a cluster, both ends: the actor process (run_actor_process: actor threads
feeding a remote learner) and the learner's end of them (RemoteActors).

    actor process:  --num_actors ActorThreads -> service_client.LearnerClient
                      .send_trajectory (one message per unroll, wire.MessageHeader first)
                      .report_episode, and the parameters at the start of every unroll
                      (with them, MuJoCo's observation filter: filter_sync.FilterSync)
    learner:        learner_service.TrajectoryServer -> pump thread -> the learner's queues
                    (duplicates dropped by learner_service.DeliveryLedger, malformed messages
                    refused by wire.message_problem)

An actor process also pings its learner every few seconds (Heartbeat): a learner that died
without a word (SIGKILL, a lost machine) is reported on the actor's console within seconds,
not when a call's deadline (up to 600 s) runs out.
"""
import collections
import contextlib
import dataclasses
import threading
import time

import tensorflow as tf

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.transport import distributed
from scalable_agent_tf2.transport import filter_sync as filter_sync_lib
from scalable_agent_tf2.transport import learner_service
from scalable_agent_tf2.transport import service_client
from scalable_agent_tf2.transport import wire
from scalable_agent_tf2.utils import profiling
from scalable_agent_tf2.utils import stop_signals

# How long stopping threads may take before we give up on them (they are daemons).
JOIN_TIMEOUT_SECS = 60.0
# A finished learner keeps answering this long, so its actor processes hear that it is done
# (an unroll of an actor thread takes well under this) instead of waiting to reconnect.
_ACTOR_NOTICE_SECS = 5.0
# The learner is gone: it finished (its queue is closed: CancelledError) or did not come back
# within the client's reconnection budget (LearnerUnavailable).
_LEARNER_GONE = (tf.errors.CancelledError, distributed.LearnerUnavailable)
# The heartbeat: a ping this often, each answered within the timeout or counted as silence;
# silence is reported again this often.
HEARTBEAT_SECS = 2.0
HEARTBEAT_TIMEOUT_SECS = 5.0
_SILENCE_REPORT_SECS = 30.0
# Refused messages logged per actor process before only every _REFUSALS_LOGGED_EVERY-th is.
_REFUSALS_LOGGED = 20
_REFUSALS_LOGGED_EVERY = 100


@dataclasses.dataclass(frozen=True)
class ActorProcessResult:
  """What run_actor_process did: trajectories sent, and why it stopped."""
  num_trajectories: int
  stop_reason: str


def run_actor_process(config, learner_address, task, print_fn=print, connect_timeout_secs=300.0,
                      secret=None, stop_request=None):
  """An actor process of a cluster: --num_actors actor threads feeding a remote learner.

  The threads' inference is batched on this host (dynamic_batching); the local network is
  refreshed from the learner at the start of every unroll (service_client.ParameterSync).
  Levels and seeds follow the global actor number task * num_actors + i, so a cluster
  assigns levels round-robin like one machine does. `secret` (bytes; distributed.cluster_secret)
  must be the learner's, else it refuses every call. `stop_request`: the command's
  stop_signals.StopRequest (experiment_main.py), under which SIGINT and SIGTERM raise Stopping
  in the main thread; None (a library caller): SIGTERM raises it while the threads run
  (stop_signals.SigtermRaises).

  Returns:
    ActorProcessResult.

  Raises:
    distributed.LearnerUnavailable: no learner answered within connect_timeout_secs.
    distributed.PeerRejected: the learner refused this actor.
    actor.ActorFailed: an actor thread hit an error other than an environment crash.
  """
  assembly.configure_threads(config)
  environment_constructor = assembly.checked_environment_constructor(config)
  agent, first_env = assembly.build_agent(config, environment_constructor)
  with contextlib.ExitStack() as cleanup:
    first_env_owner = cleanup.enter_context(contextlib.ExitStack())
    first_env_owner.callback(first_env.close)
    policy = assembly.make_policy(config, agent, assembly.learner_device())
    cleanup.callback(policy.close)
    signature = assembly.trajectory_signature(agent.config, config.unroll_length, policy)
    client = service_client.LearnerClient(
        learner_address, wire.message_layout(signature),
        assembly.wire_fingerprint(config, agent.config, signature), name=f"actor-{task}",
        connect_timeout_secs=connect_timeout_secs, print_fn=print_fn, secret=secret)
    sync = service_client.ParameterSync(client, agent.trainable_variables)
    sync.refresh()
    # MuJoCo: the learner's (restored, when it resumed) filter, before any observation.
    filter_sync = filter_sync_lib.for_actor_process(client, agent)
    if filter_sync is not None:
      filter_sync.sync()
    print_fn(f"Actor task {task}: {config.num_actors} actors connected to {learner_address}.")
    process = _ActorProcess(config, task, client, sync, filter_sync, print_fn)
    return process.run(policy, environment_constructor, first_env, first_env_owner,
                       give_up_secs=connect_timeout_secs,
                       signals_raise=stop_request is not None)


class Heartbeat:
  """Tells an actor process's console within seconds that its learner stopped answering.

  TensorFlow's gRPC client does not fail a call to a server that died: the call waits for
  its deadline (up to 600 s while sending). A thread pings the learner every
  `interval_secs` (service_client.ServiceClient.ping: a cheap authenticated call, its own
  connection, `timeout_secs` to answer) and prints "The learner at X is not answering (N s);
  retrying for up to M s" at the first silent ping (again every 30 s), "The learner at X
  answers again" when it is back. Silence longer than `give_up_secs` (the client's
  reconnection budget) is the learner being gone: `on_gone(LearnerUnavailable)`.
  """

  def __init__(self, client, stop_event, on_gone, print_fn, give_up_secs,
               interval_secs=HEARTBEAT_SECS, timeout_secs=HEARTBEAT_TIMEOUT_SECS):
    self._client = client
    self._stop_event = stop_event
    self._on_gone = on_gone
    self._print = print_fn
    self._give_up_secs = give_up_secs
    self._interval_secs = interval_secs
    self._timeout_secs = timeout_secs
    self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

  def start(self):
    self._thread.start()

  def join(self, timeout):
    if self._thread.ident is not None:
      self._thread.join(timeout)

  def _run(self):
    address = self._client.address
    last_answer = time.monotonic()
    reported_at = None  # When silence was last reported; None while the learner answers.
    while not self._stop_event.wait(self._interval_secs):
      answered = self._client.ping(self._timeout_secs)
      now = time.monotonic()
      if self._stop_event.is_set():
        return
      if answered:
        if reported_at is not None:
          self._print(f"The learner at {address} answers again.")
        last_answer, reported_at = now, None
        continue
      silent = now - last_answer
      if silent > self._give_up_secs:
        self._on_gone(distributed.LearnerUnavailable(
            f"The learner at {address} did not answer for {silent:.0f} s."))
        return
      if reported_at is None or now - reported_at >= _SILENCE_REPORT_SECS:
        self._print(f"The learner at {address} is not answering ({silent:.0f} s); retrying "
                    f"for up to {self._give_up_secs - silent:.0f} s.")
        reported_at = now


class _ActorProcess:
  """The actor threads of run_actor_process and what they share: the learner's client, the
  parameter sync, the observation filter's sync (None without a filter), the message
  sequence numbers, the news that the learner is gone."""

  def __init__(self, config, task, client, sync, filter_sync, print_fn):
    self._config = config
    self._client = client
    self._sync = sync
    self._filter_sync = filter_sync
    self._print = print_fn
    self._first_index = task * config.num_actors
    self._stop_event = threading.Event()
    self._learner_gone = []
    self._delivered = False
    self._incarnation = wire.new_incarnation()
    self._sequences = {}  # Actor index -> messages sent so far (its next sequence number).

  def _on_learner_gone(self, error):
    self._learner_gone.append(error)
    self._stop_event.set()

  def _put_trajectory(self, trajectory, actor_index):
    header = wire.MessageHeader(self._config.levels.index(trajectory.level_name), actor_index,
                                self._incarnation, self._sequences.get(actor_index, 0))
    try:
      self._client.send_trajectory(header, trajectory)
      self._sequences[actor_index] = header.sequence + 1
      if not self._delivered:
        self._delivered = True
        self._print(f"Actor process {self._first_index // self._config.num_actors}: first "
                    f"trajectory delivered to the learner.")
      return True
    except _LEARNER_GONE as error:
      self._on_learner_gone(error)
      return False

  def _policy_version(self):
    """At every unroll start: the learner's parameters and, with a filter, its merged
    statistics (filter_sync.py says why there)."""
    try:
      if self._filter_sync is not None:
        self._filter_sync.sync()
      return self._sync.refresh()
    except _LEARNER_GONE as error:
      self._on_learner_gone(error)
      raise

  def _report_episode(self, level, episode_return, episode_step):
    try:
      self._client.report_episode(self._config.levels.index(level), episode_return,
                                  episode_step)
    except _LEARNER_GONE as error:
      self._on_learner_gone(error)

  def _threads(self, policy, environment_constructor, first_env):
    config = self._config
    on_restart = lambda lvl, e: self._print(f"Environment for {lvl} restarted: {e}")
    size = assembly.environment_group_size(config)
    return [actor_lib.ActorThread(
        i, assembly.actor_loop_factory(config, i, policy, environment_constructor, first_env,
                                       self._first_index, self._report_episode, on_restart),
        config.unroll_length, self._put_trajectory, self._policy_version, self._stop_event,
        first_stream=i * size)
            for i in range(self._first_index, self._first_index + config.num_actors)]

  def run(self, policy, environment_constructor, first_env, first_env_owner, give_up_secs,
          signals_raise=False):
    """Runs the threads until the learner is gone, an actor fails, or a signal.

    first_env_owner: the contextlib.ExitStack that closes first_env; actor 0 takes it over.
    give_up_secs: how long a silent learner is waited for (the Heartbeat's budget).
    signals_raise: the caller's handler already raises Stopping for a stop signal (the
      command's StopRequest); otherwise SIGTERM is made to raise it here.
    """
    actors = self._threads(policy, environment_constructor, first_env)
    heartbeat = Heartbeat(self._client, self._stop_event, self._on_learner_gone, self._print,
                          give_up_secs)
    sigterm = None if signals_raise else stop_signals.SigtermRaises()
    stop_reason = "learner gone"
    try:
      heartbeat.start()
      for thread in actors:
        thread.start()
      first_env_owner.pop_all()  # Actor 0 owns it now.
      while not self._stop_event.wait(0.5):
        if actor_lib.first_failed(actors) is not None:
          stop_reason = "an actor failed"
          break
    except (KeyboardInterrupt, stop_signals.Stopping) as interrupt:
      stop_reason = f"interrupted ({stop_signals.interrupt_name(interrupt)})"
      if sigterm is not None:  # A second SIGTERM must not cut the stop (and its report) short.
        sigterm.ignore()  # The command's StopRequest raises only once by itself.
    finally:
      if sigterm is not None:
        sigterm.restore()
      self._stop_event.set()
      policy.close()
      for thread in actors:
        thread.join(JOIN_TIMEOUT_SECS)
      heartbeat.join(JOIN_TIMEOUT_SECS)
    return self._result(actors, stop_reason)

  def _result(self, actors, stop_reason):
    sent = sum(a.num_trajectories for a in actors)
    if self._learner_gone:
      self._print(f"The learner at {self._client.address} is gone "
                  f"({type(self._learner_gone[0]).__name__}); this actor process stops after "
                  f"sending {sent} trajectories.")
    failed = None if self._learner_gone else actor_lib.first_failed(actors)
    if failed is not None:
      raise actor_lib.ActorFailed.of(failed) from failed.error
    self._print(f"Actor process stopped: {stop_reason}; {sent} trajectories sent.")
    return ActorProcessResult(num_trajectories=sent, stop_reason=stop_reason)


class RemoteActors:
  """A cluster learner's actor processes, as the training supervisor (supervisor.py) sees its
  actors.

  A learner_service.TrajectoryServer on the learner's address receives their trajectories; a
  pump thread moves them into the learner's queues (dropping repeated messages, refusing
  malformed ones) and the supervisor's polls move their episodes into the monitor. With an
  observation filter (MuJoCo) it also merges theirs into the agent's, which is checkpointed
  (filter_sync.py).
  """

  def __init__(self, config, agent, signature, listen_address, put_trajectory, monitor,
               print_fn, secret=None, insecure_open_cluster=False):
    """Listens on `listen_address`.

    Args:
      secret: the cluster's secret (bytes; distributed.cluster_secret) every call must prove,
        or None.
      insecure_open_cluster: let a learner without a secret listen beyond loopback.

    Raises:
      distributed.ClusterError: a non-loopback address without a secret or
        insecure_open_cluster (distributed.check_listen_address).
    """
    lines = distributed.check_listen_address(listen_address, secret, insecure_open_cluster)
    self.server = learner_service.TrajectoryServer(
        listen_address, wire.message_layout(signature),
        assembly.wire_fingerprint(config, agent.config, signature), agent.trainable_variables,
        capacity=config.queue_capacity, methods=filter_sync_lib.learner_methods(agent),
        secret=secret)
    # Trajectories carry their environment's stream (actor * envs_per_actor + slot).
    self.ledger = learner_service.DeliveryLedger(
        config.num_actors * assembly.environment_group_size(config))
    for line in lines:
      print_fn(line)
    protection = ("calls must prove the cluster's secret" if secret is not None else
                  "no cluster secret")
    print_fn(f"Learner listening on {listen_address} ({protection}).")
    self._levels = config.levels
    self._num_actions = getattr(agent.config, "num_actions", None)
    self._newest_version = 0
    self._signature = signature
    self._put_trajectory = put_trajectory
    self._monitor = monitor
    # Longer than any step of its environments may take (their watchdog's limit) before an
    # actor process that sent trajectories and stopped is recorded as silent.
    self.watch = learner_service.SenderWatch(max(
        assembly.environment_timeouts(config, level)[0] for level in set(config.levels)))
    self._print = print_fn
    self.refused = collections.Counter()  # Actor process (task) -> messages refused.
    self._failure = None
    self._pump = threading.Thread(target=self._pump_trajectories, name="trajectory-pump",
                                  daemon=True)
    self._closed_at = None

  def _pump_trajectories(self):
    """Remote trajectories into the queues local actors would use.

    A message that cannot be trained on is refused and logged with its sender, and the pump
    goes on; were the pump itself to fail, failed_thread() says so (training would stall).
    """
    profiling.name_this_thread("pump")
    try:
      while True:
        message = self.server.dequeue()
        if message is None or not self._pump_one(message):
          return
    except BaseException as error:  # pylint: disable=broad-except
      self._failure = (threading.current_thread().name, error)
      self._print(f"The trajectory pump failed ({error!r}); the learner receives nothing "
                  f"more from its actor processes.")

  def _pump_one(self, message):
    """One message into the queues; False once the learner's input is closed."""
    header = wire.header_of(message)
    try:
      _, _, _, agent_outputs = tf.nest.pack_sequence_as(self._signature, message[1:])
      reason = wire.message_problem(header, message[1], agent_outputs.action,
                                    len(self._levels), self._num_actions, self._newest_version)
      if reason is None:
        if not self.ledger.admit(header):
          self._print(f"Dropped a repeated trajectory from actor {header.actor_index} "
                      f"(sequence {header.sequence}): a send was retried after it arrived.")
          return True
        self.watch.delivered(self.ledger.task_of(header), time.monotonic())
        _, trajectory = wire.unflatten_message(message, self._signature, self._levels)
        return self._put_trajectory(trajectory, header.actor_index)
    except Exception as error:  # pylint: disable=broad-except
      reason = f"it could not be delivered ({error!r})"
    self._refuse(header, reason)
    return True

  def _refuse(self, header, reason):
    """Counts and logs a refused message with its sender (the first few of each sender, then
    every _REFUSALS_LOGGED_EVERY-th: a broken actor process must not flood the console)."""
    task = self.ledger.task_of(header)
    self.refused[task] += 1
    count = self.refused[task]
    if count <= _REFUSALS_LOGGED or count % _REFUSALS_LOGGED_EVERY == 0:
      self._print(f"Refused a trajectory from actor {header.actor_index} (actor process "
                  f"{task}, sequence {header.sequence}): {reason}; {count} refused from that "
                  f"process so far, none trained on.")

  def failed_thread(self):
    """(thread name, exception) of the pump if it died (the supervisor stops the run), or
    None."""
    return self._failure

  def start(self):
    self._pump.start()

  def failed(self):
    """Actor processes that fail are the cluster's business: training goes on."""
    return None

  def poll(self):
    """Episodes the actor processes reported since the last poll, and the processes that
    joined, fell silent or sent again (SenderWatch), into the monitor."""
    for level_index, episode_return, episode_step in self.server.dequeue_episodes():
      if 0 <= level_index < len(self._levels):
        self._monitor.record_episode(self._levels[level_index], episode_return, episode_step)
    for task, event, seconds in self.watch.changes(time.monotonic()):
      self._monitor.record_actor_process(task, event, seconds, len(self.watch.sending()))

  def publish_version(self, num_updates):
    """Actor processes read it with the parameters; a trajectory naming a later version is
    refused."""
    self._newest_version = int(num_updates)
    self.server.parameter_version.assign(num_updates)

  def close(self):
    """Refuses further trajectories (the pump ends once the queue is empty)."""
    self.server.close()
    if self._closed_at is None:
      self._closed_at = time.monotonic()

  def join(self, timeout):
    if self._pump.ident is not None:  # Started.
      self._pump.join(timeout)

  def delivered(self):
    """Trajectories admitted (plus those still in the server's queue at the stop: arrived,
    never admitted or trained on), by actor process, and repeated messages dropped."""
    return dict(produced=self.ledger.total + self.server.size(),
                by_actor_process=dict(self.ledger.received),
                duplicates=dict(self.ledger.duplicates))

  def refusal_lines(self):
    """Calls refused for their credential (a stranger, a replayed or stale credential), as
    the stop summary's lines; none when nothing was refused."""
    return self.server.refusal_summary_lines()

  def refused_messages(self):
    """Malformed messages refused, by actor process, and calls refused for their credential:
    a wrong or missing secret, a replayed credential, an unknown challenge (distributed.
    Gatekeeper; self.server.refusals() by reason and method, refusal_summary_lines() worded)."""
    return dict(by_actor_process=dict(self.refused),
                unauthenticated_calls=self.server.refused_calls)

  def farewell(self):
    """Actor processes learn that training is over from their next send (the closed queue
    refuses it); the server lives as long as this process, so let them hear it."""
    time.sleep(max(0.0, _ACTOR_NOTICE_SECS - (time.monotonic() - self._closed_at)))
