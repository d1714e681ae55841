/* late_recv.c -- large messages whose receive is posted after they came.
 *
 * Pairs (r, r + n/2), lower rank = a, higher = b.
 * 1. The read waits for the wait: a sends 1 MiB; b probes it (so the
 *    message is already matched-able, as ob1 keeps it unexpected), fills its
 *    receive buffer with a sentinel and posts MPI_Irecv.  Over doorbell's
 *    shared memory the buffer must still hold the sentinel when MPI_Irecv
 *    returns: the single-copy read belongs to the next progress pass.  A rank
 *    that read inside MPI_Irecv, before posting its own sends, made its peer
 *    wait with nothing to read (two-way streams read one rank after the
 *    other; osu_bibw).  Then MPI_Wait, and every byte is checked.  Asserted
 *    only under the doorbell BTL on shared memory (vader reads at once, and
 *    doorbell's TCP reads land while the MPI_Irecv caller runs on).
 * 2. The same message received by MPI_Irecv, a pause outside MPI, then an
 *    MPI_Test loop: the deferred read must happen in MPI_Test's progress.
 * 3. Windows of WINDOW two-way 1 MiB messages (each rank posts its
 *    receives, then its sends, then MPI_Waitall), one rank of the pair
 *    sleeping before every other window so that its peer's messages always
 *    wait for it: every byte checked, in both directions.
 */
#include "common.h"

#define BIG (1u << 20)
#define WINDOW 16
#define WINDOWS 6
#define SENTINEL 0xee

/* Does this pair talk over doorbell's shared memory? */
static int doorbell_shm(int partner)
{
    const char *btl = getenv("OMPI_MCA_btl");
    const char *force = getenv("OMPI_MCA_btl_doorbell_force_tcp");
    char mine[MPI_MAX_PROCESSOR_NAME] = {0}, theirs[MPI_MAX_PROCESSOR_NAME] = {0};
    int len;
    MPI_Get_processor_name(mine, &len);
    MPI_Sendrecv(mine, sizeof mine, MPI_CHAR, partner, 0, theirs, sizeof theirs, MPI_CHAR, partner, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return btl && strstr(btl, "doorbell") && !(force && atoi(force) != 0) && 0 == strcmp(mine, theirs);
}

static long untouched(const unsigned char *buf, size_t len)
{
    long n = 0;
    for (size_t i = 0; i < len; ++i)
        n += buf[i] == SENTINEL;
    return n;
}

static void read_in_wait(int partner, int a, int check_deferred)
{
    unsigned char *buf = t_malloc(BIG);
    MPI_Request req;
    MPI_Status st;
    if (a) {
        t_fill(buf, BIG, 1);
        MPI_Send(buf, BIG, MPI_BYTE, partner, 1, MPI_COMM_WORLD);
    } else {
        MPI_Probe(partner, 1, MPI_COMM_WORLD, &st);
        memset(buf, SENTINEL, BIG);
        MPI_Irecv(buf, BIG, MPI_BYTE, partner, 1, MPI_COMM_WORLD, &req);
        if (check_deferred) {
            /* a peek at a pending receive's buffer: this transport's
             * behaviour, not something MPI promises */
            long left = untouched(buf, BIG);
            CHECK(left == (long)BIG, "MPI_Irecv of a message already there read it: "
                  "%ld of %u sentinel bytes left when it returned", left, BIG);
        }
        MPI_Wait(&req, &st);
        CHECK_PATTERN(buf, BIG, 1, "1 MiB read in MPI_Wait");
    }
    free(buf);
}

static void read_in_test(int partner, int a)
{
    unsigned char *buf = t_malloc(BIG);
    MPI_Request req;
    MPI_Status st;
    int done = 0;
    if (a) {
        t_fill(buf, BIG, 2);
        MPI_Send(buf, BIG, MPI_BYTE, partner, 2, MPI_COMM_WORLD);
    } else {
        MPI_Probe(partner, 2, MPI_COMM_WORLD, &st);
        MPI_Irecv(buf, BIG, MPI_BYTE, partner, 2, MPI_COMM_WORLD, &req);
        t_sleep_ms(100);
        double t0 = t_now();
        while (!done && t_now() - t0 < 60.0)
            MPI_Test(&req, &done, &st);
        CHECK(done, "an MPI_Test loop never completed a receive posted after its message");
        if (done)
            CHECK_PATTERN(buf, BIG, 2, "1 MiB read in MPI_Test");
    }
    free(buf);
}

static void late_windows(int partner, int a)
{
    unsigned char *send = t_malloc((size_t)WINDOW * BIG);
    unsigned char *recv = t_malloc((size_t)WINDOW * BIG);
    MPI_Request req[2 * WINDOW];
    for (int w = 0; w < WINDOWS; ++w) {
        /* the late rank changes every window */
        if ((w % 2 == 0) == (a != 0))
            t_sleep_ms(20);
        for (int i = 0; i < WINDOW; ++i)
            t_fill(send + (size_t)i * BIG, BIG, ((uint64_t)t_rank << 32) | (uint64_t)(w * WINDOW + i));
        memset(recv, 0, (size_t)WINDOW * BIG);
        for (int i = 0; i < WINDOW; ++i)
            MPI_Irecv(recv + (size_t)i * BIG, BIG, MPI_BYTE, partner, 3, MPI_COMM_WORLD, &req[i]);
        for (int i = 0; i < WINDOW; ++i)
            MPI_Isend(send + (size_t)i * BIG, BIG, MPI_BYTE, partner, 3, MPI_COMM_WORLD, &req[WINDOW + i]);
        MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < WINDOW; ++i)
            CHECK_PATTERN(recv + (size_t)i * BIG, BIG, ((uint64_t)partner << 32) | (uint64_t)(w * WINDOW + i),
                          "window %d message %d", w, i);
    }
    free(send);
    free(recv);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int partner = t_partner(t_rank, t_size);
    if (partner >= 0) {
        int a = t_rank < partner;
        read_in_wait(partner, a, doorbell_shm(partner));
        read_in_test(partner, a);
        late_windows(partner, a);
    }
    return t_finish("late_recv");
}
