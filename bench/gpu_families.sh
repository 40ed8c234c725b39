#!/usr/bin/env bash
# Every Qwen-VL family through the default compiled GPU audit (issue 35), on one H200, as a user would type it:
#   bash bench/gpu_families.sh OUTDIR [CELL...]
# CELL: NAME or NAME-rev (the reverse source order). NAME, each its Bridge recipe (tests/audit/fixtures, written by
# Bridge 0.6.2's own recipe functions) and its model's published config.json:
#   q2-7b     Qwen2-VL-7B         bridge_qwen2_5_vl_7b_sft.yaml        hf_qwen2_vl_7b.json     (Bridge 0.6.2 has no
#             Qwen2-VL recipe: the Qwen2.5-VL-7B SFT recipe's run settings, the Qwen2-VL model; the report notes it)
#   q25-3b    Qwen2.5-VL-3B       bridge_qwen2_5_vl_3b_sft.yaml        hf_qwen2_5_vl_3b.json   (SFT, in-batch packing)
#   q25-7b    Qwen2.5-VL-7B       bridge_qwen2_5_vl_7b_sft.yaml        hf_qwen2_5_vl_7b.json   (SFT, in-batch packing)
#   q3-4b     Qwen3-VL-4B         bridge_qwen3_vl_8b_sft.yaml          hf_qwen3_vl_4b.json     (Bridge 0.6.2 has no
#             2B/4B recipe: the 8B SFT recipe's run settings, the 4B model; the report notes the model mismatch)
#   q3-8b     Qwen3-VL-8B         bridge_qwen3_vl_8b_sft.yaml          hf_qwen3_vl_8b.json
#   a3b       Qwen3-VL-30B-A3B    bridge_qwen3_vl_30b_a3b_sft.yaml     hf_qwen3_vl_30b_a3b.json
#   a3b-pre   Qwen3-VL-30B-A3B    bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml (the pretrain-mock recipe as the run)
#   a3b-lora  Qwen3-VL-30B-A3B    bridge_qwen3_vl_30b_a3b_peft.yaml    (LoRA)
#   235b      Qwen3-VL-235B-A22B  bridge_qwen3_vl_235b_a22b_sft.yaml   hf_qwen3_vl_235b_a22b.json (a slice)
# NAME-pack (e.g. q3-8b-pack, q3-4b-pack-rev): the recipe with in-batch packing (--seq-policy pack); Bridge 0.6.2's
#   Qwen3-VL dense SFT recipes pad, and the issue asks for the dense family packed too.
# Default cells: q25-7b q25-3b q3-4b q3-8b a3b 235b (forward order). Each is the default 3-source audit
#   vlmdata audit --device cuda --bridge-config YAML --model-config JSON --sources imagefree,bridge-noise,real
# with the default plan (--compile all on CUDA, --budget-s 150 for the whole command, --max-steps 24), killed at
# ${FAM_TIMEOUT:-200} s (the issue's goal: a verdict within 3 minutes of wall time; a killed cell reads "no
# verdict"). FAM_STEPS / FAM_BUDGET give a shorter plan (--max-steps / --budget-s; the first matrix used 5 and 150
# when the default budget was 300 s). Device time: a cell is at most about 3 minutes, so a call of at most 10
# minutes takes three cells:
#   bash bench/gpu_families.sh $OUT q25-7b q25-3b q3-4b      then      bash bench/gpu_families.sh $OUT q3-8b a3b 235b
# Back in OUTDIR (four files whatever the number of cells, within the device's 8-file limit): summary.txt (one
# line per cell: exit code, seconds, the verdict line, compile seconds, graphs per part, fallbacks), matrix.md
# (bench/families_summary.py over the cells' reports), families.tar.gz (every cell's report.json/.md and its log,
# TORCH_LOGS=recompiles included, and bench/audit_traced.py's lines: when main returned, dynamo's compile-time
# breakdown, the stacks the exit waited on), smi.csv (GPU clocks every 500 ms). Env: FAM_STEPS, FAM_BUDGET, FAM_TIMEOUT,
# FAM_EXTRA (more audit flags, e.g. "--compile none" for the eager figures beside the compiled ones).
set -uo pipefail
OUTDIR=$1; shift
CELLS=("$@"); [ ${#CELLS[@]} -eq 0 ] && CELLS=(q25-7b q25-3b q3-4b q3-8b a3b 235b)
W=/tmp/fam
mkdir -p "$OUTDIR" $W
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=30 TORCH_LOGS=recompiles
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "cpus $(nproc); $(uptime)"
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu,memory.used,$R \
  --format=csv,noheader -lms 500 > "$OUTDIR/smi.csv" 2>/dev/null & SMI=$!
F=tests/audit/fixtures
recipe() {  # NAME -> "YAML JSON"
  case $1 in
    q2-7b) echo "$F/bridge_qwen2_5_vl_7b_sft.yaml $F/hf_qwen2_vl_7b.json" ;;
    q25-3b) echo "$F/bridge_qwen2_5_vl_3b_sft.yaml $F/hf_qwen2_5_vl_3b.json" ;;
    q25-7b) echo "$F/bridge_qwen2_5_vl_7b_sft.yaml $F/hf_qwen2_5_vl_7b.json" ;;
    q3-4b) echo "$F/bridge_qwen3_vl_8b_sft.yaml $F/hf_qwen3_vl_4b.json" ;;
    q3-8b) echo "$F/bridge_qwen3_vl_8b_sft.yaml $F/hf_qwen3_vl_8b.json" ;;
    a3b) echo "$F/bridge_qwen3_vl_30b_a3b_sft.yaml $F/hf_qwen3_vl_30b_a3b.json" ;;
    a3b-pre) echo "$F/bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml $F/hf_qwen3_vl_30b_a3b.json" ;;
    a3b-lora) echo "$F/bridge_qwen3_vl_30b_a3b_peft.yaml $F/hf_qwen3_vl_30b_a3b.json" ;;
    235b) echo "$F/bridge_qwen3_vl_235b_a22b_sft.yaml $F/hf_qwen3_vl_235b_a22b.json" ;;
  esac
}
for cell in "${CELLS[@]}"; do
  name=${cell%-rev}; src=imagefree,bridge-noise,real; pack=
  [ "$name" != "$cell" ] && src=real,bridge-noise,imagefree
  [ "${name%-pack}" != "$name" ] && { name=${name%-pack}; pack="--seq-policy pack"; }
  read -r yaml json <<< "$(recipe "$name")"
  if [ -z "${yaml:-}" ]; then echo "$cell: unknown cell" | tee -a "$OUTDIR/summary.txt"; continue; fi
  rm -rf "${W:?}/$cell"; t0=$SECONDS
  timeout "${FAM_TIMEOUT:-200}" python3 bench/audit_traced.py audit --device cuda --num-workers 3 --threads 8 \
    --bridge-config "$yaml" --model-config "$json" --sources "$src" \
    ${FAM_STEPS:+--max-steps $FAM_STEPS} ${FAM_BUDGET:+--budget-s $FAM_BUDGET} $pack ${FAM_EXTRA:-} -o "$W/$cell" \
    > "$W/$cell.log" 2>&1
  rc=$?; dt=$((SECONDS - t0))
  line=$(grep -E "^(MISLEADING|OK|UNDECIDED)" "$W/$cell.log" | head -1 | cut -c1-240)
  stats=$(python3 - "$W/$cell/report.json" <<'EOF' 2>/dev/null
import json, sys
c = ((json.load(open(sys.argv[1])).get("measurement") or {}).get("compile") or {})
by = c.get("by_part") or {}
print(f"compile {c.get('compile_seconds', 0):.0f} s, graphs " + " ".join(f"{p} {s.get('graphs')}" for p, s in by.items())
      + f", fallbacks {','.join(c.get('fallbacks') or []) or 0}")
EOF
)
  recompiles=$(grep -c "Recompiling function" "$W/$cell.log")
  ret=$(grep -o "main returned [0-9.]* s" "$W/$cell.log" | head -1)
  echo "$cell: exit $rc after $dt s (${ret:-main did not return}); ${line:-no verdict}; ${stats:-no report}; $recompiles recompiles logged" \
    | tee -a "$OUTDIR/summary.txt"
  [ $rc -ne 0 ] && grep -E "Error|Traceback" "$W/$cell.log" | tail -3
  tar czf "$OUTDIR/families.tar.gz" --exclude='*.html' --exclude=synthetic-twin -C /tmp fam  # a cut-off call keeps what ran
done
python3 bench/families_summary.py "${CELLS[@]/#/$W/}" > "$OUTDIR/matrix.md" 2>&1; cat "$OUTDIR/matrix.md"
tar czf "$OUTDIR/families.tar.gz" --exclude='*.html' --exclude=synthetic-twin -C /tmp fam
kill $SMI 2>/dev/null
