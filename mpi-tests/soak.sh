#!/usr/bin/env bash
# mpi-tests/soak.sh -- a bounded soak of the doorbell BTL under the faults
# it must survive: 4 ranks run soak.c (random sizes 1 B..4 MiB, bursts,
# wildcard receives, every byte checked) for SOAK_SECONDS on each path --
# shared memory; TCP (btl_doorbell_force_tcp 1 over lo); and "full", a
# /dev/shm too small for every rank's control segment, so some pairs go
# over shm and the others over doorbell's TCP -- while, at the same time:
#   stop    a random rank is SIGSTOPped every few seconds for 100-500 ms,
#           every fifth time for 2-4 s, then SIGCONTed;
#   flood   flood.py opens strangers' connections to every rank's doorbell
#           port (FLOOD_RATE a second);
#   squat   uid 65534 plants files in /dev/shm at the names of the first
#           bulk buffers of every control segment that appears (inotify),
#           and at random doorbell names of the job;
#   abort   other 2-rank jobs on the node call MPI_Abort (abort.c) one
#           after another, over shm and force_tcp in turn.
# The script re-executes itself in a private mount namespace (unshare -m,
# root) and mounts a fresh tmpfs over /dev/shm for each path (SHM_SIZE, or
# FULL_SHM_SIZE for "full"), so its files and the squatter's touch nobody.
# Each run prints messages, bytes, wake-ups (the component's counters,
# btl_doorbell_verbose) and errors; it passes with exit 0, "soak: OK", 0
# errors, every rank's counters, at least one stop, the flood's
# connections, every aborted job ending with the abort's code (3), the
# pairs on the paths the path expects, and no file of this user left in
# /dev/shm once every job is over.
# Ends with "N passed, M failed"; exits non-zero on any failure.
#
# Environment (all optional):
#   SOAK_SECONDS   seconds per path (600; make test runs 60)
#   SOAK_NP        ranks (4)
#   SOAK_PATHS     "shm tcp full"
#   SOAK_FAULTS    "stop flood squat abort"
#   STOP_EVERY_MS  pause between stops, drawn from [x/2, 3x/2] ms (3000)
#   FLOOD_RATE     stranger connections a second (2000)
#   SHM_SIZE, FULL_SHM_SIZE   the tmpfs sizes (512m; 1300k: room for two
#                  control segments with the default queues, 624 KiB each)
#   MPICC_FLAGS    extra mpicc flags, word-split (scripts/asan.sh: -fsanitize=address)
#   MPIRUN_EXTRA   extra mpirun arguments, word-split
#   OUT            build and log directory (<repo>/target/mpi-tests-soak)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_NP=${SOAK_NP:-4}
SOAK_PATHS=${SOAK_PATHS:-shm tcp full}
SOAK_FAULTS=${SOAK_FAULTS:-stop flood squat abort}
STOP_EVERY_MS=${STOP_EVERY_MS:-3000}
FLOOD_RATE=${FLOOD_RATE:-2000}
SHM_SIZE=${SHM_SIZE:-512m}
FULL_SHM_SIZE=${FULL_SHM_SIZE:-1300k}
SQUATTER=65534
MPICC_FLAGS=${MPICC_FLAGS:-}
read -r -a EXTRA_ARGS <<<"${MPIRUN_EXTRA:-}"
# Mounts over /dev/shm are seen by this script (and its jobs) alone.
if [[ ${SOAK_NS:-} != 1 ]]; then
    exec env SOAK_NS=1 unshare -m --propagation private "$0" "$@"
fi
fault() { [[ " $SOAK_FAULTS " == *" $1 "* ]]; }
OUT=${OUT:-$ROOT/target/mpi-tests-soak}
BIN=$OUT/bin
LOGS=$OUT/logs
mkdir -p "$BIN" "$LOGS"
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); printf 'PASS  %-40s %s\n' "$1" "$2"; }
fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-40s %s\n' "$1" "$2"
    [[ -n ${3:-} && -f $3 ]] && grep -avE 'btl doorbell: rank|^ *Data for|^ *=+|Mapper|Node:|Process OMPI|^$' "$3" | tail -n 15 | sed 's/^/      | /'
}

