#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the benchmarks need,
# and the MPI wheels of the libfabric provider's tests in venvs under
# target/.  Quick when everything is there: apt runs only for a missing
# package, pip only for a venv that lacks what it should hold.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# (valgrind: ompi/check.sh counts an empty progress pass's instructions with callgrind;
#  strace: it counts the sleeps of a job's ranks;
#  openmpi-bin also brings ompi-server, which mpi-tests/spawn.sh's connect/accept
#  between two mpiruns needs, and python3-mpi4py its MPIPoolExecutor run)
packages=(
    build-essential cmake pkg-config git binutils procps iproute2 util-linux
    openmpi-bin libopenmpi-dev netpipe-openmpi python3-mpi4py python3-numpy python3-matplotlib
    clang libclang-dev valgrind strace
    libfabric-bin libfabric-dev python3-venv
    libasan8 # gcc 12's AddressSanitizer runtime, for scripts/asan.sh (a gcc dependency too)
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# MPICH 5 (ch4 with ofi, hydra, mpicc, libfabric 2.x inside) and mpi4py
# with numpy on it, for fi/tests/run.sh and the two-node suite.
venv=$here/target/venv-mpich
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
if ! "$venv/bin/pip" show mpich 2>/dev/null | grep -qx 'Version: 5.0.2' ||
    ! "$venv/bin/python" -c 'import mpi4py, numpy' 2>/dev/null; then
    "$venv/bin/pip" install --quiet mpich==5.0.2 numpy mpi4py
fi
# Intel MPI's runtime (mpiexec, libmpi.so.12), without the libfabric
# package it names: its tests point it at the MPICH wheel's libfabric or
# Debian's (I_MPI_OFI_LIBRARY), which load the provider.
venv=$here/target/venv-impi
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
if ! "$venv/bin/pip" show impi-rt 2>/dev/null | grep -qx 'Version: 2021.19.0'; then
    "$venv/bin/pip" install --quiet --no-deps impi-rt==2021.19.0
fi
