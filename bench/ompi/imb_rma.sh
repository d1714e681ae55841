#!/usr/bin/env bash
# bench/ompi/imb_rma.sh -- Intel's IMB-RMA (every benchmark) with Open MPI's
# default osc list, no osc flag: osc rdma over vader's and doorbell's put,
# get and atomics.  Configurations, rotated each round:
#   vader         --mca btl self,vader
#   doorbell      --mca btl self,doorbell
#   doorbell_tcp  --mca btl self,doorbell --mca btl_doorbell_force_tcp 1 (on lo)
# (btl tcp has no atomics for osc rdma: MPI_Win_create fails there with
# the defaults, so it is not a configuration.)  Prints each run's exit
# code, wall time and benchmarks completed, then per configuration the
# median wall time and its ratio to vader's; exits 1 if a doorbell run
# failed or completed fewer benchmarks than vader's.
#
# IMB is not packaged by Debian: build it from Intel's sources
# (github.com/intel/mpi-benchmarks) against Open MPI,
#   make IMB-RMA CC=mpicc.openmpi CXX=mpicxx.openmpi
# and name the binary in IMB_RMA.
#
# Environment: IMB_RMA (the binary, required), ROUNDS (3), NP (2),
# CONFIGS ("vader doorbell doorbell_tcp"), TIMEOUT (600 s a run),
# OUT (<repo>/target/bench-imb-rma), BENCH_LOCK (/tmp/doorbell-bench.lock).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${IMB_RMA:?name the IMB-RMA binary (see the header)}"
ROUNDS=${ROUNDS:-3}
NP=${NP:-2}
TIMEOUT=${TIMEOUT:-600}
OUT=${OUT:-$root/target/bench-imb-rma}
BENCH_LOCK=${BENCH_LOCK-/tmp/doorbell-bench.lock}
read -r -a configs <<<"${CONFIGS:-vader doorbell doorbell_tcp}"
declare -A mca=(
    [vader]="--mca btl self,vader"
    [doorbell]="--mca btl self,doorbell"
    [doorbell_tcp]="--mca btl self,doorbell --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo"
)
mkdir -p "$OUT"
lock=()
[[ -n $BENCH_LOCK ]] && lock=(flock "$BENCH_LOCK")
res=$OUT/results.tsv
: >"$res"
n=${#configs[@]}
for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
        c=${configs[(i + r - 1) % n]}
        log=$OUT/r$r-$c.out
        # The clock runs inside the lock: a wait for another benchmark's
        # run is not this run's time.
        # shellcheck disable=SC2016,SC2086 # expanded by the inner shell; MCA strings are word-split
        "${lock[@]}" bash -c 't0=$EPOCHREALTIME; "$@"; rc=$?; echo "WALL $t0 $EPOCHREALTIME"; exit $rc' _ \
            timeout -k 10 "$TIMEOUT" mpirun.openmpi --allow-run-as-root -np "$NP" --bind-to core \
            --mca pml ob1 ${mca[$c]} "$IMB_RMA" >"$log" 2>&1 </dev/null
        rc=$?
        wall=$(awk '$1 == "WALL" { printf "%.1f", $3 - $2 }' "$log")
        done_=$(grep -c '^# Benchmarking' "$log")
        printf 'round %d %-13s exit %3d  %7.1f s  %2d benchmarks  (%s)\n' "$r" "$c" "$rc" "$wall" "$done_" "$log"
        echo "$c $rc $wall $done_" >>"$res"
    done
done
echo
python3 - "$res" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    c, rc, wall, done = line.split()
    runs.setdefault(c, []).append((int(rc), float(wall), int(done)))
ref = statistics.median(w for _, w, _ in runs.get("vader", [])) if "vader" in runs else None
ref_done = max((d for _, _, d in runs.get("vader", [])), default=0)
bad = 0
print(f"{'config':14s} {'runs ok':>8s} {'median wall s':>14s} {'/vader':>8s}")
for c, rs in runs.items():
    ok = [r for r in rs if r[0] == 0 and r[2] >= ref_done]
    if c != "vader":
        bad += len(rs) - len(ok)
    med = statistics.median(w for _, w, _ in rs)
    ratio = f"{med / ref:.2f}x" if ref else "-"
    print(f"{c:14s} {len(ok):>4d}/{len(rs):<3d} {med:14.1f} {ratio:>8s}")
print("doorbell runs failed or incomplete:", bad)
sys.exit(1 if bad else 0)
EOF
