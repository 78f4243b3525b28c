#!/usr/bin/env bash
# shellcheck disable=SC2154 # out, bin and part come from gpu_setup (gpu-run.sh)
# gpu-check.sh runs m2n's GPU checks and benchmarks on a GPU machine that has
# no Go: the binaries are built elsewhere (make gpu-bins) into .devbin/.
# Logs go to $OUT (or ./gpu-out). Usage, from the repository root:
#   scripts/gpu-check.sh                # everything
#   PART=tests scripts/gpu-check.sh     # the test suites and the checked refit runs
#   PART=bench scripts/gpu-check.sh     # the benchmarks
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/gpu-run.sh"
gpu_setup
if [ "$part" = all ] || [ "$part" = tests ]; then
(cd cuda && run cuda-tests "$bin/cuda.test" -test.v -test.timeout 300s)
(cd cudamem && run cudamem-tests "$bin/cudamem.test" -test.v -test.timeout 300s)
(cd nccl && run nccl-tests "$bin/nccl.test" -test.v -test.timeout 120s)
(cd refit/gpu && run gpu-driver-tests "$bin/gpu.test" -test.v -test.timeout 300s)
(cd internal/nvlink && run nvlink-tests "$bin/nvlink.test" -test.v -test.timeout 60s)
run refit-cuda scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 8192x8192 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all,auto --check --iters 5
run refit-cuda-host scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 8192x8192 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all --check --iters 5 --driver host
run refit-cuda-graph scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 8192x8192 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all --check --iters 5 --driver graph
run refit-cuda-atomic scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 4096x4096 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all --check --atomic --iters 3
run refit-cuda-verify-atomic scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 4096x4096 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all --check --verify --atomic --iters 3
run refit-cuda-pp scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --pp-stages 1 --shape 4096x4096 --dtype bf16 \
	--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --route all --check --iters 3
# FP8 in flight through a prepared step, checked (fp8_runs, in gpu-run.sh).
fp8_runs
# The memory check before allocation reads the GPU's free memory (cuMemGetInfo): a footprint no GPU
# holds must fail naming GPU memory. (A refit run cannot show it: its host copies of the tensor are
# checked first and the host has less memory than the GPU.)
(cd session && run session-gpu-tests "$bin/session.test" -test.run GPU -test.v -test.timeout 120s)
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
run replay-bench scripts/mpirun.sh -np 1 "$bin/refit" replay-bench
run pack-bench "$bin/refit" pack-bench
run quant-bench "$bin/refit" quant-bench
fi
cat "$out/summary.txt"
