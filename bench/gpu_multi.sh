#!/usr/bin/env bash
# Multi-GPU evidence (issues 22 and 23), for an nvidia-h200-x2 / -x8 machine when one is lent:
#   bash bench/gpu_multi.sh OUTDIR STAGE...
# STAGE: audit-ORDER-N   torchrun on every GPU: the default GPU audit (Bridge semantics), ORDER fwd|rev
#        sweep           --sweep parallel=ddp,fsdp --sweep micro_batch_size=1,2,4, real vs both mocks, 80 GB limit
#        a2a             bench/a2a_bench.py: the expert-parallel all-to-all at the composition's message sizes
# Every audit report carries "straggler_check": the straggler model's slowest-rank prediction against the
# measured slowest rank of every step. Reports in OUTDIR/reports.tar.gz (updated after every stage).
set -uo pipefail
OUTDIR=$1; shift
mkdir -p "$OUTDIR" /tmp/multi
. bench/gpu_env.sh
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "gpus $NGPU; cpus $(nproc); $(uptime)"
FWD=imagefree,bridge-noise,synthetic,real
REV=real,synthetic,bridge-noise,imagefree
for stage in "$@"; do
  IFS=- read -r kind order rep <<< "$stage"
  src=$FWD; [ "${order:-fwd}" = rev ] && src=$REV
  case $kind in
    audit) timeout 500 torchrun --nproc-per-node "$NGPU" -m vlmdata audit --device cuda --sources "$src" \
             --num-workers 3 --threads 4 --max-steps "${AUDIT_STEPS:-8}" -o "/tmp/multi/$stage" -q > "/tmp/multi/$stage.log" 2>&1 ;;
    sweep) timeout 580 torchrun --nproc-per-node "$NGPU" -m vlmdata audit --device cuda --sources imagefree,bridge-noise,real \
             --sweep parallel=ddp,fsdp --sweep micro_batch_size=1,2,4 --memory-limit-gb 80 --max-steps 3 \
             --num-workers 2 --threads 4 -o "/tmp/multi/$stage" -q > "/tmp/multi/$stage.log" 2>&1 ;;
    a2a) timeout 200 torchrun --nproc-per-node "$NGPU" bench/a2a_bench.py > "/tmp/multi/$stage.log" 2>&1 ;;
  esac
  echo "$stage: exit $? after $SECONDS s"; tail -3 "/tmp/multi/$stage.log"
  tar czf "$OUTDIR/reports.tar.gz" --exclude=synthetic-twin -C /tmp multi
done
