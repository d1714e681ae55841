#!/usr/bin/env python3
"""bench/fi/twonode.sh's raw results (round config metric bytes value) as
medians, ratios against the blocking socket, and the target."""
from results import load

# Each MPI run against the socket in its placement (twonode.sh says why).
FLOOR_OF = {"ompi_doorbell": "sock_block_1cpu", "ompi_tcp": "sock_block_1cpu",
            "ompi_doorbell_unbound": "sock_block", "mpich_doorbell": "sock_block"}
# The target: each MPI's default placement, the provider's default mode.
OURS = ("ompi_doorbell", "mpich_doorbell", "ompi_doorbell_unbound")
GOAL = 1.5


def main():
    configs, raw_med, raw_best, _ = load(__doc__)
    # Sizes as numbers; the placement line (hosts_distinct, key "-") is the
    # script's check, not a figure.
    sized = lambda d: {(c, m, int(k)): v for (c, m, k), v in d.items() if k != "-"}
    med, best = sized(raw_med), sized(raw_best)
    pairs = [(c, FLOOR_OF[c]) for c in configs if FLOOR_OF.get(c) in configs]

    def table(metric, title, sizes):
        if not sizes:
            return
        print(f"\n== {title} ==")
        head = ["size"] + configs + ([f"{c}/{f}" for c, f in pairs] if metric == "lat" else [])
        rows = []
        for k in sizes:
            row = [str(k)] + ["-" if med.get((c, metric, k)) is None else f"{med[(c, metric, k)]:.2f}" for c in configs]
            if metric == "lat":
                for c, f in pairs:
                    vc, vf = med.get((c, metric, k)), med.get((f, metric, k))
                    row.append(f"{vc / vf:.2f}x" if vc and vf else "-")
            rows.append(row)
        w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        for r in [head] + rows:
            print("  ".join(x.rjust(w[i]) for i, x in enumerate(r)))

    lat_sizes = sorted({k for (c, m, k) in med if m == "lat" and k <= 65536})
    table("lat", "2-rank latency across the namespaces, us (median; half a round trip)", lat_sizes)
    table("bw", "2-rank bandwidth across the namespaces, MB/s (median)",
          sorted({k for (c, m, k) in med if m == "bw" and k >= 1024}))

    print("\n== target: 8 B latency <= 1.5x a blocking socket in the same placement, default mode ==")
    print(f"{'':50s} {'median':>8s} {'best':>8s}  (met only if both are)")
    for c in OURS:
        f = FLOOR_OF[c]
        if c not in configs or f not in configs:
            continue
        r = [of.get((c, "lat", 8)) / of[(f, "lat", 8)] if of.get((c, "lat", 8)) and of.get((f, "lat", 8)) else None
             for of in (med, best)]
        verdict = "n/a" if None in r else ("met" if max(r) <= GOAL else "MISSED")
        show = lambda x: "-" if x is None else f"{x:.2f}x"
        print(f"{'8 B latency ' + c + '/' + f:50s} {show(r[0]):>8s} {show(r[1]):>8s}  goal <= {GOAL}x  {verdict}")


if __name__ == "__main__":
    main()
