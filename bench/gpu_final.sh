set -uo pipefail
. bench/gpu_env.sh
export VLMDATA_PROGRESS_INTERVAL=60
mkdir -p /tmp/ev
CUDA_VISIBLE_DEVICES=0 timeout 110 python3 -m vlmdata audit --device cuda --num-workers 3 --threads 8 --max-steps 45 --loader-arg image_device=cuda -o /tmp/ev/nvjpeg -q > /tmp/ev/nvjpeg.log 2>&1; echo "nvjpeg exit $? at $SECONDS"
for o in fwd rev; do
  src=imagefree,bridge-noise,synthetic,real; [ $o = rev ] && src=real,synthetic,bridge-noise,imagefree
  timeout 130 torchrun --nproc-per-node 2 -m vlmdata audit --device cuda --sources $src --num-workers 3 --threads 8 --max-steps 24 -o /tmp/ev/x2-$o -q > /tmp/ev/x2-$o.log 2>&1; echo "x2-$o exit $? at $SECONDS"
done
rm -rf /tmp/ev/*/synthetic-twin; tar czf $OUT/final.tar.gz -C /tmp ev
grep -hE "^(MISLEADING|OK)" /tmp/ev/*.log | cut -c1-250
python3 bench/audit_spread.py /tmp/ev/x2-fwd /tmp/ev/x2-rev /tmp/ev/nvjpeg 2>&1 | tail -30
