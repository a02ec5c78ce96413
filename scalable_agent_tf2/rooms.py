"""The package's rooms and what each may import: the rules tests/project/test_import_rules.py
enforces.

A room is a subpackage of scalable_agent_tf2 (or structures.py, the records every room
shares). The arrows point from orchestration down to data and math, so a room may import only
the rooms listed for it; `lazy` rooms only inside a function (the TensorFlow side of a
TensorFlow-free room: an environment family chooses its network, but only the TensorFlow side
asks it to). A TensorFlow-free room loads no TensorFlow when its modules are imported, so
environment processes, the population driver and the settings stay light.

    python -m scalable_agent_tf2.rooms          prints docs/ARCHITECTURE.md's import table
    python -m scalable_agent_tf2.rooms --check  lists the imports that break a rule

No TensorFlow here: the rules are read from the modules' syntax trees.
"""
import ast
import dataclasses
import os
import sys

PACKAGE = "scalable_agent_tf2"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Top-level modules that are not rooms of their own but belong to one: policy.py, the public
# API of a trained policy, is the run room's (it rebuilds agents as test mode does).
_TOP_MODULES = {"structures": "structures", "rooms": "structures", "__init__": "structures",
                "policy": "run"}
# Modules outside the package that load TensorFlow (the custom op's package builds on it).
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_probability", "dynamic_batching", "keras")


@dataclasses.dataclass(frozen=True)
class Room:
  holds: str
  may_import: tuple = ()
  lazy: tuple = ()  # Rooms it may import inside functions only.
  tensorflow_free: bool = False


RULES = {
    "structures": Room("the records every room shares: EnvOutput, AgentOutput, Trajectory; "
                       "the package's names load_policy and make_environment (lazily, "
                       "policy.py)", lazy=("run",), tensorflow_free=True),
    "utils": Room("signals, profiling, the quiet TensorFlow import (lazily)",
                  tensorflow_free=True),
    "runfiles": Room("the run's files: run log, checkpoints (TensorFlow lazily), logdir",
                     ("utils",), tensorflow_free=True),
    # The families read the settings' names (configuration/settings.py, which imports no
    # family) and the configuration asks the families for their presets: the two rooms import
    # each other, their modules never in a cycle (tests/project/test_import_rules.py).
    "configuration": Room("the settings tables, a run's resolved config and the learner's, "
                          "the command lines (flags, --help, --show_settings)",
                          ("structures", "utils", "environments"), tensorflow_free=True),
    "environments": Room("environment families (the seam: levels, presets, environments, "
                         "their specs), the level registry, the papers' suites, how "
                         "environments run", ("structures", "utils", "configuration"),
                         lazy=("agent",), tensorflow_free=True),
    "population": Room("population-based training's driver and decisions",
                       ("structures", "utils", "configuration", "environments", "runfiles"),
                       tensorflow_free=True),
    "agent": Room("networks from the environment's spec; action distributions",
                  ("structures", "utils", "configuration", "environments")),
    "learning": Room("V-trace, losses, optimizer, learners, IMPACT, LASER, replay structures",
                     ("structures", "utils", "configuration", "environments", "agent")),
    "acting": Room("actor threads, the batched policy, what actors sample",
                   ("structures", "utils", "configuration", "environments", "agent")),
    "transport": Room("wire format, RPC, the replay service, the observation filter's sync",
                      ("structures", "utils", "configuration", "environments", "agent",
                       "learning")),
    "run": Room("assembly, training and test supervisors, checkpoints, launcher",
                ("structures", "utils", "runfiles", "configuration", "environments", "agent",
                 "learning", "acting", "transport")),
}


@dataclasses.dataclass(frozen=True)
class Import:
  module: str        # The importing module, e.g. "scalable_agent_tf2.learning.vtrace".
  target: str        # What it imports, e.g. "scalable_agent_tf2.agent.distributions".
  line: int
  lazy: bool         # Inside a function or class body rather than at module level.


def room_of(module, package=PACKAGE):
  """"scalable_agent_tf2.learning.vtrace" -> "learning"; top-level modules -> their room."""
  parts = module.split(".")
  if parts[0] != package:
    return None
  if len(parts) == 1:
    return "structures"
  return _TOP_MODULES.get(parts[1], parts[1])


def modules(package_dir=PACKAGE_DIR, package=PACKAGE):
  """(module name, path) of every module of the package."""
  found = []
  for directory, subdirectories, files in os.walk(package_dir):
    subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
    relative = os.path.relpath(directory, package_dir)
    prefix = package if relative == "." else package + "." + relative.replace(os.sep, ".")
    for name in sorted(files):
      if name.endswith(".py"):
        module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
        found.append((module, os.path.join(directory, name)))
  return found


