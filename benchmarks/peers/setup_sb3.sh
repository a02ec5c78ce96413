#!/usr/bin/env bash
# Installs the peer Stable-Baselines3 2.9.2 (PPO) and RL Baselines3 Zoo 2.9.2 (its tuned
# hyperparameters) into their own virtual environment for the gymnasium side by side of
# benchmarks/peers/gym_defaults_side_by_side.py. Never part of requirements.txt: the project
# itself does not use PyTorch or Stable-Baselines3.
#
# Usage: bash benchmarks/peers/setup_sb3.sh [VENV_DIR]   (default /tmp/sb3_venv, or $SB3_VENV).
#        Safe to run again: pip keeps what is installed at the pinned versions.
#
# What it installs, and why each pin:
# - torch==2.13.0, first and pinned, a CPU build: Stable-Baselines3 asks for torch>=2.8,<3; an
#   unpinned request resolves to PyPI's Linux wheel, a CUDA build that pulls about 3 GB of
#   nvidia-* and cuda-* packages. From PyTorch's CPU index when it answers (2.13.0+cpu);
#   otherwise `torch==2.13.0` as pip finds it: on this project's machines that is the
#   2.13.0+cpu wheel pip's configuration offers beside PyPI (the one setup_sample_factory.sh
#   uses), elsewhere PyPI's CUDA build (it runs on a CPU too). The check below prints which.
# - stable-baselines3==2.9.2, the release the comparison names (torch>=2.8, gymnasium<2).
# - gymnasium==1.4.0, numpy==2.4.6, box2d==2.3.10, pygame==2.6.1, mujoco==3.3.7, imageio==2.38.1: the project's own pins
#   (requirements-runtime.txt), so that both systems step the same environments' code
#   (LunarLander-v3 and BipedalWalker-v3 from Box2D 2.3.10's wheel: no swig build).
# - rl-zoo3==2.9.2 (and what it brings: sb3-contrib, optuna, shimmy, huggingface-hub, ...):
#   its hyperparams/ppo.yml and ExperimentManager set up sb3_gym.py --hyperparams=zoo. If it
#   does not install, the script says so and goes on: the default PPO runs need only SB3.
# - minigrid==3.2.0 and minatar==1.0.15 without their dependencies: minigrid declares pygame-ce,
#   a fork installing the same `pygame` module as pygame 2.6.1 (benchmarks/
#   requirements-minigrid.txt); minatar declares matplotlib, pandas, scipy and seaborn, used
#   only to draw the game (its environments need numpy alone; it logs a warning without them).
set -euo pipefail

VENV="${1:-${SB3_VENV:-/tmp/sb3_venv}}"
PY="${PYTHON:-python3}"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
quiet_pip() {
  "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

if ! "$VENV/bin/python" -c \
    'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  if curl -sSf -m 10 -o /dev/null "$TORCH_CPU_INDEX/torch/" 2>/dev/null; then
    quiet_pip install --quiet --index-url "$TORCH_CPU_INDEX" "torch==2.13.0+cpu"
  else
    echo "$TORCH_CPU_INDEX does not answer: torch==2.13.0 from pip's own indexes"
    quiet_pip install --quiet "torch==2.13.0"
  fi
fi
quiet_pip install --quiet "torch==2.13.0" "stable-baselines3==2.9.2" "gymnasium==1.4.0" \
  "numpy==2.4.6" "box2d==2.3.10" "pygame==2.6.1" "mujoco==3.3.7" "imageio==2.38.1"
if ! quiet_pip install --quiet "torch==2.13.0" "stable-baselines3==2.9.2" "gymnasium==1.4.0" \
    "numpy==2.4.6" "rl-zoo3==2.9.2"; then
  echo "rl-zoo3 2.9.2 did not install: --systems=rl_zoo3 (sb3_gym.py --hyperparams=zoo) refuses"
fi

# Last, so that no later install reports their undeclared dependencies as conflicts.
quiet_pip install --quiet --no-deps "minigrid==3.2.0" "minatar==1.0.15"

# Check: the development set's environments build and step (MinAtar registers its ids only
# when asked: gymnasium 1.x no longer loads the "gymnasium.envs" entry points it declares).
"$VENV/bin/python" - <<'PYEOF'
import logging
logging.disable(logging.WARNING)  # minatar's warning that it cannot draw without seaborn.
from importlib.metadata import version, PackageNotFoundError
import gymnasium as gym, minigrid, torch
import minatar.gym
minatar.gym.register_envs()
shapes = []
for env_id, kwargs in [("CartPole-v1", {}), ("LunarLander-v3", {"continuous": True}),
                       ("Pendulum-v1", {}), ("MiniGrid-Unlock-v0", {}),
                       ("MinAtar/Breakout-v1", {}), ("BipedalWalker-v3", {}),
                       ("Hopper-v5", {}), ("Reacher-v5", {})]:
  env = gym.make(env_id, **kwargs)
  env.reset(seed=0)
  env.step(env.action_space.sample())
  space = env.observation_space
  shapes.append(f"{env_id} {getattr(space, 'shape', None) or type(space).__name__}")
try:
  zoo = f"rl-zoo3 {version('rl-zoo3')}"
except PackageNotFoundError:
  zoo = "no rl-zoo3"
print(f"stable-baselines3 {version('stable-baselines3')}, {zoo}, torch {torch.__version__}, "
      f"gymnasium {gym.__version__}, minigrid {version('minigrid')}, "
      f"minatar {version('minatar')}\n  " + "; ".join(shapes))
PYEOF
echo "setup done in $(( $(date +%s) - start )) s: $VENV"
