#!/usr/bin/env bash
# scripts/asan.sh -- the C tests and the MPI tests under AddressSanitizer
# (gcc's -fsanitize=address, with LeakSanitizer).
#
#   1. c-tests/ built with -fsanitize=address,undefined (c-tests/run.sh
#      --asan) and run with leak detection;
#   2. the Open MPI component built with -fsanitize=address into
#      target/asan/components, and mpi-tests/run.sh's C programs built with
#      -fsanitize=address, run at 2 and 4 ranks over shm and force_tcp with
#      only that component on Open MPI's component path; then the soak
#      (mpi-tests/soak.sh) for SOAK_SECONDS per path, instrumented the same way.
#
# The Rust core is not instrumented; its heap still goes through ASan's
# malloc, so overflows into it and leaks of it are still seen.
#
# Open MPI's own leaks.  Open MPI and PMIx leave memory behind at
# MPI_Finalize, and dlclose() their components first, so LeakSanitizer
# cannot name those frames.  No suppression file hides them: LeakSanitizer
# prints every report (exitcode=0), and this script fails a run on any leak
# report with a frame in doorbell -- the component (mca_btl_doorbell.so,
# which is preloaded so that it is never unloaded and its frames stay
# named), libdoorbell, or a test program -- and counts the others as Open
# MPI's.  Any other ASan error (overflow, use after free, ...) makes the
# rank exit non-zero and fails its run.
#
# Prints PASS/FAIL lines and ends with "N passed, M failed".
# Environment: NPS (MPI rank counts, "2 4"), SOAK_SECONDS (20 per path),
# SHM_STRICT (passed to mpi-tests/run.sh), OUT (target/asan).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/target/asan}
NPS=${NPS:-2 4}
SOAK_SECONDS=${SOAK_SECONDS:-20}
mkdir -p "$OUT"
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-58s %s\n' "$1" "${2:-}"; }
fail() { FAILED=$((FAILED + 1)); printf 'FAIL  %-58s %s\n' "$1" "${2:-}"; }
# add the "N passed, M failed" of an inner suite's log
count() {
    local p f
    read -r p f < <(grep -aoE '^([0-9]+) passed, ([0-9]+) failed' "$1" | tail -n 1 | awk '{print $1 + 0, $3 + 0}')
    PASSED=$((PASSED + ${p:-0}))
    FAILED=$((FAILED + ${f:-1}))
}

libasan=$(gcc -print-file-name=libasan.so)
libasan=$(readlink -f "$libasan")
if [[ ! -f $libasan ]]; then
    fail "gcc's ASan runtime (libasan) is installed" "gcc -print-file-name=libasan.so: not found (scripts/deps.sh)"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi

# ---- 1. C tests ----
echo "=== asan: c-tests (-fsanitize=address,undefined, leaks detected)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 c-tests/run.sh --asan >"$OUT/c-tests.log" 2>&1
grep -aE '^(PASS|FAIL): c-tests ' "$OUT/c-tests.log"
grep -aE 'ERROR: (Address|Leak)Sanitizer|runtime error' "$OUT/c-tests.log" | head -n 5 | sed 's/^/      | /'
count "$OUT/c-tests.log"

# ---- 2. the component and the MPI tests ----
echo "=== asan: Open MPI component + mpi-tests (-fsanitize=address)"
comp=$OUT/components
if [[ ! -f target/release/libdoorbell.a ]]; then cargo build --release >"$OUT/cargo.log" 2>&1; fi
# CFLAGS through the environment: the Makefile appends its own (-fPIC, ...)
if env CFLAGS="-O1 -g -fsanitize=address -fno-omit-frame-pointer" \
    make -C ompi OUTDIR="$OUT/ompi" INSTALLDIR="$comp" install >"$OUT/component-build.log" 2>&1 &&
    nm -D "$comp/mca_btl_doorbell.so" | grep __asan_report >/dev/null; then
    pass "component built with -fsanitize=address"
else
    fail "component built with -fsanitize=address" "see $OUT/component-build.log"
fi
sysdir=$(ompi_info --param mca base --level 9 2>/dev/null |
    sed -nE 's/.*"mca_base_component_path" \(current value: "([^:"]*).*/\1/p' | head -n 1)
