"""Where the CPU time of a training run goes, from the kernel's per-thread accounting.

Threads of this project name themselves (`name_this_thread`, visible in `top -H` and in
/proc/<pid>/task/<tid>/comm): "actor-<i>", "learner", "batcher", ... A `CpuSampler` reads the
CPU time of every thread of a process and of its descendants (the environment processes) at
two moments; `cpu_by_group` turns the difference into core-seconds per group (thread name
without its number), which is the per-stage profile of benchmarks/speed/throughput.py.

Linux only (/proc); elsewhere names are not set and sampling returns nothing.
"""
import collections
import ctypes
import os
import re
import time

_PR_SET_NAME = 15  # prctl(2).
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def name_this_thread(name):
  """Sets the calling thread's OS name (first 15 bytes; Linux), for profiles and top -H."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
  except (OSError, AttributeError):
    pass


def _read(path):
  try:
    with open(path) as f:
      return f.read()
  except OSError:  # The thread or process ended meanwhile.
    return None


def _cpu_ticks(stat_text):
  # Fields after the parenthesised command: state is field 3; utime, stime are 14, 15.
  fields = stat_text[stat_text.rindex(")") + 2:].split()
  return int(fields[11]) + int(fields[12])


def process_cpu_seconds(pid):
  """User + system CPU seconds of process `pid` and of its children that have ended and been
  waited for (DeepMind Lab compiles maps in child processes): utime, stime, cutime and cstime
  of /proc/<pid>/stat."""
  with open(f"/proc/{pid}/stat") as stat:
    text = stat.read()
  fields = text[text.rindex(")") + 2:].split()
  return sum(int(value) for value in fields[11:15]) / _CLOCK_TICKS


def child_processes(pid):
  """The pids of process `pid`'s live children (every thread's), from /proc."""
  found = []
  for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else ():
    text = _read(f"/proc/{pid}/task/{task}/children")
    if text:
      found.extend(int(c) for c in text.split())
  return found


def thread_cpu_seconds(pid, include_children=True):
  """{(pid, tid, name): CPU seconds so far} of process `pid`'s threads (and descendants')."""
  result = {}
  pending = [pid]
  while pending:
    process = pending.pop()
    if not os.path.isdir(f"/proc/{process}/task"):
      continue
    for task in os.listdir(f"/proc/{process}/task"):
      stat = _read(f"/proc/{process}/task/{task}/stat")
      name = _read(f"/proc/{process}/task/{task}/comm")
      if stat is None or name is None:
        continue
      key = (process, int(task), name.strip() if process == pid else "environment")
      result[key] = _cpu_ticks(stat) / _CLOCK_TICKS
    if include_children:
      pending.extend(child_processes(process))
  return result


def group_of(thread_name):
  """The stage a thread belongs to: its name without a trailing number ("actor-12" -> actor)."""
  return re.sub(r"[-_]?\d+$", "", thread_name) or thread_name


class CpuSampler:
  """Core-seconds per thread group of a process tree between `start()` and `stop()`."""

  def __init__(self, pid):
    self._pid = pid
    self._start = None
    self._started_at = None

  def start(self):
    self._start = thread_cpu_seconds(self._pid)
    self._started_at = time.monotonic()

  def stop(self):
    """(wall seconds, {group: core-seconds}) since start(); threads born meanwhile count."""
    end = thread_cpu_seconds(self._pid)
    wall = time.monotonic() - self._started_at
    groups = collections.Counter()
    for key, seconds in end.items():
      groups[group_of(key[2])] += seconds - self._start.get(key, 0.0)
    return wall, dict(groups)


def format_profile(wall, groups, num_cores, frames):
  """Markdown rows: group, cores busy (core-seconds / wall), share, core-microseconds/frame."""
  total = sum(groups.values())
  rows = ["| stage (threads) | cores busy | share of CPU used | core-us per frame |",
          "|---|---:|---:|---:|"]
  for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
    if seconds <= 0:
      continue
    rows.append(f"| {group} | {seconds / wall:.2f} | {seconds / total:.0%} | "
                f"{1e6 * seconds / max(frames, 1):.1f} |")
  idle = max(0.0, num_cores - total / wall)
  rows.append(f"| idle | {idle:.2f} | | |")
  return rows
