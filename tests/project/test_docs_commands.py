"""Every command in README.md and docs/*.md runs, in its cheapest form (issue 33).

A newcomer copies these commands first; a flag renamed or a module moved must fail here, not
in their terminal. The commands are taken from the pages' fenced `sh` blocks (one command a
line; `\\` continues a line, `&&`, `;` and a trailing `&` separate commands, `NAME=value`
before a command sets its environment) and each is run in the form that checks its flags
without doing its work:

- `python experiment.py FLAGS` (or `python -m scalable_agent_tf2.run.experiment_main FLAGS`):
  run as written with `--show_settings` appended, which prints the resolved settings and
  exits before TensorFlow and before the logdir is taken (TensorFlow cannot even be imported
  in that process, and taking the logdir is refused there).
- `python -m MODULE FLAGS` (the launcher, the population driver, the replay service, the
  plotting command, the benchmarks): run as written until its argparse parser (or settings
  table's `parse_settings`) has parsed and checked the flags, and stopped there. The flags
  after `--` of the launcher and the population driver are checked as experiment.py's.
- `python -m pytest tests [-m MARKER]`: the marker is one pytest knows (`pytest --markers`),
  and README's test command is exactly the CI script's (`.ci/run`).
- `pip install -r FILE`: `pip install --dry-run --no-index` (every pinned package is
  installed here at its pinned version; nothing is downloaded).
- shell scripts: they exist, `bash -n` parses them, and one with a `--dry-run` runs it.
- tools of other projects (`ssh`, `tensorboard`): named in EXTERNAL_TOOLS with why they are
  not run.

The commands are grouped into two processes (one that cannot import TensorFlow, one that
can, for the benchmarks and modules that import it at their top), so the whole check takes a
few seconds plus one TensorFlow import. The commands name the paper's hardware: the
harness reports a machine with enough memory for them, and where DeepMind Lab is not
installed its stand-in (tests/fake_deepmind_lab.py) is, so those commands are parsed
everywhere.

Also, without running anything: every `python -m X` named anywhere on the pages is a module
that exists, and every repository path they name exists.
"""
import collections
import contextlib
import glob
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                               for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
COMMAND_BLOCKS = ("sh", "bash", "shell", "console")
EXPERIMENT_MODULE = "scalable_agent_tf2.run.experiment_main"
# Commands whose flags after "--" are experiment.py flags (of every process or member).
FORWARDING_MODULES = ("scalable_agent_tf2.run.launch", "scalable_agent_tf2.population")
# Placeholders of a sweep's template (Table 2's commands): a value from Table D.1's ranges.
PLACEHOLDERS = {"=E": "=0.001", "=LR": "=0.0005", "=EPS": "=0.1"}
# Programs of other projects that the pages name; not run here, with the reason.
EXTERNAL_TOOLS = {
    "ssh": "OpenSSH's port forward to the learner; tests/transport/test_cluster_security.py runs the real "
           "`ssh -N -L` where an SSH server is installed",
    "tensorboard": "TensorBoard's viewer of the run's summaries (installed with TensorFlow)",
    "saved_model_cli": "TensorFlow's SavedModel inspector (installed with TensorFlow); "
                       "docs/POLICY_API.md says what it lists of an exported policy",
}
# A harness case that runs longer than this is doing the command's work, not parsing it (the
# first case that imports TensorFlow pays for its import: a minute or more on a loaded machine).
CASE_SECONDS = 240

Command = collections.namedtuple("Command", "page line argv env")


def _operator_split(line):
  """The simple commands of one shell line: `&&`, `;`, `|`, `&` separate them."""
  lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  commands, current = [], []
  for token in lexer:
    if token in ("&&", ";", "&", "||", "|"):
      if token in ("||", "|"):
        raise ValueError(f"a pipe in {line!r}: give each command on its own line")
      commands.append(current)
      current = []
    elif token in (">", ">>", "<"):
      raise ValueError(f"a redirection in {line!r}: keep it out of the fenced commands")
    else:
      current.append(token)
  commands.append(current)
  return [c for c in commands if c]


