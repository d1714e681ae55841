/* pingpong.c -- 2-rank latency (half round trip) and streaming bandwidth.
 *
 * Usage: pingpong [-q]        (-q: about 10x fewer iterations, for smoke runs)
 * Prints: RESULT lat  <bytes> <microseconds>
 *         RESULT bw   <bytes> <MB/s, 10^6 bytes per second>
 *         RESULT bibw <bytes> <MB/s, both directions together>
 *         RESULT line 64 <microseconds>   (both ranks on one host only)
 *
 * `line` is the run's floor: one 64-byte line handed back and forth
 * between the two ranks through shared memory, no MPI (half a round trip).
 * The host places the two CPUs near or far apart from run to run (0.03,
 * 0.07 or 0.28 us here), and every transport's small-message latency moves
 * with it: report.py groups the runs by this figure (placement.py).
 */
#include "bench_common.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>

static const size_t sizes[] = { 0, 1, 4, 8, 16, 64, 256, 1024, 4096, 16384, 65536,
                                262144, 1048576, 4194304 };
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAX_SIZE ((size_t)4 << 20)
/* Bandwidth keeps at most this many bytes in flight; the receiver needs a
 * distinct buffer per outstanding receive. */
#define BW_INFLIGHT ((size_t)16 << 20)
#define BW_MAX_WINDOW 64
#define TAG_PING 1
#define TAG_ACK 2

static int quick;

static size_t clamp(size_t v, size_t lo, size_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The pattern depends on the size so that bytes left over from an earlier
 * size cannot pass the check. */
static void fill(uint8_t *buf, size_t len, size_t size)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 131u + size * 7u + 1u);
}

/* Each iteration writes its number at the start of every 4 KiB of the
 * message and at its end, and the receiver checks them all: a transport that
 * hands back stale bytes from an earlier iteration, even for one chunk of a
 * large message, fails.  (The full-pattern check runs once at the end.) */
#define STAMP_STRIDE 4096

static void stamp(uint8_t *buf, size_t size, uint64_t i)
{
    for (size_t off = 0; off < size; off += STAMP_STRIDE)
        memcpy(buf + off, &i, size - off < sizeof i ? size - off : sizeof i);
    if (size > sizeof i)
        memcpy(buf + size - sizeof i, &i, sizeof i);
}

static void check_stamp(const uint8_t *buf, size_t size, uint64_t i)
{
    uint8_t want[sizeof i];
    memcpy(want, &i, sizeof i);
    for (size_t off = 0; off < size; off += STAMP_STRIDE) {
        size_t n = size - off < sizeof i ? size - off : sizeof i;
        if (memcmp(buf + off, want, n) != 0)
            bench_fail("iteration %llu, size %zu: stale data at offset %zu",
                       (unsigned long long)i, size, off);
    }
    if (size > sizeof i && memcmp(buf + size - sizeof i, want, sizeof i) != 0)
        bench_fail("iteration %llu, size %zu: stale data at the end", (unsigned long long)i, size);
}

static void verify(const uint8_t *got, const uint8_t *want, size_t len, const char *what,
                   size_t size)
{
    if (len && memcmp(got, want, len) != 0)
        bench_fail("%s: received data corrupted at message size %zu", what, size);
}

/* Both ranks run the same count: rank 0 caps `iters` so one size takes
 * about SIZE_BUDGET_S at the pace the warm-up showed (a busy-polling
 * transport across network namespaces runs at ~4 ms per round trip). */
#define SIZE_BUDGET_S 0.5
static size_t agreed_iters(int rank, size_t iters, size_t warm, double warm_s)
{
    unsigned long n = (unsigned long)iters;
    if (rank == 0 && warm > 0 && warm_s > 0) {
        double fit = SIZE_BUDGET_S / (warm_s / (double)warm);
        if (fit < (double)n)
            n = fit < 3 ? 3 : (unsigned long)fit;
    }
    MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    return (size_t)n;
}

