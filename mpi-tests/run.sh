#!/usr/bin/env bash
# mpi-tests/run.sh -- MPI test suite over one Open MPI BTL (ob1 PML).
#
# Builds the C programs (mpicc.openmpi) and the rsmpi programs (cargo) under
# target/, then runs every C program at each rank count in NPS, the Rust,
# NetPIPE and mpi4py programs at 2 ranks, each run under `timeout`.  With a
# doorbell BTL everything runs a second time with btl_doorbell_force_tcp=1,
# and the idle-CPU check is asserted (< IDLE_CPU_LIMIT %) and printed beside
# the figure of a reference BTL (vader).  Prints PASS/FAIL per run and ends
# with "N passed, M failed"; exits non-zero on any failure.  The reference
# BTL's runs print as REF/REF! lines: shown, never counted (the counts are
# the BTL under test's own results).
#
# Environment (all optional):
#   BTL             BTL list under test                      (self,doorbell)
#   NPS             rank counts for the C programs           ("2 4 8")
#   MPIRUN_HOSTS    if set: --host "$MPIRUN_HOSTS" on every mpirun
#   MPIRUN_EXTRA    extra mpirun arguments, word-split       ("")
#   REF_BTL         BTL for the idle-CPU reference figure    (self,vader;
#                   self,vader,tcp when MPIRUN_HOSTS is set)
#   FORCE_TCP_PASS  1: repeat with btl_doorbell_force_tcp 1 when BTL has doorbell (1)
#   IDLE_CPU_LIMIT  percent a blocked receiver may use, doorbell only (5)
#   IDLE_WAKE_LIMIT wake-ups a second of a rank blocked in MPI_Recv or
#                   MPI_Barrier (voluntary context switches), doorbell only (2)
#   PINGPONG_MAX    largest ping-pong message in bytes       (67108864)
#   NP_WIDE         ranks of the wide all-to-all (alltoall_wide) (64)
#   RUN_TIMEOUT     seconds for one mpirun                   (240)
#   TESTS           names to run, default all: pingpong anysource probe
#                   alltoall_nb ssend_vector late_recv collectives threads idle_cpu idle_point
#                   rma_win (doorbell only: MPI_Win_create windows with Open
#                   MPI's default osc, i.e. osc rdma over doorbell's put, get
#                   and atomics; no osc flag)
#                   alltoall_wide (alltoall_nb at NP_WIDE ranks, oversubscribed:
#                   every pair on shm, every byte checked; base variant only)
#                   rust netpipe mpi4py stranger (doorbell, single node only)
#                   tcp_protocols (doorbell: ob1 protocols over force_tcp, np=2)
#                   kill_ranks (doorbell on one node only: it judges that
#                   node's shm directory)
#                   corrupt_header (doorbell on one node only: a corrupted
#                   queue header, record or fast box must end the job with
#                   doorbell's error)
#   OUT             build and log directory                  (<repo>/target/mpi-tests)
#   SHM_GLOB        files that must not be left behind       (/dev/shm/doorbell*)
#   SHM_STRICT      1: at the end, any new SHM_GLOB file fails; 0: only files
#                   named after this suite's jobs (machine shared with others) (0: other
#                   doorbell jobs may run beside the suite, a developer's or a test's)
#   MPICC_FLAGS     extra mpicc flags for the C programs, word-split ("";
#                   scripts/asan.sh: -fsanitize=address)
#   PRELOAD_LIB     what the LD_PRELOAD run preloads to select doorbell
#                   (<repo>/target/ompi/libdoorbell-ompi.so, made by make -C ompi)
#   PRELOAD_FIRST   libraries put before PRELOAD_LIB in the LD_PRELOAD run
#                   ("" ; scripts/asan.sh: the ASan runtime, which must come first)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BTL=${BTL:-self,doorbell}
NPS=${NPS:-2 4 8}
MPIRUN_HOSTS=${MPIRUN_HOSTS:-}
MPIRUN_EXTRA=${MPIRUN_EXTRA:-}
MPICC_FLAGS=${MPICC_FLAGS:-}
PRELOAD_FIRST=${PRELOAD_FIRST:-}
PRELOAD_LIB=${PRELOAD_LIB:-$ROOT/target/ompi/libdoorbell-ompi.so}
if [[ -n $MPIRUN_HOSTS ]]; then REF_BTL=${REF_BTL:-self,vader,tcp}; else REF_BTL=${REF_BTL:-self,vader}; fi
FORCE_TCP_PASS=${FORCE_TCP_PASS:-1}
IDLE_CPU_LIMIT=${IDLE_CPU_LIMIT:-5}
IDLE_WAKE_LIMIT=${IDLE_WAKE_LIMIT:-2}
PINGPONG_MAX=${PINGPONG_MAX:-67108864}
NP_WIDE=${NP_WIDE:-64}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
SHM_GLOB=${SHM_GLOB:-/dev/shm/doorbell*}
SHM_STRICT=${SHM_STRICT:-0}
TESTS=${TESTS:-pingpong anysource probe alltoall_nb ssend_vector late_recv collectives threads idle_cpu idle_point rma_win alltoall_wide rust netpipe mpi4py stranger kill_ranks corrupt_header tcp_protocols}
OUT=${OUT:-$ROOT/target/mpi-tests}
BIN=$OUT/bin
LOGS=$OUT/logs
RUST_TARGET=$ROOT/target/mpi-tests-rust
PY=/usr/bin/python3 # Debian's python3-mpi4py lives there, not in a pyenv/venv python
C_PROGRAMS=(pingpong anysource probe alltoall_nb ssend_vector late_recv collectives threads idle_cpu idle_point rma_win)

