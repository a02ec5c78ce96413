#!/usr/bin/env bash
# The GPU checks in one command (issue 34): run it as it is, in a copy of the repository, on a
# machine with an NVIDIA GPU.
#
#   bash benchmarks/gpu/run_gpu_checks.sh OUTPUT_DIR            # everything (about 30 minutes)
#   bash benchmarks/gpu/run_gpu_checks.sh --dry-run OUTPUT_DIR  # the plan only, nothing run
#
# It creates a virtual environment (VENV_DIR, default ~/.venvs/scalable_agent_tf2_gpu; reused),
# installs requirements.txt there (TensorFlow 2.21 with its CUDA libraries: tensorflow[and-cuda]),
# prints the GPUs TensorFlow sees, runs the gpu test tier (python -m pytest tests -m gpu) and the
# GPU benchmark (python -m benchmarks.speed.throughput --gpu), and writes everything into
# OUTPUT_DIR:
#   nvidia-smi.txt      nvidia-smi and nvidia-smi -q (driver, CUDA version, the GPUs)
#   python.txt          the interpreter used
#   pip_install.log     the installation; pip_freeze.txt: what was installed
#   gpus.txt            TensorFlow's version, build (CUDA, cuDNN) and the GPUs it sees
#   gpu_tier.log        the tier's output (-v -rs: every test and every skip's reason)
#   gpu_tier.xml        the same as JUnit XML
#   benchmark.log       the benchmark's progress; benchmark/gpu_benchmark.md and .json: results
#   summary.txt         each step's exit status
# Needs: Linux x86-64, an NVIDIA driver recent enough for CUDA 12 (nvidia-smi works), Python
# 3.11 or 3.12 with venv (PYTHON=... to choose one), g++ (the dynamic_batching op is compiled at
# its first import), network access to PyPI. CUDA and cuDNN themselves come from pip
# (tensorflow[and-cuda]); no system CUDA is needed.
# Exit status: 0 when the tier passed (and the benchmark ran), 1 when the tier failed, 2 when the
# set-up failed (no suitable Python, installation failed, TensorFlow sees no GPU), 3 when only
# the benchmark failed.
set -u -o pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY_RUN=1
  shift
fi
if [[ $# -ne 1 || -z "${1:-}" ]]; then
  echo "usage: bash benchmarks/gpu/run_gpu_checks.sh [--dry-run] OUTPUT_DIR" >&2
  exit 2
fi

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$1" || { echo "error: cannot create the output folder $1" >&2; exit 2; }
OUT="$(cd "$1" && pwd)"
VENV_DIR="${VENV_DIR:-$HOME/.venvs/scalable_agent_tf2_gpu}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME COMMAND...: runs COMMAND in the repository (prints it only in a dry run), records
# its exit status in summary.txt and returns it.
step() {
  local name="$1"
  shift
  if [[ $DRY_RUN -eq 1 ]]; then
    note "would run [$name]: $*"
    return 0
  fi
  echo "== $name: $*"
  (cd "$REPO" && "$@")
  local status=$?
  note "$name: exit $status"
  return $status
}

choose_python() {
  local candidate
  for candidate in ${PYTHON:-} python3.12 python3.11 python3; do
    if command -v "$candidate" > /dev/null 2>&1 && "$candidate" -c \
        'import sys; sys.exit(0 if sys.version_info[:2] in ((3, 11), (3, 12)) else 1)' \
        2> /dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

note "run_gpu_checks.sh in $REPO, results in $OUT, venv $VENV_DIR ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
if [[ $DRY_RUN -eq 0 ]]; then
  (cd "$REPO" && git rev-parse HEAD 2>/dev/null && git status --short 2>/dev/null) \
      > "$OUT/tree.txt" || true
  { nvidia-smi && nvidia-smi -q; } > "$OUT/nvidia-smi.txt" 2>&1 \
      || note "warning: nvidia-smi failed (no NVIDIA driver?): see nvidia-smi.txt"
fi

BASE_PYTHON="$(choose_python)" || {
  note "error: no Python 3.11 or 3.12 found (tried \$PYTHON, python3.12, python3.11, python3); set PYTHON=/path/to/python3.12"
  exit 2
}
"$BASE_PYTHON" --version > "$OUT/python.txt" 2>&1
note "python: $BASE_PYTHON ($(cat "$OUT/python.txt"))"
PY="$VENV_DIR/bin/python"

if [[ ! -x "$PY" ]]; then
  step venv "$BASE_PYTHON" -m venv "$VENV_DIR" || exit 2
fi
step install bash -c "'$PY' -m pip install --upgrade pip && '$PY' -m pip install -r requirements.txt" \
    > >(tee "$OUT/pip_install.log") 2>&1 || { note "error: installation failed: see pip_install.log"; exit 2; }
step freeze bash -c "'$PY' -m pip freeze > '$OUT/pip_freeze.txt'"
step gpus "$PY" -c '
import tensorflow as tf
print("TensorFlow", tf.__version__)
build = tf.sysconfig.get_build_info()
print("built with CUDA", build.get("cuda_version"), "cuDNN", build.get("cudnn_version"))
gpus = tf.config.list_physical_devices("GPU")
print("GPUs seen:", len(gpus))
for gpu in gpus:
  print(" ", gpu.name, tf.config.experimental.get_device_details(gpu))
raise SystemExit(0 if gpus else 4)
' > >(tee "$OUT/gpus.txt") 2>&1 || { note "error: TensorFlow sees no GPU (gpus.txt): the tier would only skip"; exit 2; }

step gpu_tier "$PY" -m pytest tests -m gpu -v -rs --junitxml="$OUT/gpu_tier.xml" -n 0 \
    > >(tee "$OUT/gpu_tier.log") 2>&1
TIER_STATUS=$?
step benchmark "$PY" -m benchmarks.speed.throughput --gpu --output_dir="$OUT/benchmark" \
    > >(tee "$OUT/benchmark.log") 2>&1
BENCHMARK_STATUS=$?

if [[ $DRY_RUN -eq 1 ]]; then
  note "dry run: nothing was installed or run"
  exit 0
fi
if [[ $TIER_STATUS -ne 0 ]]; then
  note "the gpu tier FAILED (exit $TIER_STATUS): see gpu_tier.log"
  exit 1
fi
if [[ $BENCHMARK_STATUS -ne 0 ]]; then
  note "the gpu tier passed; the benchmark FAILED (exit $BENCHMARK_STATUS): see benchmark.log"
  exit 3
fi
note "the gpu tier passed; benchmark results in benchmark/gpu_benchmark.md"
exit 0
