/* one_core.c -- an 8-byte ping-pong between 2 ranks that share one core.
 *
 * What an oversubscribed job pays per turn, without the noise of 8 ranks:
 * every message needs a context switch, so a round trip is two turns of
 * (a send, a pass that delivers, passes that find nothing, sched_yield).
 * Run both ranks on one CPU, with Open MPI's yield on, e.g.
 *   mpirun -np 2 --bind-to none --mca mpi_yield_when_idle 1 --mca btl self,vader \
 *       taskset -c 1 target/bench-ompi/one_core
 * (mpicc -O2 -o target/bench-ompi/one_core bench/ompi/one_core.c).
 *
 * Usage: one_core [-q]        (-q: 2,000 round trips instead of 20,000)
 * Prints: RESULT one_core_rt_us - <microseconds per round trip>
 */
#include "bench_common.h"

#include <stdint.h>

int main(int argc, char **argv)
{
    int rank = pair_init(&argc, &argv);
    long n = has_flag(argc, argv, "-q") ? 2000 : 20000;
    uint64_t x = 0;
    double rt = 0;

    for (int pass = 0; pass < 2; pass++) { /* the first warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        for (long i = 0; i < n; i++) {
            if (rank == 0) {
                MPI_Send(&x, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(&x, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(&x, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                x++;
                MPI_Send(&x, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
            }
        }
        rt = (now_s() - t0) * 1e6 / (double)n;
    }
    if (rank == 0) {
        if (x != (uint64_t)(2 * n))
            bench_fail("counter %llu after %ld round trips, want %ld", (unsigned long long)x, 2 * n, 2 * n);
        printf("RESULT one_core_rt_us - %.3f\n", rt);
    }
    MPI_Finalize();
    return 0;
}
