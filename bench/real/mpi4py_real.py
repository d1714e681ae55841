"""mpi4py_real.py -- Python objects and RMA through Debian's python3-mpi4py.

Usage: mpirun ... /usr/bin/python3 mpi4py_real.py [scale]   (even ranks >= 2;
pairs 0<->1, 2<->3, ...).  Phases, each timed (RESULT phase <name> <s>):
  objects  pickled ping-pong: comm.send / comm.recv of dicts, lists, bytes
  nonblock comm.isend / comm.irecv both ways at once, wait
  mprobe   comm.mprobe, then Message.recv
  rma      MPI.Win.Create on a NumPy buffer: Put/Get/Accumulate to the right
           neighbour with fences, then Lock/Put/Flush/Get/Unlock
Every object and every RMA result is checked; a wrong one aborts the job
(exit 3) with "ERROR rank N: ...".  RESULT wall - <s> covers all phases.
"""
import os
import sys
import time

import numpy as np
import mpi4py

# mpi4py asks for MPI_THREAD_MULTIPLE by default, which osc pt2pt refuses
mpi4py.rc.thread_level = "serialized"
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
scale = float(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REAL_SCALE", "1"))


def fail(msg):
    print(f"ERROR rank {rank}: {msg}", file=sys.stderr, flush=True)
    comm.Abort(3)


def iters(base, least=4):
    return max(least, int(base * scale + 0.5))


def result(metric, key, value):
    if rank == 0:
        print(f"RESULT {metric} {key} {value:.6g}", flush=True)


if size < 2 or size % 2:
    fail(f"needs an even number of ranks, got {size}")
peer = rank ^ 1
left, right = (rank - 1) % size, (rank + 1) % size


def obj(i, who):
    """An object that differs per round and sender; some rounds exceed the eager limit."""
    big = i % 8 == 7
    return {"round": i, "from": who, "text": f"doorbell {i} \u2603",
            "list": list(range(i % 50)), "nested": (who, [i, {"k": b"\x01" * (i % 17)}]),
            "blob": bytes([i % 251]) * (100_000 if big else 200)}


def phase(name, fn, n):
    comm.Barrier()
    t = time.perf_counter()
    fn(n)
    comm.Barrier()
    result("phase", name, time.perf_counter() - t)


def objects(n):
    for i in range(n):
        if rank % 2 == 0:
            comm.send(obj(i, rank), dest=peer, tag=1)
            back = comm.recv(source=peer, tag=2)
            if back != ("echo", obj(i, rank)):
                fail(f"objects: echo {i} differs")
        else:
            got = comm.recv(source=peer, tag=1)
            if got != obj(i, peer):
                fail(f"objects: round {i} differs")
            comm.send(("echo", got), dest=peer, tag=2)


def nonblock(n):
    for i in range(n):
        rq = comm.irecv(200_000, source=peer, tag=3)
        sq = comm.isend(obj(i, rank), dest=peer, tag=3)
        got = rq.wait()
        sq.wait()
        if got != obj(i, peer):
            fail(f"nonblock: round {i} differs")


def mprobe(n):
    for i in range(n):
        if rank % 2 == 0:
            comm.send(obj(i, rank), dest=peer, tag=10 + i % 5)
            st = MPI.Status()
            msg = comm.mprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            if st.Get_source() != peer or st.Get_tag() != 20 + i % 5:
                fail(f"mprobe: echo from {st.Get_source()} tag {st.Get_tag()}")
            if msg.recv() != obj(i, peer):
                fail(f"mprobe: echo {i} differs")
        else:
            st = MPI.Status()
            msg = comm.mprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            if st.Get_source() != peer or st.Get_tag() != 10 + i % 5:
                fail(f"mprobe: message from {st.Get_source()} tag {st.Get_tag()}")
            if msg.recv() != obj(i, peer):
                fail(f"mprobe: round {i} differs")
            comm.send(obj(i, rank), dest=peer, tag=20 + i % 5)


def rma(n):
    words = 512
    mem = np.zeros(3 * words, dtype=np.int64)  # [A: Put target | B: Get source | C: counters]
    win = MPI.Win.Create(mem, disp_unit=8, comm=comm)
    src = np.empty(words, dtype=np.int64)
    got = np.empty(words, dtype=np.int64)
    one = np.ones(1, dtype=np.int64)
    base = np.arange(words, dtype=np.int64)
    # fence epochs; our B holds round i's values during epoch i (set before the opening fence)
    win.Fence()
    for i in range(n):
        mem[words:2 * words] = base + 1000 * i + rank
        win.Fence()
        src[:] = base * 3 + i + rank
        win.Put([src, MPI.INT64_T], right, target=(0, words, MPI.INT64_T))
        win.Get([got, MPI.INT64_T], right, target=(words, words, MPI.INT64_T))
        win.Accumulate([one, MPI.INT64_T], right, target=(2 * words, 1, MPI.INT64_T), op=MPI.SUM)
        win.Fence()
        if not np.array_equal(got, base + 1000 * i + right):
            fail(f"rma fence: Get of round {i} differs")
        if not np.array_equal(mem[:words], base * 3 + i + left):
            fail(f"rma fence: Put target of round {i} differs")
        if mem[2 * words] != i + 1:
            fail(f"rma fence: counter {mem[2 * words]} after round {i}")
    # passive target: only we write our right neighbour's A and C[1]
    comm.Barrier()
    for i in range(n):
        win.Lock(right, MPI.LOCK_SHARED)
        src[:] = base * 5 - i - rank
        win.Put([src, MPI.INT64_T], right, target=(0, words, MPI.INT64_T))
        win.Flush(right)
        got[:] = 0
        win.Get([got, MPI.INT64_T], right, target=(0, words, MPI.INT64_T))
        win.Flush(right)
        win.Accumulate([one, MPI.INT64_T], right, target=(2 * words + 1, 1, MPI.INT64_T), op=MPI.SUM)
        win.Unlock(right)
        if not np.array_equal(got, src):
            fail(f"rma lock: Get after Put+Flush of round {i} differs")
    comm.Barrier()
    win.Lock(rank, MPI.LOCK_SHARED)
    c = int(mem[2 * words + 1])
    win.Unlock(rank)
    if c != n:
        fail(f"rma lock: counter {c}, want {n}")
    win.Free()


t0 = time.perf_counter()
comm.Barrier()
phase("objects", objects, iters(20000))
phase("nonblock", nonblock, iters(20000))
phase("mprobe", mprobe, iters(20000))
phase("rma", rma, iters(10000))
result("wall", "-", time.perf_counter() - t0)
if rank == 0:
    print(f"mpi4py_real: OK ({size} ranks)", flush=True)
