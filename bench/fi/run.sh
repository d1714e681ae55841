#!/usr/bin/env bash
# The libfabric provider side by side with each MPI's own paths, one node,
# 2 ranks: Open MPI (vader; pml cm + mtl ofi over the doorbell provider and
# over libfabric's tcp provider, the same MPI path: libfabric 1.17's shm
# provider declines mtl ofi, which asks for FI_REMOTE_COMM) and
# the floor of that path: bench/fi/floor, a minimal spinning shared-memory
# provider), and
# the MPICH wheel (its default, ch4 with posix shared memory; ch4:ofi with
# MPIR_CVAR_NOLOCAL=1 over the doorbell provider and over libfabric's own
# shm and tcp providers).  Programs: bench/ompi/pingpong.c (latency,
# windowed bandwidth, whose small sizes are the message rate) and
# bench/ompi/idle.c (CPU of a rank blocked in MPI_Recv).  Configurations
# rotate each round; report.py prints medians, ratios and the targets
# (met/MISSED).  A missed target does not fail the script; a run that fails
# or produces no figure does (exit 1).  A benchmark, not a test: run it on
# a quiet machine.
#
# Environment: ROUNDS (5; QUICK=1: 2 rounds, fewer iterations),
#   CONFIGS (subset/order of the names below), MPICH_VENV
#   (<repo>/target/venv-mpich, from scripts/deps.sh), OUT
#   (<repo>/target/bench-fi).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=bench/fi/frame.sh
. "$here/frame.sh"
bench_setup run.sh "$root/target/bench-fi"
make -s -C "$here/floor" OUT="$OUT/floor" >"$OUT/floor-build.log" 2>&1 ||
    { echo "run.sh: building bench/fi/floor failed (log: $OUT/floor-build.log)" >&2; exit 1; }
for b in pingpong idle; do
    mpicc.openmpi -O2 -o "$OUT/${b}_ompi" "$root/bench/ompi/$b.c" &&
        "$MPICH_VENV/bin/mpicc" -O2 -o "$OUT/${b}_mpich" "$root/bench/ompi/$b.c" ||
        { echo "run.sh: building $b failed (is the MPICH wheel in $MPICH_VENV? scripts/deps.sh)" >&2; exit 1; }
done

ompi() { # extra mpirun args..., then -- program
    local args=()
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    timeout -k 5 180 mpirun.openmpi --allow-run-as-root -np 2 --bind-to core "${args[@]}" "$@"
}
mpich() { # env assignments..., then -- program
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    timeout -k 5 180 env "${envs[@]}" "$MPICH_VENV/bin/mpiexec" -n 2 -bind-to core "$@"
}
run_config() { # config bench round
    local c=$1 b=$2
    case $c in
    ompi_vader) ompi --mca pml ob1 --mca btl self,vader -- "$OUT/${b}_ompi" "${quick[@]}" ;;
    ompi_doorbell) ompi --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell \
        -x FI_PROVIDER_PATH="$PROV" -x FI_DOORBELL_IF_INCLUDE=lo -- "$OUT/${b}_ompi" "${quick[@]}" ;;
    ompi_floor) ompi --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include floor \
        -x FI_PROVIDER_PATH="$OUT/floor" -- "$OUT/${b}_ompi" "${quick[@]}" ;;
    ompi_fi_tcp) ompi --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "tcp;ofi_rxm" \
        -x FI_TCP_IFACE=lo -- "$OUT/${b}_ompi" "${quick[@]}" ;;
    mpich_default) mpich -- "$OUT/${b}_mpich" "${quick[@]}" ;;
    mpich_doorbell) mpich MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=doorbell \
        FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo -- "$OUT/${b}_mpich" "${quick[@]}" ;;
    mpich_fi_shm) mpich MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=shm -- "$OUT/${b}_mpich" "${quick[@]}" ;;
    mpich_fi_tcp) mpich MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp FI_TCP_IFACE=lo -- "$OUT/${b}_mpich" "${quick[@]}" ;;
    *) echo "run.sh: unknown configuration $c" >&2; return 2 ;;
    esac
}

read -r -a configs <<<"${CONFIGS:-ompi_vader ompi_doorbell ompi_floor ompi_fi_tcp mpich_default mpich_doorbell mpich_fi_shm mpich_fi_tcp}"
raw=$OUT/raw.tsv
counts() { grep -q '^RESULT' "$2"; }
echo "libfabric provider benchmark: ROUNDS=$ROUNDS QUICK=$QUICK, load $(cut -d' ' -f1 /proc/loadavg)"
run_rounds "$raw" "$OUT" "$ROUNDS" "pingpong idle" "${configs[@]}"
python3 "$here/report.py" --configs "${configs[*]}" "$raw"
echo "raw results and logs: $OUT"
[[ $failed == 0 ]]
