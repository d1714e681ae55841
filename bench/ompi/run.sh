#!/usr/bin/env bash
# Side-by-side benchmark of the doorbell BTL against Open MPI's vader and tcp.
#
# Builds the small MPI programs next to this script into target/bench-ompi/,
# then runs every (benchmark, transport) pair for ROUNDS rounds, transports
# interleaved and rotated each round so drift hits all of them alike, and
# prints medians, doorbell/baseline ratios and the targets (met/MISSED).
# A missed target does not fail the script; a run that crashes, times out or
# receives corrupted data does (exit 1).
#
# Environment:
#   QUICK=1         smoke run: 2 rounds, fewer iterations, 1 s idle (~1 min;
#                   a full run takes ~3-4 min on 2 cores)
#   ROUNDS=n        rounds (default 5; QUICK 2)
#   MODE=single     (default) one node: self,vader | self,tcp | self,doorbell |
#                   self,doorbell + btl_doorbell_force_tcp 1 | self,doorbell in
#                   block mode (doorbell_block); latency, one-way
#                   and two-way bandwidth, idle CPU, listener thread, 8-rank
#                   barrier/allreduce, the time of an empty progress pass
#   MODE=twonode    two nodes, one rank each (--map-by node): self,vader,tcp vs
#                   doorbell with btl_doorbell_wait_mode poll|adaptive|block;
#                   latency, bandwidth, idle CPU.  Put the hosts in MPIRUN_EXTRA,
#                   e.g. MPIRUN_EXTRA="--host n1,n2 --mca btl_tcp_if_include eth1";
#                   the binaries must exist at the same path on both nodes.
#   BIND=none       leave the 8-rank runs unbound (default: round-robin over
#                   the cores, the same for every transport)
#   MPIRUN_EXTRA    extra mpirun arguments, appended to every run (word-split)
#   TRANSPORTS      subset/order of the mode's transports, e.g. "vader tcp"
#   BENCHES         subset of the mode's programs, e.g. "idle" (MODE=single)
#                   (needed while the doorbell component is not installed)
#   DOORBELL_BASE   directory holding the component of another build (make -C
#                   ompi install INSTALLDIR=DIR in a checkout of it): adds the
#                   transports doorbell_base and doorbell_tcp_base, so a change
#                   is measured before and after in one run (MODE=single)
#   MPIRUN, MPICC   default mpirun.openmpi, mpicc.openmpi
#   OUT             output directory (default <repo>/target/bench-ompi)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-$root/target/bench-ompi}
MODE=${MODE:-single}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then ROUNDS=${ROUNDS:-2}; else ROUNDS=${ROUNDS:-5}; fi
MPIRUN=${MPIRUN:-mpirun.openmpi}
MPICC=${MPICC:-mpicc.openmpi}
read -r -a extra <<<"${MPIRUN_EXTRA:-}"

declare -A mca
case $MODE in
single)
    mca[vader]="--mca btl self,vader"
    # TCP stays on loopback, for both transports: the machine's external
    # interface may be shaped or shared, and both must cross the same wire.
    # (Before this, both went over eth0 at ~5.7 us, which hid doorbell's
    # per-message cost: on lo btl tcp takes ~3.4-4.2 us.)
    mca[tcp]="--mca btl self,tcp --mca btl_tcp_if_include lo"
    mca[doorbell]="--mca btl self,doorbell --mca btl_doorbell_if_include lo"
    mca[doorbell_tcp]="--mca btl self,doorbell --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo"
    # block mode: what sleeping at once costs beside vader (docs/parameters.md)
    mca[doorbell_block]="--mca btl self,doorbell --mca btl_doorbell_if_include lo --mca btl_doorbell_wait_mode block"
    default_transports="vader tcp doorbell doorbell_tcp doorbell_block"
    if [ -n "${DOORBELL_BASE:-}" ]; then
        [ -f "$DOORBELL_BASE/mca_btl_doorbell.so" ] || { echo "run.sh: no mca_btl_doorbell.so in DOORBELL_BASE=$DOORBELL_BASE" >&2; exit 2; }
        # replacing the search path drops the default: keep Open MPI's own directory
        mca[doorbell_base]="--mca btl self,doorbell --mca btl_doorbell_if_include lo --mca mca_base_component_path $(ompi_info --path pkglibdir --parsable | cut -d: -f3-):$DOORBELL_BASE"
        mca[doorbell_tcp_base]="${mca[doorbell_base]} --mca btl_doorbell_force_tcp 1"
        default_transports="vader tcp doorbell doorbell_base doorbell_tcp doorbell_tcp_base"
    fi
    benches=${BENCHES:-"pingpong idle listener coll empty_pass"}
    placement=()
    ;;
twonode)
    mca[ompi]="--mca btl self,vader,tcp"
    for w in poll adaptive block; do
        mca[db_$w]="--mca btl self,doorbell --mca btl_doorbell_wait_mode $w"
    done
    default_transports="ompi db_poll db_adaptive db_block"
    benches="pingpong idle"
    placement=(--map-by node)
    ;;
*)
    echo "run.sh: MODE must be single or twonode, not '$MODE'" >&2
    exit 2
    ;;
esac
read -r -a transports <<<"${TRANSPORTS:-$default_transports}"
needs_doorbell=0
for t in "${transports[@]}"; do
    if [ -z "${mca[$t]+set}" ]; then
        echo "run.sh: unknown transport '$t' for MODE=$MODE (known: ${!mca[*]})" >&2
        exit 2
    fi
    case $t in doorbell* | db_*) needs_doorbell=1 ;; esac
