/* idle.c -- CPU used by a rank blocked in MPI_Recv.
 *
 * Rank 0 sleeps (outside MPI) for the idle period, then sends 8 bytes.
 * Rank 1 measures its own CPU time (getrusage RUSAGE_SELF: every thread of
 * the process, so transport helper threads count too) across the MPI_Recv.
 *
 * Usage: idle [-q]            (-q: 1 s instead of 3 s)
 * Prints: RESULT idle_cpu - <percent of one core>
 *         RESULT idle_wall - <seconds spent in MPI_Recv>
 */
#include "bench_common.h"

#include <stdint.h>

int main(int argc, char **argv)
{
    int rank = pair_init(&argc, &argv);
    double idle = has_flag(argc, argv, "-q") ? 1.0 : 3.0;

    uint64_t msg = 0;
    pair_warm_up(rank);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        sleep_s(idle);
        msg = 0x1d1e;
        MPI_Send(&msg, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD);
    } else {
        double w0 = now_s(), c0 = process_cpu_s();
        MPI_Recv(&msg, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double c1 = process_cpu_s(), w1 = now_s();
        if (msg != 0x1d1e)
            bench_fail("wrong payload %#llx", (unsigned long long)msg);
        /* The receive cannot legitimately end before the sender woke up. */
        if (w1 - w0 < 0.9 * idle)
            bench_fail("MPI_Recv returned after %.3f s, sender slept %.1f s", w1 - w0, idle);
        printf("RESULT idle_cpu - %.2f\n", 100.0 * (c1 - c0) / (w1 - w0));
        printf("RESULT idle_wall - %.3f\n", w1 - w0);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
