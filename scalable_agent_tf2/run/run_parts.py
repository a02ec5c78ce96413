"""A training run's parts, built once before it starts: the monitor, the actors' policy, the
learner's input, the actors (threads in this process, or a cluster's actor processes) and the
dataset the learner thread reads. The supervisor (supervisor.py) runs them; `cleanup` (an
ExitStack) closes them when training.train returns.
"""
import dataclasses
from typing import Any
from typing import Optional

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.run import actor_process
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import console_pace
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run.local_actors import LocalActors
from scalable_agent_tf2.run.run_failures import LogWriteFailed
from scalable_agent_tf2.runfiles import checkpoints

# Attempts (restarts) an actor's environments may make before their seeds would repeat a
# replacement actor's (assembly.actor_loop_factory's attempt_offset).
REPLACEMENT_ATTEMPTS = 1_000


@dataclasses.dataclass(frozen=True)
class ClusterAccess:
  """Who may call this run's services: train's cluster_secret and insecure_open_cluster."""
  secret: Optional[bytes] = None
  insecure_open_cluster: bool = False


@dataclasses.dataclass(frozen=True)
class Shared:
  """What the run's threads share with the supervisor: the stop event, the learner's update
  count (num_updates: callable), the watches' clock (progress_watch.RunningClock), the
  learner's device and the console."""
  stop_event: Any
  num_updates: Any
  clock: Any
  device: str
  print: Any


@dataclasses.dataclass
class Parts:
  """The built parts (see the module docstring)."""
  monitor: Any = None
  policy: Any = None
  input: Any = None
  actors: Any = None
  dataset: Any = None


def build(config, agent, shared, cleanup, environment_constructor, first_env,
          first_env_owner, listen_address, shared_replay, agent_tag,
          access=ClusterAccess(), kept=lambda: ""):
  """The run's Parts. kept: callable() -> what the newest checkpoint holds, in words (a
  monitor that cannot be closed says it)."""
  parts = Parts()
  parts.monitor = monitoring.Monitor(config.logdir, sorted(set(config.levels)),
                                     config.total_environment_frames, print_fn=shared.print,
                                     tasks=checkpoints.popart_tasks(config) or ())
  cleanup.push(lambda *exc_info: _close_monitor(parts.monitor, shared.print, kept, *exc_info))
  parts.monitor.watch_activity(lambda: console_pace.activity_of(
      parts.actors, assembly.environment_group_size(config)))
  parts.policy = assembly.make_policy(config, agent, shared.device)
  cleanup.callback(parts.policy.close)
  parts.input = input_pipeline.LearnerInput(config, shared.stop_event, shared.print)
  signature = assembly.trajectory_signature(agent.config, config.unroll_length, parts.policy)
  if listen_address is None:
    actor_thread = lambda index, first, replacement=0: _actor_thread(
        config, parts, shared, index, environment_constructor, first, replacement)
    threads, clocks = zip(*[actor_thread(i, first_env) for i in range(config.num_actors)])
    parts.actors = LocalActors(list(threads), first_env_owner, list(clocks),
                               replace=lambda index, n: actor_thread(index, None, n))
  else:
    first_env_owner.close()  # A cluster's learner steps no environment: the spec's goes.
    parts.actors = actor_process.RemoteActors(
        config, agent, signature, listen_address, parts.input.put_trajectory,
        parts.monitor, shared.print, secret=access.secret,
        insecure_open_cluster=access.insecure_open_cluster)
    cleanup.callback(parts.actors.close)
  parts.dataset = parts.input.dataset(agent, signature, shared_replay, agent_tag,
                                      shared.device, shared.print, secret=access.secret)
  return parts


def _close_monitor(monitor, print_fn, kept, exc_type, unused_error, unused_traceback):
  """Closes the monitor's files (its final curve drawn); one that cannot be written there
  fails the run, after its `Stopped:` line, unless the run is failing already."""
  try:
    monitor.close()
  except LogWriteFailed as error:
    if exc_type is not None:
      print_fn(f"Also: {error}")
      return False
    raise LogWriteFailed(f"{error}{kept()}") from error
  return False


def _actor_thread(config, parts, shared, index, environment_constructor, first_env,
                  replacement=0):
  """(actor thread `index`, its watchdog.CallClock); replacement n > 0: the n-th actor that
  replaces a hung one (new environments, seeded apart from the ones replaced)."""
  clock = watchdog.CallClock(shared.clock)
  make_loop = assembly.actor_loop_factory(
      config, index, parts.policy, environment_constructor, first_env,
      0 if replacement == 0 else -1, parts.monitor.record_episode,
      parts.monitor.record_restart, call_clock=clock,
      attempt_offset=replacement * REPLACEMENT_ATTEMPTS)
  size = assembly.environment_group_size(config)
  thread = actor_lib.ActorThread(index, make_loop, config.unroll_length,
                                 parts.input.put_trajectory, shared.num_updates,
                                 shared.stop_event, first_stream=index * size,
                                 actor_turn=parts.input.actor_turn(index))
  thread.level_name = config.levels[index % len(config.levels)]
  return thread, clock