static void pingpong_once(int rank, size_t size, uint8_t *sbuf, uint8_t *rbuf, size_t i)
{
    int peer = 1 - rank;
    stamp(sbuf, size, i);
    if (rank == 0) {
        MPI_Send(sbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
        MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
    }
    check_stamp(rbuf, size, i);
}

static double latency(int rank, size_t size, uint8_t *sbuf, uint8_t *rbuf)
{
    /* Enough iterations for small messages to average out, bounded volume for big ones. */
    size_t iters = clamp(((size_t)256 << 20) / (size ? size : 1), 50, 5000);
    if (quick)
        iters = clamp(iters / 10, 10, iters);
    size_t warm = iters / 10 + 2;

    memset(rbuf, 0, size);
    MPI_Barrier(MPI_COMM_WORLD);
    double w0 = now_s();
    for (size_t i = 0; i < warm; i++)
        pingpong_once(rank, size, sbuf, rbuf, i);
    iters = agreed_iters(rank, iters, warm, now_s() - w0);
    double t0 = now_s();
    for (size_t i = warm; i < warm + iters; i++)
        pingpong_once(rank, size, sbuf, rbuf, i);
    double t = now_s() - t0;
    verify(rbuf, sbuf, size, "latency", size);
    return t / (double)iters / 2.0 * 1e6;
}

/* The cache-line floor (see the header): rounds of LINE_TRIPS round trips,
 * the median round's half round trip in us; 0 if the ranks share no
 * memory (different hosts). */
#define LINE_ROUNDS 5
#define LINE_TRIPS 20000

static double line_floor(int rank)
{
    char name[64] = { 0 };
    if (rank == 0)
        snprintf(name, sizeof name, "/doorbell-bench-line-%d-%ld", (int)getpid(), (long)(now_s() * 1e6));
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    int fd = -1;
    if (rank == 0) {
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, 4096) != 0) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        fd = shm_open(name, O_RDWR, 0600);
    void *page = fd >= 0 ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    int ok = page != MAP_FAILED, both = 0;
    MPI_Allreduce(&ok, &both, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0)
        shm_unlink(name);
    if (!both) {
        if (ok)
            munmap(page, 4096);
        return 0;
    }
    /* Two lines, each written by one rank: the other's store is what a
     * rank waits for, as a receiver waits for a message's. */
    _Atomic uint64_t *ping = page, *pong = (_Atomic uint64_t *)((char *)page + 64);
    double rounds[LINE_ROUNDS];
    for (int k = 0; k < LINE_ROUNDS; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        for (uint64_t i = (uint64_t)k * LINE_TRIPS + 1; i <= (uint64_t)(k + 1) * LINE_TRIPS; i++) {
            if (rank == 0) {
                atomic_store_explicit(ping, i, memory_order_release);
                while (atomic_load_explicit(pong, memory_order_acquire) != i)
                    ;
            } else {
                while (atomic_load_explicit(ping, memory_order_acquire) != i)
                    ;
                atomic_store_explicit(pong, i, memory_order_release);
            }
        }
        rounds[k] = (now_s() - t0) / LINE_TRIPS / 2.0 * 1e6;
    }
    munmap(page, 4096);
    qsort(rounds, LINE_ROUNDS, sizeof rounds[0], cmp_double);
    return rounds[LINE_ROUNDS / 2];
}

/* A stream's shape at `size`: messages in flight per round, and rounds
 * (at most 32k messages: tcp streams tiny messages slowly). */
static void stream_shape(size_t size, size_t *window, size_t *iters)
{
    *window = clamp(BW_INFLIGHT / size, 1, BW_MAX_WINDOW);
    *iters = clamp(((size_t)256 << 20) / (size * *window), 5, 500);
    if (quick)
        *iters = clamp(*iters / 10, 3, *iters);
}

