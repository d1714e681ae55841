/* idle.c -- CPU used, and wake-ups, of a rank blocked in MPI_Recv.
 *
 * Rank 0 sleeps (outside MPI) for the idle period, then sends 8 bytes.
 * Rank 1 measures its own CPU time (getrusage RUSAGE_SELF: every thread of
 * the process, so transport helper threads count too) across the MPI_Recv,
 * and a watcher thread counts the waiting thread's context switches over
 * the 2 s before the last 0.1 s of the wait: voluntary ones are its
 * wake-ups from sleep, involuntary ones its preemptions (a spinning
 * transport's "wake-ups").  A whole number of seconds holds at most one
 * end of each 1 s sleep per second, whatever their phase.  The watcher is
 * started before MPI_Init, as a program's own threads usually are: a
 * thread that appears after the transport came up may change how it
 * sleeps (the libfabric provider then keeps its sleeps short).
 *
 * Usage: idle [-q]            (-q: 1 s instead of 3 s; window 0.2-0.8 s)
 * Prints: RESULT idle_cpu - <percent of one core>
 *         RESULT idle_wall - <seconds spent in MPI_Recv>
 *         RESULT idle_wakeups - <voluntary switches a second>
 *         RESULT idle_preempts - <involuntary switches a second>
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

struct watch {
    pid_t tid;
    double from, to; /* absolute, now_s() */
    long vol, invol;
    int ok;
    int go[2]; /* a pipe: one byte, 1 to watch (the fields above set), 0 not */
};

static int switches(pid_t tid, long *vol, long *invol)
{
    char path[64], line[256];
    int found = 0;
    FILE *f;

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

static void *watcher(void *arg)
{
    struct watch *w = arg;
    long v0 = 0, i0 = 0, v1 = 0, i1 = 0;
    char go = 0;

    if (1 != read(w->go[0], &go, 1) || !go)
        return NULL;
    sleep_s(w->from - now_s());
    w->ok = switches(w->tid, &v0, &i0);
    sleep_s(w->to - now_s());
    w->ok = w->ok && switches(w->tid, &v1, &i1);
    w->vol = v1 - v0;
    w->invol = i1 - i0;
    return NULL;
}

int main(int argc, char **argv)
{
    struct watch w = {(pid_t)syscall(SYS_gettid), 0, 0, 0, 0, 0, {-1, -1}};
    pthread_t th;
    if (pipe(w.go) || pthread_create(&th, NULL, watcher, &w)) {
        fprintf(stderr, "idle: cannot start the watcher thread\n");
        return 1;
    }
    int rank = pair_init(&argc, &argv);
    double idle = has_flag(argc, argv, "-q") ? 1.0 : 3.0;

    uint64_t msg = 0;
    pair_warm_up(rank);
    MPI_Barrier(MPI_COMM_WORLD);

    char go = rank != 0;
    if (rank == 0) {
        if (1 != write(w.go[1], &go, 1))
            bench_fail("cannot tell the watcher");
        pthread_join(th, NULL);
        sleep_s(idle);
        msg = 0x1d1e;
        MPI_Send(&msg, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD);
    } else {
        double w0 = now_s(), c0 = process_cpu_s();
        w.from = w0 + (idle >= 3 ? idle - 2.1 : 0.2);
        w.to = idle >= 3 ? w.from + 2.0 : w0 + 0.8;
        if (1 != write(w.go[1], &go, 1))
            bench_fail("cannot start the watch");
        MPI_Recv(&msg, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double c1 = process_cpu_s(), w1 = now_s();
        pthread_join(th, NULL);
        if (!w.ok)
            bench_fail("no context switch counts in /proc/self/task/%d/status", (int)w.tid);
        if (msg != 0x1d1e)
            bench_fail("wrong payload %#llx", (unsigned long long)msg);
        /* The receive cannot legitimately end before the sender woke up. */
        if (w1 - w0 < 0.9 * idle)
            bench_fail("MPI_Recv returned after %.3f s, sender slept %.1f s", w1 - w0, idle);
        printf("RESULT idle_cpu - %.2f\n", 100.0 * (c1 - c0) / (w1 - w0));
        printf("RESULT idle_wall - %.3f\n", w1 - w0);
        printf("RESULT idle_wakeups - %.2f\n", w.vol / (w.to - w.from));
        printf("RESULT idle_preempts - %.2f\n", w.invol / (w.to - w.from));
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
