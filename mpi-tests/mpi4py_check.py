"""mpi4py over the BTL under test: Python objects (pickled) and NumPy buffers.

Run with exactly 2 ranks.  Rank 0 sends, rank 1 checks and answers; both
sides compare against objects they build independently.  Every failed check
is printed; the exit status is non-zero if any check failed on any rank.
"""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"rank {rank}: CHECK FAILED: {what}", file=sys.stderr, flush=True)


def objects():
    rng = np.random.default_rng(1234)
    return [
        None,
        42,
        "doorbell \u00e9\u00e8\u2603",
        {"a": [1, 2.5, (3, "x")], "nested": {"k": b"\x00\xff" * 10}},
        list(range(10000)),
        b"\xa5" * 200001,  # pickled object beyond any eager limit
        rng.integers(0, 1 << 30, size=70000).tolist(),
    ]


if comm.Get_size() != 2:
    print("mpi4py_check: run with 2 ranks", file=sys.stderr)
    comm.Abort(2)

# 1. pickled objects, blocking and nonblocking, both directions
for i, obj in enumerate(objects()):
    if rank == 0:
        comm.send(obj, dest=peer, tag=i)
        back = comm.recv(source=peer, tag=100 + i)
        check(back == ("echo", i, obj), f"object {i} echo differs")
    else:
        got = comm.recv(source=peer, tag=i)
        check(got == obj, f"object {i} differs: {type(got).__name__}")
        req = comm.isend(("echo", i, got), dest=peer, tag=100 + i)
        req.wait()

# 2. NumPy arrays through the buffer interface, several dtypes and sizes
for n, dtype in [(0, np.float64), (1, np.int32), (1000, np.float32), (123457, np.float64),
                 (3 << 20, np.uint8), (1 << 20, np.complex128)]:
    want = (np.arange(n, dtype=np.float64) * 1.5 + 7).astype(dtype)
    if rank == 0:
        comm.Send([want, MPI._typedict[want.dtype.char]], dest=peer, tag=7)
        echo = np.empty_like(want)
        comm.Recv(echo, source=peer, tag=8)
        check(np.array_equal(echo, want + 1), f"Send/Recv {n} x {np.dtype(dtype).name}: echo differs")
    else:
        buf = np.full(n, 99, dtype=dtype)
        st = MPI.Status()
        comm.Recv(buf, source=peer, tag=7, status=st)
        check(st.Get_count(MPI.BYTE) == want.nbytes, f"count {st.Get_count(MPI.BYTE)} != {want.nbytes}")
        check(np.array_equal(buf, want), f"Send/Recv {n} x {np.dtype(dtype).name}: data differs")
        r = comm.Isend(buf + 1, dest=peer, tag=8)
        r.Wait()

# 3. nonblocking buffers both ways at once, and collectives on arrays
a = np.arange(200000, dtype=np.int64) * (rank + 1)
b = np.empty_like(a)
reqs = [comm.Irecv(b, source=peer, tag=9), comm.Isend(a, dest=peer, tag=9)]
MPI.Request.Waitall(reqs)
check(np.array_equal(b, np.arange(200000, dtype=np.int64) * (peer + 1)), "Isend/Irecv exchange differs")

s = np.empty_like(a)
comm.Allreduce(a, s, op=MPI.SUM)
check(np.array_equal(s, np.arange(200000, dtype=np.int64) * 3), "Allreduce differs")
obj = comm.bcast({"root": 0, "payload": list(range(5000))} if rank == 0 else None, root=0)
check(obj == {"root": 0, "payload": list(range(5000))}, "bcast object differs")
g = comm.allgather(("rank", rank))
check(g == [("rank", 0), ("rank", 1)], f"allgather gave {g}")

total = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("mpi4py_check: OK" if total == 0 else f"mpi4py_check: {total} failed checks", flush=True)
if total:
    sys.exit(1)
