#!/usr/bin/env bash
# mpi-tests/soak.sh -- a bounded soak of the doorbell BTL: 4 ranks run
# soak.c (random sizes 1 B..4 MiB, bursts, wildcard receives, every byte
# checked) for SOAK_SECONDS on each path -- shared memory, then TCP
# (btl_doorbell_force_tcp 1 over lo) -- while this script SIGSTOPs a random
# rank every few seconds for 100-500 ms and SIGCONTs it.  Each run prints
# messages, bytes, wake-ups (the component's counters, btl_doorbell_verbose)
# and errors; it passes with exit 0, "soak: OK", 0 errors, every rank's
# counters, at least one stop, and no /dev/shm file of the job left behind.
# Ends with "N passed, M failed"; exits non-zero on any failure.
#
# Environment (all optional):
#   SOAK_SECONDS   seconds per path (600; make test runs 60)
#   SOAK_NP        ranks (4)
#   SOAK_PATHS     "shm tcp"
#   STOP_EVERY_MS  pause between stops, drawn from [x/2, 3x/2] ms (3000)
#   MPICC_FLAGS    extra mpicc flags, word-split (scripts/asan.sh: -fsanitize=address)
#   MPIRUN_EXTRA   extra mpirun arguments, word-split
#   OUT            build and log directory (<repo>/target/mpi-tests-soak)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_NP=${SOAK_NP:-4}
SOAK_PATHS=${SOAK_PATHS:-shm tcp}
STOP_EVERY_MS=${STOP_EVERY_MS:-3000}
MPICC_FLAGS=${MPICC_FLAGS:-}
read -r -a EXTRA_ARGS <<<"${MPIRUN_EXTRA:-}"
OUT=${OUT:-$ROOT/target/mpi-tests-soak}
BIN=$OUT/bin
LOGS=$OUT/logs
mkdir -p "$BIN" "$LOGS"
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-40s %s\n' "$1" "$2"; }
fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-40s %s\n' "$1" "$2"
    [[ -n ${3:-} && -f $3 ]] && grep -avE 'btl doorbell: rank|^ *Data for|^ *=+|Mapper|Node:|Process OMPI|^$' "$3" | tail -n 15 | sed 's/^/      | /'
}

# shellcheck disable=SC2086 # MPICC_FLAGS is a list of flags
if mpicc.openmpi -O2 -g -Wall -Wextra -Werror $MPICC_FLAGS -o "$BIN/soak" "$HERE/soak.c" >"$LOGS/build_soak.log" 2>&1; then
    pass "build soak" ""
else
    fail "build soak" "mpicc.openmpi failed" "$LOGS/build_soak.log"
fi

# sum_counter LOG NAME: NAME=<n> summed over every rank's counters line
sum_counter() {
    grep -a 'btl doorbell: rank [0-9]* counters:' "$1" | grep -aoE "(^| )$2=[0-9]+" |
        awk -F= '{s += $2} END {print s + 0}'
}

# stopper PIDDIR NP STOPS_FILE: until killed, every STOP_EVERY_MS (+-50%)
# stop one rank for 100-500 ms; count the stops in STOPS_FILE
stopper() {
    local dir=$1 np=$2 count=$3 stops=0 pid
    trap 'exit 0' TERM
    while :; do
        sleep "$(awk -v m="$STOP_EVERY_MS" -v r="$RANDOM" 'BEGIN {printf "%.3f", m * (0.5 + r / 32768) / 1000}')"
        pid=$(cat "$dir/rank.$((RANDOM % np))" 2>/dev/null) || continue
        kill -STOP "$pid" 2>/dev/null || continue
        sleep "0.$((100 + RANDOM % 400))"
        kill -CONT "$pid" 2>/dev/null
        stops=$((stops + 1))
        echo "$stops" >"$count"
    done
}