def _environment_split(argv):
  """(the NAME=value assignments before the program, the rest)."""
  env = {}
  while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0], re.S):
    name, value = argv[0].split("=", 1)
    env[name] = value
    argv = argv[1:]
  return env, argv


def page_commands(page):
  """The Commands of one page's fenced command blocks, in order."""
  with open(os.path.join(ROOT, page)) as f:
    text = f.read()
  commands = []
  for language, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
    if language not in COMMAND_BLOCKS:
      continue
    for line in block.replace("\\\n", " ").splitlines():
      if not line.strip() or line.lstrip().startswith("#"):
        continue
      for argv in _operator_split(line):
        env, argv = _environment_split(argv)
        for placeholder, value in PLACEHOLDERS.items():
          argv = [a[:-len(placeholder)] + value if a.endswith(placeholder) else a for a in argv]
        commands.append(Command(page, line.strip(), argv, env))
  return commands


def all_commands():
  return [command for page in PAGES for command in page_commands(page)]


def python_blocks(page):
  with open(os.path.join(ROOT, page)) as f:
    return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def user_package_files(pages=PAGES):
  """{path: text} of the pages' Python blocks that are a file of the user's own package (their
  first line names it, `# my_package/envs.py`): commands on the pages import them."""
  files = {}
  for page in pages:
    for block in python_blocks(page):
      first = block.splitlines()[0]
      match = re.fullmatch(r"#\s*([\w/]+\.py)\s*", first)
      if match:
        files[match.group(1)] = block
  return files


def _python_program(argv):
  """(module or script, its arguments) of a `python ...` command, else None."""
  if argv[0] not in ("python", "python3"):
    return None
  if argv[1] == "-m":
    return argv[2], argv[3:]
  return argv[1], argv[2:]


def _after_double_dash(arguments):
  return arguments[arguments.index("--") + 1:] if "--" in arguments else []


def _logdir_of(arguments):
  for argument in arguments:
    if argument.startswith("--logdir="):
      return argument.split("=", 1)[1]
  return None


def classify(command):
  """(kind, details) of one command; kind is one of "experiment", "module", "pytest", "pip",
  "venv", "shell", "script", "external", "lint". ValueError for a command this test does not know how to run."""
  argv = command.argv
  program = _python_program(argv)
  if program is not None:
    target, arguments = program
    if target == "venv":  # README's `python3 -m venv DIR`: Python's own; not run here.
      return "venv", arguments
    if target in ("experiment.py", EXPERIMENT_MODULE):
      return "experiment", arguments
    if target == "pytest":
      return "pytest", arguments
    if argv[1] == "-m":
      return "module", (target, arguments)
    raise ValueError(f"{command.page}: `{command.line}` runs a script this test does not know")
  if argv[0] in ("pip", "pip3"):
    return "pip", argv[1:]
  if argv[0] == "ruff":  # The linter (requirements-test.txt; pyproject.toml's rules).
    return "lint", argv[1:]
  if argv[0] in ("source", "."):  # The shell's own: activates the venv of the line before.
    return "shell", argv[1:]
  if argv[0].endswith(".sh") or argv[0] == "bash":
    return "script", argv[1:] if argv[0] == "bash" else argv
  if argv[0] in EXTERNAL_TOOLS:
    return "external", argv[0]
  raise ValueError(f"{command.page}: `{command.line}`: no case for `{argv[0]}` in "
                   "tests/project/test_docs_commands.py; add one that runs its cheapest form")


def harness_cases(commands):
  """The cases the harness runs: experiment flags, and modules with their arguments."""
  cases = []
  for command in commands:
    kind, details = classify(command)
    where = f"{command.page}: {command.line}"
    if kind == "experiment":
      cases.append(dict(kind="experiment", arguments=details, env=command.env, where=where))
    elif kind == "module":
      module, arguments = details
      cases.append(dict(kind="module", module=module, arguments=arguments, env=command.env,
                        where=where))
  return cases


# ---------------------------------------------------------------------------------------
# The harness: runs cases in this file's own process (`python tests/project/test_docs_commands.py`).


class _Parsed(Exception):
  """Raised once a command's parser has parsed and checked its flags: nothing more runs."""


