/* empty_pass.c -- what one progress pass costs when nothing arrives.
 *
 * With more ranks than cores, a collective step waits until every runnable
 * rank had its turn, and most turns are passes that find nothing: their
 * cost multiplies.  Rank 0 posts a receive that nobody answers yet and
 * calls MPI_Test on it, N times (each call is one opal_progress pass that
 * runs every progress callback, the BTLs' included, and finds nothing).
 * Rank 1 waits in MPI_Recv meanwhile, so with 2 ranks on 2 cores it sits on
 * the other core.  Run it under callgrind (--toggle-collect=opal_progress)
 * to count instructions per pass; on its own it reports the time.
 *
 * Usage: empty_pass [-q]       (-q: a tenth of the calls)
 * Prints: RESULT empty_pass_ns - <nanoseconds per MPI_Test, median of 5>
 */
#include "bench_common.h"

#include <stdint.h>

int main(int argc, char **argv)
{
    int rank = pair_init(&argc, &argv);
    long calls = has_flag(argc, argv, "-q") ? 100000 : 1000000;

    uint64_t msg = 0;
    pair_warm_up(rank);

    if (rank == 0) {
        double ns[5];
        for (int round = 0; round < 5; round++) {
            MPI_Request req;
            int done = 0;
            MPI_Irecv(&msg, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD, &req);
            double t0 = now_s();
            for (long i = 0; i < calls; i++) {
                MPI_Test(&req, &done, MPI_STATUS_IGNORE);
                if (done)
                    bench_fail("a receive nobody answered completed");
            }
            ns[round] = (now_s() - t0) * 1e9 / (double)calls;
            /* now let rank 1 answer it */
            msg = (uint64_t)round;
            MPI_Send(&msg, 1, MPI_UINT64_T, 1, 2, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (msg != (uint64_t)round + 100)
                bench_fail("wrong payload %llu", (unsigned long long)msg);
        }
        qsort(ns, 5, sizeof ns[0], cmp_double);
        printf("RESULT empty_pass_ns - %.1f\n", ns[2]);
    } else {
        for (int round = 0; round < 5; round++) {
            MPI_Recv(&msg, 1, MPI_UINT64_T, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            msg += 100;
            MPI_Send(&msg, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
        }
    }
    MPI_Finalize();
    return 0;
}
