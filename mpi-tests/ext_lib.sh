# mpi-tests/ext_lib.sh -- sourced by the scripts that run other projects'
# MPI tests (dynproc_ext.sh, rma_ext.sh): where their sources come from,
# how MPICH's tests are built against Open MPI, and one test run under
# each configuration, side by side.
#
# The caller sets ROOT (the repository), OUT (its output directory) and
# CONFIGS (space-separated configuration names, see config_args), then
# calls ext_init.  With EXT_NODES=2 every mpirun spans the two-namespace
# cluster of mpi-tests/netns (brought up by ext_init, taken down at exit):
# ranks are dealt to nodeA and nodeB in turn, so any job of 2 ranks or
# more has ranks on both, and from 3 on also two on one node.

EXT_DIR=${EXT_DIR:-$ROOT/target/ext}
PY=/usr/bin/python3

ext_init() {
    mkdir -p "$OUT/logs" "$EXT_DIR"
    if [[ ${EXT_NODES:-1} == 2 ]]; then
        local cluster=$ROOT/mpi-tests/netns/cluster.sh subnet
        "$cluster" up >"$OUT/logs/cluster.log" 2>&1 || { echo "cluster.sh up failed: $OUT/logs/cluster.log"; exit 1; }
        # shellcheck disable=SC2064 # the path is fixed now
        trap "'$cluster' down >/dev/null 2>&1" EXIT
        subnet=$("$cluster" subnet)
        MPIRUN=("$cluster" exec nodeA mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1
            --mca plm_rsh_agent "$ROOT/mpi-tests/netns/rsh-agent.sh" --mca oob_tcp_if_include "$subnet"
            --mca btl_tcp_if_include "$subnet" --mca btl_doorbell_if_include "$subnet"
            --host nodeA:64,nodeB:64 --map-by node --bind-to none)
    else
        MPIRUN=(mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1
            --mca btl_tcp_if_include lo --mca btl_doorbell_if_include lo)
    fi
    declare -gA PASSED TOTAL
    local c
    for c in $CONFIGS; do PASSED[$c]=0; TOTAL[$c]=0; done
}

# config_args NAME: mpirun's arguments for a configuration; NAME is a BTL
# list, with "+tcp" appended for doorbell's TCP path between local ranks.
config_args() {
    local btl=${1%+tcp}
    echo --mca btl "$btl"
    [[ $1 == *+tcp ]] && echo --mca btl_doorbell_force_tcp 1
}

# mpi4py 3.1.4's test/ directory, the version Debian ships as
# python3-mpi4py: its sdist from PyPI, checked against its hash.
ext_mpi4py_tests() {
    local dir=$EXT_DIR/mpi4py-3.1.4 venv=$EXT_DIR/venv
    [[ -f $dir/test/runtests.py ]] && { echo "$dir/test"; return 0; }
    [[ -x $venv/bin/pip ]] || "$PY" -m venv "$venv" >&2 || return 1
    echo "mpi4py==3.1.4 --hash=sha256:17858f2ebc623220d0120d1fa8d428d033dde749c4bc35b33d81a66ad7f93480" \
        >"$EXT_DIR/mpi4py.req"
    "$venv/bin/pip" download --quiet --no-deps --no-binary :all: --require-hashes \
        -r "$EXT_DIR/mpi4py.req" -d "$EXT_DIR" >&2 || return 1
    tar -xzf "$EXT_DIR/mpi4py-3.1.4.tar.gz" -C "$EXT_DIR" mpi4py-3.1.4/test || return 1
    echo "$dir/test"
}

# MPICH's test/mpi (the directories named) from Debian's mpich source
# package, fetched with apt from a private deb-src list: the system's apt
# configuration is left alone, and apt checks the files against the
# signed index.
ext_mpich_tests() {
    local ver=4.0.2 apt=$EXT_DIR/apt d
    local dir=$EXT_DIR/mpich-$ver/test/mpi
    local missing=()
    for d in "$@"; do [[ -d $dir/$d ]] || missing+=("mpich-$ver/test/mpi/$d/*"); done
    ((${#missing[@]})) || { echo "$dir"; return 0; }
    if [[ ! -f $EXT_DIR/mpich_$ver.orig.tar.xz ]]; then
        mkdir -p "$apt/lists/partial"
        echo 'deb-src http://deb.debian.org/debian bookworm main' >"$apt/sources.list"
        local opts=(-qq -o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache")
        apt-get "${opts[@]}" update >&2 &&
            (cd "$EXT_DIR" && apt-get "${opts[@]}" source --download-only "mpich=$ver-3") >&2 ||
            return 1
    fi
    tar -xJf "$EXT_DIR/mpich_$ver.orig.tar.xz" -C "$EXT_DIR" --wildcards "${missing[@]}" || return 1
    echo "$dir"
}

# ext_mtest_build T BIN [CC]: MPICH's test utilities (T is test/mpi) built
# into BIN with CC (mpicc.openmpi), with a stand-in for the header MPICH's
# configure makes.
ext_mtest_build() {
    local T=$1 BIN=$2 CC=${3:-mpicc.openmpi} f
    mkdir -p "$BIN"
    [[ -f $BIN/mtest_single.o ]] && return 0
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
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_VA_COPY 1
#define USE_STRICT_MPI 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
EOF
    : >"$BIN/mtest_mpix.h"
    for f in mtest mtest_common mtest_single; do
        "$CC" -I"$BIN" -I"$T/include" -c "$T/util/$f.c" -o "$BIN/$f.o" || return 1
    done
}

# ext_run NAME CHECK DIR TIMEOUT CMD...: the command under each
# configuration, from DIR; it passes when mpirun exits 0 and its output has
# a line matching CHECK (a grep pattern).  Prints one line per test with
# each configuration's result; RESULT[config] holds ok or FAIL(rc).
ext_run() {
    local name=$1 want=$2 dir=$3 limit=$4 line c log rc
    shift 4
    declare -gA RESULT
    line=$(printf '%-58s' "$name")
    for c in $CONFIGS; do
        log=$OUT/logs/$(echo "$name-$c" | tr '/ ,+=' '_____').log
        # shellcheck disable=SC2046 # config_args prints separate words
        (cd "$dir" && timeout "$limit" "${MPIRUN[@]}" $(config_args "$c") "$@") </dev/null >"$log" 2>&1
        rc=$?
        TOTAL[$c]=$((TOTAL[$c] + 1))
        if [[ $rc == 0 ]] && grep -q -- "$want" "$log"; then
            PASSED[$c]=$((PASSED[$c] + 1))
            RESULT[$c]=ok
        else
            RESULT[$c]="FAIL($rc)"
        fi
        line+=" $(printf '%-22s' "$c:${RESULT[$c]}")"
    done
    echo "$line"
}
