"""experiment.py --show_settings prints, for representative levels and flags, exactly what
tests/data/show_settings/ holds: every resolved value, its source and its citation, so that a
change to how the settings are defined, resolved or cited cannot move what a run uses or how it
is explained without this test naming the lines.

The runs see a machine of 2 cores (os.cpu_count, which the presets lay actors out by); the
last line on a level this machine cannot run ("note: ...") depends on its modules and memory
and is left out. The files were written by the same runs (`show_settings_output(flags)`).
"""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(REPO, "tests", "data", "show_settings")
# experiment.py on a machine of 2 cores.
_TWO_CORES = ("import os, runpy, sys; os.cpu_count = lambda: 2; "
              "sys.argv = ['experiment.py'] + sys.argv[1:]; "
              f"runpy.run_path({os.path.join(REPO, 'experiment.py')!r}, run_name='__main__')")
CASES = {
    "atari_pong": ["--level_name=atari/pong"],
    "dmlab30": ["--level_name=dmlab30"],
    "mujoco_hopper": ["--level_name=mujoco/hopper"],
    "gym_cartpole": ["--level_name=gym:CartPole-v1"],
    "gym_pendulum": ["--level_name=gym:Pendulum-v1"],
    "mujoco_half_cheetah_impact": ["--level_name=mujoco/half_cheetah", "--algorithm=impact"],
    "pong_impact_paper_impact": ["--level_name=atari/pong", "--preset=impact_paper",
                                 "--algorithm=impact"],
    "pong_laser_flags": ["--level_name=atari/pong", "--laser_replay", "--replay_fraction=0.875",
                         "--entropy_cost=0.02", "--job_name=learner"],
    "dmlab30_impact_short": ["--level_name=dmlab30", "--algorithm=impact",
                             "--total_environment_frames=1000"],
}


def show_settings_output(flags):
  """What experiment.py --show_settings prints for `flags` on 2 cores, without the last line
  on what this machine cannot run."""
  result = subprocess.run([sys.executable, "-c", _TWO_CORES, "--show_settings", *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  return "".join(line for line in result.stdout.splitlines(keepends=True)
                 if not line.startswith("note: this machine cannot run it"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_show_settings_prints_what_it_printed(name):
  with open(os.path.join(GOLDEN, f"{name}.txt"), encoding="utf-8") as f:
    expected = f.read()
  printed = show_settings_output(CASES[name])
  assert printed.splitlines() == expected.splitlines()
