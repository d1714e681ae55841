#!/usr/bin/env python3
"""Turn bench/real/run.sh's raw results into tables and a plot.

Input lines: round config program ranks metric key value.  Prints, per
program and rank count, the median wall time of each configuration with the
doorbell/vader and doorbell_tcp/tcp ratios (and the same for each phase of a
program), each job's CPU-seconds (all ranks and mpirun, user + system)
beside its wall time, per-size tables (bidirectional bandwidth, allreduce, alltoall,
bcast), and the targets with verdicts.  Tables need only the standard
library; the plot (--plot) needs matplotlib (Debian: python3-matplotlib).

A run that hit run.sh's time limit counts as taking the limit: its medians
are lower bounds, marked "!", and so are ratios that use them (">=").
"""
import argparse
import statistics
import sys
from collections import defaultdict

PAIRS = [("doorbell", "vader"), ("doorbell_base", "vader"), ("doorbell", "doorbell_base"),
         ("doorbell_tcp", "tcp"), ("doorbell_tcp_base", "tcp"), ("doorbell_tcp", "doorbell_tcp_base")]
WALL_LIMIT = 1.1       # every program: <= 1.1x the baseline's wall time
BIDIR_LIMIT = 0.9      # bidirectional bandwidth: >= 0.9x at every size
ALLREDUCE_LIMIT = 1.2  # allreduce: <= 1.2x at every size
CPU_LIMIT = 0.5        # a job's CPU-seconds: <= 0.5x the baseline's ...
CPU_WALL_LIMIT = 1.0   # ... at <= 1.0x its wall time
COLORS = {"vader": "tab:blue", "doorbell": "tab:red", "tcp": "tab:green",
          "doorbell_tcp": "tab:orange", "doorbell_base": "tab:purple",
          "doorbell_tcp_base": "tab:brown"}


def size_label(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


class Results:
    def __init__(self, path):
        self.vals = defaultdict(list)     # (cfg, prog, np, metric, key) -> [values]
        self.timeouts = defaultdict(int)  # (cfg, prog, np) -> runs that hit the limit
        self.failed = defaultdict(int)    # (cfg, prog, np) -> runs that failed
        self.runs = []                    # (prog, np) in first-seen order
        self.phases = defaultdict(list)   # (prog, np) -> phase names in order
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) != 7:
                    continue
                _, cfg, prog, np_, metric, key, value = p
                np_ = int(np_)
                if (prog, np_) not in self.runs:
                    self.runs.append((prog, np_))
                if metric == "timeout":
                    self.timeouts[(cfg, prog, np_)] += 1
                elif metric == "failed":
                    self.failed[(cfg, prog, np_)] += 1
                else:
                    self.vals[(cfg, prog, np_, metric, key)].append(float(value))
                    if metric == "phase" and key not in self.phases[(prog, np_)]:
                        self.phases[(prog, np_)].append(key)

    def med(self, cfg, prog, np_, metric="wall", key="-"):
        v = self.vals.get((cfg, prog, np_, metric, key))
        return statistics.median(v) if v else None

    def bound(self, cfg, prog, np_):
        """True if the wall time includes a run stopped at the limit."""
        return self.timeouts.get((cfg, prog, np_), 0) > 0

    def ratio(self, a, b, prog, np_, metric="wall", key="-"):
        x, y = self.med(a, prog, np_, metric, key), self.med(b, prog, np_, metric, key)
        return x / y if x is not None and y else None

    def sizes(self, prog, np_, metric):
        return sorted({int(k) for (c, p, n, m, k) in self.vals if p == prog and n == np_ and m == metric})


def fmt(v, digits=2):
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:.0f}"
    if v >= 100:
        return f"{v:.1f}" if digits > 1 else f"{v:.0f}"
    return f"{v:.{digits}f}" if v >= 1 else f"{v:.{digits + 1}f}"


def rfmt(r, low=False):
    """A ratio: 'x' suffix, '>=' when it is a lower bound."""
    if r is None:
        return "-"
    return (">=" if low else "") + (f"{r:.0f}x" if r >= 100 else f"{r:.2f}x")


