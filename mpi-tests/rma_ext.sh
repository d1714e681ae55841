#!/usr/bin/env bash
# mpi-tests/rma_ext.sh -- other projects' one-sided tests, with Open MPI's
# default osc components (no osc flag: Debian's openmpi-mca-params.conf
# leaves osc sm and osc rdma), under each configuration of CONFIGS side by
# side:
#   - IMB-RMA, every benchmark, ROUNDS alternating rounds at IMB_NP ranks;
#     prints each configuration's median wall time and its ratio to the
#     first configuration's (the reference);
#   - mpi4py 3.1.4's test_rma.py, test_rma_nb.py, test_win.py and the
#     window cases of test_exceptions.py, at 1, 2 and 4 ranks, one mpirun
#     per module; each case's outcome is read from every rank's output
#     (ok on all ranks, skipped, or failed);
#   - MPICH's test/mpi/rma, every line of its testlist (built with
#     mpicc.openmpi as its Makefile.am says), one mpirun each.
# Prints per suite and configuration "N of M passed", and exits 1 when a
# configuration fails (or skips) a test the reference passes.  Not part of
# make test: it takes 30-60 minutes on a 2-core machine.
#
# Sources: mpi4py's sdist from PyPI and MPICH 4.0.2's tests from Debian's
# mpich source package (see ext_lib.sh); IMB from IMB_SRC (a tree of
# intel/mpi-benchmarks, built here) or IMB_RMA (a built IMB-RMA), else
# cloned from GitHub.
# Environment: CONFIGS ("self,vader self,doorbell self,doorbell+tcp"; see
# config_args in ext_lib.sh), ROUNDS (5), IMB_NP (2), RUN_TIMEOUT (seconds
# per mpirun, 300), OUT (<repo>/target/rma-ext), ONLY (imb, mpi4py or
# mpich: one of the three), MPICH_SKIP (0: the testlist lines to skip,
# to go on from a run stopped for time), EXT_NODES (2: every job across the two network
# namespaces of mpi-tests/netns, as root; give CONFIGS then, since vader
# and tcp have no one-sided path across nodes with the default osc).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CONFIGS=${CONFIGS:-"self,vader self,doorbell self,doorbell+tcp"}
ROUNDS=${ROUNDS:-5}
IMB_NP=${IMB_NP:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
OUT=${OUT:-$ROOT/target/rma-ext}
ONLY=${ONLY:-}
MPICH_SKIP=${MPICH_SKIP:-0}
# shellcheck source=mpi-tests/ext_lib.sh
. "$HERE/ext_lib.sh"
ext_init
read -r REF _ <<<"$CONFIGS"
NEW_FAILURES=()
SUMMARY=()

# compare NAME: after ext_run, a failure the reference does not have
compare() {
    local c
    [[ ${RESULT[$REF]} == ok ]] || return 0
    for c in $CONFIGS; do
        [[ ${RESULT[$c]} == ok ]] || NEW_FAILURES+=("$1 under $c: ${RESULT[$c]}")
    done
}

summarize() { # SUITE: record and reset the pass counts
    local c
    for c in $CONFIGS; do
        SUMMARY+=("$(printf '%-8s %-24s %s of %s passed' "$1" "$c" "${PASSED[$c]}" "${TOTAL[$c]}")")
        PASSED[$c]=0
        TOTAL[$c]=0
    done
}

if [[ -z $ONLY || $ONLY == imb ]]; then
    IMB=${IMB_RMA:-}
    if [[ -z $IMB ]]; then
        src=${IMB_SRC:-$EXT_DIR/mpi-benchmarks}
        [[ -n ${IMB_SRC:-} || -d $src/src_cpp ]] ||
            git clone -q --depth 1 https://github.com/intel/mpi-benchmarks "$src" ||
            { echo "no IMB sources (set IMB_SRC or IMB_RMA)"; exit 1; }
        IMB=$EXT_DIR/IMB-RMA
        if [[ ! -x $IMB ]]; then
            rm -rf "$EXT_DIR/imb-build"
            # optimised as a user would build it, and without -Werror, which
            # Open MPI's C++ header trips with gcc 12
            cp -r "$src" "$EXT_DIR/imb-build" &&
                sed -i 's/ -O0 / -O2 /; s/ -Werror$//' "$EXT_DIR/imb-build/src_cpp/Makefile" &&
                make -C "$EXT_DIR/imb-build" CC=mpicc.openmpi CXX=mpicxx.openmpi IMB-RMA \
                    >"$OUT/logs/build-imb.log" 2>&1 &&
                cp "$EXT_DIR/imb-build/IMB-RMA" "$IMB" ||
                { echo "IMB-RMA build failed: $OUT/logs/build-imb.log"; exit 1; }
        fi
    fi
    declare -A WALLS
    for ((r = 1; r <= ROUNDS; r++)); do
        # alternate the order so that drifting load favours no one
        order=$CONFIGS
        ((r % 2 == 0)) && order=$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' ')
        for c in $order; do
            log=$OUT/logs/imb-rma-$r-$(echo "$c" | tr ',+' '__').log
            t0=$(date +%s.%N)
            # shellcheck disable=SC2046 # config_args prints separate words
            timeout 900 "${MPIRUN[@]}" $(config_args "$c") -np "$IMB_NP" "$IMB" </dev/null >"$log" 2>&1
            rc=$?
            t1=$(date +%s.%N)
            wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
            TOTAL[$c]=$((TOTAL[$c] + 1))
            if [[ $rc == 0 ]] && grep -q 'All processes entering MPI_Finalize' "$log"; then
                PASSED[$c]=$((PASSED[$c] + 1))
                WALLS[$c]+="$wall "
            else
                NEW_FAILURES+=("IMB-RMA round $r under $c: rc $rc, $log")
            fi
            echo "IMB-RMA round $r $c: rc $rc, $wall s"
        done
    done
    median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
    ref_median=$(echo "${WALLS[$REF]:-}" | median)
    for c in $CONFIGS; do
        m=$(echo "${WALLS[$c]:-}" | median)
        ratio=-
        [[ -n $m && -n $ref_median ]] && ratio=$(awk -v a="$m" -v b="$ref_median" 'BEGIN { printf "%.2f", a / b }')
        SUMMARY+=("$(printf 'IMB-RMA  %-24s median wall %.1f s over %s rounds, %sx %s' "$c" "${m:-0}" \
            "$(echo "${WALLS[$c]:-}" | wc -w)" "$ratio" "$REF")")
    done
    summarize IMB-RMA
