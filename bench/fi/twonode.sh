#!/usr/bin/env bash
# The libfabric provider across two hosts: the network-namespace cluster of
# mpi-tests/netns (nodeA, nodeB, one veth pair), one rank per node, in the
# provider's default (adaptive) mode, beside the floor of the same work (an
# 8 B ping-pong over a blocking TCP socket between the two namespaces,
# sockpp.c) and Open MPI's busy-polling btl tcp.
#
# Placement decides the floor on this one machine.  Open MPI binds each
# "host"'s rank to its first core, so both ranks share CPU 0 (which two
# real hosts never do); hydra leaves them to the kernel.  A socket whose
# two ends share a CPU wakes its reader without a cross-CPU interrupt
# (~8 us here, against ~25 us across the two CPUs).  So each MPI run is
# held against the socket in the same placement: sock_block_1cpu (both
# ends pinned to CPU 0) for Open MPI's default, sock_block (unpinned) for
# MPICH and for Open MPI with --bind-to none (ompi_doorbell_unbound).
#
# Configurations rotate each round (frame.sh); twonode_report.py prints
# medians, ratios against the socket and the target (8 B latency <= 1.5x
# the blocking socket, met/MISSED).  A missed target does not fail the
# script; a run that fails or produces no figure does (exit 1).  A
# benchmark, not a test: run it on a quiet machine.  Needs root
# (namespaces); always tears the cluster down.
#
# Environment: ROUNDS (5; QUICK=1: 2 rounds, fewer iterations), CONFIGS
#   (subset/order of the names below), MPICH_VENV (<repo>/target/venv-mpich,
#   from scripts/deps.sh), OUT (<repo>/target/bench-fi-twonode).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=bench/fi/frame.sh
. "$here/frame.sh"
CLUSTER=$root/mpi-tests/netns/cluster.sh
AGENT=$root/mpi-tests/netns/rsh-agent.sh
[[ $(id -u) == 0 ]] || { echo "twonode.sh: needs root (network namespaces)" >&2; exit 1; }
bench_setup twonode.sh "$root/target/bench-fi-twonode"
mpicc.openmpi -O2 -o "$OUT/pingpong_ompi" "$root/bench/ompi/pingpong.c" &&
    "$MPICH_VENV/bin/mpicc" -O2 -o "$OUT/pingpong_mpich" "$root/bench/ompi/pingpong.c" &&
    cc -O2 -Wall -Wextra -Werror -o "$OUT/sockpp" "$here/sockpp.c" ||
    { echo "twonode.sh: building the programs failed (is the MPICH wheel in $MPICH_VENV? scripts/deps.sh)" >&2; exit 1; }

trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
"$CLUSTER" up >"$OUT/cluster.log" 2>&1 || { echo "twonode.sh: cluster.sh up failed (log: $OUT/cluster.log)" >&2; exit 1; }
SUBNET=$("$CLUSTER" subnet)
hosts=nodeA:1,nodeB:1

ompi() { # mpirun args... (from nodeA; ranks on nodeA and nodeB)
    "$CLUSTER" exec nodeA timeout -k 5 300 mpirun.openmpi --allow-run-as-root --mca plm_rsh_agent "$AGENT" \
        --mca oob_tcp_if_include "$SUBNET" --host "$hosts" -np 2 "$@"
}
run_config() { # config bench round (one bench: pingpong)
    local c=$1 r=$3
    case $c in
    sock_block | sock_block_1cpu)
        local port=$((47000 + r)) rc=0 pin=()
        [[ $c == sock_block_1cpu ]] && pin=(taskset -c 0)
        "$CLUSTER" exec nodeB timeout -k 5 120 "${pin[@]}" "$OUT/sockpp" -s "$port" &
        local server=$!
        "$CLUSTER" exec nodeA timeout -k 5 120 "${pin[@]}" "$OUT/sockpp" -c nodeB "$port" "${quick[@]}" || rc=$?
        wait "$server" || rc=$((rc ? rc : 1))
        return "$rc" ;;
    ompi_doorbell | ompi_doorbell_unbound)
        local bind=()
        [[ $c == ompi_doorbell_unbound ]] && bind=(--bind-to none)
        ompi "${bind[@]}" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell \
        -x FI_PROVIDER_PATH="$PROV" -x FI_DOORBELL_IF_INCLUDE="$SUBNET" "$OUT/pingpong_ompi" "${quick[@]}" ;;
    ompi_tcp) ompi --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$SUBNET" "$OUT/pingpong_ompi" "${quick[@]}" ;;
    mpich_doorbell) "$CLUSTER" exec nodeA timeout -k 5 300 env FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE="$SUBNET" \
        MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=doorbell MPIR_CVAR_NOLOCAL=1 "$MPICH_VENV/bin/mpiexec" -launcher ssh \
        -launcher-exec "$AGENT" -hosts "$hosts" -n 2 "$OUT/pingpong_mpich" "${quick[@]}" ;;
    *) echo "twonode.sh: unknown configuration $c" >&2; return 2 ;;
    esac
}

read -r -a configs <<<"${CONFIGS:-sock_block sock_block_1cpu ompi_doorbell ompi_doorbell_unbound mpich_doorbell ompi_tcp}"
raw=$OUT/raw.tsv
# An MPI run counts only if its ranks were on the two hosts.
counts() {
    grep -q '^RESULT lat 8 ' "$2" && { [[ $1 == sock_* ]] || grep -q '^RESULT hosts_distinct - 1$' "$2"; }
}
echo "libfabric provider across two namespaces: ROUNDS=$ROUNDS QUICK=$QUICK, load $(cut -d' ' -f1 /proc/loadavg)"
run_rounds "$raw" "$OUT" "$ROUNDS" pingpong "${configs[@]}"
python3 "$here/twonode_report.py" --configs "${configs[*]}" "$raw"
echo "raw results and logs: $OUT"
[[ $failed == 0 ]]
