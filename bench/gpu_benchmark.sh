#!/usr/bin/env bash
# GPU evidence for the benchmark-against-run audit (issue 30), on the lent H200 machine, in one call:
#   bash bench/gpu_benchmark.sh OUTDIR STAGE...
# STAGE: smoke          (a 5-step tiny benchmark-vs-run audit: the path runs on CUDA)
#        a3b-ORDER-N    (Qwen3-VL-30B-A3B: Bridge 0.6.2's pretrain-mock recipe as the benchmark, its SFT recipe as the
#                        run; both YAMLs written by Bridge's own recipe functions, tests/audit/fixtures/)
#        b235-ORDER-N   (Qwen3-VL-235B-A22B as a slice: pretrain-mock (256 GPUs: DP 2) against SFT (32 GPUs))
# ORDER fwd|rev reverses --sources. Every audit: vlmdata audit --device cuda --num-workers 3 --threads 8 --steps
# ${STEPS:-5}, the sources interleaved step by step with every counterfactual arm (m@run, the chain, real@benchmark).
# Reports land in OUTDIR/<stage>/ (markdown + json; a tarball of all at the end); OUTDIR/summary.txt holds the
# headline and the factors of every run (bench/benchmark_summary.py).
set -uo pipefail
OUTDIR=$1; shift
mkdir -p "$OUTDIR" /tmp/bm
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "cpus $(nproc); $(uptime)"
F=tests/audit/fixtures
run() {  # NAME TIMEOUT ARGS...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" python3 -m vlmdata audit --device cuda --num-workers 3 --threads 8 -o "/tmp/bm/$name" "$@" > "/tmp/bm/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - t0)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  grep -E "^(benchmark vs run|MISLEADING|OK|UNDECIDED)" "/tmp/bm/$name.log" | cut -c1-400
  tail -3 "/tmp/bm/$name.log" | grep -iE "error|Traceback" && tail -25 "/tmp/bm/$name.log"
  cp "/tmp/bm/$name.log" "$OUTDIR/" 2>/dev/null
}
for stage in "$@"; do
  IFS=- read -r kind order rep <<< "$stage"
  src=imagefree,bridge-noise,real; [ "${order:-fwd}" = rev ] && src=real,bridge-noise,imagefree
  case $kind in
    smoke) run smoke 200 --preset small --sources imagefree,real --steps 5 \
             --benchmark-set freeze_language_model=true --benchmark-set freeze_vision_model=true --benchmark-set tp=2 ;;
    a3b) run "$stage" "${A3B_TIMEOUT:-420}" --model-config $F/hf_qwen3_vl_30b_a3b.json \
           --bridge-config $F/bridge_qwen3_vl_30b_a3b_sft.yaml --benchmark-config $F/bridge_qwen3_vl_30b_a3b_pretrain_mock.yaml \
           --sources "$src" --steps "${STEPS:-5}" ;;
    b235) s235=imagefree,real; [ "${order:-fwd}" = rev ] && s235=real,imagefree
          run "$stage" "${B235_TIMEOUT:-420}" --model-config $F/hf_qwen3_vl_235b_a22b.json \
           --bridge-config $F/bridge_qwen3_vl_235b_a22b_sft.yaml --benchmark-config $F/bridge_qwen3_vl_235b_a22b_pretrain_mock.yaml \
           --benchmark-set dp=2 --sources "$s235" --steps "${STEPS:-5}" ;;
  esac
  for d in /tmp/bm/*/; do rm -rf "$d/synthetic-twin"; done
  tar czf "$OUTDIR/reports.tar.gz" -C /tmp bm  # after every stage: a cut-off call keeps what ran
  python3 bench/benchmark_summary.py /tmp/bm/*/report.json > "$OUTDIR/summary.txt" 2>&1
done
cat "$OUTDIR/summary.txt"
