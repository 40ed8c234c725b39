#!/usr/bin/env bash
# GPU evidence for the audit-fidelity work (issue 19), on the lent H200 machine, in one call:
#   bash bench/gpu_fidelity.sh OUTDIR STAGE...
# STAGE: kernels (bench/step_kernels.py: attention before/after, stage TFLOP/s, profile, new-shape costs)
#        attention (bench/attention_kernels.py: the vision attention kernels alone, queue full, with their errors)
#        compiled  (bench/step_kernels.py --compiled-check: plain and compiled bf16 against fp32, small preset)
#        smoke   (a 2-step default audit and a 2-step Qwen3-VL-30B-A3B slice audit, imagefree vs real)
#        audit-ORDER-N   (the default GPU audit, ORDER fwd|rev, repeat N)
#        a3b-ORDER-N     (the Qwen3-VL-30B-A3B SFT recipe from its Bridge config: the default slice of its 3
#                         DeepStack + 2 plain layers at 16 experts each (EP 8), composed to 48 layers)
#        compose-ORDER-N (the h200 preset whole vs a 4-layer slice, sources imagefree,real: two audit processes)
#        check[-ORDER-N] (bench/compose_check.py: whole vs 4-layer slice in ONE process, same batches, interleaved rounds;
#                 the validation to use: between two processes the shared vision stage alone moved up to 11%;
#                 CHECK_POLICY=max pads to seq_length: a device-bound step, the default's is host-bound)
# Every audit here measures --steps N with the sources alternating every global step (rounds of 1); before
# 2026-12-02 --steps N made one block of N steps per source (docs/RESULTS.md says what that did).
# Reports land in OUTDIR/<stage>/ (markdown + json); a tarball of them at the end; OUTDIR/smi.csv logs the GPU clocks.
set -uo pipefail
OUTDIR=$1; shift
mkdir -p "$OUTDIR" /tmp/fid
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
echo "cpus $(nproc); $(uptime)"
# the GPU's clocks, power and throttle reasons every 250 ms, to tell power or thermal throttling from host noise
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$R \
  --format=csv,noheader -lms 250 > "$OUTDIR/smi.csv" 2>/dev/null & SMI=$!
FWD=imagefree,bridge-noise,synthetic,real
REV=real,synthetic,bridge-noise,imagefree
A3B=tests/audit/fixtures/bridge_qwen3_vl_30b_a3b_sft.yaml
run() {  # NAME TIMEOUT ARGS...
  local name=$1 t=$2; shift 2
  timeout "$t" python3 -m vlmdata audit --device cuda --num-workers 3 --threads 8 -o "/tmp/fid/$name" "$@" > "/tmp/fid/$name.log" 2>&1
  echo "$name: exit $? after $SECONDS s: $(grep -E '^(MISLEADING|OK)' "/tmp/fid/$name.log" | cut -c1-300)"
  tail -3 "/tmp/fid/$name.log" | grep -iE "error|Traceback" && tail -20 "/tmp/fid/$name.log"
}
for stage in "$@"; do
  IFS=- read -r kind order rep <<< "$stage"
  src=$FWD; [ "${order:-fwd}" = rev ] && src=$REV
  case $kind in
    check) timeout "${CHECK_TIMEOUT:-400}" python3 bench/compose_check.py --device cuda --slice-layers 4 --rounds "${CHECK_ROUNDS:-8}" \
             --sources "${CHECK_SOURCES:-$([ "${order:-fwd}" = rev ] && echo real,imagefree || echo imagefree,real)}" \
             ${CHECK_POLICY:+--seq-policy $CHECK_POLICY} \
             --out "$OUTDIR/compose-$stage${CHECK_POLICY:+-$CHECK_POLICY}" 2>&1 | tail -20 ;;
    kernels) timeout "${KERNELS_TIMEOUT:-400}" python3 bench/step_kernels.py --preset h200 --micro 16 --rounds 3 --profile \
               ${KERNELS_ARGS:-} --out "$OUTDIR/kernels" > "$OUTDIR/kernels.log" 2>&1
             echo "kernels: exit $?"; grep -E "^(contender|today|sdpa|varlen|perimage|warm-up|compiled|correctness|one-off|load|torch|Traceback|[A-Za-z]*Error)" "$OUTDIR/kernels.log" | cut -c1-600 ;;
    attention) timeout "${ATTN_TIMEOUT:-200}" python3 bench/attention_kernels.py --out "$OUTDIR/attention" \
                 > "$OUTDIR/attention.log" 2>&1; echo "attention: exit $?"; grep -vE "^\s*$" "$OUTDIR/attention.log" | cut -c1-300 | tail -14 ;;
    compiled) timeout 200 python3 bench/step_kernels.py --compiled-check > "$OUTDIR/compiled-check.txt" 2>&1
              echo "compiled: exit $?"; tail -3 "$OUTDIR/compiled-check.txt" | cut -c1-900 ;;
    smoke)
      run smoke-default 200 --steps 2 --sources imagefree,real
      run smoke-a3b 200 --bridge-config $A3B --steps 2 --sources imagefree,real ;;
    audit) run "$stage" "${AUDIT_TIMEOUT:-200}" --sources "$src" --steps "${AUDIT_STEPS:-12}" ;;
    a3b) run "$stage" "${A3B_TIMEOUT:-150}" --bridge-config $A3B --sources "$src" --steps "${A3B_STEPS:-6}" ;;
    compose)
      pair=imagefree,real; [ "${order:-fwd}" = rev ] && pair=real,imagefree
      run "$stage-whole" 120 --sources $pair --steps "${COMPOSE_STEPS:-6}"
      run "$stage-slice" 120 --sources $pair --steps "${COMPOSE_STEPS:-6}" --slice-layers 4 ;;
  esac
  tar czf "$OUTDIR/reports.tar.gz" --exclude=synthetic-twin -C /tmp fid  # after every stage: a cut-off call keeps what ran
done
for d in /tmp/fid/*/; do rm -rf "$d/synthetic-twin"; done
tar czf "$OUTDIR/reports.tar.gz" -C /tmp fid
kill $SMI 2>/dev/null
