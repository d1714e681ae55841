#!/usr/bin/env bash
# scripts/test-under-load.sh -- run the test suites with busy processes
# beside them, as CI's compiles or a developer's editor would: a test that
# judges a speed fails here, a test that counts what it checks does not.
#
#   scripts/test-under-load.sh                 the whole make test, once, 1 busy process
#   RUNS=10 SUITES="rust c-tests component stall mpi-tests" scripts/test-under-load.sh
#
# Environment:
#   BUSY    busy processes (CPU-bound loops) beside the tests (1)
#   RUNS    how many times to run the suites (1)
#   SUITES  suite names of scripts/test.sh (all when unset)
# Builds first (make build), then runs scripts/test.sh RUNS times; prints
# each run's "N passed, M failed" line and ends with "K of RUNS runs green";
# exits non-zero unless every run was green.  Logs: target/test-under-load/.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUSY=${BUSY:-1}
RUNS=${RUNS:-1}
LOGS=$ROOT/target/test-under-load
mkdir -p "$LOGS"

make build >"$LOGS/build.log" 2>&1 || { echo "make build failed (log: $LOGS/build.log)"; exit 1; }

burners=()
stop_burners() { ((${#burners[@]})) && kill "${burners[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_burners EXIT
for ((b = 0; b < BUSY; b++)); do
    (while :; do :; done) &
    burners+=($!)
done

green=0
for ((r = 1; r <= RUNS; r++)); do
    log=$LOGS/run$r.log
    t0=$SECONDS
    SUITES=${SUITES:-} scripts/test.sh >"$log" 2>&1
    rc=$?
    summary=$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [[ $rc == 0 ]]; then
        green=$((green + 1))
        echo "run $r of $RUNS: green  ${summary} ($((SECONDS - t0)) s, $BUSY busy)"
    else
        echo "run $r of $RUNS: FAILED ${summary:-no summary} ($((SECONDS - t0)) s, $BUSY busy, log: $log)"
        grep -aE '^(FAIL|failed suites)|^=== .*FAILED' "$log" | head -n 12 | sed 's/^/    /'
    fi
done
echo "$green of $RUNS runs green (suites: ${SUITES:-all}, $BUSY busy processes)"
[[ $green == "$RUNS" ]]
