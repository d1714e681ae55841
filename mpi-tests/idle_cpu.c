/* idle_cpu.c -- CPU burnt, and wake-ups, of a rank blocked in MPI_Recv and
 * in MPI_Barrier.
 *
 * Usage: idle_cpu [max_percent [max_wakeups_per_s]]
 * Pairs (r, r + n/2): after a warm-up exchange (connections up), the lower rank
 * sleeps SLEEP_S seconds and then sends; the higher rank measures its own
 * process CPU (getrusage: all threads, user + system) across the MPI_Recv.
 * Then the lower rank of each pair sends BIG bytes, which the higher one
 * receives only after SLEEP_S seconds: the sender, blocked in MPI_Send
 * until its receiver takes the message (a single-copy protocol: the
 * receiver reads it from the sender's buffer), measures its CPU too (a
 * transport that buffered the message returns at once: nothing to
 * measure).
 * Then every rank but 0 waits in MPI_Barrier while rank 0 sleeps SLEEP_S.
 * In both waits a watcher thread counts the waiting thread's context
 * switches (/proc/self/task/TID/status) from WATCH_FROM to WATCH_TO seconds
 * into the wait: voluntary ones are its wake-ups from sleep (a sleeping
 * transport), involuntary ones its preemptions (a spinning one).  Rank 0
 * prints "IDLE_CPU max=X% mean=Y% ..." over the receivers, "IDLE_SEND_CPU
 * max=Z%" over the senders, and
 * "IDLE_WAKEUPS recv=A/s barrier=B/s ..." (the highest rate of any waiter).
 * With max_percent given, every receiver and sender must stay below it; with
 * max_wakeups_per_s, every waiter's voluntary switches per second too.  The
 * message and the waits (>= SLEEP_S) are always checked.
 */
#include "common.h"
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#define SLEEP_S 4
/* Larger than any eager limit (vader's 4 KiB, the provider's one-copy
 * threshold of 64 KiB): the send waits for its receiver. */
#define BIG (1 << 20)
/* The wait's first second is its back-off (sleeps of 1, 2, 4, ... ms):
 * counted from WATCH_FROM on, the figure is the idle rate. */
#define WATCH_FROM 1.2
#define WATCH_TO 3.7

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* A thread's context switches so far: voluntary and involuntary. */
static int switches(pid_t tid, long *vol, long *invol)
{
    char path[64], line[256];
    FILE *f;
    int found = 0;

    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    if (!(f = fopen(path, "r")))
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (1 == sscanf(line, "voluntary_ctxt_switches: %ld", vol))
            found |= 1;
        else if (1 == sscanf(line, "nonvoluntary_ctxt_switches: %ld", invol))
            found |= 2;
    }
    fclose(f);
    return found == 3;
}

/* The watcher: the waiting thread's switches between WATCH_FROM and
 * WATCH_TO seconds after start_watch. */
struct watch {
    pid_t tid;
    double t0;
    long vol, invol; /* over the window */
    int ok;
    pthread_t thread;
};

static void sleep_until(double t)
{
    double d = t - t_now();
    if (d > 0)
        t_sleep_ms((long)(d * 1000) + 1);
}

static void *watcher(void *arg)
{
    struct watch *w = arg;
    long v0 = 0, i0 = 0, v1 = 0, i1 = 0;

    sleep_until(w->t0 + WATCH_FROM);
    w->ok = switches(w->tid, &v0, &i0);
    sleep_until(w->t0 + WATCH_TO);
    w->ok = w->ok && switches(w->tid, &v1, &i1);
    w->vol = v1 - v0;
    w->invol = i1 - i0;
    return NULL;
}

static void start_watch(struct watch *w)
{
    memset(w, 0, sizeof *w);
    w->tid = (pid_t)syscall(SYS_gettid);
    w->t0 = t_now();
    CHECK(0 == pthread_create(&w->thread, NULL, watcher, w), "pthread_create failed");
}

/* Join the watcher; the wait must have outlasted its window.  Returns
 * the voluntary switches per second (-1 if not measured). */
