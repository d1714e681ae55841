#!/usr/bin/env bash
# run.sh -- the MPI tests in a two-node layout on one machine.
#
# Builds the nodeA/nodeB namespace cluster (cluster.sh), runs mpirun inside
# nodeA with rsh-agent.sh as the launcher, and checks:
#   1. locality: Open MPI sees two nodes (2+2 and 3+3 ranks);
#   2. the whole mpi-tests suite (../run.sh) at 4 (2+2) and 6 (3+3) ranks (its
#      2-rank programs with one rank per node), with self,vader,tcp as the
#      reference and then self,doorbell, which must pass every test the
#      reference passes (and the suite's doorbell-only checks);
#   3. anysource_wake: MPI_ANY_SOURCE from a same-node and an other-node sender
#      with idle gaps; with doorbell the component's counters must show shm to
#      the local peer, tcp to the remote one, and wake-ups on both paths;
#   4. a wrong btl_doorbell_if_include fails fast with a clear message;
#   5. the libfabric provider (libdoorbell-fi.so) under Open MPI's mtl ofi
#      and under the MPICH wheel's hydra, 2+2 and 1+1 ranks.
# One PASS/FAIL line per test, final line "N passed, M failed", exit 1 on any
# failure.  The counts are doorbell's own results only: the self,vader,tcp
# reference runs print as REF/REF! lines (the baseline the doorbell runs are
# compared with), and each doorbell suite run adds its own PASS/FAIL counts.
# Namespaces are always removed on exit.
#
# Env: NETNS_SKIP_SUITE=1 skips part 2 (for quick iteration only; it then
#      counts as a FAIL so a partial run never looks green).
#      SUITE_TIMEOUT (s, default 420) bounds each suite run, RUN_TIMEOUT (s,
#      default 120) each mpirun inside it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLUSTER="$HERE/cluster.sh"
AGENT="$HERE/rsh-agent.sh"
SUITE="$ROOT/mpi-tests/run.sh"
SUITE_TIMEOUT=${SUITE_TIMEOUT:-420}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}   # the suite's per-mpirun bound
MPIRUN=mpirun.openmpi
MPICC=mpicc.openmpi

passed=0
failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
# A reference (self,vader,tcp) result: shown, never counted.
ref() { echo "REF  $*"; }
finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

