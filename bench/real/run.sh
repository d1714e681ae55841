#!/usr/bin/env bash
# "Real programs" benchmark: ordinary MPI programs (bench/real/*.c, an
# mpi4py script and mpi4py's own test suite) timed over doorbell and over
# Open MPI's own transports.
#
# Builds the programs into target/bench-real/, then for ROUNDS rounds runs
# every (program, rank count) once per configuration, the configurations
# rotated each round so drift hits all of them alike:
#   vader         --mca btl self,vader
#   doorbell      --mca btl self,doorbell                      (default settings)
#   tcp           --mca btl self,tcp --mca btl_tcp_if_include lo
#   doorbell_tcp  --mca btl self,doorbell --mca btl_doorbell_force_tcp 1
#                 --mca btl_doorbell_if_include lo
#   doorbell_base doorbell as built from another commit, for an A/B in one
#                 run: DOORBELL_BASE names the directory holding that build's
#                 component (make -C ompi install INSTALLDIR=DIR in a checkout
#                 of it); Open MPI loads it instead of the installed one
#   doorbell_tcp_base  the same build with doorbell_tcp's settings (A/B of
#                 the TCP path)
# always with --mca pml ob1.  Each run has a time limit (TIMEOUT); a run that
# hits it is recorded as taking the limit and flagged, so a stall shows as a
# number instead of hanging the script.  report.py then prints medians,
# doorbell/vader and doorbell_tcp/tcp ratios, each job's CPU-seconds (all
# ranks and mpirun, user + system) beside its wall time, the per-size tables, the targets
# (met/MISSED) and writes a PNG plot.  A missed target does not fail the
# script; a run that fails (wrong data, crash) makes it exit 1, and so does
# a timeout.
#
# This is a benchmark, not a test: run it on a quiet machine.  Every mpirun
# takes the lock BENCH_LOCK (flock) so that it never overlaps another
# benchmark; do not wrap the whole script in the same flock (it would wait for
# itself): set BENCH_LOCK= then.
#
# Environment:
#   QUICK=1       smoke run: 1 round, a tenth of the iterations (~2-3 min)
#   ROUNDS=n      rounds (default 3; QUICK 1)
#   CONFIGS       subset/order of the configurations (default the first four)
#   DOORBELL_BASE component directory of the doorbell_base configuration
#   PROGRAMS      subset of the programs (names as in the table: rma
#                 rma_pt2pt nbc coll bidir probe sendmodes testcompute
#                 threads mpi4py mpi4py_suite)
#   NPS           rank counts to run where a program supports several
#                 (default "2 4 5 8"; only mpi4py_suite runs at 5)
#   BIND          none: leave oversubscribed runs (4 and 8 ranks) unbound,
#                 placed by the kernel; default: round-robin over the cores,
#                 the same for every configuration
#   TIMEOUT       seconds per run (default 20; healthy runs take 0.5-3 s on
#                 vader, tcp up to ~10 s); mpi4py_suite gets 30 times it
#   SCALE         multiplies every program's iteration counts (default 1)
#   BENCH_LOCK    lock file taken around each run (default /tmp/doorbell-bench.lock)
#   PLOT          PNG to write (default bench/real/real.png; PLOT= for none)
#   OUT           build and results directory (default <repo>/target/bench-real)
#   MPIRUN, MPICC default mpirun.openmpi, mpicc.openmpi
#   PYTHON        interpreter with Debian's mpi4py (default /usr/bin/python3)
#   EXT_DIR       where mpi4py's test suite is fetched to (mpi-tests/ext_lib.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-$root/target/bench-real}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then ROUNDS=${ROUNDS:-1}; else ROUNDS=${ROUNDS:-3}; fi
TIMEOUT=${TIMEOUT:-20}
SCALE=${SCALE:-1}
NPS=${NPS:-2 4 5 8}
BIND=${BIND:-}
BENCH_LOCK=${BENCH_LOCK-/tmp/doorbell-bench.lock}
PLOT=${PLOT-$here/real.png}
MPIRUN=${MPIRUN:-mpirun.openmpi}
MPICC=${MPICC:-mpicc.openmpi}
PYTHON=${PYTHON:-/usr/bin/python3} # Debian's python3-mpi4py is there, not in a pyenv python

