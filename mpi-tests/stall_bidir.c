/* stall_bidir.c -- two-way windows must not stall.
 *
 * Usage: stall_bidir   (an even number of ranks; pairs 0<->1, ...)
 * Each rank of a pair posts 64 MPI_Irecv and 64 MPI_Isend of N bytes to its
 * peer, then MPI_Waitall; repeated.  N = 16 KiB (100 windows), 32 KiB (100)
 * and 1 MiB (10).  Every message is checked and each size's rate printed.
 * A transport that waits on a timeout while both rings or sockets are full
 * is caught by the counters the run prints at finalize (mpi-tests/stalls.sh),
 * not by its rate: a loaded machine's healthy rate and a stalled one's
 * overlap.  A size that runs over the 30 s watchdog is cut short, which
 * only bounds the run.
 * Prints "stall_bidir: OK".
 */
#include "common.h"

#define WINDOW 64
#define CUT_S 30.0

static uint64_t seed(int from, size_t size, long round, int slot)
{
    return ((uint64_t)from << 50) ^ ((uint64_t)size << 20) ^ ((uint64_t)round << 7) ^ (uint64_t)slot;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_size % 2) {
        fprintf(stderr, "stall_bidir: needs an even number of ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = t_rank ^ 1;
    static const struct { size_t size; long rounds; } runs[] = {
        { 16384, 100 }, { 32768, 100 }, { 1 << 20, 10 } };
    size_t max = 1 << 20;
    unsigned char *sb = t_malloc(max * WINDOW), *rb = t_malloc(max * WINDOW);
    memset(sb, 0, max * WINDOW);
    memset(rb, 0, max * WINDOW);
    MPI_Request rq[2 * WINDOW];
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        size_t size = runs[r].size;
        long i;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = t_now();
        for (i = 0; i < runs[r].rounds; i++) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(rb + size * (size_t)w, (int)size, MPI_BYTE, peer, w, MPI_COMM_WORLD, &rq[w]);
            for (int w = 0; w < WINDOW; w++) {
                unsigned char *p = sb + size * (size_t)w;
                /* stamp both ends and the middle: cheap, and any stale chunk shows */
                uint64_t s = seed(t_rank, size, i, w);
                memcpy(p, &s, 8);
                memcpy(p + size / 2, &s, 8);
                memcpy(p + size - 8, &s, 8);
                MPI_Isend(p, (int)size, MPI_BYTE, peer, w, MPI_COMM_WORLD, &rq[WINDOW + w]);
            }
            MPI_Waitall(2 * WINDOW, rq, MPI_STATUSES_IGNORE);
            for (int w = 0; w < WINDOW; w++) {
                unsigned char *p = rb + size * (size_t)w;
                uint64_t s = seed(peer, size, i, w), a, b, c;
                memcpy(&a, p, 8);
                memcpy(&b, p + size / 2, 8);
                memcpy(&c, p + size - 8, 8);
                CHECK(a == s && b == s && c == s, "size %zu window %ld message %d: wrong data", size, i, w);
            }
            int late = t_now() - t0 > CUT_S;
            MPI_Allreduce(MPI_IN_PLACE, &late, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (late) {
                i++;
                break;
            }
        }
        double t = t_now() - t0, worst;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double rate = 2.0 * (double)size * WINDOW * (double)i / worst / 1e6;
        if (t_rank == 0) {
            printf("stall_bidir: 64 x %7zu B: %3ld windows in %.3f s, %8.0f MB/s%s\n", size, i, worst, rate,
                   i < runs[r].rounds ? ", cut short at the watchdog" : "");
            fflush(stdout);
        }
    }
    free(sb);
    free(rb);
    return t_finish("stall_bidir");
}
