"""mpi4py.futures over dynamic processes: MPIPoolExecutor spawns its
workers (MPI_Comm_spawn) and sends them tasks and their data, small and
large (pickled NumPy arrays past the rendezvous limits), both ways; every
result is checked.  Prints "spawn_pool: OK (N tasks)" and exits 0, or
names the first wrong result and exits 1.

usage: mpirun -np 1 python3 spawn_pool.py [WORKERS] [TASKS]
"""
import sys

import numpy as np
from mpi4py.futures import MPIPoolExecutor


def task(i, a):
    # a worker's answer depends on every byte it got
    return i, a * 3 + i, int(a.sum())


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ntasks = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    sizes = [0, 1, 100, 5000, 70000, 1 << 20]
    with MPIPoolExecutor(max_workers=workers) as pool:
        inputs = [np.arange(sizes[i % len(sizes)], dtype=np.int64) * (i + 1) for i in range(ntasks)]
        futures = [pool.submit(task, i, a) for i, a in enumerate(inputs)]
        for i, f in enumerate(futures):
            j, b, s = f.result(timeout=300)
            a = inputs[i]
            if j != i or not np.array_equal(b, a * 3 + i) or s != int(a.sum()):
                print("spawn_pool: task %d came back wrong (%d elements)" % (i, a.size), flush=True)
                return 1
        # map: the workers' results in order
        got = list(pool.map(pow, range(200), [3] * 200))
        if got != [k ** 3 for k in range(200)]:
            print("spawn_pool: map(pow) came back wrong", flush=True)
            return 1
    print("spawn_pool: OK (%d tasks)" % (ntasks + 200), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
