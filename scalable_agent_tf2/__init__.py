"""A TensorFlow 2 reproduction of IMPALA (Espeholt et al., 2018), with IMPACT and LASER.

Rooms, each a subpackage whose docstring says what it holds and what it may import (the rules
are tests/project/test_import_rules.py's; docs/ARCHITECTURE.md lists them):
  configuration  settings tables, a run's resolved config, the command lines; no TensorFlow.
  environments   environment families (levels, presets, environments), the level registry,
                 the papers' suites, how environments run; no TensorFlow.
  agent          networks built from the environment's spec; action distributions.
  learning       V-trace, losses, optimizer, learners, replay buffers, input pipeline.
  acting         actor threads and the batched policy.
  transport      wire format, RPC, replay service.
  run            assembly, training and test supervisors, checkpoints, launcher.
  runfiles       the run's files (log, checkpoint layout, logdir); no TensorFlow.
  population     population-based training's driver; no TensorFlow.
  utils          signals, profiling, quiet TensorFlow import.
structures.py holds the records every room shares (no TensorFlow).

The public API of a trained policy (docs/POLICY_API.md), policy.py's, loaded (with TensorFlow)
at the first use of a name, so that importing a TensorFlow-free room stays light:
  scalable_agent_tf2.load_policy(path)          a logdir's or a policy folder's agent
  scalable_agent_tf2.make_environment(level)    a level's environment as a gymnasium.Env
"""

_POLICY_NAMES = ("load_policy", "make_environment", "Policy", "PolicyError", "PolicyState")
__all__ = list(_POLICY_NAMES)


def __getattr__(name):
  """policy.py's names, imported at their first use (PEP 562)."""
  if name not in _POLICY_NAMES:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  from scalable_agent_tf2 import policy  # pylint: disable=g-import-not-at-top
  return getattr(policy, name)