for prog in soak abort; do
    # shellcheck disable=SC2086 # MPICC_FLAGS is a list of flags
    if mpicc.openmpi -O2 -g -Wall -Wextra -Werror $MPICC_FLAGS -o "$BIN/$prog" "$HERE/$prog.c" >"$LOGS/build_$prog.log" 2>&1; then
        pass "build $prog" ""
    else
        fail "build $prog" "mpicc.openmpi failed" "$LOGS/build_$prog.log"
    fi
done

# sum_counter LOG NAME: NAME=<n> summed over every rank's counters line
sum_counter() {
    grep -a 'btl doorbell: rank [0-9]* counters:' "$1" | grep -aoE "(^| )$2=[0-9]+" |
        awk -F= '{s += $2} END {print s + 0}'
}

# stopper PIDDIR NP STOPS_FILE: until killed, every STOP_EVERY_MS (+-50%)
# stop one rank for 100-500 ms (every fifth stop 2-4 s); count the stops in
# STOPS_FILE
stopper() {
    local dir=$1 np=$2 count=$3 stops=0 pid
    trap 'exit 0' TERM
    while :; do
        sleep "$(awk -v m="$STOP_EVERY_MS" -v r="$RANDOM" 'BEGIN {printf "%.3f", m * (0.5 + r / 32768) / 1000}')"
        pid=$(cat "$dir/rank.$((RANDOM % np))" 2>/dev/null) || continue
        kill -STOP "$pid" 2>/dev/null || continue
        if ((stops % 5 == 4)); then
            sleep "$((2 + RANDOM % 3))"
        else
            sleep "0.$((100 + RANDOM % 400))"
        fi
        kill -CONT "$pid" 2>/dev/null
        stops=$((stops + 1))
        echo "$stops" >"$count"
    done
}

# aborter DIR PIDDIR: once the soak's ranks are up (their pid files: so
# they got their room in /dev/shm first), until killed, run 2-rank jobs
# whose rank 0 calls MPI_Abort (exit 3), over shm and force_tcp in turn;
# DIR/aborts counts the jobs, DIR/abort_bad those that ended otherwise
# (their logs stay in DIR).
aborter() {
    local dir=$1 runs=0 bad=0 rc
    trap 'exit 0' TERM
    while [[ $(find "$2" -name 'rank.*' | wc -l) -lt $SOAK_NP ]]; do sleep 0.2; done
    while :; do
        timeout -k 5 60 mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,doorbell \
            --mca btl_doorbell_if_include lo --mca btl_doorbell_force_tcp $((runs % 2)) -np 2 "$BIN/abort" \
            >"$dir/abort.log" 2>&1 </dev/null
        rc=$?
        runs=$((runs + 1))
        if [[ $rc != 3 ]]; then
            bad=$((bad + 1))
            cp "$dir/abort.log" "$dir/abort_bad.$bad.log"
        fi
        echo "$runs" >"$dir/aborts"
        echo "$bad" >"$dir/abort_bad"
        sleep 1
    done
}