done

for tool in "$MPIRUN" "$MPICC" ompi_info python3 timeout; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done
if [ $needs_doorbell = 1 ]; then
    # Measuring doorbell is the point: refuse to silently leave it out.
    # (Output captured first: with pipefail, `ompi_info | grep -q` can fail
    # when grep exits early and ompi_info gets SIGPIPE.)
    components=$(ompi_info 2>/dev/null || true)
    if [[ $components != *"MCA btl: doorbell"* ]]; then
        echo "run.sh: the doorbell BTL is not installed (ompi_info shows no 'MCA btl: doorbell');" >&2
        echo "        install mca_btl_doorbell.so into ~/.openmpi/components, or run with" >&2
        echo "        TRANSPORTS=\"${default_transports%% *} ...\" without doorbell transports." >&2
        exit 2
    fi
    # Open MPI ignores unknown --mca names: a misspelt or unregistered
    # parameter would silently benchmark the default path under the wrong label.
    params=$(ompi_info --param btl doorbell --level 9 2>/dev/null || true)
    for t in "${transports[@]}"; do
        for p in $(grep -oE 'btl_doorbell_[a-z_]+' <<<"${mca[$t]}" || true); do
            if [[ $params != *"\"$p\""* ]]; then
                echo "run.sh: transport $t needs MCA parameter $p, which the doorbell BTL does not register" >&2
                exit 2
            fi
        done
    done
fi

mkdir -p "$OUT"
for b in $benches; do
    "$MPICC" -O2 -Wall -Wextra -Werror -pthread -o "$OUT/$b" "$here/$b.c"
done

res="$OUT/results-$MODE"
rm -rf "$res"
mkdir -p "$res"
raw="$res/raw.tsv"
: >"$raw"

quick_arg=()
[ "$QUICK" = 1 ] && quick_arg=(-q)

# Per-run wall-clock limits (seconds): generous for a healthy transport,
# bounded for a hung one.
declare -A limit=([pingpong]=120 [idle]=45 [listener]=60 [coll]=90 [empty_pass]=60)
# RESULT metrics a run must produce to count as complete.
declare -A expect=([pingpong]="lat bw bibw" [idle]="idle_cpu" [listener]="listener_slowdown"
                   [coll]="barrier allreduce" [empty_pass]="empty_pass_ns")

passed=0
failed=0
run_one() { # round bench transport
    local round=$1 bench=$2 t=$3 np=2 bind=(--bind-to core)
    if [ "$bench" = coll ]; then
        np=8
        # 8 ranks on 2 cores: round-robin, the same placement for every
        # transport (BIND=none: let the kernel place them; then each run
        # draws a placement, 10 or 20 us per barrier, vader's runs too)
        if [ "${BIND:-}" = none ]; then bind=(--bind-to none); else bind=(--bind-to core:overload-allowed --map-by core); fi
    fi
    local log="$res/r$round-$bench-$t.log" m rc=0 start=$EPOCHREALTIME
    # shellcheck disable=SC2206 # the MCA string is meant to be word-split
    local cmd=(timeout -k 10 "${limit[$bench]}" "$MPIRUN" --allow-run-as-root --oversubscribe
        -np $np "${bind[@]}" "${placement[@]}" --mca pml ob1 ${mca[$t]} "${extra[@]}"
        "$OUT/$bench" "${quick_arg[@]}")
    echo "${cmd[*]}" >"$log"
    "${cmd[@]}" >>"$log" 2>&1 || rc=$?
    local why=""
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        why="timed out after ${limit[$bench]} s"
    elif [ $rc != 0 ]; then
        why="exit code $rc"
    else
        for m in ${expect[$bench]}; do
            grep -q "^RESULT $m " "$log" || why="no '$m' result"
        done
    fi
    if [ -z "$why" ]; then
        awk -v r="$round" -v t="$t" '$1 == "RESULT" { print r, t, $2, $3, $4 }' "$log" >>"$raw"
        echo "PASS round $round $bench $t ($(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s)"
        passed=$((passed + 1))
    else
        echo "FAIL round $round $bench $t: $why (log: $log)"
        grep -E 'ERROR|error|abort' "$log" | head -n 5 | sed 's/^/    /' || true
        failed=$((failed + 1))
    fi
}

echo "doorbell vs Open MPI benchmark: MODE=$MODE QUICK=$QUICK ROUNDS=$ROUNDS"
echo "host $(hostname), $(nproc) CPUs, $(ompi_info --version 2>/dev/null | head -n 1)"
echo "MPIRUN_EXTRA: ${MPIRUN_EXTRA:-(none)}"
for t in "${transports[@]}"; do echo "  $t: --mca pml ob1 ${mca[$t]}"; done
read -r load1 _ </proc/loadavg
if awk -v l="$load1" 'BEGIN { exit !(l > 0.5) }'; then
    echo "WARN: load average $load1 before start: other work on the machine will distort figures"
fi

n=${#transports[@]}
for ((round = 1; round <= ROUNDS; round++)); do
    for bench in $benches; do
        # Rotate the transport order each round.
        for ((i = 0; i < n; i++)); do
            run_one "$round" "$bench" "${transports[(i + round - 1) % n]}"
        done
    done
done

echo
python3 "$here/report.py" --mode "$MODE" --transports "${transports[*]}" "$raw"
echo
echo "raw results and logs: $res"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
