"""A run's configuration, resolved above the environment families, without TensorFlow.

presets.py  the paper's settings for a level or suite, asked of its family (environments/
            families), and the algorithms' own (IMPACT Table 1, the IMPACT paper's Atari
            setting, LASER); threads per op.
config.py   flags + presets -> one checked run configuration; the derived configs
            (LearnerConfig, ImpactConfig) as classes.
combinations.py  the checks and defaults that involve more than one setting.
citations.py  where each preset and derived value of a run comes from (--show_settings'
            brackets), from the families' citations and the derivations of config.resolve.

May import: structures, utils, configuration, environments (the families and their level
registry); nothing with TensorFlow. Nothing below it imports it.
"""
