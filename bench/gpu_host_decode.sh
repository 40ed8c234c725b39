#!/usr/bin/env bash
# GPU evidence for the loader's image_device paths (docs/BENCHMARKS.md "Pixels finished on the device"), on the
# lent H200 machine, in one call:
#   bash bench/gpu_host_decode.sh OUTDIR [ROUNDS]
# 1. bench/gpu_decode.py --large 120: images/s of CPU decode, the CPU image path, the host's share with
#    image_decoder="pillow", and on the GPU nvJPEG, the nvJPEG image path and finish_batch of host-decoded images;
# 2. the audit's real-data wait under the three image paths (CPU workers; image_device=cuda with nvJPEG;
#    image_device=cuda with image_decoder=pillow), --sources imagefree,real, 3 workers, 45 steps, the three
#    run in rotating order for ROUNDS rounds (default 2); stops starting runs after 8 minutes.
# Wheels for packages missing there travel in .whl/ (device README).
set -uo pipefail
OUTDIR=$1; ROUNDS=${2:-2}
mkdir -p "$OUTDIR" /tmp/hd
. bench/gpu_env.sh
python3 -c "import torch, torchvision, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
echo "cpus $(nproc); $(uptime)"
python3 bench/gpu_decode.py --rounds 5 --large 120 2>&1 | tee "$OUTDIR/gpu_decode.txt"
declare -A ARGS=([cpu]="" [nvjpeg]="--loader-arg image_device=cuda" [pillow]="--loader-arg image_device=cuda --loader-arg image_decoder=pillow")
MODES=(cpu nvjpeg pillow)
for r in $(seq 1 "$ROUNDS"); do
  for i in 0 1 2; do
    m=${MODES[$(( (i + r - 1) % 3 ))]}
    [ "$SECONDS" -gt 480 ] && { echo "time: skipping $m round $r"; continue; }
    # shellcheck disable=SC2086
    timeout 150 python3 -m vlmdata audit --device cuda --sources imagefree,real --num-workers 3 --threads 8 \
      --max-steps 45 ${ARGS[$m]} -o "/tmp/hd/$m-$r" -q > "/tmp/hd/$m-$r.log" 2>&1
    echo "audit $m round $r: exit $? at ${SECONDS}s"
  done
done
python3 - <<'PY' 2>&1 | tee "$OUTDIR/data_wait.txt"
import glob, json, os, statistics
rows = {}
for path in sorted(glob.glob("/tmp/hd/*/report.json")):
    mode = os.path.basename(os.path.dirname(path)).rsplit("-", 1)[0]
    rep = json.load(open(path))
    s = rep["sources"]["real"]["summary"]
    rows.setdefault(mode, []).append((s["data_wait"]["steady"]["fraction"], s["stages_ms"]["data_wait"],
                                      rep["sources"]["real"]["summary"]["shape"]["ms_per_sample"]))
print("image path | runs | real steady data wait % (min / median / max) | data wait ms per step | ms per sample")
for mode, v in rows.items():
    f = [100 * x[0] for x in v]
    print(f"{mode} | {len(v)} | {min(f):.2f} / {statistics.median(f):.2f} / {max(f):.2f} | "
          f"{statistics.median(x[1] for x in v):.2f} | {statistics.median(x[2] for x in v):.1f}")
print("load", os.getloadavg())
PY
tar czf "$OUTDIR/host_decode_audits.tar.gz" -C /tmp hd
