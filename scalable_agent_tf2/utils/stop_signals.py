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
  records the request, announces it and calls `wake`), `restore` at the end. Only the first
  signal raises: later ones let the stop it began go on, and the third quits at once.
  """

  ANNOUNCEMENT = "stopping: saving a checkpoint ..."

  def __init__(self, print_fn=print):
    self._print = print_fn
    self._active = threading.current_thread() is threading.main_thread()
    self._previous = {}
    self._wake = None
    self.signal_name = None  # The first stop signal received, e.g. "SIGINT".
    self.count = 0
    self._held = None  # While a StopsDeferred holds the signals: those that came.

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
    if self._held is not None:
      self._held.append(signum)
      return
    name = signal.Signals(signum).name
    self.count += 1
    if self._wake is None and self.signal_name is None:  # Still building: nothing to save.
      self.signal_name = name
      raise Stopping(name)
    if self.signal_name is None:
      self.signal_name = name
      _say(self._print, self.ANNOUNCEMENT)
      self._wake()
    else:
      self._repeated(name)

  def _repeated(self, name):
    """A signal after the first: the stop goes on as it was (under GNU timeout, which sends
    its signal to the process and to its group, every stop gets two); the third quits.

    Before the run's threads started the first raised Stopping, and the code stopping since
    (closing environments, an actor process's report) must not be cut short by another."""
    saving = self._wake is not None
    if self.count >= QUIT_AFTER_SIGNALS:
      _say(self._print, f"{name} {self.count} times: quitting now"
           + (", without the final checkpoint (the last periodic one stays)." if saving
              else "."))
      os._exit(QUIT_EXIT_CODE)  # pylint: disable=protected-access
    left = QUIT_AFTER_SIGNALS - self.count
    _say(self._print, f"still stopping: saving a checkpoint ... ({name} {left} more time(s) "
         f"quits without it)" if saving else
         f"still stopping ... ({name} {left} more time(s) quits at once)")


class StopsDeferred:
  """A context in which SIGINT and SIGTERM wait for its end: files written together (test
  mode's results) are all written or none. At the end the first signal that came is handled
  as it would have been, unless the block raised (its error ends the command anyway).

  With the command's StopRequest (`stop_request`), its handler holds them (it stays the only
  handler); without one, handlers that hold them are set for the block (on the main thread;
  elsewhere nothing changes) and the signal then goes to the handler from before
  (signal.raise_signal). `deferred`: that signal's name, or None.
  """

  def __init__(self, stop_request=None):
    self._request = stop_request
    self._active = threading.current_thread() is threading.main_thread()
    self._previous = {}
    self._came = []

  def __enter__(self):
    if self._request is not None:
      self._request._held = self._came  # pylint: disable=protected-access
    elif self._active:
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
    if self._request is not None:
      self._request._held = None  # pylint: disable=protected-access
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
    self._previous = {}
    if self._came and exc_type is None:
      if self._request is not None:
        self._request._handle(self._came[0], None)  # pylint: disable=protected-access
      else:
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