class _CaseTimeout(Exception):
  pass


def _stop_after_parsing():
  """Makes argparse (and the settings tables' parse_settings) stop a command once parsed."""
  import argparse  # pylint: disable=g-import-not-at-top

  from scalable_agent_tf2.configuration import command_line  # pylint: disable=g-import-not-at-top
  depth = [0]

  def stopping(method):
    def wrapped(*args, **kwargs):
      depth[0] += 1
      try:
        result = method(*args, **kwargs)
      finally:
        depth[0] -= 1
      if depth[0] == 0:
        raise _Parsed(result)
      return result
    return wrapped

  argparse.ArgumentParser.parse_known_args = stopping(argparse.ArgumentParser.parse_known_args)
  argparse.ArgumentParser.parse_args = stopping(argparse.ArgumentParser.parse_args)
  command_line.CommandParser.parse_settings = stopping(command_line.CommandParser.parse_settings)


def _paper_hardware():
  """The commands are the paper's: a machine with their memory, and DeepMind Lab (its
  stand-in where it is not installed)."""
  from scalable_agent_tf2.configuration import config  # pylint: disable=g-import-not-at-top
  config.machine_memory_gb = lambda: 1e6
  if importlib.util.find_spec("deepmind_lab") is None:
    from tests import fake_deepmind_lab  # pylint: disable=g-import-not-at-top
    sys.modules["deepmind_lab"] = fake_deepmind_lab


def _refuse_logdir():
  """--show_settings prints and exits: taking (or creating) the logdir is an error here."""
  from scalable_agent_tf2.runfiles import run_directory  # pylint: disable=g-import-not-at-top

  def refuse(*args, **kwargs):
    raise RuntimeError("went on to take the logdir (run_directory.check_usable or hold) "
                       "instead of exiting after printing the settings")
  run_directory.check_usable = refuse
  run_directory.hold = refuse


def _run_case(case):
  """Runs one case; (outcome, exit code, output). outcome: "parsed", "exited", "returned"."""
  import runpy  # pylint: disable=g-import-not-at-top
  if case["kind"] == "experiment":
    from scalable_agent_tf2.configuration import experiment_flags  # pylint: disable=g-import-not-at-top
    experiment_flags.FLAGS.unparse_flags()
    sys.argv = ["experiment.py", *case["arguments"], "--show_settings"]
    run = lambda: runpy.run_path(os.path.join(ROOT, "experiment.py"), run_name="__main__")
  else:
    sys.argv = [case["module"], *case["arguments"]]
    run = lambda: runpy.run_module(case["module"], run_name="__main__", alter_sys=True)
  return run()


def _run_one(case, allow_tensorflow):
  """Runs one case in this process; a dict: ok, outcome, output, needs_tensorflow,
  tensorflow_loaded, and (a parser's result) parsed."""
  saved_environ, saved_argv = dict(os.environ), list(sys.argv)
  os.environ.update(case["env"])
  output = io.StringIO()
  result = dict(ok=False, needs_tensorflow=False, output="")
  signal.alarm(CASE_SECONDS)
  try:
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
      _run_case(case)
    result.update(ok=True, outcome="returned")
  except _Parsed as parsed:
    result.update(ok=True, outcome="parsed", parsed=parsed.args[0])
  except SystemExit as stop:
    code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    if stop.code not in (0, None) and not isinstance(stop.code, int):
      output.write(str(stop.code))
    result.update(ok=code == 0, outcome=f"exit {code}")
  except ImportError as error:
    result.update(outcome=f"ImportError: {error}",
                  needs_tensorflow=not allow_tensorflow and "tensorflow" in str(error))
  except Exception as error:  # pylint: disable=broad-except
    result.update(outcome=f"{type(error).__name__}: {error}")
  finally:
    signal.alarm(0)
    os.environ.clear()
    os.environ.update(saved_environ)
    sys.argv = saved_argv
  result["tensorflow_loaded"] = sys.modules.get("tensorflow") is not None
  result["output"] = output.getvalue()
  return result


