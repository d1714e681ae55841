/* tcp_protocols.c -- every ob1 protocol over the doorbell TCP module,
 * both ways at once, data checked.
 *
 * Usage: tcp_protocols   (2 ranks; run with btl_doorbell_force_tcp 1)
 * Each rank posts a window of 16 MPI_Irecv and 16 MPI_Isend of N bytes to
 * the other, then MPI_Waitall, 4 times per N.  The sizes straddle the TCP
 * module's limits: eager (up to 64 KiB with headers), rendezvous with
 * fragments (below btl_doorbell_tcp_min_rget_size; run.sh sets 128 KiB) and
 * RGET (reads of the sender's buffer).  Run with a larger min_rget_size
 * the rendezvous covers messages longer than max_send_size too: ob1 must
 * then send them in fragments, never ask our sender for a btl_put (the
 * module has none: before the module set btl_min_rdma_pipeline_size, such
 * a message made the receiver request a PUT and the sender call NULL).
 * Prints "tcp_protocols: OK".
 */
#include "common.h"

#define WINDOW 16
#define ROUNDS 4

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1000,        48 << 10,         (64 << 10) - 64, 64 << 10,
                                   96 << 10,    (128 << 10) - 1,  128 << 10,       200 << 10,
                                   1 << 20,     (3 << 20) + 123};
    const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    const size_t max = (3 << 20) + 123;

    t_init(&argc, &argv);
    if (t_size != 2) {
        if (t_rank == 0)
            fprintf(stderr, "tcp_protocols: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - t_rank;
    unsigned char *sb = t_malloc(max * WINDOW), *rb = t_malloc(max * WINDOW);
    MPI_Request rq[2 * WINDOW];

    for (size_t s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        for (int round = 0; round < ROUNDS; round++) {
            memset(rb, 0, n * WINDOW);
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(rb + (size_t)w * n, (int)n, MPI_BYTE, peer, w, MPI_COMM_WORLD, &rq[w]);
            for (int w = 0; w < WINDOW; w++) {
                uint64_t seed = ((uint64_t)t_rank << 32) ^ (s << 16) ^ ((uint64_t)round << 8) ^ (uint64_t)w;
                t_fill(sb + (size_t)w * n, n, seed);
                MPI_Isend(sb + (size_t)w * n, (int)n, MPI_BYTE, peer, w, MPI_COMM_WORLD, &rq[WINDOW + w]);
            }
            MPI_Waitall(2 * WINDOW, rq, MPI_STATUSES_IGNORE);
            for (int w = 0; w < WINDOW; w++) {
                uint64_t seed = ((uint64_t)peer << 32) ^ (s << 16) ^ ((uint64_t)round << 8) ^ (uint64_t)w;
                CHECK_PATTERN(rb + (size_t)w * n, n, seed, "%zu bytes, round %d, slot %d", n, round, w);
            }
        }
    }
    free(sb);
    free(rb);
    return t_finish("tcp_protocols");
}
