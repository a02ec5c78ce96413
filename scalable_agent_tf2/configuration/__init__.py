"""A run's configuration in one place, without TensorFlow: every setting, its resolution for a
run, and the command lines made from them.

settings.py          experiment.py's settings table: every flag once, with its default, topic,
                     help, source and check; the names of the settings' choices.
setting_fields.py    what a setting is (its field, its Check) and how another command reuses it.
command_settings.py  the other commands' tables (population, replay service, launcher).
command_line.py      a table as a command line: absl flags, argparse parsers, --help.
config.py            flags + the family's presets -> one checked run config (ExperimentConfig);
                     the learner's configs (LearnerConfig, ImpactConfig) made from the table.
combinations.py      the checks and defaults that combine several settings.
experiment_flags.py  experiment.py's command line: parsing, --help, --show_settings.

May import: structures, utils, environments (the families' presets, the level registry, the
papers' suites). The families read the names of settings.py, which imports none of them."""
