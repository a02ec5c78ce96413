"""An unknown --level_name gets a short answer with the closest names and how to list all."""
import subprocess
import sys

import pytest

from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites


@pytest.mark.parametrize("typed, suggested", [
    ("atari/pongg", "atari/pong"),
    ("pong", "atari/pong"),  # A bare game name.
    ("seekavoid", "seekavoid_arena_01"),
    ("dmlab3", "dmlab30"),
])
def test_unknown_names_suggest_the_closest(typed, suggested):
  with pytest.raises(ValueError) as raised:
    families.level_names(typed)
  message = str(raised.value)
  assert f"did you mean {suggested}" in message
  assert families.LIST_LEVELS_COMMAND in message
  # One short line, not the whole list of 90 names.
  assert len(message) < 250 and "\n" not in message


def test_no_suggestion_for_a_name_like_none():
  with pytest.raises(ValueError) as raised:
    families.level_names("zzz")
  assert "did you mean" not in str(raised.value)


def test_the_list_command_prints_every_name():
  listing = subprocess.run([sys.executable, "-m", "scalable_agent_tf2.environments.families"], check=True,
                           capture_output=True, text=True).stdout
  # The built-in families' names: a family a test registered (tests/toy_families.py) lives in
  # this process only, not in the command's.
  built_in = [name for family in families.FAMILIES for name in family.listed_levels()]
  for name in list(suites.SUITES) + built_in:
    assert f"\n  {name}\n" in listing + "\n"
