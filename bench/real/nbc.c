/* nbc.c -- nonblocking collectives, completed with MPI_Wait and with a loop
 * of MPI_Test.
 *
 * Usage: nbc [scale]      (any number of ranks >= 2)
 * Phases (RESULT phase <op>_<wait|test> <s>), data checked every iteration:
 *   iallreduce  256 x int64 MPI_SUM
 *   ibcast      4 KiB from a rotating root
 *   ialltoall   256 B per peer
 *   ibarrier    (checked by a counter exchanged afterwards every 64 rounds)
 */
#include "real.h"

#define NRED 256
#define BCAST_BYTES 4096
#define A2A_BYTES 256

static int use_test;

static void complete(MPI_Request *rq)
{
    if (!use_test) {
        R_MPI(MPI_Wait(rq, MPI_STATUS_IGNORE));
        return;
    }
    int done = 0;
    while (!done)
        R_MPI(MPI_Test(rq, &done, MPI_STATUS_IGNORE));
}

static void iallreduce(long n)
{
    int64_t in[NRED], out[NRED];
    MPI_Request rq;
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < NRED; k++)
            in[k] = (int64_t)(r_rank + 1) * (k + 1) + i;
        R_MPI(MPI_Iallreduce(in, out, NRED, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &rq));
        complete(&rq);
        int64_t ranks = (int64_t)r_size * (r_size + 1) / 2;
        for (int k = 0; k < NRED; k++)
            R_CHECK(out[k] == ranks * (k + 1) + (int64_t)r_size * i,
                    "iallreduce: element %d of round %ld is %lld", k, i, (long long)out[k]);
    }
}

static void ibcast(long n)
{
    static unsigned char buf[BCAST_BYTES];
    MPI_Request rq;
    for (long i = 0; i < n; i++) {
        int root = (int)(i % r_size);
        if (r_rank == root)
            r_stamp(buf, BCAST_BYTES, (uint64_t)i * 977 + (uint64_t)root);
        else
            memset(buf, 0, 16);
        R_MPI(MPI_Ibcast(buf, BCAST_BYTES, MPI_BYTE, root, MPI_COMM_WORLD, &rq));
        complete(&rq);
        r_check_stamp(buf, BCAST_BYTES, (uint64_t)i * 977 + (uint64_t)root, "ibcast");
    }
}

static void ialltoall(long n)
{
    unsigned char *sb = r_malloc((size_t)r_size * A2A_BYTES);
    unsigned char *rb = r_malloc((size_t)r_size * A2A_BYTES);
    MPI_Request rq;
    for (long i = 0; i < n; i++) {
        for (int p = 0; p < r_size; p++)
            r_stamp(sb + (size_t)p * A2A_BYTES, A2A_BYTES,
                    ((uint64_t)i << 16) ^ ((uint64_t)r_rank << 8) ^ (uint64_t)p);
        R_MPI(MPI_Ialltoall(sb, A2A_BYTES, MPI_BYTE, rb, A2A_BYTES, MPI_BYTE, MPI_COMM_WORLD, &rq));
        complete(&rq);
        for (int p = 0; p < r_size; p++)
            r_check_stamp(rb + (size_t)p * A2A_BYTES, A2A_BYTES,
                          ((uint64_t)i << 16) ^ ((uint64_t)p << 8) ^ (uint64_t)r_rank, "ialltoall");
    }
    free(sb);
    free(rb);
}

static void ibarrier(long n)
{
    MPI_Request rq;
    for (long i = 0; i < n; i++) {
        R_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &rq));
        complete(&rq);
        if (i % 64 == 63) { /* everybody did the same number of barriers */
            long lo = i, hi = i;
            R_MPI(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD));
            R_MPI(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD));
            R_CHECK(lo == i && hi == i, "ibarrier: rounds differ (%ld..%ld)", lo, hi);
        }
    }
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    static const struct {
        const char *name;
        void (*fn)(long);
        long base;
    } ops[] = { { "iallreduce", iallreduce, 40000 },
                { "ibcast", ibcast, 40000 },
                { "ialltoall", ialltoall, 40000 },
                { "ibarrier", ibarrier, 40000 } };
    double t0 = r_phase_begin();
    for (use_test = 0; use_test <= 1; use_test++)
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s_%s", ops[k].name, use_test ? "test" : "wait");
            double t = r_phase_begin();
            ops[k].fn(r_iters(ops[k].base, 4));
            r_phase_end(name, t);
        }
    r_result("wall", "-", r_now() - t0);
    if (r_rank == 0)
        printf("nbc: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
