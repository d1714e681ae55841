# frame.sh -- sourced by bench/fi's scripts: their settings, the provider
# they run, and their rounds.
#
# bench_setup NAME DEFAULT_OUT: sets QUICK, ROUNDS (5; QUICK=1: 2), quick
#   (the programs' -q), MPICH_VENV, OUT, PROV, and builds the provider into
#   $PROV; exits on failure.  Needs `root`.
bench_setup() {
    local name=$1
    QUICK=${QUICK:-0}
    if [[ $QUICK == 1 ]]; then ROUNDS=${ROUNDS:-2}; else ROUNDS=${ROUNDS:-5}; fi
    MPICH_VENV=${MPICH_VENV:-$root/target/venv-mpich}
    OUT=${OUT:-$2}
    PROV=$OUT/prov
    mkdir -p "$OUT" "$PROV"
    quick=()
    [[ $QUICK == 1 ]] && quick=(-q)
    (cd "$root" && cargo build --release -p doorbell-fi >"$OUT/build.log" 2>&1) &&
        cp "$root/target/release/libdoorbell_fi.so" "$PROV/libdoorbell-fi.so" ||
        { echo "$name: building the provider failed (log: $OUT/build.log)" >&2; exit 1; }
}

# run_rounds RAW OUT ROUNDS "BENCHES" CONFIG...: every configuration runs
#   once a round, in an order rotated round by round (so that none always
#   runs first, on a cold machine or right after a noisy neighbour), and
#   the RESULT lines of the runs that count go to one raw file.  It
#   calls the script's run_config CONFIG BENCH ROUND (output in
#   OUT/r<round>-<bench>-<config>.log) and its counts CONFIG LOG (0: the
#   run's figures count); appends "round config metric key value" lines to
#   RAW; prints ok/FAIL per run; leaves the number of failed runs in
#   `failed`.
run_rounds() {
    local raw=$1 out=$2 rounds=$3 benches=$4
    shift 4
    local configs=("$@") n=$# r b i c log
    failed=0
    : >"$raw"
    for ((r = 1; r <= rounds; r++)); do
        for b in $benches; do
            for ((i = 0; i < n; i++)); do
                c=${configs[(i + r - 1) % n]}
                log=$out/r$r-$b-$c.log
                if run_config "$c" "$b" "$r" >"$log" 2>&1 </dev/null && counts "$c" "$log"; then
                    awk -v r="$r" -v c="$c" '$1 == "RESULT" { print r, c, $2, $3, $4 }' "$log" >>"$raw"
                    echo "ok   round $r $b $c"
                else
                    echo "FAIL round $r $b $c (log: $log)"
                    failed=$((failed + 1))
                fi
            done
        done
    done
}
