"""The package's modules and functions stay small enough to read whole (the developers' guide:
modules under 500 lines, functions at most about 60): measured on the syntax trees, so a
docstring counts as the reader sees it."""
import ast
import os

from scalable_agent_tf2 import rooms

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _sources():
  return [(os.path.relpath(path, os.path.dirname(rooms.PACKAGE_DIR)), path)
          for _, path in rooms.modules()]


def oversized(sources, max_module_lines=MAX_MODULE_LINES,
              max_function_lines=MAX_FUNCTION_LINES):
  """'path: N lines' for each module over the limit and 'path:line name: N lines' for each
  function (or method, nested or not) over it, from its def line to its last line."""
  found = []
  for name, path in sources:
    with open(path, encoding="utf-8") as f:
      text = f.read()
    lines = len(text.splitlines())
    if lines > max_module_lines:
      found.append(f"{name}: {lines} lines (at most {max_module_lines})")
    for node in ast.walk(ast.parse(text, path)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        length = node.end_lineno - node.lineno + 1
        if length > max_function_lines:
          found.append(f"{name}:{node.lineno} {node.name}: {length} lines "
                       f"(at most {max_function_lines})")
  return found


def test_every_module_and_function_of_the_package_is_within_its_limit():
  found = oversized(_sources())
  assert found == [], "\n".join(found)


def test_the_measure_finds_a_long_module_and_a_long_function(tmp_path):
  # The measure itself: a module one line over, a method one line over, nested in a class.
  path = tmp_path / "long.py"
  body = "\n".join(f"  x{n} = {n}" for n in range(MAX_FUNCTION_LINES - 1))
  path.write_text("class C:\n def f():\n" + body + "\n")
  assert oversized([("long.py", str(path))]) == []
  path.write_text("class C:\n def f():\n" + body + "\n  y = 0\n")
  assert oversized([("long.py", str(path))]) == [
      f"long.py:2 f: {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})"]
  path.write_text("\n" * MAX_MODULE_LINES + "x = 1\n")
  assert oversized([("long.py", str(path))]) == [
      f"long.py: {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})"]
