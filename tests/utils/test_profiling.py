"""The per-stage CPU profile: thread names in /proc and core-seconds per group of threads."""
import os
import subprocess
import sys
import threading
import time

from scalable_agent_tf2.utils import profiling


def test_group_of_strips_the_thread_number():
  assert profiling.group_of("actor-12") == "actor"
  assert profiling.group_of("tf_Compute") == "tf_Compute"
  assert profiling.group_of("learner") == "learner"


def test_named_threads_show_in_proc_and_their_cpu_is_grouped():
  stop = threading.Event()

  def spin(name):
    profiling.name_this_thread(name)
    while not stop.is_set():
      sum(range(1000))
  threads = [threading.Thread(target=spin, args=(f"burner-{i}",), daemon=True)
             for i in range(2)]
  sampler = profiling.CpuSampler(os.getpid())
  before = time.monotonic()
  sampler.start()
  try:
    for thread in threads:
      thread.start()
    time.sleep(1.0)
    names = {key[2] for key in profiling.thread_cpu_seconds(os.getpid())}
    wall, groups = sampler.stop()
    outside = time.monotonic() - before
  finally:
    stop.set()
    for thread in threads:
      thread.join()
  assert {"burner-0", "burner-1"} <= names
  # Two spinning threads for a second (one at a time under the GIL; less on a loaded
  # machine, but never none).
  assert groups["burner"] > 0.05
  # The wall time is the sampled interval's, in seconds: within what the test measured around
  # it. The threads' core-seconds cannot exceed it on the 2 cores they could use at most.
  assert 1.0 <= wall <= outside, (wall, outside)
  assert groups["burner"] <= 2 * wall, groups
  rows = profiling.format_profile(wall, groups, num_cores=2, frames=1000)
  assert rows[0].startswith("| stage") and any(row.startswith("| burner |") for row in rows)
  assert rows[-1].startswith("| idle |")


def test_format_profile_rows():
  """Cores busy = core-seconds / wall, share of all core-seconds, core-us per frame, idle."""
  rows = profiling.format_profile(2.0, {"learner": 1.5, "actor": 0.5, "gone": 0.0},
                                  num_cores=2, frames=1000)
  assert rows[2:] == ["| learner | 0.75 | 75% | 1500.0 |",
                      "| actor | 0.25 | 25% | 500.0 |",
                      "| idle | 1.00 | | |"]


def test_process_cpu_seconds_count_a_finished_child():
  before = profiling.process_cpu_seconds(os.getpid())
  # A child that spends about 0.3 s of CPU, waited for: its time joins this process's.
  subprocess.run([sys.executable, "-c",
                  "import time\nend = time.process_time() + 0.3\n"
                  "while time.process_time() < end: pass"], check=True)
  assert profiling.process_cpu_seconds(os.getpid()) - before >= 0.25
