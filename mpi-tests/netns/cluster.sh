#!/usr/bin/env bash
# cluster.sh up|down|status|subnet|exec NODE CMD...
#
# A two-node "cluster" on one machine: nodes nodeA and nodeB, each
#   - a network namespace; the two are joined by a single veth pair (no
#     bridge: a bridge added ~200 us per hop here), 10.77.0.1 / 10.77.0.2;
#   - its own UTS namespace, so `hostname` says nodeA / nodeB and Open MPI
#     treats them as two nodes;
#   - its own mount namespace with a private /dev/shm (real nodes share no
#     shared memory, so a transport that wrongly takes a remote rank for a
#     local one fails here instead of silently working) and a /sys of its
#     own network namespace.
# A holder process per node ($STATE_DIR/<node>.pid, `sleep infinity`) keeps
# the UTS and mount namespaces alive; `exec` enters all three through it.
# Names go into /etc/hosts.  `down` removes everything `up` created, and `up`
# tears down whatever it built if it fails half-way.
set -euo pipefail

NODES=(nodeA nodeB)
SUBNET=10.77.0.0/24            # private test subnet, only between the two namespaces
declare -A ADDR=([nodeA]=10.77.0.1 [nodeB]=10.77.0.2)
PREFIX=24
STATE_DIR=/run/doorbell-netns
HOSTS_TAG='# doorbell-netns'

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_tools() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN)"
  local t
  for t in ip nsenter unshare setsid mount python3; do
    command -v "$t" >/dev/null || die "'$t' not found (apt-get install -y iproute2 util-linux python3)"
  done
}

netns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

# /etc/hosts may be a bind mount (containers), so rewrite it in place instead
# of renaming a new file over it.
hosts_remove() {
  local tmp
  tmp=$(mktemp)
  grep -v -F "$HOSTS_TAG" /etc/hosts >"$tmp" || true
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

hosts_add() {
  hosts_remove
  local n
  for n in "${NODES[@]}"; do
    printf '%s\t%s\t%s\n' "${ADDR[$n]}" "$n" "$HOSTS_TAG" >>/etc/hosts
  done
}

# holder_pid NODE: pid of NODE's live holder, or nothing.  A stale pid file
# (holder gone, pid reused) must not send us into some other process.
holder_pid() {
  local f="$STATE_DIR/$1.pid" pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ && -e /proc/$pid/ns/net ]] || return 0
  netns_exists "$1" || return 0
  [[ $(stat -L -c %i "/proc/$pid/ns/net") == "$(stat -L -c %i "/run/netns/$1")" ]] || return 0
  echo "$pid"
}

holder_up() {
  local n=$1 f="$STATE_DIR/$1.pid"
  [[ -n $(holder_pid "$n") ]] && return 0
  rm -f "$f"
  # New UTS + mount namespaces inside the node's netns.  sysfs is mounted
  # again from inside the netns so /sys/class/net lists this node's links.
  # All fds go to /dev/null: the holder must not keep a caller's pipe open.
  # shellcheck disable=SC2016  # $1/$2/$$ are the inner shell's
  setsid -f nsenter --net="/run/netns/$n" \
    unshare --uts --mount --propagation private --fork -- \
    sh -c 'hostname "$1" && mount -t tmpfs -o mode=1777 "shm-$1" /dev/shm &&
           umount -l /sys && mount -t sysfs "sysfs-$1" /sys &&
           echo $$ >"$2.tmp" && mv "$2.tmp" "$2" && exec sleep infinity' \
    holder "$n" "$f" </dev/null >/dev/null 2>&1
  for _ in $(seq 1 100); do
    [[ -n $(holder_pid "$n") ]] && return 0
    sleep 0.05
  done
  die "the namespace holder of $n did not start"
}

