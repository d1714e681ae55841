#!/usr/bin/env bash
# run.sh [--asan] -- install the library into target/prefix, build the C tests
# against that package and run them with CTest.  Prints one PASS/FAIL line per
# test and "N passed, M failed"; exits non-zero on any failure.
# Needs: cmake, gcc, root (the bad_input test mounts a tmpfs in a private
# mount namespace).  Builds the Rust library first if it is missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=target/c-tests
extra=()
if [ "${1:-}" = --asan ]; then
  build=target/c-tests-asan
  extra=(-DDBT_SANITIZE=ON)
  # The Rust library is not instrumented (its heap still goes through
  # ASan's malloc, so LeakSanitizer sees what a test never gives back).
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
fi
if [ ! -f target/release/libdoorbell.so ] || [ ! -f target/release/libdoorbell.a ]; then
  timeout 1200 cargo build --release
fi
scripts/install-prefix.sh target/prefix
timeout 300 cmake -S c-tests -B "$build" -DCMAKE_PREFIX_PATH="$root/target/prefix" "${extra[@]}" >/dev/null
timeout 600 cmake --build "$build" -j2 >/dev/null
set +e
timeout 1800 ctest --test-dir "$build" --output-on-failure 2>&1 | tee "$build/ctest.log"
rc=${PIPESTATUS[0]}
set -e
# One line per test, from CTest's own "Test #n: name .... Passed/Failed" lines.
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) \.*\** *\([A-Za-z*]*\).*/\1 \2/p' "$build/ctest.log" |
  while read -r name result; do
    if [ "$result" = Passed ]; then echo "PASS: c-tests $name"; else echo "FAIL: c-tests $name ($result)"; fi
  done
passed=$(grep -c '^ *[0-9]*/[0-9]* Test *#.* Passed' "$build/ctest.log" || true)
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$build/ctest.log" | tail -n1)
total=${total:-0}
failed=$((total - passed))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
