#!/usr/bin/env bash
# Shared memory per rank, doorbell beside vader, at 8, 32, 64 and 128 ranks on
# this node (oversubscribed on small machines: it only sets up and measures).
#
# Each run: every pair of ranks exchanges messages (shm_usage.c), then rank
# 0 reads the shm file system's usage while the job still runs; the figure
# is (that - usage before mpirun) / ranks.  Prints one table.
#   NPS="8 32 64 128"   rank counts      SHM=/dev/shm   the file system measured
#   DOORBELL_MCA="--mca btl_doorbell_ring_size 262144"   extra arguments for
#                   the doorbell runs (e.g. to see what a smaller queue saves)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-$root/target/bench-ompi}
NPS=${NPS:-8 32 64 128}
SHM=${SHM:-/dev/shm}
MPIRUN=${MPIRUN:-mpirun.openmpi}
MPICC=${MPICC:-mpicc.openmpi}
read -r -a doorbell_mca <<<"${DOORBELL_MCA:-}"

if [[ $(ompi_info 2>/dev/null || true) != *"MCA btl: doorbell"* ]]; then
    echo "shm_usage.sh: the doorbell BTL is not installed (make install)" >&2
    exit 2
fi
mkdir -p "$OUT"
"$MPICC" -O2 -Wall -Wextra -Werror -o "$OUT/shm_usage" "$here/shm_usage.c"

used() { df --output=used -B1 "$SHM" | tail -1 | tr -d ' '; }

declare -A per_rank
for np in $NPS; do
    for t in vader doorbell; do
        extra=()
        [ "$t" = doorbell ] && extra=("${doorbell_mca[@]}")
        before=$(used)
        log=$(timeout -k 10 300 "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
            --mca pml ob1 --mca btl "self,$t" "${extra[@]}" "$OUT/shm_usage" "$SHM" 2>&1) || {
            echo "$log" >&2
            echo "shm_usage.sh: $t at $np ranks failed" >&2
            exit 1
        }
        during=$(awk '$1 == "RESULT" && $2 == "shm_used_bytes" { print $4 }' <<<"$log")
        [ -n "$during" ] || { echo "$log" >&2; echo "shm_usage.sh: no figure from $t at $np ranks" >&2; exit 1; }
        per_rank[$t,$np]=$(( (during - before) / np ))
    done
done

printf '%-6s %16s %16s %10s\n' ranks "vader MiB/rank" "doorbell MiB/rank" "db/vader"
for np in $NPS; do
    v=${per_rank[vader,$np]} d=${per_rank[doorbell,$np]}
    awk -v np="$np" -v v="$v" -v d="$d" 'BEGIN {
        printf "%-6s %16.1f %16.1f %9.2fx\n", np, v / 1048576, d / 1048576, (v > 0 ? d / v : 0) }'
done