declare -A mca=(
    [vader]="--mca btl self,vader"
    [doorbell]="--mca btl self,doorbell"
    [tcp]="--mca btl self,tcp --mca btl_tcp_if_include lo"
    [doorbell_tcp]="--mca btl self,doorbell --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo"
)
if [ -n "${DOORBELL_BASE:-}" ]; then
    [ -f "$DOORBELL_BASE/mca_btl_doorbell.so" ] || { echo "run.sh: no mca_btl_doorbell.so in DOORBELL_BASE=$DOORBELL_BASE" >&2; exit 2; }
    # replacing the search path drops the default: keep Open MPI's own directory
    mca[doorbell_base]="--mca btl self,doorbell --mca mca_base_component_path $(ompi_info --path pkglibdir --parsable | cut -d: -f3-):$DOORBELL_BASE"
    mca[doorbell_tcp_base]="${mca[doorbell_base]} --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo"
fi
read -r -a configs <<<"${CONFIGS:-vader doorbell tcp doorbell_tcp}"

# Programs: binary, extra mpirun arguments, rank counts, and the iteration
# scale per rank count (oversubscribed runs are slower per iteration: the
# scales keep every run at ~0.5-3 s on vader).
declare -A bin=([rma]=rma [rma_pt2pt]=rma [nbc]=nbc [coll]=coll [bidir]=bidir [probe]=probe
                [sendmodes]=sendmodes [testcompute]=testcompute [threads]=threads [mpi4py]=python
                [mpi4py_suite]=python)
# mpi4py's suite with one osc for every configuration: with the defaults it
# runs its one-sided tests on doorbell and skips them on vader (osc rdma
# over vader cannot make MPI_COMM_SELF windows), so the jobs would differ
declare -A args=([rma_pt2pt]="--mca osc pt2pt" [mpi4py_suite]="--mca osc sm,pt2pt")
# Win.Create over btl tcp: Debian's default osc list (^ucx,pt2pt) leaves
# osc rdma, which needs atomics that btl tcp lacks (vader and doorbell have
# them: they run with the defaults)
declare -A tcp_args=([mpi4py]="--mca osc sm,pt2pt")
declare -A nps=([rma]="2 4 8" [rma_pt2pt]="2 4 8" [nbc]="2 4 8" [coll]="2 4 8" [mpi4py]="2 4"
                [mpi4py_suite]="2 5")
declare -A scale=(
    [rma@2]=1 [rma@4]=0.3 [rma@8]=0.1
    [rma_pt2pt@2]=0.3 [rma_pt2pt@4]=0.1 [rma_pt2pt@8]=0.05
    [nbc@2]=1 [nbc@4]=0.3 [nbc@8]=0.15
    [coll@2]=2 [coll@4]=0.5 [coll@8]=0.15
    [bidir@2]=1 [probe@2]=0.5 [sendmodes@2]=0.5 [testcompute@2]=1 [threads@2]=1 [mpi4py@2]=1 [mpi4py@4]=0.5
    [mpi4py_suite@2]=1 [mpi4py_suite@5]=1
)
all_programs="rma rma_pt2pt nbc coll bidir probe sendmodes testcompute threads mpi4py mpi4py_suite"
read -r -a programs <<<"${PROGRAMS:-$all_programs}"

for c in "${configs[@]}"; do
    [ "${c%_base}" = "$c" ] || [ -n "${DOORBELL_BASE:-}" ] || { echo "run.sh: $c needs DOORBELL_BASE" >&2; exit 2; }
    [ -n "${mca[$c]+set}" ] || { echo "run.sh: unknown configuration '$c' (known: ${!mca[*]})" >&2; exit 2; }
