/* sendmodes.c -- synchronous and buffered sends.
 *
 * Usage: sendmodes [scale]  (an even number of ranks; pairs 0<->1, 2<->3, ...)
 * Phases (RESULT phase <name> <s>):
 *   ssend  ping-pong with MPI_Ssend/MPI_Recv, 8 B and 64 KiB alternating
 *   bsend  both ranks MPI_Bsend a burst of 16 messages (1 KiB and 32 KiB
 *          alternating) from an attached buffer, then MPI_Recv the peer's 16
 * Every message is stamped with its round and slot and checked.
 */
#include "real.h"

#define BURST 16
#define BIG 65536

static void ssend(long n, int peer, unsigned char *sb, unsigned char *rb)
{
    for (long i = 0; i < n; i++) {
        int len = i % 2 ? BIG : 8;
        if (r_rank % 2 == 0) {
            r_stamp(sb, (size_t)len, (uint64_t)i * 2);
            R_MPI(MPI_Ssend(sb, len, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
            R_MPI(MPI_Recv(rb, len, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            r_check_stamp(rb, (size_t)len, (uint64_t)i * 2 + 1, "ssend: reply");
        } else {
            R_MPI(MPI_Recv(rb, len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            r_check_stamp(rb, (size_t)len, (uint64_t)i * 2, "ssend: request");
            r_stamp(sb, (size_t)len, (uint64_t)i * 2 + 1);
            R_MPI(MPI_Ssend(sb, len, MPI_BYTE, peer, 2, MPI_COMM_WORLD));
        }
    }
}

static void bsend(long n, int peer, unsigned char *sb, unsigned char *rb)
{
    int need = 0, one;
    for (int k = 0; k < BURST; k++) {
        MPI_Pack_size(k % 2 ? 32768 : 1024, MPI_BYTE, MPI_COMM_WORLD, &one);
        need += one + MPI_BSEND_OVERHEAD;
    }
    void *att = r_malloc((size_t)need);
    R_MPI(MPI_Buffer_attach(att, need));
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < BURST; k++) {
            int len = k % 2 ? 32768 : 1024;
            r_stamp(sb, (size_t)len, ((uint64_t)i << 16) ^ ((uint64_t)r_rank << 8) ^ (uint64_t)k);
            R_MPI(MPI_Bsend(sb, len, MPI_BYTE, peer, k, MPI_COMM_WORLD)); /* sb reusable at once */
        }
        for (int k = 0; k < BURST; k++) {
            int len = k % 2 ? 32768 : 1024;
            R_MPI(MPI_Recv(rb, len, MPI_BYTE, peer, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            r_check_stamp(rb, (size_t)len, ((uint64_t)i << 16) ^ ((uint64_t)peer << 8) ^ (uint64_t)k,
                          "bsend");
        }
        /* the attached buffer holds one burst: wait until the peer has ours */
        R_MPI(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 99, NULL, 0, MPI_BYTE, peer, 99,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    void *got;
    int sz;
    R_MPI(MPI_Buffer_detach(&got, &sz));
    free(att);
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    r_require_even();
    int peer = r_peer();
    unsigned char *sb = r_malloc(BIG), *rb = r_malloc(BIG);
    double t0 = r_phase_begin(), t;
    t = r_phase_begin();
    ssend(r_iters(40000, 4), peer, sb, rb);
    r_phase_end("ssend", t);
    t = r_phase_begin();
    bsend(r_iters(4000, 2), peer, sb, rb);
    r_phase_end("bsend", t);
    r_result("wall", "-", r_now() - t0);
    if (r_rank == 0)
        printf("sendmodes: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
