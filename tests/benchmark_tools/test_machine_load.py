"""The throughput benchmark measures, and warns about, other load on the machine
(benchmarks/speed/machine_load.py), and prints none of TensorFlow's start-up notices."""
import os
import subprocess
import sys
import time

import pytest

from benchmarks.speed import machine_load
from scalable_agent_tf2.utils import profiling
from scalable_agent_tf2.utils import quiet_tensorflow
from tests.run.test_before_tensorflow import REPO_DIR

_SPIN = "while True: pass"
# A process that spins in a child of its own (its tree's work) until killed.
_SPIN_IN_A_CHILD = ("import subprocess, sys, time; "
                    f"subprocess.Popen([sys.executable, '-c', {_SPIN!r}]); time.sleep(3600)")

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux's /proc")


def _spinner(code=_SPIN):
  return subprocess.Popen([sys.executable, "-c", code])


def _stop(process):
  for child in profiling.child_processes(process.pid):
    os.kill(child, 9)
  process.kill()
  process.wait()


def test_a_busy_process_outside_the_tree_counts_and_the_trees_own_work_does_not():
  benchmark, other = _spinner(_SPIN_IN_A_CHILD), _spinner()
  try:
    while not profiling.child_processes(benchmark.pid):
      time.sleep(0.05)  # Its child started.
    child = profiling.child_processes(benchmark.pid)[0]
    watch = machine_load.OtherLoad(benchmark.pid)
    started = time.monotonic()
    busy_then = machine_load.machine_busy_seconds()
    other_then = profiling.process_cpu_seconds(other.pid)
    child_then = profiling.process_cpu_seconds(child)
    time.sleep(2.0)
    measured = watch.cores()
    wall = time.monotonic() - started
    busy = (machine_load.machine_busy_seconds() - busy_then) / wall
    other_cores = (profiling.process_cpu_seconds(other.pid) - other_then) / wall
    child_cores = (profiling.process_cpu_seconds(child) - child_then) / wall
  finally:
    _stop(benchmark)
    _stop(other)
  # The other spinner's core is counted, the benchmark's child's is not (the kernel's
  # machine total counts clock ticks, the per-process times differ from it by a few percent,
  # and the two windows by up to a tick per core at each end).
  ticks = 2 * os.cpu_count() / os.sysconf("SC_CLK_TCK") / wall
  assert other_cores > 0, other_cores  # It ran.
  assert measured >= 0.8 * other_cores - ticks, (measured, other_cores)
  assert measured <= busy - 0.8 * child_cores + ticks, (measured, busy, child_cores)


def test_other_load_above_a_tenth_of_the_cores_is_a_warning_line():
  quiet = machine_load.report_lines(0.05, 0.3, 0.1, num_cores=2)
  assert quiet == ["Other load on this machine: 0.05 of 2 cores busy before the measurement "
                   "(1-minute load average 0.30), 0.10 of 2 cores during it."]
  busy = machine_load.report_lines(0.05, 0.3, 0.9, num_cores=2)
  assert busy[0].endswith("0.90 of 2 cores during it.")
  assert len(busy) == 2 and busy[1].startswith("warning: other processes kept 0.90 of 2 cores "
                                               "busy (more than 0.20)")
  assert machine_load.report_lines(1.2, 1.5, None, num_cores=2)[1].startswith(
      "warning: other processes kept 1.20 of 2 cores")
  assert machine_load.report_lines(None, None, None, num_cores=2) == []


def test_the_benchmark_beside_a_busy_process_warns_and_prints_no_tensorflow_notices(tmp_path):
  output = tmp_path / "table.md"
  other = _spinner()
  try:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.speed.throughput", "--levels=atari/pong",
         "--torsos=shallow", "--variants=a", "--num_actors=1", "--envs_per_actor=2",
         "--seconds=12", "--warmup=1", "--cost_seconds=0.5", f"--output={output}"],
        capture_output=True, text=True, cwd=REPO_DIR, timeout=240,
        env={k: v for k, v in os.environ.items()
             if k not in (quiet_tensorflow.SHOW_VARIABLE, "TF_CPP_MIN_LOG_LEVEL")})
  finally:
    _stop(other)
  assert result.returncode == 0, result.stdout + result.stderr
  table = output.read_text()
  assert "\nOther load on this machine: " in table, table
  assert "\nwarning: other processes kept " in table, table
  assert "warning: other processes kept " in result.stderr  # Said at the start, too.
  for notice in quiet_tensorflow.NOISE:
    assert notice not in result.stderr, result.stderr
  assert "pkg_resources is deprecated" not in result.stderr, result.stderr
