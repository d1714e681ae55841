/* coll.c -- time per MPI_Barrier and per 8-byte MPI_Allreduce.
 *
 * Meant for 8 ranks on 2 cores (oversubscribed).  The reported time is the
 * slowest rank's elapsed time divided by the iteration count.
 *
 * Usage: coll [-q]           (-q: 200 iterations instead of 1000)
 * Prints: RESULT barrier - <us>   RESULT allreduce - <us>
 *         RESULT coll_yield - <1 if Open MPI yields when idle, 0 if not, -1 unknown>
 */
#include "bench_common.h"

#include <stdint.h>

#define WARMUP 50

/* Whether Open MPI enabled sched_yield in its idle loop (it does so by itself
 * when it sees oversubscription): the MPI_T control variable, or -1. */
static int yield_when_idle(void)
{
    int provided, idx, count, on = -1;
    unsigned char val[16] = { 0 }; /* a bool or an int: any nonzero byte means on */
    MPI_T_cvar_handle h;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
        return -1;
    if (MPI_T_cvar_get_index("mpi_yield_when_idle", &idx) == MPI_SUCCESS
        && MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
        if (MPI_T_cvar_read(h, val) == MPI_SUCCESS) {
            on = 0;
            for (size_t i = 0; i < sizeof val; i++)
                on |= val[i] != 0;
        }
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return on;
}

static double slowest(double t)
{
    double max;
    MPI_Reduce(&t, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return max;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = has_flag(argc, argv, "-q") ? 200 : 1000;
    report_placement();

    for (int i = 0; i < WARMUP; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double barrier = slowest(now_s() - t0);

    /* Every result is checked: sum over ranks of (rank + i). */
    int64_t base = (int64_t)size * (size - 1) / 2;
    for (int i = -WARMUP; i < iters; i++) {
        if (i == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = now_s();
        }
        int64_t in = rank + i, out = 0;
        MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (out != base + (int64_t)size * i)
            bench_fail("allreduce %d: got %lld", i, (long long)out);
    }
    double allreduce = slowest(now_s() - t0);

    if (rank == 0) {
        printf("RESULT barrier - %.3f\n", barrier / iters * 1e6);
        printf("RESULT allreduce - %.3f\n", allreduce / iters * 1e6);
        printf("RESULT coll_ranks - %d\n", size);
        printf("RESULT coll_yield - %d\n", yield_when_idle());
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
