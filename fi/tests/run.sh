#!/usr/bin/env bash
# fi/tests/run.sh -- the doorbell libfabric provider under real MPIs.
#
# Builds libdoorbell-fi.so (release) into $OUT/prov, checks that fi_info
# lists it (Debian's libfabric 1.17 and, when the MPICH wheel is there, its
# 2.x core), runs the provider's unit tests and fi_check (libfabric's API
# without an MPI, under both cores), then runs the repo's MPI test
# programs over it: Open MPI 4.1 with `pml cm, mtl ofi`, MPICH (the PyPI
# wheel, ch4:ofi with MPIR_CVAR_NOLOCAL=1 so that on-node traffic goes
# through the provider) and Intel MPI (the impi-rt wheel, I_MPI_FABRICS=ofi,
# over the MPICH wheel's libfabric and over Debian's).  Each MPI runs them
# twice: shared memory, then FI_DOORBELL_FORCE_TCP=1 over loopback.  Every
# run has FI_DOORBELL_DEBUG=1 and passes only if every rank's endpoint
# printed at close that it received messages through the core: a run that
# an MPI carried over another transport fails.  Prints PASS/FAIL per step (a
# missing MPI, libfabric tool or mpi4py is a failure) and ends with
# "N passed, M failed"; exits non-zero on any failure.
#
# Environment (all optional):
#   MPIS         which MPIs                       ("ompi mpich impi")
#   NPS          rank counts                      ("2 4")
#   TESTS        programs                         ("pingpong anysource probe alltoall_nb
#                                                   ssend_vector collectives threads idle_cpu
#                                                   idle_point kill_ranks stranger mpi4py":
#                                                   idle_point also with "threads"; kill_ranks at
#                                                   4 ranks on shm: a killed job leaves no file
#                                                   behind; stranger at 2 ranks over TCP, visited
#                                                   by mpi-tests/stranger_attack.py; pingpong also
#                                                   as two jobs at once; mpi4py at
#                                                   2 ranks where mpi4py imports: the wheel's venv
#                                                   for MPICH, /usr/bin/python3 for Open MPI)
#   IMPI_TESTS   the programs Intel MPI runs      ("pingpong anysource collectives probe")
#   TCP_PASS     1: repeat everything with FI_DOORBELL_FORCE_TCP=1   (1)
#   WAIT         FI_DOORBELL_WAIT for the runs     (adaptive)
#   IDLE_CPU_LIMIT  percent a blocked receiver may use (5)
#   IDLE_WAKE_LIMIT wake-ups a second it may have (600: sleeps grow to
#                   FI_DOORBELL_SLEEP_MAX_US, 8 ms, though the test starts
#                   a watcher thread, as its MPI runs below
#                   MPI_THREAD_MULTIPLE: 125-160 a second; what the limit
#                   catches is sleeps kept at 1 ms, 800-925 a second)
#   PINGPONG_MAX    largest ping-pong message        (16777216)
#   RUN_TIMEOUT  seconds per mpirun/mpiexec        (180)
#   MPICH_VENV   the MPICH wheel's venv            (<repo>/target/venv-mpich,
#                made by scripts/deps.sh; Intel MPI's programs are built
#                with its mpi.h, the ABI the two share)
#   IMPI_VENV    the impi-rt wheel's venv          (<repo>/target/venv-impi, ditto)
#   OUT          build and log directory          (<repo>/target/fi-tests)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MPIS=${MPIS:-ompi mpich impi}
NPS=${NPS:-2 4}
TESTS=${TESTS:-pingpong anysource probe alltoall_nb ssend_vector collectives threads idle_cpu idle_point kill_ranks stranger mpi4py}
IMPI_TESTS=${IMPI_TESTS:-pingpong anysource collectives probe}
TCP_PASS=${TCP_PASS:-1}
WAIT=${WAIT:-adaptive}
IDLE_CPU_LIMIT=${IDLE_CPU_LIMIT:-5}
IDLE_WAKE_LIMIT=${IDLE_WAKE_LIMIT:-600}
PINGPONG_MAX=${PINGPONG_MAX:-16777216}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
MPICH_VENV=${MPICH_VENV:-$ROOT/target/venv-mpich}
IMPI_VENV=${IMPI_VENV:-$ROOT/target/venv-impi}
OUT=${OUT:-$ROOT/target/fi-tests}
PROV=$OUT/prov
BIN=$OUT/bin
LOGS=$OUT/logs
mkdir -p "$PROV" "$BIN" "$LOGS"
rm -f "$LOGS"/*.log

PASSED=0
FAILED=0
pass() { printf 'PASS  %s\n' "$1"; PASSED=$((PASSED + 1)); }
fail() { printf 'FAIL  %s  (log: %s)\n' "$1" "${2:-}"; FAILED=$((FAILED + 1)); }
slug() { tr -c 'A-Za-z0-9_.-' '_' <<<"$1"; }

# ---- build ----
log=$LOGS/build.log
if (cd "$ROOT" && nice -n 10 cargo build --release -p doorbell-fi) >"$log" 2>&1 &&
    cp "$ROOT/target/release/libdoorbell_fi.so" "$PROV/libdoorbell-fi.so"; then
    pass "build libdoorbell-fi.so"
else
    fail "build libdoorbell-fi.so" "$log"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi

log=$LOGS/unit.log
if (cd "$ROOT" && nice -n 10 cargo test --release -p doorbell-fi) >"$log" 2>&1; then
    pass "unit tests ($(grep -o '[0-9]* passed' "$log" | head -1))"
else
    fail "unit tests" "$log"
fi

# ---- fi_info ----
fi_info_check() { # name, then env assignments
    local name=$1 log=$LOGS/$(slug "$1").log
    shift
    if env "$@" FI_PROVIDER_PATH="$PROV" fi_info -p doorbell -v >"$log" 2>&1 &&
        grep -q 'prov_name: doorbell' "$log" && grep -q 'FI_TAGGED' "$log" && grep -q 'FI_MULTI_RECV' "$log"; then
        pass "$name"
    else
        fail "$name" "$log"
    fi
}
if command -v fi_info >/dev/null; then
    fi_info_check "fi_info -p doorbell (libfabric $(fi_info --version | awk '/^libfabric:/ {print $2}'))"
    log=$LOGS/fi_info_e.log
    FI_PROVIDER_PATH="$PROV" fi_info -e >"$log" 2>&1
    if grep -aq FI_DOORBELL_WAIT "$log"; then
        pass "fi_info -e lists FI_DOORBELL_WAIT"
    else
        fail "fi_info -e lists FI_DOORBELL_WAIT" "$log"
    fi
    if [[ -f $MPICH_VENV/lib/mpich/libfabric.so.1 ]]; then
        fi_info_check "fi_info -p doorbell (MPICH wheel's libfabric)" LD_LIBRARY_PATH="$MPICH_VENV/lib/mpich"
    else
        fail "fi_info -p doorbell (MPICH wheel's libfabric): no $MPICH_VENV/lib/mpich/libfabric.so.1 (scripts/deps.sh installs it)"
    fi
else
    fail "fi_info: libfabric-bin not installed (scripts/deps.sh installs it)"
fi

# ---- the provider through libfabric's API, no MPI (fi_check.c) ----
log=$LOGS/build-fi_check.log
if cc -O2 -Wall -I "$ROOT/fi/include" -o "$BIN/fi_check" "$ROOT/fi/tests/fi_check.c" -lfabric >"$log" 2>&1; then
    for via in shm tcp; do
        tcp=0
        [[ $via == tcp ]] && tcp=1
        for core in debian wheel debian-waitfd debian-nocma; do
            # The receiver's endpoint says at close how it read the three
            # one-copy messages it received (the fourth it discarded):
            # over shared memory with process_vm_readv, or over TCP with
            # FI_DOORBELL_CMA=0; over TCP they go eagerly.  The runs on
            # Debian's libfabric add a message longer than 1 GiB ("long"),
            # one-copy on every path: one read more, in 17 pieces over TCP.
            envs=(FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo FI_DOORBELL_FORCE_TCP=$tcp FI_DOORBELL_DEBUG=1)
            name="fi_check $via, a message over 1 GiB (libfabric 1.17)"
            reads="one-copy reads: 4 by process_vm_readv, 0 over TCP"
            [[ $via == tcp ]] && reads="one-copy reads: 0 by process_vm_readv, 1 over TCP"
            wait_arg=(long)
            if [[ $core == debian-nocma ]]; then
                [[ $via == shm ]] || continue
                envs+=(FI_DOORBELL_CMA=0)
                name="fi_check $via FI_DOORBELL_CMA=0, a message over 1 GiB (libfabric 1.17)"
                reads="one-copy reads: 0 by process_vm_readv, 4 over TCP"
            fi
            if [[ $core == debian-waitfd || $core == wheel ]]; then
                wait_arg=()
                reads="one-copy reads: 3 by process_vm_readv, 0 over TCP"
                [[ $via == tcp ]] && reads="one-copy reads: 0 by process_vm_readv, 0 over TCP"
            fi
            if [[ $core == debian-waitfd ]]; then
                wait_arg=(waitfd)
                name="fi_check $via FI_WAIT_FD (libfabric 1.17)"
            fi
            if [[ $core == wheel ]]; then
                [[ -f $MPICH_VENV/lib/mpich/libfabric.so.1 ]] || continue
                envs+=(LD_LIBRARY_PATH="$MPICH_VENV/lib/mpich")
                name="fi_check $via (MPICH wheel's libfabric, its API version)"
            fi
            log=$LOGS/$(slug "$name").log
            if env "${envs[@]}" timeout -k 5 "$RUN_TIMEOUT" "$BIN/fi_check" core "${wait_arg[@]}" >"$log" 2>&1 &&
                grep -q '^fi_check: OK' "$log" && grep -qF "$reads" "$log"; then
                pass "$name"
            else
                fail "$name" "$log"
            fi
        done
        # Block mode, sleeps bounded at 20 s: the read right after a find
        # must not sleep (fi_check.c `drain`).
        name="fi_check $via, block mode: the read after a find does not sleep"
        log=$LOGS/$(slug "$name").log
        if env FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo FI_DOORBELL_FORCE_TCP=$tcp FI_DOORBELL_WAIT=block \
            FI_DOORBELL_SLEEP_MIN_US=20000000 FI_DOORBELL_SLEEP_MAX_US=20000000 \
            timeout -k 5 "$RUN_TIMEOUT" "$BIN/fi_check" core drain >"$log" 2>&1 && grep -q '^fi_check: OK' "$log"; then
            pass "$name"
        else
            fail "$name" "$log"
        fi
    done
else
    fail "build fi_check" "$log"
fi

# ---- MPI programs ----
PYTHON_ompi=/usr/bin/python3
PYTHON_mpich=$MPICH_VENV/bin/python
WHEEL_FABRIC=$MPICH_VENV/lib/mpich/libfabric.so.1
DEBIAN_FABRIC=/usr/lib/x86_64-linux-gnu/libfabric.so.1
have_mpi() {
    case $1 in
    ompi) command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null &&
        ls /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_mtl_ofi.so >/dev/null 2>&1 ;;
    mpich) [[ -x $MPICH_VENV/bin/mpicc && -x $MPICH_VENV/bin/mpiexec ]] ;;
    # impi-rt has no compiler: MPICH's mpi.h, linked to Intel's libmpi.so.12.
    impi) [[ -x $IMPI_VENV/bin/mpiexec && -f $IMPI_VENV/lib/libmpi.so.12 && -f $MPICH_VENV/include/mpi.h &&
        -f $WHEEL_FABRIC && -f $DEBIAN_FABRIC ]] ;;
    esac
}
build_prog() { # MPI SOURCE OUTPUT
    case $1 in
    ompi) mpicc.openmpi -O2 -o "$3" "$2" ;;
    mpich) "$MPICH_VENV/bin/mpicc" -O2 -o "$3" "$2" ;;
    impi) cc -O2 -I "$MPICH_VENV/include" -o "$3" "$2" -L "$IMPI_VENV/lib" -lmpi -Wl,-rpath,"$IMPI_VENV/lib" ;;
    esac
}

# How many processes printed at an endpoint's close that it received
# messages through the core (FI_DOORBELL_DEBUG=1).
carried() {
    grep -aoE 'doorbell-fi\[[0-9]+\]: endpoint close: window [0-9]+: [0-9]+ sent, [1-9][0-9]* received' "$1" |
        sed -E 's/^doorbell-fi\[([0-9]+)\].*/\1/' | sort -u | wc -l
}

