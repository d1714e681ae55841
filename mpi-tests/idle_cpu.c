/* idle_cpu.c -- CPU burnt by a rank blocked in MPI_Recv.
 *
 * Usage: idle_cpu [max_percent]
 * Pairs (r, r + n/2): after a warm-up exchange (connections up), the lower rank
 * sleeps SLEEP_S seconds and then sends; the higher rank measures its own
 * process CPU (getrusage: all threads, user + system) across the MPI_Recv.
 * Rank 0 prints "IDLE_CPU max=X% mean=Y% ..." over the receivers.  With
 * max_percent given, every receiver must stay below it.  The message and the
 * wait (>= SLEEP_S) are always checked.
 */
#include "common.h"
#include <sys/resource.h>

#define SLEEP_S 3

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
    double limit = -1, pct = -1, wall = 0, maxp = 0, sump = 0;
    int partner, receiver, nrecv = 0;
    unsigned char buf[64];

    t_init(&argc, &argv);
    if (argc > 1)
        limit = atof(argv[1]);
    partner = t_partner(t_rank, t_size);
    receiver = partner >= 0 && t_rank > partner;

    if (partner >= 0) { /* warm-up: both directions */
        int x = t_rank, y = -1;
        MPI_Sendrecv(&x, 1, MPI_INT, partner, 1, &y, 1, MPI_INT, partner, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        CHECK(y == partner, "warm-up got %d", y);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (partner >= 0 && !receiver) {
        t_sleep_ms(SLEEP_S * 1000);
        t_fill(buf, sizeof buf, 0x1D1E + (uint64_t)t_rank);
        MPI_Send(buf, sizeof buf, MPI_BYTE, partner, 2, MPI_COMM_WORLD);
    } else if (receiver) {
        MPI_Status st;
        int count = -1;
        double c0 = cpu_seconds(), t0 = t_now();
        MPI_Recv(buf, sizeof buf, MPI_BYTE, partner, 2, MPI_COMM_WORLD, &st);
        wall = t_now() - t0;
        pct = 100.0 * (cpu_seconds() - c0) / wall;
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == (int)sizeof buf, "count %d", count);
        CHECK_PATTERN(buf, sizeof buf, 0x1D1E + (uint64_t)partner, "idle message");
        /* the peer slept SLEEP_S after the barrier, so we must have waited */
        CHECK(wall >= SLEEP_S - 0.2, "MPI_Recv returned after %.3f s, sender sleeps %d s", wall, SLEEP_S);
        printf("idle_cpu: rank %d blocked %.3f s in MPI_Recv, cpu %.1f%%\n", t_rank, wall, pct);
        fflush(stdout);
        if (limit >= 0)
            CHECK(pct < limit, "rank %d used %.1f%% CPU while blocked in MPI_Recv (limit %.1f%%)",
                  t_rank, pct, limit);
    }
    {
        double p = receiver ? pct : 0;
        int one = receiver;
        MPI_Reduce(&p, &maxp, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&p, &sump, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&one, &nrecv, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    if (t_rank == 0)
        printf("IDLE_CPU max=%.1f%% mean=%.1f%% receivers=%d limit=%s\n", maxp,
               nrecv ? sump / nrecv : 0.0, nrecv, limit >= 0 ? argv[1] : "none");
    return t_finish("idle_cpu");
}
