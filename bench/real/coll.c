/* coll.c -- blocking collectives from 8 B to 1 MiB.
 *
 * Usage: coll [scale]     (any number of ranks >= 2)
 * For MPI_Allreduce (int64 MPI_SUM over `size` bytes), MPI_Alltoall (`size`
 * bytes to every peer) and MPI_Bcast (`size` bytes, rotating root), prints
 *   RESULT <allreduce|alltoall|bcast> <size> <mean microseconds per call>
 *   RESULT phase <op> <seconds for its whole sweep>
 * Iteration counts per size are fixed (not fitted to the transport's speed),
 * so the wall times of two transports compare the same work.  Every call's
 * result is checked at a stamp every 4 KiB and at its end; the last call of
 * each size is checked in full.
 */
#include "real.h"

static const size_t sizes[] = { 8, 64, 512, 2048, 4096, 16384, 65536, 262144, 1048576 };
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAXSZ ((size_t)1 << 20)

/* iterations at this size: ~constant volume above 4 KiB */
static long iters_for(size_t size, long small)
{
    long n = size <= 4096 ? small : (long)((double)small * 4096.0 / (double)size * 4.0);
    return r_iters(n, 3);
}

static int64_t red_in(long i, int rank, size_t k) { return (int64_t)(i * 7 + rank + 1) * (int64_t)(k % 1000 + 1); }

static void check_red(const int64_t *out, size_t n, long i, int full, size_t bytes)
{
    int64_t sum_r = (int64_t)r_size * (r_size + 1) / 2;
    size_t step = full ? 1 : 512; /* 512 words = 4 KiB */
    for (size_t k = 0; k < n; k += step) {
        int64_t want = ((int64_t)i * 7 * r_size + sum_r) * (int64_t)(k % 1000 + 1);
        R_CHECK(out[k] == want, "allreduce %zu B: word %zu is %lld, want %lld", bytes, k,
                (long long)out[k], (long long)want);
    }
    int64_t want = ((int64_t)i * 7 * r_size + sum_r) * (int64_t)((n - 1) % 1000 + 1);
    R_CHECK(out[n - 1] == want, "allreduce %zu B: last word wrong", bytes);
}

static double allreduce(size_t size, long n, int64_t *in, int64_t *out)
{
    size_t cnt = size / 8;
    double t = 0;
    for (long i = -2; i < n; i++) { /* 2 warm-up calls */
        for (size_t k = 0; k < cnt; k += 512)
            in[k] = red_in(i, r_rank, k);
        in[cnt - 1] = red_in(i, r_rank, cnt - 1);
        if (i == n - 1) /* the last call: fill everything, check everything */
            for (size_t k = 0; k < cnt; k++)
                in[k] = red_in(i, r_rank, k);
        if (i == 0)
            t = r_phase_begin();
        R_MPI(MPI_Allreduce(in, out, (int)cnt, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
        check_red(out, cnt, i, i == n - 1, size);
    }
    return r_now() - t;
}

static uint64_t a2a_seed(long i, int from, int to, size_t size)
{
    return ((uint64_t)i << 32) ^ ((uint64_t)from << 20) ^ ((uint64_t)to << 8) ^ size;
}

static double alltoall(size_t size, long n, unsigned char *sb, unsigned char *rb)
{
    double t = 0;
    for (long i = -2; i < n; i++) {
        for (int p = 0; p < r_size; p++)
            r_stamp(sb + (size_t)p * size, size, a2a_seed(i, r_rank, p, size));
        if (i == 0)
            t = r_phase_begin();
        R_MPI(MPI_Alltoall(sb, (int)size, MPI_BYTE, rb, (int)size, MPI_BYTE, MPI_COMM_WORLD));
        for (int p = 0; p < r_size; p++)
            r_check_stamp(rb + (size_t)p * size, size, a2a_seed(i, p, r_rank, size), "alltoall");
    }
    return r_now() - t;
}

static double bcast(size_t size, long n, unsigned char *buf)
{
    double t = 0;
    for (long i = -2; i < n; i++) {
        int root = (int)((i + 2) % r_size);
        uint64_t s = ((uint64_t)(i + 2) << 24) ^ size;
        if (r_rank == root)
            r_stamp(buf, size, s);
        if (i == 0)
            t = r_phase_begin();
        R_MPI(MPI_Bcast(buf, (int)size, MPI_BYTE, root, MPI_COMM_WORLD));
        r_check_stamp(buf, size, s, "bcast");
    }
    return r_now() - t;
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    int64_t *in = r_malloc(MAXSZ), *out = r_malloc(MAXSZ);
    unsigned char *sb = r_malloc(MAXSZ * (size_t)r_size), *rb = r_malloc(MAXSZ * (size_t)r_size);
    double t0 = r_phase_begin(), tot[3] = { 0, 0, 0 };
    for (size_t s = 0; s < NSIZES; s++) {
        long n = iters_for(sizes[s], 2000);
        double t = allreduce(sizes[s], n, in, out);
        tot[0] += t;
        r_result_size("allreduce", sizes[s], t / (double)n * 1e6);
    }
    for (size_t s = 0; s < NSIZES; s++) {
        long n = iters_for(sizes[s], 1000);
        double t = alltoall(sizes[s], n, sb, rb);
        tot[1] += t;
        r_result_size("alltoall", sizes[s], t / (double)n * 1e6);
    }
    for (size_t s = 0; s < NSIZES; s++) {
        long n = iters_for(sizes[s], 2000);
        double t = bcast(sizes[s], n, sb);
        tot[2] += t;
        r_result_size("bcast", sizes[s], t / (double)n * 1e6);
    }
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));
    r_result("phase", "allreduce", tot[0]);
    r_result("phase", "alltoall", tot[1]);
    r_result("phase", "bcast", tot[2]);
    r_result("wall", "-", r_now() - t0);
    if (r_rank == 0)
        printf("coll: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
