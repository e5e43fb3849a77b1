#!/usr/bin/env bash
# The issue's speed bar for RIR-EBT-GRC at the ListOps settings (hidden 128, beam 7, chunk 30, S4D on,
# dropout 0.1): median of several steps after warm-up, JSON per case under ${OUT:-bench_out}/.
# Bar on the 2-core CPU: train 16x100 <= 300 ms, train 1x1000 <= 300 ms, non-RIR eval 1x1000 <= 1200 ms.
# Usage: bash benchmarks/speed_bar.sh [cpu|cuda] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${1:-cpu}; REP=${2:-9}; OUT=${OUT:-bench_out}; mkdir -p "$OUT"
RIR=${RIRLAB:-.venv/bin/rirlab}
$RIR bench --protocol step --device "$DEV" --repeats "$REP" --batch 16 --length 100 --mode train --json "$OUT/train_16x100.json"
$RIR bench --protocol step --device "$DEV" --repeats "$REP" --batch 1 --length 1000 --mode train --json "$OUT/train_1x1000.json"
$RIR bench --protocol step --device "$DEV" --repeats "$REP" --batch 1 --length 1000 --mode eval --inference non_rir \
  --json "$OUT/eval_nonrir_1x1000.json"
