#!/usr/bin/env bash
# mpirun.sh runs mpirun with the options m2n uses on one machine (a laptop, a
# container, CI): more ranks than cores, no core binding, OpenMPI's plain
# shared-memory transport without the single-copy mechanism that containers
# forbid. M2N_MPIRUN_FLAGS replaces the options; M2N_MPIRUN the launcher.
# internal/testutil/mpitest/command.go holds the same list for the Go tests.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export PMIX_MCA_gds=${PMIX_MCA_gds:-hash}
flags=${M2N_MPIRUN_FLAGS-"--oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none"}
# shellcheck disable=SC2086
exec "${M2N_MPIRUN:-mpirun}" $flags "$@"
