"""A settings table as a command line: experiment.py's absl flags (`define_flags`), the other
commands' argparse parsers (`CommandParser`), and the --help text both print (`help_text`: each
flag with its type or choices, default, help and source, by topic), all generated from the tables
(settings.py, command_settings.py), so that a flag's help never differs from its definition. No
TensorFlow here."""
import argparse
import dataclasses
import textwrap
from typing import Optional

from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.configuration.setting_fields import REQUIRED


def _base_type(field):
  """int for Optional[int], and so on."""
  hint = field.type
  return next((t for t in (bool, int, float, str) if hint in (t, Optional[t])), str)


def _flag_help(field):
  text = field.metadata["doc"]
  if field.metadata["preset"] and "Default" not in text:
    text += " (default: the level's preset)"
  return text


def define_flags(flag_values):
  """Defines one absl flag per setting on `flag_values` (absl.flags.FLAGS in experiment.py),
  under its topic's title as its module, so absl's --helpfull groups them by topic too."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  for field in settings.all_settings():
    kwargs = dict(flag_values=flag_values, module_name=settings.TOPICS[field.metadata["topic"]])
    if field.metadata["choices"] is not None:
      kwargs["enum_values"] = list(field.metadata["choices"])
      define = flags.DEFINE_enum
    else:
      define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                str: flags.DEFINE_string}[_base_type(field)]
    define(field.name, field.default, help=_flag_help(field), **kwargs)


def help_text(width=100, tables=settings.TABLES):
  """The settings of `tables` (experiment.py's by default) by topic: flag, type or choices,
  default, help and source (--help)."""
  lines = []
  fields = [field for table in tables for field in dataclasses.fields(table)]
  for topic, title in command_settings.ALL_TOPICS.items():
    in_topic = [f for f in fields if f.metadata["topic"] == topic]
    lines += ["", f"{title}:"] if in_topic else []
    for field in in_topic:
      choices = field.metadata["choices"]
      kind = "|".join(repr(c) if c == "" else c for c in choices) if choices else (
          _base_type(field).__name__)
      default = ("required" if field.default is REQUIRED else "default: the level's preset"
                 if field.metadata["preset"] else f"default: {field.default!r}")
      lines.append(f"  --{field.name}: {kind} ({default})")
      source = field.metadata["source"]
      text = field.metadata["doc"] + (f" [Source: {source}.]" if source else "")
      lines += textwrap.wrap(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
  return "\n".join(lines)


class CommandParser(argparse.ArgumentParser):
  """The argparse parser of a command whose flags are a table's settings (one flag each).

  argparse converts the values (a malformed number: its usage error, exit 2); the table's checks run
  in `parse_settings` (or `settings.check_values`), so a bad value reads as experiment.py's do.
  --help lists the flags by topic with their defaults and sources, as experiment.py's does."""

  def __init__(self, table, prog, description, **kwargs):
    super().__init__(prog=prog, description=description, **kwargs)
    self.table = table
    fields = dataclasses.fields(table)
    groups = {topic: self.add_argument_group(command_settings.ALL_TOPICS[topic])
              for topic in dict.fromkeys(field.metadata["topic"] for field in fields)}
    for field in fields:
      options = dict(dest=field.name, help=_flag_help(field).replace("%", "%%"),
                     default=field.default, required=field.default is REQUIRED)
      if _base_type(field) is bool:
        if field.default is not False:
          raise ValueError(f"--{field.name}: a command's bool flag is off by default.")
        options["action"] = "store_true"
      else:
        options.update(type=_base_type(field), choices=field.metadata["choices"])
      groups[field.metadata["topic"]].add_argument(f"--{field.name}", **options)

  def format_help(self):
    description = textwrap.fill(self.description, 100)
    return (f"{self.format_usage()}\n{description}\n\nFlags ({self.prog} "
            f"--flag=value):\n{help_text(tables=(self.table,))}\n")

  def parse_settings(self, argv=None, known_only=False):
    """(the table's instance, the arguments it left: those after "--" with `known_only`).
    ValueError: a value fails its setting's check, naming the flag."""
    arguments, rest = self.parse_known_args(argv) if known_only else (self.parse_args(argv), [])
    values = self.table(**{f.name: getattr(arguments, f.name)
                           for f in dataclasses.fields(self.table)})
    settings.check_values(values)
    return values, rest
