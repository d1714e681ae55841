#!/usr/bin/env python3
"""Turn run.sh's raw results (round transport metric key value) into tables of
medians, doorbell/baseline ratios and the project's targets (met/missed)."""
import argparse
import statistics
import sys
from collections import defaultdict

import placement

# (numerator, denominator) pairs whose ratio is printed, per mode.
RATIOS = {
    "single": [("doorbell", "vader"), ("doorbell", "tcp"), ("doorbell_tcp", "tcp"), ("doorbell_block", "vader"),
               ("doorbell", "doorbell_base"), ("doorbell_tcp", "doorbell_tcp_base")],
    "twonode": [("db_poll", "ompi"), ("db_adaptive", "ompi"), ("db_block", "ompi")],
}

SCALARS = [  # metric, label, unit, format
    ("idle_cpu", "idle CPU in MPI_Recv", "% core", "{:.1f}"),
    ("idle_wakeups", "wake-ups in MPI_Recv (voluntary switches)", "/s", "{:.1f}"),
    ("idle_preempts", "preemptions in MPI_Recv (involuntary switches)", "/s", "{:.1f}"),
    ("listener_slowdown", "listener slowdown", "x", "{:.2f}"),
    ("listener_cpu", "listener thread CPU", "% core", "{:.1f}"),
    ("barrier", "8-rank MPI_Barrier", "us", "{:.1f}"),
    ("allreduce", "8-rank 8 B MPI_Allreduce", "us", "{:.1f}"),
    ("empty_pass_ns", "empty progress pass (MPI_Test)", "ns", "{:.1f}"),
]


