"""Other load on the machine while a benchmark measures it: the cores that processes outside
the benchmark's own process tree kept busy, before and during the measurement.

A rate measured beside another busy process is lower than the machine's idle one, and
README's figures to compare with are idle ones. The kernel's machine-wide busy time
(/proc/stat) less the CPU time of the benchmark's process and its descendants (its training
subprocess and environment processes; profiling.process_cpu_seconds, which counts the
children already waited for) is what everything else used:

    watch = machine_load.OtherLoad()       # This process's tree.
    ...                                     # The measurement.
    cores = watch.cores()                   # Other processes' busy cores meanwhile.

Linux only (/proc); elsewhere nothing is measured (None) and nothing is said.
"""
import os
import time

from scalable_agent_tf2.utils import profiling

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Busy cores of other processes above this share of the machine's cores make a measurement
# worth repeating on an idle machine: on 2 cores, 0.2 of a core, ten times what this machine's
# own background (the kernel, an idle shell) uses, and the (b) figure's run-to-run spread
# (about 10%, benchmarks/RESULTS.md "Quick mode, for regressions") at the cost of a core's share.
WARN_SHARE_OF_CORES = 0.1
# How long the load is sampled before the measurement starts.
BEFORE_SECONDS = 2.0


def machine_busy_seconds():
  """CPU seconds all cores have spent busy since boot (/proc/stat's first line: every state
  but idle and iowait; guest time is inside user time already), or None without /proc."""
  try:
    with open("/proc/stat") as stat:
      fields = stat.readline().split()
  except OSError:
    return None
  user, nice, system, _, _, irq, softirq, steal = (int(v) for v in fields[1:9])
  return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


def tree_cpu_seconds(pid):
  """CPU seconds of process `pid` and of every live descendant (each with its own children
  already waited for), or None when `pid` is gone."""
  total, pending = 0.0, [pid]
  while pending:
    process = pending.pop()
    try:
      seconds = profiling.process_cpu_seconds(process)
      children = profiling.child_processes(process)
    except (OSError, ValueError, IndexError):
      if process == pid:
        return None
      continue  # A descendant that ended meanwhile: its parent counts it once waited for.
    total += seconds
    pending.extend(children)
  return total


class OtherLoad:
  """Busy cores of the processes outside `pid`'s tree since this was made (or `restart`)."""

  def __init__(self, pid=None):
    self._pid = os.getpid() if pid is None else pid
    self.restart()

  def restart(self):
    self._start = (time.monotonic(), machine_busy_seconds(), tree_cpu_seconds(self._pid))

  def cores(self):
    """Other processes' busy cores on average since the start (>= 0), or None unmeasured."""
    now, busy, own = time.monotonic(), machine_busy_seconds(), tree_cpu_seconds(self._pid)
    started, busy_then, own_then = self._start
    if None in (busy, own, busy_then, own_then) or now <= started:
      return None
    return max(0.0, ((busy - busy_then) - (own - own_then)) / (now - started))


def before(seconds=BEFORE_SECONDS):
  """(other processes' busy cores over the next `seconds`, the 1-minute load average) before a
  measurement starts; either None where it cannot be read."""
  watch = OtherLoad()
  time.sleep(seconds)
  try:
    load_average = os.getloadavg()[0]
  except OSError:
    load_average = None
  return watch.cores(), load_average


def report_lines(before_cores, load_average, during_cores, num_cores):
  """The benchmark's lines on other load: what was measured, then a warning line where other
  processes used more than WARN_SHARE_OF_CORES of the cores before or during the measurement.
  Nothing where nothing could be measured."""
  if before_cores is None and during_cores is None:
    return []
  def cores(value):
    return "unmeasured" if value is None else f"{value:.2f} of {num_cores} cores"
  average = "" if load_average is None else f" (1-minute load average {load_average:.2f})"
  lines = [f"Other load on this machine: {cores(before_cores)} busy before the measurement"
           f"{average}, {cores(during_cores)} during it."]
  limit = WARN_SHARE_OF_CORES * num_cores
  worst = max(value for value in (before_cores, during_cores) if value is not None)
  if worst > limit:
    lines.append(
        f"warning: other processes kept {worst:.2f} of {num_cores} cores busy (more than "
        f"{limit:.2f}): these rates are lower than this machine's idle ones, and the figures "
        "they are compared with (README, benchmarks/RESULTS.md) were measured with nothing "
        "else running. Stop the other work (top shows it) and run again.")
  return lines
