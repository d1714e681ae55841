#!/usr/bin/env bash
# fi/tests/ext.sh -- other projects' MPI tests through the doorbell
# libfabric provider, each beside that MPI's default transport:
#   mpich-shm      the MPICH wheel (target/venv-mpich) as it comes: ch4,
#                  on-node traffic in its posix shared memory;
#   mpich-doorbell the same with ch4:ofi, FI_PROVIDER=doorbell and
#                  MPIR_CVAR_NOLOCAL=1 (all traffic through the provider);
#   ompi-vader     Open MPI 4.1, pml ob1, btl self,vader;
#   ompi-doorbell  Open MPI 4.1, pml cm, mtl ofi, provider doorbell;
#   ompi-btl       Open MPI 4.1, pml ob1, btl self,doorbell (the BTL, not
#                  the provider: MPIS=btl runs it beside ompi-vader).
# Suites:
#   - MPICH 4.0.2's test/mpi (SUITES: pt2pt coll rma comm threads), every
#     line of each testlist, one launch per line; built with the wheel's
#     mpicc for the MPICH configurations and with mpicc.openmpi for the
#     Open MPI ones.  Lines that need MPICH's dtpools (a path in their
#     third field) are left out: dtpools is built by MPICH's configure.
#   - mpi4py 3.1.4's test/ modules at MPI4PY_NPS ranks, one launch per
#     module: for MPICH, mpi4py 3.1.4 built from its sdist against the
#     wheel; for Open MPI, Debian's python3-mpi4py (also 3.1.4).
# A test passes when the launcher exits 0 (and, for MPICH's tests, prints
# " No Errors").  Prints one line per test with each configuration's result
# and wall time, then per suite and configuration "N of M passed, total
# wall S s" and the doorbell/default wall ratio, over all tests and over
# those both configurations pass (a timeout weighs on the first).  Exits 1
# when doorbell fails a test its MPI's default passes.  Not part of make
# test: the whole run takes hours on a 2-core machine.
#
# With EXT_NODES=2 (MPIS=btl only) every Open MPI launch spans the two
# network-namespace nodes of mpi-tests/netns (ext_lib.sh), and the
# reference is self,vader,tcp.
#
# Environment: MPIS ("mpich ompi"; also "btl"), SUITES ("pt2pt coll rma comm threads
# mpi4py"), MPI4PY_NPS ("1 2 4"), RUN_TIMEOUT (seconds per launch unless
# the testlist asks for more, 180), MPICH_VENV (<repo>/target/venv-mpich),
# MPI4PY_VENV (<repo>/target/venv-mpich-mpi4py, made here), OUT
# (<repo>/target/fi-ext), EXT_DIR (see ext_lib.sh), ONLY (a regular
# expression: only tests whose name matches).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MPIS=${MPIS:-mpich ompi}
SUITES=${SUITES:-pt2pt coll rma comm threads mpi4py}
MPI4PY_NPS=${MPI4PY_NPS:-1 2 4}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
MPICH_VENV=${MPICH_VENV:-$ROOT/target/venv-mpich}
OUT=${OUT:-$ROOT/target/fi-ext}
ONLY=${ONLY:-}
CONFIGS=
# shellcheck source=mpi-tests/ext_lib.sh
. "$ROOT/mpi-tests/ext_lib.sh"
mkdir -p "$OUT/logs" "$EXT_DIR"
PROV=$OUT/prov
if [[ ${EXT_NODES:-1} == 2 ]]; then
    [[ $MPIS == btl ]] || { echo "EXT_NODES=2 runs MPIS=btl only"; exit 1; }
    ext_init # the cluster, and MPIRUN across it
fi
NEW_FAILURES=()
SUMMARY=()

# ---- the provider ----
mkdir -p "$PROV"
(cd "$ROOT" && CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} nice -n 10 cargo build --release -p doorbell-fi) \
    >"$OUT/logs/build-provider.log" 2>&1 &&
    cp "$ROOT/target/release/libdoorbell_fi.so" "$PROV/libdoorbell-fi.so" ||
    { echo "provider build failed: $OUT/logs/build-provider.log"; exit 1; }

