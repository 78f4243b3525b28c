#!/usr/bin/env bash
# ensure-deps.sh installs what m2n needs to build and run, if it is missing:
# OpenMPI's compiler wrappers, headers and launcher (Debian: libopenmpi-dev, openmpi-bin)
# and pkg-config. It is idempotent and quiet when everything is there.
set -euo pipefail

missing=()
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ! pkg-config --exists ompi-c 2>/dev/null; then missing+=(libopenmpi-dev); fi
command -v gcc >/dev/null 2>&1 || missing+=(gcc)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "ensure-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "ensure-deps: need root (or sudo) to install ${missing[*]}; install them and re-run" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
echo "ensure-deps: done" >&2