# run_mpi MPI NP NAME EXTRA_ENV... -- PROGRAM ARGS
# (LAUNCH_PREFIX: a command the launcher runs under, e.g. in_tmpfs.sh)
LAUNCH_PREFIX=()
run_mpi() {
    local mpi=$1 np=$2 name=$3
    shift 3
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local log=$LOGS/$(slug "$name").log
    local base=(FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo FI_DOORBELL_WAIT="$WAIT" FI_DOORBELL_DEBUG=1 "${envs[@]}")
    local rc
    case $mpi in
    ompi)
        local xs=()
        for e in "${base[@]}"; do xs+=(-x "$e"); done
        env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${LAUNCH_PREFIX[@]}" \
            timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
            "${xs[@]}" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell "$@" >"$log" 2>&1
        rc=$?
        ;;
    mpich)
        env "${base[@]}" MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=doorbell MPIR_CVAR_NOLOCAL=1 "${LAUNCH_PREFIX[@]}" \
            timeout "$RUN_TIMEOUT" "$MPICH_VENV/bin/mpiexec" -n "$np" "$@" >"$log" 2>&1
        rc=$?
        ;;
    impi)
        # I_MPI_FABRICS=ofi: on-node traffic too goes through libfabric.
        env I_MPI_OFI_LIBRARY="$WHEEL_FABRIC" "${base[@]}" FI_PROVIDER=doorbell I_MPI_FABRICS=ofi I_MPI_PIN=0 \
            timeout "$RUN_TIMEOUT" "$IMPI_VENV/bin/mpiexec" -n "$np" "$@" >"$log" 2>&1
        rc=$?
        ;;
    esac
    local prog=${EXPECT:-}
    if [[ -z $prog ]]; then
        prog=$(basename "$1")
        prog=${prog%_*}
    fi
    local through
    through=$(carried "$log")
    if [[ $rc == 0 ]] && grep -q "^$prog: OK" "$log" && [[ $through -ge $np ]]; then
        pass "$name$(grep -o 'IDLE_CPU max=[0-9.]*%' "$log" | head -1 | sed 's/^/ (/;s/$/)/')"
    else
        fail "$name (rc $rc, $through of $np ranks received through the provider)" "$log"
    fi
}