done
for p in "${programs[@]}"; do
    [ -n "${bin[$p]+set}" ] || { echo "run.sh: unknown program '$p' (known: $all_programs)" >&2; exit 2; }
done
for tool in "$MPIRUN" "$MPICC" ompi_info timeout flock "$PYTHON"; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done
components=$(ompi_info 2>/dev/null || true)
if [[ " ${configs[*]} " == *" doorbell"* && $components != *"MCA btl: doorbell"* ]]; then
    echo "run.sh: the doorbell BTL is not installed (make install)" >&2
    exit 2
fi
# Open MPI ignores unknown --mca names: check that every doorbell one exists.
params=$(ompi_info --param btl doorbell --level 9 2>/dev/null || true)
for c in "${configs[@]}"; do
    for p in $(grep -oE 'btl_doorbell_[a-z_]+' <<<"${mca[$c]}" || true); do
        [[ $params == *"\"$p\""* ]] || { echo "run.sh: doorbell does not register $p ($c)" >&2; exit 2; }
    done
done
if [[ " ${programs[*]} " == *" mpi4py "* ]] && ! "$PYTHON" -c "from mpi4py import MPI" 2>/dev/null; then
    echo "run.sh: $PYTHON has no mpi4py (apt-get install python3-mpi4py)" >&2
    exit 2
fi

if [[ " ${programs[*]} " == *" mpi4py_suite "* ]]; then
    ROOT=$root
    # shellcheck source=mpi-tests/ext_lib.sh
    . "$root/mpi-tests/ext_lib.sh"
    mpi4py_tests=$(ext_mpi4py_tests) || { echo "run.sh: could not fetch mpi4py's test suite" >&2; exit 2; }
fi

mkdir -p "$OUT"
for b in rma nbc coll bidir probe sendmodes testcompute threads; do
    "$MPICC" -O2 -Wall -Wextra -Werror -pthread -o "$OUT/$b" "$here/$b.c"
done

res=$OUT/results
rm -rf "$res"
mkdir -p "$res"
raw=$res/raw.tsv
: >"$raw"
lock=()
[ -n "$BENCH_LOCK" ] && lock=(flock "$BENCH_LOCK")

# The whole job's CPU time: user + system of every process this shell has
# reaped (mpirun reaps its ranks, so one run's delta is mpirun and all its
# ranks), in clock ticks.  The shell's comm is "bash": no spaces in field 2.
CLK_TCK=$(getconf CLK_TCK)
children_cpu() { awk '{ print $16 + $17 }' /proc/$$/stat; }

