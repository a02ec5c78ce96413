"""The one registry of level names: a level name -> the environment family that owns it, and
a suite -> its levels.

    family = families.family_of("atari/pong")     # families.atari.FAMILY
    family = families.family_of("gym:CartPole-v1")
    families.family_of("CartPole-v1")             # ValueError: ... did you mean gym:CartPole-v1?
    families.level_names("dmlab30")               # The suite's 30 training levels.
    families.level_names("atari/pong,atari/boxing")  # A suite a user names: its 2 levels.
    python -m scalable_agent_tf2.environments.families   # Lists every level and suite.

A family (families/base.py, Family) owns its level names, presets, environments, how they run
and what they observe (docs/ENVIRONMENTS.md). A name is a family's when it starts with one of
the family's prefixes ("atari/", "toy/", "mujoco/", "dmlab:", "gym:") or is one of its listed
names (the paper's bare DMLab-30 names); no family is anybody's fallback: a name no family owns
is refused with suggestions. The suites (environments/suites.py: "dmlab30", "atari57") stand
for their levels, and so does a suite a user names: levels of one family separated by commas
("atari/pong,atari/breakout", named_suite_levels). Adding a family is one module and one entry
in FAMILIES.

The families and this registry import the settings' names (configuration/settings.py) and the
environments' own modules, never a run's resolved configuration (configuration/config.py,
which calls them). No TensorFlow here and no family's heavy dependency (docs/ARCHITECTURE.md
"Rooms").
"""
import difflib

from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import atari
from scalable_agent_tf2.environments.families import base
from scalable_agent_tf2.environments.families import dmlab
from scalable_agent_tf2.environments.families import gym
from scalable_agent_tf2.environments.families import mujoco
from scalable_agent_tf2.environments.families import toy

# The families. A name's family is found in this order.
FAMILIES = (dmlab.FAMILY, atari.FAMILY, toy.FAMILY, mujoco.FAMILY, gym.FAMILY)
_registered = []  # Families added by register() (tests, a user's own driver).
LIST_LEVELS_COMMAND = "python -m scalable_agent_tf2.environments.families"


def families():
  """Every family: those of FAMILIES, then the registered ones."""
  return list(FAMILIES) + _registered


def register(family):
  """Adds a family (a base.Family) for this process; returns it. Its prefixes must be new."""
  taken = {prefix: f.name for f in families() for prefix in f.prefixes}
  clashes = [f"{prefix!r} (family {taken[prefix]})" for prefix in family.prefixes
             if prefix in taken]
  if clashes or not family.prefixes:
    raise ValueError(f"Family {family.name!r} needs level-name prefixes of its own (e.g. "
                     f"'{family.name}:'); taken: {', '.join(clashes) or 'none given'}.")
  _registered.append(family)
  return family


def unregister(family):
  """Removes a family added by register()."""
  _registered.remove(family)


def find_family(level_name):
  """The family that owns level_name, or None (no check that it is a valid level)."""
  for family in families():
    if level_name.startswith(tuple(family.prefixes)):
      return family
  for family in families():
    if level_name in family.listed_levels():
      return family
  return None


def family_of(level_name):
  """The family of a single level, its name checked by the family.

  Raises:
    ValueError: no family owns the name, or its family refuses it; the message says what to
      type instead.
  """
  family = find_family(level_name)
  if family is None:
    raise ValueError(unknown_level_message(level_name))
  try:
    family.check_level(level_name)
  except base.UnknownLevelName:
    raise ValueError(unknown_level_message(level_name)) from None
  return family


def level_names(name):
  """The single levels that `name` stands for.

  Args:
    name: a suite name ("dmlab30", "atari57"), a suite a user names (levels of one family
      separated by commas: "atari/pong,atari/breakout") or a single level name of any
      environment family ("atari/pong", "gym:CartPole-v1", ...).

  Returns:
    Tuple of level names: the suite's training levels, the list's, or (name,).

  Raises:
    ValueError: unknown name; the message names the closest valid ones.
  """
  if suites.is_level_list(name):
    return named_suite_levels(name)
  if suites.is_suite(name):
    return suites.SUITES[name]
  family_of(name)  # The family checks its own names.
  return (name,)


