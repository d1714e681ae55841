#!/usr/bin/env bash
# Runs every test of the project, in order of what builds on what:
#   0. clippy: every unsafe block has a SAFETY comment
#   1. Rust unit + integration tests (ring, bell, endpoint, header is current)
#   2. the loom models of the bell, and of the real queue and fast-box code
#      (--cfg loom: every `loom_tests` module)
#   3. C tests (CMake/CTest, forked processes) against the installed library
#   4. the Open MPI component: mpi-tests/ over --mca btl self,doorbell;
#      fi: the libfabric provider under Open MPI's mtl ofi, the MPICH
#      wheel and Intel MPI's runtime (fi/tests/run.sh)
#   5. the two-node layout (network namespaces) under a real mpirun
#   6. stall: two-way traffic and progress-source stalls (mpi-tests/stall.sh)
#   7. shm-full: a shared-memory directory too small for every rank
#      (mpi-tests/shm_full.sh); shm-squat: another user squats doorbell's
#      names (mpi-tests/shm_squat.sh); pidns-jobs: two jobs with one job id
#      in two pid namespaces (mpi-tests/pidns_jobs.sh); each in a private
#      mount namespace
#   8. force-tcp: force_tcp with a read-only /dev/shm, and MPI_Abort is
#      not a lost peer (mpi-tests/force_tcp.sh, private mount namespace)
#   9. spawn: dynamic processes -- MPI_Comm_spawn, connect/accept between
#      two mpiruns, MPI_Comm_join, mpi4py's MPIPoolExecutor -- over shared
#      memory and force_tcp (mpi-tests/spawn.sh, private mount namespace)
#  10. soak: 60 s per path of mixed, checked traffic with SIGSTOPped ranks
#  11. asan: the C tests and the MPI tests under AddressSanitizer (scripts/asan.sh)
# Prints each suite's figures and a last line "N passed, M failed".
# SUITES="name ..." runs only those suites (scripts/test-under-load.sh).
# The counts are doorbell's own results only: a suite that runs another BTL
# for reference (mpi-tests idle CPU beside vader, netns beside self,vader,tcp)
# prints those runs as "REF" lines and leaves them out of its own count.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
LOG=$ROOT/target/test-logs
mkdir -p "$LOG"
passed=0
failed=0
failed_suites=()

# Add a suite's counts: cargo prints "N passed; M failed" once per test
# binary (all summed); our scripts end with one "N passed, M failed" line,
# and only the last such line counts -- a suite may quote an inner suite's
# summary in its output (netns runs mpi-tests/run.sh, for doorbell and for
# the self,vader,tcp reference), and those inner lines are not its result.
count() {
    local log=$1 p f
    p=$(grep -aoE '([0-9]+) passed; ([0-9]+) failed' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(grep -aoE '([0-9]+) passed; ([0-9]+) failed' "$log" | awk '{s+=$3} END {print s+0}')
    passed=$((passed + p))
    failed=$((failed + f))
    read -r p f < <(grep -aoE '([0-9]+) passed, ([0-9]+) failed' "$log" | tail -n 1 | awk '{print $1 + 0, $3 + 0}')
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
}

# SUITES (optional): the names of the suites to run, e.g. "rust stall";
# every suite when unset.
SUITES=${SUITES:-}

suite() {
    local name=$1
    shift
    if [[ -n $SUITES && " $SUITES " != *" $name "* ]]; then
        return 0
    fi
    echo "=== $name: $*"
    if "$@" 2>&1 | tee "$LOG/$name.log"; then
        echo "=== $name: ok"
    else
        echo "=== $name: FAILED (log: $LOG/$name.log)"
        failed_suites+=("$name")
        # A suite that died before counting still counts as one failure.
        grep -aqE '[0-9]+ passed[,;] [0-9]+ failed' "$LOG/$name.log" || failed=$((failed + 1))
    fi
    count "$LOG/$name.log"
}

# Only the lint the project enforces decides this suite (clippy's other
# lints are advice, left to the reader of a plain `cargo clippy`).
unsafe_lint() {
    cargo clippy --release --all-targets -- -A clippy::all -D clippy::undocumented_unsafe_blocks &&
        echo "1 passed, 0 failed (every unsafe block has a SAFETY comment)"
}
suite clippy unsafe_lint
suite rust cargo test --release
suite loom env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$ROOT/target/loom" cargo test --release --lib loom_tests
suite c-tests c-tests/run.sh
suite component ompi/check.sh
suite fi fi/tests/run.sh
suite mpi-tests mpi-tests/run.sh
suite stall mpi-tests/stall.sh
suite shm-full mpi-tests/shm_full.sh
suite shm-squat mpi-tests/shm_squat.sh
suite pidns-jobs mpi-tests/pidns_jobs.sh
suite force-tcp mpi-tests/force_tcp.sh
suite spawn mpi-tests/spawn.sh
suite soak env SOAK_SECONDS="${SOAK_SECONDS:-60}" mpi-tests/soak.sh
suite asan scripts/asan.sh
suite two-node mpi-tests/netns/run.sh

[[ ${#failed_suites[@]} -eq 0 ]] || echo "failed suites: ${failed_suites[*]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && ${#failed_suites[@]} -eq 0 ]]
