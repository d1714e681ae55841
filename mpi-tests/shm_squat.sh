#!/usr/bin/env bash
# mpi-tests/shm_squat.sh -- another user squats the names doorbell will use
# in /dev/shm; root's jobs must run anyway, over shared memory.
#
# Runs in a private mount namespace (re-executes itself under `unshare -m`,
# so needs root) with a fresh tmpfs over /dev/shm, so the squatter's files
# touch nobody else.  The squatter is uid 65534 (setpriv):
#   - before the jobs, it creates, in under a second, a file at the control
#     segment name of task 0 of every job id mpirun can hand out
#     (doorbell-ompi.u<uid>.j<family><0001>-c0, 65,536 files: the names
#     doorbell used when a name followed from the job id);
#   - during the jobs, it watches the directory and, for every control
#     segment that appears, plants files at the names of the first bulk
#     buffers its senders would make for it (<stem>-r<src>-w0-b0); the job
#     "bulk" (no single copy, 128 KiB queues) sends its fragments through
#     bulk buffers, and its senders must meet those names and go on.
# Each job (shm_full: alltoall, pairwise 1 MiB exchanges, alltoallv; every
# byte checked) runs under mpirun with --mca btl self,doorbell, and must:
#   - exit 0 with the program's OK line;
#   - carry every pair over shm (the finalize report names no tcp path);
#   - leave no file of root's behind, and every squatted file in place.
# Prints PASS/FAIL per check and ends with "N passed, M failed".
#
# Environment: NP (4), RUN_TIMEOUT (seconds per mpirun, 240),
# OUT (<repo>/target/mpi-tests-shm-squat).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=ns_suite.sh
source "$HERE/ns_suite.sh"
ns_suite_enter SHM_SQUAT_NS "$0" "$@"
NP=${NP:-4}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
SQUATTER=65534
PY=/usr/bin/python3
ns_suite_out "$ROOT/target/mpi-tests-shm-squat"

build_program shm_full || finish
if ! mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm; then
    fail "mount a tmpfs over /dev/shm" "mount failed (needs root)"
    finish
fi
trap 'umount -l /dev/shm 2>/dev/null' EXIT
as_squatter() { setpriv --reuid=$SQUATTER --regid=$SQUATTER --clear-groups "$@"; }

# The job ids' names, taken before any job starts.
t0=$(date +%s%N)
as_squatter "$PY" - "$(id -u)" <<'EOF'
import os, sys
uid = int(sys.argv[1])
for fam in range(65536):
    name = "/dev/shm/doorbell-ompi.u%d.j%08x-c0" % (uid, fam << 16 | 1)
    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
EOF
took=$((($(date +%s%N) - t0) / 1000000))
squatted=$(find /dev/shm -maxdepth 1 -type f -user $SQUATTER | wc -l)
if [[ $squatted -eq 65536 ]]; then
    pass "the squatter holds the control names of 65,536 job ids" "(${took} ms)"
else
    fail "the squatter holds the control names of 65,536 job ids" "($squatted files)"
fi

# The squatter's watcher: bulk buffer names derived from every control
# segment that appears, until $OUT/stop exists.  It prints how many names
# it found made already and how many it planted.
rm -f "$OUT/stop" "$OUT/planted"
as_squatter "$PY" - "$NP" "$OUT/stop" >"$OUT/planted" 2>&1 <<'EOF' &
# inotify (through libc): a name is planted within microseconds of the
# control segment's creation, long before a sender makes a bulk buffer.
import ctypes, os, re, select, struct, sys
np, stop = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
IN_CREATE = 0x100
if fd < 0 or libc.inotify_add_watch(fd, b"/dev/shm", IN_CREATE) < 0:
    sys.exit("inotify: errno %d" % ctypes.get_errno())
seen, planted, late = set(), 0, 0
ctl = re.compile(r"^(doorbell-.*-[0-9a-f]{16})-c[0-9]+$")
while not os.path.exists(stop):
    if not select.select([fd], [], [], 0.1)[0]:
        continue
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        _, _, _, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode()
        i += 16 + n
        m = ctl.match(name)
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        for src in range(np):
            try:
                os.close(os.open("/dev/shm/%s-r%d-w0-b0" % (m.group(1), src), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                planted += 1
            except FileExistsError:
                late += 1
print(late, planted)
EOF
WATCHER=$!

# paths PATH LOG: finalize reports "rank R peer P path=PATH" with P != R.
# job NAME MPIRUN ARGS...: run shm_full and check it.
job() {
    local name=$1 log=$OUT/$1.log rc t0
    shift
    t0=$SECONDS
    env -u DOORBELL_SHM_DIR timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP" \
        --mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_if_include lo \
        --mca btl_doorbell_verbose 1 "$@" "$OUT/shm_full" 1048576 >"$log" 2>&1
    rc=$?
    if [[ $rc == 0 ]] && grep -q "shm_full: OK ($NP ranks)" "$log"; then
        pass "$name: $NP ranks, data checked, exit 0" "($((SECONDS - t0)) s)"
    else
        fail "$name: $NP ranks, data checked, exit 0" "exit $rc after $((SECONDS - t0)) s" "$log"
    fi
    local shm tcp
    shm=$(paths shm "$log")
    tcp=$(paths tcp "$log")
    if [[ $tcp -eq 0 && $shm -eq $((NP * (NP - 1))) ]]; then
        pass "$name: every pair over shm" "($shm shm, $tcp tcp)"
    else
        fail "$name: every pair over shm" "($shm shm, $tcp tcp of $((NP * (NP - 1))))" "$log"
    fi
    local left
    left=$(find /dev/shm -maxdepth 1 -type f -user "$(id -u)")
    if [[ -z $left ]]; then
        pass "$name: nothing of root's left in /dev/shm"
    else
        fail "$name: nothing of root's left in /dev/shm" "$(echo $left | head -c 300)"
        rm -f $left
    fi
}

job default
job bulk --mca btl_doorbell_single_copy 0 --mca btl_doorbell_ring_size 131072
# Its senders met the planted bulk names (each rank says so once) and went on.
n=$(grep -c "w0-b0 is taken (a file of uid $SQUATTER); using fresh names" "$OUT/bulk.log")
if [[ $n -ge 1 ]]; then
    pass "bulk: senders met squatted bulk names and took fresh ones" "($n ranks said so)"
else
    fail "bulk: senders met squatted bulk names and took fresh ones" "(no rank did: the watcher came late?)" "$OUT/bulk.log"
fi
job again

touch "$OUT/stop"
wait "$WATCHER"
read -r late planted < <(tail -n 1 "$OUT/planted")
echo "      (the watcher planted ${planted:-?} bulk buffer names while the jobs ran; ${late:-?} were made before it came)"
left=$(find /dev/shm -maxdepth 1 -type f -user $SQUATTER | wc -l)
if [[ $left -eq $((65536 + ${planted:-0})) ]]; then
    pass "every squatted file is still there, untouched" "($left)"
else
    fail "every squatted file is still there, untouched" "($left of $((65536 + ${planted:-0})))"
fi
if [[ -z $(find /dev/shm -maxdepth 1 -type f -user $SQUATTER -size +0) ]]; then
    pass "no squatted file was written"
else
    fail "no squatted file was written"
fi
finish