# kill_ranks MPI WHO: 4 ranks exchange, then one or all SIGKILL themselves;
# the job's private shared-memory directory must end up empty.
kill_ranks() {
    local mpi=$1 who=$2 name="$1 kill_ranks $2 np=4 shm" dir
    local log=$LOGS/$(slug "$name").log
    dir=$(mktemp -d /dev/shm/doorbell-fi-kill.XXXXXX)
    case $mpi in
    ompi)
        env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 \
            -x FI_PROVIDER_PATH="$PROV" -x FI_DOORBELL_IF_INCLUDE=lo -x FI_DOORBELL_SHM_DIR="$dir" \
            --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell "$BIN/kill_ranks_$mpi" "$who" >"$log" 2>&1
        ;;
    mpich)
        env FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo FI_DOORBELL_SHM_DIR="$dir" \
            MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=doorbell MPIR_CVAR_NOLOCAL=1 \
            timeout "$RUN_TIMEOUT" "$MPICH_VENV/bin/mpiexec" -n 4 "$BIN/kill_ranks_$mpi" "$who" >"$log" 2>&1
        ;;
    esac
    sleep 1 # survivors ended by the launcher finish exiting
    local left
    left=$(ls -A "$dir" | wc -l)
    if grep -q "kill_ranks: exchanged" "$log" && [[ $left == 0 ]]; then
        pass "$name"
    else
        echo "files left: $(ls -A "$dir" | tr '\n' ' ')" >>"$log"
        fail "$name ($left files left)" "$log"
    fi
    rm -rf "$dir"
}

