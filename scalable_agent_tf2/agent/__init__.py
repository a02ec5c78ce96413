"""The agent: networks built from the environment's spec, and action distributions.

networks.py     the shallow and deep agents of the paper's Figure 3, the MLP and one-hot torsos
                for vector and index observations, the instruction encoder (acting `step`,
                learning `unroll`).
continuous_networks.py  agents with a diagonal Gaussian head (IMPACT's continuous control).
torsos.py, layers.py    the building blocks.
distributions.py  the action distributions (categorical, diagonal Gaussian): sample,
                log-probability, entropy, KL, as one object.

May import: configuration, structures, environments (specs only).
"""
