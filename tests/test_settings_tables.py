"""The settings tables stay the one home of every setting: the derived configs written out in
config.py follow them, and every command's flags come from them, each defined once."""
import dataclasses
import math

import pytest

from scalable_agent_tf2 import config as config_lib
from scalable_agent_tf2 import presets
from scalable_agent_tf2 import settings

# What the current code gives each derived config by default (config.py's docstrings).
LEARNER_DEFAULTS = dict(presets.DMLAB30, max_grad_norm=None)  # DMLab-30; None: no clipping.
IMPACT_DEFAULTS = dict(presets.IMPACT_PRESET, target_update_period=(  # Section 4.1.1: N x K.
    presets.IMPACT_PRESET["circular_buffer_size"]
    * presets.IMPACT_PRESET["circular_buffer_max_uses"]))


@pytest.mark.parametrize("derived, part_of, defaults, constants", [
    (config_lib.LearnerConfig, settings.FOR_LEARNER, LEARNER_DEFAULTS,
     dict(settings.VTRACE_CONSTANTS)),
    (config_lib.ImpactConfig, settings.FOR_IMPACT, IMPACT_DEFAULTS, {}),
])
def test_derived_configs_hold_every_marked_setting_with_its_preset(derived, part_of, defaults,
                                                                  constants):
  fields = {f.name: f for f in dataclasses.fields(derived)}
  marked = [f.name for f in settings.fields_part_of(part_of)]
  missing = [name for name in marked if name not in fields]
  assert not missing, f"{derived.__name__} lacks the settings {missing} marked {part_of!r}"
  assert set(fields) == set(marked) | set(constants), "a field no setting marks"
  assert list(fields)[:len(marked)] == marked  # The table's order, then the constants.
  for name in marked:
    assert fields[name].default == defaults[name], (derived.__name__, name)
  for name, value in constants.items():
    assert fields[name].default == value, name
  assert dataclasses.is_dataclass(derived) and derived.__dataclass_params__.frozen
  for name in fields:  # Each field is explained, with its source, in the class docstring.
    assert f"    {name}: " in derived.__doc__, name


def test_derived_configs_keep_their_checks():
  with pytest.raises(ValueError, match="^momentum must be >= 0"):
    config_lib.LearnerConfig(momentum=-0.1)
  with pytest.raises(ValueError, match="max_grad_norm must be positive or None"):
    config_lib.LearnerConfig(max_grad_norm=0.0)
  with pytest.raises(ValueError, match="needs off_policy_correction='vtrace'"):
    config_lib.LearnerConfig(trust_region_threshold=0.5, off_policy_correction="none")
  with pytest.raises(ValueError, match="^ppo_clip must be in \\(0, 1\\)"):
    config_lib.ImpactConfig(ppo_clip=1.5)
  assert not config_lib.LearnerConfig().uses_trust_region
  assert config_lib.LearnerConfig(trust_region_threshold=0.5).uses_trust_region
  with pytest.raises(dataclasses.FrozenInstanceError):
    config_lib.LearnerConfig().momentum = 1.0  # pytype: disable=not-writable
  assert math.isinf(config_lib.LearnerConfig().trust_region_threshold)
