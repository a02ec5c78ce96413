"""The project installs with pip (pyproject.toml) and its commands run from any directory.

Each test builds a virtual environment that sees the packages of the environment running the
tests (TensorFlow is not downloaded again) and installs the project into it offline (--no-index
--no-deps --no-build-isolation: that environment's pinned setuptools builds it, the build tool
made explicit by requirements-test.txt), then runs the commands from a directory that holds no
checkout, with no PYTHONPATH, so only the installed copy can answer.

One slow test installs requirements-cpu.txt (README's install without CUDA) into a venv of its
own with pip, as a user does, and trains and tests in it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = ("population", "run.launch", "transport.replay_service", "run.experiment_main")


def _site_directories():
  """The site-packages directories of the environment running the tests, in their order."""
  return [entry for entry in sys.path
          if os.path.basename(entry) in ("site-packages", "dist-packages")]


def _venv(path):
  """A venv that sees this environment's packages, its pip and setuptools included.

  Not `--system-site-packages`: from inside a venv (README's install) that option shows the
  base interpreter's packages, not the venv's; and a venv's own bundled pip and setuptools
  (65.5 on Python 3.11, which cannot build an editable install beside wheel 0.48, issue 40)
  would shadow the pinned ones. So the new venv gets no pip of its own and a .pth file naming
  this environment's site directories.
  """
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                 timeout=300)
  python = str(path / "bin" / "python")
  site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
  with open(os.path.join(site, "outer_environment.pth"), "w") as f:
    f.write("\n".join(_site_directories()) + "\n")
  return python


def _pip_install(python, *arguments):
  run = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps",
                        "--no-build-isolation", "--disable-pip-version-check", *arguments],
                       capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def _elsewhere(tmp_path):
  """A working directory without a checkout, and an environment without PYTHONPATH."""
  directory = tmp_path / "elsewhere"
  directory.mkdir()
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  return str(directory), env


def _run(python, *argv, cwd, env, timeout=300):
  return subprocess.run([python, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout, check=False)


def _module_file(python, module, cwd, env):
  run = _run(python, "-c", f"import {module}; print({module}.__file__)", cwd=cwd, env=env)
  assert run.returncode == 0, run.stderr
  return run.stdout.strip()


def _pins(name):
  with open(os.path.join(REPO, name)) as f:
    return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_requirements_txt_is_the_package_pins_and_the_test_pins():
  with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)
  dynamic = project["tool"]["setuptools"]["dynamic"]
  assert dynamic["dependencies"] == {"file": ["requirements-runtime.txt"]}
  assert dynamic["optional-dependencies"]["test"] == {"file": ["requirements-test.txt"]}
  # requirements.txt (CI's and README's install) is both files, nothing else.
  assert _pins("requirements.txt") == ["-r requirements-runtime.txt",
                                       "-r requirements-test.txt"]
  runtime, tests = _pins("requirements-runtime.txt"), _pins("requirements-test.txt")
  for pin in runtime + tests:  # Plain pins setuptools reads (no -r, no options).
    assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z\-,]+\])?==[0-9][0-9A-Za-z.]*", pin), pin
  names = {pin.split("==")[0].split("[")[0] for pin in runtime}
  assert {"tensorflow", "numpy", "absl-py", "gymnasium"} <= names
  assert not names & {"pytest", "pytest-timeout"}  # Test pins are the `test` extra's.
  assert {pin.split("==")[0] for pin in tests} == {"pytest", "pytest-timeout", "pytest-xdist",
                                                   "execnet", "setuptools", "ruff"}


def _version(text):
  return tuple(int(part) for part in text.split("."))


def test_setuptools_pin_builds_the_editable_install_and_keeps_pkg_resources():
  """The pinned setuptools satisfies pyproject's build requirement (it builds wheels itself)
  and BUILD.md's `setuptools<81` for DeepMind Lab's module (which imports pkg_resources)."""
  pin = next(p for p in _pins("requirements-test.txt") if p.startswith("setuptools=="))
  pinned = _version(pin.split("==")[1])
  with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
    requires = tomllib.load(f)["build-system"]["requires"]
  minimum = re.fullmatch(r"setuptools>=([0-9.]+)", requires[0]).group(1)
  assert pinned >= _version(minimum), (pin, requires)
  with open(os.path.join(REPO, "BUILD.md")) as f:
    below = re.findall(r'"setuptools<([0-9.]+)"', f.read())
  assert below and all(pinned < _version(b) for b in below), (pin, below)


def test_editable_install_runs_the_commands_from_another_directory(tmp_path):
  python = _venv(tmp_path / "venv")
  _pip_install(python, "-e", REPO)
  cwd, env = _elsewhere(tmp_path)
  assert _module_file(python, "scalable_agent_tf2", cwd, env) == os.path.join(
      REPO, "scalable_agent_tf2", "__init__.py")
  for command in ("population", "run.launch"):  # TensorFlow-free: fast.
    run = _run(python, "-m", f"scalable_agent_tf2.{command}", "--help", cwd=cwd, env=env)
    assert run.returncode == 0, run.stderr
    assert f"Flags (python -m scalable_agent_tf2.{command} --flag=value):" in run.stdout
  run = _run(python, "-m", "scalable_agent_tf2.run.experiment_main", "--num_actors=0", cwd=cwd,
             env=env)
  assert (run.returncode, run.stderr.splitlines()[-1]) == (
      2, "error: --num_actors must be a positive integer, got 0.")


def _copy_project(destination):
  """The files `pip install .` reads, so that the in-tree build (build/, *.egg-info) does not
  write into the checkout."""
  os.makedirs(destination)
  for name in ("pyproject.toml", "README.md", "requirements-runtime.txt",
               "requirements-test.txt"):
    shutil.copy(os.path.join(REPO, name), destination)
  for package in ("scalable_agent_tf2", "dynamic_batching"):
    shutil.copytree(os.path.join(REPO, package), os.path.join(destination, package),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_installed_copy_runs_its_commands_its_op_and_a_cluster(tmp_path):
  source = str(tmp_path / "source")
  _copy_project(source)
  python = _venv(tmp_path / "venv")
  _pip_install(python, source)
  cwd, env = _elsewhere(tmp_path)
  site_packages = os.path.dirname(os.path.dirname(
      _module_file(python, "scalable_agent_tf2", cwd, env)))
  assert site_packages.startswith(str(tmp_path / "venv")), site_packages
  # No experiment.py is installed: the launcher runs the package's experiment_main.
  assert not os.path.exists(os.path.join(site_packages, "experiment.py"))
  assert os.path.exists(os.path.join(site_packages, "dynamic_batching", "batcher.cc"))
  for command in COMMANDS:
    run = _run(python, "-m", f"scalable_agent_tf2.{command}", "--help", cwd=cwd, env=env)
    assert run.returncode == 0, (command, run.stderr[-3000:])
    assert "\nFlags (python " in run.stdout and "\n  --" in run.stdout, command

  # The op builds from the installed source into a fresh cache, and batches a call.
  probe = ("import numpy as np, dynamic_batching\n"
           "from dynamic_batching import build\n"
           "print(build.SOURCE)\n"
           "f = dynamic_batching.batch_fn(lambda x: x * 2)\n"
           "print(f(np.ones([1, 3], np.float32)).tolist())\n")
  run = _run(python, "-c", probe, cwd=cwd, timeout=600,
             env=dict(env, DYNAMIC_BATCHING_CACHE_DIR=str(tmp_path / "op_cache")))
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.splitlines() == [
      os.path.join(site_packages, "dynamic_batching", "batcher.cc"), "[[2.0, 2.0, 2.0]]"]
  assert [name for name in os.listdir(tmp_path / "op_cache") if name.endswith(".so")]

  # A cluster (a learner and an actor process) from the installed launcher, to its budget.
  logdir = str(tmp_path / "run")
  run = _run(python, "-m", "scalable_agent_tf2.run.launch", "--num_actor_processes=1", "--",
             "--level_name=toy/lit_side", "--num_actors=2", "--total_environment_frames=2000",
             f"--logdir={logdir}", cwd=cwd, env=env, timeout=600)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  assert "[actor 0] Actor process 0: first trajectory delivered" in run.stdout
  assert "[learner] Stopped: frame budget reached." in run.stdout
  assert os.listdir(os.path.join(logdir, "checkpoints"))


def test_requirements_cpu_txt_is_requirements_txt_without_the_cuda_extra():
  """README's install for a machine without a GPU: the runtime pins line for line, TensorFlow's
  wheel alone in place of tensorflow[and-cuda] at the same version, and the test pins."""
  runtime, cpu = _pins("requirements-runtime.txt"), _pins("requirements-cpu.txt")
  assert runtime[0].startswith("tensorflow[and-cuda]=="), runtime[0]
  assert cpu == [runtime[0].replace("tensorflow[and-cuda]==", "tensorflow==")] + runtime[1:] + [
      "-r requirements-test.txt"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_cpu_requirements_install_a_venv_without_cuda_that_trains_and_tests(tmp_path):
  """`pip install -r requirements-cpu.txt` in a new venv of its own (pip downloads what its
  cache lacks, about 840 MB): no NVIDIA package in it, and a short train and test of the
  one-minute check from the checkout."""
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  python = str(venv / "bin" / "python")
  install = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "-r", "requirements-cpu.txt"], cwd=REPO, capture_output=True,
                           text=True, timeout=3000, check=False)
  assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
  listed = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True,
                          text=True, check=True, timeout=300).stdout
  names = {package["name"].lower(): package["version"] for package in json.loads(listed)}
  assert names.get("tensorflow") == "2.21.0", names
  assert not [name for name in names if name.startswith("nvidia")], names
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  logdir = str(tmp_path / "lit_side")
  outputs = []
  for flags in (["--mode=train", "--total_environment_frames=2000"],
                ["--mode=test", "--test_num_episodes=2"]):
    run = _run(python, "experiment.py", "--level_name=toy/lit_side", f"--logdir={logdir}",
               *flags, cwd=REPO, env=env, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outputs.append(run.stdout)
  assert "Stopped: frame budget reached." in outputs[0], outputs[0][-3000:]
  with open(os.path.join(logdir, "evaluation", "results.json")) as f:
    assert json.load(f)["levels"][0]["episodes"] == 2