preload="$libasan:$comp/mca_btl_doorbell.so"
# fast_unwind_on_malloc=0: Open MPI has no frame pointers, and a leak's
# stack must reach the doorbell frame under Open MPI's ones to be judged.
asan_opts=detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=0:exitcode=23
extra="--mca mca_base_component_path $sysdir:$comp -x LD_PRELOAD=$preload -x ASAN_OPTIONS=$asan_opts -x LSAN_OPTIONS=exitcode=0"
# idle_cpu and idle_point are left out: they assert CPU use and wake-up
# times, which ASan's slower malloc and a loaded machine move; the code
# they aim at (the idle point, the blocking-call wrappers, the slot
# rewriting) runs in every other program too.
OUT_MPI=$OUT/mpi-tests
env MPICC_FLAGS="-fsanitize=address -fno-omit-frame-pointer" NPS="$NPS" OUT="$OUT_MPI" \
    PRELOAD_FIRST="$preload" \
    TESTS="pingpong anysource probe alltoall_nb ssend_vector collectives threads" \
    MPIRUN_EXTRA="$extra" mpi-tests/run.sh >"$OUT/mpi-tests.log" 2>&1
grep -aE '^(PASS|FAIL) ' "$OUT/mpi-tests.log"
count "$OUT/mpi-tests.log"
# the soak: sizes up to 4 MiB (RGET), bursts, wildcards, SIGSTOPped ranks
env MPICC_FLAGS="-fsanitize=address -fno-omit-frame-pointer" OUT="$OUT/soak" SOAK_SECONDS="$SOAK_SECONDS" \
    STOP_EVERY_MS=1500 MPIRUN_EXTRA="$extra" mpi-tests/soak.sh >"$OUT/soak.log" 2>&1
grep -aE '^(PASS|FAIL) |^      soak' "$OUT/soak.log"
count "$OUT/soak.log"

# ---- leaks in the MPI runs: ours fail, Open MPI's are counted ----
# A report is doorbell's if any frame is a function of the component or
# the core (by name or source file), or if a test program itself called the
# allocator (frame #1).  Every stack passes through a test program's main(),
# so only frame #1 counts for them.  Frames are judged by what they name,
# not by module: with the slow unwinder a stack can hold a stray address
# that falls in the component's mapping but in no function (seen once, past
# its code, under Open MPI's MPI_Init), and every real function of the
# preloaded component has a name.
OURS='btl_doorbell_[a-z_]+[.][ch]:| in (mca_btl_)?doorbell_[a-z_]+ |doorbell::|/src/([a-z_]+/)*[a-z_]+[.]rs:'
PROG='/mpi-tests/[a-z_0-9]+[.]c:'
ours=0
theirs=0
for log in "$OUT_MPI"/logs/*.log "$OUT"/soak/logs/soak_*.log; do
    [[ $log == */build_* ]] && continue
    # one report per blank-line-separated block that starts with "... leak of"
    read -r o t < <(awk -v ours="$OURS" -v prog="$PROG" '
        /^(Direct|Indirect) leak of/ { inb = 1; mine = 0; next }
        inb && /^ *#[0-9]+ / { if ($0 ~ ours || ($1 == "#1" && $0 ~ prog)) mine = 1; next }
        inb { if (mine) o++; else t++; inb = 0 }
        END { print o + 0, t + 0 }' "$log")
    ours=$((ours + o))
    theirs=$((theirs + t))
    if [[ $o -gt 0 ]]; then
        echo "      leak reports with a doorbell frame in $log:"
        awk -v ours="$OURS" -v prog="$PROG" '
            /^(Direct|Indirect) leak of/ {b = $0; mine = 0; next}
            /^ *#[0-9]+ / {b = b "\n" $0; if ($0 ~ ours || ($1 == "#1" && $0 ~ prog)) mine = 1; next}
            b != "" { if (mine) print b "\n"; b = "" }' "$log" |
            head -n 40 | sed 's/^/      | /'
    fi
done
if [[ $ours == 0 ]]; then
    pass "no leak report with a doorbell frame in the MPI runs" "(Open MPI/PMIx's own: $theirs reports, not judged)"
else
    fail "no leak report with a doorbell frame in the MPI runs" "$ours reports (Open MPI/PMIx's own: $theirs)"
fi
if grep -alE 'ERROR: AddressSanitizer' "$OUT_MPI"/logs/*.log "$OUT"/soak/logs/*.log >/dev/null 2>&1; then
    fail "no AddressSanitizer error in the MPI runs" "$(grep -alE 'ERROR: AddressSanitizer' "$OUT_MPI"/logs/*.log "$OUT"/soak/logs/*.log | head -n 3 | tr '\n' ' ')"
else
    pass "no AddressSanitizer error in the MPI runs"
fi

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