# stranger MPI: while 2 ranks exchange checked messages over TCP
# (stranger.c), a stranger on the node (mpi-tests/stranger_attack.py) visits
# each rank's listening port 5 times: a hello of the old protocol with forged
# frames, one claiming task 1 with a goodbye, one for task 9999, an HTTP
# request, and a hello keyed with a guessed secret.  The job must run on with
# correct data, every rank must count the 5 visits as strangers, and the
# stranger must have reached both ranks.
stranger() {
    local mpi=$1 name="$1 stranger np=2 tcp"
    local log=$LOGS/$(slug "$name").log alog=$LOGS/$(slug "$name")_attack.log arc=0
    python3 "$ROOT/mpi-tests/stranger_attack.py" "$BIN/stranger_$mpi" --ranks 2 --wait 60 --delay 1 >"$alog" 2>&1 &
    local apid=$!
    run_mpi "$mpi" 2 "$name" FI_DOORBELL_FORCE_TCP=1 -- "$BIN/stranger_$mpi" 4
    wait "$apid" || arc=$?
    local counted
    counted=$(grep -aoE 'strangers rejected by the process: [0-9]+' "$log" | awk '$NF >= 5' | wc -l)
    if [[ $counted -ge 2 && $arc == 0 ]]; then
        pass "$name: both ranks rejected the stranger's 5 visits"
    else
        fail "$name: $counted of 2 ranks rejected 5 visits, attacker exit $arc" "$alog"
    fi
}

