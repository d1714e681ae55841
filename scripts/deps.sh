#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the benchmarks need.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
# (valgrind: ompi/check.sh counts an empty progress pass's instructions with callgrind;
#  openmpi-bin also brings ompi-server, which mpi-tests/spawn.sh's connect/accept
#  between two mpiruns needs, and python3-mpi4py its MPIPoolExecutor run)
apt-get install -y --no-install-recommends \
    build-essential cmake pkg-config git binutils procps iproute2 util-linux \
    openmpi-bin libopenmpi-dev netpipe-openmpi python3-mpi4py python3-numpy python3-matplotlib \
    clang libclang-dev valgrind \
    libasan8 # gcc 12's AddressSanitizer runtime, for scripts/asan.sh (a gcc dependency too)