# squatter STOPFILE: as uid 65534, plant files in /dev/shm at doorbell's
# names until STOPFILE exists; prints how many it planted.
squatter() {
    setpriv --reuid=$SQUATTER --regid=$SQUATTER --clear-groups /usr/bin/python3 - "$SOAK_NP" "$1" <<'PY'
import ctypes, os, random, re, select, struct, sys
np, stop = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
if fd < 0 or libc.inotify_add_watch(fd, b"/dev/shm", 0x100) < 0:  # IN_CREATE
    sys.exit("inotify: errno %d" % ctypes.get_errno())
seen, mine, planted = set(), set(), 0
ctl = re.compile(r"^(doorbell-.*)-([0-9a-f]{16})-c[0-9]+$")

def plant(name):
    global planted
    try:
        os.close(os.open("/dev/shm/" + name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        mine.add(name)
        planted += 1
    except OSError:
        pass

while not os.path.exists(stop):
    if not select.select([fd], [], [], 0.2)[0]:
        continue
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        _, _, _, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode(errors="replace")
        i += 16 + n
        m = ctl.match(name)
        if not m or name in seen or name in mine:
            continue
        seen.add(name)
        stem = "%s-%s" % (m.group(1), m.group(2))
        for src in range(np):
            plant("%s-r%d-w0-b0" % (stem, src))
            plant("%s-%016x-c%d" % (m.group(1), random.getrandbits(64), src))
print("squatter: planted %d files" % planted)
PY
}

for path in $SOAK_PATHS; do
    label="soak np=$SOAK_NP ${SOAK_SECONDS}s [$path]"
    [[ -x $BIN/soak ]] || { fail "$label" "not built"; continue; }
    size=$SHM_SIZE
    case $path in
    shm) args=() ;;
    tcp) args=(--mca btl_doorbell_force_tcp 1) ;;
    full) args=() size=$FULL_SHM_SIZE ;;
    *) fail "$label" "unknown path $path (shm, tcp or full)"; continue ;;
    esac
    if ! mount -t tmpfs -o "size=$size,mode=1777" tmpfs /dev/shm; then
        fail "$label" "mount a tmpfs over /dev/shm (needs root)"
        continue
    fi
    log=$LOGS/soak_$path.log
    piddir=$OUT/pids.$path
    fdir=$OUT/faults.$path
    rm -rf "$piddir" "$fdir" && mkdir -p "$piddir" "$fdir"
    echo 0 >"$fdir/stops"
    helpers=()
    if fault squat; then
        squatter "$fdir/stop" >"$fdir/squat.log" 2>&1 &
        squat_pid=$!
    fi
    if fault stop; then
        stopper "$piddir" "$SOAK_NP" "$fdir/stops" &
        helpers+=($!)
    fi
    if fault flood; then
        python3 "$HERE/flood.py" "$piddir" $((SOAK_SECONDS + 240)) --rate "$FLOOD_RATE" >"$fdir/flood.log" 2>&1 &
        helpers+=($!)
    fi
    if fault abort; then
        aborter "$fdir" "$piddir" &
        helpers+=($!)
    fi
    t0=$SECONDS
    rc=0
    timeout -k 15 $((SOAK_SECONDS + 240)) mpirun.openmpi --allow-run-as-root --oversubscribe --display-map \
        --mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_verbose 1 --mca btl_doorbell_if_include lo \
        "${args[@]}" "${EXTRA_ARGS[@]}" \
        -np "$SOAK_NP" "$BIN/soak" "$SOAK_SECONDS" "$piddir" >"$log" 2>&1 </dev/null || rc=$?
    # the aborter finishes the job it is running (its mpirun is not killed)
    for h in "${helpers[@]}"; do kill "$h" 2>/dev/null; done
    for h in "${helpers[@]}"; do wait "$h" 2>/dev/null; done
    # never leave a rank stopped (the job is over; its pids may be gone)
    for f in "$piddir"/rank.*; do [[ -f $f ]] && kill -CONT "$(cat "$f")" 2>/dev/null; done
    if fault squat; then
        touch "$fdir/stop"
        wait "$squat_pid" 2>/dev/null
    fi
    took=$((SECONDS - t0))
    stops=$(cat "$fdir/stops")
    left=$(find /dev/shm -maxdepth 1 -user "$(id -u)" -name 'doorbell*' | tr '\n' ' ')
    umount -l /dev/shm
    aborts=$(cat "$fdir/aborts" 2>/dev/null || echo 0)
    abort_bad=$(cat "$fdir/abort_bad" 2>/dev/null || echo 0)
    flood=$(sed -n 's/^flood: \([0-9]*\) connections.*/\1/p' "$fdir/flood.log" 2>/dev/null)
    squat=$(sed -n 's/^squatter: planted \([0-9]*\).*/\1/p' "$fdir/squat.log" 2>/dev/null)
    shm_pairs=$(sed -n 's/.*btl doorbell: rank \([0-9]*\) peer \([0-9]*\) path=shm.*/\1 \2/p' "$log" | awk '$1 != $2' | wc -l)
    tcp_pairs=$(sed -n 's/.*btl doorbell: rank \([0-9]*\) peer \([0-9]*\) path=tcp.*/\1 \2/p' "$log" | awk '$1 != $2' | wc -l)
    summary=$(grep -a '^soak: [0-9]* rounds' "$log" | tail -n 1)
    msgs=$(sed -nE 's/.*messages=([0-9]+).*/\1/p' <<<"$summary")
    bytes=$(sed -nE 's/.*bytes=([0-9]+).*/\1/p' <<<"$summary")
    errors=$(sed -nE 's/^soak: ([0-9]+) failed checks.*/\1/p' "$log" | tail -n 1)
    grep -aq '^soak: OK' "$log" && errors=0
    reports=$(grep -ac 'btl doorbell: rank [0-9]* counters:' "$log")
    wakeups=$(sum_counter "$log" wakeups)
    shm_w=$(sum_counter "$log" shm_wakeups)
    tcp_w=$(sum_counter "$log" tcp_wakeups)
    sleeps=$(sum_counter "$log" sleeps)
    figures="${took}s: $summary; wake-ups=$wakeups (shm $shm_w, tcp $tcp_w) of sleeps=$sleeps; stops=$stops; pairs shm=$shm_pairs tcp=$tcp_pairs; strangers=${flood:--}; squatted=${squat:--}; aborted jobs=$aborts (bad $abort_bad); errors=${errors:-?}"
    echo "      $label: $figures"
    if [[ $rc == 124 || $rc == 137 ]]; then
        fail "$label" "timed out after $((SOAK_SECONDS + 240))s" "$log"
    elif [[ $rc != 0 ]]; then
        fail "$label" "exit $rc (errors=${errors:-?})" "$log"
    elif [[ ${errors:-x} != 0 ]]; then
        fail "$label" "errors=${errors:-? (no soak: line)}" "$log"
    elif [[ -z $msgs || $msgs == 0 ]]; then
        fail "$label" "no message counted" "$log"
    elif [[ $reports != "$SOAK_NP" ]]; then
        fail "$label" "$reports of $SOAK_NP ranks printed doorbell counters" "$log"
    elif [[ $path == tcp && $shm_pairs != 0 ]]; then
        fail "$label" "force_tcp set but a peer was reached over shm" "$log"
    elif [[ $path == shm && $tcp_pairs != 0 ]]; then
        fail "$label" "a same-node peer was reached over tcp" "$log"
    elif [[ $path == full ]] && [[ $shm_pairs == 0 || $tcp_pairs == 0 ]]; then
        fail "$label" "a /dev/shm of $size should leave pairs on both paths (shm $shm_pairs, tcp $tcp_pairs)" "$log"
    elif fault stop && [[ $stops == 0 ]]; then
        fail "$label" "no rank was stopped (run too short for STOP_EVERY_MS=$STOP_EVERY_MS?)" "$log"
    elif fault flood && [[ ${flood:-0} == 0 ]]; then
        fail "$label" "the flood made no connection" "$fdir/flood.log"
    elif fault abort && [[ $aborts == 0 || $abort_bad != 0 ]]; then
        fail "$label" "$abort_bad of $aborts aborted jobs did not end with the abort's code, 3" "$(ls "$fdir"/abort_bad.*.log 2>/dev/null | head -n 1)"
    elif [[ -n $left ]]; then
        fail "$label" "left in /dev/shm: $left" "$log"
    else
        pass "$label" "messages=$msgs bytes=$bytes stops=$stops strangers=${flood:--} squatted=${squat:--} aborted jobs=$aborts errors=0"
    fi
done

echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
