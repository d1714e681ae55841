#!/usr/bin/env python3
"""stranger_attack.py -- a stranger on the node visits a doorbell job's TCP ports.

Usage: stranger_attack.py EXE [--ranks N] [--wait S] [--delay S]

Waits (up to --wait seconds) until N processes running EXE (same path) each
listen on a TCP port bound to 127.0.0.1 (doorbell's, with
btl_doorbell_if_include lo; Open MPI's own listeners are elsewhere), waits
--delay seconds so the job's own connections are up, then visits every such
port the way a stranger on the node would:

  1. the old protocol's hello for task 0 (its job hash is FNV-1a of the
     component's job key, computable by anyone who can read a rank's
     environment),
     then a frame with a well-formed ob1 match header claiming rank 1, then close;
  2. the same claiming task 1, plus a goodbye frame;
  3. the same claiming task 9999 (not a rank);
  4. an HTTP request;
  5. the new protocol: read the challenge, answer with a hello whose keyed
     hash is made with a guessed key, then forged frames.

Prints what it did; exits 0 when it visited N ports, 1 otherwise.  Whether
the job survived with correct data is for the caller to check.
"""
import os
import socket
import struct
import sys
import time


def fnv1a(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def pids_running(exe):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/exe") == exe:
                    out.append(int(d))
            except OSError:
                pass
    return out


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


def job_key(pid):
    """The component's job key (btl_doorbell_component.c job_key)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:  # the process is gone
        return "unknown"
    env = dict(kv.split(b"=", 1) for kv in env if b"=" in kv)
    if b"OMPI_MCA_ess_base_jobid" not in env:
        return "unknown"
    jobid = int(env[b"OMPI_MCA_ess_base_jobid"])
    h = fnv1a(struct.pack("<I", jobid))
    for name in (b"PMIX_NAMESPACE", b"OMPI_MCA_orte_precondition_transports"):
        h = fnv1a(env.get(name, b"") + b"\0", h)
    return "ompi.u%d.j%08x.%012x" % (os.getuid(), jobid, h >> 16)


def old_hello(task, key):
    return b"DOORBELL" + struct.pack("<IIQ", 1, task, fnv1a(key.encode()))


def frame(payload, tag, kind=0):
    return struct.pack("<QIBBH", len(payload), 0, tag, kind, 0) + payload


def forged_ob1(src):
    # ob1 match header: type MATCH(65 as a btl tag; 1 in the header), flags,
    # ctx 0 (MPI_COMM_WORLD), src, tag 0, seq 0, pad; then a payload.
    hdr = struct.pack("<BBHiiHH", 1, 0, 0, src, 0, 0, 0)
    return frame(hdr + b"\xee" * 4096, 65)


def visit(port, payload, read_challenge=False):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError as e:
        print(f"  port {port}: {e}")
        return
    try:
        if read_challenge:
            ch = b""
            while len(ch) < 32:
                got = s.recv(32 - len(ch))
                if not got:
                    break
                ch += got
            payload = payload(ch)
        s.sendall(payload)
        time.sleep(0.05)
    except OSError as e:
        print(f"  port {port}: {e}")
    finally:
        s.close()


def main():
    args = sys.argv[1:]
    exe = os.path.realpath(args[0])
    opt = dict(zip(args[1::2], args[2::2]))
    ranks = int(opt.get("--ranks", 2))
    deadline = time.time() + float(opt.get("--wait", 60))
    found = {}
    while time.time() < deadline:
        found = {p: loopback_listen_ports(p) for p in pids_running(exe)}
        found = {p: v for p, v in found.items() if v}
        if len(found) >= ranks:
            break
        time.sleep(0.05)
    if len(found) < ranks:
        print(f"stranger_attack: found {len(found)} of {ranks} processes of {exe} listening on 127.0.0.1")
        return 1
    time.sleep(float(opt.get("--delay", 1.0)))
    visited = 0
    for pid, ports in sorted(found.items()):
        key = job_key(pid)
        for port in ports:
            print(f"stranger_attack: pid {pid} port {port} job key {key}")
            visit(port, old_hello(0, key) + forged_ob1(1))
            visit(port, old_hello(1, key) + forged_ob1(1) + frame(b"", 0, 1))
            visit(port, old_hello(9999, key) + forged_ob1(1))
            visit(port, b"GET / HTTP/1.0\r\n\r\n")
            guess = lambda ch: (b"DOORBELL" + struct.pack("<II", 2, 1) + ch[16:32] + os.urandom(32)
                                + forged_ob1(1) + frame(b"", 0, 1))
            visit(port, guess, read_challenge=True)
            visited += 1
    print(f"stranger_attack: visited {visited} ports of {len(found)} processes, 5 connections each")
    return 0 if visited >= ranks else 1


if __name__ == "__main__":
    sys.exit(main())
