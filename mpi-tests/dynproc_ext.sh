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
# MPICH_SRC (an MPICH tree with test/mpi/spawn, util and include); when
# unset, mpi4py's sdist from PyPI and MPICH 4.0.2's tests from Debian's
# source package (ext_lib.sh).  BTLS ("self,vader,tcp
# self,doorbell"), RUN_TIMEOUT (seconds per mpirun, 120), OUT
# (<repo>/target/dynproc-ext), ONLY (mpi4py or mpich: one of the two).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CONFIGS=${BTLS:-"self,vader,tcp self,doorbell"}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
OUT=${OUT:-$ROOT/target/dynproc-ext}
ONLY=${ONLY:-}
# shellcheck source=mpi-tests/ext_lib.sh
. "$HERE/ext_lib.sh"
ext_init
# run NAME CHECK DIR CMD...: the command under each BTL list
run() {
    local name=$1 want=$2 dir=$3
    shift 3
    ext_run "$name" "$want" "$dir" "$RUN_TIMEOUT" "$@"
}

if [[ -z $ONLY || $ONLY == mpi4py ]]; then
    SRC=${MPI4PY_SRC:-}
    [[ -n $SRC ]] || SRC=$(ext_mpi4py_tests) || { echo "no mpi4py 3.1.4 tests"; exit 1; }
    SRC=${SRC%/test}
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
    if [[ -n ${MPICH_SRC:-} ]]; then
        T=$MPICH_SRC/test/mpi
    else
        T=$(ext_mpich_tests spawn util include) || { echo "no MPICH tests"; exit 1; }
    fi
    BIN=$OUT/mpich-bin
    ext_mtest_build "$T" "$BIN" || exit 1
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

for b in $CONFIGS; do
    echo "$b: ${PASSED[$b]} of ${TOTAL[$b]} passed"
done
