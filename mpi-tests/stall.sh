#!/usr/bin/env bash
# mpi-tests/stall.sh -- regression tests for stalls: one-sided epochs (SELF
# and WORLD windows, osc pt2pt and the default osc), nonblocking
# collectives, and two-way windows of Isend/Irecv, each in the wait modes
# adaptive and block (the two-way windows on shm and with
# btl_doorbell_force_tcp 1).  Every program checks its data.  A stall is
# judged by counting it (stalls.sh: the counters every rank prints at
# finalize), never by a speed: each program prints its phases' times and
# rates for the reader, and cuts a phase short at a watchdog limit, which
# only bounds the run (a loaded machine's slowest healthy phase took 23 s
# at 8 ranks).  A run that hangs is stopped by `timeout` and fails.
# Prints PASS/FAIL per run and ends with "N passed, M failed"; exits non-zero
# on any failure.
#
# Environment (all optional):
#   BTL          BTL list under test (self,doorbell); BTL=self,vader checks the
#                tests themselves (wait modes, force_tcp and the stall count are
#                then skipped)
#   MODES        wait modes ("adaptive block")
#   PHASE_LIMIT  watchdog, seconds per phase of stall_rma and stall_nbc (20)
#   STALL_SLACK, STALL_PER  a run may count STALL_SLACK stalls plus one per
#                STALL_PER sleeps that ran out (3, 50; see stalls.sh)
#   RUN_TIMEOUT  seconds for one mpirun (300; the watchdogs end a run in ~130)
#   OUT          build and log directory (<repo>/target/mpi-tests-stall)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BTL=${BTL:-self,doorbell}
MODES=${MODES:-adaptive block}
PHASE_LIMIT=${PHASE_LIMIT:-20}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
# shellcheck source=stalls.sh
source "$HERE/stalls.sh"
OUT=${OUT:-$ROOT/target/mpi-tests-stall}
BIN=$OUT/bin
LOGS=$OUT/logs
mkdir -p "$BIN" "$LOGS"
rm -f "$LOGS"/*.log
PASSED=0
FAILED=0
START=$SECONDS

pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-62s %s\n' "$1" "$2"; }
fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-62s %s\n' "$1" "$2"
    [[ -n ${3:-} && -f $3 ]] && grep -E 'stall_|CHECK FAILED|ERROR|rror' "$3" | head -n 12 | sed 's/^/      | /'
}

is_doorbell() { [[ ,$BTL, == *,doorbell,* ]]; }

for p in stall_rma stall_nbc stall_bidir; do
    if mpicc.openmpi -O2 -g -Wall -Wextra -Werror -o "$BIN/$p" "$HERE/$p.c" >"$LOGS/build_$p.log" 2>&1; then
        pass "build $p" ""
    else
        fail "build $p" "mpicc.openmpi failed" "$LOGS/build_$p.log"
    fi
done

# run LABEL NP "MCA ARGS" PROGRAM ARGS... -- one mpirun under timeout
run() {
    local label=$1 np=$2 mca=$3 rc=0 t0=$SECONDS
    shift 3
    local log=$LOGS/$(echo "$label" | tr -c 'A-Za-z0-9_.-' '_' | tr -s _).log
    local name
    name=$(basename "$1")
    if [[ ! -x $1 ]]; then
        fail "$label" "not built"
        return
    fi
    local bind=(--bind-to core)
    [[ $np -gt 2 ]] && bind=(--bind-to none)
    local counters=()
    is_doorbell && counters=(--mca btl_doorbell_verbose 1)
    # shellcheck disable=SC2086 # the MCA string is meant to be word-split
    timeout -k 10 "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" "${bind[@]}" \
        --mca pml ob1 --mca btl "$BTL" "${counters[@]}" $mca "$@" >"$log" 2>&1 </dev/null || rc=$?
    local took="($((SECONDS - t0)) s)" problem=
    is_doorbell && [[ $rc == 0 ]] && problem=$(stall_problem "$log" "$np")
    if [[ $rc == 124 || $rc == 137 ]]; then
        fail "$label" "timed out after ${RUN_TIMEOUT} s: a stall" "$log"
    elif [[ $rc != 0 ]]; then
        fail "$label" "exit $rc $took" "$log"
    elif ! grep -q "^$name: OK" "$log"; then
        fail "$label" "no '$name: OK' line $took" "$log"
    elif [[ -n $problem ]]; then
        fail "$label" "$problem $took" "$log"
    else
        pass "$label" "$took, $(log_stalls "$log") stalls"
    fi
}

modes=("")
is_doorbell && read -r -a modes <<<"$MODES"
echo "== stall tests: BTL=$BTL modes: ${modes[*]:-(none)}; a run passes with at most $STALL_SLACK stalls counted + 1 per $STALL_PER sleeps that ran out (watchdog: ${PHASE_LIMIT} s a phase)"
for mode in "${modes[@]}"; do
    m=""
    [[ -n $mode ]] && m="--mca btl_doorbell_wait_mode $mode"
    tag="[$BTL${mode:+ $mode}]"
    for np in 2 4 8; do # 8: PSCW on osc sm hung there 1 run in 3-4 (adaptive)
        run "stall_rma np=$np osc pt2pt $tag" $np "$m --mca osc pt2pt" "$BIN/stall_rma" "$PHASE_LIMIT"
        run "stall_rma np=$np default osc $tag" $np "$m" "$BIN/stall_rma" "$PHASE_LIMIT"
    done
    for np in 2 4; do
        run "stall_nbc np=$np $tag" $np "$m" "$BIN/stall_nbc" "$PHASE_LIMIT"
    done
    run "stall_bidir np=2 shm $tag" 2 "$m" "$BIN/stall_bidir"
    if is_doorbell; then
        run "stall_bidir np=2 force_tcp $tag" 2 "$m --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo" \
            "$BIN/stall_bidir"
    fi
done
echo "== stall tests done in $((SECONDS - START)) s, logs in $LOGS"
echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
