"""The settings tables and the papers' level tables, at the bottom of the house: data and
their checks, without TensorFlow.

settings.py        experiment.py's settings table: every flag defined once with its source and
                   check; the choices and topics every table shares.
setting_fields.py  what a setting is: its field (topic, help, source, choices, Check), reuse.
command_settings.py  the other commands' tables (population, replay service, launcher).
command_line.py    a table as a command line: absl flags, argparse parsers, --help.
suites.py          the paper's suites (DMLab-30, Atari-57), their level names, human and
                   random scores, human-normalised scores.
mujoco_presets.py  the IMPACT paper's continuous-control settings (Table 2).

May import: structures, utils; nothing with TensorFlow. The environment families
(environments/families) read these tables; a run's configuration is resolved above them
(resolution/).
"""
