"""The settings tables and the papers' level tables, at the bottom of the house: data and
their checks, without TensorFlow.

settings.py        the settings tables: every command line's flags, each defined once with its
                   source and check (experiment, population, replay service, launcher).
suites.py          the paper's suites (DMLab-30, Atari-57), their level names, human and
                   random scores, human-normalised scores.
mujoco_presets.py  the IMPACT paper's continuous-control settings (Table 2).

May import: structures, utils; nothing with TensorFlow. The environment families
(environments/families) read these tables; a run's configuration is resolved above them
(resolution/).
"""
