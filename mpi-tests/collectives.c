/* collectives.c -- Bcast, Allreduce, Reduce, Alltoall(v), Allgather, Comm_split.
 *
 * All values are computed from (rank, index) so every rank knows what it must
 * receive; sizes span eager and segmented/pipelined algorithm paths.
 */
#include "common.h"

static void test_bcast(MPI_Comm comm, const char *cname)
{
    static const size_t sizes[] = { 1, 13, 4096, 65537, (1u << 20) + 3 };
    int rank, size, root;
    size_t i;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    unsigned char *buf = t_malloc((1u << 20) + 3);
    for (root = 0; root < size; root++)
        for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            uint64_t seed = 0xB0000 + (uint64_t)root * 16 + i;
            if (rank == root)
                t_fill(buf, sizes[i], seed);
            else
                memset(buf, 0xEE, sizes[i]);
            MPI_Bcast(buf, (int)sizes[i], MPI_BYTE, root, comm);
            CHECK_PATTERN(buf, sizes[i], seed, "%s Bcast root %d size %zu", cname, root, sizes[i]);
        }
    free(buf);
}

static void test_allreduce(MPI_Comm comm, const char *cname)
{
    static const int counts[] = { 1, 1000, 300000 };
    int rank, size, c;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (c = 0; c < 3; c++) {
        int n = counts[c], i;
        long long *v = t_malloc(sizeof(long long) * (size_t)n), *sum = t_malloc(sizeof(long long) * (size_t)n),
                  *mx = t_malloc(sizeof(long long) * (size_t)n), *mn = t_malloc(sizeof(long long) * (size_t)n);
        double *d = t_malloc(sizeof(double) * (size_t)n);
        for (i = 0; i < n; i++)
            v[i] = (long long)rank * i + 1;
        MPI_Allreduce(v, sum, n, MPI_LONG_LONG, MPI_SUM, comm);
        MPI_Allreduce(v, mx, n, MPI_LONG_LONG, MPI_MAX, comm);
        MPI_Allreduce(v, mn, n, MPI_LONG_LONG, MPI_MIN, comm);
        /* in place, doubles exactly representable: rank + 0.5 */
        for (i = 0; i < n; i++)
            d[i] = rank + 0.5 + i;
        MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_DOUBLE, MPI_SUM, comm);
        long bad = 0;
        long long tri = (long long)size * (size - 1) / 2;
        for (i = 0; i < n; i++) {
            bad += sum[i] != tri * i + size;
            bad += mx[i] != (long long)(size - 1) * i + 1;
            bad += mn[i] != 1;
            bad += d[i] != (double)tri + 0.5 * size + (double)size * i;
        }
        CHECK(bad == 0, "%s Allreduce count %d: %ld wrong elements", cname, n, bad);

        /* Reduce to the last rank */
        memset(sum, 0, sizeof(long long) * (size_t)n);
        MPI_Reduce(v, sum, n, MPI_LONG_LONG, MPI_SUM, size - 1, comm);
        if (rank == size - 1) {
            bad = 0;
            for (i = 0; i < n; i++)
                bad += sum[i] != tri * i + size;
            CHECK(bad == 0, "%s Reduce count %d: %ld wrong", cname, n, bad);
        }
        free(v); free(sum); free(mx); free(mn); free(d);
    }
    /* MAXLOC: value (rank * 7) % size is largest at a known rank */
    struct { double v; int r; } in = { (double)((rank * 7) % size), rank }, out;
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm);
    int best = 0;
    for (int r = 0; r < size; r++)
        if ((r * 7) % size > (best * 7) % size)
            best = r;
    CHECK(out.v == (double)((best * 7) % size) && out.r == best, "%s MAXLOC got (%g,%d) want rank %d",
          cname, out.v, out.r, best);
}

