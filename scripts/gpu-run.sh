# shellcheck shell=bash
# gpu-run.sh, sourced by gpu-check.sh, gpu-fp8-check.sh and gpu-python.sh,
# defines run and gpu_setup:
# run NAME COMMAND... runs the command with its output in $out/NAME.log and
# notes it, its exit status, its time and the log's last 25 lines in
# $out/summary.txt;
# fp8_runs runs the checked FP8 refit runs (see below);
# gpu_setup sets out ($OUT or ./gpu-out, made), bin (.devbin/, where make
# gpu-bins puts the binaries) and part ($PART or all), exports the
# settings the GPU runs share, and notes the GPU in $out/gpu.txt.
# shellcheck disable=SC2034 # bin and part are the sourcing script's
gpu_setup() {
	out=${OUT:-gpu-out}
	mkdir -p "$out"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	bin=$(pwd)/.devbin
	part=${PART:-all}
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
}

run() { # name, command...
	local name=$1; shift
	echo "### $name: $*" | tee -a "$out/summary.txt"
	local t0=$SECONDS
	"$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "### $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
	tail -n 25 "$out/$name.log" | sed 's/^/    /' >>"$out/summary.txt"
}

# fp8_runs: FP8 in flight through a prepared step on the GPU (BlockAmax, the
# amax exchange and PackQuantize in the call); --check compares every byte
# and scale with quantizing the whole tensor; the NaN run must fail naming
# element [1 1] with the destination untouched. gpu-check.sh and
# gpu-fp8-check.sh both run them.
fp8_runs() {
	local F
	F="--src-mesh 1 --src-placements S0 --dst-mesh 1 --dst-placements S1 --dst-ranks 0 --dst-dtype e4m3"
	run refit-cuda-fp8 scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 8192x8192 --dtype bf16 $F --route all,auto --check --iters 5
	run refit-cuda-fp8-row-verify-atomic scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 4096x4096 --dtype bf16 $F \
		--fp8-scale row --route all --check --verify --atomic --iters 3
	run refit-cuda-fp8-f32-tensor scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 8x1000x1000 --dtype f32 $F \
		--fp8-scale tensor --route all --check --iters 3
	run refit-cuda-fp8-nan env M2N_FAULT_NAN=0:4097 scripts/mpirun.sh -np 1 "$bin/refit" run --device cuda --shape 4096x4096 --dtype bf16 $F \
		--route flat --check --atomic --iters 1 --warmup 0
}
