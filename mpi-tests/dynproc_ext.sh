#!/usr/bin/env bash
# mpi-tests/dynproc_ext.sh -- other projects' dynamic-process tests over
# each BTL list of BTLS, side by side:
#   - mpi4py 3.1.4's test_spawn.py and test_dynproc.py, each test case its
#     own mpirun, at 1 and at 2 ranks;
#   - MPICH's test/mpi/spawn, every line of its testlist (built with
#     mpicc.openmpi; a stand-in replaces the header its configure makes).
# A test passes when mpirun exits 0 and the test says so (unittest's "OK",
# MPICH's " No Errors").  Prints one line per test with each BTL list's
# result, and per BTL list "<btls>: N of M passed".  Not part of make test:
# it takes 30-60 minutes, and Open MPI 4.1's runtime times out some
# spawns on a loaded machine whatever the BTL (help-orted.txt / timedout,
# "LOOKUP: pmix_server_pub.c"), which the side-by-side runs show.
#
# Environment: MPI4PY_SRC (a tree of mpi4py 3.1.4 with its test/),
# MPICH_SRC (an MPICH tree with test/mpi/spawn, util and include); each is
# cloned from GitHub into target/ext when unset.  BTLS ("self,vader,tcp
# self,doorbell"), RUN_TIMEOUT (seconds per mpirun, 120), OUT
# (<repo>/target/dynproc-ext), ONLY (mpi4py or mpich: one of the two).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BTLS=${BTLS:-"self,vader,tcp self,doorbell"}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
OUT=${OUT:-$ROOT/target/dynproc-ext}
ONLY=${ONLY:-}
PY=/usr/bin/python3
mkdir -p "$OUT/logs" "$ROOT/target/ext"

clone() { # URL REF DIR PATHS...: a shallow, sparse checkout
    local url=$1 ref=$2 dir=$3
    shift 3
    [[ -d $dir/.git ]] && return 0
    git clone -q --depth 1 --branch "$ref" --filter=blob:none --sparse "$url" "$dir" &&
        git -C "$dir" sparse-checkout set "$@"
}

MPIRUN=(timeout "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1
    --mca btl_tcp_if_include lo --mca btl_doorbell_if_include lo)
declare -A PASSED TOTAL
for b in $BTLS; do PASSED[$b]=0; TOTAL[$b]=0; done

# run NAME CHECK DIR CMD...: the command under each BTL list; CHECK is the
# line that says the test passed
run() {
    local name=$1 want=$2 dir=$3 line b log rc
    shift 3
    line=$(printf '%-58s' "$name")
    for b in $BTLS; do
        log=$OUT/logs/$(echo "$name-$b" | tr '/ ,' '___').log
        (cd "$dir" && "${MPIRUN[@]}" --mca btl "$b" "$@") </dev/null >"$log" 2>&1
        rc=$?
        TOTAL[$b]=$((TOTAL[$b] + 1))
        if [[ $rc == 0 ]] && grep -q -- "$want" "$log"; then
            PASSED[$b]=$((PASSED[$b] + 1))
            line+=" $(printf '%-16s' "$b:ok")"
        else
            line+=" $(printf '%-16s' "$b:FAIL($rc)")"
        fi
    done
    echo "$line"
}

if [[ -z $ONLY || $ONLY == mpi4py ]]; then
    SRC=${MPI4PY_SRC:-$ROOT/target/ext/mpi4py}
    [[ -n ${MPI4PY_SRC:-} ]] || clone https://github.com/mpi4py/mpi4py 3.1.4 "$SRC" test ||
        { echo "no mpi4py 3.1.4 tests"; exit 1; }
    cases=$(cd "$SRC/test" && "$PY" - <<'EOF'
import sys, unittest
sys.path.insert(0, '.')
import test_spawn, test_dynproc
for m in (test_spawn, test_dynproc):
    for suite in unittest.TestLoader().loadTestsFromModule(m):
        for t in suite:
            print(t.id())
EOF
)
    for np in 1 2; do
        for c in $cases; do
            run "mpi4py np=$np $c" '^OK' "$SRC/test" -np "$np" "$PY" runtests.py --no-builddir -v \
                -i "^${c%%.*}\$" "${c#*.}"
        done
    done
fi

if [[ -z $ONLY || $ONLY == mpich ]]; then
    SRC=${MPICH_SRC:-$ROOT/target/ext/mpich}
    [[ -n ${MPICH_SRC:-} ]] || clone https://github.com/pmodels/mpich v4.2.3 "$SRC" test/mpi/spawn test/mpi/util test/mpi/include ||
        { echo "no MPICH tests"; exit 1; }
    T=$SRC/test/mpi
    BIN=$OUT/mpich-bin
    mkdir -p "$BIN"
    # what MPICH's configure would have found on Debian with Open MPI 4.1
    cat >"$BIN/mpitestconf.h" <<'EOF'
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STRINGS_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STDARG_H 1
#define HAVE_SYS_SELECT_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_SOCKET_H 1
#define HAVE_NETINET_IN_H 1
#define HAVE_NETDB_H 1
#define HAVE_ARPA_INET_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_MPI_SPAWN 1
#define HAVE_VA_COPY 1
#define USE_STRICT_MPI 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
EOF
    : >"$BIN/mtest_mpix.h"
    for f in mtest mtest_common mtest_single; do
        mpicc.openmpi -I"$BIN" -I"$T/include" -c "$T/util/$f.c" -o "$BIN/$f.o" || exit 1
    done
    while read -r name np rest; do
        name=${name#@namepub_tests@}
        [[ -z $name || $name == \#* ]] && continue
        if [[ ! -x $BIN/$name ]]; then
            mpicc.openmpi -I"$BIN" -I"$T/include" -o "$BIN/$name" "$T/spawn/$name.c" "$BIN"/mtest*.o \
                >"$OUT/logs/build-$name.log" 2>&1 || { echo "build $name failed"; continue; }
        fi
        args=()
        for kv in $rest; do
            [[ $kv == arg=* ]] && args+=("${kv#arg=}")
        done
        run "mpich np=$np $name ${args[*]}" ' No Errors' "$BIN" -np "$np" "./$name" "${args[@]}"
    done <"$T/spawn/testlist.in"
fi

for b in $BTLS; do
    echo "$b: ${PASSED[$b]} of ${TOTAL[$b]} passed"
done
