"""README.md's and docs/'s Python examples run as written (a newcomer copies them first), and
their experiment.py commands resolve in this process (tests/project/test_docs_commands.py runs every
command of the pages in its own process)."""
import importlib.util
import os
import sys

from tests.project import test_docs_commands as docs

README = os.path.join(docs.ROOT, "README.md")


def test_readme_is_a_front_page():
  """README is short (issue 33: about 200 lines) and links every page of docs/."""
  with open(README) as f:
    text = f.read()
  assert len(text.splitlines()) <= 200, "README.md is over 200 lines: move a section to docs/"
  for page in docs.PAGES[1:]:
    assert f"({page})" in text, f"README.md's contents do not link {page}"


def test_python_examples_run():
  ran = 0
  for page in docs.PAGES:
    for block in docs.python_blocks(page):
      if block in docs.user_package_files().values():
        continue  # A file of the user's package: test_docs_commands imports it by its command.
      exec(compile(block, os.path.join(docs.ROOT, page), "exec"),  # pylint: disable=exec-used
           {"__name__": "docs_example"})
      ran += 1
  assert ran, "no Python example on the pages"


def test_experiment_commands_resolve_their_own_values(tmp_path, monkeypatch):
  """Every `python experiment.py ...` command on the pages parses and resolves its flags,
  passes the checks a run makes of its levels before it starts (--show_settings prints
  before them), and the command's own mode, level and logdir reach the run."""
  from scalable_agent_tf2.configuration import config as config_lib  # pylint: disable=g-import-not-at-top
  commands = [c for c in docs.all_commands() if docs.classify(c)[0] == "experiment"]
  assert len(commands) >= 20
  for path in docs._write_user_package(str(tmp_path)):  # pylint: disable=protected-access
    monkeypatch.syspath_prepend(path)
  # The commands name the paper's hardware (memory for 150 DMLab actors) and DeepMind Lab
  # (its stand-in where it is not installed); what they say about the levels must hold.
  monkeypatch.setattr(config_lib, "machine_memory_gb", lambda: 1e6)
  if importlib.util.find_spec("deepmind_lab") is None:
    from tests import fake_deepmind_lab  # pylint: disable=g-import-not-at-top
    monkeypatch.setitem(sys.modules, "deepmind_lab", fake_deepmind_lab)
  for command in commands:
    argv = docs.classify(command)[1]
    config = config_lib.config_from_argv(argv)
    config_lib.check_levels_can_run(config)  # E.g. DMLab-30 needs --dataset_path.
    given = dict(arg[2:].split("=", 1) for arg in argv if "=" in arg)
    for name in ("mode", "level_name", "logdir"):
      if name in given:
        assert str(getattr(config, name)) == given[name], (name, command.line)
