#!/usr/bin/env python3
"""bench/fi/run.sh's raw results (round config metric key value) as medians,
the provider's ratios against each MPI's own paths, and the targets."""
import os
import sys

from results import load

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ompi"))
import placement  # noqa: E402  (bench/ompi/placement.py)

# (ours, reference): the provider against each MPI's default on-node path
# and against libfabric's own providers under the same MPI; then libfabric's
# shm provider against MPICH's default: what ch4:ofi costs with libfabric's
# own on-node provider (under Open MPI, libfabric 1.17's shm declines mtl
# ofi: it lacks FI_REMOTE_COMM, so bench/fi/floor stands in: the floor of
# pml cm + mtl ofi with a minimal spinning provider, against vader).
TARGET_PAIRS = [("ompi_doorbell", "ompi_vader"), ("mpich_doorbell", "mpich_default")]
PAIRS = TARGET_PAIRS + [("ompi_doorbell", "ompi_floor"), ("ompi_floor", "ompi_vader"),
                        ("ompi_doorbell", "ompi_fi_tcp"), ("mpich_doorbell", "mpich_fi_shm"),
                        ("mpich_doorbell", "mpich_fi_tcp"), ("mpich_fi_shm", "mpich_default")]


def show_table(title, head, rows):
    """Print `rows` under `head`, columns right-aligned to their widest."""
    print(f"\n== {title} ==")
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(x).rjust(w[i]) for i, x in enumerate(r)))


def main():
    configs, med, best, raw = load(__doc__)
    runs = placement.load_runs(raw)
    pairs = [(x, y) for x, y in PAIRS if x in configs and y in configs]

    def table(metric, title, fmt):
        keys = sorted({k for (c, m, k) in med if m == metric}, key=lambda k: float(k) if k != "-" else 0)
        if not keys:
            return
        head = ["size"] + configs + [f"{x}/{y}" for x, y in pairs]
        rows = []
        for k in keys:
            row = [k] + [fmt(med.get((c, metric, k))) for c in configs]
            for x, y in pairs:
                vx, vy = med.get((x, metric, k)), med.get((y, metric, k))
                row.append(f"{vx / vy:.2f}x" if vx and vy else "-")
            rows.append(row)
        show_table(title, head, rows)

    f = lambda v: "-" if v is None else f"{v:.2f}"
    table("lat", "2-rank latency, us (median; ratio < 1: the provider faster)", f)
    placed = placement.table_rows(runs, configs, pairs)
    if placed:
        show_table(*placed)
    table("bw", "2-rank bandwidth, MB/s (windowed; small sizes are the message rate)", f)
    table("idle_cpu", "CPU of a rank blocked in MPI_Recv, % of a core", f)

    print("\n== targets ==")
    def ratio(x, y, m, k, of):
        vx, vy = of.get((x, m, k)), of.get((y, m, k))
        return vx / vy if vx and vy else None
    print(f"{'':45s} {'median':>8s} {'best':>8s}  (met only if both meet the goal)")
    for x, y in [p for p in TARGET_PAIRS if p in pairs]:
        for desc, m, k, goal, le in ((f"8 B latency {x}/{y}", "lat", "8", 1.2, True),
                                     (f"1 MiB bandwidth {x}/{y}", "bw", "1048576", 0.9, False),
                                     (f"8 B message rate {x}/{y}", "bw", "8", 0.9, False)):
            v, b = ratio(x, y, m, k, med), ratio(x, y, m, k, best)
            ok = lambda r: r <= goal if le else r >= goal
            verdict = "n/a" if v is None or b is None else ("met" if ok(v) and ok(b) else "MISSED")
            show = lambda r: "-" if r is None else f"{r:.2f}x"
            print(f"{desc:45s} {show(v):>8s} {show(b):>8s}  goal {'<=' if le else '>='} {goal}x  {verdict}")
    for x, y in [p for p in TARGET_PAIRS if p in pairs]:
        r, where = placement.worst_ratio(runs, configs, x, y)
        show = "-" if r is None else f"{r:.2f}x"
        verdict = "n/a" if r is None else ("met" if r <= 1.2 else "MISSED")
        print(f"{'8 B latency ' + x + '/' + y + ', same placement':45s} {show:>8s} {'':>8s}  goal <= 1.2x  {verdict}"
              f"{'  (worst: the runs of ' + where + ')' if where else ''}")
    for x in ("ompi_doorbell", "mpich_doorbell"):
        v = med.get((x, "idle_cpu", "-"))
        if x in configs:
            verdict = "n/a" if v is None else ("met" if v < 2.0 else "MISSED")
            print(f"{'idle CPU ' + x:45s} {'-' if v is None else f'{v:.1f}%':>8s}  goal < 2%     {verdict}")


if __name__ == "__main__":
    main()
