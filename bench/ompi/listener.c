/* listener.c -- cost of a thread that sits in MPI_Recv next to a compute thread.
 *
 * Rank 1 (MPI_THREAD_MULTIPLE, bound by mpirun to one core) times a fixed
 * computation alternately alone and with a second thread blocked in MPI_Recv,
 * several times each.  slowdown = min(with) / min(alone): other load on the
 * machine only ever adds time, so the minimum filters it out, while a listener
 * that spins slows every "with" run.  A transport that spins in the receive
 * takes half of the core (~2x); one that sleeps costs nothing (~1x).
 * Rank 0 waits with MPI_Test + 1 ms sleeps, so it uses no CPU even if it
 * shares a core with rank 1.
 *
 * Usage: listener [-q]       (-q: 2 x 0.1 s instead of 3 x 0.3 s per phase)
 * Prints: RESULT listener_slowdown - <factor>
 *         RESULT listener_alone - <s>   RESULT listener_with - <s>
 *         RESULT listener_cpus - <CPUs rank 1 may run on; 1 = bound>
 *         RESULT listener_cpu - <% of a core the other threads used meanwhile>
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define TAG_DONE 1
#define TAG_WAKE 2

/* A dependent integer chain: CPU bound, no memory traffic, not vectorisable,
 * and its result proves both runs did the same work. */
static uint64_t kernel(uint64_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < n; i++) {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h += i;
    }
    return h;
}

static atomic_int listening;

static void *listener(void *arg)
{
    uint64_t msg = 0;
    (void)arg;
    atomic_store(&listening, 1);
    MPI_Recv(&msg, 1, MPI_UINT64_T, 0, TAG_WAKE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (msg != 42)
        bench_fail("listener got %llu", (unsigned long long)msg);
    return NULL;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One timed phase; returns rank 1's compute time (0 on rank 0).  *others:
 * CPU time the rank's other threads (listener, transport threads) used while
 * the computation ran, as a fraction of its wall time. */
static double phase(int rank, int with_listener, uint64_t n, uint64_t *result, double *others)
{
    double t = 0;
    uint64_t done = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        pthread_t th;
        if (with_listener) {
            atomic_store(&listening, 0);
            if (pthread_create(&th, NULL, listener, NULL) != 0)
                bench_fail("pthread_create failed");
            while (!atomic_load(&listening))
                sleep_s(0.001);
            /* Let the listener get into the receive and settle (a transport
             * may spin briefly before it sleeps); the steady state is measured. */
            sleep_s(0.05);
        }
        double p0 = process_cpu_s(), c0 = thread_cpu_s(), t0 = now_s();
        *result = kernel(n);
        t = now_s() - t0;
        *others = (process_cpu_s() - p0 - (thread_cpu_s() - c0)) / t;
        MPI_Send(&done, 1, MPI_UINT64_T, 0, TAG_DONE, MPI_COMM_WORLD);
        if (with_listener)
            pthread_join(th, NULL);
    } else {
        MPI_Request req;
        int flag = 0;
        MPI_Irecv(&done, 1, MPI_UINT64_T, 1, TAG_DONE, MPI_COMM_WORLD, &req);
        while (MPI_Test(&req, &flag, MPI_STATUS_IGNORE), !flag)
            sleep_s(0.001);
        if (with_listener) {
            uint64_t wake = 42;
            MPI_Send(&wake, 1, MPI_UINT64_T, 1, TAG_WAKE, MPI_COMM_WORLD);
        }
    }
    return t;
}

int main(int argc, char **argv)
{
    int rank, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    require_size(2);
    if (provided < MPI_THREAD_MULTIPLE)
        bench_fail("MPI_THREAD_MULTIPLE not provided (got %d)", provided);
    int quick = has_flag(argc, argv, "-q");
    double target = quick ? 0.1 : 0.3;
    int reps = quick ? 2 : 3;
    report_placement();

    /* Calibrate on rank 1 so the computation needs about `target` seconds
     * of CPU on this machine (CPU time: preemption by other load does not
     * shrink it); the same n is then used in every phase. */
    uint64_t n = 1u << 20, r = 0, first = 0;
    if (rank == 1) {
        double t;
        for (;;) {
            double c0 = thread_cpu_s();
            r = kernel(n);
            t = thread_cpu_s() - c0;
            if (t > 0.02)
                break;
            n *= 4;
        }
        n = (uint64_t)((double)n * target / t);
    }

    double alone = 1e30, with = 1e30, others = 0, listener_cpu = 0;
    for (int i = 0; i < reps; i++) {
        double a = phase(rank, 0, n, &r, &others);
        if (i == 0)
            first = r;
        uint64_t r_alone = r;
        double w = phase(rank, 1, n, &r, &others);
        listener_cpu += others / reps;
        /* Same result every time: every run did the same work. */
        if (r != first || r_alone != first)
            bench_fail("computation result differs between runs");
        alone = a < alone ? a : alone;
        with = w < with ? w : with;
    }

    if (rank == 1) {
        printf("RESULT listener_slowdown - %.3f\n", with / alone);
        printf("RESULT listener_alone - %.3f\n", alone);
        printf("RESULT listener_with - %.3f\n", with);
        printf("RESULT listener_cpus - %d\n", cpus_allowed());
        printf("RESULT listener_cpu - %.2f\n", 100.0 * listener_cpu);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
