#!/usr/bin/env bash
# Re-run every figure of docs/BENCHMARKS.md; each step prints the markdown table that goes into the doc.
#
#   bash bench/run_benchmarks.sh [OUTDIR]                 # default OUTDIR: ./bench-results
#
# PY: the interpreter with vlmdata (default: python). PEERS_PY: one that also has torchvision, qwen-vl-utils,
# mosaicml-streaming and litdata (default: $PY; missing peers are skipped with a note). SAMPLES (2000),
# ROUNDS (5), LARGE (240: samples of the large-photo set, 2.0-4.2 MP; 0 leaves it out), SKIP_RSS=1 to leave
# out the 1k/10k/100k peak-RSS run (about 15 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-results}
PY=${PY:-python}
PEERS_PY=${PEERS_PY:-$PY}
SAMPLES=${SAMPLES:-2000}
ROUNDS=${ROUNDS:-5}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONWARNINGS=ignore
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== input: $SAMPLES COCO-like photos, built once for the loader and synth benchmarks"
$PY -c "from vlmdata.benchmarks.build import make_photo_input; print(make_photo_input('$TMP/src', $SAMPLES))"
$PY -m vlmdata build "$TMP/src/data.jsonl" -o "$TMP/ds" -q

echo "== bench build (whole commands, 1 process a side)"
$PY -m vlmdata bench build "$TMP/src/data.jsonl" --rounds "$ROUNDS" --workers 1 -q | tee "$OUT/build.md"

echo "== bench loader (one core)"
$PEERS_PY -m vlmdata bench loader "$TMP/ds" --samples 192 --rounds "$ROUNDS" -q | tee "$OUT/loader.md"

echo "== bench synth (one core)"
$PY -m vlmdata bench synth "$TMP/ds" --samples 64 --rounds "$ROUNDS" -q | tee "$OUT/synth.md"

echo "== peers (write / read / read + decode)"
$PEERS_PY bench/peers.py --samples "$SAMPLES" --rounds "$ROUNDS" --decode --json "$OUT/peers.json" | tee "$OUT/peers.md"

echo "== --help start-up"
$PY bench/help_time.py "$(dirname "$PY")/vlmdata" | tee "$OUT/help.md"

LARGE=${LARGE:-240}
if [ "$LARGE" != 0 ]; then
  echo "== loader on large photos ($LARGE samples of 2.0-4.2 MP JPEGs, one core)"
  $PY -c "from vlmdata.benchmarks.build import make_photo_input; make_photo_input('$TMP/large', $LARGE, seed=2, large=True)"
  $PY -m vlmdata build "$TMP/large/data.jsonl" -o "$TMP/ds_large" -q
  $PEERS_PY -m vlmdata bench loader "$TMP/ds_large" --samples 64 --rounds "$ROUNDS" -q | tee "$OUT/loader_large.md"
fi

if [ "${SKIP_RSS:-0}" != 1 ]; then
  echo "== peak RSS at 1k, 10k, 100k samples"
  $PY bench/rss.py | tee "$OUT/rss.md"
fi
