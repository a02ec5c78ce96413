"""Settings and their resolution, without TensorFlow.

settings.py     the settings tables: every command line's flags, each defined once with its
                source and check (experiment, population, replay service, launcher).
presets.py      the paper's per-level values (Tables D.1-D.3, G.1), resolved by family.
config.py       flags + presets -> one checked run configuration; the derived configs
                (NetworkConfig, LearnerConfig, ImpactConfig) as classes.
suites.py       level names and suites (DMLab-30, Atari-57), human and random scores.
mujoco_presets.py  the IMPACT paper's continuous-control settings.

May import: structures, environments (level checks and descriptions), nothing with TensorFlow.
"""
