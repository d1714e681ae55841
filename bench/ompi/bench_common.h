/* bench_common.h -- helpers shared by the Open MPI side-by-side benchmarks.
 *
 * Every program prints its figures as lines "RESULT <metric> <key> <value>"
 * on stdout (run.sh collects them) and aborts the job with a message on any
 * error, including corrupted data: a broken transport must not produce a
 * good-looking number.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of every thread of this process (user + system). */
static inline double process_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
           + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* qsort's comparison of two doubles, ascending (for medians). */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0) { /* EINTR: sleep the rest */ }
}

__attribute__((noreturn, format(printf, 1, 2)))
static void bench_fail(const char *fmt, ...)
{
    int rank = -1;
    va_list ap;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "ERROR rank %d: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

static inline int has_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return 1;
    return 0;
}

static inline void require_size(int want)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != want)
        bench_fail("needs exactly %d ranks, got %d", want, size);
}

/* Number of CPUs this process may run on (1 = bound to one core), or -1. */
static inline int cpus_allowed(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}

/* Print where each rank runs (host, number of CPUs it may use), so the log
 * shows whether mpirun bound it and whether two-node runs really span nodes. */
static void report_placement(void)
{
    char name[MPI_MAX_PROCESSOR_NAME] = { 0 };
    int len, rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    int ncpu = cpus_allowed();

    char *names = rank == 0 ? malloc((size_t)size * MPI_MAX_PROCESSOR_NAME) : NULL;
    int *cpus = rank == 0 ? malloc((size_t)size * sizeof(int)) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME,
               MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(&ncpu, 1, MPI_INT, cpus, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int distinct = 0;
        for (int r = 0; r < size; r++) {
            printf("PLACE rank %d host %s cpus %d\n", r, names + (size_t)r * MPI_MAX_PROCESSOR_NAME,
                   cpus[r]);
            if (strcmp(names, names + (size_t)r * MPI_MAX_PROCESSOR_NAME) != 0)
                distinct = 1;
        }
        printf("RESULT hosts_distinct - %d\n", distinct);
        fflush(stdout);
        free(names);
        free(cpus);
    }
}

/* The start of a two-rank benchmark: MPI_Init, exactly 2 ranks, placement
 * printed.  Returns this rank. */
static inline int pair_init(int *argc, char ***argv)
{
    int rank;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    require_size(2);
    report_placement();
    return rank;
}

/* 20 round trips of 8 bytes between ranks 0 and 1: lazily connecting
 * transports (tcp) set up their path here, and the first-message work is
 * done, outside what is measured next. */
static inline void pair_warm_up(int rank)
{
    uint64_t msg = 0;
    for (int i = 0; i < 20; i++) {
        if (rank == 0) {
            MPI_Send(&msg, 1, MPI_UINT64_T, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&msg, 1, MPI_UINT64_T, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&msg, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&msg, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD);
        }
    }
}

#endif /* BENCH_COMMON_H */
