"""A user's own package of gymnasium environments, written where a user keeps theirs (a
temporary folder) and laid out as docs/ENVIRONMENTS.md shows it: `my_package/envs.py`, no
`__init__.py` (so my_package is a namespace package), registering its ids when imported.

    def test_something(user_package):
      package = user_package(SOURCE)
      package.level("MyEnv-v0")                 # "gym:my_package_<pid>_<n>.envs:MyEnv-v0"
      package.where("raise RuntimeError", "step")  # "<folder>/.../envs.py:12 in step"

`user_package` (the fixture of the tests that use it, tests/environments/
test_user_environments.py) puts the folder on sys.path, as the directory a command runs in
would be, and forgets the package and its ids afterwards.
"""
import itertools
import os
import sys
import textwrap

_numbers = itertools.count()


class UserPackage:
  """A package written by write_package: its folder and name, its levels, its lines."""

  def __init__(self, folder, name):
    self.folder, self.name = str(folder), name
    self.path = os.path.join(self.folder, name, "envs.py")

  def level(self, env_id):
    """"gym:<name>.envs:<env_id>": the level of one of its registered ids."""
    return f"gym:{self.name}.envs:{env_id}"

  def where(self, text, function):
    """"path:line in function" of the first line of envs.py that contains text."""
    with open(self.path, encoding="utf-8") as f:
      line = next(number for number, source in enumerate(f, 1) if text in source)
    return f"{self.path}:{line} in {function}"


def write_package(folder, source, name=None):
  """Writes folder/<name>/envs.py (source, dedented); returns its UserPackage. name: default
  a new one per call (my_package_<pid>_<n>), so that packages of different tests never meet
  in sys.modules or gymnasium's registry."""
  name = name or f"my_package_{os.getpid()}_{next(_numbers)}"
  os.makedirs(os.path.join(folder, name), exist_ok=True)
  with open(os.path.join(folder, name, "envs.py"), "w", encoding="utf-8") as f:
    f.write(textwrap.dedent(source))
  return UserPackage(folder, name)


def forget(name, registered_before):
  """Drops package `name`'s modules and the gymnasium ids registered since
  registered_before (a set of ids)."""
  import gymnasium  # pylint: disable=g-import-not-at-top
  for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
    del sys.modules[module]
  for env_id in set(gymnasium.registry) - registered_before:
    del gymnasium.registry[env_id]