def run_harness(cases_path, results_path, allow_tensorflow):
  sys.path[:0] = [ROOT]
  os.chdir(ROOT)
  with open(cases_path) as f:
    request = json.load(f)
  sys.path[:0] = request["extra_paths"]
  if not allow_tensorflow:
    for name in ("tensorflow", "tensorflow_probability", "keras"):
      sys.modules[name] = None  # `import tensorflow` now raises ImportError.
  _paper_hardware()
  _stop_after_parsing()
  _refuse_logdir()

  def alarm(signum, frame):
    raise _CaseTimeout(f"still running after {CASE_SECONDS} s: it does the work, not a parse")
  signal.signal(signal.SIGALRM, alarm)
  results = []
  for case in request["cases"]:
    result = _run_one(case, allow_tensorflow)
    parsed = result.pop("parsed", None)
    if case.get("module") in FORWARDING_MODULES and parsed is not None:
      # What the driver or launcher hands every process: the flags its parser left over.
      values, members = parsed
      members = members[1:] if members[:1] == ["--"] else members
      if case["module"] == "scalable_agent_tf2.population":  # It gives each its logdir.
        members = [f"--logdir={os.path.join(values.logdir, 'member_00')}", *members]
      result["members"] = _run_one(dict(kind="experiment", arguments=members, env=case["env"]),
                                   allow_tensorflow)
      result["members"].pop("parsed", None)
      result["members"]["arguments"] = members
    results.append(result)
  with open(results_path, "w") as f:
    json.dump(results, f)


def _harness(cases, extra_paths, allow_tensorflow, tmp_path, name):
  cases_path = os.path.join(tmp_path, f"{name}_cases.json")
  results_path = os.path.join(tmp_path, f"{name}_results.json")
  with open(cases_path, "w") as f:
    json.dump(dict(cases=cases, extra_paths=extra_paths), f)
  argv = [sys.executable, os.path.abspath(__file__), "--harness", cases_path, results_path]
  if allow_tensorflow:
    argv.append("--allow_tensorflow")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=420)
  assert done.returncode == 0, f"the harness failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
  with open(results_path) as f:
    return json.load(f)


def _describe(where, result):
  return (f"{where}\n    -> {result['outcome']}\n    "
          + "\n    ".join(result["output"].strip().splitlines()[-12:]))


