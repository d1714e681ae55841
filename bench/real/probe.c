/* probe.c -- matched probe: messages of sizes the receiver learns only by
 * probing.
 *
 * Usage: probe [scale]    (an even number of ranks; pairs 0<->1, 2<->3, ...)
 * Phases (RESULT phase <name> <s>):
 *   mprobe   ping-pong: MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG), MPI_Get_count,
 *            allocate, MPI_Mrecv, send the message back the same way
 *   improbe  the same, waiting in a loop of MPI_Improbe
 * Sizes cycle through 0 B .. 96 KiB (eager and rendezvous); the tag carries
 * the round, the data its stamp, both checked.
 */
#include "real.h"

static const int sizes[] = { 0, 8, 100, 1024, 4000, 16384, 65000, 98304 };
#define NS ((long)(sizeof sizes / sizeof sizes[0]))

static int use_improbe;

/* Receive whatever comes next from anybody; check it is round i from peer. */
static void recv_probed(unsigned char **buf, int *len, long i, int peer)
{
    MPI_Message msg;
    MPI_Status st;
    if (use_improbe) {
        int found = 0;
        while (!found)
            R_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &found, &msg, &st));
    } else {
        R_MPI(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st));
    }
    R_CHECK(st.MPI_SOURCE == peer, "probe: message from rank %d, want %d", st.MPI_SOURCE, peer);
    R_CHECK(st.MPI_TAG == (int)(i % 30000), "probe: tag %d, want %ld", st.MPI_TAG, i % 30000);
    R_MPI(MPI_Get_count(&st, MPI_BYTE, len));
    R_CHECK(*len == sizes[i % NS], "probe: %d bytes, want %d", *len, sizes[i % NS]);
    *buf = malloc((size_t)*len + 1);
    R_CHECK(*buf != NULL, "out of memory");
    R_MPI(MPI_Mrecv(*buf, *len, MPI_BYTE, &msg, MPI_STATUS_IGNORE));
    R_CHECK(msg == MPI_MESSAGE_NULL, "probe: message handle not freed by MPI_Mrecv");
}

static void run(long n)
{
    int peer = r_peer();
    for (long i = 0; i < n; i++) {
        int len = sizes[i % NS];
        uint64_t s = ((uint64_t)i << 8) ^ (uint64_t)len;
        unsigned char *buf;
        if (r_rank % 2 == 0) {
            buf = malloc((size_t)len + 1);
            R_CHECK(buf != NULL, "out of memory");
            r_stamp(buf, (size_t)len, s ^ 0xA);
            R_MPI(MPI_Send(buf, len, MPI_BYTE, peer, (int)(i % 30000), MPI_COMM_WORLD));
            free(buf);
            recv_probed(&buf, &len, i, peer);
            r_check_stamp(buf, (size_t)len, s ^ 0xB, "probe: echo");
        } else {
            recv_probed(&buf, &len, i, peer);
            r_check_stamp(buf, (size_t)len, s ^ 0xA, "probe: request");
            r_stamp(buf, (size_t)len, s ^ 0xB);
            R_MPI(MPI_Send(buf, len, MPI_BYTE, peer, (int)(i % 30000), MPI_COMM_WORLD));
        }
        free(buf);
    }
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    r_require_even();
    double t0 = r_phase_begin(), t;
    use_improbe = 0;
    t = r_phase_begin();
    run(r_iters(40000, 8));
    r_phase_end("mprobe", t);
    use_improbe = 1;
    t = r_phase_begin();
    run(r_iters(40000, 8));
    r_phase_end("improbe", t);
    r_result("wall", "-", r_now() - t0);
    if (r_rank == 0)
        printf("probe: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