up() {
  need_tools
  local n peer
  # If anything below fails (set -e exits), leave nothing half-built behind.
  trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "cluster.sh: up failed, tearing down" >&2; down; fi' EXIT
  mkdir -p "$STATE_DIR"
  for n in "${NODES[@]}"; do
    netns_exists "$n" || ip netns add "$n"
    ip -n "$n" link set lo up
  done
  # One veth pair, one end in each namespace.
  if ! ip -n nodeA link show veth-nodeA >/dev/null 2>&1 \
     || ! ip -n nodeB link show veth-nodeB >/dev/null 2>&1; then
    ip -n nodeA link del veth-nodeA 2>/dev/null || true
    ip -n nodeB link del veth-nodeB 2>/dev/null || true
    ip link del veth-nodeA 2>/dev/null || true
    ip link add veth-nodeA type veth peer name veth-nodeB
    ip link set veth-nodeA netns nodeA
    ip link set veth-nodeB netns nodeB
  fi
  for n in "${NODES[@]}"; do
    ip -n "$n" addr replace "${ADDR[$n]}/$PREFIX" dev "veth-$n"
    ip -n "$n" link set "veth-$n" up
    holder_up "$n"
  done
  hosts_add
  # Fail now (not later inside mpirun) if a node is not what it should be.
  for n in "${NODES[@]}"; do
    [[ $n == nodeA ]] && peer=nodeB || peer=nodeA
    [[ $(node_exec "$n" hostname) == "$n" ]] || die "hostname in $n is not $n"
    [[ $(node_exec "$n" stat -f -c %i /dev/shm) != "$(stat -f -c %i /dev/shm)" ]] \
      || die "$n has no private /dev/shm"
    check_link "$n" "${ADDR[$peer]}" || die "no TCP connectivity from $n to ${ADDR[$peer]}"
  done
  echo "cluster.sh: up (nodeA=${ADDR[nodeA]} nodeB=${ADDR[nodeB]} subnet $SUBNET)"
}

# No ping on a minimal system: a TCP connection from NODE to a listener in the
# peer namespace.
check_link() {
  local n=$1 dst=$2 peer lpid ok=1
  [[ $n == nodeA ]] && peer=nodeB || peer=nodeA
  node_exec "$peer" timeout 10 python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 47999)); s.listen(1); s.settimeout(9)
c, _ = s.accept(); c.sendall(b"ok")' "$dst" &
  lpid=$!
  for _ in $(seq 1 50); do
    if node_exec "$n" timeout 2 python3 -c '
import socket, sys
print(socket.create_connection((sys.argv[1], 47999), timeout=1).recv(2).decode())' "$dst" 2>/dev/null \
       | grep -q ok; then
      ok=0; break
    fi
    sleep 0.1
  done
  wait "$lpid" 2>/dev/null || true
  return $ok
}

down() {
  local n pids
  for n in "${NODES[@]}"; do
    # Kill whatever still runs in the node (a hung test, the holder), then
    # delete the netns; the veth pair goes with it, and the UTS/mount
    # namespaces (with the node's /dev/shm) with their last process.
    if netns_exists "$n"; then
      pids=$(ip netns pids "$n" 2>/dev/null || true)
      # shellcheck disable=SC2086  # one pid per word
      if [[ -n $pids ]]; then kill -9 $pids 2>/dev/null || true; fi
      ip netns del "$n" 2>/dev/null || true
    fi
    # A holder whose netns was deleted behind our back: still ours if it is
    # the `sleep infinity` whose hostname is the node's.
    if [[ -f $STATE_DIR/$n.pid ]]; then
      local pid
      pid=$(cat "$STATE_DIR/$n.pid")
      if [[ $pid =~ ^[0-9]+$ && $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == "sleep infinity " ]] \
         && [[ $(nsenter -t "$pid" --uts hostname 2>/dev/null) == "$n" ]]; then
        kill -9 "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$STATE_DIR/$n.pid" "$STATE_DIR/$n.pid.tmp"
    # Open MPI session directories of our hostnames (nothing else uses them)
    rm -rf "/tmp/ompi.$n".*
  done
  ip link del veth-nodeA 2>/dev/null || true
  hosts_remove
  rmdir "$STATE_DIR" 2>/dev/null || true
}

node_exec() {
  local n=$1 pid
  shift
  pid=$(holder_pid "$n")
  [[ -n $pid ]] || die "node $n is not up (run: $0 up)"
  # Entering a mount namespace resets the cwd to /, so keep ours.
  nsenter -t "$pid" --net --uts --mount --wd="$PWD" -- "$@"
}

status() {
  local n rc=0
  for n in "${NODES[@]}"; do
    if [[ -n $(holder_pid "$n") ]]; then
      echo "$n: up, hostname $(node_exec "$n" hostname), $(ip -n "$n" -4 -br addr show dev "veth-$n" 2>/dev/null)"
    else
      echo "$n: down"; rc=1
    fi
  done
  return $rc
}

case "${1:-}" in
  up) up ;;
  down) need_tools; down; echo "cluster.sh: down" ;;
  status) status ;;
  subnet) echo "$SUBNET" ;;
  exec)
    [[ $# -ge 3 ]] || die "usage: $0 exec NODE CMD..."
    node=$2; shift 2
    [[ -n ${ADDR[$node]+x} ]] || die "unknown node '$node' (nodes: ${NODES[*]})"
    node_exec "$node" "$@" ;;
  *) die "usage: $0 up|down|status|subnet|exec NODE CMD..." ;;
esac
