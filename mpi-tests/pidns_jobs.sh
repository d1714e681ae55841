#!/usr/bin/env bash
# mpi-tests/pidns_jobs.sh -- two jobs at once in two pid namespaces that
# share /dev/shm and the hostname: Open MPI gives both the same job id
# (mpirun has the same pid in each namespace), and each job must still run
# over shared memory on its own files.
#
# Runs in a private mount namespace (re-executes itself under `unshare -m`,
# so needs root) with a fresh tmpfs over /dev/shm.  Each trial starts two
# mpiruns at once, each under `unshare --pid --fork --mount-proc` (a pid
# namespace of its own; the tmpfs is the same for both), each with a
# session directory of its own (TMPDIR: Open MPI's own session files would
# collide otherwise, which is not the transport's business).  Checks:
#   - the two jobs do get one job id (else this test tests nothing);
#   - each job (shm_full, 4 MiB pairwise exchanges, every byte checked,
#     --mca btl self,doorbell) exits 0 with its OK line;
#   - every pair of each job goes over shm;
#   - nothing is left in /dev/shm after a trial.
# Prints PASS/FAIL per check and ends with "N passed, M failed".
#
# Environment: TRIALS (4), NP (4 ranks per job), RUN_TIMEOUT (seconds per
# mpirun, 240), OUT (<repo>/target/mpi-tests-pidns).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=ns_suite.sh
source "$HERE/ns_suite.sh"
ns_suite_enter PIDNS_JOBS_NS "$0" "$@"
TRIALS=${TRIALS:-4}
NP=${NP:-4}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
ns_suite_out "$ROOT/target/mpi-tests-pidns"
rm -rf "$OUT"/tmp

build_program shm_full || finish
if ! mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm; then
    fail "mount a tmpfs over /dev/shm" "mount failed (needs root)"
    finish
fi
trap 'umount -l /dev/shm 2>/dev/null' EXIT

# in_pidns TAG CMD...: CMD in a pid namespace of its own, with its own
# session directory.
in_pidns() {
    local tmp=$OUT/tmp/$1
    shift
    mkdir -p "$tmp"
    env -u DOORBELL_SHM_DIR TMPDIR="$tmp" unshare --pid --fork --mount-proc "$@"
}
mpirun_np() {
    timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP" --mca pml ob1 "$@"
}

# The premise: both namespaces' jobs get one job id.
ids=()
for j in a b; do
    ids+=("$(in_pidns "id$j" timeout 60 mpirun.openmpi --allow-run-as-root -np 1 sh -c 'echo "$PMIX_NAMESPACE"' 2>/dev/null)")
done
if [[ -n ${ids[0]} && ${ids[0]} == "${ids[1]}" ]]; then
    pass "jobs in two pid namespaces get one job id" "(${ids[0]})"
else
    fail "jobs in two pid namespaces get one job id" "(${ids[*]}: the collision this test is about does not happen here)"
fi

# paths PATH LOG: finalize reports "rank R peer P path=PATH" with P != R.
for t in $(seq 1 "$TRIALS"); do
    t0=$SECONDS
    for j in a b; do
        in_pidns "$t$j" timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP" \
            --mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_if_include lo --mca btl_doorbell_verbose 1 \
            "$OUT/shm_full" 4194304 >"$OUT/trial$t$j.log" 2>&1 &
    done
    rcs=()
    for p in $(jobs -p); do
        wait "$p"
        rcs+=($?)
    done
    took=$((SECONDS - t0))
    ok=0
    for j in a b; do
        grep -q "shm_full: OK ($NP ranks)" "$OUT/trial$t$j.log" && ok=$((ok + 1))
    done
    if [[ ${rcs[*]} == "0 0" && $ok == 2 ]]; then
        pass "trial $t: both jobs exit 0, data checked" "(${took} s)"
    else
        fail "trial $t: both jobs exit 0, data checked" "(exits ${rcs[*]}, $ok OK lines, ${took} s)" \
            "$(for j in a b; do grep -q "shm_full: OK" "$OUT/trial$t$j.log" || echo "$OUT/trial$t$j.log"; done | head -n 1)"
    fi
    shm=$(($(paths shm "$OUT/trial${t}a.log") + $(paths shm "$OUT/trial${t}b.log")))
    tcp=$(($(paths tcp "$OUT/trial${t}a.log") + $(paths tcp "$OUT/trial${t}b.log")))
    if [[ $tcp -eq 0 && $shm -eq $((2 * NP * (NP - 1))) ]]; then
        pass "trial $t: every pair of both jobs over shm" "($shm shm, $tcp tcp)"
    else
        fail "trial $t: every pair of both jobs over shm" "($shm shm, $tcp tcp of $((2 * NP * (NP - 1))))"
    fi
    left=$(ls -A /dev/shm)
    if [[ -z $left ]]; then
        pass "trial $t: nothing left in /dev/shm"
    else
        fail "trial $t: nothing left in /dev/shm" "$(echo $left | head -c 300)"
        rm -f /dev/shm/*
    fi
done
finish
