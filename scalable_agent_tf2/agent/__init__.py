"""The agent: networks built from the environment's spec, and action distributions.

networks.py     the agent, composed from its config: torso by the observation's kind
                (Figure 3's for frames, the MLP for vectors, one-hot for indices), core (LSTM
                or none) and the action distribution's head; its presets (Figure 3's agents,
                the IMPACT paper's continuous-control networks) and network_config_for_spec;
                `unroll` over [T, B] (acting runs it with T = 1, acting/policies.py), and the
                run's observation filter where the network reads vectors.
torsos.py       the building blocks: seeded initializers, Linear, Conv2D, LSTM, the torsos.
heads.py        the policy head, sized by the action distribution's parameter count.
language.py     the instruction channel: word hashing and the encoder (Figure 3).
distributions.py  each action kind's family (head size, action spec, previous-action
                features, numpy sampling; for_spec, the family of an environment's spec) and
                its distribution as a TF object (log-probability, entropy, KL, sample).

May import: configuration, structures, environments (specs only).
"""
