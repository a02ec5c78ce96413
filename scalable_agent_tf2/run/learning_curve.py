"""A training run's learning curve, logdir/learning_curve.png, redrawn in a child process.

monitoring.Monitor asks for a drawing at each checkpoint and a final one at the stop; the child
(runfiles/plot.py, the same as `python -m scalable_agent_tf2.runfiles.plot LOGDIR`) reads the run
log and draws it, so the training process never loads matplotlib nor gives its threads' time
to drawing, and a drawing that fails or hangs cannot touch the run.
"""
import os
import subprocess
import sys
import tempfile

from scalable_agent_tf2.runfiles import plot

# How long the stop waits for the final learning curve (a child process; a long run's
# log.jsonl of millions of episodes reads and draws in tens of seconds on a small machine).
FINAL_CURVE_TIMEOUT_SECS = 120.0
# The drawing's priority below the run's (nice): on a machine the run keeps busy it takes
# a few percent of the CPU (about 2 CPU-seconds for a short run's log, so tens of seconds).
CURVE_NICE = 10


class CurveWriter:
  """Redraws a run's learning curve (runfiles/plot.py, `python -m ...plot LOGDIR`) in a child
  process: the training process never loads matplotlib nor gives its threads' time to
  drawing (the child runs at a lower priority), and a drawing that fails or hangs cannot
  touch the run. The child writes under a temporary name and renames (plot._save).

  `request` starts a drawing unless one is running (the next request draws what it missed);
  `finish` (at the stop) replaces a running drawing with a final one and waits for it. A
  failure is printed once; the run goes on. A file that could not be written (the child's
  plot.WRITE_FAILED: a full disk, a read-only logdir) is not printed but kept in
  `write_error`, for the run to stop on as on any of its files.
  """

  def __init__(self, logdir, print_fn, timeout_secs=FINAL_CURVE_TIMEOUT_SECS):
    self._logdir = logdir
    self._print = print_fn
    self._timeout_secs = timeout_secs
    self._child = None
    self._errors = None
    self._failed_once = False
    self.write_error = None  # The child's `error:` line, without "error: ".

  def _command(self, nice):
    return [sys.executable, "-m", "scalable_agent_tf2.runfiles.plot", self._logdir,
            f"--nice={nice}"]

  def _environment(self):
    """The child finds this package even where it is not installed (experiment.py run from
    a checkout, from another folder)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [root] + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else []))
    return environment

  def request(self, nice=None):
    """Starts a drawing now unless one is running; nice: its priority below this process's
    (default CURVE_NICE)."""
    if self.poll():
      return
    try:
      self._errors = tempfile.TemporaryFile()
      # Its own session: a Ctrl-C at the terminal is the run's to handle, not the child's.
      self._child = subprocess.Popen(self._command(CURVE_NICE if nice is None else nice),
                                     stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._errors,
                                     env=self._environment(), start_new_session=True)
    except OSError as error:
      self._child = None
      self._failed(f"could not start its drawing ({error})")

  def poll(self):
    """Whether a drawing is running; reports one that failed."""
    if self._child is None:
      return False
    code = self._child.poll()
    if code is None:
      return True
    self._ended(code)
    return False

  def _ended(self, code):
    self._errors.seek(0)
    errors = self._errors.read().decode(errors="replace").strip().splitlines()
    self._errors.close()
    self._child = self._errors = None
    if code == plot.WRITE_FAILED and errors:
      self.write_error = errors[-1].removeprefix("error: ")
    elif code != 0:
      self._failed(f"its drawing ended with exit code {code}"
                   + (f": {errors[-1]}" if errors else ""))

  def _failed(self, what):
    if not self._failed_once:
      self._failed_once = True
      self._print(f"Learning curve not drawn: {what}. Training goes on; draw it later with "
                  f"python -m scalable_agent_tf2.runfiles.plot {self._logdir}")

  def _stop_child(self):
    """Kills the running drawing (this class's own child) without reporting it."""
    self._child.kill()
    self._child.wait()
    self._errors.close()
    self._child = self._errors = None

  def finish(self):
    """The final drawing (of the whole log), waited for up to timeout_secs. At the run's
    normal priority: the run has stopped, and the stop waits for it."""
    if self.poll():
      self._stop_child()  # Drawing an older log: the final one replaces it.
    self.request(nice=0)
    if self._child is None:
      return
    try:
      self._ended(self._child.wait(self._timeout_secs))
    except subprocess.TimeoutExpired:
      self._stop_child()
      self._failed(f"its final drawing took more than {self._timeout_secs:g} s and was "
                   "stopped")
