#!/usr/bin/env bash
# GPU evidence for the decision audit and the GPU image path, on a 2-GPU H200 machine, in one call:
#   GPU 0: vlmdata audit --sweep micro_batch_size=1,2,4,8 --sweep recompute=none,selective --sweep freeze_vision=0
#          then the default GPU audit with the loader's image_device=cuda (nvJPEG) path
#   GPU 1: the same sweep with freeze_vision=1, then bench/gpu_decode.py
# and the two half-sweeps merged into one decision report (bench/sweep_merge.py).
#   bash bench/gpu_decisions.sh OUTDIR
set -uo pipefail
OUTDIR=$1
mkdir -p "$OUTDIR" /tmp/ev
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
SWEEP=(--device cuda --sources imagefree,bridge-noise,real --sweep micro_batch_size=1,2,4,8
       --sweep recompute=none,selective --max-steps 10 --num-workers 2 --threads 8 --memory-limit-gb 80)
(CUDA_VISIBLE_DEVICES=0 timeout 400 python3 -m vlmdata audit "${SWEEP[@]}" --sweep freeze_vision=0 -o /tmp/ev/sweep0 \
   > /tmp/ev/sweep0.log 2>&1; echo "sweep0 exit $? at $SECONDS s"
 CUDA_VISIBLE_DEVICES=0 timeout 130 python3 -m vlmdata audit --device cuda --num-workers 3 --threads 8 --max-steps 45 \
   --loader-arg image_device=cuda -o /tmp/ev/nvjpeg -q > /tmp/ev/nvjpeg.log 2>&1; echo "nvjpeg audit exit $? at $SECONDS s") &
(CUDA_VISIBLE_DEVICES=1 timeout 400 python3 -m vlmdata audit "${SWEEP[@]}" --sweep freeze_vision=1 -o /tmp/ev/sweep1 \
   > /tmp/ev/sweep1.log 2>&1; echo "sweep1 exit $? at $SECONDS s"
 CUDA_VISIBLE_DEVICES=1 timeout 100 python3 bench/gpu_decode.py --rounds 5 > /tmp/ev/gpu_decode.txt 2>&1
 echo "gpu_decode exit $? at $SECONDS s") &
wait
python3 bench/sweep_merge.py /tmp/ev/sweep0 /tmp/ev/sweep1 -o /tmp/ev/decisions
for d in sweep0 sweep1; do rm -rf /tmp/ev/$d/config-*; done
tar czf "$OUTDIR/decisions.tar.gz" -C /tmp ev
cat /tmp/ev/gpu_decode.txt
grep -E "^(MISLEADING|OK)" /tmp/ev/nvjpeg.log | cut -c1-300
python3 - <<'PY'
import json
r = json.load(open("/tmp/ev/nvjpeg/report.json"))
for n, s in r["sources"].items():
    print(n, "data wait", round(s["summary"]["data_wait_fraction"] * 100, 2), "% step ms", round(s["summary"]["step_ms"]["median"], 1))
d = json.load(open("/tmp/ev/decisions/report.json"))["decisions"]
for n, p in d["per_source"].items():
    print(n, "best", p["best"])
    for row in p["rows"]:
        print("   ", row["config"], row["samples_per_s"], row["peak_mem_gb"], "oom" if row["oom"] else "", "" if row["fits"] else "no-fit")
for n, m in d["mocks"].items():
    print(n, m["line"], "tau", m["kendall_tau"])
PY
tail -3 /tmp/ev/sweep0.log /tmp/ev/sweep1.log
