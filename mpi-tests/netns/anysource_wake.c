/* anysource_wake.c -- one receiver, two senders on different paths.
 *
 * Rank 0 receives with MPI_ANY_SOURCE from
 *   - the lowest other rank on its own node   (shared-memory path), and
 *   - the lowest rank on another node          (network path),
 * which each send NMSG small messages, sleeping GAP_MS between sends; the
 * remote sender starts GAP_MS/2 later so the two streams interleave.  The
 * receiver therefore sits idle in MPI_Recv ~GAP_MS/2 before every message: a
 * transport that sleeps must be woken once per message, by either path.
 *
 * Checks (any failure -> message + MPI_Abort, non-zero exit):
 *   - every message arrives once, status.MPI_SOURCE matches the payload, per-
 *     sender order is kept, the payload pattern is intact;
 *   - the streams really interleaved (enough source switches), so wake-ups
 *     alternated between the two paths.
 * Rank 0 prints one line
 *   ANYSOURCE_OK n=... switches=... wall_s=... cpu_s=... local=R remote=R
 * (cpu_s is rank 0's own process CPU time during the receive loop, which the
 * runner may compare with wall_s.)
 * Ranks that are neither receiver nor sender only join the barriers.
 *
 * Optional argv: NMSG GAP_MS. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

enum { PAYLOAD_INTS = 16 };

static void fail(const char *what, int a, int b)
{
    fprintf(stderr, "ANYSOURCE_FAIL %s (%d, %d)\n", what, a, b);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) { /* EINTR: sleep the rest */ }
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec
         + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Payload: [sender, seq, then a pattern derived from both] so corruption or a
 * mixed-up message is detected, not only a wrong count. */
static void fill(int *p, int sender, int seq)
{
    p[0] = sender;
    p[1] = seq;
    for (int k = 2; k < PAYLOAD_INTS; k++) p[k] = sender * 7919 + seq * 31 + k;
}

int main(int argc, char **argv)
{
    int rank, size, nmsg = 20, gap_ms = 50;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) nmsg = atoi(argv[1]);
    if (argc > 2) gap_ms = atoi(argv[2]);
    if (nmsg < 2 || gap_ms < 2) fail("bad arguments NMSG GAP_MS", nmsg, gap_ms);

    /* Who shares rank 0's node?  Broadcast rank 0's shared-group leader so
     * every rank can tell whether it is local to rank 0. */
    MPI_Comm node;
    int leader, leader0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    leader = rank;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
    leader0 = leader;
    MPI_Bcast(&leader0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int is_local0 = (leader == leader0);

    /* Lowest local (non-0) rank and lowest remote rank. */
    int cand[2] = { is_local0 && rank != 0 ? rank : size, !is_local0 ? rank : size };
    MPI_Allreduce(MPI_IN_PLACE, cand, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int local = cand[0], remote = cand[1];
    if (local >= size) fail("no second rank on rank 0's node", local, size);
    if (remote >= size) fail("no rank on another node than rank 0", remote, size);

    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == local || rank == remote) {
        int buf[PAYLOAD_INTS];
        if (rank == remote) sleep_ms(gap_ms / 2);
        for (int i = 0; i < nmsg; i++) {
            sleep_ms(gap_ms);
            fill(buf, rank, i);
            MPI_Send(buf, PAYLOAD_INTS, MPI_INT, 0, 7, MPI_COMM_WORLD);
        }
    } else if (rank == 0) {
        int buf[PAYLOAD_INTS], want[PAYLOAD_INTS];
        int next_local = 0, next_remote = 0, switches = 0, last = -1;
        double t0 = MPI_Wtime(), c0 = cpu_seconds();
        for (int i = 0; i < 2 * nmsg; i++) {
            MPI_Status st;
            int count;
            memset(buf, 0xff, sizeof buf);
            MPI_Recv(buf, PAYLOAD_INTS, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            if (count != PAYLOAD_INTS) fail("wrong count", count, PAYLOAD_INTS);
            if (st.MPI_SOURCE != buf[0]) fail("MPI_SOURCE != sender in payload", st.MPI_SOURCE, buf[0]);
            int *next = st.MPI_SOURCE == local ? &next_local
                      : st.MPI_SOURCE == remote ? &next_remote : NULL;
            if (!next) fail("message from unexpected rank", st.MPI_SOURCE, i);
            if (buf[1] != *next) fail("out of order / duplicate seq", buf[1], *next);
            fill(want, st.MPI_SOURCE, *next);
            if (memcmp(buf, want, sizeof buf) != 0) fail("payload corrupted", st.MPI_SOURCE, buf[1]);
            (*next)++;
            if (last >= 0 && last != st.MPI_SOURCE) switches++;
            last = st.MPI_SOURCE;
        }
        double wall = MPI_Wtime() - t0, cpu = cpu_seconds() - c0;
        /* Perfect alternation gives 2*nmsg-1 switches; allow jitter of up to
         * half the offset on a loaded 2-core machine, but not two streams
         * delivered one after the other. */
        if (switches < nmsg) fail("streams did not interleave (switches, nmsg)", switches, nmsg);
        printf("ANYSOURCE_OK n=%d switches=%d wall_s=%.3f cpu_s=%.3f local=%d remote=%d\n",
               2 * nmsg, switches, wall, cpu, local, remote);
        fflush(stdout);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
