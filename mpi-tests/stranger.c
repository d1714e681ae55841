/* stranger.c -- the victim of stranger_attack.py.
 *
 * Usage: stranger [seconds]   (default 4)
 * Two ranks exchange checked messages for a few seconds, with pauses, while
 * a stranger on the node connects to their doorbell TCP ports and sends the
 * old protocol's hello (for task 0, task 1 and task 9999) with forged ob1
 * frames claiming rank 1, a forged goodbye, garbage, and a new-protocol
 * hello with a wrong key.  None of it may be delivered, reported as a lost
 * peer, or end the job: rank 0 prints "stranger: OK" and the job exits 0.
 * Every message and tag is checked, and any extra message (a forged frame
 * matched to a receive) shows up as a failed check or an unexpected probe.
 */
#include "common.h"

#define COUNT 4096

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    double seconds = argc > 1 ? atof(argv[1]) : 4.0;
    int peer = t_partner(t_rank, t_size);
    char *buf = t_malloc(COUNT);
    long rounds = 0;
    double t0 = t_now();
    int more = 1;
    while (more) {
        if (peer >= 0) {
            uint64_t seed = (uint64_t)rounds * 2 + (t_rank < peer);
            t_fill(buf, COUNT, seed);
            char *in = t_malloc(COUNT);
            MPI_Status st;
            MPI_Sendrecv(buf, COUNT, MPI_BYTE, peer, (int)(rounds % 1000), in, COUNT, MPI_BYTE, peer,
                         (int)(rounds % 1000), MPI_COMM_WORLD, &st);
            CHECK_PATTERN(in, COUNT, (uint64_t)rounds * 2 + (peer < t_rank), "round %ld from %d", rounds, peer);
            CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == (int)(rounds % 1000), "round %ld status", rounds);
            free(in);
            /* Nothing else may be waiting: a forged frame would be. */
            int flag = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
            CHECK(!flag, "round %ld: an unexpected message from %d tag %d", rounds, st.MPI_SOURCE, st.MPI_TAG);
        }
        /* The peer's next round may start only after this probe: else a
         * rank held up between its Sendrecv and its probe (a busy machine)
         * finds the peer's next, genuine message there. */
        MPI_Barrier(MPI_COMM_WORLD);
        rounds++;
        t_sleep_ms(10);
        /* rank 0 decides when to stop, so both ranks do the same rounds */
        more = t_now() - t0 < seconds;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    free(buf);
    if (t_rank == 0)
        printf("stranger: %ld rounds exchanged\n", rounds);
    return t_finish("stranger");
}
