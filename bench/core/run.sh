#!/usr/bin/env bash
# Builds and runs the doorbell core benchmark (bench/core/doorbell_bench.c).
#   bench/core/run.sh [all|floors|core]      full run: < ~3 min (about 30 s on an idle 2-core box)
#   QUICK=1 bench/core/run.sh                smoke run, a few seconds
#   STRICT=1 ...                             a missed performance target fails the run
#   NO_CARGO=1 ...                           use the existing target/release/libdoorbell.so as is
# Output: PASS/FAIL per floor and per doorbell configuration, the tables, and
# a last line "N passed, M failed"; exit status non-zero on any failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=$root/target/release
out=$root/target/bench-core

fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

if [ "${NO_CARGO:-0}" != 1 ]; then
  # A no-op when the core is up to date; keeps the bench from timing a stale library.
  (cd "$root" && timeout 1200 cargo build --release) || fail "cargo build --release"
fi
[ -f "$lib/libdoorbell.so" ] || fail "$lib/libdoorbell.so missing (build the core: cargo build --release)"

mkdir -p "$out"
# rpath: the binary finds this checkout's libdoorbell.so without LD_LIBRARY_PATH.
cc -std=c11 -O2 -g -Wall -Wextra -Werror -I"$root/include" "$here/doorbell_bench.c" \
  -o "$out/doorbell_bench" -L"$lib" -ldoorbell -Wl,-rpath,"$lib" -lpthread \
  || fail "compiling doorbell_bench.c"

# The program bounds every wait itself; this is the outer safety net.
rc=0
timeout -k 5 300 "$out/doorbell_bench" "$@" || rc=$?
if [ "$rc" -ge 124 ]; then
  echo "FAIL: doorbell_bench killed (timeout or signal, status $rc)"
  echo "0 passed, 1 failed"
fi
exit "$rc"
