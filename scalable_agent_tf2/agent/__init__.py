"""The agent: networks built from the environment's spec, and action distributions.

networks.py     the agent, composed from its config: torso by the observation's kind
                (Figure 3's for frames, the MLP for vectors, one-hot for indices), core (LSTM
                or none) and the action distribution's head; its presets (Figure 3's agents,
                the IMPACT paper's continuous-control networks) and network_config_for_spec;
                the instruction encoder (acting `step`, learning `unroll`).
heads.py        the policy head, sized by the action distribution's parameter count.
torsos.py, layers.py    the building blocks.
distributions.py  the action distributions (categorical, multi-categorical, diagonal
                Gaussian) as TF objects: sample, log-probability, entropy, KL.
action_families.py  each action kind's shapes: head size, action spec, previous-action
                features, numpy sampling; for_spec (the family of an environment's spec).

May import: configuration, structures, environments (specs only).
"""
