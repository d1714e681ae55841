#!/usr/bin/env bash
# mpi-tests/force_tcp.sh -- doorbell where shared memory is not used or a
# job ends abnormally, --mca btl self,doorbell, checked against the output.
#
# Runs in a private mount namespace (re-executes itself under `unshare -m`,
# so needs root).  Scenarios:
#   ro_shm     4 ranks with btl_doorbell_force_tcp 1 and /dev/shm a
#              read-only tmpfs: force_tcp needs no shared memory, so the
#              job runs (shm_full.c: alltoall, pairwise 1 MiB exchanges,
#              alltoallv, every byte checked), every pair over tcp, and
#              nothing is written there
#   abort_tcp  rank 0 calls MPI_Abort while the other 3 wait in MPI_Recv
#              (abort.c), force_tcp, RUNS times: the job ends with the
#              abort's code and no rank reports a lost peer (an abort is
#              not a crash).  Open MPI's own MPI_ABORT message is not
#              asserted: mpirun loses it in about 1 run of 3 whatever the
#              BTL ("ORTE_ERROR_LOG: Data unpack would read past end of
#              buffer", vader and tcp alike)
#   abort_shm  the same over shared memory
#   stopped_tcp  4 ranks, force_tcp: ranks 1-3 stop (SIGSTOP) before the
#              first message to them, for STOP_S seconds, while flood.py
#              opens strangers' connections to every rank's port as fast
#              as it can (their accept queues fill while they are
#              stopped; rank 0 waits for the flood to reach them), then
#              rank 0 sends each 100 B and 1 MiB, and they answer
#              (stopped_peer.c).  A stopped peer is slow, not dead, and a
#              flood of strangers during first contact keeps no peer out
#              once it ends: exit 0 with the data checked, the flood made
#              connections and the ranks rejected strangers
#   stopped_shm  the same over shared memory
# Prints PASS/FAIL per check and ends with "N passed, M failed".
#
# Environment: RUN_TIMEOUT (seconds per mpirun, 120), RUNS (abort runs per
# path, 4), STOP_S (seconds the stopped ranks stay stopped, 15; longer than
# any timer a connector once had), OUT (<repo>/target/mpi-tests-force-tcp).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=ns_suite.sh
source "$HERE/ns_suite.sh"
# The read-only mount over /dev/shm is seen by this script alone.
ns_suite_enter FORCE_TCP_NS "$0" "$@"
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
RUNS=${RUNS:-4}
STOP_S=${STOP_S:-15}
ns_suite_out "$ROOT/target/mpi-tests-force-tcp"

for prog in shm_full abort stopped_peer; do
    build_program "$prog" || finish
done

MPIRUN=(timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1
        --mca btl self,doorbell --mca btl_doorbell_if_include lo)

# paths PATH LOG: finalize reports "rank R peer P path=PATH" with P != R.

# ---- ro_shm: a read-only /dev/shm, force_tcp ----
if mount -t tmpfs -o ro,size=1m,mode=1777 tmpfs /dev/shm; then
    log=$OUT/ro_shm.log
    if touch /dev/shm/probe 2>/dev/null; then
        fail "ro_shm: /dev/shm is read-only" "a file could be made there"
    else
        pass "ro_shm: /dev/shm is read-only"
    fi
    np=4
    env -u DOORBELL_SHM_DIR "${MPIRUN[@]}" -np $np --mca btl_doorbell_force_tcp 1 \
        --mca btl_doorbell_verbose 1 "$OUT/shm_full" 1048576 >"$log" 2>&1
    rc=$?
    if [[ $rc == 0 ]] && grep -q "shm_full: OK ($np ranks)" "$log"; then
        pass "ro_shm: $np ranks, data checked, exit 0"
    else
        fail "ro_shm: $np ranks, data checked, exit 0" "exit $rc" "$log"
    fi
    tcp=$(paths tcp "$log")
    if [[ $tcp -eq $((np * (np - 1))) ]]; then
        pass "ro_shm: every pair over doorbell's tcp" "($tcp of $((np * (np - 1))))"
    else
        fail "ro_shm: every pair over doorbell's tcp" "($tcp of $((np * (np - 1))))" "$log"
    fi
    left=$(ls -A /dev/shm)
    if [[ -z $left ]]; then
        pass "ro_shm: nothing in /dev/shm"
    else
        fail "ro_shm: nothing in /dev/shm" "$left"
    fi
    umount -l /dev/shm
else
    fail "ro_shm: mount a read-only tmpfs on /dev/shm" "mount failed (needs root)"
fi

# ---- stopped: ranks stopped before the first message to them, flooded ----
for path in tcp shm; do
    force=0
    [[ $path == tcp ]] && force=1
    log=$OUT/stopped_$path.log
    flog=$OUT/flood_$path.log
    piddir=$OUT/pids.stopped_$path
    rm -rf "$piddir" && mkdir -p "$piddir"
    python3 "$HERE/flood.py" "$piddir" $((STOP_S + 6)) >"$flog" 2>&1 &
    flood=$!
    "${MPIRUN[@]}" -np 4 --mca btl_doorbell_force_tcp $force --mca btl_doorbell_verbose 1 \
        "$OUT/stopped_peer" "$STOP_S" "$piddir" flood >"$log" 2>&1
    rc=$?
    wait "$flood"
    # never leave a rank stopped
    for f in "$piddir"/rank.*; do [[ -f $f ]] && kill -CONT "$(cat "$f")" 2>/dev/null; done
    if [[ $rc == 0 ]] && grep -q "stopped_peer: OK (4 ranks)" "$log"; then
        pass "stopped_$path: 3 ranks stopped ${STOP_S} s and flooded, data checked, exit 0" "$(grep -o 'the exchange took.*' "$log")"
    else
        fail "stopped_$path: 3 ranks stopped ${STOP_S} s and flooded, data checked, exit 0" "exit $rc" "$log"
    fi
    made=$(sed -n 's/^flood: \([0-9]*\) connections to \([0-9]*\) ports.*/\1 \2/p' "$flog")
    rejected=$(grep -o 'strangers_rejected=[0-9]*' "$log" | awk -F= '{s += $2} END {print s + 0}')
    if [[ ${made%% *} -gt 0 && ${made##* } -ge 4 && $rejected -gt 0 ]]; then
        pass "stopped_$path: the flood reached every rank" "$(cat "$flog"); rejected $rejected"
    else
        fail "stopped_$path: the flood reached every rank" "flood: '${made}', rejected $rejected" "$flog"
    fi
done

# ---- abort: MPI_Abort is not a lost peer ----
for path in tcp shm; do
    force=0
    [[ $path == tcp ]] && force=1
    lost=0 bad=0
    for run in $(seq 1 "$RUNS"); do
        log=$OUT/abort_$path.$run.log
        "${MPIRUN[@]}" -np 4 --mca btl_doorbell_force_tcp $force "$OUT/abort" >"$log" 2>&1
        rc=$?
        if [[ $rc != 3 ]]; then
            bad=$((bad + 1))
            fail "abort_$path: run $run ends with the abort's code, 3" "exit $rc" "$log"
        fi
        if grep -q "lost contact\|lost peer" "$log"; then
            lost=$((lost + 1))
            fail "abort_$path: run $run reports no lost peer" "" "$log"
        fi
    done
    [[ $bad == 0 ]] && pass "abort_$path: $RUNS runs end with the abort's code, 3"
    [[ $lost == 0 ]] && pass "abort_$path: no lost peer reported in $RUNS runs"
done
finish
