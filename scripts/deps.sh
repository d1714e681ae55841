#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the benchmarks need.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
# (valgrind: ompi/check.sh counts an empty progress pass's instructions with callgrind)
apt-get install -y --no-install-recommends \
    build-essential cmake pkg-config git binutils procps iproute2 util-linux \
    openmpi-bin libopenmpi-dev netpipe-openmpi python3-mpi4py python3-numpy python3-matplotlib \
    clang libclang-dev valgrind \
    libfabric-bin libfabric-dev python3-venv \
    libasan8 # gcc 12's AddressSanitizer runtime, for scripts/asan.sh (a gcc dependency too)

# MPICH 5 (ch4 with ofi, hydra, libfabric 2.x inside) from PyPI, for the
# libfabric provider's tests: a venv under target/, made once.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$here/target/venv-mpich
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
if [[ ! -x $venv/bin/mpicc ]] || ! "$venv/bin/python" -c 'import mpi4py, numpy' 2>/dev/null; then
    "$venv/bin/pip" install --quiet mpich==5.0.2 numpy mpi4py
fi
