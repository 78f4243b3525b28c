#!/usr/bin/env bash
# sim-published.sh: the published whole-model weight-sync configurations,
# simulated with refit sim, each route with the pipeline stages concurrent
# and one after another, beside the published figures; then the plots of
# docs/ (refit plot). Writes OUT/published.jsonl (the reports, stages
# concurrent), OUT/published-seq.jsonl (stages one after another) and prints
# the tables.
#
#   scripts/sim-published.sh [OUT]     # default OUT: docs/sim
#
# REFIT (default bin/refit) is the refit to use; ROUTES (default all) the
# routes; MODES (default "concurrent sequential") the stage arrangements.
# refit sim prints each configuration's published anchors (nccl_m2n,
# NeMo-RL, Perplexity) under its table.
set -euo pipefail
cd "$(dirname "$0")/.."
REFIT=${REFIT:-bin/refit}
ROUTES=${ROUTES:-all}
MODES=${MODES:-concurrent sequential}
OUT=${1:-docs/sim}
mkdir -p "$OUT"
: >"$OUT/published.jsonl"
: >"$OUT/published-seq.jsonl"
gb200=(--cluster gb200-nvl72 --src-domain-size 64 --dst-domain-size 64)
configs=(
  "DeepSeek-V3 128+128 GB200 (EP16 expert-DP2 PP4 -> TP8 DP16)|--model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16 ${gb200[*]}"
  "Qwen3-235B-A22B 64+64 GB200 (TP2 CP2 EP16 PP4 -> TP8 DP8)|--model qwen3-235b-a22b --train tp=2,cp=2,dp=4,pp=4,ep=16,etp=1 --gen tp=8,dp=8 ${gb200[*]}"
  "DeepSeek-V3 128+128 GB200, FP8 generator|--model deepseek-v3 --train tp=1,dp=32,pp=4,ep=16 --gen tp=8,dp=16 --dst-dtype e4m3 ${gb200[*]}"
  "NeMo-RL DeepSeek-V3 256+256 HGX (PP16 EP16 -> TP32 DP8)|--model deepseek-v3 --train pp=16,dp=16,ep=16 --gen tp=32,dp=8 --cluster hgx-h200"
  "Kimi-K2 256 -> 128 GB200, FP8 generator (EP32 PP4 -> TP8 DP16)|--model kimi-k2 --train tp=1,dp=64,pp=4,ep=32 --gen tp=8,dp=16 --dst-dtype e4m3 ${gb200[*]}"
)
for c in "${configs[@]}"; do
  name=${c%%|*}
  # shellcheck disable=SC2206
  args=(${c#*|})
  for mode in $MODES; do
    extra=()
    file="$OUT/published.jsonl"
    if [ "$mode" = sequential ]; then
      extra=(--sequential-stages)
      file="$OUT/published-seq.jsonl"
    fi
    echo
    echo "== $name, stages $mode"
    echo "\$ refit sim ${args[*]} --stripe --route $ROUTES ${extra[*]}"
    "$REFIT" sim "${args[@]}" --stripe --route "$ROUTES" "${extra[@]}" --per-stage --bins 64 --json-out "$file"
  done
done
mkdir -p docs
"$REFIT" plot models --in "$OUT/published.jsonl" --out docs/sim-models.png --width 9 --height 5
