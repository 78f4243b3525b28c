# shellcheck shell=bash
# gpu-run.sh, sourced by gpu-check.sh, gpu-fp8-check.sh and gpu-python.sh,
# defines run and gpu_setup:
# run NAME COMMAND... runs the command with its output in $out/NAME.log and
# notes it, its exit status, its time and the log's last 25 lines in
# $out/summary.txt;
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