passed=0
failed=0
timeouts=0
# run_one ROUND PROGRAM NP CONFIG: one mpirun; appends
# "round config program np metric key value" lines to raw.tsv.
run_one() {
    local round=$1 prog=$2 np=$3 cfg=$4
    local s
    s=$(awk -v a="${scale[$prog@$np]}" -v b="$SCALE" -v q="$QUICK" \
        'BEGIN { v = a * b; if (q == 1) v /= 10; printf "%g", v }')
    local exe=("$OUT/${bin[$prog]}" "$s")
    [ "$prog" = mpi4py ] && exe=("$PYTHON" "$here/mpi4py_real.py" "$s")
    [ "$prog" = mpi4py_suite ] && exe=("$PYTHON" "$here/mpi4py_suite.py" "$s" "$mpi4py_tests")
    local limit=$TIMEOUT
    [ "$prog" = mpi4py_suite ] && limit=$((TIMEOUT * 30))
    # More ranks than cores: the same placement for every configuration
    # (round-robin over the cores, BIND=none lets the kernel place them).
    # Unpinned, each run lands in one of the placements -- the 8 B allreduce
    # at 4 ranks takes 2.6 or 3.7 us on vader, from run to run -- and with a
    # few rounds the ratio measured the placements each transport drew
    # (0.84x to 1.72x), not the transports.
    local bind=(--bind-to core)
    if [ "$np" -gt 2 ]; then
        if [ "$BIND" = none ]; then bind=(--bind-to none); else bind=(--bind-to core:overload-allowed --map-by core); fi
    fi
    local log=$res/r$round-$prog-np$np-$cfg.log rc=0 extra=
    [ "$cfg" = tcp ] && extra=${tcp_args[$prog]:-}
    # shellcheck disable=SC2206 # MCA strings are meant to be word-split
    local cmd=(timeout -k 5 "$limit" "$MPIRUN" --allow-run-as-root --oversubscribe -np "$np"
        "${bind[@]}" --mca pml ob1 ${mca[$cfg]} ${args[$prog]:-} ${extra} "${exe[@]}")
    echo "${cmd[*]}" >"$log"
    local t0 t1 cpu0 cpu1
    t0=$EPOCHREALTIME
    cpu0=$(children_cpu)
    "${lock[@]}" "${cmd[@]}" >>"$log" 2>&1 </dev/null || rc=$?
    cpu1=$(children_cpu)
    t1=$EPOCHREALTIME
    local took
    took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    local tag="$round $cfg $prog $np"
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        # a stall: the completed phases count, the whole run takes the limit
        awk -v p="$tag" '$1 == "RESULT" && $2 != "wall" { print p, $2, $3, $4 }' "$log" >>"$raw"
        echo "$tag wall - $limit" >>"$raw"
        echo "$tag timeout - 1" >>"$raw"
        echo "TIMEOUT round $round $prog np=$np $cfg: stopped after ${limit} s (log: $log)"
        timeouts=$((timeouts + 1))
        failed=$((failed + 1))
    elif [ $rc != 0 ] || ! grep -q '^RESULT wall ' "$log"; then
        echo "FAIL round $round $prog np=$np $cfg: exit code $rc (log: $log)"
        grep -E 'ERROR|rror' "$log" | head -n 5 | sed 's/^/    /' || true
        echo "$tag failed - 1" >>"$raw"
        failed=$((failed + 1))
    else
        awk -v p="$tag" '$1 == "RESULT" { print p, $2, $3, $4 }' "$log" >>"$raw"
        awk -v p="$tag" -v a="$cpu0" -v b="$cpu1" -v hz="$CLK_TCK" 'BEGIN { printf "%s cpu - %.2f\n", p, (b - a) / hz }' >>"$raw"
        printf 'ok   round %d %-11s np=%d %-12s %6.2f s (mpirun %s s, with any lock wait)\n' "$round" "$prog" "$np" "$cfg" \
            "$(awk '$1 == "RESULT" && $2 == "wall" { print $4 }' "$log")" "$took"
        passed=$((passed + 1))
    fi
}

echo "real-programs benchmark: QUICK=$QUICK ROUNDS=$ROUNDS TIMEOUT=${TIMEOUT}s SCALE=$SCALE"
echo "host $(hostname), $(nproc) CPUs, $(ompi_info --version 2>/dev/null | head -n 1)"
for c in "${configs[@]}"; do echo "  $c: --mca pml ob1 ${mca[$c]}"; done
read -r load1 _ </proc/loadavg
if awk -v l="$load1" 'BEGIN { exit !(l > 0.5) }'; then
    echo "WARN: load average $load1 before start: other work on the machine distorts the figures"
fi

n=${#configs[@]}
start=$SECONDS
for ((round = 1; round <= ROUNDS; round++)); do
    for prog in "${programs[@]}"; do
        for np in ${nps[$prog]:-2}; do
            [[ " $NPS " == *" $np "* ]] || continue
            for ((i = 0; i < n; i++)); do
                run_one "$round" "$prog" "$np" "${configs[(i + round - 1) % n]}"
            done
        done
    done
done

echo
"$PYTHON" "$here/report.py" --configs "${configs[*]}" --timeout "$TIMEOUT" ${PLOT:+--plot "$PLOT"} "$raw"
echo
echo "raw results and logs: $res ($((SECONDS - start)) s)"
echo "$passed runs ok, $failed failed ($timeouts of them timed out)"
[ $failed = 0 ]
