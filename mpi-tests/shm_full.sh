#!/usr/bin/env bash
# mpi-tests/shm_full.sh -- doorbell with a small shared-memory directory
# (a container's /dev/shm, or a full one).
#
# Runs in a private mount namespace (re-executes itself under `unshare -m`,
# so needs root): each scenario mounts a tmpfs of a given size, runs
# shm_full.c (alltoall, pairwise 1 MiB exchanges, alltoallv; every byte
# checked) under mpirun with --mca btl self,doorbell, and checks:
#   - the job exits 0 and the program reports OK;
#   - every pair of ranks went over shm (the finalize report names no tcp
#     path): a rank's shared memory is its control segment and one inbound
#     queue, whatever the number of peers, so a directory with room for
#     those carries every pair -- or, where some ranks found no room for
#     theirs, exactly the pairs of those ranks went over doorbell's TCP,
#     the job said so in one warning (local rank 0's), and none other;
#   - no file is left in the directory afterwards.
# Scenarios:
#   env        8 ranks, DOORBELL_SHM_DIR on a 6 MiB tmpfs, default parameters
#   mca        8 ranks, --mca btl_doorbell_shm_dir on a 4 MiB tmpfs, 128 KiB
#              queues and no single copy: 128 KiB fragments would go through
#              bulk buffers (2 x 256 KiB per pair), most of which cannot be
#              made: those go through the queue in chunks
#   container  16 ranks, default parameters, a 64 MiB tmpfs mounted over
#              /dev/shm (a container's default /dev/shm size)
#   room       8 ranks, default parameters, a 4 MiB tmpfs over /dev/shm:
#              room for the control segments of 6 ranks (624 KiB each);
#              the others' pairs go over TCP
#   no_control 4 ranks on a 40 KiB tmpfs: no rank's control segment fits;
#              every pair goes over TCP, with the one warning.
# Prints PASS/FAIL per check and ends with "N passed, M failed".
#
# Environment: RUN_TIMEOUT (seconds per mpirun, 240), OUT (<repo>/target/mpi-tests-shm-full).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=ns_suite.sh
source "$HERE/ns_suite.sh"
# A private mount namespace: the tmpfs mounts (and the one over /dev/shm)
# are invisible to everyone else and vanish with this script.
ns_suite_enter SHM_FULL_NS "$0" "$@"
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
ns_suite_out "$ROOT/target/mpi-tests-shm-full"

build_program shm_full || finish

MOUNTS=()
cleanup() { for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done; }
trap cleanup EXIT
# tmpfs DIR SIZE: mount a fresh tmpfs of SIZE on DIR.
tmpfs() {
    mkdir -p "$1"
    if mount -t tmpfs -o "size=$2,mode=1777" tmpfs "$1"; then
        MOUNTS+=("$1")
        return 0
    fi
    fail "mount a $2 tmpfs on $1" "mount failed (needs root)"
    return 1
}

# paths PATH LOG: finalize reports "rank R peer P path=PATH" with P != R.
# scenario NAME NP DIR [env VAR=VALUE...] -- MPIRUN ARGS...: run shm_full and check it.
scenario() {
    local name=$1 np=$2 dir=$3 envs=() args=() log=$OUT/$1.log rc t0
    shift 3
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    args=("$@")
    t0=$SECONDS
    env "${envs[@]}" timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
        --mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_if_include lo \
        --mca btl_doorbell_verbose 1 "${args[@]}" >"$log" 2>&1
    rc=$?
    local took=$((SECONDS - t0))
    if [[ $rc == 0 ]] && grep -q "shm_full: OK ($np ranks)" "$log"; then
        pass "$name: $np ranks, data checked, exit 0" "(${took} s)"
    else
        fail "$name: $np ranks, data checked, exit 0" "exit $rc after ${took} s" "$log"
    fi
    # The finalize reports (each rank names every peer, itself included):
    # every pair over shm, none over tcp -- but those of the ranks that the
    # warning counts as without room.
    local shm tcp warned without=0 pairs=$((np * (np - 1)))
    shm=$(paths shm "$log")
    tcp=$(paths tcp "$log")
    warned=$(grep -c "ranks on host .* found no room in the shared-memory" "$log")
    if [[ $warned -ge 1 ]]; then
        # (the help file's text, or the fallback line "btl doorbell (...) on H: ...")
        without=$(sed -n 's/^\(.*: \)\{0,1\}\([0-9][0-9]*\) of the [0-9]* ranks on host .* found no room.*/\2/p' "$log" | head -n 1)
        without=${without:-0}
    fi
    local want_tcp=$((2 * without * (np - 1) - without * (without - 1)))
    if [[ $WANT == shm ]]; then
        if [[ $tcp -eq 0 && $shm -eq $pairs && $warned -eq 0 ]]; then
            pass "$name: every pair over shm" "($shm shm, $tcp tcp of $pairs)"
        else
            fail "$name: every pair over shm" "($shm shm, $tcp tcp of $pairs; $warned warnings)" "$log"
        fi
    else
        if [[ $warned -eq 1 && $without -ge $WANT && $tcp -eq $want_tcp && $shm -eq $((pairs - want_tcp)) ]]; then
            pass "$name: one warning; the pairs of the $without ranks without room over tcp, the rest over shm" "($shm shm, $tcp tcp)"
        else
            fail "$name: one warning; the pairs of the ranks without room over tcp, the rest over shm" \
                "($warned warnings, $without ranks without room, want >= $WANT; $shm shm, $tcp tcp of $pairs)" "$log"
        fi
    fi
    local left
    left=$(ls -A "$dir")
    if [[ -z $left ]]; then
        pass "$name: nothing left in $dir"
    else
        fail "$name: nothing left in $dir" "$(du -sh "$dir" | cut -f1): $(echo $left | head -c 300)"
    fi
}

# WANT: shm (every pair over shm), or the least number of ranks that must
# find no room (their pairs over tcp, with one warning).
WANT=shm
T=$(mktemp -d /tmp/doorbell-shm-full.XXXXXX)
if tmpfs "$T/env" 6m; then
    scenario env 8 "$T/env" DOORBELL_SHM_DIR="$T/env" -- -x DOORBELL_SHM_DIR "$OUT/shm_full" 1048576
fi
if tmpfs "$T/mca" 4m; then
    scenario mca 8 "$T/mca" -u DOORBELL_SHM_DIR -- --mca btl_doorbell_shm_dir "$T/mca" \
        --mca btl_doorbell_ring_size 131072 --mca btl_doorbell_single_copy 0 "$OUT/shm_full" 1048576
fi
if tmpfs /dev/shm 64m; then
    scenario container 16 /dev/shm -u DOORBELL_SHM_DIR -- "$OUT/shm_full" 1048576
fi

# Room for some ranks' control segments only (4 MiB, 624 KiB each): the
# others go on without shared memory; local rank 0 warns once.
if tmpfs /dev/shm 4m; then
    WANT=1 scenario room 8 /dev/shm -u DOORBELL_SHM_DIR -- "$OUT/shm_full" 1048576
fi
# No room even for one control segment: every pair over TCP, one warning.
if tmpfs "$T/ctl" 40k; then
    WANT=4 scenario no_control 4 "$T/ctl" DOORBELL_SHM_DIR="$T/ctl" -- -x DOORBELL_SHM_DIR "$OUT/shm_full" 65536
fi
cleanup
MOUNTS=()
rm -rf "$T"
finish
