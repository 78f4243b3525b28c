#!/usr/bin/env bash
# gpu-multi.sh runs m2n's multi-GPU checks and the scaled single-layer
# benchmark on a machine of several GPUs with no Go (binaries from
# `make gpu-bins` in .devbin/). Logs go to $OUT (or ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
bin=$(pwd)/.devbin
ngpu=$(nvidia-smi --list-gpus | wc -l)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi topo -m; } >"$out/gpus.txt" 2>&1
run() { # name, command...
	local name=$1; shift
	echo "### $name: $*" | tee -a "$out/summary.txt"
	local t0=$SECONDS
	"$@" >"$out/$name.log" 2>&1
	echo "### $name: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}
[ "${SKIP_TESTS:-0}" = 1 ] || (cd refit/gpu && run gpu-multi "$bin/gpu.test" -test.run 'TestGPU' -test.v -test.timeout 300s)
E="--shape 256x2048x7168 --dtype bf16"
# 1 source GPU -> 1 destination GPU: the reshard against a plain NCCL send of the same bytes.
run bench-1to1 scripts/mpirun.sh -np 2 "$bin/refit" bench --device cuda $E --src-mesh 1 --src-placements S0 \
	--dst-mesh 1 --dst-placements S1 --iters 10 --json
# EP2 -> TP2 on the same two GPUs: strided boxes packed by the GPU kernels.
run bench-ep2-tp2 scripts/mpirun.sh -np 2 "$bin/refit" bench --device cuda $E --src-mesh 2 --src-placements S0 \
	--dst-mesh 2 --dst-placements S1 --dst-ranks 1,0 --iters 10 --json
# per-rank point-to-point bandwidth from the 1-to-1 plain send: bytes over time.
bw=$(python3 - "$out/bench-1to1.log" <<'PY'
import json, sys
rep = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{') and '"routes"' in l][0]
plain = [r for r in rep['routes'] if r['route'] == 'plain'][0]
print('%.0fB/s' % (rep['bytes'] / plain['median_s']))
PY
)
echo "measured NCCL point-to-point bandwidth per rank: $bw" | tee -a "$out/summary.txt"
# EP2 -> DP2 replicated, each GPU its own destination domain: flat, agbcast, hier (a ring of two domains) and auto,
# checked, with each route's bound from the measured bandwidth.
run routes-2dom scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda $E --src-mesh 2 --src-placements S0 \
	--dst-mesh 2 --dst-placements R --dst-ranks 0,1 --dst-domain-size 1 --net-bw "$bw" --local-bw "$bw" \
	--route all,auto --iters 5
# the same routes on a quarter of the tensor, every element checked.
run routes-2dom-check scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda --shape 64x2048x7168 --dtype bf16 \
	--src-mesh 2 --src-placements S0 --dst-mesh 2 --dst-placements R --dst-ranks 0,1 --dst-domain-size 1 \
	--route all,auto --check --iters 2
# FP8 in flight between the GPUs (every byte and scale checked), then the same reshards in bf16 and in FP8 back to back,
# and a scaled DeepSeek-V3 synced into an FP8 generator.
run fp8-ep2-tp2-check scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda --shape 64x2048x7168 --dtype bf16 \
	--src-mesh 2 --src-placements S0 --dst-mesh 2 --dst-placements S1 --dst-ranks 1,0 --dst-dtype e4m3 --route all,auto --check --iters 2
run fp8-2dom-check scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda --shape 64x2048x7168 --dtype bf16 \
	--src-mesh 2 --src-placements S0 --dst-mesh 2 --dst-placements R --dst-ranks 0,1 --dst-domain-size 1 --dst-dtype e4m3 \
	--route all,auto --check --iters 2
for dt in "" "--dst-dtype e4m3"; do
	n=bf16; [ -n "$dt" ] && n=fp8
	run "1to1-$n" scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda $E --src-mesh 1 --src-placements S0 \
		--dst-mesh 1 --dst-placements S1 --route flat --iters 10 --json $dt
	run "ep2-tp2-$n" scripts/mpirun.sh -np 2 "$bin/refit" run --device cuda $E --src-mesh 2 --src-placements S0 \
		--dst-mesh 2 --dst-placements S1 --dst-ranks 1,0 --route flat --iters 10 --json $dt
done
run fp8-sync scripts/mpirun.sh -np 2 "$bin/refit" sync --device cuda --model deepseek-v3 --scale 8 --layers 4 \
	--train tp=1 --gen tp=1 --dst-dtype e4m3 --check --iters 3
# Whole-model sync across the GPUs, every element checked, against a plain exchange of the same bytes
# (--baseline) and the model's bound at the measured bandwidth. With 4 or 8 GPUs: trainer and generator
# halves, two pipeline stages, each route forced with the generator as emulated domains of 2, then an
# FP8 generator. (Written for issue 18; no machine of several GPUs has run this block yet.)
if [ "$ngpu" -ge 4 ]; then
	case $ngpu in 4) tr=tp=1,pp=2 gen=tp=2 ;; *) tr=tp=1,pp=2,ep=2,dp=2 gen=tp=2,dp=2 ;; esac
	np=$((ngpu >= 8 ? 8 : 4))
	for m in deepseek-v3 qwen3-235b-a22b; do
		for route in flat agbcast hier; do
			run "sync-$m-$route" scripts/mpirun.sh -np $np "$bin/refit" sync --device cuda --model $m --scale 8 --layers 4 \
				--train $tr --gen $gen --dst-domain-size 2 --net-bw "$bw" --local-bw "$bw" --route $route --check --iters 5 --baseline
		done
		run "sync-$m-fp8" scripts/mpirun.sh -np $np "$bin/refit" sync --device cuda --model $m --scale 8 --layers 4 \
			--train $tr --gen $gen --dst-domain-size 2 --net-bw "$bw" --local-bw "$bw" --route auto --dst-dtype e4m3 --check --iters 5
	done
else
	for m in deepseek-v3 qwen3-235b-a22b; do
		run "sync-$m" scripts/mpirun.sh -np 2 "$bin/refit" sync --device cuda --model $m --scale 8 --layers 4 \
			--train tp=1 --gen tp=1 --check --iters 5 --baseline
	done
fi
cat "$out/summary.txt"
