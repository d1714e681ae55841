#!/usr/bin/env python3
"""mpi4py's own test suite as one of bench/real's programs.

argv: SCALE (ignored: the suite is what it is) and TESTDIR, mpi4py 3.1.4's
test/ directory (the version Debian's python3-mpi4py is; run.sh fetches it
with mpi-tests/ext_lib.sh).  Runs every test module but the dynamic-process
ones (spawn, dynproc: each starts jobs of its own, and Open MPI's runtime
hangs in some of them whatever the BTL) through the suite's own runtests.py,
on every rank.  RESULT wall - <s> is rank 0's time from a barrier after the
import to a barrier after the last test; exit 1 if a test failed anywhere.
"""
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[2])
import runtests  # noqa: E402  (from TESTDIR)
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
comm.Barrier()
t0 = time.perf_counter()
failed = bool(runtests.main(["--no-builddir", "-q", "-e", "spawn", "-e", "dynproc"]))
comm.Barrier()
wall = time.perf_counter() - t0
failed = comm.allreduce(failed, op=MPI.LOR)
if comm.rank == 0:
    if failed:
        print("ERROR rank 0: a test of the suite failed", flush=True)
    else:
        print(f"RESULT wall - {wall:.6g}", flush=True)
sys.exit(1 if failed else 0)
