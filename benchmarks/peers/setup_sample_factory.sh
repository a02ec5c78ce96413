#!/usr/bin/env bash
# Installs the peer implementation Sample Factory 2.1.1 (APPO, V-trace) into its own
# virtual environment for the side-by-side benchmarks in benchmarks/peers/. Never part of
# requirements.txt: the project itself does not use PyTorch or Sample Factory.
#
# Usage: bash benchmarks/peers/setup_sample_factory.sh [VENV_DIR]   (default /tmp/sf_venv,
#        or $SF_VENV). Safe to run again: installed packages are kept, the patch is skipped
#        when already applied, and the ROM import is repeated harmlessly.
#
# What it installs, and why each pin:
# - torch==2.13.0, first and pinned: Sample Factory asks for torch>=1.9,<3; an unpinned
#   request would resolve to a multi-GB CUDA build. 2.13.0 is a CPU build.
# - sample-factory==2.1.1 (the release the comparison names).
# - gymnasium[atari]==0.29.1: Sample Factory 2.1.1 needs gymnasium<1.0; 0.29.1's Atari extra
#   brings shimmy[atari] (which registers PongNoFrameskip-v4 with gymnasium) and ale-py 0.8.1.
#   Its usual ROM route, AutoROM's accept-rom-license, downloads ROMs at install time, which
#   an offline machine cannot do; instead the ROMs that ale-py 0.9.1's wheel ships are
#   imported into ale-py 0.8.1 with its own `ale-import-roms`.
# - numpy<2: Sample Factory 2.1.1's own bound.
# - box2d==2.3.10 and pygame==2.6.1 (the project's own pins): gymnasium 0.29.1's Box2D tasks
#   (LunarLander-v2) import both; its [box2d] extra pins box2d-py 2.3.5, which has no wheel and
#   would need swig to build.
# - the V-trace summaries guard (sample_factory_vtrace_summaries.patch, beside this file).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${1:-${SF_VENV:-/tmp/sf_venv}}"
PY="${PYTHON:-python3}"
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

quiet_pip install --quiet "torch==2.13.0"
quiet_pip install --quiet "torch==2.13.0" "sample-factory==2.1.1" \
  "gymnasium[atari]==0.29.1" "numpy<2" "box2d==2.3.10" "pygame==2.6.1"

# ROMs: take them from ale-py 0.9.1's wheel (it ships them) and import them into ale-py 0.8.1.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if ! "$VENV/bin/python" -c 'import ale_py.roms as r, sys; sys.exit(0 if hasattr(r, "Pong") else 1)' 2>/dev/null; then
  tmp="$(mktemp -d)"
  quiet_pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "ale-py==0.9.1"
  "$VENV/bin/python" -m zipfile -e "$tmp"/ale_py-0.9.1-*.whl "$tmp/wheel"
  "$VENV/bin/ale-import-roms" "$tmp/wheel/ale_py/roms" >/dev/null
  rm -rf "$tmp"
fi

# The V-trace summaries guard: apply once (a reverse dry run succeeding means applied).
LEARNER="$SITE/sample_factory/algo/learning/learner.py"
PATCH="$HERE/sample_factory_vtrace_summaries.patch"
if patch --dry-run -R -s -f -p1 -d "$SITE" < "$PATCH" >/dev/null 2>&1; then
  echo "V-trace summaries guard already applied to $LEARNER"
else
  patch -s -f -p1 -d "$SITE" < "$PATCH"
  echo "applied V-trace summaries guard to $LEARNER"
fi

# Check: the Pong environment builds and steps through Sample Factory's own Atari wrappers.
"$VENV/bin/python" - <<'PYEOF'
from importlib.metadata import version
import gymnasium as gym, torch
env = gym.make("PongNoFrameskip-v4")
obs, _ = env.reset(seed=0)
env.step(0)
lander, _ = gym.make("LunarLander-v2").reset(seed=0)
print(f"sample-factory {version('sample-factory')}, torch {torch.__version__}, "
      f"gymnasium {gym.__version__}, Pong obs {obs.shape}, LunarLander obs {lander.shape}")
PYEOF
echo "setup done in $(( $(date +%s) - start )) s: $VENV"
