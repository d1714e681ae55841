/* threads.c -- MPI_THREAD_MULTIPLE: several threads talk to the peer at
 * once, and one more thread sends to itself.
 *
 * Usage: threads [scale]  (an even number of ranks; pairs 0<->1, 2<->3, ...)
 * NTHREADS threads per rank each run a ping-pong with the same thread of the
 * peer (tag = thread number; 64 B and 16 KiB alternating); one extra thread
 * loops MPI_Isend to its own rank + MPI_Recv + MPI_Wait (btl self).  Every
 * message is stamped with (thread, round) and checked.
 *   RESULT wall - <s>
 */
#include "real.h"

#include <pthread.h>

#define NTHREADS 3
#define BIG 16384

static long rounds, self_rounds;
static int peer;

static void *pingpong(void *arg)
{
    int t = (int)(intptr_t)arg;
    unsigned char *sb = malloc(BIG), *rb = malloc(BIG);
    R_CHECK(sb && rb, "out of memory");
    for (long i = 0; i < rounds; i++) {
        int len = i % 2 ? BIG : 64;
        uint64_t s = ((uint64_t)t << 40) ^ ((uint64_t)i << 1);
        if (r_rank % 2 == 0) {
            r_stamp(sb, (size_t)len, s);
            R_MPI(MPI_Send(sb, len, MPI_BYTE, peer, t, MPI_COMM_WORLD));
            R_MPI(MPI_Recv(rb, len, MPI_BYTE, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            r_check_stamp(rb, (size_t)len, s | 1, "threads: reply");
        } else {
            R_MPI(MPI_Recv(rb, len, MPI_BYTE, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            r_check_stamp(rb, (size_t)len, s, "threads: request");
            r_stamp(sb, (size_t)len, s | 1);
            R_MPI(MPI_Send(sb, len, MPI_BYTE, peer, t, MPI_COMM_WORLD));
        }
    }
    free(sb);
    free(rb);
    return NULL;
}

static void *to_self(void *arg)
{
    (void)arg;
    unsigned char sb[256], rb[256];
    for (long i = 0; i < self_rounds; i++) {
        MPI_Request rq;
        r_stamp(sb, sizeof sb, ((uint64_t)r_rank << 32) ^ (uint64_t)i);
        R_MPI(MPI_Isend(sb, sizeof sb, MPI_BYTE, r_rank, 1000, MPI_COMM_WORLD, &rq));
        R_MPI(MPI_Recv(rb, sizeof rb, MPI_BYTE, r_rank, 1000, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        R_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        r_check_stamp(rb, sizeof rb, ((uint64_t)r_rank << 32) ^ (uint64_t)i, "threads: self");
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    r_setup(argc, argv);
    if (provided < MPI_THREAD_MULTIPLE)
        r_fail("MPI_THREAD_MULTIPLE not provided (got level %d)", provided);
    r_require_even();
    peer = r_peer();
    rounds = r_iters(1000, 4);
    self_rounds = r_iters(1000, 4);
    pthread_t th[NTHREADS + 1];
    double t0 = r_phase_begin();
    for (int t = 0; t < NTHREADS; t++)
        R_CHECK(pthread_create(&th[t], NULL, pingpong, (void *)(intptr_t)t) == 0, "pthread_create");
    R_CHECK(pthread_create(&th[NTHREADS], NULL, to_self, NULL) == 0, "pthread_create");
    for (int t = 0; t <= NTHREADS; t++)
        pthread_join(th[t], NULL);
    r_result("wall", "-", r_phase_end("all", t0));
    if (r_rank == 0)
        printf("threads: OK (%d ranks, %d threads + 1 to self)\n", r_size, NTHREADS);
    MPI_Finalize();
    return 0;
}
