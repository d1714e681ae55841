"""Small-message latency sorted by where the host put the two ranks.

The host places the two CPUs of a run near or far apart (a 64-byte line
crosses between them in ~0.03, ~0.07 or ~0.28 us here), and every
transport's 8 B latency moves with that distance.  A median over rounds
mixes the groups in whatever proportion the host drew, so two transports'
medians can compare one placement with another.  pingpong.c measures each run's floor (one
line handed back and forth, `RESULT line 64 <us>`); this module groups the
runs by it, so that each group's ratios compare the transports' own work.
Used by bench/ompi/report.py and bench/fi/report.py."""
import statistics
from collections import defaultdict

# Floors sorted: one more than this factor above the one before starts a
# new group.  (Here they fall at ~0.03, ~0.07 and ~0.28 us, and vary by
# 10% within a group.)
GAP = 1.5


def load_runs(path):
    """{(round, config): {(metric, key): value}} from a raw results file
    (`round config metric key value` per line)."""
    runs = defaultdict(dict)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5:
                rnd, config, metric, key, value = parts
                runs[(rnd, config)][(metric, key)] = float(value)
    return runs


def groups(runs, configs, key="8"):
    """The runs that measured a floor, grouped (GAP): per group, (median
    floor, {config: median `key` B latency}, {config: runs}), closest
    first."""
    got = sorted(((r[("line", "64")], c, r[("lat", key)]) for (_, c), r in runs.items()
                  if ("line", "64") in r and ("lat", key) in r and c in configs))
    clusters = []
    for f, c, lat in got:
        if not clusters or f > GAP * clusters[-1][-1][0]:
            clusters.append([])
        clusters[-1].append((f, c, lat))
    out = []
    for g in clusters:
        by = {c: [lat for _, u, lat in g if u == c] for c in configs}
        out.append((statistics.median(f for f, _, _ in g),
                    {c: statistics.median(v) for c, v in by.items() if v},
                    {c: len(v) for c, v in by.items() if v}))
    return out


def table_rows(runs, configs, pairs, key="8"):
    """(title, header, rows) of the grouped table, or None without floors."""
    gs = groups(runs, configs, key)
    if not gs:
        return None
    title = (f"{key} B latency by placement (runs grouped by their cache-line floor, "
             "the line's one-way time), us, median (runs)")
    header = ["floor"] + list(configs) + [f"{a}/{b}" for a, b in pairs]
    rows = []
    for floor, med, count in gs:
        rows.append([f"{floor:.3f}"]
                    + [f"{med[c]:.3f} ({count[c]})" if c in med else "-" for c in configs]
                    + [f"{med[a] / med[b]:.2f}x" if a in med and b in med else "-" for a, b in pairs])
    return title, header, rows


def worst_ratio(runs, configs, a, b, key="8"):
    """a/b of `key` B latency in the group where it is highest, and that
    group's floor as words; (None, "") if no group ran both."""
    got = [(med[a] / med[b], f"floor {floor:.3f} us") for floor, med, _ in groups(runs, configs, key)
           if a in med and b in med]
    return max(got) if got else (None, "")
