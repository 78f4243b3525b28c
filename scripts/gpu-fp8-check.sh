#!/usr/bin/env bash
# shellcheck disable=SC2154 # out, bin and part come from gpu_setup (gpu-run.sh)
# gpu-fp8-check.sh runs the GPU checks and the benchmark of m2n's FP8 path
# (issue 24: the fused amax-quantize-pack kernels, the exact fast division,
# quant-bench beside the torch peer) on a GPU machine that has no Go, from
# the binaries make gpu-bins (or make gpu-fp8-bins, just the four it needs:
# refit, cuda.test, kernels.test, cudamem.test) builds into .devbin/. Logs go to $OUT (or
# ./gpu-out), a summary in $OUT/summary.txt. Usage, from the repository root:
#   scripts/gpu-fp8-check.sh                # everything (10 minutes or more: run the parts apart)
#   PART=tests scripts/gpu-fp8-check.sh     # the kernel tests and the checked FP8 refit runs (about 5 minutes)
#   PART=bench scripts/gpu-fp8-check.sh     # quant-bench: block scaling with the torch peer, row scaling,
#                                           # the bracket test and resident-block variants (about 5 minutes)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/gpu-run.sh"
gpu_setup
if [ "$part" = all ] || [ "$part" = tests ]; then
# The exact fast division over every bf16 significand and all 2^23 float32 scale significands
# in the five binades that matter (5 x 2^30 pairs, on the CPU cores), the corrected multiply over
# every 5th scale significand in 77 binade pairs (TestQfmaSweep), and the kernels' CPU twins.
(cd cuda/kernels && run fp8-qdiv-full env M2N_QDIV_FULL=1 "$bin/kernels.test" -test.run 'Qdiv|Qfma' -test.v -test.timeout 600s)
# The kernels on the GPU: NVRTC compiles the fused kernels (TestKernelSourceCompiles lists every entry),
# the fused cases and every bf16 pattern under 32 block scales, 2^24 f32 patterns, each mode, bit for
# bit with package fp8; the two-pass kernels' tests beside them; their emulated twins.
(cd cuda && run fp8-cuda-tests "$bin/cuda.test" -test.run 'KernelSource|Quant|Fused|Qdiv' -test.v -test.timeout 600s)
# The same fused tests with the bracket test making quotients exact (M2N_FUSED_DIV=bracket, m2n_q2_bracket).
(cd cuda && run fp8-cuda-fused-bracket env M2N_FUSED_DIV=bracket "$bin/cuda.test" -test.run 'Fused' -test.v -test.timeout 600s)
(cd cudamem && run fp8-cudamem-tests "$bin/cudamem.test" -test.run 'FP8|Fused|Amax|Quant' -test.v -test.timeout 300s)
# FP8 in flight through a prepared step, checked (fp8_runs, in gpu-run.sh).
fp8_runs
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
# quant-bench runs the torch peer with $M2N_PYTHON, else the first python3 on PATH: find one that
# imports torch (on the H200 machine torch lives in /opt/torch/.venv).
if [ -z "${M2N_PYTHON:-}" ]; then
	for p in $(which -a python3 2>/dev/null) /opt/torch/.venv/bin/python3 /usr/bin/python3; do
		if [ -x "$p" ] && "$p" -c 'import torch' 2>/dev/null; then export M2N_PYTHON=$p; break; fi
	done
fi
echo "torch peer python: ${M2N_PYTHON:-none found}" | tee -a "$out/summary.txt"
# The whole FP8 stage per GiB, fused against two-pass, at 256 B to 64 KiB rows, and the torch peer
# (torch.compile's block quantize of the same 1 GiB) in the same invocation, with the ratios.
run quant-bench-block "$bin/refit" quant-bench --mode block --rows 256,1KiB,4KiB,16KiB,64KiB
run quant-bench-row "$bin/refit" quant-bench --mode row --peer off
# The fused kernels with the bracket test instead of the midpoint test (bytes checked against stage-2pass).
run quant-bench-block-bracket env M2N_FUSED_DIV=bracket "$bin/refit" quant-bench --mode block --rows 256,4KiB,64KiB --peer off
# The fused kernels' resident blocks per SM (their __launch_bounds__; 5 by default), at 256 B and 4 KiB rows.
for minb in 3 4 6 8; do
	run quant-bench-fused-minb$minb env M2N_FUSED_MINB=$minb "$bin/refit" quant-bench --rows 256,4KiB --peer off --iters 10
done
fi
cat "$out/summary.txt"
