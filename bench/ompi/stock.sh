#!/usr/bin/env bash
# bench/ompi/stock.sh -- the small-message rows of the stock benchmarks,
# doorbell beside the Open MPI transport it replaces, in one run:
#   pingpong0   IMB-MPI1 PingPong, 0 B (t[usec]), 2 ranks        vader | doorbell
#   latency0    osu_latency, 0 B, 2 ranks                        vader | doorbell
#   latency1    osu_latency, 1 B, 2 ranks (OSU 7 starts at 1 B)  vader | doorbell
#   allreduce4  IMB-MPI1 Allreduce, 8 B (t_avg), 4 ranks pinned
#               round-robin on the 2 cores (oversubscribed)      vader | doorbell
#   tcplat8     osu_latency, 8 B, 2 ranks                        tcp   | doorbell force_tcp
#   bibw1m      osu_bibw, 1 MiB (MB/s), 2 ranks                  vader | doorbell
# Each round runs every row's two configurations, the order swapped every
# other round; the report gives per row the medians over rounds and
# doorbell's figure over the reference's (times: < 1 is doorbell faster;
# bibw: > 1 is), and the same for each side's best round (the host's
# placement of the two ranks makes two clusters of figures; the best
# rounds compare the close placement with itself).  A run that fails or prints no figure fails the script.
#
# OSU and IMB are not packaged by Debian: build OSU 5.3.2
# (./configure CC=mpicc.openmpi CXX=mpicxx.openmpi; make -C mpi/pt2pt; or
# OSU 7.x, whose osu_latency has no 0 B row: use latency1 there) and
# IMB-MPI1 (github.com/intel/mpi-benchmarks: make IMB-MPI1
# CC=mpicc.openmpi CXX=mpicxx.openmpi) and name them here.
#
# Environment: OSU_DIR (the directory holding osu_latency and osu_bibw,
# required), IMB_MPI1 (the binary, required), ROUNDS (5), ROWS (all, or a
# subset of the names above), MPIRUN_EXTRA (added to every mpirun), OUT
# (<repo>/target/bench-stock).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${OSU_DIR:?name the directory of osu_latency and osu_bibw (see the header)}"
: "${IMB_MPI1:?name the IMB-MPI1 binary (see the header)}"
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-$root/target/bench-stock}
read -r -a rows <<<"${ROWS:-pingpong0 latency0 allreduce4 tcplat8 bibw1m}"
read -r -a extra <<<"${MPIRUN_EXTRA:-}"

declare -A mca=(
    [vader]="--mca btl self,vader"
    [tcp]="--mca btl self,tcp --mca btl_tcp_if_include lo"
    [doorbell]="--mca btl self,doorbell --mca btl_doorbell_if_include lo"
    [doorbell_tcp]="--mca btl self,doorbell --mca btl_doorbell_force_tcp 1 --mca btl_doorbell_if_include lo"
)
# row -> "reference doorbell-config np program args..."; the figure is
# taken by fig() from the program's output
declare -A row=(
    [pingpong0]="vader doorbell 2 $IMB_MPI1 PingPong -msglog 0:0 -iter 100000 -time 100"
    [latency0]="vader doorbell 2 $OSU_DIR/osu_latency"
    [latency1]="vader doorbell 2 $OSU_DIR/osu_latency"
    [allreduce4]="vader doorbell 4 $IMB_MPI1 Allreduce -npmin 4 -msglog 3:3 -iter 20000 -time 100"
    [tcplat8]="tcp doorbell_tcp 2 $OSU_DIR/osu_latency"
    [bibw1m]="vader doorbell 2 $OSU_DIR/osu_bibw"
)
fig() { # ROW LOG: the row's figure from a run's output
    case $1 in
    pingpong0) awk '/Benchmarking PingPong/ { on = 1 } on && $1 == "0" && NF >= 4 { print $3; exit }' "$2" ;;
    allreduce4) awk '/Benchmarking Allreduce/ { on = 1 } on && $1 == "8" && NF >= 5 { print $5; exit }' "$2" ;;
    latency0) awk '$1 == "0" && NF == 2 { print $2; exit }' "$2" ;;
    latency1) awk '$1 == "1" && NF == 2 { print $2; exit }' "$2" ;;
    tcplat8) awk '$1 == "8" && NF == 2 { print $2; exit }' "$2" ;;
    bibw1m) awk '$1 == "1048576" && NF == 2 { print $2; exit }' "$2" ;;
    esac
}

mkdir -p "$OUT"
res=$OUT/results.tsv
: >"$res"
failed=0
for ((r = 1; r <= ROUNDS; r++)); do
    for name in "${rows[@]}"; do
        [[ -n ${row[$name]+set} ]] || { echo "stock.sh: unknown row $name" >&2; exit 2; }
        read -r ref ours np prog <<<"${row[$name]}"
        order=("$ref" "$ours")
        ((r % 2)) || order=("$ours" "$ref")
        bind=(--bind-to core)
        ((np > 2)) && bind=(--bind-to core:overload-allowed --map-by core)
        for c in "${order[@]}"; do
            log=$OUT/r$r-$name-$c.log
            # shellcheck disable=SC2086 # the MCA string and the program's arguments are word-split
            timeout -k 10 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" "${bind[@]}" \
                --mca pml ob1 ${mca[$c]} "${extra[@]}" $prog >"$log" 2>&1 </dev/null
            rc=$?
            v=$(fig "$name" "$log")
            if [[ $rc != 0 || -z $v ]]; then
                echo "FAIL round $r $name $c: exit $rc, figure '${v}' ($log)"
                failed=$((failed + 1))
                continue
            fi
            printf 'round %d %-10s %-12s %s\n' "$r" "$name" "$c" "$v"
            echo "$name $c $v" >>"$res"
        done
    done
done
echo
python3 - "$res" "${rows[*]}" <<'EOF'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    name, c, v = line.split()
    vals.setdefault(name, {}).setdefault(c, []).append(float(v))
unit = {"pingpong0": "us", "latency0": "us", "latency1": "us", "allreduce4": "us", "tcplat8": "us", "bibw1m": "MB/s"}
print(f"{'row':11s} {'reference':>28s} {'doorbell':>32s} {'ratio':>7s} {'best':>7s}  (median [min..max] over rounds)")
for name in sys.argv[2].split():
    cs = list(vals.get(name, {}).items())
    if len(cs) != 2:
        print(f"{name:11s} missing figures")
        continue
    (rc, rv), (dc, dv) = sorted(cs, key=lambda x: x[0].startswith("doorbell"))
    fmt = lambda c, v: f"{c} {statistics.median(v):.2f} [{min(v):.2f}..{max(v):.2f}]"
    ratio = statistics.median(dv) / statistics.median(rv)
    # Each side's best round: the host places a rank pair close or far
    # (a cache line crosses in 0.06-0.08 or 0.14-0.34 us), and a median of
    # few rounds can compare one placement with the other.
    best = (max(dv) / max(rv)) if unit[name] == "MB/s" else (min(dv) / min(rv))
    print(f"{name:11s} {fmt(rc, rv):>28s} {fmt(dc, dv):>32s} {ratio:6.2f}x {best:6.2f}x  {unit[name]}")
EOF
echo "logs: $OUT"
[[ $failed == 0 ]]