static double bandwidth(int rank, size_t size, uint8_t *sbuf, uint8_t *rbuf)
{
    size_t window, iters;
    stream_shape(size, &window, &iters);
    size_t warm = 2;
    int peer = 1 - rank;
    MPI_Request req[BW_MAX_WINDOW];
    int ack = 0;
    double t0 = 0;

    double w0 = 0;
    memset(rbuf, 0, size * window);
    MPI_Barrier(MPI_COMM_WORLD);
    w0 = now_s();
    for (size_t i = 0; i < warm + iters; i++) {
        if (i == warm) {
            iters = agreed_iters(rank, iters, warm, now_s() - w0);
            t0 = now_s();
        }
        stamp(sbuf, size, i); /* rank 1's copy is what the final check expects */
        if (rank == 0) {
            /* MPI-3 allows concurrent sends from one buffer. */
            for (size_t w = 0; w < window; w++)
                MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_INT, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (size_t w = 0; w < window; w++)
                MPI_Irecv(rbuf + w * size, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD,
                          &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            for (size_t w = 0; w < window; w++)
                check_stamp(rbuf + w * size, size, i);
            MPI_Send(&ack, 1, MPI_INT, peer, TAG_ACK, MPI_COMM_WORLD);
        }
    }
    double t = now_s() - t0;
    if (rank == 1)
        for (size_t w = 0; w < window; w++)
            verify(rbuf + w * size, sbuf, size, "bandwidth", size);
    return (double)size * (double)window * (double)iters / t / 1e6;
}

/* Two-way streams (OSU bibw's pattern): each rank posts a window of
 * receives from the other and a window of sends to it, then waits for all
 * of them; both directions' bytes count. */
static double bibandwidth(int rank, size_t size, uint8_t *sbuf, uint8_t *rbuf)
{
    size_t window, iters;
    stream_shape(size, &window, &iters);
    size_t warm = 2;
    int peer = 1 - rank;
    MPI_Request req[2 * BW_MAX_WINDOW];
    double t0 = 0, w0;

    memset(rbuf, 0, size * window);
    MPI_Barrier(MPI_COMM_WORLD);
    w0 = now_s();
    for (size_t i = 0; i < warm + iters; i++) {
        if (i == warm) {
            iters = agreed_iters(rank, iters, warm, now_s() - w0);
            t0 = now_s();
        }
        stamp(sbuf, size, i);
        for (size_t w = 0; w < window; w++)
            MPI_Irecv(rbuf + w * size, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, &req[w]);
        for (size_t w = 0; w < window; w++)
            MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD, &req[window + w]);
        MPI_Waitall((int)(2 * window), req, MPI_STATUSES_IGNORE);
        for (size_t w = 0; w < window; w++)
            check_stamp(rbuf + w * size, size, i);
    }
    double t = now_s() - t0;
    for (size_t w = 0; w < window; w++)
        verify(rbuf + w * size, sbuf, size, "two-way bandwidth", size);
    return 2.0 * (double)size * (double)window * (double)iters / t / 1e6;
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    require_size(2);
    quick = has_flag(argc, argv, "-q");
    report_placement();

    double line = line_floor(rank);
    if (rank == 0 && line > 0) {
        printf("RESULT line 64 %.4f\n", line);
        fflush(stdout);
    }

    uint8_t *sbuf = malloc(MAX_SIZE);
    uint8_t *rbuf = malloc(BW_INFLIGHT > MAX_SIZE ? BW_INFLIGHT : MAX_SIZE);
    if (!sbuf || !rbuf)
        bench_fail("out of memory");

    for (size_t s = 0; s < NSIZES; s++) {
        fill(sbuf, sizes[s], sizes[s]);
        double us = latency(rank, sizes[s], sbuf, rbuf);
        if (rank == 0) {
            printf("RESULT lat %zu %.3f\n", sizes[s], us);
            fflush(stdout);
        }
    }
    /* A 0-byte stream carries no bytes: bandwidth starts at 1 B. */
    for (size_t s = 1; s < NSIZES; s++) {
        fill(sbuf, sizes[s], sizes[s]);
        double mbs = bandwidth(rank, sizes[s], sbuf, rbuf);
        if (rank == 0) {
            printf("RESULT bw %zu %.2f\n", sizes[s], mbs);
            fflush(stdout);
        }
    }
    /* Two-way: 1 KiB and up (below, both transports are per-message bound). */
    for (size_t s = 1; s < NSIZES; s++) {
        if (sizes[s] < 1024)
            continue;
        fill(sbuf, sizes[s], sizes[s]);
        double mbs = bibandwidth(rank, sizes[s], sbuf, rbuf);
        if (rank == 0) {
            printf("RESULT bibw %zu %.2f\n", sizes[s], mbs);
            fflush(stdout);
        }
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
