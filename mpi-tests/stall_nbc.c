/* stall_nbc.c -- nonblocking collectives must not stall.
 *
 * Usage: stall_nbc [limit_s]   (any number of ranks >= 2; default 20 s)
 * Each phase runs 200 operations, cut short only at the
 * watchdog `limit_s`; a stall is judged by the counters the run prints at
 * finalize (mpi-tests/stalls.sh), one per sleep that held up an operation:
 *   iallreduce_wait   8 B and 16 KiB int64 MPI_SUM, MPI_Wait
 *   iallreduce_test   the same, completed by a loop of MPI_Test
 *   ibcast            4 KiB from a rotating root, MPI_Wait
 *   ialltoall         1 KiB per peer, loop of MPI_Test
 *   ibarrier          MPI_Wait
 * Results are checked after every operation.  Prints "stall_nbc: OK".
 */
#include "common.h"

#define N 200
#define RED_MAX 2048 /* int64 words: 16 KiB */

static double limit = 20.0;

static void complete(MPI_Request *rq, int test)
{
    if (!test) {
        MPI_Wait(rq, MPI_STATUS_IGNORE);
        return;
    }
    int done = 0;
    while (!done)
        MPI_Test(rq, &done, MPI_STATUS_IGNORE);
}

/* Stop a phase on every rank once rank 0 is past the limit (every 20 ops). */
static int give_up(double t0, long i)
{
    return t_phase_late(t0, i, 20, limit);
}

static void report(const char *name, double t0, long done)
{
    t_phase_report("stall_nbc", name, "ops", t0, done, N, limit);
}

static void iallreduce(int test)
{
    static int64_t in[RED_MAX], out[RED_MAX];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        int n = i % 2 ? RED_MAX : 1;
        for (int k = 0; k < n; k++)
            in[k] = (int64_t)(t_rank + 1) * (k + 1) + i;
        MPI_Request rq;
        MPI_Iallreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &rq);
        complete(&rq, test);
        int64_t ranks = (int64_t)t_size * (t_size + 1) / 2;
        for (int k = 0; k < n; k++)
            if (out[k] != ranks * (k + 1) + (int64_t)t_size * i) {
                CHECK(0, "iallreduce %ld: word %d is %lld", i, k, (long long)out[k]);
                break;
            }
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report(test ? "iallreduce_test" : "iallreduce_wait", t0, i);
}

static void ibcast(void)
{
    static unsigned char buf[4096];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        int root = (int)(i % t_size);
        if (t_rank == root)
            t_fill(buf, sizeof buf, (uint64_t)i * 64 + (uint64_t)root);
        else
            memset(buf, 0, sizeof buf);
        MPI_Request rq;
        MPI_Ibcast(buf, sizeof buf, MPI_BYTE, root, MPI_COMM_WORLD, &rq);
        complete(&rq, 0);
        CHECK_PATTERN(buf, sizeof buf, (uint64_t)i * 64 + (uint64_t)root, "ibcast %ld", i);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report("ibcast", t0, i);
}

static void ialltoall(void)
{
    size_t blk = 1024;
    unsigned char *sb = t_malloc(blk * (size_t)t_size), *rb = t_malloc(blk * (size_t)t_size);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        for (int p = 0; p < t_size; p++)
            t_fill(sb + blk * (size_t)p, blk, ((uint64_t)i << 16) | ((uint64_t)t_rank << 8) | (uint64_t)p);
        memset(rb, 0, blk * (size_t)t_size);
        MPI_Request rq;
        MPI_Ialltoall(sb, (int)blk, MPI_BYTE, rb, (int)blk, MPI_BYTE, MPI_COMM_WORLD, &rq);
        complete(&rq, 1);
        for (int p = 0; p < t_size; p++)
            CHECK_PATTERN(rb + blk * (size_t)p, blk,
                          ((uint64_t)i << 16) | ((uint64_t)p << 8) | (uint64_t)t_rank,
                          "ialltoall %ld from %d", i, p);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report("ialltoall", t0, i);
    free(sb);
    free(rb);
}

static void ibarrier(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        MPI_Request rq;
        MPI_Ibarrier(MPI_COMM_WORLD, &rq);
        complete(&rq, 0);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report("ibarrier", t0, i);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (argc > 1)
        limit = atof(argv[1]);
    iallreduce(0);
    iallreduce(1);
    ibcast();
    ialltoall();
    ibarrier();
    return t_finish("stall_nbc");
}
