"""A TensorFlow 2 reproduction of IMPALA (Espeholt et al., 2018), with IMPACT and LASER.

Rooms, each a subpackage whose docstring says what it holds and what it may import (the rules
are tests/project/test_import_rules.py's; docs/ARCHITECTURE.md lists them):
  configuration  settings tables, the papers' suites and level tables; no TensorFlow.
  environments   environment families (levels, presets, environments), the level registry,
                 how environments run; no TensorFlow.
  resolution     a run's configuration: flags + the family's presets, checked; no TensorFlow.
  agent          networks built from the environment's spec; action distributions.
  learning       V-trace, losses, optimizer, learners, replay buffers, input pipeline.
  acting         actor threads and the batched policy.
  transport      wire format, RPC, replay service.
  run            assembly, training and test supervisors, checkpoints, launcher.
  runfiles       the run's files (log, checkpoint layout, logdir); no TensorFlow.
  population     population-based training's driver; no TensorFlow.
  utils          signals, profiling, quiet TensorFlow import.
structures.py holds the records every room shares (no TensorFlow).
"""