def size_label(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def load(path):
    vals = defaultdict(list)  # (transport, metric, key) -> [values]
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            _, transport, metric, key, value = parts
            vals[(transport, metric, key)].append(float(value))
    return vals


class Results:
    def __init__(self, vals, runs):
        self.vals = vals
        self.runs = runs

    def med(self, t, metric, key="-"):
        v = self.vals.get((t, metric, key))
        return statistics.median(v) if v else None

    def spread(self, t, metric, key="-"):
        v = self.vals.get((t, metric, key))
        return (min(v), max(v)) if v else None

    def ratio(self, a, b, metric, key="-"):
        x, y = self.med(a, metric, key), self.med(b, metric, key)
        return x / y if x is not None and y else None


def fmt(v, f="{:.2f}".format, suffix=""):
    """f: a function number -> str."""
    return "-" if v is None else f(v) + suffix


def fmt3(v):
    """About three significant digits without exponents (bandwidth spans 0.1 to 10^4)."""
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def sized_table(res, transports, pairs, metric, title, f):
    keys = sorted({int(k) for (t, m, k) in res.vals if m == metric})
    if not keys:
        return
    print(f"\n== {title} ==")
    header = ["size"] + transports + [f"{a}/{b}" for a, b in pairs]
    rows = []
    for k in keys:
        rows.append([size_label(k)] + [fmt(res.med(t, metric, str(k)), f) for t in transports]
                    + [fmt(res.ratio(a, b, metric, str(k)), suffix="x") for a, b in pairs])
    table(header, rows)


def scalar_table(res, transports, pairs):
    present = [s for s in SCALARS if any(res.med(t, s[0]) is not None for t in transports)]
    if not present:
        return
    print("\n== per-rank costs (median [min..max] over rounds) ==")
    header = ["measure"] + transports + [f"{a}/{b}" for a, b in pairs]
    rows = []
    for metric, label, unit, f in present:
        cells = []
        for t in transports:
            m, s = res.med(t, metric), res.spread(t, metric)
            cells.append("-" if m is None else f"{f.format(m)} [{f.format(s[0])}..{f.format(s[1])}]")
        rows.append([f"{label} ({unit})"] + cells
                    + [fmt(res.ratio(a, b, metric), suffix="x") for a, b in pairs])
    table(header, rows)


def placement_table(res, transports, pairs):
    t = placement.table_rows(res.runs, transports, pairs)
    if t:
        print(f"\n== {t[0]} ==")
        table(t[1], t[2])


def targets(res, mode, transports):
    """Each target: (description, value or None, limit, strict, unit, context)."""
    out = []

    def ctx(metric, key, names):
        return ", ".join(f"{n} {fmt(res.med(n, metric, key))}" for n in names if n in transports)

    if mode == "single":
        out.append(("listener slowdown, doorbell", res.med("doorbell", "listener_slowdown"),
                    1.05, False, "x", ctx("listener_slowdown", "-", ["vader", "tcp"])))
        out.append(("idle CPU in MPI_Recv, doorbell", res.med("doorbell", "idle_cpu"),
                    2.0, True, "%", ctx("idle_cpu", "-", ["vader", "tcp"])))
        out.append(("wake-ups in MPI_Recv, doorbell", res.med("doorbell", "idle_wakeups"),
                    1.0, False, "/s", "vader's preemptions " + fmt(res.med("vader", "idle_preempts"))
                    + "/s, wake-ups " + fmt(res.med("vader", "idle_wakeups")) + "/s"))
        out.append(("8 B latency, doorbell/vader", res.ratio("doorbell", "vader", "lat", "8"),
                    1.2, False, "x", ctx("lat", "8", ["doorbell", "vader"]) + " us"))
        placed, where = placement.worst_ratio(res.runs, transports, "doorbell", "vader")
        out.append(("8 B latency, doorbell/vader, same placement (worst)", placed,
                    1.2, False, "x", f"in the runs of {where}" if where else "no group ran both"))
        out.append(("8 B latency, doorbell force_tcp/tcp",
                    res.ratio("doorbell_tcp", "tcp", "lat", "8"),
                    1.1, False, "x", ctx("lat", "8", ["doorbell_tcp", "tcp"]) + " us"))
        # streams: the worst size of a range.  At 1 B-1 KiB the window is
        # 64 messages, so the bandwidth ratio is the message-rate ratio.
        for metric, lo, hi, label, ours, theirs, goal in (
                ("bw", 1, 1024, "message rate 1 B-1 KiB", "doorbell", "vader", 1.0),
                ("bw", 65536, 1 << 30, "bandwidth 64 KiB-4 MiB", "doorbell", "vader", 0.95),
                ("bw", 65536, 1 << 30, "bandwidth 64 KiB-4 MiB", "doorbell_tcp", "tcp", 0.9),
                ("bibw", 1024, 1 << 30, "two-way bandwidth 1 KiB-4 MiB", "doorbell_tcp", "tcp", 0.9)):
            if ours not in transports or theirs not in transports:
                continue
            sizes = sorted({int(k) for (t, m, k) in res.vals if m == metric and lo <= int(k) <= hi})
            ratios = [(res.ratio(ours, theirs, metric, str(k)), k) for k in sizes]
            ratios = [(r, k) for r, k in ratios if r is not None]
            worst = min(ratios) if ratios else (None, None)
            where = f"worst at {size_label(worst[1])}: " + ctx(metric, str(worst[1]), [ours, theirs]) \
                if worst[1] is not None else ""
            name = "force_tcp/tcp" if ours == "doorbell_tcp" else f"{ours}/{theirs}"
            out.append((f"{label}, {name} (worst size)", worst[0], goal, ">=", "x", where + " MB/s"))
        for metric, label in (("barrier", "8-rank barrier"), ("allreduce", "8-rank allreduce")):
            out.append((f"{label}, doorbell/vader", res.ratio("doorbell", "vader", metric),
                        2.0, False, "x", ctx(metric, "-", ["doorbell", "vader"]) + " us"))
    else:
        # the default mode against the best that sleeping does, and against
        # Open MPI's own (spinning) transports
        out.append(("8 B latency, db_adaptive (default)/db_block",
                    res.ratio("db_adaptive", "db_block", "lat", "8"),
                    1.5, False, "x", ctx("lat", "8", ["db_adaptive", "db_block"]) + " us"))
        out.append(("8 B latency, db_adaptive (default)/ompi(tcp)",
                    res.ratio("db_adaptive", "ompi", "lat", "8"),
                    0.05, False, "x", ctx("lat", "8", ["db_adaptive", "ompi"]) + " us"))
        for t in ("db_poll", "db_block"):
            out.append((f"8 B latency, {t}/ompi(tcp)", res.ratio(t, "ompi", "lat", "8"),
                        1.2, False, "x", ctx("lat", "8", [t, "ompi"]) + " us"))
        for t in ("db_adaptive", "db_block"):
            out.append((f"idle CPU in MPI_Recv, {t}", res.med(t, "idle_cpu"), 5.0, True, "%",
                        ctx("idle_cpu", "-", ["db_poll", "ompi"])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=RATIOS, required=True)
    ap.add_argument("--transports", required=True)
    ap.add_argument("results")
    a = ap.parse_args()
    transports = a.transports.split()
    res = Results(load(a.results), placement.load_runs(a.results))
    pairs = [(x, y) for x, y in RATIOS[a.mode] if x in transports and y in transports]

    sized_table(res, transports, pairs, "lat",
                "2-rank latency, us (ping-pong / 2, median; ratio < 1: doorbell faster)", "{:.2f}".format)
    placement_table(res, transports, pairs)
    sized_table(res, transports, pairs, "bw",
                "2-rank bandwidth, MB/s (10^6 B/s, median; ratio > 1: doorbell faster)", fmt3)
    sized_table(res, transports, pairs, "bibw",
                "2-rank two-way bandwidth, MB/s (both directions, median; ratio > 1: doorbell faster)", fmt3)
    scalar_table(res, transports, pairs)
    yields = {t: res.med(t, "coll_yield") for t in transports if res.med(t, "coll_yield") is not None}
    if yields:
        state = ", ".join(f"{t} {'on' if y > 0 else 'off' if y == 0 else 'unknown'}"
                          for t, y in yields.items())
        print(f"note: 8 ranks share this machine's cores (oversubscribed); Open MPI then sets "
              f"mpi_yield_when_idle itself (sched_yield in its idle loop). Seen via MPI_T: {state}.")
    for t in transports:
        cpus = res.med(t, "listener_cpus")
        if cpus is not None and cpus != 1:
            print(f"WARN: {t}: listener rank could run on {cpus:.0f} CPUs (not bound to one core): "
                  "its slowdown does not measure core sharing.")
        if a.mode == "twonode" and res.med(t, "hosts_distinct") == 0:
            print(f"WARN: {t}: both ranks reported the same host name; check MPIRUN_EXTRA.")

    print("\n== targets ==")
    rows = []
    for desc, v, limit, strict, unit, context in targets(res, a.mode, transports):
        if v is None:
            verdict = "n/a (not measured)"
        else:
            if strict == ">=":
                verdict = "met" if v >= limit else "MISSED"
            else:
                verdict = "met" if (v < limit if strict else v <= limit) else "MISSED"
        op = ">= " if strict == ">=" else "< " if strict else "<= "
        rows.append([desc, fmt(v, suffix=unit), op + f"{limit}{unit}", verdict, context])
    table(["target", "measured", "goal", "verdict", "context (medians)"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
