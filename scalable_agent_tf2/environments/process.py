"""An environment hosted in a subprocess, driven over a pipe (the released code's
py_process.PyProcess idea: one child process per environment, calls proxied to it).

Why a subprocess: an environment step holds the GIL for its whole duration (ALE, DeepMind
Lab's renderer), so N actor threads in the learner process would run them one at a time.

Guarantees (tests/environments/test_process.py checks each with real processes):
  * An exception in the child is raised in the caller with the same type, and the child's
    formatted traceback attached as its __cause__ (like concurrent.futures). The child stays
    usable.
  * A child that dies (e.g. SIGKILL, a crash in C code) is detected at once through its
    process sentinel and reported as EnvironmentProcessDied with its exit code, never a hang.
    A child that does not answer within `timeout` seconds is killed and reported as
    EnvironmentProcessTimeout.
  * The child leads a process group of its own; when it is closed or found dead, the whole
    group gets SIGKILL, so no process it started (DeepMind Lab's map compilers) survives it.
    When the parent is SIGKILLed and nobody is left to do that, a reaper in the group does
    (process_child._start_group_reaper).
  * close() asks the child to close its environment, then terminates and joins it. A
    weakref finalizer does the same when the proxy is garbage-collected or the interpreter
    exits (also after KeyboardInterrupt). If the parent dies without cleaning up (SIGKILL),
    the child gets SIGKILL from the kernel (prctl PR_SET_PDEATHSIG on Linux) and, everywhere,
    exits when it reads end-of-file on its pipe.
  * Frames travel through a shared-memory buffer: the child writes each frame into it and the
    parent copies it out once, instead of pickling it through the pipe (see
    benchmarks/RESULTS.md, "Environment throughput", for what that buys). The parent creates
    it and unlinks its name as soon as the child has mapped it, so no stop leaves it behind.

Caveat of PR_SET_PDEATHSIG: the kernel sends the signal when the THREAD that started the child
exits. Create environment processes from a thread that outlives them (the main thread, or the
actor thread that uses the environment).

The child runs in a fresh interpreter ("spawn"): forking a process that runs TensorFlow
threads is unsafe, and the child must not import TensorFlow (docs/ARCHITECTURE.md "Rooms").
"spawn" would also re-import the parent's main script in the child; a script that imports
TensorFlow at its top (a benchmark, a user's own driver) would then load TensorFlow next to
DeepMind Lab, which crashes the engine at its first reset (SIGSEGV). So the child is started
without the parent's main script (`_without_main_script`), unless the environment's
constructor is defined in it.

This module is the parent's side; the child's side is process_child.py, the forwarding of the
child's output and the message when it dies process_output.py.
"""
import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.shared_memory
import os
import signal
import sys
import threading
import types
import weakref

import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import process_child
from scalable_agent_tf2.environments import process_output
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

# Seconds a call may take before the child is declared stuck. Generous: without a level cache a
# DMLab-30 reset compiles a map and can take about 30 s (docs/ARCHITECTURE.md "DeepMind Lab").
DEFAULT_TIMEOUT_SECONDS = 600.0
# Seconds close() waits for the child to close its environment before terminating it.
_CLOSE_GRACE_SECONDS = 5.0

# _receive's default: the per-call timeout given at construction.
_CALL_TIMEOUT = object()


_MAIN_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_main_script():
  """While a spawned child starts, __main__ is an empty module: multiprocessing then gives the
  child no main script to re-import (it reads sys.modules["__main__"] when the process starts)."""
  with _MAIN_SWAP_LOCK:
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
      yield
    finally:
      sys.modules["__main__"] = main


class EnvironmentProcessDied(RuntimeError):
  """The child process exited while the parent was waiting for it."""


class EnvironmentProcessTimeout(TimeoutError):
  """The child did not answer in time; it has been killed."""


class RemoteTraceback(Exception):
  """Carries the child's formatted traceback; set as __cause__ of a re-raised child error."""

  def __init__(self, traceback_text):
    super().__init__(traceback_text)
    self.traceback_text = traceback_text

  def __str__(self):
    return "\n\nTraceback in the environment process:\n" + self.traceback_text


