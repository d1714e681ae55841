/* testcompute.c -- compute in chunks, MPI_Test between them, until a message
 * that arrives late completes.
 *
 * Usage: testcompute [scale]  (an even number of ranks; pairs 0<->1, ...)
 * Each round one rank of a pair (alternating) computes for 1 ms and then
 * sends 1 KiB; the other posts MPI_Irecv at once and computes chunks of
 * ~50 us with an MPI_Test after each, until the message is in.  Ideal wall
 * time: rounds x (1 ms + one latency + at most one chunk).  A transport that
 * makes MPI_Test sleep or miss the message shows as extra time.
 *   RESULT wall - <s>, RESULT chunks - <mean chunks per round>
 */
#include "real.h"

#define LEN 1024
#define DELAY_US 1000.0
#define CHUNK_US 50.0

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    r_require_even();
    int peer = r_peer();
    unsigned char buf[LEN];
    long n = r_iters(500, 4), chunks = 0, waiting = 0;
    double t0 = r_phase_begin();
    for (long i = 0; i < n; i++) {
        int sender = (int)(i % 2) == r_rank % 2;
        if (sender) {
            r_compute_us(DELAY_US);
            r_stamp(buf, LEN, (uint64_t)i * 3 + 1);
            R_MPI(MPI_Send(buf, LEN, MPI_BYTE, peer, (int)(i % 1000), MPI_COMM_WORLD));
        } else {
            MPI_Request rq;
            int done = 0;
            memset(buf, 0, LEN);
            R_MPI(MPI_Irecv(buf, LEN, MPI_BYTE, peer, (int)(i % 1000), MPI_COMM_WORLD, &rq));
            while (!done) {
                r_compute_us(CHUNK_US);
                chunks++;
                R_MPI(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
            }
            waiting++;
            r_check_stamp(buf, LEN, (uint64_t)i * 3 + 1, "testcompute");
        }
    }
    double wall = r_phase_end("loop", t0);
    r_result("wall", "-", wall);
    r_result("chunks", "-", waiting ? (double)chunks / (double)waiting : 0);
    if (r_rank == 0)
        printf("testcompute: OK (%d ranks, %.1f ms per round, ideal ~%.1f)\n", r_size,
               wall / (double)n * 1e3, DELAY_US * 1e-3);
    MPI_Finalize();
    return 0;
}
