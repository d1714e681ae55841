/* real.h -- helpers shared by the "real programs" benchmark (bench/real/).
 *
 * Each program is an ordinary MPI application: it does its work, checks every
 * byte it receives, and prints figures as lines on rank 0's stdout:
 *   RESULT wall - <seconds>          whole program, MPI_Init..MPI_Finalize excluded
 *   RESULT phase <name> <seconds>    one part of it (e.g. one RMA sync mode)
 *   RESULT <metric> <bytes> <value>  per-size figures of the sweeps
 * run.sh collects these lines.  On wrong data the job aborts with a message
 * "ERROR rank N: ..." (exit code 3): a broken transport must not produce a
 * good-looking number.
 *
 * Iteration counts: every program multiplies its default counts by a scale,
 * the first command-line argument or else $REAL_SCALE (default 1; run.sh's
 * QUICK=1 passes 0.1).
 */
#ifndef REAL_H
#define REAL_H

#define _GNU_SOURCE
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int r_rank = -1, r_size = 0;
static double r_scale = 1.0;

static inline double r_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noreturn, format(printf, 1, 2)))
static void r_fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ERROR rank %d: ", r_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

#define R_CHECK(cond, ...)                                                     \
    do {                                                                       \
        if (!(cond))                                                           \
            r_fail(__VA_ARGS__);                                               \
    } while (0)

/* MPI return codes are checked too (errors return instead of aborting). */
#define R_MPI(call)                                                            \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS) {                                              \
            char es_[MPI_MAX_ERROR_STRING];                                    \
            int el_ = 0;                                                       \
            MPI_Error_string(rc_, es_, &el_);                                  \
            r_fail("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, es_);    \
        }                                                                      \
    } while (0)

static inline void r_setup(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : getenv("REAL_SCALE");
    if (s && *s) {
        char *end;
        r_scale = strtod(s, &end);
        if (*end || !(r_scale > 0))
            r_fail("bad scale '%s' (want a positive number)", s);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

static inline void r_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    r_setup(*argc, *argv);
}

/* A default count times the scale, at least `min`. */
static inline long r_iters(long base, long min)
{
    long n = (long)((double)base * r_scale + 0.5);
    return n < min ? min : n;
}

static inline void *r_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        r_fail("out of memory (%zu bytes)", n);
    memset(p, 0, n ? n : 1); /* touch every page before timing */
    return p;
}

static inline void r_require_even(void)
{
    if (r_size < 2 || r_size % 2)
        r_fail("needs an even number of ranks (>= 2), got %d", r_size);
}

/* Pairs for point-to-point programs: 0<->1, 2<->3, ... */
static inline int r_peer(void) { return r_rank ^ 1; }

/* Pattern value of word i of message `seed` (splitmix64). */
static inline uint64_t r_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Stamp: the 8-byte word at every 4 KiB of a buffer carries mix(seed, offset),
 * and its last 8 bytes (those not already stamped) carry mix(seed, length);
 * cheap enough to write and check on every message, and any stale, shifted or
 * foreign chunk fails. */
#define R_STRIDE 4096
static inline uint64_t r_word(uint64_t seed, size_t off) { return r_mix(seed * 0x100000001ull + off); }

/* first byte of the tail stamp (the bytes after the last stride word) */
static inline size_t r_tail(size_t len)
{
    size_t after = len >= 8 ? (len - 8) / R_STRIDE * R_STRIDE + 8 : 0;
    size_t tail = len >= 8 ? len - 8 : 0;
    return tail > after ? tail : after;
}

static inline void r_stamp(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    for (size_t off = 0; off + 8 <= len; off += R_STRIDE) {
        uint64_t w = r_word(seed, off);
        memcpy(p + off, &w, 8);
    }
    uint64_t w = r_word(seed, len);
    for (size_t j = r_tail(len); j < len; j++)
        p[j] = (unsigned char)(w >> (8 * (j % 8)));
}

static inline void r_check_stamp(const void *buf, size_t len, uint64_t seed, const char *what)
{
    const unsigned char *p = buf;
    for (size_t off = 0; off + 8 <= len; off += R_STRIDE) {
        uint64_t w = r_word(seed, off);
        if (memcmp(p + off, &w, 8) != 0)
            r_fail("%s: wrong data at offset %zu of %zu bytes (seed %llx)", what, off, len,
                   (unsigned long long)seed);
    }
    uint64_t w = r_word(seed, len);
    for (size_t j = r_tail(len); j < len; j++)
        if (p[j] != (unsigned char)(w >> (8 * (j % 8))))
            r_fail("%s: wrong byte %zu of %zu bytes (seed %llx)", what, j, len,
                   (unsigned long long)seed);
}

/* Rank 0 prints; everybody calls (collective-free). */
static inline void r_result(const char *metric, const char *key, double v)
{
    if (r_rank == 0) {
        printf("RESULT %s %s %.6g\n", metric, key, v);
        fflush(stdout);
    }
}

static inline void r_result_size(const char *metric, size_t bytes, double v)
{
    char k[32];
    snprintf(k, sizeof k, "%zu", bytes);
    r_result(metric, k, v);
}

/* Phase timing: a barrier on each side, so the slowest rank counts. */
static inline double r_phase_begin(void)
{
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));
    return r_now();
}

static inline double r_phase_end(const char *name, double t0)
{
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t = r_now() - t0;
    r_result("phase", name, t);
    return t;
}

/* Busy work of about `us` microseconds (no system call, not optimised away). */
static volatile double r_sink;
static inline double r_compute_us(double us)
{
    double t0 = r_now(), x = 1.0;
    long n = 0;
    while (r_now() - t0 < us * 1e-6) {
        for (int i = 0; i < 64; i++)
            x = x * 1.0000001 + 1e-9;
        n++;
    }
    r_sink = x;
    return (double)n;
}

#endif /* REAL_H */