fi

if [[ -z $ONLY || $ONLY == mpi4py ]]; then
    SRC=$(ext_mpi4py_tests) || { echo "no mpi4py 3.1.4 tests"; exit 1; }
    declare -A CASES
    mkdir -p "$OUT/mpi4py"
    for np in 1 2 4; do
        for m in test_rma test_rma_nb test_win test_exceptions; do
            sel=()
            [[ $m == test_exceptions ]] && sel=(TestExcWinNull TestExcWin)
            for c in $CONFIGS; do
                dir=$OUT/mpi4py/np$np-$m-$(echo "$c" | tr ',+' '__')
                rm -rf "$dir"
                # shellcheck disable=SC2046 # config_args prints separate words
                (cd "$SRC" && timeout "$RUN_TIMEOUT" "${MPIRUN[@]}" $(config_args "$c") -np "$np" \
                    --output-filename "$dir" "$PY" runtests.py --no-builddir -v -i "^$m\$" "${sel[@]}") \
                    </dev/null >"$dir.log" 2>&1
                rc=$?
                # one line per case: "<id> ok|skipped|failed", ok only when
                # every rank says ok; a case no rank reports is missing
                while read -r id outcome; do
                    CASES["np$np $id"]+="$c=$outcome "
                done < <("$PY" - "$dir" "$np" "$rc" <<'EOF'
import glob, re, sys
d, np, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_rank = []
for f in sorted(glob.glob(d + '/1/rank.*/stderr')):
    text = open(f, errors='replace').read()
    res = {}
    for m in re.finditer(r'^(\w+) \(([\w.]+)\)(.*?)\.\.\. ?(ok|skipped|FAIL|ERROR|expected failure|unexpected success)',
                         text, re.M | re.S):
        out = {'ok': 'ok', 'expected failure': 'ok', 'skipped': 'skipped'}.get(m.group(4), 'failed')
        # Python 3.11 prints the whole id in the parentheses, older ones the class
        name, where = m.group(1), m.group(2)
        res[where if where.endswith('.' + name) else where + '.' + name] = out
    per_rank.append(res)
ids = sorted(set().union(*per_rank)) if per_rank else []
for i in ids:
    outs = [r.get(i, 'missing') for r in per_rank]
    if len(per_rank) < np or 'missing' in outs:
        o = 'failed'
    elif all(o == 'skipped' for o in outs):
        o = 'skipped'
    elif all(o in ('ok', 'skipped') for o in outs) and rc == 0:
        o = 'ok' if 'ok' in outs else 'skipped'
    else:
        o = 'failed'
    print(i, o)
if not ids:
    print('mpirun-without-results failed')
EOF
                )
            done
        done
    done
    declare -A SKIPPED
    for key in $(printf '%s\n' "${!CASES[@]}" | sort -V | tr ' ' '@'); do
        key=${key//@/ }
        line=$(printf '%-62s' "mpi4py $key")
        declare -A o=()
        for kv in ${CASES[$key]}; do o[${kv%=*}]=${kv##*=}; done
        for c in $CONFIGS; do
            r=${o[$c]:-failed}
            TOTAL[$c]=$((TOTAL[$c] + 1))
            case $r in
            ok) PASSED[$c]=$((PASSED[$c] + 1)) ;;
            skipped) SKIPPED[$c]=$((${SKIPPED[$c]:-0} + 1)) ;;
            esac
            [[ ${o[$REF]:-failed} == ok && $r != ok ]] && NEW_FAILURES+=("mpi4py $key under $c: $r")
            line+=" $(printf '%-22s' "$c:$r")"
        done
        echo "$line"
    done
    for c in $CONFIGS; do
        SUMMARY+=("$(printf '%-8s %-24s %s skipped' mpi4py "$c" "${SKIPPED[$c]:-0}")")
    done
    summarize mpi4py
