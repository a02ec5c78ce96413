"""SIGINT (Ctrl-C) and SIGTERM: how long-running commands stop without losing work.

Training (StopRequest): a signal is a request to stop, recorded by the handler and handled by
the one place that stops the run, the supervisor. The handler never raises inside the code the
main thread happens to run (a batched policy call, a checkpoint write, a log write), so the
final checkpoint is always written. Before the run's threads start there is nothing to save and
building a run can block for long (a DeepMind Lab map compiles in the first environment): there
the handler raises Stopping, and the caller stops with the checkpoint it resumed from unchanged.

The replay service, and actor processes started by a library caller that passes no request
(SigtermRaises): SIGTERM raises Stopping in the main thread; their loops catch
(KeyboardInterrupt, Stopping), write what must be written and return. experiment.py's actor
processes take the command's one StopRequest (run/experiment_main.py).

Signals reach the main thread only: both are inactive when created on another thread (e.g. one
of several agents' runs in one process), which leaves signals to the caller.
"""
import os
import signal
import sys
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A signal this many times quits at once, without the final checkpoint (a stop that hangs).
QUIT_AFTER_SIGNALS = 3
QUIT_EXIT_CODE = 130  # The shell's code for a command ended by SIGINT.


class Stopping(Exception):
  """SIGTERM arrived (raised in the main thread by raise_stopping); str() is the signal."""


def raise_stopping(signum, frame):
  """A signal handler: raises Stopping("SIGTERM") (or the signal's name)."""
  del frame
  raise Stopping(signal.Signals(signum).name)


def interrupt_name(interrupt):
  """What stopped a command, for its console: "SIGTERM" (Stopping) or "SIGINT" (Ctrl-C)."""
  return str(interrupt) if isinstance(interrupt, Stopping) else "SIGINT"


def _say(print_fn, line):
  """print_fn(line) from a signal handler: the handler may interrupt a print in progress
  (a reentrant write raises RuntimeError); then the line goes straight to stderr."""
  try:
    print_fn(line)
    sys.stdout.flush()
  except (RuntimeError, OSError, ValueError):
    try:
      os.write(2, (line + "\n").encode())
    except OSError:
      pass


class StopRequest:
  """While installed, SIGINT and SIGTERM request a stop instead of raising.

  Usage (training.py): install, build the run (a signal raises Stopping here: nothing to save
  yet), `supervise(wake)` when the run's threads are about to start (from then on a signal only
  records the request, announces it and calls `wake`), `restore` at the end.
  """

  ANNOUNCEMENT = "stopping: saving a checkpoint ..."

  def __init__(self, print_fn=print):
    self._print = print_fn
    self._active = threading.current_thread() is threading.main_thread()
    self._previous = {}
    self._wake = None
    self.signal_name = None  # The first stop signal received, e.g. "SIGINT".
    self.count = 0

  def install(self):
    if self._active:
      for signum in STOP_SIGNALS:
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def supervise(self, wake):
    """From now on a signal records the request and calls wake(); if one already came, wake()
    is called at once."""
    self._wake = wake
    self.count = int(self.signal_name is not None)  # Signals counted towards the quit.
    if self.signal_name is not None:
      wake()

  @property
  def requested(self):
    return self.signal_name is not None

  def restore(self):
    """The handlers from before come back."""
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    self.count += 1
    if self._wake is None:  # Still building the run: nothing to save.
      self.signal_name = self.signal_name or name
      raise Stopping(name)
    if self.signal_name is None:
      self.signal_name = name
      _say(self._print, self.ANNOUNCEMENT)
      self._wake()
    elif self.count >= QUIT_AFTER_SIGNALS:
      _say(self._print, f"{name} {self.count} times: quitting now, without the final "
           "checkpoint (the last periodic one stays).")
      os._exit(QUIT_EXIT_CODE)  # pylint: disable=protected-access
    else:
      _say(self._print, f"still stopping: saving a checkpoint ... ({name} "
           f"{QUIT_AFTER_SIGNALS - self.count} more time(s) quits without it)")


class StopsDeferred:
  """A context in which SIGINT and SIGTERM wait for its end (on the main thread; elsewhere it
  changes nothing): files written together (test mode's results) are all written or none.
  At the end the first signal that came goes to the handler from before (signal.raise_signal),
  unless the block raised: its error ends the command anyway. `deferred`: that signal's name,
  or None."""

  def __init__(self):
    self._active = threading.current_thread() is threading.main_thread()
    self._previous = {}
    self._came = []

  def __enter__(self):
    if self._active:
      for signum in STOP_SIGNALS:
        self._previous[signum] = signal.signal(signum, self._record)
    return self

  def _record(self, signum, frame):
    del frame
    self._came.append(signum)

  @property
  def deferred(self):
    return signal.Signals(self._came[0]).name if self._came else None

  def __exit__(self, exc_type, unused_value, unused_traceback):
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
    self._previous = {}
    if self._came and exc_type is None:
      signal.raise_signal(self._came[0])
    return False


def ignore_stop_signals():
  """SIGINT and SIGTERM are ignored from now on in this process (a command that stops anyway
  and is closing what it started; on the main thread only)."""
  if threading.current_thread() is threading.main_thread():
    for signum in STOP_SIGNALS:
      signal.signal(signum, signal.SIG_IGN)


class SigtermRaises:
  """While it is installed, SIGTERM raises Stopping in the main thread."""

  def __init__(self):
    self._active = threading.current_thread() is threading.main_thread()
    self._previous = signal.signal(signal.SIGTERM, raise_stopping) if self._active else None

  def ignore(self):
    """SIGTERM is ignored from now on (e.g. while a final checkpoint is written)."""
    if self._active:
      signal.signal(signal.SIGTERM, signal.SIG_IGN)

  def restore(self):
    """The handler from before comes back."""
    if self._active:
      signal.signal(signal.SIGTERM, self._previous)
