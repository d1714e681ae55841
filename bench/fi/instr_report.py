#!/usr/bin/env python3
"""Report for bench/fi/instr.sh: instructions per message from callgrind
files, split into the MPI's own code and the transport's.

Reads <dir>/cg.<config>.<side>.<windows> for windows 200 and 1200 and
divides the difference of each object's self cost by --messages."""
import argparse
import collections
import os
import re
import sys

# Objects that are the transport: everything else is the MPI (and the
# program, and libc on its behalf).
TRANSPORT = re.compile(r"^(mca_btl_vader|mca_btl_doorbell|libdoorbell-fi|libfabric)\.so")
# The reference path each configuration is held against, and the MPI.
REFERENCE = {
    "ompi_vader": "ompi_vader", "ompi_btl": "ompi_vader", "ompi_doorbell": "ompi_vader",
    "mpich_default": "mpich_default", "mpich_doorbell": "mpich_default", "mpich_fi_shm": "mpich_default",
}
SIDES = {0: "sender", 1: "receiver"}


def self_costs(path):
    """Self cost per object (basename) in one callgrind file."""
    names = {}
    cost = collections.Counter()
    obj = "?"
    after_calls = False

    def name(s):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), "?")

    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                obj = os.path.basename(name(line[3:].strip()))
            elif line.startswith("cob="):
                name(line[4:].strip())  # may define an id that a later ob= uses
            elif line.startswith("calls="):
                after_calls = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_calls:  # the call's inclusive cost, not self
                    after_calls = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    cost[obj] += int(parts[1])
    return cost


def per_message(d, config, side, messages):
    a = self_costs(os.path.join(d, f"cg.{config}.{side}.200"))
    b = self_costs(os.path.join(d, f"cg.{config}.{side}.1200"))
    return {o: (b[o] - a[o]) / messages for o in set(a) | set(b)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--configs", required=True)
    p.add_argument("--messages", type=int, required=True)
    a = p.parse_args()
    rows = {}
    for c in a.configs.split():
        for side in SIDES:
            try:
                objs = per_message(a.dir, c, side, a.messages)
            except OSError as e:
                print(f"instr_report: {c} {SIDES[side]}: {e}", file=sys.stderr)
                continue
            t = sum(v for o, v in objs.items() if TRANSPORT.match(o))
            rows[c, side] = (sum(objs.values()), sum(objs.values()) - t, t, objs)
    if not rows:
        print("instr_report: no callgrind files", file=sys.stderr)
        return 1
    print("\ninstructions per message (bench/fi/stream.c, callgrind, one side at a time)")
    print(f"{'configuration':16} {'side':9} {'total':>7} {'MPI':>7} {'transport':>10}   transport objects")
    for (c, side), (tot, mpi, t, objs) in rows.items():
        top = ", ".join(f"{o} {v:.0f}" for o, v in sorted(objs.items(), key=lambda kv: -kv[1]) if TRANSPORT.match(o) and v >= 1)
        print(f"{c:16} {SIDES[side]:9} {tot:7.0f} {mpi:7.0f} {t:10.0f}   {top}")
    # A one-way message costs its sender's and its receiver's instructions
    # (latency: their sum); a stream goes at the pace of its slower side
    # (message rate: the larger of the two).
    print("\nwhat the MPI's own code leaves a transport, against the reference path")
    print("(8 B latency <= 1.2x: both sides together; message rate >= 0.9x: the slower side)")
    for c in dict.fromkeys(c for c, _ in rows):
        ref = REFERENCE.get(c)
        if ref is None or ref == c or any((k, s) not in rows for k in (c, ref) for s in SIDES):
            continue
        tot = [rows[c, s][0] for s in SIDES]
        mpi = [rows[c, s][1] for s in SIDES]
        t = [rows[c, s][2] for s in SIDES]
        whole = [rows[ref, s][0] for s in SIDES]
        print(f"  {c}: both sides {sum(tot):.0f} = {sum(tot) / sum(whole):.2f}x {ref}'s {sum(whole):.0f}; "
              f"the MPI's own {sum(mpi):.0f} ({sum(mpi) / sum(whole):.2f}x); "
              f"room at 1.2x {1.2 * sum(whole) - sum(mpi):.0f}, this transport {sum(t):.0f}")
        print(f"  {' ' * len(c)}  slower side {max(tot):.0f} = {max(tot) / max(whole):.2f}x {ref}'s {max(whole):.0f}; "
              f"the MPI's own {max(mpi):.0f} ({max(mpi) / max(whole):.2f}x); room at 0.9x "
              + ", ".join(f"{SIDES[s]} {max(whole) / 0.9 - mpi[s]:.0f} (this transport {t[s]:.0f})" for s in SIDES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
