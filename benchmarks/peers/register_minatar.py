"""Registers MinAtar's gymnasium ids ("MinAtar/Breakout-v1", ...) when imported.

minatar 1.0.15 declares its ids as a "gymnasium.envs" entry point, which gymnasium 1.x no
longer loads, and importing minatar.gym does not register them either (its register_envs()
must be called). This module is the registering module of gymnasium's own "module:Id" form,
which this project's gym family takes for a user's package:

    python experiment.py --mode=train \\
        --level_name=gym:benchmarks.peers.register_minatar:MinAtar/Breakout-v1

Benchmark-only: minatar is not in requirements.txt (benchmarks/requirements-minatar.txt).
"""
import gymnasium

MINATAR_INSTALL = "pip install --no-deps -r benchmarks/requirements-minatar.txt"
try:
  import minatar.gym
except ImportError as error:  # Named here, where a run of ours or the peer's imports it.
  raise ImportError(f"{error}: MinAtar is a benchmark-only package; {MINATAR_INSTALL}"
                    ) from error

if "MinAtar/Breakout-v1" not in gymnasium.registry:  # Imported twice: register once.
  minatar.gym.register_envs()
