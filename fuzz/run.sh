#!/usr/bin/env bash
# Runs each fuzz target for FUZZ_SECONDS (default 600) in turn, at the
# lowest CPU priority, and prints how long each ran with how many execs.
# Not part of make test (CI has no nightly toolchain budget for it).
#   fuzz/run.sh                 # every target, 10 minutes each
#   FUZZ_SECONDS=60 fuzz/run.sh queue tcp_rx
# New inputs go to fuzz/work/<target>/ (not committed); the committed seeds
# in fuzz/corpus/<target>/ are read, never written.  A crash leaves its
# input in fuzz/work/<target>-crash-*; replay it with
#   cargo +nightly fuzz run <target> fuzz/work/<target>-crash-...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
SECONDS_EACH=${FUZZ_SECONDS:-600}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(frame handshake tcp_rx address queue)
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 1; }
nice -n 19 cargo +nightly fuzz build
status=0
for t in "${targets[@]}"; do
    mkdir -p "work/$t"
    log="work/$t.log"
    # A stranger's bytes must never make the receive parser allocate more
    # than they bring: bodies grow as bytes arrive.
    limits=()
    [[ $t == tcp_rx || $t == handshake ]] && limits=(-malloc_limit_mb=64)
    echo "=== $t: ${SECONDS_EACH} s"
    if nice -n 19 cargo +nightly fuzz run "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -artifact_prefix="work/$t-" -print_final_stats=1 "${limits[@]}" >"$log" 2>&1; then
        echo "=== $t: $(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1), corpus $(ls "work/$t" | wc -l) inputs, no crash"
    else
        status=1
        echo "=== $t: FAILED (log: fuzz/$log)"
        grep -E 'panicked|ERROR|SUMMARY|Test unit' "$log" | head -n 5
    fi
done
exit $status
