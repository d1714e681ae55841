#!/usr/bin/env bash
# bench/ompi/bibw_windows.sh -- bibw_windows.c beside vader: osu_bibw's
# pattern (64 two-way 1 MiB messages a window) with each window timed, the
# configurations alternating every round (vader, doorbell, and with BASE_DIR
# a doorbell component built from another commit: make -C ompi install
# INSTALLDIR=<dir> in a checkout of it).  Prints per configuration the
# median over rounds of each figure of rank 0, and doorbell's ratios to
# vader (window times: < 1 is doorbell faster; MB/s: > 1 is).
#
# Environment: ROUNDS (5), WINDOWS (200 per run), DISTINCT (1: every
# message its own buffers, memory-bound; default one buffer each way, as
# osu_bibw), BASE_DIR, MPIRUN_EXTRA, OUT (<repo>/target/bench-bibw).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-5}
WINDOWS=${WINDOWS:-200}
OUT=${OUT:-$root/target/bench-bibw}
read -r -a extra <<<"${MPIRUN_EXTRA:-}"
mkdir -p "$OUT"
mpicc.openmpi -O2 -o "$OUT/bibw_windows" "$here/bibw_windows.c" || { echo "bibw_windows.sh: build failed" >&2; exit 1; }
sys=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
declare -A mca=(
    [vader]="--mca btl self,vader"
    [doorbell]="--mca btl self,doorbell"
)
configs=(vader doorbell)
if [[ -n ${BASE_DIR:-} ]]; then
    mca[doorbell_base]="--mca btl self,doorbell --mca mca_base_component_path $sys:$BASE_DIR"
    configs+=(doorbell_base)
fi
res=$OUT/results.tsv
: >"$res"
failed=0
for ((r = 1; r <= ROUNDS; r++)); do
    order=("${configs[@]}")
    ((r % 2)) || order=($(printf '%s\n' "${configs[@]}" | tac))
    for c in "${order[@]}"; do
        log=$OUT/r$r-$c.log
        # shellcheck disable=SC2086 # the MCA string is word-split
        timeout -k 10 600 mpirun.openmpi --allow-run-as-root -np 2 --bind-to core --mca pml ob1 ${mca[$c]} \
            "${extra[@]}" "$OUT/bibw_windows" "$WINDOWS" ${DISTINCT:+distinct} >"$log" 2>&1 </dev/null
        rc=$?
        if [[ $rc != 0 ]] || ! grep -q '^RESULT MBps' "$log"; then
            echo "FAIL round $r $c: exit $rc ($log)"
            failed=$((failed + 1))
            continue
        fi
        awk -v c="$c" '/^RESULT/ { print c, $2, $4 }' "$log" >>"$res"
        printf 'round %d %-14s %s\n' "$r" "$c" "$(awk '/^RESULT (window_ms|irecv_p90_ms|MBps)/ { printf "%s %s  ", $2, $4 }' "$log")"
    done
done
echo
python3 - "$res" "${configs[*]}" <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    c, m, v = line.split()
    vals.setdefault(m, {}).setdefault(c, []).append(float(v))
configs = sys.argv[2].split()
metrics = ["window_ms", "window_p90_ms", "window_max_ms", "irecv_p90_ms", "irecv_max_ms", "MBps"]
print(f"{'median over rounds':16s}" + "".join(f"{c:>16s}" for c in configs) + "".join(f"{c + '/vader':>22s}" for c in configs[1:]))
for m in metrics:
    med = {c: statistics.median(vals[m][c]) for c in configs if c in vals.get(m, {})}
    row = f"{m:16s}" + "".join(f"{med.get(c, float('nan')):16.3f}" for c in configs)
    for c in configs[1:]:
        if c in med and med.get("vader"):
            row += f"{med[c] / med['vader']:21.2f}x"
    print(row)
PY
echo "logs: $OUT"
[[ $failed == 0 ]]