static double end_watch(struct watch *w, const char *what, double limit)
{
    double secs = WATCH_TO - WATCH_FROM, rate;

    pthread_join(w->thread, NULL);
    CHECK(w->ok, "rank %d: no context switch counts in /proc/self/task/%d/status", t_rank, (int)w->tid);
    if (!w->ok)
        return -1;
    rate = w->vol / secs;
    printf("idle_cpu: rank %d in %s: %.1f wake-ups/s (voluntary switches), %.1f preemptions/s\n",
           t_rank, what, rate, w->invol / secs);
    fflush(stdout);
    if (limit >= 0)
        CHECK(rate <= limit, "rank %d woke %.1f times a second while blocked in %s (limit %.1f)",
              t_rank, rate, what, limit);
    return rate;
}

int main(int argc, char **argv)
{
    double limit = -1, wake_limit = -1, pct = -1, wall = 0, maxp = 0, sump = 0;
    double wake_recv = -1, wake_barrier = -1, max_recv = -1, max_barrier = -1;
    int partner, receiver, nrecv = 0;
    unsigned char buf[64];
    struct watch w;

    t_init(&argc, &argv);
    if (argc > 1)
        limit = atof(argv[1]);
    if (argc > 2)
        wake_limit = atof(argv[2]);
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
        start_watch(&w);
        MPI_Recv(buf, sizeof buf, MPI_BYTE, partner, 2, MPI_COMM_WORLD, &st);
        wall = t_now() - t0;
        wake_recv = end_watch(&w, "MPI_Recv", wake_limit);
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
    /* the lower rank blocked in MPI_Send until its receiver, SLEEP_S late,
     * takes the message */
    double send_pct = -1, max_send = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (partner >= 0) {
        unsigned char *big = malloc(BIG);
        CHECK(NULL != big, "malloc of %d bytes", BIG);
        if (!receiver) {
            t_fill(big, BIG, 0xB16 + (uint64_t)t_rank);
            double c0 = cpu_seconds(), t0 = t_now();
            start_watch(&w);
            MPI_Send(big, BIG, MPI_BYTE, partner, 3, MPI_COMM_WORLD);
            double cpu = cpu_seconds() - c0, waited = t_now() - t0;
            if (waited < SLEEP_S - 0.2) {
                /* The transport buffered the message (the provider over
                 * TCP sends eagerly whatever the size): the send did not
                 * wait, so there is no wait to measure. */
                pthread_join(w.thread, NULL);
                printf("idle_cpu: rank %d: MPI_Send of %d bytes returned after %.3f s, before its receive was posted\n",
                       t_rank, BIG, waited);
            } else {
                end_watch(&w, "MPI_Send", wake_limit);
                send_pct = 100.0 * cpu / waited;
                printf("idle_cpu: rank %d blocked %.3f s in MPI_Send of %d bytes, cpu %.1f%%\n", t_rank, waited,
                       BIG, send_pct);
                if (limit >= 0)
                    CHECK(send_pct < limit, "rank %d used %.1f%% CPU while blocked in MPI_Send (limit %.1f%%)",
                          t_rank, send_pct, limit);
            }
            fflush(stdout);
        } else {
            t_sleep_ms(SLEEP_S * 1000);
            MPI_Recv(big, BIG, MPI_BYTE, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK_PATTERN(big, BIG, 0xB16 + (uint64_t)partner, "late-received message");
        }
        free(big);
    }
    MPI_Reduce(&send_pct, &max_send, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (t_rank == 0)
        printf("IDLE_SEND_CPU max=%.1f%% limit=%s\n", max_send, limit >= 0 ? argv[1] : "none");

    /* every rank but 0 waits in MPI_Barrier while rank 0 sleeps */
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == 0) {
        t_sleep_ms(SLEEP_S * 1000);
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        double t0 = t_now();
        start_watch(&w);
        MPI_Barrier(MPI_COMM_WORLD);
        double waited = t_now() - t0;
        wake_barrier = end_watch(&w, "MPI_Barrier", wake_limit);
        CHECK(waited >= SLEEP_S - 0.2, "MPI_Barrier returned after %.3f s, rank 0 sleeps %d s",
              waited, SLEEP_S);
    }
    MPI_Reduce(&wake_recv, &max_recv, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wake_barrier, &max_barrier, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (t_rank == 0)
        printf("IDLE_WAKEUPS recv=%.1f/s barrier=%.1f/s limit=%s\n", max_recv, max_barrier,
               wake_limit >= 0 ? argv[2] : "none");
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