# two_jobs MPI VIA: two jobs of the same user on one node at once, each a
# 2-rank ping-pong up to 1 MiB (every byte checked), over shared memory or
# TCP: each must keep to its own segments, ports and peers.
two_jobs() {
    local mpi=$1 via=$2 base="$1 two jobs at once np=2 $2" extra=() j line
    [[ $via == tcp ]] && extra=(FI_DOORBELL_FORCE_TCP=1)
    for j in A B; do
        (run_mpi "$mpi" 2 "$base, job $j" "${extra[@]}" -- "$BIN/pingpong_$mpi" 1048576) >"$LOGS/$(slug "$base")_$j.out" &
    done
    wait
    for j in A B; do
        line=$(grep -E '^(PASS|FAIL)  ' "$LOGS/$(slug "$base")_$j.out" | head -1)
        if [[ $line == PASS* ]]; then
            pass "${line#PASS  }"
        else
            fail "${line#FAIL  }"
        fi
    done
}

# shm_full MPI SIZE WHO: 4 ranks ping-pong (every byte checked) with their
# shared-memory directory a tmpfs of SIZE: room for no rank's control
# segment (WHO=none: each rank warns once and reaches its peers over TCP)
# or for some (WHO=some: those pairs stay on shared memory, the others
# warn and go over TCP).  The job must pass and leave no file there.
shm_full() {
    local mpi=$1 size=$2 who=$3 name="$1 shm_full np=4, a $2 directory: room for $3" dir
    dir=$(mktemp -u "$OUT/shm-full.XXXXXX")
    LAUNCH_PREFIX=("$HERE/in_tmpfs.sh" "$size" "$dir")
    run_mpi "$mpi" 4 "$name" FI_DOORBELL_SHM_DIR="$dir" -- "$BIN/pingpong_$mpi" 1048576
    LAUNCH_PREFIX=()
    local log=$LOGS/$(slug "$name").log warned left
    warned=$(grep -ac 'no room in the shared-memory directory' "$log")
    left=$(cat "$dir.left" 2>/dev/null || echo "?")
    rm -rf "$dir" "$dir.left"
    if [[ $who == none && $warned == 4 || $who == some && $warned -ge 1 && $warned -le 3 ]] && [[ $left == 0 ]]; then
        pass "$name: $warned ranks went over TCP, no file left"
    else
        fail "$name: $warned ranks warned of no room, $left files left" "$log"
    fi
}

