#!/usr/bin/env bash
# GPU evidence for the decision audit's knob effects (issue 36, item 5), on one H200, one source order per call:
#   bash bench/gpu_knobs.sh OUTDIR [ORDER...]        ORDER: fwd (imagefree,real; the default) | rev (real,imagefree)
# Qwen3-VL-30B-A3B under its Bridge SFT recipe (--bridge-config tests/audit/fixtures/bridge_qwen3_vl_30b_a3b_sft.yaml,
# --model-config tests/audit/fixtures/hf_qwen3_vl_30b_a3b.json: GBS 32, EP 8 so DP 8 and 4 samples per step on this
# rank, seq 4096 padded; the default slice of 3 DeepStack + 2 plain layers composed to 48), the grid
#   freeze_vision=0,1 x micro_batch_size=1,2,4 x recompute=none,selective       (12 configurations)
# each configuration a full audit of imagefree and real (every shape warmed, ${STEPS:-6} global steps per source,
# interleaved step by step). The grid runs as two sweeps of 6 (recompute=none, then recompute=selective; a cut-off
# call keeps the first), merged by bench/sweep_merge.py into one decision report: every knob's effect per source
# with its interval, the knobs the image-free mock cannot see, best sets, peak memory against 80/141/192 GB.
# One order is about 4.5 minutes of GPU time (eager kernels: COMPILE=none by default; COMPILE=all adds the
# compile warm-up to every configuration); call it again with `rev` for the other order, then line the runs up:
#   python3 bench/knob_summary.py OUT1/knobs-fwd OUT2/knobs-rev
# Env: STEPS (6), COMPILE (none), PART_TIMEOUT (150 s per half grid), AUDIT_EXTRA (more audit flags).
# Back in OUTDIR: knobs-ORDER/report.{json,md} (the merged report), knobs-ORDER.log, summary.txt, smi.csv.
set -uo pipefail
OUTDIR=$1; shift
ORDERS=("$@"); [ ${#ORDERS[@]} -eq 0 ] && ORDERS=(fwd)
mkdir -p "$OUTDIR" /tmp/knobs
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "cpus $(nproc); $(uptime)"
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu,memory.used,$R \
  --format=csv,noheader -lms 500 > "$OUTDIR/smi.csv" 2>/dev/null & SMI=$!
F=tests/audit/fixtures
AUDIT=(--device cuda --num-workers 3 --threads 8 --bridge-config $F/bridge_qwen3_vl_30b_a3b_sft.yaml
       --model-config $F/hf_qwen3_vl_30b_a3b.json --compile "${COMPILE:-none}" --steps "${STEPS:-6}"
       --sweep freeze_vision=0,1 --sweep micro_batch_size=1,2,4 ${AUDIT_EXTRA:-})
for order in "${ORDERS[@]}"; do
  src=imagefree,real; [ "$order" = rev ] && src=real,imagefree
  parts=()
  for rc in none selective; do
    name="$order-$rc"; t0=$SECONDS
    timeout "${PART_TIMEOUT:-150}" python3 -m vlmdata audit "${AUDIT[@]}" --sources "$src" --sweep recompute=$rc \
      -o "/tmp/knobs/$name" > "/tmp/knobs/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - t0)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
    grep -E "^configuration [0-9]+/" "/tmp/knobs/$name.log" | tail -1
    tail -3 "/tmp/knobs/$name.log" | grep -iE "error|Traceback" && tail -25 "/tmp/knobs/$name.log"
    [ -f "/tmp/knobs/$name/report.json" ] && parts+=("/tmp/knobs/$name")
    rm -rf /tmp/knobs/$name/config-*
  done
  cat /tmp/knobs/$order-*.log > "$OUTDIR/knobs-$order.log"
  if [ ${#parts[@]} -gt 0 ]; then
    python3 bench/sweep_merge.py "${parts[@]}" -o "$OUTDIR/knobs-$order" > "/tmp/knobs/merge-$order.txt" 2>&1
    echo "merged $order: exit $?"; cut -c1-1500 "/tmp/knobs/merge-$order.txt"
    rm -f "$OUTDIR/knobs-$order/report.html"  # json + md come back (the files limit); html rebuilds from the json
  fi
done
kill $SMI 2>/dev/null
python3 bench/knob_summary.py "$OUTDIR"/knobs-*/ > "$OUTDIR/summary.txt" 2>&1
cat "$OUTDIR/summary.txt"
