#!/usr/bin/env bash
# mpi-tests/spawn.sh -- dynamic processes over --mca btl self,doorbell:
# ranks of two jobs exchange data (dynproc.c: every rank of one job with
# every rank of the other, 0 B to 4 MiB both ways at once, every byte
# checked, then an Allreduce and a Bcast over both jobs merged).
#   spawn     2 ranks MPI_Comm_spawn 2 children, twice (two child jobs)
#   connect   two mpiruns started apart, 2 ranks each, MPI_Comm_accept and
#             MPI_Comm_connect through ompi-server (the port in a file)
#   join      two mpiruns of 1 rank, MPI_Comm_join over a TCP socket
#   pool      mpi4py.futures' MPIPoolExecutor spawns 2 workers and sends
#             them tasks (spawn_pool.py), data checked
# each over shared memory, then with btl_doorbell_force_tcp 1 on lo.  Each
# run must exit 0 with every job's OK line, carry the pairs between the
# jobs over the path asked for (the finalize report names them: peer ids
# from 16384 up are another job's) and no pair over the other, and leave
# no file in the shm directory.
#
# Runs in a private mount namespace (re-executes itself under `unshare -m`,
# so needs root) with a fresh tmpfs over /dev/shm, so that what is left
# there is this suite's.  Prints PASS/FAIL per check and ends with
# "N passed, M failed".
#
# Environment: RUN_TIMEOUT (seconds per mpirun, 180), OUT
# (<repo>/target/mpi-tests-spawn).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [[ ${SPAWN_NS:-} != 1 ]]; then
    exec env SPAWN_NS=1 unshare -m --propagation private "$0" "$@"
fi
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
OUT=${OUT:-$ROOT/target/mpi-tests-spawn}
PY=/usr/bin/python3
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/port "$OUT"/uri
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-66s %s\n' "$1" "${2:-}"; }
fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-66s %s\n' "$1" "${2:-}"
    [[ -n ${3:-} && -f $3 ]] && tail -n 25 "$3" | sed 's/^/      | /'
}
finish() {
    echo "$PASSED passed, $FAILED failed"
    [[ $FAILED -eq 0 ]]
    exit
}

if mpicc.openmpi -O2 -g -Wall -Wextra -Werror -o "$OUT/dynproc" "$HERE/dynproc.c" >"$OUT/build.log" 2>&1; then
    pass "build dynproc"
else
    fail "build dynproc" "mpicc.openmpi failed" "$OUT/build.log"
    finish
fi
if ! mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm; then
    fail "mount a tmpfs over /dev/shm" "mount failed (needs root)"
    finish
fi
SERVER=
cleanup() {
    [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null
    umount -l /dev/shm 2>/dev/null
}
trap cleanup EXIT

# The name server that lets two mpiruns meet (Open MPI 4.1 needs one for
# connect/accept between jobs that mpirun did not start together).
ompi-server --no-daemonize -r "$OUT/uri" >"$OUT/ompi-server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
    [[ -s $OUT/uri ]] && break
    sleep 0.1
done
if [[ -s $OUT/uri ]]; then
    pass "ompi-server is up"
else
    fail "ompi-server is up" "no uri after 10 s" "$OUT/ompi-server.log"
fi

MPIRUN=(timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1
    --mca btl self,doorbell --mca btl_doorbell_if_include lo --mca btl_doorbell_verbose 1
    --ompi-server "file:$OUT/uri")

# cross PATH LOG...: pairs to another job's ranks (peer id >= 16384) over PATH
cross() {
    local path=$1
    shift
    sed -n "s/.*btl doorbell: rank [0-9]* peer \([0-9]*\) path=$path.*/\1/p" "$@" | awk '$1 >= 16384' | wc -l
}

# check NAME PATH RC EXPECT LOG...: the runs' exit, OK lines, paths, files
check() {
    local name=$1 path=$2 rc=$3 expect=$4 other=tcp ok
    shift 4
    [[ $path == tcp ]] && other=shm
    ok=$(cat "$@" | grep -c ': OK (')
    if [[ $rc == 0 && $ok == "$expect" ]]; then
        pass "$name: exit 0, $expect jobs OK" "($((SECONDS - T0)) s)"
    else
        fail "$name: exit 0, $expect jobs OK" "exit $rc, $ok OK lines" "$1"
    fi
    local on off
    on=$(cross "$path" "$@")
    off=$(cross "$other" "$@")
    if [[ $on -gt 0 && $off == 0 ]]; then
        pass "$name: the pairs between the jobs go over $path" "($on)"
    else
        fail "$name: the pairs between the jobs go over $path" "($on over $path, $off over $other)" "$1"
    fi
    local left
    left=$(find /dev/shm -mindepth 1 | head -5)
    if [[ -z $left ]]; then
        pass "$name: nothing left in /dev/shm"
    else
        fail "$name: nothing left in /dev/shm" "$(echo "$left" | tr '\n' ' ')"
        find /dev/shm -mindepth 1 -delete
    fi
}

for path in shm tcp; do
    ft=0
    [[ $path == tcp ]] && ft=1
    FT=(--mca btl_doorbell_force_tcp "$ft")

    T0=$SECONDS
    log=$OUT/spawn-$path.log
    "${MPIRUN[@]}" "${FT[@]}" -np 2 "$OUT/dynproc" spawn 2 2 >"$log" 2>&1
    check "spawn ($path)" "$path" $? 3 "$log"

    for pair in "server client 2" "join-server join-client 1"; do
        read -r srv cli np <<<"$pair"
        T0=$SECONDS
        rm -f "$OUT/port"
        "${MPIRUN[@]}" "${FT[@]}" -np "$np" "$OUT/dynproc" "$srv" "$OUT/port" >"$OUT/$srv-$path.log" 2>&1 &
        spid=$!
        "${MPIRUN[@]}" "${FT[@]}" -np "$np" "$OUT/dynproc" "$cli" "$OUT/port" >"$OUT/$cli-$path.log" 2>&1
        crc=$?
        wait "$spid"
        srv_rc=$?
        name=${srv%-server}
        [[ $name == server ]] && name=connect
        check "$name ($path)" "$path" $((crc | srv_rc)) 2 "$OUT/$srv-$path.log" "$OUT/$cli-$path.log"
    done

    T0=$SECONDS
    log=$OUT/pool-$path.log
    "${MPIRUN[@]}" "${FT[@]}" -np 1 "$PY" "$HERE/spawn_pool.py" 2 24 >"$log" 2>&1
    check "pool ($path)" "$path" $? 1 "$log"
done
finish