def _write_user_package(tmp_path):
  """The pages' own-package example written as files, so commands that name it run."""
  for path, text in user_package_files().items():
    full = os.path.join(tmp_path, "user_package", path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    init = os.path.join(os.path.dirname(full), "__init__.py")
    if not os.path.exists(init):
      open(init, "w").close()
    with open(full, "w") as f:
      f.write(text)
  return [os.path.join(tmp_path, "user_package")]


# ---------------------------------------------------------------------------------------
# The tests.


def test_every_command_has_a_case():
  commands = all_commands()
  assert len(commands) >= 40, f"only {len(commands)} commands found: is the extraction broken?"
  for command in commands:
    classify(command)  # Raises for a command no case covers.


def _experiment_problems(where, arguments, result):
  """What is wrong with an experiment.py case's --show_settings run (a list of lines)."""
  if not result["ok"]:
    return [_describe(where, result)]
  problems = []
  if result["tensorflow_loaded"]:
    problems.append(f"{where}\n    -> --show_settings loaded TensorFlow")
  unshown = [a.split("=", 1)[0] for a in arguments
             if a.startswith("--") and a != "--show_settings"
             and a.split("=", 1)[0] + "=" not in result["output"]]
  if unshown:
    problems.append(f"{where}\n    -> --show_settings did not print {', '.join(unshown)}:"
                    f"\n    {result['output'][-500:]}")
  return problems


def _case_problems(case, result):
  if case["kind"] == "experiment":
    return _experiment_problems(case["where"], case["arguments"], result)
  if not result["ok"]:
    return [_describe(case["where"], result)]
  if case["module"] in FORWARDING_MODULES:
    if "members" not in result:
      return [f"{case['where']}\n    -> its parser was not reached ({result['outcome']})"]
    members = result["members"]
    return _experiment_problems(f"{case['where']} (the flags it hands every process: "
                                f"{' '.join(members['arguments'])})", members["arguments"],
                                members)
  return []


@pytest.mark.timeout(900)  # Two processes and one TensorFlow import: slow on a loaded machine.
def test_experiment_and_module_commands_parse_their_flags(tmp_path):
  """Each experiment.py command prints its settings (--show_settings) without TensorFlow;
  each module's flags parse and pass their checks."""
  cases = harness_cases(all_commands())
  extra_paths = _write_user_package(str(tmp_path))
  results = _harness(cases, extra_paths, False, str(tmp_path), "without_tensorflow")
  failures, retry = [], []
  for case, result in zip(cases, results):
    if result["needs_tensorflow"] and case["kind"] == "module":
      retry.append(case)  # It imports TensorFlow at its top: run it in the second group.
    else:
      failures += _case_problems(case, result)
  if retry:
    for case, result in zip(retry, _harness(retry, extra_paths, True, str(tmp_path), "tf")):
      failures += _case_problems(case, result)
  assert not failures, (f"{len(failures)} problems in {len(cases)} commands:\n"
                        + "\n".join(failures))


def test_pytest_commands_use_known_markers_and_readme_matches_ci():
  commands = [c for c in all_commands() if classify(c)[0] == "pytest"]
  assert commands, "no test command on the pages"
  known = subprocess.run([sys.executable, "-m", "pytest", "--markers"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
  assert known.returncode == 0, known.stdout + known.stderr
  markers = set(re.findall(r"^@pytest\.mark\.(\w+)", known.stdout, re.M))
  for command in commands:
    arguments = classify(command)[1]
    assert arguments and arguments[0] == "tests", command
    if "-m" in arguments:
      expression = arguments[arguments.index("-m") + 1]
      for word in re.findall(r"\w+", expression):
        assert word in markers | {"not", "and", "or"}, (
            f"{command.page}: `{command.line}`: pytest knows no marker {word!r} (pytest.ini)")
  with open(os.path.join(ROOT, ".ci", "run")) as f:
    script = f.read()
  # .ci/run first makes and activates a new venv (as README's line before the command does),
  # then runs README's command, after this marker, line for line.
  marker = "# README's test command, exactly (the linter first: a finding fails the run):\n"
  assert marker in script, f".ci/run lost its marker line {marker!r}"
  ci = [line.strip() for line in script.split(marker, 1)[1].splitlines()
        if line.strip() and not line.startswith("#")]
  readme = [" ".join(c.argv) for c in page_commands("README.md")
            if c.line.startswith("pip install") and "pytest" in c.line]
  assert "ruff check ." in readme, "README's test command runs the linter before the tests"
  assert readme == ci, f"README's test command {readme} is not .ci/run's {ci}"


def test_lint_commands_pass_on_the_tree():
  """The pages' `ruff ...` commands (README's test command lints first) pass as written."""
  commands = [c for c in all_commands() if classify(c)[0] == "lint"]
  assert commands, "no lint command on the pages"
  ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
  for command in commands:
    run = subprocess.run([ruff, *classify(command)[1]], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, f"{command.page}: `{command.line}`:\n{run.stdout}{run.stderr}"


CUDA_EXTRA = "tensorflow[and-cuda]"


def _requirements_here(tmp_path):
  """The directory whose requirements files the pip commands are checked against: the
  checkout's, or, in a venv of requirements-cpu.txt (no NVIDIA package: README's install
  without a GPU), copies of them without TensorFlow's CUDA extra, which cannot be satisfied
  there offline (the rest of each file is still checked)."""
  if importlib.util.find_spec("nvidia") is not None:
    return ROOT
  for name in glob.glob(os.path.join(ROOT, "requirements*.txt")):
    with open(name) as f:
      text = f.read().replace(CUDA_EXTRA, "tensorflow")
    with open(os.path.join(tmp_path, os.path.basename(name)), "w") as f:
      f.write(text)
  return str(tmp_path)


def test_pip_commands_are_satisfied_here(tmp_path):
  """`pip install -r FILE` on the pages: the files exist and name what is installed here."""
  commands = [c for c in all_commands() if classify(c)[0] == "pip"]
  assert commands
  where = _requirements_here(tmp_path)
  for argv in sorted({tuple(c.argv) for c in commands}):
    assert argv[1] == "install" and argv[2] == "-r", argv
    assert os.path.exists(os.path.join(ROOT, argv[3])), argv
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                           "-q", *argv[2:]], cwd=where, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}{done.stderr}"


def test_scripts_run_their_dry_run(tmp_path):
  """Shell scripts on the pages exist and parse (`bash -n`); one that offers `--dry-run`
  prints its plan with the page's arguments (an absolute output path replaced by a temporary
  directory: the dry run writes its logs there)."""
  for command in all_commands():
    kind, details = classify(command)
    if kind == "external":
      assert details in EXTERNAL_TOOLS
    if kind != "script":
      continue
    script, arguments = details[0], details[1:]
    path = os.path.join(ROOT, script)
    assert os.path.exists(path), f"{command.page}: `{command.line}`: no {script}"
    done = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    assert done.returncode == 0, f"{script}: {done.stderr}"
    with open(path) as f:
      if "--dry-run" not in f.read():
        continue
    arguments = [str(tmp_path / "output") if a.startswith("/") else a for a in arguments]
    done = subprocess.run(["bash", path, "--dry-run", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command.line} --dry-run:\n{done.stdout}{done.stderr}"


def _inline_texts():
  for page in PAGES:
    with open(os.path.join(ROOT, page)) as f:
      yield page, f.read()


def test_every_named_module_exists():
  """`python -m X` anywhere on the pages (prose too) names a module that exists."""
  named = set()
  for page, text in _inline_texts():
    for module in re.findall(r"python -m ([\w.]+)", text):
      named.add((page, module))
  assert named
  missing = [f"{page}: python -m {module}" for page, module in sorted(named)
             if importlib.util.find_spec(module) is None]
  assert not missing, "modules that do not exist:\n" + "\n".join(missing)


# Directories a path on the pages may be relative to (the package's own modules are named
# from their room, `environments/process.py`, or by file name alone in a room's context).
_TOP = ("scalable_agent_tf2/", "tests/", "benchmarks/", "docs/", "dynamic_batching/", ".ci/")
# Paths on the pages that are not this repository's: the user's, DeepMind Lab's, and files
# that commands write.
_NOT_OURS = ("my_package/envs.py", "python/dmlab_module.c", "gpu_benchmark.md")


def _repository_files():
  done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                        cwd=ROOT, capture_output=True, text=True, check=True)
  return [line for line in done.stdout.splitlines() if line]


def test_every_named_path_exists():
  """Each repository path in backticks on the pages exists (the rooms moved modules)."""
  files = _repository_files()
  directories = {os.path.dirname(f) + "/" for f in files}
  problems = []
  for page, text in _inline_texts():
    for token in re.findall(r"`([\w./-]+\.(?:py|md|sh|txt|toml|ini|cc|png|json|jsonl|csv))`",
                            text):
      if token in _NOT_OURS or token.startswith(("/", "~")):
        continue
      if token.startswith(_TOP) or "/" not in token and token in ("README.md", "BUILD.md"):
        ok = token in files
      else:
        ok = any(f == token or f.endswith("/" + token) for f in files)
      if not ok and not token.endswith((".json", ".jsonl", ".csv", ".png")):
        problems.append(f"{page}: {token}")
    for token in re.findall(r"`((?:scalable_agent_tf2|benchmarks|tests)/[\w/]+/)`", text):
      if token not in directories and not any(d.startswith(token) for d in directories):
        problems.append(f"{page}: {token}")
  for page, text in _inline_texts():  # Markdown links, relative to their page.
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
      if "://" in target:
        continue
      if not os.path.exists(os.path.join(ROOT, os.path.dirname(page), target)):
        problems.append(f"{page}: link ({target})")
  assert not problems, "paths that do not exist:\n" + "\n".join(problems)


if __name__ == "__main__":
  if sys.argv[1:2] == ["--harness"]:
    run_harness(sys.argv[2], sys.argv[3], "--allow_tensorflow" in sys.argv[4:])
