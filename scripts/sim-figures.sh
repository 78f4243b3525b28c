#!/usr/bin/env bash
# sim-figures.sh: the simulator's figures in docs/, from refit sim --json
# (the inputs are kept in docs/sim/):
#   docs/sim-rho-paper.png     the paper's single layer (7.168 GB bf16, 16 EP
#                              sources -> TP8 x rho) on GB200 NVL72: bound,
#                              simulated and the paper's measurements per route
#   docs/sim-rho-emulated.png  refit sweep's emulated CPU runs: bound,
#                              simulated and measured (bench/results/sim-vs-emulated)
#   docs/sim-links.png         link utilisation over time of hier at rho 8
#   docs/sim-models.png        whole-model bars (scripts/sim-published.sh makes it)
# REFIT (default bin/refit) is the refit to use.
set -euo pipefail
cd "$(dirname "$0")/.."
REFIT=${REFIT:-bin/refit}
mkdir -p docs/sim
layer=(--shape 256x2000x7000 --dtype bf16 --src-mesh 16 --src-placements S0 --dst-placements R,S1 --cluster gb200-nvl72)
: >docs/sim/paper-layer.jsonl
for rho in 2 4 8; do
  "$REFIT" sim "${layer[@]}" --dst-mesh "${rho}x8" --json >>docs/sim/paper-layer.jsonl
done
"$REFIT" plot rho --in docs/sim/paper-layer.jsonl --paper --out docs/sim-rho-paper.png \
  --title "Paper's single layer (7.168 GB bf16, 16 EP -> TP8 x rho) on GB200 NVL72"
"$REFIT" plot rho --in bench/results/sim-vs-emulated/sim.jsonl --domains 1 --out docs/sim-rho-emulated.png \
  --title "Emulated CPU runs (16 MiB bf16, 2 S0 -> TP2 x rho, 50 MB/s NICs, 1 domain)"
"$REFIT" sim "${layer[@]}" --dst-mesh 8x8 --chunk-bytes 16MiB --staging-bytes 256MiB --route hier --json >docs/sim/links-hier-rho8.json
"$REFIT" plot links --in docs/sim/links-hier-rho8.json --out docs/sim-links.png
