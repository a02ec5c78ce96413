"""Levels that cannot run are found before any environment starts (config.resolve)."""
import importlib.util
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import dmlab as dmlab_family
from tests.run.test_before_tensorflow import REPO_DIR

_BRADY = ("psychlab_arbitrary_visuomotor_mapping", "psychlab_continuous_recognition")


def _config(*flags):
  return config_lib.config_from_argv(list(flags))


def _check_can_run(*flags):
  config_lib.check_levels_can_run(_config(*flags))


def _deepmind_lab_installed_or_not(monkeypatch):
  """The checks below are of the dataset and the memory, DeepMind Lab's module installed or
  not (without it, its own message comes first: test_dmlab_without_deepmind_lab_*)."""
  from scalable_agent_tf2.environments import dmlab  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(dmlab, "check_deepmind_lab_available", lambda: None)


def test_the_dataset_levels_need_the_dataset_and_the_message_says_how_to_go_on(monkeypatch):
  _deepmind_lab_installed_or_not(monkeypatch)
  with pytest.raises(ValueError) as raised:
    _check_can_run("--level_name=dmlab30")
  message = str(raised.value)
  assert all(level in message for level in _BRADY)
  assert "--dataset_path" in message and f"--excluded_levels={','.join(_BRADY)}" in message
  with pytest.raises(ValueError, match="--dataset_path"):
    _check_can_run("--level_name=psychlab_continuous_recognition")


def test_the_dataset_or_leaving_its_levels_out_lets_the_suite_run(monkeypatch):
  _deepmind_lab_installed_or_not(monkeypatch)
  _check_can_run("--level_name=dmlab30", "--dataset_path=/data/brady", "--num_actors=30")
  _check_can_run("--level_name=dmlab30", f"--excluded_levels={','.join(_BRADY)}",
                 "--num_actors=30")


def test_dmlab_actors_that_do_not_fit_in_memory_are_refused_with_a_count_that_fits(
    monkeypatch):
  # 150 environments x 0.2 GB + 2.5 GB for training = 32.5 GB.
  with pytest.raises(ValueError) as raised:
    dmlab_family.check_dmlab_memory(150, memory_gb=24.0)
  message = str(raised.value)
  assert "--num_actors=150" in message and "about 32 GB" in message and "has 24 GB" in message
  assert "--num_actors=107 or fewer" in message  # (24 - 2.5) / 0.2 = 107.5.
  dmlab_family.check_dmlab_memory(107, memory_gb=24.0)
  dmlab_family.check_dmlab_memory(150, memory_gb=64.0)
  # The run's check uses the machine's memory, after the dataset check, before any work.
  _deepmind_lab_installed_or_not(monkeypatch)
  monkeypatch.setattr(config_lib, "machine_memory_gb", lambda: 24.0)
  with pytest.raises(ValueError, match="--num_actors=107 or fewer"):
    _check_can_run("--level_name=dmlab30", f"--excluded_levels={','.join(_BRADY)}")
  _check_can_run("--level_name=atari/pong", "--num_actors=150")  # Not a DMLab run.


def test_experiment_py_stops_before_tensorflow_with_the_dataset_message(tmp_path):
  result = subprocess.run([sys.executable, "experiment.py", "--level_name=dmlab30",
                           f"--logdir={tmp_path}"], capture_output=True, text=True)
  assert result.returncode == 2
  # Without DeepMind Lab's module its own blocker is named first, the dataset after it.
  first = ("error: psychlab_arbitrary_visuomotor_mapping"
           if importlib.util.find_spec("deepmind_lab") is not None
           else "error: DeepMind Lab levels need the `deepmind_lab` Python module")
  assert result.stderr.startswith(first), result.stderr
  assert "psychlab_arbitrary_visuomotor_mapping" in result.stderr and "--dataset_path" in (
      result.stderr)


def test_excluded_levels_leave_the_suite_and_are_checked():
  config = _config("--level_name=dmlab30", f"--excluded_levels={','.join(_BRADY)}")
  assert len(config.levels) == 28 and not set(_BRADY) & set(config.levels)
  with pytest.raises(ValueError, match="foo not in dmlab30"):
    _config("--level_name=dmlab30", "--excluded_levels=foo")
  with pytest.raises(ValueError, match="is one level"):
    _config("--level_name=atari/pong", "--excluded_levels=atari/pong")
  with pytest.raises(ValueError, match="leaves none"):
    _config("--level_name=atari57", "--excluded_levels=" + ",".join(suites.ATARI57_LEVELS))


def test_held_out_test_levels_are_refused_for_training_and_named_for_testing():
  with pytest.raises(ValueError, match="held-out test level: train on "
                     "rooms_collect_good_objects_train"):
    _config("--level_name=rooms_collect_good_objects_test")
  # A level that is its own test level trains.
  assert _config("--level_name=rooms_watermaze").levels == ("rooms_watermaze",)