def imports_of(module, path):
  """Every import of a module, module-level and lazy, as absolute module names."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  found = []

  def visit(node, lazy):
    for child in ast.iter_child_nodes(node):
      inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
      if isinstance(child, ast.Import):
        found.extend(Import(module, alias.name, child.lineno, lazy) for alias in child.names)
      elif isinstance(child, ast.ImportFrom):
        # "from p.room import m" imports p.room.m when m is a module, else a name of p.room:
        # either way the room is p.room's.
        source = _absolute_source(module, path, child)
        found.extend(Import(module, f"{source}.{alias.name}", child.lineno, lazy)
                     for alias in child.names)
      visit(child, inner)

  visit(tree, False)
  return found


def _absolute_source(module, path, node):
  """The absolute module an ImportFrom node names ("from ..x import y" in p.q.r -> "p.x")."""
  if not node.level:
    return node.module
  package = module if os.path.basename(path) == "__init__.py" else module.rpartition(".")[0]
  parts = package.split(".")
  base = ".".join(parts[:len(parts) - (node.level - 1)])
  return f"{base}.{node.module}" if node.module else base


def all_imports(package_dir=PACKAGE_DIR, package=PACKAGE):
  return [i for module, path in modules(package_dir, package) for i in imports_of(module, path)]


def import_graph(package_dir=PACKAGE_DIR, package=PACKAGE):
  """dict module -> the set of the package's modules it imports, lazily or not.

  An import names a module, or a name inside one ("from p import m, f" imports p.m where that
  is a module, else p): the edge goes to the longest module the name starts with. Importing
  p.q.m runs p/q/__init__.py too, so the edge set has every package on the way, except the
  importer's own packages (Python runs those before the importer, whatever it imports).
  """
  found = modules(package_dir, package)
  known = {module for module, _ in found}
  graph = {module: set() for module in known}
  for i in all_imports(package_dir, package):
    parts = i.target.split(".")
    prefixes = [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
    own_packages = {".".join(i.module.split(".")[:n]) for n in range(1, i.module.count(".") + 2)}
    graph[i.module].update(prefix for prefix in prefixes
                           if prefix in known and prefix not in own_packages)
  return graph


def cycles(graph):
  """The strongly connected components of `graph` (dict node -> nodes) that hold a cycle, each
  a sorted list of its nodes (Tarjan's algorithm, iterative: no recursion limit)."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  for root in sorted(graph):
    if root in index:
      continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, successors = work[-1]
      for successor in successors:
        if successor not in index:
          index[successor] = low[successor] = len(index)
          stack.append(successor)
          on_stack.add(successor)
          work.append((successor, iter(sorted(graph.get(successor, ())))))
          break
        if successor in on_stack:
          low[node] = min(low[node], index[successor])
      else:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          component = []
          while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
              break
          if len(component) > 1 or node in graph.get(node, ()):
            found.append(sorted(component))
  return sorted(found)


def cycle_messages(package_dir=PACKAGE_DIR, package=PACKAGE):
  """One message per import cycle of the package, naming its modules (empty: no cycle)."""
  graph = import_graph(package_dir, package)
  messages = []
  for component in cycles(graph):
    inside = "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(component)))}"
                       for m in component)
    messages.append(f"Import cycle of {len(component)} modules (lazy imports and packages' "
                    f"__init__ counted): {inside}.")
  return messages


def violations(rules=RULES, package_dir=PACKAGE_DIR, package=PACKAGE):
  """Messages naming each import that breaks a rule (empty when every rule holds)."""
  found = []
  for i in all_imports(package_dir, package):
    source = room_of(i.module, package)
    target = room_of(i.target, package)
    if source not in rules:
      found.append(f"{i.module}: room {source!r} has no rule in rooms.RULES (add one).")
      continue
    rule = rules[source]
    where = f"{i.module} line {i.line} imports {i.target}"
    if target is not None and target != source:
      if target in rule.may_import or (i.lazy and target in rule.lazy):
        continue
      allowed = ", ".join(rule.may_import) or "no other room"
      lazily = f"; lazily also {', '.join(rule.lazy)}" if rule.lazy else ""
      found.append(f"{where}: room {source!r} may import {allowed}{lazily}, not {target!r}.")
    elif (target is None and rule.tensorflow_free and not i.lazy
          and i.target.split(".")[0] in TENSORFLOW_MODULES):
      found.append(f"{where} at module level: room {source!r} is TensorFlow-free.")
  return found


def room_table(package_dir=PACKAGE_DIR, package=PACKAGE):
  """docs/ARCHITECTURE.md's import table: each room, its rule and each module's imports."""
  by_module = {}  # module -> {room: lazy only}
  for i in all_imports(package_dir, package):
    target = room_of(i.target, package)
    if target is not None and target != room_of(i.module, package):
      rooms = by_module.setdefault(i.module, {})
      rooms[target] = rooms.get(target, True) and i.lazy
  rows = ["| room | holds | may import | TensorFlow | its modules: the rooms each imports |",
          "|---|---|---|---|---|"]
  for name, rule in RULES.items():
    members = [m for m, _ in modules(package_dir, package) if room_of(m, package) == name]
    cells = []
    for module in members:
      targets = [room + (" (lazy)" if lazy else "")
                 for room, lazy in sorted(by_module.get(module, {}).items())]
      short = module[len(package) + 1:] or package
      cells.append(f"`{short}`: {', '.join(targets) if targets else '-'}")
    allowed = ", ".join(rule.may_import) or "-"
    if rule.lazy:
      allowed += f"; lazily {', '.join(rule.lazy)}"
    rows.append(f"| {name} | {rule.holds} | {allowed} | "
                f"{'none' if rule.tensorflow_free else 'yes'} | {'<br>'.join(cells)} |")
  return "\n".join(rows)


def main(argv):
  if "--check" in argv:
    found = violations()
    print("\n".join(found) if found else "Every import follows the rules.")
    return 1 if found else 0
  print(room_table())
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
