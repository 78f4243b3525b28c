#!/usr/bin/env bash
# ensure-deps.sh installs what m2n needs to build and run, if it is missing:
# OpenMPI's compiler wrappers, headers and launcher (Debian: libopenmpi-dev, openmpi-bin)
# and pkg-config; and, for the Python package's tests (capi), Debian's python3
# with python3-mpi4py and python3-numpy for /usr/bin/python3. It is
# idempotent and quiet when everything is there. The Python packages are
# optional: if they cannot be installed, it says so and the Python tests skip
# with that reason.
set -euo pipefail

missing=()
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ! pkg-config --exists ompi-c 2>/dev/null; then missing+=(libopenmpi-dev); fi
command -v gcc >/dev/null 2>&1 || missing+=(gcc)

python=()
if ! /usr/bin/python3 -c 'import mpi4py, numpy' >/dev/null 2>&1; then python+=(python3 python3-mpi4py python3-numpy); fi

if [ ${#missing[@]} -eq 0 ] && [ ${#python[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    if [ ${#missing[@]} -eq 0 ]; then
      echo "ensure-deps: cannot install ${python[*]} (need root or sudo): the Python tests will skip" >&2
      exit 0
    fi
    all=("${missing[@]}" "${python[@]}")
    echo "ensure-deps: need root (or sudo) to install ${all[*]}; install them and re-run" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
all=("${missing[@]}" "${python[@]}")
echo "ensure-deps: installing ${all[*]}" >&2
$sudo apt-get update -qq
if [ ${#missing[@]} -ne 0 ]; then
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ${#python[@]} -ne 0 ] && ! $sudo apt-get install -y -qq "${python[@]}" >/dev/null; then
  echo "ensure-deps: could not install ${python[*]}: the Python tests will skip" >&2
fi
echo "ensure-deps: done" >&2