fi

if [[ -z $ONLY || $ONLY == mpich ]]; then
    T=$(ext_mpich_tests rma util include) || { echo "no MPICH tests"; exit 1; }
    BIN=$OUT/mpich-bin
    ext_mtest_build "$T" "$BIN" || exit 1
    # per program: its sources, preprocessor flags and libraries, as
    # rma/Makefile.am gives them (by default the one .c of its name)
    declare -A SOURCES CPPFLAGS LDADD
    while read -r var val; do
        val=${val//\$(AM_CPPFLAGS)/}
        val=${val//\$(LDADD)/}
        case $var in
        *_SOURCES) SOURCES[${var%_SOURCES}]=$val ;;
        *_CPPFLAGS) CPPFLAGS[${var%_CPPFLAGS}]=$val ;;
        *_LDADD) LDADD[${var%_LDADD}]=$val ;;
        esac
    done < <(sed -n 's/^\([a-z0-9_]*_\(SOURCES\|CPPFLAGS\|LDADD\)\)[[:space:]]*=[[:space:]]*/\1 /p' "$T/rma/Makefile.am")
    while read -r name np rest; do
        # @largetest@ lines are off unless MPICH's configure enables them
        [[ -z $name || $name == \#* || $name == @* ]] && continue
        ((MPICH_SKIP > 0)) && { MPICH_SKIP=$((MPICH_SKIP - 1)); continue; }
        if [[ ! -x $BIN/$name ]]; then
            srcs=()
            for s in ${SOURCES[$name]:-$name.c}; do [[ $s == *.c ]] && srcs+=("$T/rma/$s"); done
            # shellcheck disable=SC2086 # flag lists from Makefile.am
            mpicc.openmpi -I"$BIN" -I"$T/include" ${CPPFLAGS[$name]:-} -o "$BIN/$name" "${srcs[@]}" \
                "$BIN"/mtest*.o ${LDADD[$name]:-} >"$OUT/logs/build-$name.log" 2>&1 ||
                { echo "build $name failed: $OUT/logs/build-$name.log"; exit 1; }
        fi
        args=()
        limit=$RUN_TIMEOUT
        for kv in $rest; do
            [[ $kv == arg=* ]] && args+=("${kv#arg=}")
            [[ $kv == timeLimit=* ]] && ((${kv#timeLimit=} > limit)) && limit=${kv#timeLimit=}
        done
        ext_run "mpich np=$np $name ${args[*]}" ' No Errors' "$BIN" "$limit" -np "$np" "./$name" "${args[@]}"
        compare "mpich np=$np $name ${args[*]}"
    done <"$T/rma/testlist.in"
    summarize mpich
fi

printf '%s\n' "${SUMMARY[@]}"
if ((${#NEW_FAILURES[@]})); then
    echo "failures the reference ($REF) does not have:"
    printf '  %s\n' "${NEW_FAILURES[@]}"
    exit 1
fi
echo "no failure that $REF does not have"
