"""The actor threads of a one-machine run, as the training supervisor sees its actors.

Each thread runs its group of environments (assembly.actor_loop_factory) and feeds the learner's
queues in this process: IMPALA's actors, on one machine. An environment call that hangs
(acting/watchdog.py) cannot be interrupted in this process: its thread is left behind and a new
one, with new environments seeded apart, takes its place (`hung`). A cluster's learner sees its
actor processes through the same interface (actor_process.RemoteActors).
"""
import time

from scalable_agent_tf2.acting import actor as actor_lib


class LocalActors:
  """Actor threads in this process (one machine), each with its group of environments
  (assembly.actor_loop_factory); actor 0 takes over build_agent's environment (and closes it
  when its games run in a vector group). The same interface as actor_process.RemoteActors."""

  def __init__(self, threads, first_env_owner, clocks=None, replace=None):
    """threads: the actor threads; clocks: their watchdog.CallClocks (None: not watched);
    replace: callable(index, replacement number) -> a new, unstarted actor thread."""
    self.threads = threads
    self._first_env_owner = first_env_owner
    self._clocks = clocks
    self._replace = replace
    self.abandoned = []  # Threads given up as hung (watchdog.py): they never end, or end late.
    self.hangs = {}  # Level name -> environment calls that hung.

  def start(self):
    for thread in self.threads:
      thread.start()
    self._first_env_owner.pop_all()  # Actor 0 owns it now.

  def failed(self):
    return actor_lib.first_failed(self.threads)

  def failed_thread(self):
    return None  # The actor threads' failures are `failed`'s; there is no other thread.

  def poll(self):
    pass  # Local actors report their episodes to the monitor themselves.

  def publish_version(self, num_updates):
    pass  # Local actors read _Progress.num_updates.

  def close(self):
    pass  # Stopped by the stop event and the policy's closing.

  def join(self, timeout):
    deadline = time.monotonic() + timeout
    for thread in self.threads:
      if thread.ident is not None:  # Started.
        thread.join(max(0.0, deadline - time.monotonic()))

  def delivered(self):
    return dict(produced=sum(a.num_trajectories for a in self.threads + self.abandoned))

  def hung(self, now, limits_of):
    """Replaces each actor whose environment call has run past its limit; returns what was
    seen: (level name, the call, a sentence) per actor. limits_of: callable(level name) ->
    {watchdog.STEP: s, RESET: s}."""
    if self._clocks is None:
      return []
    seen = []
    for index, (thread, clock) in enumerate(zip(self.threads, self._clocks)):
      level = thread.level_name
      overdue = clock.overdue(now, limits_of(level))
      if overdue is None:
        continue
      call, seconds = overdue
      clock.abandon()
      self.abandoned.append(thread)
      self.hangs[level] = self.hangs.get(level, 0) + 1
      self.threads[index], self._clocks[index] = self._replace(index, len(self.abandoned))
      self.threads[index].start()
      seen.append((level, call, f"{thread.name}'s environment has not returned from "
                                f"{call}() for {seconds:.0f} s (--env_{call}_timeout_secs="
                                f"{limits_of(level)[call]:g}); new environments replace it. Its "
                                f"thread is left behind: an environment stepped in this process "
                                f"cannot be interrupted."))
    return seen

  def refusal_lines(self):
    return []  # No service: nothing to refuse.

  def farewell(self):
    pass