def test_suite_scores_over_the_levels_present():
  full = {level: 50.0 for level in suites.DMLAB30_TEST_LEVELS}
  partial = {k: v for k, v in full.items() if k not in _BRADY}
  with pytest.raises(ValueError, match="Scores missing for 2 levels"):
    suites.suite_scores(partial, "dmlab30")
  scores = suites.suite_scores(partial, "dmlab30", allow_missing=True)
  assert scores.num_levels == 28
  expected = suites.normalized_scores(full, "dmlab30")
  keep = [i for i, k in enumerate(suites.DMLAB30_TEST_LEVELS) if k not in _BRADY]
  np.testing.assert_allclose(scores.mean, 100 * np.mean(expected[keep]))


def test_dmlab_levels_without_deepmind_lab_point_to_build_md(monkeypatch):
  from scalable_agent_tf2.environments import dmlab  # pylint: disable=g-import-not-at-top
  real_find_spec = dmlab.importlib.util.find_spec
  monkeypatch.setattr(dmlab.importlib.util, "find_spec",
                      lambda name, *a: None if name == "deepmind_lab" else real_find_spec(name, *a))
  with pytest.raises(ModuleNotFoundError, match="BUILD.md"):
    _check_can_run("--level_name=seekavoid_arena_01")
  _check_can_run("--level_name=atari/pong")  # Other levels do not need it.


def test_actors_of_any_level_that_do_not_fit_in_memory_are_refused_before_anything_starts(
    monkeypatch):
  monkeypatch.setattr(config_lib, "machine_memory_gb", lambda: 24.0)
  # One environment process per actor: 0.1 GB each + 2.5 GB; (24 - 2.5) / 0.1 = 215.
  with pytest.raises(ValueError) as raised:
    _check_can_run("--level_name=toy/lit_side", "--num_actors=100000")
  message = str(raised.value)
  assert "100,000 environment processes" in message and "--num_actors=215 or fewer" in message
  _check_can_run("--level_name=toy/lit_side", "--num_actors=215")
  # Atari games stepped in the training process: 0.002 GB each; 10,750 games / 24 per actor.
  with pytest.raises(ValueError, match="--num_actors=447 or fewer"):
    _check_can_run("--level_name=atari/pong", "--num_actors=100000", "--envs_per_actor=24")
  _check_can_run("--level_name=atari/pong", "--num_actors=447", "--envs_per_actor=24")
  # experiment.py refuses it before TensorFlow starts (exit 2, one error line).
  result = subprocess.run([sys.executable, "experiment.py", "--level_name=toy/lit_side",
                           "--num_actors=100000", "--logdir=/nonexistent/never/made"],
                          capture_output=True, text=True, timeout=60,
                          cwd=__import__("tests.run.test_training", fromlist=["REPO_DIR"]).REPO_DIR)
  assert result.returncode == 2 and result.stderr.startswith("error: --num_actors=100000")


# experiment.py as on a machine without DeepMind Lab: sys.modules' None entry makes
# importlib.util.find_spec("deepmind_lab") return None and `import deepmind_lab` fail, as
# they do where the module was never built.
_WITHOUT_DEEPMIND_LAB = textwrap.dedent(f"""
    import os, runpy, sys
    sys.modules["deepmind_lab"] = None
    sys.path[0] = {REPO_DIR!r}
    sys.argv = ["experiment.py"] + sys.argv[1:]
    runpy.run_path(os.path.join({REPO_DIR!r}, "experiment.py"), run_name="__main__")
""")


def _experiment_without_deepmind_lab(*flags):
  return subprocess.run([sys.executable, "-c", _WITHOUT_DEEPMIND_LAB, *flags],
                        capture_output=True, text=True, timeout=120, cwd=REPO_DIR)


def test_dmlab30_without_deepmind_lab_names_the_module_first_and_every_other_blocker(tmp_path):
  result = _experiment_without_deepmind_lab("--level_name=dmlab30", f"--logdir={tmp_path}/run")
  assert result.returncode == 2, result.stdout + result.stderr
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
  # The module first (nothing else can be tried without it), with where to get it.
  assert lines[0].startswith("error: DeepMind Lab levels need the `deepmind_lab` Python "
                             "module"), lines[0]
  assert "BUILD.md" in lines[0]
  # And what would stop the run next, in the same answer: no second and third try.
  assert "--dataset_path" in lines[0] and "psychlab_continuous_recognition" in lines[0]
  if config_lib.machine_memory_gb() < 32.5:  # 150 actors x 0.2 GB + 2.5 GB.
    assert "--num_actors=150" in lines[0]
  assert not (tmp_path / "run").exists()


def test_show_settings_without_deepmind_lab_notes_the_module_and_the_dataset():
  result = _experiment_without_deepmind_lab("--level_name=dmlab30", "--show_settings")
  assert result.returncode == 0, result.stdout + result.stderr
  note = [line for line in result.stdout.splitlines() if line.startswith("note:")]
  assert len(note) == 1, result.stdout
  assert "`deepmind_lab`" in note[0] and "BUILD.md" in note[0], note[0]
  assert "--dataset_path" in note[0], note[0]