BUILD=$(mktemp -d "${TMPDIR:-/tmp}/doorbell-netns.XXXXXX")
LOG="$BUILD/log"
cleanup() {
  local out
  out=$("$CLUSTER" down 2>&1) || echo "run.sh: WARNING: cluster.sh down failed: $out" >&2
  rm -rf "$BUILD"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- preconditions: missing tools are failures, never skips ----
for tool in ip nsenter unshare setsid python3 timeout cargo "$MPIRUN" "$MPICC" ompi_info; do
  if ! command -v "$tool" >/dev/null; then
    fail "netns/preconditions: '$tool' not installed"
    finish; exit 1
  fi
done

# ---- the cluster ----
if ! out=$("$CLUSTER" up 2>&1); then
  fail "netns/cluster-up: could not create the namespace cluster: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
  finish; exit 1
fi
echo "ok   netns/cluster-up ($("$CLUSTER" subnet)) (setup, not counted)"
SUBNET=$("$CLUSTER" subnet)

# Options every mpirun in the layout needs: launch through the namespace
# agent, keep out-of-band traffic on the test subnet, and force ob1.
LAYOUT_OPTS="--allow-run-as-root --oversubscribe --mca plm_rsh_agent $AGENT --mca oob_tcp_if_include $SUBNET --mca pml ob1"
REF_BTL="--mca btl self,vader,tcp --mca btl_tcp_if_include $SUBNET"
DB_BTL="--mca btl self,doorbell --mca btl_doorbell_if_include $SUBNET"

hosts_for() { echo "nodeA:$(($1 / 2)),nodeB:$(($1 / 2))"; }

# run_mpi SECONDS NP MCA-OPTS... -- PROGRAM ARGS...: mpirun inside nodeA, output in $LOG.
run_mpi() {
  local secs=$1 np=$2; shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  # shellcheck disable=SC2086  # LAYOUT_OPTS is a word list on purpose
  "$CLUSTER" exec nodeA timeout -k 5 "$secs" "$MPIRUN" $LAYOUT_OPTS "${opts[@]}" \
    --host "$(hosts_for "$np")" -np "$np" "$@" >"$LOG" 2>&1 </dev/null
}

show_log() { sed 's/^/    | /' "$LOG" | tail -n "${1:-20}"; }

# ---- build the programs of this directory ----
for prog in locality anysource_wake; do
  if ! "$MPICC" -O2 -Wall -Wextra -Werror -o "$BUILD/$prog" "$HERE/$prog.c" >"$LOG" 2>&1; then
    fail "netns/build-$prog"; show_log
    finish; exit 1
  fi
done

# (no `ompi_info | grep -q`: with pipefail, grep's early exit can fail the pipe)
doorbell_installed() { [[ $(ompi_info 2>/dev/null) == *"MCA btl: doorbell"* ]]; }

# ---- 1. locality ----
# Ranks are placed by slot: the first np/2 on nodeA, the rest on nodeB.  Every
# pair must be "same node" exactly when both halves agree, by hostname and by
# MPI_COMM_TYPE_SHARED (i.e. Open MPI's own locality flags).  Run over
# self,doorbell, so it counts as doorbell's (a job that starts, wires up both
# nodes and agrees on locality).
check_locality() {
  local np=$1 half=$(( $1 / 2 )) bad=0 i j sh sc want
  grep -q '^PAIR 0 1 same_host=1 shared=1$' "$LOG" || bad=1
  if [[ $np -eq 4 ]]; then grep -q '^PAIR 0 2 same_host=0 shared=0$' "$LOG" || bad=1; fi
  for ((i = 0; i < np; i++)); do
    for ((j = i + 1; j < np; j++)); do
      want=$(( (i < half) == (j < half) ))
      sh=$(awk -v i=$i -v j=$j '$1=="PAIR" && $2==i && $3==j {sub("same_host=","",$4); print $4}' "$LOG")
      sc=$(awk -v i=$i -v j=$j '$1=="PAIR" && $2==i && $3==j {sub("shared=","",$5); print $5}' "$LOG")
      if [[ $sh != "$want" || $sc != "$want" ]]; then
        echo "    pair $i,$j: same_host=${sh:-?} shared=${sc:-?}, expected $want"; bad=1
      fi
    done
  done
  return $bad
}
for np in 4 6; do
  if ! doorbell_installed; then
    fail "netns/locality np=$np self,doorbell: btl doorbell component not installed"
    continue
  fi
  # shellcheck disable=SC2086
  if run_mpi 60 "$np" $DB_BTL -- "$BUILD/locality" && check_locality "$np"; then
    pass "netns/locality np=$np self,doorbell ($(hosts_for "$np"): 0,1 same node; nodeA/nodeB distinct)"
  else
    fail "netns/locality np=$np self,doorbell"; show_log
  fi
done

# ---- 1b. a job with peers on both paths ----
# Each rank has a peer on its node (the shm module) and peers on the other
# node (the TCP module): every pair swaps messages of every protocol size,
# checked, and large ones between same-node ranks still go in one copy
# (GET is the shm module's alone; the TCP module keeps btl tcp's limits).
if "$MPICC" -O2 -Wall -Wextra -o "$BUILD/btl_probe" "$HERE/../../ompi/tests/btl_probe.c" >"$LOG" 2>&1 &&
   run_mpi 120 4 $DB_BTL --mca btl_doorbell_verbose 1 -- "$BUILD/btl_probe" exchange; then
  reads=$(grep -Eo 'rank [0-9]+ counters:.*single_copy_reads=[0-9]+' "$LOG" | sed -E 's/rank ([0-9]+) .*single_copy_reads=/\1 /' | sort -n)
  zero=$(awk '$2 == 0 {print $1}' <<<"$reads" | tr '\n' ' ')
  if [[ $(wc -l <<<"$reads") -eq 4 && -z $zero ]]; then
    pass "netns/mixed-paths np=4 self,doorbell: checked exchange; same-node large messages single-copy on every rank ($(awk '{printf "%s%s", s, $2; s="/"}' <<<"$reads") reads)"
  else
    fail "netns/mixed-paths np=4 self,doorbell: no single-copy reads on rank(s) ${zero:-?}"; show_log
  fi
else
  fail "netns/mixed-paths np=4 self,doorbell: exchange failed"; show_log
fi

# ---- 2. the suite, reference then doorbell ----
# Three runs per BTL, each test of the suite once:
#   np4:  the multi-rank programs at 4 ranks, nodeA:2,nodeB:2
#   np6:  the multi-rank programs at 6 ranks, nodeA:3,nodeB:3
#   np2x: the suite's 2-rank programs with one rank per node (with 2+2 hosts
#         both ranks would land on nodeA and never cross the link)
# The suite's own env interface selects them (TESTS, NPS, MPIRUN_HOSTS,
# MPIRUN_EXTRA); it builds into a directory of ours (OUT) so concurrent runs
# elsewhere in target/ are not disturbed.
TWO_RANK_TESTS="rust netpipe mpi4py tcp_protocols"
SUITE_RUNS=(np4 np6 np2x)
declare -A RUN_NPS=([np4]=4 [np6]=6 [np2x]=2)
declare -A RUN_HOSTS=([np4]="nodeA:2,nodeB:2" [np6]="nodeA:3,nodeB:3" [np2x]="nodeA:1,nodeB:1")
declare -A RUN_TESTS=()
# The suite repeats doorbell runs with btl_doorbell_force_tcp=1 (TCP between
# same-node ranks too); across nodes it is TCP anyway, so np2x skips that.
declare -A RUN_FORCE_TCP=([np4]=1 [np6]=1 [np2x]=0)

# run_suite NAME BTL-LIST: output in $BUILD/suite-NAME-<btl>.out, sets SUITE_RC
SUITE_RC=0
run_suite() {
  local run=$1 btl=$2 out="$BUILD/suite-$1-$2.out"
  SUITE_RC=0
  # The suite runs whole inside nodeA, so its own mpiruns start there too.
  # CARGO_NET_OFFLINE: the namespaces have no route out; sources were
  # fetched beforehand.
  "$CLUSTER" exec nodeA timeout -k 10 "$SUITE_TIMEOUT" env \
    BTL="$btl" NPS="${RUN_NPS[$run]}" MPIRUN_HOSTS="${RUN_HOSTS[$run]}" TESTS="${RUN_TESTS[$run]}" \
    MPIRUN_EXTRA="--mca plm_rsh_agent $AGENT --mca oob_tcp_if_include $SUBNET --mca btl_tcp_if_include $SUBNET --mca btl_doorbell_if_include $SUBNET" \
    OUT="$BUILD/suite-$run-$btl" RUN_TIMEOUT="$RUN_TIMEOUT" CARGO_NET_OFFLINE=true \
    FORCE_TCP_PASS="${RUN_FORCE_TCP[$run]}" \
    bash "$SUITE" >"$out" 2>&1 </dev/null || SUITE_RC=$?
}

# suite_counts FILE: the suite's own final "N passed, M failed" as "N M"
# ("" if it never got there).
suite_counts() {
  grep -aoE '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -n 1 | awk '{print $1, $3}'
}

# suite_results FILE PASS|FAIL BTL: labels the suite reported, with "[BTL]"
# replaced by "[*]" so the reference's and doorbell's labels compare.  The
# suite prints printf 'PASS  %-58s %s': the label is columns 7..64 unless
# it is longer than 58 characters.
suite_results() {
  awk -v w="$2" -v tag="[$3]" '
    substr($0, 1, 6) == w "  " {
      rest = substr($0, 7)
      if (length(rest) <= 58 || substr(rest, 59, 1) == " ") label = substr(rest, 1, 58)
      else { label = rest; sub(/ \([^()]*\)$/, "", label) }
      sub(/ +$/, "", label)
      i = index(label, tag)
      if (i) label = substr(label, 1, i - 1) "[*]" substr(label, i + length(tag))
      print label
    }' "$1" | sort -u
}

# No doorbell shared memory may stay on nodeB either (the suite itself can
# only look at nodeA's /dev/shm).
check_nodeB_shm() {
  local left
  left=$("$CLUSTER" exec nodeB sh -c 'ls /dev/shm | grep "^doorbell" || true')
  if [[ -z $left ]]; then
    pass "netns/suite $1: no /dev/shm/doorbell* left on nodeB"
  else
    fail "netns/suite $1: left in nodeB's /dev/shm: $(echo "$left" | tr '\n' ' ')"
  fi
}

# The suite's default test list, read from its source (TESTS=${TESTS:-...}).
# shellcheck disable=SC2016  # literal ${...}
suite_default_tests() { sed -n 's/^TESTS=\${TESTS:-\(.*\)}$/\1/p' "$SUITE"; }

SUITE_OK=0
if [[ ${NETNS_SKIP_SUITE:-0} == 1 ]]; then
  fail "netns/suite: skipped by NETNS_SKIP_SUITE=1 (not a full run)"
elif [[ ! -f $SUITE ]]; then
  fail "netns/suite: $SUITE not found"
elif ! all_tests=$(suite_default_tests) || [[ -z $all_tests ]]; then
  fail "netns/suite: cannot read the default TESTS list from $SUITE"
else
  SUITE_OK=1
  multi=""
  for t in $all_tests; do [[ " $TWO_RANK_TESTS " == *" $t "* ]] || multi+="$t "; done
  # rma_win also at one rank per node: osc rdma's module choice differs
  # there (each rank's only same-node rank is itself)
  RUN_TESTS=([np4]="$multi" [np6]="$multi" [np2x]="$TWO_RANK_TESTS rma_win")
  # Rust crates for the suite's rsmpi programs: fetched here, where the
  # network is (idempotent, a no-op when cached).
  if [[ -f $ROOT/mpi-tests/rust/Cargo.toml ]] \
     && ! timeout 600 cargo fetch --locked --manifest-path "$ROOT/mpi-tests/rust/Cargo.toml" >"$LOG" 2>&1; then
    fail "netns/suite: cargo fetch for mpi-tests/rust failed"; show_log 5
  fi
fi

if [[ $SUITE_OK == 1 ]]; then
  for run in "${SUITE_RUNS[@]}"; do
    run_suite "$run" self,vader,tcp
    out="$BUILD/suite-$run-self,vader,tcp.out"
    npass=$(suite_results "$out" PASS self,vader,tcp | sed '/^$/d' | wc -l)
    nfail=$(suite_results "$out" FAIL self,vader,tcp | sed '/^$/d' | wc -l)
    what="netns/suite $run (${RUN_HOSTS[$run]}) reference self,vader,tcp"
    # The baseline for the doorbell run below; not doorbell's result.  A
    # failed reference shrinks what doorbell is compared with, so it is shown
    # in full (and a reference with no passing test fails the comparison).
    if [[ $SUITE_RC -eq 0 && $npass -gt 0 ]]; then
      ref "$what: $npass tests pass (reference, not counted)"
    else
      ref "$what: exit $SUITE_RC, $npass tests pass, $nfail fail (reference FAILED, not counted)"
      grep -E '^FAIL' "$out" | sed 's/^/    | /' | head -n 20 || true
      tail -n 3 "$out" | sed 's/^/    | /'
    fi
  done
  if ! doorbell_installed; then
    fail "netns/suite self,doorbell: btl doorbell component not installed (ompi_info shows no 'MCA btl: doorbell')"
  else
    for run in "${SUITE_RUNS[@]}"; do
      run_suite "$run" self,doorbell
      out="$BUILD/suite-$run-self,doorbell.out"
      ref=$(suite_results "$BUILD/suite-$run-self,vader,tcp.out" PASS self,vader,tcp | sed '/^$/d')
      got=$(suite_results "$out" PASS self,doorbell | sed '/^$/d')
      missing=$(comm -23 <(echo "$ref") <(echo "$got") | sed '/^$/d')
      nref=$(echo "$ref" | sed '/^$/d' | wc -l)
      what="netns/suite $run (${RUN_HOSTS[$run]}) self,doorbell"
      if [[ -z $missing && $nref -gt 0 ]]; then
        pass "$what passes all $nref tests the reference passes"
      else
        fail "$what: of the $nref tests the reference passes, these do not pass:"
        while IFS= read -r t; do echo "    - $t"; done <<<"${missing:-(no reference results)}"
      fi
      # Everything else the suite checks for doorbell (force_tcp pass, idle
      # CPU limit, no shm leaks on nodeA): its own counts are doorbell's and
      # add to ours.  A run that ended without counting (timeout, crash)
      # counts as one failure.
      read -r np_ nf_ < <(suite_counts "$out") || true
      if [[ -n ${np_:-} ]]; then
        passed=$((passed + np_)); failed=$((failed + nf_))
        echo "     $what: the suite's own results: $np_ PASS, $nf_ FAIL (counted here)"
      fi
      if [[ $SUITE_RC -ne 0 && ( -z ${np_:-} || ${nf_:-0} -eq 0 ) ]]; then
        fail "$what: whole suite run (exit $SUITE_RC with no failed test counted: $(tail -n 1 "$out"))"
      fi
      if [[ $SUITE_RC -ne 0 ]]; then
        # each failure with the end of its log (the suite's "      |"
        # lines), so a failure on CI says why; $BUILD is gone after exit
        awk '/^FAIL/ {show = 1; print; next} show && /^      \|/ {print; next} {show = 0}' "$out" |
          sed 's/^/    | /' | head -n 120 || true
      fi
      np_=; nf_=
      check_nodeB_shm "$run self,doorbell"
    done
  fi
fi

# ---- 3. anysource_wake ----
# Reference first: the program's own checks (order, payload, interleaving).
# shellcheck disable=SC2086
if run_mpi 60 4 $REF_BTL -- "$BUILD/anysource_wake" && grep -q '^ANYSOURCE_OK' "$LOG"; then
  ref "netns/anysource_wake self,vader,tcp np=4 ($(grep '^ANYSOURCE_OK' "$LOG" | cut -d' ' -f2-)) (reference, not counted)"
else
  ref "netns/anysource_wake self,vader,tcp np=4 (reference FAILED, not counted)"; show_log
fi

# counter FIELD: value of FIELD in rank 0's finalize report, which the
# component prints with btl_doorbell_verbose >= 1 as
#   btl doorbell: rank 0 counters: notifies_sent=N ... shm_wakeups=N tcp_wakeups=N ...
#   btl doorbell: rank 0 peer P path=shm|tcp
counter() {
  grep -E 'btl doorbell: rank 0 counters:' "$LOG" | head -n 1 \
    | grep -oE "[ ]$1=[0-9]+" | cut -d= -f2 || true
}
peer_path() {
  grep -E "btl doorbell: rank 0 peer $1 path=" "$LOG" | head -n 1 | sed -E 's/.*path=([a-z]+).*/\1/' || true
}

if ! doorbell_installed; then
  fail "netns/anysource_wake self,doorbell: btl doorbell component not installed"
else
  # shellcheck disable=SC2086
  if run_mpi 90 4 $DB_BTL --mca btl_doorbell_verbose 1 -- "$BUILD/anysource_wake" \
     && grep -q '^ANYSOURCE_OK' "$LOG"; then
    pass "netns/anysource_wake self,doorbell np=4 ($(grep '^ANYSOURCE_OK' "$LOG" | cut -d' ' -f2-))"
  else
    fail "netns/anysource_wake self,doorbell np=4"; show_log 30
  fi
  ok_line=$(grep '^ANYSOURCE_OK' "$LOG" || true)
  # Which ranks sent to rank 0 on which path (the program prints them).
  local_rank=$(echo "$ok_line" | grep -oE 'local=[0-9]+' | cut -d= -f2 || true)
  remote_rank=$(echo "$ok_line" | grep -oE 'remote=[0-9]+' | cut -d= -f2 || true)
  lpath=$(peer_path "${local_rank:-x}"); rpath=$(peer_path "${remote_rank:-x}")
  shm_rx=$(counter shm_received); tcp_rx=$(counter tcp_received)
  shm_wk=$(counter shm_wakeups); tcp_wk=$(counter tcp_wakeups)
  desc="peer ${local_rank:-?}=${lpath:-?} peer ${remote_rank:-?}=${rpath:-?} shm_received=${shm_rx:-?} tcp_received=${tcp_rx:-?} shm_wakeups=${shm_wk:-?} tcp_wakeups=${tcp_wk:-?}"
  # Each sender sent rank 0 twenty messages (plus collective traffic).
  if [[ $lpath == shm && $rpath == tcp && -n $shm_rx && -n $tcp_rx && $shm_rx -ge 20 && $tcp_rx -ge 20 ]]; then
    pass "netns/anysource_wake doorbell paths: shm to the same-node peer, tcp to the other node ($desc)"
  else
    fail "netns/anysource_wake doorbell paths: want shm to the same-node peer and tcp to the other node, >= 20 messages each ($desc)"
    grep -E 'btl doorbell: rank 0 ' "$LOG" | sed 's/^/    | /' | head -n 10 || true
  fi
  # ~20 idle waits end with a message on each path; most must have been
  # wake-ups from a sleep (>= 5 leaves room for messages that arrive while
  # the receiver happens to be awake, and is still no fluke).
  if [[ -n $shm_wk && -n $tcp_wk && $shm_wk -ge 5 && $tcp_wk -ge 5 ]]; then
    pass "netns/anysource_wake doorbell wake-ups on both paths, >= 5 each ($desc)"
  else
    fail "netns/anysource_wake doorbell wake-ups on both paths, >= 5 each ($desc)"
  fi
  # The receiver waited ~25 ms before each message: a sleeping transport
  # must not have burnt the whole wait (self,vader,tcp shows cpu ~= wall).
  wall=$(echo "$ok_line" | grep -oE 'wall_s=[0-9.]+' | cut -d= -f2 || true)
  cpu=$(echo "$ok_line" | grep -oE 'cpu_s=[0-9.]+' | cut -d= -f2 || true)
  if [[ -n $wall && -n $cpu ]] && awk -v c="$cpu" -v w="$wall" 'BEGIN { exit !(w > 0 && c / w < 0.5) }'; then
    pass "netns/anysource_wake doorbell receiver slept (cpu ${cpu}s of ${wall}s wall, limit 50%)"
  else
    fail "netns/anysource_wake doorbell receiver slept (cpu ${cpu:-?}s of ${wall:-?}s wall, limit 50%)"
  fi
fi

# ---- 4. a wrong btl_doorbell_if_include must fail fast and say why ----
if ! doorbell_installed; then
  fail "netns/doorbell-bad-if_include: btl doorbell component not installed"
else
  for bad in no_such_if0 192.0.2.0/24; do
    rc=0
    # shellcheck disable=SC2086
    run_mpi 60 4 --mca btl self,doorbell --mca btl_doorbell_if_include "$bad" -- "$BUILD/locality" || rc=$?
    if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && grep -q 'btl_doorbell_if_include' "$LOG"; then
      pass "netns/doorbell-bad-if_include '$bad' (exit $rc, message names the parameter)"
    else
      fail "netns/doorbell-bad-if_include '$bad' (exit $rc; want non-zero, no timeout, message naming btl_doorbell_if_include)"
      show_log 15
    fi
  done
fi

# ---- 5. the libfabric provider across the nodes ----
# libdoorbell-fi.so under Open MPI (pml cm, mtl ofi) and under the MPICH
# wheel (hydra, ch4:ofi, NOLOCAL), 2+2 ranks: same-node pairs over the
# provider's shared memory, the others over its TCP on the test subnet.
# Each MPI is told to use the doorbell provider only (mtl_ofi_provider_include,
# FI_PROVIDER), so a run that could not load it fails instead of falling back.
FI_PROGRAMS="pingpong anysource probe alltoall_nb collectives ssend_vector"
MPICH_VENV=${MPICH_VENV:-$ROOT/target/venv-mpich}
FI_PROV="$BUILD/fi-prov"
mkdir -p "$FI_PROV"
if (cd "$ROOT" && cargo build --release -p doorbell-fi) >"$LOG" 2>&1 &&
   cp "$ROOT/target/release/libdoorbell_fi.so" "$FI_PROV/libdoorbell-fi.so"; then
  for mpi in ompi mpich; do
    case $mpi in
      ompi) cc=$MPICC ;;
      mpich) cc=$MPICH_VENV/bin/mpicc ;;
    esac
    if [[ ! -x $cc ]] && ! command -v "$cc" >/dev/null; then
      fail "netns/fi $mpi: $cc not installed (scripts/deps.sh installs it)"
      continue
    fi
    for prog in $FI_PROGRAMS; do
      if ! "$cc" -O2 -o "$BUILD/fi-$prog-$mpi" "$ROOT/mpi-tests/$prog.c" >"$LOG" 2>&1; then
        fail "netns/fi $mpi build $prog"; show_log 5; continue
      fi
      args=()
      [[ $prog == pingpong ]] && args=(4194304)
      for np in 4 2; do
        fienv=(FI_PROVIDER_PATH="$FI_PROV" FI_DOORBELL_IF_INCLUDE="$SUBNET")
        rc=0
        if [[ $mpi == ompi ]]; then
          xs=()
          for e in "${fienv[@]}"; do xs+=(-x "$e"); done
          # shellcheck disable=SC2086  # LAYOUT_OPTS is a word list on purpose
          "$CLUSTER" exec nodeA timeout -k 5 120 "$MPIRUN" ${LAYOUT_OPTS/--mca pml ob1/} --mca pml cm --mca mtl ofi \
            --mca mtl_ofi_provider_include doorbell "${xs[@]}" --host "$(hosts_for "$np")" -np "$np" \
            "$BUILD/fi-$prog-$mpi" "${args[@]}" >"$LOG" 2>&1 </dev/null || rc=$?
        else
          # hydra starts its proxy on nodeB through the same agent as mpirun
          "$CLUSTER" exec nodeA timeout -k 5 120 env "${fienv[@]}" MPIR_CVAR_CH4_NETMOD=ofi \
            FI_PROVIDER=doorbell MPIR_CVAR_NOLOCAL=1 "$MPICH_VENV/bin/mpiexec" -launcher ssh \
            -launcher-exec "$AGENT" -hosts "$(hosts_for "$np")" -n "$np" \
            "$BUILD/fi-$prog-$mpi" "${args[@]}" >"$LOG" 2>&1 </dev/null || rc=$?
        fi
        what="netns/fi $mpi $prog np=$np ($(hosts_for "$np"))"
        if [[ $rc -eq 0 ]] && grep -q "^$prog: OK ($np ranks)" "$LOG"; then
          pass "$what"
        else
          fail "$what: exit $rc"; show_log 10
        fi
      done
    done
  done
else
  fail "netns/fi: building libdoorbell-fi.so failed"; show_log 10
fi

finish