# ---- mpi4py built against the MPICH wheel ----
MPI4PY_VENV=${MPI4PY_VENV:-$ROOT/target/venv-mpich-mpi4py}
MPICH_PY=$MPI4PY_VENV/bin/python
mpich_mpi4py() {
    "$MPICH_PY" -c 'import mpi4py.MPI' 2>/dev/null && return 0
    [[ -x $MPICH_PY ]] || "$PY" -m venv "$MPI4PY_VENV" || return 1
    echo "mpi4py==3.1.4 --hash=sha256:17858f2ebc623220d0120d1fa8d428d033dde749c4bc35b33d81a66ad7f93480" \
        >"$OUT/mpi4py.req"
    # 3.1.4's setup.py predates setuptools 70 (new_compiler lost dry_run)
    "$MPI4PY_VENV/bin/pip" install --quiet 'setuptools<70' wheel &&
        PATH=$MPICH_VENV/bin:$PATH MPICC=$MPICH_VENV/bin/mpicc nice -n 10 \
            "$MPI4PY_VENV/bin/pip" install --quiet --no-build-isolation --no-binary :all: \
            --require-hashes -r "$OUT/mpi4py.req"
}

# launch CONFIG DIR LIMIT LOG ENV... -- PROGRAM ARGS: one run; prints
# "rc wall"
launch() {
    local c=$1 dir=$2 limit=$3 log=$4 envs=() xs=() e
    shift 4
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local np=$1
    shift
    local fi_env=(FI_PROVIDER_PATH="$PROV" FI_DOORBELL_IF_INCLUDE=lo)
    local t0 t1 rc
    t0=$(date +%s.%N)
    case $c in
    mpich-shm)
        (cd "$dir" && env "${envs[@]}" nice -n 10 timeout -k 10 "$limit" \
            "$MPICH_VENV/bin/mpiexec" -n "$np" "$@") </dev/null >"$log" 2>&1 ;;
    mpich-doorbell)
        (cd "$dir" && env "${envs[@]}" "${fi_env[@]}" MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=doorbell \
            MPIR_CVAR_NOLOCAL=1 nice -n 10 timeout -k 10 "$limit" \
            "$MPICH_VENV/bin/mpiexec" -n "$np" "$@") </dev/null >"$log" 2>&1 ;;
    ompi-*)
        for e in "${envs[@]}"; do xs+=(-x "$e"); done
        local sel=(--mca pml ob1 --mca btl self,vader)
        [[ $c == ompi-btl ]] && sel=(--mca pml ob1 --mca btl self,doorbell --mca btl_doorbell_if_include lo)
        if [[ $c == ompi-doorbell ]]; then
            sel=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include doorbell)
            for e in "${fi_env[@]}"; do xs+=(-x "$e"); done
        fi
        local run=(mpirun.openmpi --allow-run-as-root --oversubscribe)
        if [[ ${EXT_NODES:-1} == 2 ]]; then
            run=("${MPIRUN[@]}")
            [[ $c == ompi-vader ]] && sel=(--mca btl self,vader,tcp)
            [[ $c == ompi-btl ]] && sel=(--mca btl self,doorbell)
        fi
        (cd "$dir" && nice -n 10 timeout -k 10 "$limit" "${run[@]}" \
            "${sel[@]}" "${xs[@]}" -np "$np" "$@") </dev/null >"$log" 2>&1 ;;
    esac
    rc=$?
    t1=$(date +%s.%N)
    echo "$rc $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
}

declare -A PASSED TOTAL WALL WALL_OK
reset_counts() { local c; for c in $CONFIGS; do PASSED[$c]=0; TOTAL[$c]=0; WALL[$c]=0; WALL_OK[$c]=0; done; NOT_BUILT=0; BOTH_OK=0; }

# one_test SUITE NAME CHECK DIR LIMIT ENV... -- NP PROGRAM ARGS: the test
# under the current MPI's two configurations (CONFIGS: default first)
one_test() {
    local suite=$1 name=$2 want=$3 dir=$4 limit=$5 c log rc wall res ref= line all_ok=1
    local -A walls=()
    shift 5
    [[ -n $ONLY && ! $name =~ $ONLY ]] && return 0
    line=$(printf '%-62s' "$name")
    for c in $CONFIGS; do
        log=$OUT/logs/$(echo "$suite-$name-$c" | tr -c 'A-Za-z0-9_.-' '_').log
        # the directory per MPI build, named after the configuration's MPI
        read -r rc wall < <(launch "$c" "${dir//@MPI@/${c%%-*}}" "$limit" "$log" "$@")
        TOTAL[$c]=$((TOTAL[$c] + 1))
        WALL[$c]=$(awk -v a="${WALL[$c]}" -v b="$wall" 'BEGIN { printf "%.2f", a + b }')
        if [[ $rc == 0 ]] && { [[ -z $want ]] || grep -q -- "$want" "$log"; }; then
            res=ok
            PASSED[$c]=$((PASSED[$c] + 1))
        else
            res="FAIL($rc)"
        fi
        walls[$c]=$wall
        [[ $res == ok ]] || all_ok=0
        [[ -z $ref ]] && ref=$res
        [[ $ref == ok && $res != ok ]] && NEW_FAILURES+=("$suite $name under $c: $res, $log")
        line+=" $(printf '%-30s' "$c:$res ${wall}s")"
    done
    # the ratio that compares like with like: tests both configurations pass
    if ((all_ok)); then
        for c in $CONFIGS; do
            WALL_OK[$c]=$(awk -v a="${WALL_OK[$c]}" -v b="${walls[$c]}" 'BEGIN { printf "%.2f", a + b }')
        done
        BOTH_OK=$((BOTH_OK + 1))
    fi
    echo "$line"
}