def table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(r):
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def programs_table(res, configs, pairs, timeout):
    print("== wall time per program, s (median over rounds; phases indented) ==")
    header = ["program"] + configs + [f"{a}/{b}" for a, b in pairs] + ["verdict"]
    rows = []
    for prog, np_ in res.runs:
        cells = []
        for c in configs:
            m = res.med(c, prog, np_)
            n_to, n_f = res.timeouts.get((c, prog, np_), 0), res.failed.get((c, prog, np_), 0)
            cell = fmt(m) + ("!" * n_to)
            if n_f:
                cell += f" ({n_f} failed)"
            cells.append(cell)
        ratios, verdicts = [], []
        for a, b in pairs:
            r = res.ratio(a, b, prog, np_)
            low = res.bound(a, prog, np_)
            ratios.append(rfmt(r, low))
            if r is not None:
                verdicts.append("ok" if r <= WALL_LIMIT and not low else a + " MISSED")
        rows.append([f"{prog} np={np_}"] + cells + ratios + [", ".join(verdicts) or "-"])
        for ph in res.phases[(prog, np_)]:
            pc = [fmt(res.med(c, prog, np_, "phase", ph)) for c in configs]
            pr = [rfmt(res.ratio(a, b, prog, np_, "phase", ph)) for a, b in pairs]
            rows.append([f"    {ph}"] + pc + pr + [""])
    table(header, rows)
    print(f"!: a round stopped at the {timeout:g} s limit (counted as {timeout:g} s, so the median "
          "and the ratio are lower bounds); a phase that never finished has no figure.")


def cpu_table(res, configs, pairs):
    print("\n== whole-job CPU-seconds (all ranks + mpirun, user + system; median) ==")
    header = ["program"] + configs + [f"{a}/{b} cpu" for a, b in pairs] + [f"{a}/{b} wall" for a, b in pairs]
    rows = []
    for prog, np_ in res.runs:
        rows.append([f"{prog} np={np_}"] + [fmt(res.med(c, prog, np_, "cpu")) for c in configs]
                    + [rfmt(res.ratio(a, b, prog, np_, "cpu")) for a, b in pairs]
                    + [rfmt(res.ratio(a, b, prog, np_), res.bound(a, prog, np_)) for a, b in pairs])
    table(header, rows)
    print("cpu ratio < 1: the job burned less CPU than on the baseline (what sleeping saves)")


def sized_table(res, configs, pairs, prog, np_, metric, title, higher_better):
    keys = res.sizes(prog, np_, metric)
    if not keys:
        return
    print(f"\n== {title} ==")
    header = ["size"] + configs + [f"{a}/{b}" for a, b in pairs]
    rows = []
    for k in keys:
        rows.append([size_label(k)] + [fmt(res.med(c, prog, np_, metric, str(k)), 1) for c in configs]
                    + [rfmt(res.ratio(a, b, prog, np_, metric, str(k))) for a, b in pairs])
    table(header, rows)
    print("ratio > 1: doorbell faster" if higher_better else "ratio < 1: doorbell faster")


def targets(res, pairs):
    """(description, measured, goal, verdict, context) rows."""
    out = []
    for a, b in pairs:
        worst, over, n = None, [], 0
        for prog, np_ in res.runs:
            r = res.ratio(a, b, prog, np_)
            if r is None:
                continue
            n += 1
            low = res.bound(a, prog, np_)
            if r > WALL_LIMIT or low:
                stalls = res.timeouts.get((a, prog, np_), 0)
                over.append(f"{prog}@{np_} {rfmt(r, low)}"
                            + (f" ({stalls} round{'s' if stalls > 1 else ''} hit the limit)" if low else ""))
            if worst is None or r > worst[0]:
                worst = (r, f"{prog}@{np_}", low)
        if worst is None:
            out.append((f"every program, {a}/{b} wall", "-", f"<= {WALL_LIMIT}x", "n/a", ""))
            continue
        verdict = "met" if not over else "MISSED"
        ctx = f"{len(over)} of {n} over" + (": " + ", ".join(over) if over else "")
        out.append((f"every program, {a}/{b} wall",
                    f"{rfmt(worst[0], worst[2])} ({worst[1]})",
                    f"<= {WALL_LIMIT}x", verdict, ctx))

    for a, b in pairs:
        rs = [(res.ratio(a, b, p, n, "cpu"), res.ratio(a, b, p, n), res.bound(a, p, n), f"{p}@{n}")
              for p, n in res.runs]
        rs = [r for r in rs if r[0] is not None and r[1] is not None]
        if not rs:
            continue
        worst = max(rs)
        bad = [f"{w} {rfmt(c)} cpu, {rfmt(x, low)} wall" for c, x, low, w in rs
               if c > CPU_LIMIT or x > CPU_WALL_LIMIT or low]
        out.append((f"job CPU-seconds, {a}/{b}", f"{rfmt(worst[0])} ({worst[3]})",
                    f"<= {CPU_LIMIT}x at <= {CPU_WALL_LIMIT}x wall", "met" if not bad else "MISSED",
                    f"{len(bad)} of {len(rs)} miss" + (": " + ", ".join(bad) if bad else "")))

    def per_size(desc, prog, np_, metric, limit, higher_better, a, b):
        keys = res.sizes(prog, np_, metric)
        rs = [(res.ratio(a, b, prog, np_, metric, str(k)), k) for k in keys]
        rs = [(r, k) for r, k in rs if r is not None]
        if not rs:
            return (desc, "-", "", "n/a (not measured)", "")
        worst = min(rs) if higher_better else max(rs)
        bad = [size_label(k) for r, k in rs if (r < limit if higher_better else r > limit)]
        goal = (">= " if higher_better else "<= ") + f"{limit}x"
        return (desc, f"{rfmt(worst[0])} ({size_label(worst[1])})", goal,
                "met" if not bad else "MISSED",
                f"{len(bad)} of {len(rs)} sizes miss" + (": " + ", ".join(bad) if bad else ""))

    for a, b in pairs:
        out.append(per_size(f"bidir bandwidth, {a}/{b}", "bidir", 2, "bidir", BIDIR_LIMIT, True, a, b))
    nps = sorted({n for p, n in res.runs if p == "coll"})
    for a, b in pairs:
        for np_ in nps:
            out.append(per_size(f"allreduce np={np_}, {a}/{b}", "coll", np_, "allreduce",
                                ALLREDUCE_LIMIT, False, a, b))
    return out