leftovers_before=$(ls /dev/shm 2>/dev/null | grep -c "^doorbell-fi\.u$(id -u)\." || true)
for mpi in $MPIS; do
    if ! have_mpi "$mpi"; then
        fail "$mpi: not installed (scripts/deps.sh installs it)"
        continue
    fi
    tests=$TESTS
    [[ $mpi == impi ]] && tests=$IMPI_TESTS
    for t in $tests; do
        log=$LOGS/build-$t-$mpi.log
        rm -f "$BIN/${t}_$mpi"
        [[ -f $ROOT/mpi-tests/$t.c ]] || continue
        if build_prog "$mpi" "$ROOT/mpi-tests/$t.c" "$BIN/${t}_$mpi" >"$log" 2>&1; then :; else
            fail "build $t ($mpi)" "$log"
        fi
    done
    if [[ " $tests " == *" kill_ranks "* && -x $BIN/kill_ranks_$mpi ]]; then
        kill_ranks "$mpi" one
        kill_ranks "$mpi" all
    fi
    if [[ " $tests " == *" stranger "* && -x $BIN/stranger_$mpi ]]; then
        stranger "$mpi"
    fi
    if [[ " $tests " == *" pingpong "* && -x $BIN/pingpong_$mpi && $mpi != impi ]]; then
        two_jobs "$mpi" shm
        two_jobs "$mpi" tcp
        shm_full "$mpi" 40k none
        shm_full "$mpi" 1600k some
    fi
    passes=(shm)
    [[ $TCP_PASS == 1 ]] && passes+=(tcp)
    for via in "${passes[@]}"; do
        extra=()
        [[ $via == tcp ]] && extra=(FI_DOORBELL_FORCE_TCP=1)
        for np in $NPS; do
            if [[ " $tests " == *" mpi4py "* && $np == 2 ]]; then
                py_var=PYTHON_$mpi
                if "${!py_var}" -c 'import mpi4py, numpy' 2>/dev/null; then
                    EXPECT=mpi4py_check run_mpi "$mpi" 2 "$mpi mpi4py np=2 $via" "${extra[@]}" -- "${!py_var}" "$ROOT/mpi-tests/mpi4py_check.py"
                else
                    fail "$mpi mpi4py np=2 $via: mpi4py or numpy not importable by ${!py_var} (scripts/deps.sh installs them)"
                fi
            fi
            for t in $tests; do
                [[ -x $BIN/${t}_$mpi && $t != kill_ranks && $t != stranger ]] || continue
                args=()
                case $t in
                pingpong) args=("$PINGPONG_MAX") ;;
                idle_cpu) args=("$IDLE_CPU_LIMIT" "$IDLE_WAKE_LIMIT") ;;
                esac
                run_mpi "$mpi" "$np" "$mpi $t np=$np $via" "${extra[@]}" -- "$BIN/${t}_$mpi" "${args[@]}"
                if [[ $t == idle_point ]]; then
                    run_mpi "$mpi" "$np" "$mpi $t threads np=$np $via" "${extra[@]}" -- "$BIN/${t}_$mpi" threads
                fi
                # Intel MPI over Debian's libfabric 1.17 as well (shm).
                if [[ $mpi == impi && $via == shm ]]; then
                    run_mpi "$mpi" "$np" "$mpi $t np=$np $via (libfabric 1.17)" I_MPI_OFI_LIBRARY="$DEBIAN_FABRIC" -- "$BIN/${t}_$mpi" "${args[@]}"
                fi
            done
        done
    done
done
leftovers_after=$(ls /dev/shm 2>/dev/null | grep -c "^doorbell-fi\.u$(id -u)\." || true)
if [[ $leftovers_after -le $leftovers_before ]]; then
    pass "no shared-memory segment left behind"
else
    fail "shared-memory segments left: $(ls /dev/shm | grep "^doorbell-fi\.u$(id -u)\." | head -5 | tr '\n' ' ')"
fi

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