def _kill_process_group(pgid):
  """SIGKILL to every process left in group `pgid` (the child's own; see
  process_child._own_process_group)."""
  if pgid is None or pgid == os.getpgrp():
    return  # Never this process's own group.
  try:
    os.killpg(pgid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass  # The group is empty: nothing survived the child.


def _shut_down(process, conn, shared, output=None, graceful=True):
  """Stops the child and frees the pipe, the shared memory and its output file.

  graceful: first ask the child to close its environment (skipped when it is stuck or busy).
  """
  if graceful and process.is_alive():
    try:
      conn.send(("close", None))
      if conn.poll(_CLOSE_GRACE_SECONDS):
        conn.recv()
    except (OSError, EOFError):
      pass
    process.join(_CLOSE_GRACE_SECONDS)
  if process.is_alive():
    process.terminate()
    process.join(_CLOSE_GRACE_SECONDS)
  if process.is_alive():
    process.kill()
    process.join()
  # The child's own children (map compilers) would otherwise run on as orphans.
  _kill_process_group(process.pid)
  conn.close()
  if output is not None:
    output.close()
  if shared is not None:
    shared.close()
    try:
      shared.unlink()
    except FileNotFoundError:
      pass


class EnvironmentProcess(base.Environment):
  """Proxy to an environment constructed and stepped in a child process.

  Example:
    env = EnvironmentProcess(atari.AtariEnvironment, kwargs=dict(game="pong", seed=1))
    first = env.initial(); following = env.step(0); env.close()
  """

  def __init__(self, constructor, args=(), kwargs=None, shared_memory=True,
               timeout=DEFAULT_TIMEOUT_SECONDS, startup_timeout=DEFAULT_TIMEOUT_SECONDS,
               description=None, reset_timeout=None):
    """Starts the child and builds the environment there.

    Args:
      constructor: picklable callable (a class or module-level function) returning a
        base.Environment; called in the child as constructor(*args, **kwargs).
      args, kwargs: its picklable arguments.
      shared_memory: pass frames through shared memory (True) or pickle them (False).
      timeout: seconds any single call may take; None waits as long as the child lives.
      reset_timeout: seconds initial() (a reset) may take; None: `timeout`. DeepMind Lab
        compiles a map at a reset, which takes far longer than a step.
      startup_timeout: seconds the child may take to start and build the environment (a
        fresh interpreter importing numpy and the emulator takes seconds on a busy machine);
        None waits as long as the child lives.
      description: what the child runs, for its output's prefix and the message if it dies;
        default: the level_name or game keyword argument, else the constructor's name.

    Raises:
      Whatever the constructor raised in the child (child traceback as __cause__).
    """
    self._timeout = timeout
    self._reset_timeout = timeout if reset_timeout is None else reset_timeout
    self._name = getattr(constructor, "__name__", repr(constructor))
    kwargs = dict(kwargs or {})
    self.description = str(description or kwargs.get("level_name") or kwargs.get("game")
                           or self._name)
    self._start_child(constructor, tuple(args), kwargs)
    try:
      self._spec = self._receive(startup_timeout)
      if shared_memory:
        self._attach_frame_buffer()
    except BaseException:
      self._release(graceful=False)
      raise

  def _start_child(self, constructor, args, kwargs):
    """Starts the child in its own process group, its output forwarded, and registers the
    finalizer that shuts it down."""
    context = multiprocessing.get_context("spawn")
    self._conn, child_conn = context.Pipe(duplex=True)
    self._output = process_output.OutputTail(self.description)
    self._process = context.Process(
        target=process_child.child_main, name="env:" + self._name, daemon=True,
        args=(child_conn, constructor, args, kwargs, os.getpid(), self._output.path))
    if getattr(constructor, "__module__", None) == "__main__":
      self._process.start()  # The child needs the script to find the constructor.
    else:
      with _without_main_script():
        self._process.start()
    try:  # Also from this side: the group exists before the child could start a compiler.
      os.setpgid(self._process.pid, self._process.pid)
    except OSError:  # The child did it first, or has exec'd or died already.
      pass
    self._output.start_forwarding()
    child_conn.close()  # Only the child holds it now: its death shows as EOF here.
    self._shared = None
    # Runs close() when the proxy is garbage-collected or at interpreter exit.
    self._finalizer = weakref.finalize(self, _shut_down, self._process, self._conn, None,
                                       self._output)

  def _attach_frame_buffer(self):
    """Creates the shared-memory frame buffer, makes the finalizer free it too, and has the
    child write its frames there."""
    num_bytes = (int(np.prod(self._spec.frame_shape))
                 * np.dtype(base.frame_dtype(self._spec)).itemsize)
    self._shared = multiprocessing.shared_memory.SharedMemory(create=True, size=num_bytes)
    self._finalizer.detach()
    self._finalizer = weakref.finalize(
        self, _shut_down, self._process, self._conn, self._shared, self._output)
    self._call("attach_frame_buffer", self._shared.name)
    # Both processes have mapped it: its name has served, and unlinked now it cannot outlive
    # them however they end (a SIGKILL, a quit without cleanup: the resource tracker would
    # report "leaked shared_memory objects"). The memory lives until both have closed it.
    self._shared.unlink()

  @property
  def spec(self):
    return self._spec

  @property
  def pid(self):
    """The child's process id."""
    return self._process.pid

  def _died_message(self):
    self._process.join(_CLOSE_GRACE_SECONDS)
    self._output.pump(final=True)
    return process_output.describe_death(self.description, self._name, self._process.pid,
                          self._process.exitcode, list(self._output.last_lines))

  def _receive(self, timeout=_CALL_TIMEOUT, command="start"):
    """The child's next reply; raises its exception, or reports its death or silence.

    timeout: seconds, None for no limit, or _CALL_TIMEOUT for the per-call timeout.
    command: what the child was asked, for the message if it does not answer.
    """
    if timeout is _CALL_TIMEOUT:
      timeout = self._timeout
    ready = multiprocessing.connection.wait(
        [self._conn, self._process.sentinel], timeout=timeout)
    if not ready:
      self._release(graceful=False)
      raise EnvironmentProcessTimeout(
          "%s: environment process %r (pid %d) did not answer within %s s (its %s hung); "
          "it was killed." % (self.description, self._name, self._process.pid, timeout,
                              command if command == "start" else command + "()"))
    try:
      # A reply sent just before exiting is still delivered; EOF means none is coming.
      reply = self._conn.recv() if self._conn in ready or self._conn.poll() else None
    except (EOFError, OSError):
      reply = None
    if reply is None:
      message = self._died_message()
      self._release()
      raise EnvironmentProcessDied(message)
    if reply[0] == process_child.ERROR:
      _, exception, traceback_text = reply
      raise exception from RemoteTraceback(traceback_text)
    return reply[1]

  def _call(self, command, payload=None, timeout=_CALL_TIMEOUT):
    if not self._finalizer.alive:
      raise RuntimeError("Environment process %r is closed." % self._name)
    try:
      self._conn.send((command, payload))
    except OSError:  # Broken pipe: the child is gone.
      message = self._died_message()
      self._release()
      raise EnvironmentProcessDied(message) from None
    try:
      return self._receive(timeout, command)
    except KeyboardInterrupt:
      # The reply to this call may still arrive and would answer the next call: stop now.
      self._release(graceful=False)
      raise

  def _unpack(self, packed):
    reward, done, frame, instruction, episode_return, episode_step, truncated = packed
    if frame is None:
      # The single copy: the buffer is reused by the next step. No view outlives this line,
      # so that the segment can always be closed.
      frame = np.ndarray(self._spec.frame_shape, base.frame_dtype(self._spec),
                         buffer=self._shared.buf).copy()
    return EnvOutput(reward=reward, done=done,
                     observation=Observation(frame=frame, instruction=instruction),
                     episode_return=episode_return, episode_step=episode_step,
                     truncated=truncated)

  def initial(self):
    return self._unpack(self._call("initial", timeout=self._reset_timeout))

  def step(self, action):
    # Checked here too, so that a bad action costs no round trip and shows the caller's stack.
    return self._unpack(self._call("step", base.check_action_for_spec(action, self._spec)))

  def render(self):
    """The child environment's render() (base.CannotRender raised here if it cannot)."""
    return self._call("render")

  def render_fps(self):
    return self._call("render_fps")

  def _release(self, graceful=True):
    """Shuts the child down once; later calls raise "closed"."""
    registered = self._finalizer.detach()
    if registered is not None:
      _, function, args, _ = registered
      function(*args, graceful=graceful)

  def close(self):
    self._release()
