/* pingpong.c -- ping-pong of every size class from 0 B to MAX (default 64 MiB).
 *
 * Usage: pingpong [max_bytes]
 * Sizes: 0, every power of 2, its neighbours +-1 up to 4 MiB, and sizes just
 * around the usual eager / rendezvous / max-send boundaries (4 KiB, 8 KiB,
 * 32 KiB, 64 KiB, 128 KiB, 1 MiB minus header-sized offsets), a few odd large
 * ones.  Each direction uses its own pattern, the receive buffer is poisoned
 * first and has guard bytes behind it, and source, tag and count are checked.
 */
#include "common.h"

#define GUARD 64
#define MAX_SIZES 512

static size_t sizes[MAX_SIZES];
static int nsizes;

static void add(size_t s, size_t max)
{
    int i;
    if (s > max)
        return;
    for (i = 0; i < nsizes; i++)
        if (sizes[i] == s)
            return;
    if (nsizes < MAX_SIZES)
        sizes[nsizes++] = s;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void build_sizes(size_t max)
{
    /* Boundaries of vader (4K eager, 32K rndv-eager/max-send), tcp (64K eager,
     * 128K max-send), a 1 MiB ring; offsets cover ob1's match/rndv headers. */
    static const size_t limits[] = { 4096, 8192, 32768, 65536, 131072, 1 << 20 };
    static const long offs[] = { -64, -56, -40, -32, -24, -16, -14, -8, -1, 1, 8 };
    size_t i, j;
    int k;
    add(0, max);
    for (k = 0; k <= 26; k++) {
        size_t p = (size_t)1 << k;
        add(p, max);
        if (k >= 1 && k <= 22) {
            add(p - 1, max);
            add(p + 1, max);
        }
    }
    for (i = 0; i < sizeof limits / sizeof limits[0]; i++)
        for (j = 0; j < sizeof offs / sizeof offs[0]; j++)
            add((size_t)((long)limits[i] + offs[j]), max);
    add(3 * 1000 * 1000 + 7, max);
    add((33u << 20) + 13, max);
    add((64u << 20) - 1, max);
    add(max, max);
    qsort(sizes, (size_t)nsizes, sizeof sizes[0], cmp_size);
}

static int iterations(size_t s)
{
    if (s <= 65536)
        return 10;
    if (s <= (1u << 20))
        return 4;
    if (s <= (8u << 20))
        return 2;
    return 1;
}

static void recv_checked(unsigned char *buf, size_t size, int from, int tag, uint64_t seed,
                         const char *dir, int it)
{
    MPI_Status st;
    int count = -1;
    memset(buf, 0xA5, size + GUARD);
    MPI_Recv(buf, (int)(size + GUARD), MPI_BYTE, from, tag, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == (int)size, "%s size %zu iter %d: count %d", dir, size, it, count);
    CHECK(st.MPI_SOURCE == from, "%s size %zu: source %d", dir, size, st.MPI_SOURCE);
    CHECK(st.MPI_TAG == tag, "%s size %zu: tag %d", dir, size, st.MPI_TAG);
    CHECK_PATTERN(buf, size, seed, "%s size %zu iter %d from %d", dir, size, it, from);
    for (size_t g = 0; g < GUARD; g++)
        if (buf[size + g] != 0xA5) {
            CHECK(0, "%s size %zu: guard byte %zu overwritten", dir, size, g);
            break;
        }
}

int main(int argc, char **argv)
{
    size_t max = (size_t)64 << 20;
    int partner, i, it;
    unsigned char *sbuf, *rbuf;
    double t0, tmax = 0;

    t_init(&argc, &argv);
    if (argc > 1)
        max = (size_t)strtoull(argv[1], NULL, 0);
    build_sizes(max);
    partner = t_partner(t_rank, t_size);
    sbuf = t_malloc(max);
    rbuf = t_malloc(max + GUARD);

    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < nsizes && partner >= 0; i++) {
        size_t s = sizes[i];
        int tag = i % 1000;
        int initiator = t_rank < partner;
        for (it = 0; it < iterations(s); it++) {
            /* seed: size index, iteration, direction, and the sending rank */
            uint64_t ping = ((uint64_t)i << 20) | ((uint64_t)it << 4) | 0;
            uint64_t pong = ((uint64_t)i << 20) | ((uint64_t)it << 4) | 1;
            int lo = initiator ? t_rank : partner;
            ping ^= (uint64_t)lo << 32;
            pong ^= (uint64_t)lo << 32;
            t0 = MPI_Wtime();
            if (initiator) {
                t_fill(sbuf, s, ping);
                MPI_Send(sbuf, (int)s, MPI_BYTE, partner, tag, MPI_COMM_WORLD);
                recv_checked(rbuf, s, partner, tag, pong, "pong", it);
            } else {
                recv_checked(rbuf, s, partner, tag, ping, "ping", it);
                t_fill(sbuf, s, pong);
                MPI_Send(sbuf, (int)s, MPI_BYTE, partner, tag, MPI_COMM_WORLD);
            }
            if (s == max && MPI_Wtime() - t0 > tmax)
                tmax = MPI_Wtime() - t0;
        }
    }
    if (t_rank == 0 && partner >= 0)
        printf("pingpong: %d sizes 0..%zu, largest round trip %.3f s (incl. pattern work)\n",
               nsizes, max, tmax);
    free(sbuf);
    free(rbuf);
    return t_finish("pingpong");
}