for path in $SOAK_PATHS; do
    label="soak np=$SOAK_NP ${SOAK_SECONDS}s [$path]"
    [[ -x $BIN/soak ]] || { fail "$label" "not built"; continue; }
    case $path in
    shm) args=() ;;
    tcp) args=(--mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo) ;;
    *) fail "$label" "unknown path $path (shm or tcp)"; continue ;;
    esac
    log=$LOGS/soak_$path.log
    piddir=$OUT/pids.$path
    rm -rf "$piddir" && mkdir -p "$piddir"
    echo 0 >"$OUT/stops.$path"
    before=$(ls /dev/shm 2>/dev/null | sort)
    stopper "$piddir" "$SOAK_NP" "$OUT/stops.$path" &
    stopper_pid=$!
    t0=$SECONDS
    rc=0
    timeout -k 15 $((SOAK_SECONDS + 240)) mpirun.openmpi --allow-run-as-root --oversubscribe --display-map \
        --mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_verbose 1 "${args[@]}" "${EXTRA_ARGS[@]}" \
        -np "$SOAK_NP" "$BIN/soak" "$SOAK_SECONDS" "$piddir" >"$log" 2>&1 </dev/null || rc=$?
    kill "$stopper_pid" 2>/dev/null
    wait "$stopper_pid" 2>/dev/null
    # never leave a rank stopped (the job is over; its pids may be gone)
    for f in "$piddir"/rank.*; do [[ -f $f ]] && kill -CONT "$(cat "$f")" 2>/dev/null; done
    took=$((SECONDS - t0))
    stops=$(cat "$OUT/stops.$path")
    job=$(awk 'match($0, /Data for JOB \[[0-9]+,[0-9]+\]/) {
            split(substr($0, RSTART + 14, RLENGTH - 15), id, ",")
            printf "%04x%04x", id[1], id[2]; exit }' <"$log")
    left=$(comm -13 <(echo "$before") <(ls /dev/shm 2>/dev/null | sort) | grep -F "doorbell" | grep -F "${job:-doorbell}" || true)
    summary=$(grep -a '^soak: [0-9]* rounds' "$log" | tail -n 1)
    msgs=$(sed -nE 's/.*messages=([0-9]+).*/\1/p' <<<"$summary")
    bytes=$(sed -nE 's/.*bytes=([0-9]+).*/\1/p' <<<"$summary")
    errors=$(sed -nE 's/^soak: ([0-9]+) failed checks.*/\1/p' "$log" | tail -n 1)
    grep -aq '^soak: OK' "$log" && errors=0
    reports=$(grep -ac 'btl doorbell: rank [0-9]* counters:' "$log")
    wakeups=$(sum_counter "$log" wakeups)
    shm_w=$(sum_counter "$log" shm_wakeups)
    tcp_w=$(sum_counter "$log" tcp_wakeups)
    sleeps=$(sum_counter "$log" sleeps)
    figures="${took}s: $summary; wake-ups=$wakeups (shm $shm_w, tcp $tcp_w) of sleeps=$sleeps; stops=$stops; errors=${errors:-?}"
    echo "      $label: $figures"
    if [[ $rc == 124 || $rc == 137 ]]; then
        fail "$label" "timed out after $((SOAK_SECONDS + 240))s" "$log"
    elif [[ $rc != 0 ]]; then
        fail "$label" "exit $rc (errors=${errors:-?})" "$log"
    elif [[ ${errors:-x} != 0 ]]; then
        fail "$label" "errors=${errors:-? (no soak: line)}" "$log"
    elif [[ -z $msgs || $msgs == 0 ]]; then
        fail "$label" "no message counted" "$log"
    elif [[ $reports != "$SOAK_NP" ]]; then
        fail "$label" "$reports of $SOAK_NP ranks printed doorbell counters" "$log"
    elif [[ $path == tcp ]] && grep -aq 'path=shm' "$log"; then
        fail "$label" "force_tcp set but a peer was reached over shm" "$log"
    elif [[ $path == shm ]] && grep -aq 'path=tcp' "$log"; then
        fail "$label" "a same-node peer was reached over tcp" "$log"
    elif [[ $stops == 0 ]]; then
        fail "$label" "no rank was stopped (run too short for STOP_EVERY_MS=$STOP_EVERY_MS?)" "$log"
    elif [[ -n $left ]]; then
        fail "$label" "left in /dev/shm: $(echo "$left" | tr '\n' ' ')" "$log"
    else
        pass "$label" "messages=$msgs bytes=$bytes wake-ups=$wakeups stops=$stops errors=0"
    fi
done

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
