#!/usr/bin/env bash
# GPU evidence for docs/RESULTS.md, run on the lent H200 (one call): environment, a smoke audit,
# then the reference audit. Wheels for packages missing there travel in .whl/ (see docs/RESULTS.md).
#   bash bench/gpu_audit.sh OUTDIR [steps]
set -uo pipefail
OUTDIR=${1:-out}; STEPS=${2:-20}
mkdir -p "$OUTDIR"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'gpus', torch.cuda.device_count())"
echo "== smoke: small preset, 2 steps"
timeout 150 python3 -m vlmdata audit --device cuda --preset small --steps 2 --warmup 1 --seq-length 2048 -o /tmp/smoke -q; echo "smoke exit $?"
echo "== reference audit: h200 preset, $STEPS steps, pad to 4096 as Bridge's MoE step does"
NP=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "$NP" -gt 1 ]; then
  timeout 420 torchrun --nproc-per-node "$NP" -m vlmdata audit --device cuda --preset h200 --steps "$STEPS" --warmup 4 \
    --seq-length 4096 --micro-batch-size 2 --pad-to-max-length --num-workers 4 -o "$OUTDIR/h200x$NP"; echo "audit exit $?"
else
  timeout 420 python3 -m vlmdata audit --device cuda --preset h200 --steps "$STEPS" --warmup 4 \
    --seq-length 4096 --micro-batch-size 2 --pad-to-max-length --num-workers 4 -o "$OUTDIR/h200"; echo "audit exit $?"
fi
