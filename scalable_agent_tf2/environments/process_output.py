"""A child environment process's output (process.py): forwarded to this process's stderr with
a "[description] " prefix, its last lines kept, and the message when the child dies.
"""
import collections
import os
import re
import signal
import sys
import tempfile
import threading
import time

# What an environment's last words mean (DeepMind Lab ends its process with exit(1) when a map
# cannot be found or built, with no Python exception).
_KNOWN_CAUSES = (
    (re.compile(r"Didn't find map '([^']*)'"),
     "DeepMind Lab could not find map '{0}' and ended its process"),
)


def describe_death(description, process_name, pid, exitcode, last_lines):
  """One message for a dead environment process: what it ran, why it ended, its last words.

  Args:
    description: what the process ran (a level name).
    process_name, pid: the process (its environment class's name and process id).
    exitcode: multiprocessing's exitcode (negative: killed by that signal).
    last_lines: the last lines the process printed (strings, oldest first).
  """
  how = _describe_exit(exitcode)
  message = f"{description}: environment process {process_name!r} (pid {pid}) {how}."
  for pattern, cause in _KNOWN_CAUSES:
    match = next(filter(None, (pattern.search(line) for line in reversed(last_lines))), None)
    if match:
      message = (f"{description}: {cause.format(*match.groups())} ({how}; environment "
                 f"process {process_name!r}, pid {pid}).")
      break
  if last_lines:
    message += " Its last output:\n" + "\n".join("  " + line for line in last_lines)
  return message


def _describe_exit(exitcode):
  if exitcode is None:
    return "is unresponsive"
  if exitcode < 0:
    try:
      return "was killed by signal %s" % signal.Signals(-exitcode).name
    except ValueError:
      return "was killed by signal %d" % -exitcode
  return "exited with code %d" % exitcode


# Lines of a child's output kept for the message when it dies.
LAST_LINES = 20
_FORWARD_PERIOD_SECONDS = 0.25


class OutputTail:
  """A child's output file: forwarded to this process's stderr, its last lines kept.

  The child writes into a file, not a pipe, so nothing it printed is lost when it dies
  abruptly (a C exit() or a signal): the parent reads the rest after its death.
  """

  def __init__(self, description):
    self.description = description
    handle, self.path = tempfile.mkstemp(prefix="env_output_", suffix=".txt")
    os.close(handle)
    self._file = open(self.path, "rb")  # pylint: disable=consider-using-with
    self._partial = b""
    self._lock = threading.Lock()
    self.last_lines = collections.deque(maxlen=LAST_LINES)

  def pump(self, final=False):
    """Forwards what the child wrote since the last call (and a last partial line if final)."""
    with self._lock:
      if self._file is None:
        return
      data = self._partial + self._file.read()
      lines = data.split(b"\n")
      self._partial = lines.pop()
      if final and self._partial:
        lines.append(self._partial)
        self._partial = b""
      for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        self.last_lines.append(line)
        try:
          sys.stderr.write(f"[{self.description}] {line}\n")
        except (OSError, ValueError):  # A closed stderr at interpreter exit.
          pass

  def start_forwarding(self):
    """From now on the forwarding thread pumps this output every _FORWARD_PERIOD_SECONDS."""
    _forwarder.add(self)

  def close(self):
    self.pump(final=True)
    with self._lock:
      if self._file is not None:
        self._file.close()
        self._file = None
    _forwarder.remove(self)
    try:
      os.remove(self.path)
    except FileNotFoundError:
      pass


class _Forwarder:
  """One daemon thread forwards every live child's output (a few file reads a period)."""

  def __init__(self):
    self._tails = set()
    self._lock = threading.Lock()
    self._thread = None

  def add(self, tail):
    with self._lock:
      self._tails.add(tail)
      if self._thread is None:
        self._thread = threading.Thread(target=self._run, name="env-output", daemon=True)
        self._thread.start()

  def remove(self, tail):
    with self._lock:
      self._tails.discard(tail)

  def _run(self):
    while True:
      time.sleep(_FORWARD_PERIOD_SECONDS)
      with self._lock:
        tails = list(self._tails)
      for tail in tails:
        tail.pump()


_forwarder = _Forwarder()

