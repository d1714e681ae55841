/* bidir.c -- two-way windows of nonblocking messages.
 *
 * Usage: bidir [scale]    (an even number of ranks; pairs 0<->1, 2<->3, ...)
 * For each N from 1 KiB to 4 MiB, each rank of a pair posts 64 MPI_Irecv of
 * N bytes from its peer and 64 MPI_Isend of N bytes to it, then MPI_Waitall;
 * repeated.  Prints, per size, the bytes both ranks of pair 0 received per
 * second (both directions together):
 *   RESULT bidir <N> <MB/s, 10^6 bytes/s>
 * Every message carries its (size, round, window slot) in stamps checked on
 * arrival.  The number of rounds per size is fixed (about 64 MiB per
 * direction at scale 1, at least 2), not fitted to the transport's speed.
 */
#include "real.h"

#define WINDOW 64
#define MINSZ ((size_t)1 << 10)
#define MAXSZ ((size_t)4 << 20)

static uint64_t seed(int from, size_t size, long round, int slot)
{
    return ((uint64_t)from << 56) ^ ((uint64_t)size << 24) ^ ((uint64_t)round << 8) ^ (uint64_t)slot;
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    r_require_even();
    int peer = r_peer();
    unsigned char *sb = r_malloc(MAXSZ * WINDOW), *rb = r_malloc(MAXSZ * WINDOW);
    MPI_Request rq[2 * WINDOW];
    double t0 = r_phase_begin();

    for (size_t size = MINSZ; size <= MAXSZ; size *= 2) {
        long rounds = r_iters((long)(((size_t)64 << 20) / (size * WINDOW)), 2);
        if (rounds > 200)
            rounds = r_iters(200, 2);
        double t = 0;
        for (long i = -1; i < rounds; i++) { /* one warm-up round */
            if (i == 0)
                t = r_phase_begin();
            for (int w = 0; w < WINDOW; w++)
                R_MPI(MPI_Irecv(rb + (size_t)w * size, (int)size, MPI_BYTE, peer, w,
                                MPI_COMM_WORLD, &rq[w]));
            for (int w = 0; w < WINDOW; w++) {
                r_stamp(sb + (size_t)w * size, size, seed(r_rank, size, i, w));
                R_MPI(MPI_Isend(sb + (size_t)w * size, (int)size, MPI_BYTE, peer, w,
                                MPI_COMM_WORLD, &rq[WINDOW + w]));
            }
            R_MPI(MPI_Waitall(2 * WINDOW, rq, MPI_STATUSES_IGNORE));
            for (int w = 0; w < WINDOW; w++)
                r_check_stamp(rb + (size_t)w * size, size, seed(peer, size, i, w), "bidir");
        }
        t = r_now() - t;
        r_result_size("bidir", size, 2.0 * (double)size * WINDOW * (double)rounds / t / 1e6);
    }
    r_result("wall", "-", r_now() - t0);
    if (r_rank == 0)
        printf("bidir: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
