#!/usr/bin/env python3
"""flood.py -- strangers flood a running job's doorbell TCP listeners.

Usage: flood.py PIDDIR SECONDS [--open N] [--rate R]

PIDDIR holds one file per rank, rank.<n>, with its pid (soak.c and
stopped_peer.c write them).  For SECONDS, this opens unauthenticated TCP
connections as fast as it can, round-robin over every port those
processes listen on at 127.0.0.1 (doorbell's, with btl_doorbell_if_include
lo: Open MPI's own listeners are elsewhere), rescanning for ranks and ports
every half second.  Most connections are reset at once (SO_LINGER 0: no
TIME_WAIT, so the ephemeral ports last); one in eight sends the first
bytes of a valid hello and stays open (up to --open N at once, 512) until
the listener drops it, so the listener's set of pending handshakes stays
full.  A rank that is stopped meanwhile gets its accept queue filled.
--rate R caps the connections per second (a soak keeps a core for its
ranks); without it there is no cap.
Once every rank in PIDDIR has had 1000 connection attempts on each of its
ports, this writes PIDDIR/flood.ready (stopped_peer.c waits for it).

SIGTERM ends it early.  Prints "flood: C connections to P ports in S s (R/s)"; exits 0 if it made
at least one connection, 1 otherwise.  Whether the job completed with its
data is for the caller to check.
"""
import errno
import os
import signal
import socket
import struct
import sys
import time

HELLO_PREFIX = b"DOORBELL" + struct.pack("<I", 2)
LINGER_RESET = struct.pack("ii", 1, 0)


def loopback_listen_ports(pid):
    """Ports this process listens on at 127.0.0.1 (from its fds and net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        lines = open(f"/proc/{pid}/net/tcp").read().splitlines()[1:]
    except OSError:
        return []
    ports = []
    for line in lines:
        f = line.split()
        local, state, inode = f[1], f[3], f[9]
        ip, port = local.split(":")
        if state == "0A" and inode in inodes and ip == "0100007F":
            ports.append(int(port, 16))
    return ports


def scan(piddir):
    ports = set()
    try:
        names = os.listdir(piddir)
    except OSError:
        return []
    for name in names:
        if not name.startswith("rank."):
            continue
        try:
            pid = int(open(os.path.join(piddir, name)).read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        ports.update(loopback_listen_ports(pid))
    return sorted(ports)


def reset(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
    except OSError:
        pass
    s.close()


def main():
    args = sys.argv[1:]
    max_open = 512
    if "--open" in args:
        i = args.index("--open")
        max_open = int(args[i + 1])
        del args[i : i + 2]
    rate = 0.0
    if "--rate" in args:
        i = args.index("--rate")
        rate = float(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    piddir, seconds = args[0], float(args[1])
    t0 = time.monotonic()
    end = [t0 + seconds]
    # SIGTERM ends the flood early, summary included.
    signal.signal(signal.SIGTERM, lambda *_: end.__setitem__(0, 0.0))
    ports, next_scan = [], 0.0
    kept = []
    made = 0
    seen = set()
    tries = {}
    ready = False
    n = 0
    while True:
        now = time.monotonic()
        if now >= end[0]:
            break
        if now >= next_scan:
            ports = scan(piddir)
            seen.update(ports)
            next_scan = now + 0.5
        if not ports:
            time.sleep(0.01)
            continue
        if rate and made > rate * (now - t0):
            time.sleep(min(0.01, made / rate - (now - t0)))
            continue
        port = ports[n % len(ports)]
        n += 1
        tries[port] = tries.get(port, 0) + 1
        if not ready and n % 1000 == 0:
            ranks = sum(1 for f in os.listdir(piddir) if f.startswith("rank."))
            if len(ports) >= ranks and min(tries.get(p, 0) for p in ports) >= 1000:
                open(os.path.join(piddir, "flood.ready"), "w").close()
                ready = True
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", port))
        if rc not in (0, errno.EINPROGRESS):
            reset(s)
            continue
        made += 1
        if n % 8 == 0:
            try:
                s.send(HELLO_PREFIX)
            except OSError:
                pass
            kept.append(s)
            if len(kept) > max_open:
                reset(kept.pop(0))
        else:
            reset(s)
    for s in kept:
        reset(s)
    took = time.monotonic() - t0
    print(f"flood: {made} connections to {len(seen)} ports in {took:.1f} s ({made / max(took, 1e-9):.0f}/s)")
    sys.exit(0 if made else 1)


if __name__ == "__main__":
    main()
