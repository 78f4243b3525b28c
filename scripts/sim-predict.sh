#!/usr/bin/env bash
# sim-predict.sh: the simulator against the emulated-network CPU runs, in one
# run. For refit sweep's configurations (a 16 MiB bf16 tensor on 2 sources
# S0 to DP rho x TP2 [R, S1], rho 2, 4, 8 over 1 and 2 destination domains,
# 512 KiB chunks, 4 MiB staging, the network emulated at 50 MB/s per rank),
# it runs every route for real under mpirun (refit run --emulate-net-bw
# --json) and simulates the same schedules on the cluster that emulation
# makes (refit sim --measured: NICs at the cap, the local fabric at the
# bandwidth the run measured, the model's 20 us per message, strided regions
# in place), and prints measured beside predicted with the ratio. The goal is
# predictions within 15% of the measured times.
#
#   scripts/sim-predict.sh [OUT]     # OUT: a directory for the JSON (default: a temp dir)
#
# REFIT (default bin/refit), RHOS (2 4 8), DOMAINS (1 2), ITERS (3), CAP
# (50MB/s) and SOURCES (2) change the defaults. OUT/sim.jsonl holds the refit
# sim reports (with measured_s per route) for refit plot. With REUSE=1 the
# runs already in OUT (run-rho<R>-d<D>.json, made the same way on another
# machine, say) are simulated instead of run again.
set -euo pipefail
cd "$(dirname "$0")/.."
REFIT=${REFIT:-bin/refit}
RHOS=${RHOS:-2 4 8}
DOMAINS=${DOMAINS:-1 2}
ITERS=${ITERS:-3}
CAP=${CAP:-50MB/s}
SOURCES=${SOURCES:-2}
TP=2
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
: >"$OUT/sim.jsonl"
[ "${REUSE:-0}" = 1 ] || echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
within=0
total=0
for rho in $RHOS; do
  for nd in $DOMAINS; do
    np=$((SOURCES + TP * rho))
    layout=(--shape 2048x4096 --dtype bf16 --src-mesh "$SOURCES" --src-placements S0 --dst-mesh "${rho}x${TP}" --dst-placements R,S1)
    run="$OUT/run-rho$rho-d$nd.json"
    [ "${REUSE:-0}" = 1 ] && [ -s "$run" ] || scripts/mpirun.sh -np "$np" "$REFIT" run "${layout[@]}" --dst-domain-size $((TP * rho / nd)) --emulate-net-bw "$CAP" \
      --chunk-bytes 512KiB --staging-bytes 4MiB --route all --iters "$ITERS" --json --log-level warn >"$run"
    echo
    echo "== rho $rho, $nd destination domain(s), $np ranks"
    "$REFIT" sim "${layout[@]}" --measured "$run" | tail -n +8 | tee "$OUT/table.txt"
    "$REFIT" sim "${layout[@]}" --measured "$run" --json >>"$OUT/sim.jsonl"
    read -r w t < <(awk 'NR > 1 && NF > 3 { n++; r = $6 + 0; if (r >= 0.85 && r <= 1.15) w++ } END { print w + 0, n + 0 }' "$OUT/table.txt")
    within=$((within + w))
    total=$((total + t))
  done
done
echo
echo "$within of $total predictions within 15% of the measured time (JSON in $OUT)"