summarize() { # SUITE
    local c def=
    for c in $CONFIGS; do
        [[ -z $def ]] && def=$c
        local ratio ratio_ok
        ratio=$(awk -v a="${WALL[$c]}" -v b="${WALL[$def]}" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / b }')
        ratio_ok=$(awk -v a="${WALL_OK[$c]}" -v b="${WALL_OK[$def]}" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / b }')
        SUMMARY+=("$(printf '%-8s %-16s %4s of %4s passed, total wall %8.1f s, %sx %s; on the %s both pass %.1f s, %sx' \
            "$1" "$c" "${PASSED[$c]}" "${TOTAL[$c]}" "${WALL[$c]}" "$ratio" "$def" "$BOTH_OK" "${WALL_OK[$c]}" "$ratio_ok")")
    done
    ((NOT_BUILT)) && SUMMARY+=("$(printf '%-8s %-16s %4s not built' "$1" "${CONFIGS// /,}" "$NOT_BUILT")")
    return 0
}

# ---- MPICH's test/mpi ----
# builds_of MPIS: the builds they run (btl runs Open MPI's)
builds_of() { echo "$1" | tr ' ' '\n' | sed 's/^btl$/ompi/' | sort -u | tr '\n' ' '; }
MPICH_DIRS=()
for s in $SUITES; do [[ $s != mpi4py ]] && MPICH_DIRS+=("$s"); done
if ((${#MPICH_DIRS[@]})); then
    T=$(ext_mpich_tests "${MPICH_DIRS[@]}" util include) || { echo "no MPICH tests"; exit 1; }
    for mpi in $(builds_of "$MPIS"); do
        cc=mpicc.openmpi
        [[ $mpi == mpich ]] && cc=$MPICH_VENV/bin/mpicc
        BIN=$OUT/bin-$mpi
        ext_mtest_build "$T" "$BIN" "$cc" || { echo "mtest build failed ($mpi)"; exit 1; }
        # threads/: mtest.c told to start the thread package, and mtest_thread
        if [[ ! -f $BIN/thr/mtest_thread.o ]]; then
            mkdir -p "$BIN/thr"
            "$cc" -I"$BIN" -I"$T/include" -DMTEST_USE_THREAD -c "$T/util/mtest.c" -o "$BIN/thr/mtest.o" &&
                "$cc" -I"$BIN" -I"$T/include" -c "$T/util/mtest_thread.c" -o "$BIN/thr/mtest_thread.o" ||
                { echo "mtest_thread build failed ($mpi)"; exit 1; }
        fi
        [[ -f $BIN/dtypes.o ]] || "$cc" -I"$BIN" -I"$T/include" -c "$T/util/dtypes.c" -o "$BIN/dtypes.o" ||
            { echo "dtypes build failed ($mpi)"; exit 1; }
    done
fi

# mpich_dir SUITE SUB: every testlist line of test/mpi/SUB (threads/ lists
# its subdirectories), built for each MPI, run under each configuration
mpich_dir() {
    local suite=$1 sub=$2 list name np rest mpi
    list=$T/$sub/testlist.in
    [[ -f $list ]] || list=$T/$sub/testlist
    declare -A SOURCES=() CPPFLAGS=() LDADD=()
    while read -r var val; do
        val=${val//\$(AM_CPPFLAGS)/}
        val=${val//\$(LDADD)/}
        case $var in
        *_SOURCES) SOURCES[${var%_SOURCES}]=$val ;;
        *_CPPFLAGS) CPPFLAGS[${var%_CPPFLAGS}]=$val ;;
        *_LDADD) LDADD[${var%_LDADD}]=$val ;;
        esac
    done < <(sed -n 's/^\([a-z0-9_]*_\(SOURCES\|CPPFLAGS\|LDADD\)\)[[:space:]]*=[[:space:]]*/\1 /p' "$T/$sub/Makefile.am")
    while read -r name np rest; do
        [[ -z $name || $name == \#* || $name == @* ]] && continue
        if [[ -z $np ]]; then # a subdirectory
            [[ -d $T/$sub/$name && $name =~ ^(pt2pt|comm|coll|rma)$ ]] && mpich_dir "$suite" "$sub/$name"
            continue
        fi
        [[ $rest == */* && ${rest%% *} == test/mpi/* ]] && continue # dtpools
        local args=() envs=() limit=$RUN_TIMEOUT kv util
        for kv in $rest; do
            [[ $kv == arg=* ]] && args+=("${kv#arg=}")
            [[ $kv == env=* ]] && envs+=("${kv#env=}")
            [[ $kv == timeLimit=* ]] && ((${kv#timeLimit=} > limit)) && limit=${kv#timeLimit=}
        done
        local tname="$sub/$name np=$np ${args[*]} ${envs[*]}"
        [[ -n $ONLY && ! $tname =~ $ONLY ]] && continue
        local built=1
        for mpi in $(builds_of "$MPIS"); do
            local BIN=$OUT/bin-$mpi cc=mpicc.openmpi exe
            [[ $mpi == mpich ]] && cc=$MPICH_VENV/bin/mpicc
            mkdir -p "$BIN/$sub"
            exe=$BIN/$sub/$name
            [[ -x $exe ]] && continue
            util=("$BIN/mtest.o" "$BIN/mtest_common.o" "$BIN/mtest_single.o" "$BIN/dtypes.o")
            [[ $sub == threads* ]] && util=("$BIN/thr/mtest.o" "$BIN/mtest_common.o" "$BIN/thr/mtest_thread.o" "$BIN/dtypes.o" -lpthread)
            local srcs=() s
            for s in ${SOURCES[$name]:-$name.c}; do [[ $s == *.c ]] && srcs+=("$T/$sub/$s"); done
            # shellcheck disable=SC2086 # flag lists from Makefile.am
            "$cc" -I"$BIN" -I"$T/include" ${CPPFLAGS[$name]:-} -o "$exe" "${srcs[@]}" "${util[@]}" \
                ${LDADD[$name]:-} -lm >"$OUT/logs/build-$mpi-$(echo "$sub/$name" | tr / _).log" 2>&1 || built=0
        done
        if ((!built)); then
            # MPI-4 functions Open MPI 4.1 lacks, mostly: counted apart
            echo "$(printf '%-62s' "$tname") not built: $OUT/logs/build-*-$(echo "$sub/$name" | tr / _).log"
            NOT_BUILT=$((NOT_BUILT + 1))
            continue
        fi
        one_test "$suite" "$tname" ' No Errors' "$OUT/bin-@MPI@/$sub" "$limit" \
            "${envs[@]}" -- "$np" "./$name" "${args[@]}"
    done <"$list"
}

for mpi in $MPIS; do
    case $mpi in
    mpich) CONFIGS="mpich-shm mpich-doorbell" ;;
    ompi) CONFIGS="ompi-vader ompi-doorbell" ;;
    btl) CONFIGS="ompi-vader ompi-btl" ;;
    *) echo "unknown MPI $mpi"; exit 1 ;;
    esac
    for s in "${MPICH_DIRS[@]}"; do
        reset_counts
        MPIS_SAVED=$MPIS
        MPIS=$mpi
        mpich_dir "$s" "$s"
        MPIS=$MPIS_SAVED
        summarize "$s"
    done
    if [[ " $SUITES " == *" mpi4py "* ]]; then
        SRC=$(ext_mpi4py_tests) || { echo "no mpi4py 3.1.4 tests"; exit 1; }
        py=$PY
        if [[ $mpi == mpich ]]; then
            mpich_mpi4py >"$OUT/logs/build-mpi4py.log" 2>&1 ||
                { echo "mpi4py build against the wheel failed: $OUT/logs/build-mpi4py.log"; exit 1; }
            py=$MPICH_PY
        fi
        reset_counts
        for np in $MPI4PY_NPS; do
            for f in "$SRC"/test_*.py; do
                m=$(basename "$f" .py)
                one_test mpi4py "np=$np $m" '' "$SRC" "$RUN_TIMEOUT" -- "$np" "$py" runtests.py --no-builddir -q -i "^$m\$"
            done
        done
        summarize mpi4py
    fi
done

echo
printf '%s\n' "${SUMMARY[@]}"
if ((${#NEW_FAILURES[@]})); then
    echo "doorbell failures its MPI's default does not have:"
    printf '  %s\n' "${NEW_FAILURES[@]}"
    exit 1
fi
echo "no doorbell failure that its MPI's default does not have"
