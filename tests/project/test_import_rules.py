"""The rooms' import rules (scalable_agent_tf2/rooms.py) hold, and ARCHITECTURE shows them."""
import os
import subprocess
import sys

import pytest

from scalable_agent_tf2 import rooms

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_import_follows_the_rules():
  assert rooms.violations() == []


def test_every_room_is_a_subpackage_with_a_docstring_saying_what_it_may_import():
  for name in rooms.RULES:
    if name == "structures":
      continue
    init = os.path.join(rooms.PACKAGE_DIR, name, "__init__.py")
    with open(init, encoding="utf-8") as f:
      text = f.read()
    assert text.startswith('"""') and "May import" in text, init
  subpackages = {d for d in os.listdir(rooms.PACKAGE_DIR)
                 if os.path.isfile(os.path.join(rooms.PACKAGE_DIR, d, "__init__.py"))}
  assert subpackages == set(rooms.RULES) - {"structures"}


def _package(tmp_path, files):
  """A throwaway package laid out as scalable_agent_tf2 (its name too) with `files`."""
  root = tmp_path / "scalable_agent_tf2"
  for path, text in {"__init__.py": "", "structures.py": "", **files}.items():
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
  return str(root)


@pytest.mark.parametrize("files, expected", [
    # An upward import: the settings importing a learner.
    ({"configuration/__init__.py": "", "learning/__init__.py": "",
      "configuration/settings.py": "from scalable_agent_tf2.learning import learner\n"},
     "room 'configuration' may import structures, utils, environments, not 'learning'"),
    # The same, lazily: lazy imports count too.
    ({"configuration/__init__.py": "", "learning/__init__.py": "",
      "configuration/settings.py": "def f():\n  import scalable_agent_tf2.learning.learner\n"},
     "not 'learning'"),
    # A TensorFlow-free room loading TensorFlow at module level.
    ({"runfiles/__init__.py": "", "runfiles/runlog.py": "import tensorflow as tf\n"},
     "at module level: room 'runfiles' is TensorFlow-free"),
    # A room with no rule.
    ({"misc/__init__.py": "", "misc/helpers.py": "import os\n"},
     "room 'misc' has no rule"),
    # A family's network import outside a function.
    ({"environments/__init__.py": "", "agent/__init__.py": "",
      "environments/family.py": "from scalable_agent_tf2.agent import networks\n"},
     "room 'environments' may import structures, utils, configuration; lazily also agent, "
     "not 'agent'"),
])
def test_a_broken_rule_is_named(tmp_path, files, expected):
  found = rooms.violations(package_dir=_package(tmp_path, files))
  assert len(found) >= 1 and any(expected in message for message in found), found


def test_what_the_rules_allow_is_not_reported(tmp_path):
  files = {"environments/__init__.py": "", "agent/__init__.py": "",
           "configuration/__init__.py": "",
           "environments/family.py": ("from scalable_agent_tf2.configuration import settings\n"
                                      "def network():\n"
                                      "  from scalable_agent_tf2.agent import networks\n"
                                      "  import tensorflow\n")}
  assert rooms.violations(package_dir=_package(tmp_path, files)) == []


def test_tensorflow_free_rooms_load_no_tensorflow():
  free = [m for m, _ in rooms.modules()
          if rooms.RULES[rooms.room_of(m)].tensorflow_free and not m.endswith("__main__")]
  script = ("import importlib, sys\n"
            f"for m in {free!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('tensorflow', 'dynamic_batching') if m in sys.modules))")
  child = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, check=True)
  assert child.stdout.strip() == "[]", child.stdout
  assert len(free) > 40


def test_architectures_table_is_the_scripts():
  with open(os.path.join(REPO, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
    document = f.read()
  printed = subprocess.run([sys.executable, "-m", "scalable_agent_tf2.rooms"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.strip()
  assert printed == rooms.room_table()
  assert printed in document, ("docs/ARCHITECTURE.md's import table differs from "
                               "`python -m scalable_agent_tf2.rooms`: paste its output.")


def test_the_package_has_no_import_cycle():
  # docs/ARCHITECTURE.md "Rooms": the arrows point one way, lazy imports and packages'
  # __init__ included; a cycle is named with each of its modules' imports inside it.
  assert rooms.cycle_messages() == []


def test_the_benchmarks_have_no_import_cycle():
  # Benchmarks import the package, and each other only one way.
  assert rooms.cycle_messages(os.path.join(REPO, "benchmarks"), "benchmarks") == []


def test_only_the_benchmark_tools_tests_import_benchmarks():
  """Tests test the package; tests/benchmark_tools tests the benchmarks' own code."""
  tests_dir = os.path.join(REPO, "tests")
  found = [f"{i.module} line {i.line} imports {i.target}"
           for module, path in rooms.modules(tests_dir, "tests")
           if not module.startswith("tests.benchmark_tools")
           for i in rooms.imports_of(module, path) if i.target.split(".")[0] == "benchmarks"]
  assert found == []


@pytest.mark.parametrize("files, cycle", [
    # Two modules importing each other, one of them lazily.
    ({"environments/__init__.py": "", "environments/a.py": "from scalable_agent_tf2."
      "environments import b\n", "environments/b.py": "def f():\n  from scalable_agent_tf2."
      "environments import a\n"},
     ["scalable_agent_tf2.environments.a", "scalable_agent_tf2.environments.b"]),
    # A package's __init__ importing a module that imports the package's submodule back:
    # importing environments.families.base runs environments/__init__.py.
    ({"configuration/__init__.py": "", "environments/__init__.py": "from scalable_agent_tf2."
      "configuration import suites\n", "environments/families.py": "",
      "configuration/suites.py": "import scalable_agent_tf2.environments.families\n"},
     ["scalable_agent_tf2.configuration.suites", "scalable_agent_tf2.environments"]),
    # Relative imports count too.
    ({"utils/__init__.py": "", "utils/a.py": "from . import b\n",
      "utils/b.py": "from .a import f\n"},
     ["scalable_agent_tf2.utils.a", "scalable_agent_tf2.utils.b"]),
])
def test_an_import_cycle_is_found_and_named(tmp_path, files, cycle):
  package_dir = _package(tmp_path, files)
  assert rooms.cycles(rooms.import_graph(package_dir)) == [cycle]
  message, = rooms.cycle_messages(package_dir)
  assert all(module in message for module in cycle), message


def test_a_module_importing_its_own_package_is_no_cycle(tmp_path):
  # Python runs a module's own packages before it: "from p import q" inside p.r is no edge
  # to p/__init__.py.
  files = {"environments/__init__.py": "from scalable_agent_tf2.environments import a\n",
           "environments/a.py": "from scalable_agent_tf2 import environments\n"}
  assert rooms.cycles(rooms.import_graph(_package(tmp_path, files))) == []
