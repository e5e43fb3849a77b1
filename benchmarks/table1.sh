#!/usr/bin/env bash
# RIR paper Table 1: 100 ListOps samples per length bin (200-250, 500-600, 900-1000, 1500-2000), batch 1,
# training-mode forward + backward, ListOps hyperparameters; minutes and peak memory per bin per model.
# Usage: bash benchmarks/table1.sh [cpu|cuda] [models] [samples]
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${1:-cpu}; MODELS=${2:-rir_ebt_grc,rir_grc,bbt_grc,s4d}; N=${3:-100}; OUT=${OUT:-bench_out}; mkdir -p "$OUT"
${RIRLAB:-.venv/bin/rirlab} bench --protocol table1 --device "$DEV" --models "$MODELS" --samples "$N" --json "$OUT/table1_$DEV.json"
