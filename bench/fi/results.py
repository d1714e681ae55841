"""The raw results of bench/fi's scripts (rounds.sh): each line
`round config metric key value`, read into lists per (config, metric, key),
with each list's median and best (lowest for a latency, highest else)."""
import argparse
import statistics
from collections import defaultdict


def load(doc):
    """Parse `--configs "A B ..." RAW`; return (configs, medians, bests,
    the raw file's path)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--configs", required=True)
    ap.add_argument("raw")
    a = ap.parse_args()
    vals = defaultdict(list)
    for line in open(a.raw):
        _, c, m, k, v = line.split()
        vals[(c, m, k)].append(float(v))
    med = {key: statistics.median(v) for key, v in vals.items()}
    # Each configuration's best round: the host places a rank pair close
    # or far (a cache line crosses in 0.06-0.08 or 0.14-0.34 us), and a
    # median of few rounds can compare one placement with the other.
    best = {key: (min(v) if key[1] == "lat" else max(v)) for key, v in vals.items()}
    return a.configs.split(), med, best, a.raw