PASSED=0
FAILED=0
REFERENCE=0 # 1 while running the reference BTL: results shown, not counted
START=$SECONDS
mkdir -p "$BIN" "$LOGS"
rm -f "$LOGS"/*.log

wanted() { [[ " $TESTS " == *" $1 "* ]]; }
is_doorbell() { [[ ,$1, == *,doorbell,* ]]; }

pass() {
    if [[ $REFERENCE == 1 ]]; then
        printf 'REF   %-58s %s\n' "$1" "${2:-} (reference, not counted)"
        return
    fi
    PASSED=$((PASSED + 1))
    printf 'PASS  %-58s %s\n' "$1" "${2:-}"
}
# fail LABEL REASON [LOG]: count, say why, show the end of the log
fail() {
    if [[ $REFERENCE == 1 ]]; then
        printf 'REF!  %-58s %s\n' "$1" "$2 (reference failed, not counted)"
    else
        FAILED=$((FAILED + 1))
        printf 'FAIL  %-58s %s\n' "$1" "$2"
    fi
    if [[ -n ${3:-} && -f $3 ]]; then
        tail -n 25 "$3" | sed 's/^/      | /'
    fi
}

# Shared-memory files present before we started are not ours to judge.  Other
# doorbell programs running at the same time create files too: each run only
# judges files named after its own job id, and SHM_STRICT=0 does the same for
# the final check.
shm_list() { (shopt -s nullglob; for f in $SHM_GLOB; do echo "$f"; done) | sort; }
SHM_BASELINE=$(shm_list)
SHM_KNOWN=$SHM_BASELINE
# shm_new: set SHM_NEW to the names that appeared since the last call.
SHM_NEW=
shm_new() {
    local now
    now=$(shm_list)
    SHM_NEW=$(comm -13 <(echo "$SHM_KNOWN") <(echo "$now") | sed '/^$/d')
    SHM_KNOWN=$now
}

HOST_ARGS=()
if [[ -n $MPIRUN_HOSTS ]]; then HOST_ARGS=(--host "$MPIRUN_HOSTS"); fi
read -r -a EXTRA_ARGS <<<"$MPIRUN_EXTRA"

# Variants of the transport under test: name and extra mpirun arguments.
VARIANTS=("")
if is_doorbell "$BTL" && [[ $FORCE_TCP_PASS == 1 ]]; then
    VARIANTS+=("force_tcp")
fi
variant_args() {
    case $1 in
    force_tcp) echo "--mca btl_doorbell_force_tcp 1" ;;
    *) echo "" ;;
    esac
}

# doorbell_log_problem LOG NP VARIANT: print why the doorbell counters that
# btl_doorbell_verbose=1 prints at finalize are wrong (nothing if they are fine):
# every rank must report, traffic must have gone through doorbell, and the
# path must be tcp with force_tcp, shm on a single node otherwise.
# shellcheck source=stalls.sh
source "$HERE/stalls.sh"

doorbell_log_problem() {
    local log=$1 np=$2 variant=$3 reports moved
    reports=$(grep -Ec 'btl doorbell: rank [0-9]+ counters:' "$log" || true)
    moved=$({ grep -Eo '(shm|tcp)_sent=[0-9]+' "$log" || true; } | awk -F= '{s += $2} END {print s + 0}')
    if [[ $reports != "$np" ]]; then
        echo "$reports of $np ranks printed doorbell counters"
    elif [[ $moved == 0 ]]; then
        echo "doorbell counters show no message sent"
    elif [[ $variant == force_tcp ]] && grep -q 'path=shm' "$log"; then
        echo "force_tcp set but a peer was reached over shm"
    elif [[ $variant == force_tcp ]] && ! grep -q 'path=tcp' "$log"; then
        echo "force_tcp set but no peer reached over tcp"
    elif [[ -z $variant && -z $MPIRUN_HOSTS ]] && grep -q 'path=tcp' "$log"; then
        echo "single node, yet a peer was reached over tcp"
    else
        stall_problem "$log" "$np"
    fi
}

# run_mpi LABEL NP BTL VARIANT EXPECT_REGEX CMD... -- one timed mpirun.
# PASS needs exit 0, EXPECT_REGEX in the output, sane doorbell counters and no
# shared-memory file of this job left behind.  The log stays in $LOGS; RUN_LOG
# names it for callers that parse output.
RUN_LOG=
ALL_JOBS=()
run_mpi() {
    local label=$1 np=$2 btl=$3 variant=$4 expect=$5
    shift 5
    local vargs=() t0 rc=0 leaked job problem=
    read -r -a vargs <<<"$(variant_args "$variant")"
    # counters and per-peer paths at finalize, checked below
    if is_doorbell "$btl"; then vargs+=(--mca btl_doorbell_verbose 1); fi
    RUN_LOG=$LOGS/$(echo "$label" | tr -c 'A-Za-z0-9_.-' '_' | tr -s _).log
    t0=$SECONDS
    # --display-map prints the job id (to attribute /dev/shm files to this run);
    # </dev/null: mpirun forwards stdin to rank 0 and must not eat the caller's
    timeout -k 15 "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe --display-map \
        --mca pml ob1 --mca btl "$btl" -np "$np" "${HOST_ARGS[@]}" "${vargs[@]}" "${EXTRA_ARGS[@]}" \
        "$@" >"$RUN_LOG" 2>&1 </dev/null || rc=$?
    local took="($((SECONDS - t0))s)"
    # "Data for JOB [family,local]" -> the 8 hex digits Open MPI's jobid prints as
    job=$(awk 'match($0, /Data for JOB \[[0-9]+,[0-9]+\]/) {
            split(substr($0, RSTART + 14, RLENGTH - 15), id, ",")
            printf "%04x%04x", id[1], id[2]; exit }' <"$RUN_LOG")
    if [[ -n $job ]]; then ALL_JOBS+=("$job"); fi
    shm_new
    # files named after this job; all new files if the job id is unknown
    if [[ -n $job ]]; then leaked=$(echo "$SHM_NEW" | grep -F "$job" || true); else leaked=$SHM_NEW; fi
    if [[ $rc == 0 ]] && is_doorbell "$btl"; then
        problem=$(doorbell_log_problem "$RUN_LOG" "$np" "$variant")
    fi
    if [[ $rc == 124 || $rc == 137 ]]; then
        fail "$label" "timed out after ${RUN_TIMEOUT}s $took" "$RUN_LOG"
    elif [[ $rc != 0 ]]; then
        fail "$label" "exit $rc $took" "$RUN_LOG"
    elif ! grep -Eq -- "$expect" "$RUN_LOG"; then
        fail "$label" "exit 0 but no line matching /$expect/ $took" "$RUN_LOG"
    elif [[ -n $problem ]]; then
        fail "$label" "$problem $took" "$RUN_LOG"
    elif [[ -n $leaked ]]; then
        fail "$label" "left in /dev/shm: $(echo "$leaked" | tr '\n' ' ')" "$RUN_LOG"
    else
        pass "$label" "$took"
        return 0
    fi
    return 1
}

tag_of() { # label suffix for a variant
    if [[ -n $2 ]]; then echo "[$1 +$2]"; else echo "[$1]"; fi
}

echo "== mpi-tests: BTL=$BTL NPS='$NPS' hosts='${MPIRUN_HOSTS}' extra='${MPIRUN_EXTRA}' variants: base ${VARIANTS[*]:1}"

# ---- preconditions: the component must be there (a missing one is a failure) ----
if is_doorbell "$BTL"; then
    # captured first: grep -q exiting early would SIGPIPE ompi_info under pipefail
    info=$(ompi_info 2>&1 || true)
    params=$(ompi_info --param btl doorbell --level 9 2>&1 || true)
    if grep -Eq 'MCA btl: doorbell' <<<"$info"; then
        pass "doorbell component registered (ompi_info)"
    else
        fail "doorbell component registered (ompi_info)" "ompi_info lists no 'MCA btl: doorbell'"
    fi
    if [[ $FORCE_TCP_PASS == 1 ]]; then
        if grep -q 'btl_doorbell_force_tcp' <<<"$params"; then
            pass "doorbell parameter btl_doorbell_force_tcp exists"
        else
            fail "doorbell parameter btl_doorbell_force_tcp exists" "not in ompi_info --param btl doorbell --level 9"
        fi
    fi
fi

# ---- build ----
BUILD=("${C_PROGRAMS[@]}")
KILL_RANKS=0
if wanted kill_ranks && is_doorbell "$BTL" && [[ -z $MPIRUN_HOSTS ]]; then KILL_RANKS=1; fi
if [[ $KILL_RANKS == 1 ]]; then BUILD+=(kill_ranks); fi
CORRUPT_HEADER=0
if wanted corrupt_header && is_doorbell "$BTL" && [[ -z $MPIRUN_HOSTS ]]; then CORRUPT_HEADER=1; BUILD+=(corrupt_header); fi
if is_doorbell "$BTL"; then BUILD+=(tcp_protocols); fi
for p in "${BUILD[@]}"; do
    # alltoall_wide runs the alltoall_nb program
    wanted "$p" || { [[ $p == alltoall_nb ]] && wanted alltoall_wide; } || continue
    log=$LOGS/build_$p.log
    # shellcheck disable=SC2086 # MPICC_FLAGS is a list of flags
    if mpicc.openmpi -O2 -g -Wall -Wextra -Werror -pthread -I"$ROOT/include" $MPICC_FLAGS -o "$BIN/$p" "$HERE/$p.c" >"$log" 2>&1; then
        pass "build $p"
    else
        fail "build $p" "mpicc.openmpi failed" "$log"
        rm -f "$BIN/$p"
    fi
done
if wanted stranger; then
    log=$LOGS/build_stranger.log
    if mpicc.openmpi -O2 -g -Wall -Wextra -Werror -pthread -o "$BIN/stranger" "$HERE/stranger.c" >"$log" 2>&1; then
        pass "build stranger"
    else
        fail "build stranger" "mpicc.openmpi failed" "$log"
        rm -f "$BIN/stranger"
    fi
fi
if wanted rust; then
    log=$LOGS/build_rust.log
    # --locked: build exactly the versions in Cargo.lock
    if MPICC=mpicc.openmpi CARGO_TARGET_DIR=$RUST_TARGET timeout -k 10 900 \
        cargo build --release --locked --manifest-path "$HERE/rust/Cargo.toml" >"$log" 2>&1; then
        pass "build rust (rsmpi)"
    else
        fail "build rust (rsmpi)" "cargo build failed" "$log"
    fi
fi

# idle_figure LOG: idle_cpu's CPU and wake-up figures, for the summary line
idle_figure() {
    local cpu wake
    cpu=$(grep -Eo 'IDLE_CPU max=[0-9.]+%' "$1" | sed 's/IDLE_CPU //')
    wake=$(grep -Eo 'IDLE_WAKEUPS recv=[0-9.-]+/s barrier=[0-9.-]+/s' "$1" | sed 's/IDLE_WAKEUPS //')
    echo "${cpu:-max=?} ${wake:-recv=? barrier=?}"
}

# ---- C programs at every rank count ----
declare -A IDLE_FIG=()
for variant in "${VARIANTS[@]}"; do
    vt=$(tag_of "$BTL" "$variant")
    for np in $NPS; do
        for p in "${C_PROGRAMS[@]}"; do
            wanted "$p" || continue
            if [[ ! -x $BIN/$p ]]; then
                fail "$p np=$np $vt" "not built"
                continue
            fi
            case $p in
            pingpong) args=("$PINGPONG_MAX") ;;
            idle_cpu) if is_doorbell "$BTL"; then args=("$IDLE_CPU_LIMIT" "$IDLE_WAKE_LIMIT"); else args=(); fi ;;
            # over TCP the target's event thread serves atomics too: they
            # must complete while it computes.  Across nodes (MPIRUN_HOSTS)
            # osc rdma runs on the TCP module, which reaches same-node ranks
            # by RDMA-only aliases (btl_doorbell_rdma.c).
            rma_win)
                is_doorbell "$BTL" || continue
                if [[ $variant == force_tcp || -n ${MPIRUN_HOSTS:-} ]]; then args=(1); else args=(0); fi
                ;;
            *) args=() ;;
            esac
            run_mpi "$p np=$np $vt" "$np" "$BTL" "$variant" "^$p: OK" "$BIN/$p" "${args[@]}" || true
            if [[ $p == idle_point ]] && is_doorbell "$BTL"; then
                # osc pt2pt sends RMA on a SELF window through btl self; block
                # mode sleeps soonest, so it shows a sleep in the wrong place
                # first; LD_PRELOAD selects doorbell the other way
                for extra in "--mca osc pt2pt" "--mca osc pt2pt --mca btl_doorbell_wait_mode block"; do
                    read -r -a xa <<<"$extra"
                    run_mpi "$p np=$np $vt $extra" "$np" "$BTL" "$variant" "^$p: OK" "${xa[@]}" "$BIN/$p" || true
                done
                for mode in adaptive block; do
                    run_mpi "$p threads np=$np $vt $mode" "$np" "$BTL" "$variant" "^$p: OK" \
                        --mca btl_doorbell_wait_mode $mode "$BIN/$p" threads || true
                done
                if [[ ! -f $PRELOAD_LIB ]]; then
                    fail "$p np=$np $vt LD_PRELOAD" "$PRELOAD_LIB missing (make -C ompi)"
                else
                    run_mpi "$p np=$np $vt LD_PRELOAD" "$np" "$BTL" "$variant" "^$p: OK" \
                        -x LD_PRELOAD="${PRELOAD_FIRST:+$PRELOAD_FIRST:}$PRELOAD_LIB" --mca osc pt2pt "$BIN/$p" || true
                fi
            fi
            if [[ $p == idle_cpu ]]; then
                IDLE_FIG["$np $variant"]=$(idle_figure "$RUN_LOG")
            fi
        done
    done
done

# ---- a full node's worth of ranks: the all-to-all at NP_WIDE ranks ----
# Every rank's shared memory is one inbound queue, whatever the
# number of peers; 64 ranks (oversubscribed) exchange checked messages of
# 0 B - 150 KB with each other, each pair over shm (run_mpi's check of the
# finalize report: a single node with a tcp path fails).
if wanted alltoall_wide && is_doorbell "$BTL" && [[ -z $MPIRUN_HOSTS ]]; then
    if [[ -x $BIN/alltoall_nb ]]; then
        run_mpi "alltoall_nb np=$NP_WIDE [$BTL]" "$NP_WIDE" "$BTL" "" "^alltoall_nb: OK" "$BIN/alltoall_nb" || true
    else
        fail "alltoall_nb np=$NP_WIDE [$BTL]" "not built"
    fi
fi

# ---- idle CPU: the reference BTL's figure beside ours (not asserted) ----
if wanted idle_cpu && [[ -x $BIN/idle_cpu ]]; then
    for np in $NPS; do
        ref="?"
        REFERENCE=1
        if run_mpi "idle_cpu np=$np [$REF_BTL, reference]" "$np" "$REF_BTL" "" "^idle_cpu: OK" "$BIN/idle_cpu"; then
            ref=$(idle_figure "$RUN_LOG")
        fi
        REFERENCE=0
        line="      idle CPU of a rank blocked 4 s in MPI_Recv, and wake-ups/s in MPI_Recv and MPI_Barrier, np=$np:"
        for variant in "${VARIANTS[@]}"; do
            line+=" $(tag_of "$BTL" "$variant") ${IDLE_FIG["$np $variant"]:-not run}"
            is_doorbell "$BTL" && line+=" (limits ${IDLE_CPU_LIMIT}%, ${IDLE_WAKE_LIMIT}/s)"
            line+=" |"
        done
        echo "$line [$REF_BTL] $ref (reference, not asserted)"
    done
fi

# ---- rsmpi programs, 2 ranks ----
if wanted rust; then
    for variant in "${VARIANTS[@]}"; do
        vt=$(tag_of "$BTL" "$variant")
        for p in rs_pingpong rs_allreduce; do
            if [[ -x $RUST_TARGET/release/$p ]]; then
                run_mpi "$p np=2 $vt" 2 "$BTL" "$variant" "^$p: OK" "$RUST_TARGET/release/$p" || true
            else
                fail "$p np=2 $vt" "not built"
            fi
        done
    done
fi

# ---- NetPIPE (stock NPopenmpi), 2 ranks ----
# check_netpipe OUTFILE: sizes strictly increasing, every power of 2 from 1 to
# 64 MiB present, bandwidth and time positive on every line, 64 MiB reached.
check_netpipe() {
    awk -v max=67108864 '
        NF != 3 { print "line " NR ": " NF " fields"; bad = 1; next }
        $1 + 0 <= prev { print "line " NR ": size " $1 " after " prev; bad = 1 }
        !($2 + 0 > 0) || !($3 + 0 > 0) { print "line " NR ": bandwidth " $2 " time " $3; bad = 1 }
        { prev = $1 + 0; seen[$1 + 0] = 1; n++ }
        END {
            for (p = 1; p <= max; p *= 2) if (!(p in seen)) { print "size " p " missing"; bad = 1 }
            if (prev < max) { print "largest size " prev " < " max; bad = 1 }
            if (n < 100) { print "only " n " sizes"; bad = 1 }
            exit bad
        }' <"$1"
}
if wanted netpipe; then
    for variant in "${VARIANTS[@]}"; do
        vt=$(tag_of "$BTL" "$variant")
        np_out=$OUT/netpipe${variant:+_$variant}.out
        rm -f "$np_out"
        # -n 3: fixed repeat count keeps the 0..64 MiB sweep to seconds
        if run_mpi "NetPIPE 1 B..64 MiB np=2 $vt" 2 "$BTL" "$variant" "67108864 bytes" \
            NPopenmpi -u 67108864 -n 3 -o "$np_out"; then
            if why=$(check_netpipe "$np_out" 2>&1); then
                pass "NetPIPE output check $vt" "($(wc -l <"$np_out") sizes, $(awk 'END{print $2}' <"$np_out") Mbps at the top)"
            else
                fail "NetPIPE output check $vt" "$(echo "$why" | head -n 5 | tr '\n' ';')"
            fi
        else
            fail "NetPIPE output check $vt" "no output to check"
        fi
        # integrity mode: NetPIPE checks the received bytes itself
        np_out=$OUT/netpipe_integrity${variant:+_$variant}.out
        rm -f "$np_out"
        if run_mpi "NetPIPE integrity np=2 $vt" 2 "$BTL" "$variant" "Integrity check passed" \
            NPopenmpi -i -u 67108864 -n 2 -o "$np_out"; then
            npass=$(grep -c 'Integrity check passed' "$RUN_LOG" || true)
            if grep -q 'Integrity check failed' "$RUN_LOG"; then
                fail "NetPIPE integrity output $vt" "$(grep -m1 'Integrity check failed' "$RUN_LOG")"
            elif [[ $npass -lt 40 || $npass != "$(wc -l <"$np_out")" ]]; then
                fail "NetPIPE integrity output $vt" "$npass sizes passed, $(wc -l <"$np_out") in $np_out"
            else
                pass "NetPIPE integrity output $vt" "($npass sizes)"
            fi
        else
            fail "NetPIPE integrity output $vt" "no output to check"
        fi
    done
fi

# ---- mpi4py, 2 ranks ----
if wanted mpi4py; then
    for variant in "${VARIANTS[@]}"; do
        run_mpi "mpi4py objects+numpy np=2 $(tag_of "$BTL" "$variant")" 2 "$BTL" "$variant" \
            "^mpi4py_check: OK" "$PY" "$HERE/mpi4py_check.py" || true
    done
fi

# ---- ob1's protocols over the TCP module, both ways at once ----
# Eager, rendezvous with fragments and RGET sizes, data checked.  With
# min_rget_size 128 KiB messages from 128 KiB on go by RGET (reads counted); with
# min_rget_size 8 MiB none does, and messages beyond max_send_size must go by
# rendezvous fragments (before the module set btl_min_rdma_pipeline_size the
# receiver asked for a btl_put the module lacks: a segfault).
if wanted tcp_protocols && is_doorbell "$BTL" && [[ -x $BIN/tcp_protocols ]]; then
    for rget in 131072 8388608; do
        rargs=()
        # one node: TCP on loopback (across nodes the ranks' own interfaces)
        [[ -z $MPIRUN_HOSTS ]] && rargs+=(--mca btl_doorbell_if_include lo)
        rargs+=(--mca btl_doorbell_tcp_min_rget_size "$rget")
        label="tcp_protocols np=2 $(tag_of "$BTL" force_tcp) min_rget_size $rget"
        if run_mpi "$label" 2 "$BTL" force_tcp "^tcp_protocols: OK" "${rargs[@]}" "$BIN/tcp_protocols"; then
            reads=$(grep -Eo 'tcp_reads=[0-9]+' "$RUN_LOG" | awk -F= '{s += $2} END {print s + 0}')
            # 2 ranks x 16 messages x 4 rounds of each of the 4 sizes >= 128 KiB
            if [[ $rget == 131072 && $reads == 512 ]] || [[ $rget != 131072 && $reads == 0 ]]; then
                pass "$label: RGET for exactly the messages >= min_rget_size" "tcp_reads=$reads"
            else
                fail "$label: RGET for exactly the messages >= min_rget_size" "tcp_reads=$reads" "$RUN_LOG"
            fi
        fi
    done
fi

# ---- a stranger on the node visits a force_tcp job's ports ----
# stranger_attack.py sends the old protocol's hello for tasks 0, 1 and 9999
# with forged ob1 frames and a goodbye, garbage, and a new hello with a guessed
# key, to both ranks.  The job must run on with correct data and exit 0, and
# each rank must have counted the 5 visits as strangers.
if wanted stranger && is_doorbell "$BTL" && [[ -z $MPIRUN_HOSTS && -x $BIN/stranger ]]; then
    alog=$LOGS/stranger_attack.log
    "$PY" "$HERE/stranger_attack.py" "$BIN/stranger" --ranks 2 --wait 60 --delay 1 >"$alog" 2>&1 &
    apid=$!
    label="stranger attack np=2 $(tag_of "$BTL" force_tcp) if_include lo"
    if run_mpi "$label" 2 "$BTL" force_tcp "^stranger: OK" --mca btl_doorbell_if_include lo "$BIN/stranger" 4; then
        counted=$(grep -Eo 'strangers_rejected=[0-9]+' "$RUN_LOG" | awk -F= '$2 >= 5' | wc -l)
        if [[ $counted == 2 ]]; then
            pass "stranger attack: both ranks rejected the 5 visits" "$(grep -Eo 'strangers_rejected=[0-9]+' "$RUN_LOG" | tr '\n' ' ')"
        else
            fail "stranger attack: both ranks rejected the 5 visits" "$counted of 2 ranks counted >= 5 strangers" "$RUN_LOG"
        fi
    fi
    arc=0
    wait "$apid" || arc=$?
    if [[ $arc == 0 ]]; then
        pass "stranger attack: the stranger reached both ranks' ports" "$(tail -n1 "$alog")"
    else
        fail "stranger attack: the stranger reached both ranks' ports" "attacker exit $arc" "$alog"
    fi
fi

# ---- killed ranks leave no file behind (doorbell, one node) ----
# 4 ranks exchange data, then rank 1 (or every rank) SIGKILLs itself; mpirun
# ends the job.  The job's shm directory is a private one (DOORBELL_SHM_DIR),
# so "no file" is judged exactly: every segment lost its name once its peers
# had mapped it, so nothing is left even by ranks that never ran a cleanup.
if [[ $KILL_RANKS == 1 ]]; then
    for variant in "${VARIANTS[@]}"; do
        vt=$(tag_of "$BTL" "$variant")
        read -r -a vargs <<<"$(variant_args "$variant")"
        for who in one all; do
            label="kill_ranks $who np=4 $vt"
            if [[ ! -x $BIN/kill_ranks ]]; then
                fail "$label" "not built"
                continue
            fi
            dir=$(mktemp -d /dev/shm/mpi-tests-kill-XXXXXX)
            log=$LOGS/kill_ranks_${who}${variant:+_$variant}.log
            t0=$SECONDS
            rc=0
            timeout -k 15 "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe \
                --mca pml ob1 --mca btl "$BTL" -np 4 "${HOST_ARGS[@]}" "${vargs[@]}" "${EXTRA_ARGS[@]}" \
                -x DOORBELL_SHM_DIR="$dir" "$BIN/kill_ranks" "$who" >"$log" 2>&1 </dev/null || rc=$?
            took="($((SECONDS - t0))s)"
            left=$(ls -A "$dir")
            if [[ $rc == 0 || $rc == 124 || $rc == 137 && $((SECONDS - t0)) -ge $RUN_TIMEOUT ]]; then
                fail "$label" "exit $rc: the job should end, killed, well inside the timeout $took" "$log"
            elif ! grep -q '^kill_ranks: exchanged (0 failed checks)' "$log"; then
                fail "$label" "the ranks did not exchange their data first $took" "$log"
            elif [[ -n $left ]]; then
                fail "$label" "left in $dir: $(echo "$left" | tr '\n' ' ') $took" "$log"
            else
                pass "$label" "(exit $rc, shm dir empty) $took"
            fi
            rm -rf "$dir"
        done
    done
fi

# ---- corrupted shared memory ends the job (doorbell, one node) ----
# Rank 0 writes a bad tail into rank 1's queue header, then sends to it
# (header: off the 16-byte grid; tail_shift: moved by 48 bytes), a bad
# header word over the record rank 1 reads next (record), or another pid
# into its own fast box's lock at rank 1 (box_lock): the job must end, well
# inside the timeout, with doorbell's error naming the structure (no hang,
# no message through the broken queue or box).
if [[ $CORRUPT_HEADER == 1 ]]; then
    for mode in header record tail_shift box_lock; do
        label="corrupt_header $mode np=2 [$BTL]"
        case $mode in
            header | tail_shift) want="the header of a window queue broke its format" ;;
            record) want="a record in a window queue broke its format" ;;
            box_lock) want="a peer's fast box broke its format" ;;
        esac
        if [[ ! -x $BIN/corrupt_header ]]; then
            fail "$label" "not built"
            continue
        fi
        dir=$(mktemp -d /dev/shm/mpi-tests-corrupt-XXXXXX)
        log=$LOGS/corrupt_header_$mode.log
        t0=$SECONDS
        rc=0
        timeout -k 15 "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe \
            --mca pml ob1 --mca btl "$BTL" -np 2 "${EXTRA_ARGS[@]}" \
            -x DOORBELL_SHM_DIR="$dir" "$BIN/corrupt_header" "$mode" >"$log" 2>&1 </dev/null || rc=$?
        took="($((SECONDS - t0))s)"
        if [[ $rc == 0 || $rc == 124 || $rc == 137 ]]; then
            fail "$label" "exit $rc: the job should end with doorbell's error, well inside the timeout $took" "$log"
        elif ! grep -q "corrupt_header: rank 0 corrupted" "$log"; then
            fail "$label" "the ranks did not get to the corruption $took" "$log"
        elif ! grep -qF "shared memory corrupt: $want" "$log"; then
            fail "$label" "exit $rc without doorbell's error naming the structure $took" "$log"
        else
            pass "$label" "(exit $rc) $took"
        fi
        rm -rf "$dir"
    done
fi

# ---- nothing of ours may stay in /dev/shm ----
left=$(comm -13 <(echo "$SHM_BASELINE") <(shm_list) | sed '/^$/d')
if [[ $SHM_STRICT != 1 && -n $left && ${#ALL_JOBS[@]} -gt 0 ]]; then
    # shared machine: judge only files named after one of this suite's jobs
    others=$left
    left=$(echo "$left" | grep -F -f <(printf '%s\n' "${ALL_JOBS[@]}") || true)
    others=$(comm -23 <(echo "$others") <(echo "$left") | sed '/^$/d')
    if [[ -n $others ]]; then
        echo "note: $(echo "$others" | wc -l) new $SHM_GLOB files of other jobs (not judged, SHM_STRICT=0)"
    fi
fi
if [[ -z $left ]]; then
    pass "no $SHM_GLOB left after the runs"
else
    fail "no $SHM_GLOB left after the runs" "$(echo "$left" | tr '\n' ' ')"
fi
if [[ -n $SHM_BASELINE ]]; then
    echo "note: $SHM_GLOB present before the suite started (not judged): $(echo "$SHM_BASELINE" | tr '\n' ' ')"
fi

echo "== mpi-tests done in $((SECONDS - START))s, logs in $LOGS"
echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
