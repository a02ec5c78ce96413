"""A stop signal sent twice (GNU `timeout` sends its signal to the process and to its group)
stops a command once: the stop the first began goes on and reports as it would have."""
import os
import signal
import time

import pytest

from scalable_agent_tf2.utils import stop_signals


def _signal_self(signum):
  os.kill(os.getpid(), signum)
  time.sleep(0.2)  # The handler runs between bytecodes of the main thread.


def test_a_second_signal_while_stopping_does_not_raise_again():
  """Before the run's threads start the first signal raises Stopping; the second raised it
  again in the code stopping since (an actor process's joins: its report was lost)."""
  lines = []
  request = stop_signals.StopRequest(lines.append).install()
  stopped_cleanly = False
  try:
    try:
      _signal_self(signal.SIGTERM)
    except stop_signals.Stopping as interrupt:
      assert str(interrupt) == "SIGTERM"
      _signal_self(signal.SIGTERM)  # The stop's own work, interrupted by the second.
      stopped_cleanly = True
  finally:
    request.restore()
  assert stopped_cleanly
  assert lines == ["still stopping ... (SIGTERM 1 more time(s) quits at once)"], lines
  assert request.signal_name == "SIGTERM" and request.count == 2


@pytest.mark.parametrize("held_by", ["the command's request", "a handler of its own"])
def test_signals_while_results_are_written_wait_for_the_end_of_the_write(held_by):
  lines = []
  request = stop_signals.StopRequest(lines.append).install()
  handler = signal.getsignal(signal.SIGTERM)
  written = []
  try:
    with pytest.raises(stop_signals.Stopping, match="SIGINT"):
      with stop_signals.StopsDeferred(
          request if held_by == "the command's request" else None) as deferred:
        _signal_self(signal.SIGINT)
        written.append("results.json")
        _signal_self(signal.SIGTERM)
        written.append("results.csv")
        assert deferred.deferred == "SIGINT"
    assert signal.getsignal(signal.SIGTERM) == handler
  finally:
    request.restore()
  assert written == ["results.json", "results.csv"]
  assert request.signal_name == "SIGINT"  # The first, handed on once the write ended.
