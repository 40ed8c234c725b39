#!/usr/bin/env bash
# GPU evidence for docs/RESULTS.md (issue "audit numbers you can trust"), on the lent H200 machine.
#   SMOKE=1 bash bench/gpu_audit.sh OUTDIR MAX_STEPS JOB [JOB ...]
# A JOB is PAD-ORDER-REPEAT[-xN]: PAD default|padded (--pad-to-max-length), ORDER fwd|rev (the default
# --sources order or its reverse), -xN runs it under torchrun on N GPUs. Jobs run in waves, as many at
# once as there are free GPUs (each single-GPU run interleaves its own sources, so host contention falls
# on all of its sources alike). Every run: vlmdata audit --device cuda --num-workers 3 --max-steps MAX_STEPS.
# Wheels for packages missing there travel in .whl/ (device README). Results: OUTDIR/runs-*.tar.gz (the
# reports) and the spread table of bench/audit_spread.py at the end of the output.
set -uo pipefail
OUTDIR=$1; MAX_STEPS=$2; shift 2
mkdir -p "$OUTDIR" /tmp/runs
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__, 'gpus', torch.cuda.device_count())"
echo "cpus $(nproc); $(uptime)"
if [ "${SMOKE:-0}" = 1 ]; then
  timeout 150 python3 -m vlmdata audit --device cuda --preset small --steps 5 --num-workers 2 -o /tmp/runs/smoke -q \
    > /tmp/runs/smoke.log 2>&1
  rc=$?; echo "smoke exit $rc"; tail -5 /tmp/runs/smoke.log
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || exit 1
fi
FWD=imagefree,bridge-noise,synthetic,real
REV=real,synthetic,bridge-noise,imagefree
run_one() {  # JOB FIRST_GPU
  local job=$1 g=$2 pad order n=1 extra=() devs launcher
  IFS=- read -r pad order _ xn <<< "$job"
  [ -n "${xn:-}" ] && n=${xn#x}
  [ "$pad" = padded ] && extra+=(--pad-to-max-length)
  local src=$FWD; [ "$order" = rev ] && src=$REV
  devs=$(seq -s, "$g" $((g + n - 1)))
  if [ "$n" -gt 1 ]; then launcher=(torchrun --nproc-per-node "$n" --master-port $((29500 + g)) -m vlmdata)
  else launcher=(python3 -m vlmdata); fi
  CUDA_VISIBLE_DEVICES=$devs timeout "${RUN_TIMEOUT:-280}" "${launcher[@]}" audit --device cuda --sources "$src" \
    --num-workers 3 --threads 8 --max-steps "$MAX_STEPS" "${extra[@]}" -o "/tmp/runs/$job" -q > "/tmp/runs/$job.log" 2>&1
  echo "$job on GPUs $devs: exit $? after $SECONDS s: $(grep -E '^(MISLEADING|OK)' "/tmp/runs/$job.log" | cut -c1-160)"
}
jobs=("$@")
i=0
while [ $i -lt ${#jobs[@]} ]; do
  g=0
  while [ $i -lt ${#jobs[@]} ]; do
    need=1; [[ ${jobs[$i]} == *-x* ]] && need=${jobs[$i]##*-x}
    [ $((g + need)) -le "$NGPU" ] || break
    run_one "${jobs[$i]}" "$g" &
    g=$((g + need)); i=$((i + 1))
  done
  wait
  echo "wave done at $SECONDS s; $(uptime)"
done
for j in "${jobs[@]}"; do rm -rf "/tmp/runs/$j/synthetic-twin"; done
tar czf "$OUTDIR/runs-$(date +%H%M%S).tar.gz" -C /tmp runs
python3 bench/audit_spread.py "${jobs[@]/#//tmp/runs/}" --json "$OUTDIR/spread.json"