static void test_alltoall(MPI_Comm comm, const char *cname)
{
    static const int counts[] = { 3, 20000 }; /* 12 B and 80 KB per pair */
    int rank, size, c, s, j;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (c = 0; c < 2; c++) {
        int n = counts[c];
        int *sb = t_malloc(sizeof(int) * (size_t)n * size), *rb = t_malloc(sizeof(int) * (size_t)n * size);
        for (s = 0; s < size; s++)
            for (j = 0; j < n; j++)
                sb[(size_t)s * n + j] = rank * 1000003 + s * 10007 + j;
        memset(rb, 0xFF, sizeof(int) * (size_t)n * size);
        MPI_Alltoall(sb, n, MPI_INT, rb, n, MPI_INT, comm);
        long bad = 0;
        for (s = 0; s < size; s++)
            for (j = 0; j < n; j++)
                bad += rb[(size_t)s * n + j] != s * 1000003 + rank * 10007 + j;
        CHECK(bad == 0, "%s Alltoall %d ints: %ld wrong", cname, n, bad);
        free(sb);
        free(rb);
    }
    /* Alltoallv: s sends (s + 2d) % 5 * 1000 + 1 ints to d */
    {
        int *sc = t_malloc(sizeof(int) * size), *sd = t_malloc(sizeof(int) * size);
        int *rc = t_malloc(sizeof(int) * size), *rd = t_malloc(sizeof(int) * size);
        int st = 0, rt = 0;
        for (s = 0; s < size; s++) {
            sc[s] = (rank + 2 * s) % 5 * 1000 + 1;
            sd[s] = st;
            st += sc[s];
            rc[s] = (s + 2 * rank) % 5 * 1000 + 1;
            rd[s] = rt;
            rt += rc[s];
        }
        int *sb = t_malloc(sizeof(int) * st), *rb = t_malloc(sizeof(int) * rt);
        for (s = 0; s < size; s++)
            for (j = 0; j < sc[s]; j++)
                sb[sd[s] + j] = rank * 7919 + s * 104729 + j;
        memset(rb, 0xFF, sizeof(int) * rt);
        MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, comm);
        long bad = 0;
        for (s = 0; s < size; s++)
            for (j = 0; j < rc[s]; j++)
                bad += rb[rd[s] + j] != s * 7919 + rank * 104729 + j;
        CHECK(bad == 0, "%s Alltoallv: %ld wrong", cname, bad);
        free(sc); free(sd); free(rc); free(rd); free(sb); free(rb);
    }
    /* Allgather */
    {
        int *g = t_malloc(sizeof(int) * 2 * size), mine[2] = { rank * 3 + 1, -rank };
        MPI_Allgather(mine, 2, MPI_INT, g, 2, MPI_INT, comm);
        long bad = 0;
        for (s = 0; s < size; s++)
            bad += g[2 * s] != s * 3 + 1 || g[2 * s + 1] != -s;
        CHECK(bad == 0, "%s Allgather: %ld wrong", cname, bad);
        free(g);
    }
}

static void test_split(void)
{
    MPI_Comm sub, none, dup;
    int color = t_rank % 2, srank, ssize, i, members = 0, above = 0, sum = 0;
    /* key = -rank: the new ranks run in reverse world order */
    MPI_Comm_split(MPI_COMM_WORLD, color, -t_rank, &sub);
    MPI_Comm_rank(sub, &srank);
    MPI_Comm_size(sub, &ssize);
    for (i = 0; i < t_size; i++)
        if (i % 2 == color) {
            members++;
            sum += i;
            above += i > t_rank;
        }
    CHECK(ssize == members && srank == above, "Comm_split: rank %d size %d, expected %d %d", srank, ssize,
          above, members);
    int tot = -1;
    MPI_Allreduce(&t_rank, &tot, 1, MPI_INT, MPI_SUM, sub);
    CHECK(tot == sum, "Allreduce in split comm: %d expected %d", tot, sum);
    /* sub rank 0 is the highest world rank of this colour */
    int v = t_rank;
    MPI_Bcast(&v, 1, MPI_INT, 0, sub);
    int top = -1;
    for (i = 0; i < t_size; i++)
        if (i % 2 == color)
            top = i;
    CHECK(v == top, "Bcast in split comm: %d expected %d", v, top);
    test_bcast(sub, "split");
    test_allreduce(sub, "split");
    test_alltoall(sub, "split");
    /* point-to-point in the sub communicator must not match world traffic */
    if (ssize > 1) {
        int to = (srank + 1) % ssize, from = (srank + ssize - 1) % ssize, got = -1;
        MPI_Sendrecv(&t_rank, 1, MPI_INT, to, 5, &got, 1, MPI_INT, from, 5, sub, MPI_STATUS_IGNORE);
        /* from (sub rank) is world rank top - 2*from */
        CHECK(got == top - 2 * from, "Sendrecv in split comm: got %d expected %d", got, top - 2 * from);
    }
    MPI_Comm_free(&sub);

    /* MPI_UNDEFINED colour yields MPI_COMM_NULL */
    MPI_Comm_split(MPI_COMM_WORLD, t_rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    if (t_rank == 0)
        CHECK(none == MPI_COMM_NULL, "split with MPI_UNDEFINED did not give MPI_COMM_NULL");
    else {
        int n = -1;
        MPI_Comm_size(none, &n);
        CHECK(n == t_size - 1, "split without rank 0 has %d ranks", n);
        MPI_Comm_free(&none);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    test_allreduce(dup, "dup");
    MPI_Comm_free(&dup);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    test_bcast(MPI_COMM_WORLD, "world");
    test_allreduce(MPI_COMM_WORLD, "world");
    test_alltoall(MPI_COMM_WORLD, "world");
    test_split();
    MPI_Barrier(MPI_COMM_WORLD);
    return t_finish("collectives");
}
