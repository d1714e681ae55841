/* common.h -- helpers shared by the MPI test programs.
 *
 * Every program checks the bytes it receives against a pattern derived from
 * (seed, offset), counts failed checks per rank, and at the end sums them over
 * MPI_COMM_WORLD: rank 0 prints "<name>: OK" or "<name>: N failed checks" and
 * every rank exits non-zero if any check failed anywhere.
 */
#ifndef MPI_TESTS_COMMON_H
#define MPI_TESTS_COMMON_H

#define _GNU_SOURCE
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int t_rank = -1, t_size = 0;
static long t_errors = 0;

/* Print at most this many failures per rank, so a broken transport does not
 * flood the log with millions of lines. */
#define T_MAX_REPORTS 20

__attribute__((format(printf, 4, 5)))
static inline void t_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    /* atomic: threads.c checks from two threads */
    if (__atomic_fetch_add(&t_errors, 1, __ATOMIC_RELAXED) < T_MAX_REPORTS) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "rank %d: CHECK FAILED %s:%d: %s: %s\n", t_rank, file, line, cond, msg);
        fflush(stderr);
    }
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            t_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                    \
    } while (0)

static inline void t_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
}

/* Sum the failures of all ranks; finalize; return the process exit code. */
static inline int t_finish(const char *name)
{
    long total = 0;
    MPI_Allreduce(&t_errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (t_rank == 0) {
        if (total == 0)
            printf("%s: OK (%d ranks)\n", name, t_size);
        else
            printf("%s: %ld failed checks (%d ranks)\n", name, total, t_size);
        fflush(stdout);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}

static inline void *t_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", t_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static inline double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void t_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* splitmix64: cheap, well-mixed; any bit flip, shift or stale buffer shows. */
static inline uint64_t t_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Byte i of the pattern is byte (i % 8) of mix(seed * 2^40 + i / 8). */
static inline void t_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t base = seed << 40;
    size_t words = len / 8, i;
    for (i = 0; i < words; i++) {
        uint64_t w = t_mix(base + i);
        memcpy(p + 8 * i, &w, 8);
    }
    if (len % 8) {
        uint64_t w = t_mix(base + words);
        memcpy(p + 8 * words, &w, len % 8);
    }
}

/* Offset of the first byte that differs from the pattern, or -1. */
static inline long t_verify(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *p = buf;
    uint64_t base = seed << 40;
    size_t words = len / 8, i, j;
    for (i = 0; i < words; i++) {
        uint64_t w = t_mix(base + i);
        if (memcmp(p + 8 * i, &w, 8) != 0)
            break;
    }
    if (i == words && len % 8 == 0)
        return -1;
    {
        uint64_t w = t_mix(base + i);
        const unsigned char *e = (const unsigned char *)&w;
        size_t n = (i == words) ? len % 8 : 8;
        for (j = 0; j < n; j++)
            if (p[8 * i + j] != e[j])
                return (long)(8 * i + j);
    }
    return -1;
}

/* Verify, and on mismatch report where (with context) as a failed check. */
#define CHECK_PATTERN(buf, len, seed, ...)                                     \
    do {                                                                       \
        long off_ = t_verify((buf), (len), (seed));                            \
        if (off_ >= 0) {                                                       \
            char ctx_[256];                                                    \
            snprintf(ctx_, sizeof ctx_, __VA_ARGS__);                          \
            t_fail(__FILE__, __LINE__, "pattern", "%s: first bad byte at %ld of %zu", \
                   ctx_, off_, (size_t)(len));                                 \
        }                                                                      \
    } while (0)

/* The pairing used by point-to-point tests: rank r talks to r + n/2 (mod 2*(n/2)),
 * so with a by-slot two-node layout every pair crosses nodes.  With an odd
 * rank count the last rank has no partner (returns -1). */
static inline int t_partner(int rank, int size)
{
    int half = size / 2;
    if (half == 0 || rank >= 2 * half)
        return -1;
    return rank < half ? rank + half : rank - half;
}

/* Phases of the stall tests: every `every` iterations the ranks agree
 * (rank 0 decides) whether the phase ran past its watchdog `limit`, so all
 * stop at the same iteration.  The check is btl traffic itself: keep
 * `every` large. */
static inline int t_phase_late(double t0, long i, long every, double limit)
{
    if (i % every != every - 1)
        return 0;
    int late = t_now() - t0 > limit;
    MPI_Bcast(&late, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return late;
}

/* Print a phase's slowest rank.  A phase cut short at its watchdog only
 * bounds the run: time does not judge a stall (a loaded machine's healthy
 * phases came within 1.2x of 20 s), the stall counters do (stalls.sh). */
static inline void t_phase_report(const char *prog, const char *name, const char *unit, double t0,
                                  long done, long n, double limit)
{
    double t = t_now() - t0, worst;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (t_rank == 0) {
        printf("%s: %-16s %4ld of %ld %s in %.3f s (%.1f us each)%s\n", prog, name, done, n, unit,
               worst, worst / (done ? done : 1) * 1e6,
               done < n ? ", cut short at the watchdog" : "");
        fflush(stdout);
    }
    (void) limit;
}

#endif
