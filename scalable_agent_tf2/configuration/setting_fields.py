"""What a setting is: a dataclass field of a settings table (settings.py, command_settings.py) that
carries its topic, help, source, choices and check, so that each setting is written once.

    mode: str = setting(TRAIN, RUN, "Train, or evaluate the latest checkpoint.", choices=MODES)
    batch_size: Optional[int] = preset_setting(LEARNER, "Trajectories per update.",
                                               check=POSITIVE_INT)

A `Check` is a condition with the words of its requirement: a bad value reads "--name must be
<requirement>, got <value>." (settings.check_value). No TensorFlow here."""
import dataclasses
import json
import math
from typing import Any
from typing import Callable

PRESET = None  # The default of a setting whose value comes from the level's preset.
REQUIRED = dataclasses.MISSING  # reuse(..., default=REQUIRED): the flag must be given.


@dataclasses.dataclass(frozen=True)
class Check:
  """A condition on one value: `holds(value)`; else "--name must be <requirement>"."""
  holds: Callable[[Any], bool]
  requirement: str


def _is_json_object(text):
  try:
    return not text or isinstance(json.loads(text), dict)
  except ValueError:
    return False


POSITIVE_INT = Check(lambda v: v >= 1, "a positive integer")
NON_NEGATIVE = Check(lambda v: v >= 0, ">= 0")
POSITIVE = Check(lambda v: v > 0, "positive")
UNIT_INTERVAL = Check(lambda v: 0.0 <= v <= 1.0, "in [0, 1]")
AT_LEAST_ONE = Check(lambda v: v >= 1.0, ">= 1 (IMPACT section 3.1)")
OPEN_UNIT_INTERVAL = Check(lambda v: 0.0 < v < 1.0, "in (0, 1)")
TRUST_REGION = Check(lambda v: not math.isnan(v) and v >= 0, ">= 0 (inf: off)")
JSON_OBJECT = Check(_is_json_object, "a JSON object of gymnasium.make's keyword arguments, e.g. "
                    "'{\"continuous\": true}' (or empty)")
WHOLE_POSITIVE = Check(lambda v: v >= 1 and float(v).is_integer(), "a positive integer")
A_NUMBER = Check(lambda v: not math.isnan(v), "a number")
FINITE = Check(math.isfinite, "a finite number")
GPU_MEMORY = Check(lambda v: v in ("growth", "all") or (v.isdigit() and int(v) > 0),
                   "growth, all, or a positive number of MiB")
OFF_OR_POSITIVE = Check(lambda v: v >= 0, ">= 0 (0: off)")
PORT = Check(lambda v: 0 <= v <= 65535, "a port number, 0-65535 (0: a free one)")


def setting(default, topic, doc, *, source="", choices=None, check=None, part_of=None,
            preset=False):
  """A field of a table: its default; topic (its section in --help); doc (the flag's help);
  source (the paper's section or table, or the released code); choices (an enum flag); check
  (a Check every value but None must pass); part_of (FOR_LEARNER or FOR_IMPACT: also a field
  of that derived config); preset (the default is PRESET, the level's value)."""
  return dataclasses.field(default=default, metadata=dict(
      topic=topic, doc=doc, source=source, choices=choices, check=check, part_of=part_of,
      preset=preset, reused_from=None))


def preset_setting(topic, doc, **kwargs):
  """A setting whose default is PRESET: the level's family gives its value (and its source)."""
  return setting(PRESET, topic, doc, preset=True, **kwargs)


_SAME = object()


def reuse(table, name, *, default=_SAME, topic=None, doc=None):
  """Setting `name` of `table` as a field of another command's table: the same flag, whose type
  (the annotation, which test_settings_tables.py compares), choices, check and source stay the
  definition's, so it means and checks the same in every command; the command may give its own
  default (REQUIRED: no default), topic and help text."""
  original = {f.name: f for f in dataclasses.fields(table)}[name]
  if original.metadata["reused_from"]:
    raise ValueError(f"Reuse {name} from {original.metadata['reused_from']}, its definition.")
  metadata = dict(original.metadata, reused_from=f"{table.__name__}.{name}", part_of=None,
                  preset=False, topic=topic or original.metadata["topic"],
                  doc=doc or original.metadata["doc"])
  return dataclasses.field(default=original.default if default is _SAME else default,
                           metadata=metadata)
