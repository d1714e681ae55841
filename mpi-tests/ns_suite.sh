# mpi-tests/ns_suite.sh -- sourced by the suites that run in a private mount
# namespace of their own (shm_full.sh, shm_squat.sh, pidns_jobs.sh,
# force_tcp.sh): the re-exec under unshare, the output directory, the
# PASS/FAIL counters and the checks they share.
#
#   ns_suite_enter FLAG "$0" "$@"   re-exec the script under `unshare -m`
#                                   (once: FLAG=1 marks the second run), so
#                                   its mounts are seen by it alone
#   ns_suite_out DIR                OUT (default DIR), emptied of old logs
#   pass NAME [DETAIL]; fail NAME [DETAIL] [LOG]; finish
#   build_program NAME              mpicc.openmpi $HERE/NAME.c -> $OUT/NAME
#   paths PATH LOG                  how many rank->peer pairs the finalize
#                                   report (btl_doorbell_verbose) puts on PATH
# The caller sets HERE (its directory) before sourcing.

ns_suite_enter() {
    local flag=$1
    shift
    if [[ ${!flag:-} != 1 ]]; then
        exec env "$flag=1" unshare -m --propagation private "$@"
    fi
}

ns_suite_out() {
    OUT=${OUT:-$1}
    mkdir -p "$OUT"
    rm -f "$OUT"/*.log
}

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-66s %s\n' "$1" "${2:-}"; }
fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-66s %s\n' "$1" "${2:-}"
    [[ -n ${3:-} && -f $3 ]] && tail -n 25 "$3" | sed 's/^/      | /'
}
finish() {
    echo "$PASSED passed, $FAILED failed"
    [[ $FAILED -eq 0 ]]
    exit
}

build_program() {
    local log=$OUT/build-$1.log
    if mpicc.openmpi -O2 -g -Wall -Wextra -Werror -o "$OUT/$1" "$HERE/$1.c" >"$log" 2>&1; then
        pass "build $1"
    else
        fail "build $1" "mpicc.openmpi failed" "$log"
        return 1
    fi
}

paths() {
    sed -n "s/.*btl doorbell: rank \([0-9]*\) peer \([0-9]*\) path=$1.*/\1 \2/p" "$2" | awk '$1 != $2' | wc -l
}