def plot(res, configs, pairs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
        from matplotlib.ticker import ScalarFormatter
    except ImportError:
        print(f"no plot: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
        return
    fig, axes = plt.subplots(3, 1, figsize=(12, 14))
    # 1: wall-time ratio per program
    ax = axes[0]
    names = [f"{p}@{n}" for p, n in res.runs]
    width = 0.8 / max(1, len(pairs))
    handles = []
    for i, (a, b) in enumerate(pairs):
        xs, ys, hatch = [], [], []
        for j, (p, n) in enumerate(res.runs):
            r = res.ratio(a, b, p, n)
            if r is not None:
                xs.append(j + (i - (len(pairs) - 1) / 2) * width)
                ys.append(r)
                hatch.append(res.bound(a, p, n))
        bars = ax.bar(xs, ys, width, color=COLORS.get(a))
        for bar, h in zip(bars, hatch):
            if h:
                bar.set_hatch("//")
        handles.append(Patch(color=COLORS.get(a), label=f"{a}/{b}"))
    handles.append(ax.axhline(WALL_LIMIT, color="black", linestyle="--", linewidth=1,
                              label=f"target {WALL_LIMIT}x"))
    ax.axhline(1.0, color="grey", linewidth=0.5)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("wall time ratio (log)")
    ax.set_title("Real programs: wall time relative to the Open MPI transport (median; hatched: hit the time limit)")
    ax.legend(handles=handles, fontsize=8)
    # 2: allreduce latency against size, every rank count of the sweep
    ax = axes[1]
    styles = {2: "-", 4: "--", 8: ":"}
    for np_ in sorted({n for p, n in res.runs if p == "coll"}):
        for c in configs:
            ks = res.sizes("coll", np_, "allreduce")
            pts = [(k, res.med(c, "coll", np_, "allreduce", str(k))) for k in ks]
            pts = [(k, v) for k, v in pts if v is not None]
            if pts:
                ax.plot([k for k, _ in pts], [v for _, v in pts], styles.get(np_, "-"), marker="o",
                        markersize=3, color=COLORS.get(c), label=f"{c} np={np_}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("MPI_Allreduce mean time (us, log)")
    ax.set_title("Latency: MPI_Allreduce against size (np=2 solid, 4 dashed, 8 dotted)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=4)
    # 3: bidirectional bandwidth against size
    ax = axes[2]
    for c in configs:
        ks = res.sizes("bidir", 2, "bidir")
        pts = [(k, res.med(c, "bidir", 2, "bidir", str(k))) for k in ks]
        pts = [(k, v) for k, v in pts if v is not None]
        if pts:
            ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", markersize=3,
                    color=COLORS.get(c), label=c)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("MB/s, both directions (log)")
    ax.set_title("Bandwidth: 2 ranks, windows of 64 Isend + 64 Irecv each way")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot written to {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="vader doorbell tcp doorbell_tcp")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--plot", help="write a PNG here (needs matplotlib)")
    ap.add_argument("results")
    a = ap.parse_args()
    configs = a.configs.split()
    res = Results(a.results)
    pairs = [(x, y) for x, y in PAIRS if x in configs and y in configs]

    programs_table(res, configs, pairs, a.timeout)
    cpu_table(res, configs, pairs)
    sized_table(res, configs, pairs, "bidir", 2, "bidir",
                "bidirectional bandwidth, 2 ranks, MB/s (both directions, median)", True)
    for np_ in sorted({n for p, n in res.runs if p == "coll"}):
        for metric in ("allreduce", "alltoall", "bcast"):
            sized_table(res, configs, pairs, "coll", np_, metric,
                        f"MPI_{metric.capitalize()} np={np_}, mean us per call (median)", False)

    print("\n== targets ==")
    rows = [list(t) for t in targets(res, pairs)]
    table(["target", "measured (worst)", "goal", "verdict", "where"], rows)
    if a.plot:
        plot(res, configs, pairs, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
