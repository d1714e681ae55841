/* idle_point.c -- a sleeping rank never holds up work that no doorbell
 * message announces, and never sleeps where the program computes.
 *
 * 1. self_rma: 2,000 passive-target epochs on this rank's own MPI_COMM_SELF
 *    window (Lock, Put, Flush, Get_accumulate, Flush, Get, Flush, Unlock).
 *    Their traffic is btl self's and osc's, never doorbell's; a rank that
 *    sleeps inside them (1-16 ms per sleep) counts a stall per sleep, which
 *    mpi-tests/run.sh checks (stalls.sh).  The time is printed, not
 *    checked: oversubscribed beside a busy process, healthy runs took 5.6 s
 *    (each MPI call yields the CPU, as Open MPI asks), vader's alike.
 * 2. thread_wake (with argument "threads", which asks for
 *    MPI_THREAD_MULTIPLE and skips self_rma: osc pt2pt refuses that level): the main thread waits in
 *    MPI_Recv for a message another thread of the same rank sends to it
 *    (btl self).  The completion must wake it at once; a sleep that waits
 *    for its timeout instead (1-16 ms) is counted as a stall at finalize,
 *    which mpi-tests/run.sh checks (stalls.sh).  The wake-up times are
 *    printed, not checked: on a loaded machine the scheduler alone delays
 *    a wake-up by 10 ms and more.
 * 3. test_compute: rank 2k+1 computes 20 us chunks with MPI_Test between
 *    them until rank 2k's message (sent 100 ms after rank 2k+1 said its
 *    clock started) completes.  A sleep
 *    blocks the thread: the loop may show no voluntary context switch
 *    (getrusage RUSAGE_THREAD) in the first QUIET_MS, while nothing is on
 *    its way; a wrong sleep there blocks dozens of times.  When the message
 *    comes, Open MPI itself may block for a moment (first contact looks the
 *    peer up in PMIx, its event locks are shared with the runtime's
 *    threads; vader,tcp across two netns nodes blocked up to 4 times in
 *    the completing MPI_Test), so that part is shown, not checked.
 *    Time alone cannot tell: oversubscribed,
 *    MPI_Test yields the CPU, as Open MPI asks (mpi_yield_when_idle).
 * Prints "idle_point: OK" when every check holds.
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define EPOCHS 2000
#define WAKES 20
#define SEND_AFTER_US 100000
#define QUIET_MS 60.0

static int rank, size, failures;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "idle_point: rank %d: ", rank); \
            fprintf(stderr, __VA_ARGS__);                 \
            fprintf(stderr, "\n");                        \
            failures++;                                   \
        }                                                 \
    } while (0)

static void self_rma(void)
{
    int *base;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_SELF, &base, &win);
    base[0] = base[1] = base[2] = 0;
    double t0 = MPI_Wtime();
    for (int e = 0; e < EPOCHS; ++e) {
        int v = e + rank, one = 1, old = -1, got = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Put(&v, 1, MPI_INT, 0, 1, 1, MPI_INT, win);
        MPI_Win_flush(0, win);
        MPI_Get_accumulate(&one, 1, MPI_INT, &old, 1, MPI_INT, 0, 2, 1, MPI_INT, MPI_SUM, win);
        MPI_Win_flush(0, win);
        MPI_Get(&got, 1, MPI_INT, 0, 1, 1, MPI_INT, win);
        MPI_Win_flush(0, win);
        MPI_Win_unlock(0, win);
        if (got != v || old != e) {
            CHECK(0, "self_rma epoch %d: got %d (want %d), counter %d (want %d)", e, got, v, old, e);
            break;
        }
    }
    double t = MPI_Wtime() - t0;
    MPI_Win_free(&win);
    printf("idle_point: rank %d self_rma %d epochs in %.3f s (%.2f us each)\n", rank, EPOCHS, t,
           t / EPOCHS * 1e6);
}

static volatile double sent_at;

static void *self_sender(void *arg)
{
    (void) arg;
    for (int i = 0; i < WAKES; ++i) {
        int x = i;
        usleep(20000);
        sent_at = MPI_Wtime();
        MPI_Send(&x, 1, MPI_INT, rank, 900 + i, MPI_COMM_WORLD);
    }
    return NULL;
}

static void thread_wake(void)
{
    pthread_t t;
    double sum = 0, worst = 0;
    pthread_create(&t, NULL, self_sender, NULL);
    for (int i = 0; i < WAKES; ++i) {
        int x = -1;
        MPI_Recv(&x, 1, MPI_INT, rank, 900 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double d = MPI_Wtime() - sent_at;
        CHECK(x == i, "thread_wake: got %d, want %d", x, i);
        sum += d;
        worst = d > worst ? d : worst;
    }
    pthread_join(t, NULL);
    printf("idle_point: rank %d thread_wake mean %.0f us worst %.0f us\n", rank, sum / WAKES * 1e6,
           worst * 1e6);
}

static double spin_us(double us)
{
    struct timespec a, b;
    volatile double x = 1.0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        for (int i = 0; i < 200; ++i) {
            x = x * 1.0000001 + 1e-9;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3 < us);
    return x;
}

static void test_compute(void)
{
    int peer = rank ^ 1, x = 0;
    if (peer >= size) {
        return;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (0 == rank % 2) {
        /* The wait starts once the receiver's clock runs: on a loaded
         * machine the receiver may leave the barrier long after us. */
        MPI_Recv(&x, 1, MPI_INT, peer, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        usleep(SEND_AFTER_US);
        x = 7;
        MPI_Send(&x, 1, MPI_INT, peer, 77, MPI_COMM_WORLD);
        return;
    }
    MPI_Request req;
    int done = 0;
    long chunks = 0;
    MPI_Irecv(&x, 1, MPI_INT, peer, 77, MPI_COMM_WORLD, &req);
    struct rusage ru0, ru1, quiet_end;
    bool quiet = true;
    double t0 = MPI_Wtime(), in_test = 0;
    /* The ready message may be this pair's first over its link, and a
     * first send may wait for the connection: the count starts after it. */
    MPI_Send(&x, 1, MPI_INT, peer, 78, MPI_COMM_WORLD);
    getrusage(RUSAGE_THREAD, &ru0);
    quiet_end = ru0;
    while (!done) {
        spin_us(20);
        chunks++;
        double a = MPI_Wtime();
        if (quiet && (a - t0) * 1e3 >= QUIET_MS) {
            getrusage(RUSAGE_THREAD, &quiet_end);
            quiet = false;
        }
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        in_test += MPI_Wtime() - a;
    }
    double t = MPI_Wtime() - t0;
    getrusage(RUSAGE_THREAD, &ru1);
    long blocked = quiet_end.ru_nvcsw - ru0.ru_nvcsw;
    CHECK(!quiet, "test_compute: the message came after %.1f ms, before the quiet %.0f ms ended",
          t * 1e3, QUIET_MS);
    CHECK(x == 7, "test_compute: got %d", x);
    printf("idle_point: rank %d test_compute %ld chunks in %.1f ms, %.1f%% of it in MPI_Test, "
           "%ld voluntary context switches in the first %.0f ms, %ld after\n",
           rank, chunks, t * 1e3, 100 * in_test / t, blocked, QUIET_MS,
           ru1.ru_nvcsw - quiet_end.ru_nvcsw);
    CHECK(blocked <= 2, "test_compute: the thread blocked %ld times in %.0f ms with nothing on its way: MPI_Test slept",
          blocked, QUIET_MS);
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE;
    bool threads = argc > 1 && 0 == strcmp(argv[1], "threads");
    if (threads) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (!threads) {
        self_rma();
    } else if (provided == MPI_THREAD_MULTIPLE) {
        thread_wake();
    } else {
        CHECK(0, "MPI_THREAD_MULTIPLE not provided (%d)", provided);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    test_compute();

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (0 == rank && 0 == all) {
        printf("idle_point: OK\n");
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
