#!/usr/bin/env bash
# Instructions per message, counted: each configuration's sender and
# receiver of bench/fi/stream.c (windows of 64 8-byte messages, 2 ranks),
# one side at a time under callgrind while the other runs at full speed, so
# that the counted side spends almost nothing waiting.  Two window counts,
# and their difference divided by the messages between them: start-up and
# teardown cancel.  instr_report.py splits each count into the MPI's own
# code (and the program's) and the transport's (vader, the doorbell BTL or
# provider, libfabric), and prints how many instructions the MPI's own
# layers leave a transport under a given ratio to the reference path.
#
# Counts do not depend on the machine's load: this is the deterministic
# side of bench/fi/run.sh's timings.  Needs valgrind (scripts/deps.sh).
#
# Environment: CONFIGS (ompi_vader ompi_btl ompi_doorbell mpich_default
#   mpich_doorbell mpich_fi_shm), SIZE (8), MPICH_VENV, OUT
#   (<repo>/target/bench-fi-instr).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=bench/fi/frame.sh
. "$here/frame.sh"
bench_setup instr.sh "$root/target/bench-fi-instr"
command -v valgrind >/dev/null || { echo "instr.sh: valgrind is missing (scripts/deps.sh installs it)" >&2; exit 1; }
SIZE=${SIZE:-8}
mpicc.openmpi -O2 -o "$OUT/stream_ompi" "$here/stream.c" &&
    "$MPICH_VENV/bin/mpicc" -O2 -o "$OUT/stream_mpich" "$here/stream.c" ||
    { echo "instr.sh: building stream.c failed (is the MPICH wheel in $MPICH_VENV? scripts/deps.sh)" >&2; exit 1; }
wrap=$OUT/callgrind_one.sh
cat >"$wrap" <<'W'
#!/bin/sh
# Run the rank CG_RANK under callgrind, the other as it is.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}
if [ "$rank" = "$CG_RANK" ]; then
    exec valgrind --tool=callgrind --callgrind-out-file="$CG_OUT" "$@"
fi
exec "$@"
W
chmod +x "$wrap"

run() { # config side windows
    local c=$1 side=$2 n=$3 out=$OUT/cg.$1.$2.$3
    local cg=(CG_RANK="$side" CG_OUT="$out")
    case $c in
    ompi_vader | ompi_btl | ompi_doorbell)
        local args=(--mca pml ob1 --mca btl self,vader)
        [[ $c == ompi_btl ]] && args=(--mca pml ob1 --mca btl self,doorbell)
        [[ $c == ompi_doorbell ]] && args=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell
            -x FI_PROVIDER_PATH="$PROV" -x FI_DOORBELL_IF_INCLUDE=lo)
        timeout -k 5 600 mpirun.openmpi --allow-run-as-root -np 2 --bind-to core "${args[@]}" \
            -x CG_RANK="$side" -x CG_OUT="$out" "$wrap" "$OUT/stream_ompi" "$n" "$SIZE" ;;
    mpich_default | mpich_doorbell | mpich_fi_shm)
        local envs=()
        [[ $c == mpich_doorbell ]] && envs=(MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=doorbell
            FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo)
        [[ $c == mpich_fi_shm ]] && envs=(MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=shm)
        timeout -k 5 600 env "${envs[@]}" "${cg[@]}" "$MPICH_VENV/bin/mpiexec" -n 2 -bind-to core \
            "$wrap" "$OUT/stream_mpich" "$n" "$SIZE" ;;
    *) echo "instr.sh: unknown configuration $c" >&2; return 2 ;;
    esac
}

read -r -a configs <<<"${CONFIGS:-ompi_vader ompi_btl ompi_doorbell mpich_default mpich_doorbell mpich_fi_shm}"
failed=0
for c in "${configs[@]}"; do
    for side in 0 1; do
        for n in 200 1200; do
            if run "$c" "$side" "$n" >"$OUT/$c.$side.$n.log" 2>&1 </dev/null && [[ -s $OUT/cg.$c.$side.$n ]]; then
                echo "ok   $c side $side, $n windows"
            else
                echo "FAIL $c side $side, $n windows (log: $OUT/$c.$side.$n.log)"
                failed=$((failed + 1))
            fi
        done
    done
done
python3 "$here/instr_report.py" --dir "$OUT" --configs "${configs[*]}" --messages $(((1200 - 200) * 64)) || failed=$((failed + 1))
echo "callgrind files and logs: $OUT"
[[ $failed == 0 ]]