def named_suite_levels(name):
  """The levels of a suite a user names ("atari/pong,atari/breakout"), in the list's order:
  each one level, all of one family whose levels form suites (base.Family.forms_suites), each
  named once. A built-in suite's presets and scoring then apply (families' presets, suites'
  reference_suite).

  Raises:
    ValueError: one line, naming what is wrong with the list and what to type instead.
  """
  names = name.split(suites.LEVEL_LIST_SEPARATOR)
  where = f"--level_name={name}"
  for index, element in enumerate(names):
    if not element.strip():
      raise ValueError(f"{where}: level {index + 1} of the list is empty (a trailing or "
                       f"doubled comma); separate the levels by single commas, e.g. "
                       f"--level_name=atari/pong,atari/breakout.")
    if element != element.strip():
      raise ValueError(f"{where}: {element!r} has spaces around it; write the list without "
                       f"them: --level_name={','.join(n.strip() for n in names)}.")
    if suites.is_suite(element):
      raise ValueError(f"{where}: {element} is a suite, not a level; train on it alone "
                       f"(--level_name={element}, with --excluded_levels to leave levels "
                       "out), or list single levels.")
  try:
    level_families = [family_of(element) for element in names]
  except ValueError as error:
    raise ValueError(f"{where}: {error}") from None
  _check_one_family(where, names, level_families)
  seen = {}
  for index, element in enumerate(names):
    first = seen.setdefault(level_families[0].level_identity(element), index)
    if first != index:
      twice = element if names[first] == element else f"{names[first]} (as {element})"
      raise ValueError(f"{where}: {twice} is named twice (levels {first + 1} and "
                       f"{index + 1} of the list); name each level once.")
  return tuple(names)


def _check_one_family(where, names, level_families):
  """A suite's levels are of one family (one network, one set of presets) that forms suites."""
  first = level_families[0]
  for element, family in zip(names, level_families):
    if family is not first:
      raise ValueError(f"{where} mixes families: {names[0]} is a level of family {first.name}, "
                       f"{element} of family {family.name}; a suite's levels share one network "
                       "and one set of presets: list levels of one family.")
  if not first.forms_suites:
    raise ValueError(f"{where}: levels of family {first.name} form no suite (their "
                     "observations and actions may differ); train them one at a time. A suite "
                     f"you name lists levels of {suite_families_text()}.")


def suite_families_text():
  """The families whose levels form suites, in words ("atari, dmlab or toy")."""
  names = [family.name for family in families() if family.forms_suites]
  return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def unknown_level_message(name):
  """"Unknown level name ...; did you mean ...? `...` lists every level and suite." """
  return "Unknown level name %r; %s" % (name, valid_names_message(name, list(suites.SUITES)))


def listed_names(suite_names=()):
  """Every listed level (and the given suite names), for suggestions."""
  return list(suite_names) + [name for family in families()
                              for name in family.listed_levels()]


def valid_names_message(name, suite_names=()):
  """A short hint: the names families offer for `name`, else the closest listed names (an
  Atari game by its bare name too), and the command that lists them all."""
  offered = [s for family in families() for s in family.suggestions(name or "")]
  if not offered:
    by_key = {key: full for full in listed_names(suite_names)
              for key in (full, full.split("/")[-1])}
    keys = difflib.get_close_matches(name or "", list(by_key), n=6, cutoff=0.6)
    offered = list(dict.fromkeys(by_key[key] for key in keys))
  close = offered[:3]
  hint = "did you mean %s? " % " or ".join(close) if close else ""
  return "%s`%s` lists every level and suite." % (hint, LIST_LEVELS_COMMAND)


def listing_groups():
  """(title, names) per family for the listing: its listed levels and its name forms."""
  return [(family.title, list(family.listed_levels()) + list(family.name_forms))
          for family in families()]


def all_names_text():
  """Every valid --level_name, one group a paragraph (what LIST_LEVELS_COMMAND prints): the
  suites, then each environment family's levels and name forms."""
  named = (f"<level>,<level>,... (a suite you name: levels of one family, "
           f"{suite_families_text()}, e.g. atari/pong,atari/breakout)")
  groups = [("Suites", list(suites.SUITES) + [named])] + listing_groups()
  return "\n\n".join("%s:\n  %s" % (title, "\n  ".join(names)) for title, names in groups)
