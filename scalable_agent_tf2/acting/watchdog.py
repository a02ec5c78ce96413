"""Every environment call has a watchdog: the clock an actor's in-process environments run on.

An environment in its own process that hangs is killed by its proxy's timeout and replaced
(environments/process.py). Environments stepped in the actor's own thread (in-process groups:
MuJoCo and cheap gymnasium environments; vector groups: Atari's ale-py threads) cannot be
interrupted: Python cannot stop a thread, and a C extension stuck in a call never returns to
Python. Moving them into processes would cost a round trip per step (the reason they run
in-process: docs/PERFORMANCE.md). So their calls are timed instead: each actor's environments
report to its `CallClock` when a call starts and ends, the supervisor (supervisor.Run.watch)
finds a call overdue, reports it, gives the actor's thread up (`abandon`) and starts a new
actor with new environments; the run goes on. The abandoned thread holds its environment for as
long as the call hangs; if the call ever returns, its thread ends there (`Abandoned`) without
delivering anything more.

No TensorFlow here (docs/ARCHITECTURE.md, "Rooms").
"""
import contextlib
import threading
import time

# The calls timed, as the supervisor's limits name them.
STEP, RESET = "step", "reset"


class Abandoned(Exception):
  """Raised in an actor thread whose environment call returned after the supervisor gave the
  actor up as hung: the thread ends without delivering its unroll."""


class CallClock:
  """When the environment call in progress on one actor's thread started, and which it is."""

  def __init__(self, clock=time.monotonic):
    self._clock = clock
    self._lock = threading.Lock()
    self._started = None
    self._call = None
    self.abandoned = False

  @contextlib.contextmanager
  def timing(self, call):
    """Times one call (STEP or RESET) of the environments on this clock."""
    with self._lock:
      self._started, self._call = self._clock(), call
    try:
      yield
    finally:
      with self._lock:
        self._started = self._call = None
      if self.abandoned:
        raise Abandoned(f"the environment's {call}() returned after the actor was replaced")

  def overdue(self, now, limits):
    """(call, seconds running) when the call in progress has run longer than limits[call]
    (seconds, by STEP and RESET), else None."""
    with self._lock:
      started, call = self._started, self._call
    if started is None or now - started <= limits[call]:
      return None
    return call, now - started

  def abandon(self):
    """The supervisor gave this actor up: its thread ends when the call returns."""
    self.abandoned = True


class _Timed:
  """An environment or a group, its initial() and step() timed on a CallClock; every other
  attribute is the wrapped object's."""

  def __init__(self, wrapped, clock):
    self._wrapped = wrapped
    self._clock = clock

  def initial(self):
    with self._clock.timing(RESET):
      return self._wrapped.initial()

  def step(self, action):
    with self._clock.timing(STEP):
      return self._wrapped.step(action)

  def __getattr__(self, name):
    return getattr(self._wrapped, name)


def timed(env_or_group, clock):
  """What an actor's group factory returns (a group, a list of environments or one
  environment), its calls timed on `clock`; a list stays a list (actor.as_group groups it)."""
  if isinstance(env_or_group, list):
    return [_Timed(env, clock) for env in env_or_group]
  return _Timed(env_or_group, clock)
