#!/usr/bin/env bash
# gpu-python.sh runs the Python package's CUDA checks on a GPU machine that
# has no Go: libm2n.so is built elsewhere (make gpu-bins puts it in .devbin/,
# make capi in dist/) and found through M2N_LIBRARY. It needs a python3 with
# torch and mpi4py ($M2N_PYTHON, or the first on PATH that imports both),
# and mpi4py on the MPI libm2n.so links (libmpi.so.40, OpenMPI). One rank
# per GPU: NP defaults to the GPUs nvidia-smi lists. Logs go to $OUT (or
# ./gpu-out). Usage, from the repository root:
#   scripts/gpu-python.sh
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export PYTHONDONTWRITEBYTECODE=1
# The first python that imports torch and mpi4py (on the H200 machine torch
# lives in /opt/torch/.venv, which comes first on PATH), unless M2N_PYTHON
# says which.
py=${M2N_PYTHON:-}
if [ -z "$py" ]; then
	for p in $(which -a python3 2>/dev/null) /usr/bin/python3; do
		if "$p" -c 'import torch, mpi4py' 2>/dev/null; then py=$p; break; fi
	done
	py=${py:-/usr/bin/python3}
fi
if [ -z "${M2N_LIBRARY:-}" ]; then
	for f in .devbin/libm2n.so dist/libm2n.so; do
		if [ -f "$f" ]; then export M2N_LIBRARY=$(pwd)/$f; break; fi
	done
fi
np=${NP:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "$np" -ge 1 ] 2>/dev/null || np=1
. "$(dirname "${BASH_SOURCE[0]}")/gpu-run.sh"
{
	echo "M2N_LIBRARY=${M2N_LIBRARY:-unset} NP=$np"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	"$py" -c 'import sys, torch, mpi4py; from mpi4py import MPI
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "mpi4py", mpi4py.__version__)
print(MPI.Get_library_version().splitlines()[0])'
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt" >>"$out/summary.txt"
run python-torch-cuda scripts/mpirun.sh -np "$np" "$py" python/tests/test_torch.py --cuda
run python-trainer-cuda scripts/mpirun.sh -np "$np" "$py" examples/python/trainer_torch.py --device cuda
cat "$out/summary.txt"
