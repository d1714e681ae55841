/* shm_full.c -- traffic between every pair of ranks, for a shared-memory
 * directory too small to hold a ring per pair (mpi-tests/shm_full.sh).
 *
 * Phases, each checked byte for byte:
 *   1. MPI_Alltoall at 8 B, 4 KiB and 64 KiB per pair (rounds with fresh
 *      patterns);
 *   2. every pair exchanges `big` bytes (argv[1], default 1 MiB) with
 *      MPI_Sendrecv: large contiguous messages (ob1 RGET, or fragments of
 *      max_send_size through the ring or its bulk buffer);
 *   3. MPI_Alltoallv with per-pair sizes from 0 to 200 KB.
 * Rank 0 prints "shm_full: OK (N ranks)" when every check passed.
 */
#include "common.h"

static uint64_t seed(int phase, int round, int src, int dst)
{
    return ((uint64_t)phase << 34) | ((uint64_t)round << 28) | ((uint64_t)src << 14) | (uint64_t)dst;
}

static void alltoall(int round, size_t each)
{
    unsigned char *out = t_malloc(each * (size_t)t_size), *in = t_malloc(each * (size_t)t_size);
    for (int d = 0; d < t_size; d++)
        t_fill(out + each * (size_t)d, each, seed(1, round, t_rank, d));
    memset(in, 0x5A, each * (size_t)t_size);
    int rc = MPI_Alltoall(out, (int)each, MPI_BYTE, in, (int)each, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "MPI_Alltoall of %zu B per pair returned %d", each, rc);
    for (int s = 0; s < t_size; s++)
        CHECK_PATTERN(in + each * (size_t)s, each, seed(1, round, s, t_rank),
                      "alltoall round %d, %zu B from rank %d", round, each, s);
    free(out);
    free(in);
}

static void pairs(size_t big)
{
    unsigned char *out = t_malloc(big), *in = t_malloc(big);
    for (int step = 1; step < t_size; step++) {
        int to = (t_rank + step) % t_size, from = (t_rank - step + t_size) % t_size;
        t_fill(out, big, seed(2, step, t_rank, to));
        memset(in, 0x5A, big);
        MPI_Status st;
        int rc = MPI_Sendrecv(out, (int)big, MPI_BYTE, to, step, in, (int)big, MPI_BYTE, from, step,
                              MPI_COMM_WORLD, &st);
        CHECK(rc == MPI_SUCCESS, "MPI_Sendrecv of %zu B returned %d", big, rc);
        int n = -1;
        MPI_Get_count(&st, MPI_BYTE, &n);
        CHECK(n == (int)big && st.MPI_SOURCE == from, "sendrecv from %d: %d bytes from %d", from, n,
              st.MPI_SOURCE);
        CHECK_PATTERN(in, big, seed(2, step, from, t_rank), "sendrecv of %zu B from rank %d", big, from);
    }
    free(out);
    free(in);
}

static int vlen(int src, int dst)
{
    static const int sz[] = { 0, 1, 100, 4000, 70000, 200000, 64 };
    return sz[(src * 3 + dst) % 7];
}

static void alltoallv(void)
{
    int *sc = t_malloc(sizeof(int) * (size_t)t_size), *sd = t_malloc(sizeof(int) * (size_t)t_size);
    int *rc_ = t_malloc(sizeof(int) * (size_t)t_size), *rd = t_malloc(sizeof(int) * (size_t)t_size);
    int st = 0, rt = 0;
    for (int p = 0; p < t_size; p++) {
        sc[p] = vlen(t_rank, p);
        sd[p] = st;
        st += sc[p];
        rc_[p] = vlen(p, t_rank);
        rd[p] = rt;
        rt += rc_[p];
    }
    unsigned char *out = t_malloc((size_t)st), *in = t_malloc((size_t)rt);
    for (int p = 0; p < t_size; p++)
        t_fill(out + sd[p], (size_t)sc[p], seed(3, 0, t_rank, p));
    memset(in, 0x5A, (size_t)rt);
    int rc = MPI_Alltoallv(out, sc, sd, MPI_BYTE, in, rc_, rd, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "MPI_Alltoallv returned %d", rc);
    for (int p = 0; p < t_size; p++)
        CHECK_PATTERN(in + rd[p], (size_t)rc_[p], seed(3, 0, p, t_rank), "alltoallv from rank %d", p);
    free(out);
    free(in);
    free(sc);
    free(sd);
    free(rc_);
    free(rd);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* errors come back as codes and are counted as failed checks */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    size_t big = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (size_t)1 << 20;
    const size_t sizes[] = { 8, 4096, 65536 };
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++)
            alltoall(round * 3 + i, sizes[i]);
    pairs(big);
    alltoallv();
    return t_finish("shm_full");
}
