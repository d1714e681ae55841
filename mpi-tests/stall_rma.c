/* stall_rma.c -- one-sided epochs must not stall.
 *
 * Usage: stall_rma [limit_s [epochs]]  (any number of ranks >= 2; defaults
 *        20 s and 5,000 epochs per phase)
 * Runs these phases, each cut short only at the watchdog
 * `limit_s`; a stall is judged by the counters the run prints at finalize
 * (mpi-tests/stalls.sh), one per sleep that held up an epoch.  The default
 * mode holds for a few thousand epochs before it starts sleeping, hence
 * 5,000:
 *   self   passive-target epochs on this rank's own MPI_COMM_SELF window:
 *          Lock, Put, Flush, Get_accumulate, Flush, Get, Flush, Unlock
 *   fence  fence epochs on a WORLD window: Put/Get/Accumulate to the right
 *   pscw   Post/Start/Complete/Wait epochs with the neighbours
 *   lock   Lock/Put/Flush/Get/Flush/Unlock epochs to the right
 *   req    request-based Rput/Rget/Raccumulate + Waitall in Lock_all
 * Data is checked in every epoch.  Run it with --mca osc pt2pt (RMA over the
 * btl) and with the default osc.  Prints "stall_rma: OK" or the failures.
 */
#include "common.h"

static long N = 5000; /* epochs per phase */
#define LEN 512
#define WIN (4 * LEN + 64)
#define OFF_A 0
#define OFF_B (2 * LEN)
#define OFF_C(k) (4 * LEN + 8 * (k))

static double limit = 20.0;
static MPI_Win win;
static unsigned char *base;
static int left, right;
static unsigned char sbuf[LEN], gbuf[LEN];
static const int64_t one = 1;

/* Collective every 1,000 epochs: stop a phase on every rank once rank 0 is
 * past the limit (so a stalled run ends soon, on every rank alike).  Rare on
 * purpose: this Bcast is btl traffic, and btl traffic every few epochs would
 * hide a transport that sleeps because it sees no traffic of its own while
 * osc sm keeps the ranks busy. */
static int give_up(double t0, long i)
{
    return t_phase_late(t0, i, 1000, limit);
}

static void report(const char *name, double t0, long done)
{
    t_phase_report("stall_rma", name, "epochs", t0, done, N, limit);
}

static int64_t load64(MPI_Aint off)
{
    int64_t v;
    memcpy(&v, base + off, 8);
    return v;
}

static void self_phase(void)
{
    unsigned char *sb;
    MPI_Win sw;
    MPI_Win_allocate(LEN + 8, 1, MPI_INFO_NULL, MPI_COMM_SELF, &sb, &sw);
    memset(sb, 0, LEN + 8);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        int64_t old = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, sw);
        t_fill(sbuf, LEN, (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Put(sbuf, LEN, MPI_BYTE, 0, 0, LEN, MPI_BYTE, sw);
        MPI_Win_flush(0, sw);
        MPI_Get_accumulate(&one, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, 0, LEN, 1, MPI_INT64_T,
                           MPI_SUM, sw);
        MPI_Win_flush(0, sw);
        memset(gbuf, 0, LEN);
        MPI_Get(gbuf, LEN, MPI_BYTE, 0, 0, LEN, MPI_BYTE, sw);
        MPI_Win_flush(0, sw);
        MPI_Win_unlock(0, sw);
        CHECK(old == i, "self epoch %ld: Get_accumulate fetched %lld", i, (long long)old);
        CHECK_PATTERN(gbuf, LEN, (uint64_t)i * 64 + (uint64_t)t_rank, "self epoch %ld: Get", i);
        if (t_now() - t0 > limit) { /* local: nobody else waits for this rank here */
            i++;
            break;
        }
    }
    report("self", t0, i);
    MPI_Win_free(&sw);
}

static void fence_phase(void)
{
    t_fill(base + OFF_B, LEN, 1000000u + (uint64_t)t_rank);
    MPI_Win_fence(0, win);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        int p = (int)(i % 2);
        t_fill(sbuf, LEN, (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_A + p * LEN, LEN, MPI_BYTE, win);
        MPI_Get(gbuf, LEN, MPI_BYTE, right, OFF_B + p * LEN, LEN, MPI_BYTE, win);
        MPI_Accumulate(&one, 1, MPI_INT64_T, right, OFF_C(0), 1, MPI_INT64_T, MPI_SUM, win);
        t_fill(base + OFF_B + (1 - p) * LEN, LEN, 1000000u + (uint64_t)(i + 1) * 64 + (uint64_t)t_rank);
        MPI_Win_fence(0, win);
        CHECK_PATTERN(gbuf, LEN, 1000000u + (uint64_t)i * 64 + (uint64_t)right, "fence %ld: Get", i);
        CHECK_PATTERN(base + OFF_A + p * LEN, LEN, (uint64_t)i * 64 + (uint64_t)left,
                      "fence %ld: Put target", i);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    MPI_Win_fence(0, win);
    CHECK(load64(OFF_C(0)) == i, "fence: counter %lld, want %ld", (long long)load64(OFF_C(0)), i);
    report("fence", t0, i);
}

static void pscw_phase(void)
{
    MPI_Group world, gl, gr;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &gl);
    MPI_Group_incl(world, 1, &right, &gr);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        t_fill(base + OFF_B, LEN, 2000000u + (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Win_post(gl, 0, win);
        MPI_Win_start(gr, 0, win);
        t_fill(sbuf, LEN, 3000000u + (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_A, LEN, MPI_BYTE, win);
        MPI_Get(gbuf, LEN, MPI_BYTE, right, OFF_B, LEN, MPI_BYTE, win);
        MPI_Accumulate(&one, 1, MPI_INT64_T, right, OFF_C(1), 1, MPI_INT64_T, MPI_SUM, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        CHECK_PATTERN(gbuf, LEN, 2000000u + (uint64_t)i * 64 + (uint64_t)right, "pscw %ld: Get", i);
        CHECK_PATTERN(base + OFF_A, LEN, 3000000u + (uint64_t)i * 64 + (uint64_t)left,
                      "pscw %ld: Put target", i);
        CHECK(load64(OFF_C(1)) == i + 1, "pscw %ld: counter %lld", i, (long long)load64(OFF_C(1)));
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report("pscw", t0, i);
    MPI_Group_free(&gl);
    MPI_Group_free(&gr);
    MPI_Group_free(&world);
}

static void lock_phase(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win);
        t_fill(sbuf, LEN, 4000000u + (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_A, LEN, MPI_BYTE, win);
        MPI_Win_flush(right, win);
        memset(gbuf, 0, LEN);
        MPI_Get(gbuf, LEN, MPI_BYTE, right, OFF_A, LEN, MPI_BYTE, win);
        MPI_Win_flush(right, win);
        MPI_Win_unlock(right, win);
        CHECK_PATTERN(gbuf, LEN, 4000000u + (uint64_t)i * 64 + (uint64_t)t_rank,
                      "lock %ld: Get after Put+Flush", i);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    report("lock", t0, i);
}

static void req_phase(void)
{
    MPI_Request rq[3];
    MPI_Win_lock_all(0, win);
    t_fill(base + OFF_B, LEN, 5000000u + (uint64_t)t_rank);
    MPI_Win_sync(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_sync(win);
    double t0 = t_now();
    long i;
    for (i = 0; i < N; i++) {
        t_fill(sbuf, LEN, 6000000u + (uint64_t)i * 64 + (uint64_t)t_rank);
        MPI_Rput(sbuf, LEN, MPI_BYTE, right, OFF_A, LEN, MPI_BYTE, win, &rq[0]);
        MPI_Rget(gbuf, LEN, MPI_BYTE, right, OFF_B, LEN, MPI_BYTE, win, &rq[1]);
        MPI_Raccumulate(&one, 1, MPI_INT64_T, right, OFF_C(2), 1, MPI_INT64_T, MPI_SUM, win, &rq[2]);
        MPI_Waitall(3, rq, MPI_STATUSES_IGNORE);
        MPI_Win_flush(right, win); /* the next Rput goes to the same place */
        CHECK_PATTERN(gbuf, LEN, 5000000u + (uint64_t)right, "req %ld: Rget", i);
        if (give_up(t0, i)) {
            i++;
            break;
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, t_rank, 0, win);
    int64_t c = load64(OFF_C(2));
    MPI_Win_unlock(t_rank, win);
    CHECK(c == i, "req: Raccumulate counter %lld, want %ld", (long long)c, i);
    report("req", t0, i);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (argc > 1)
        limit = atof(argv[1]);
    if (argc > 2)
        N = atol(argv[2]);
    if (t_size < 2) {
        fprintf(stderr, "stall_rma: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    left = (t_rank + t_size - 1) % t_size;
    right = (t_rank + 1) % t_size;
    MPI_Win_allocate(WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, WIN);
    MPI_Barrier(MPI_COMM_WORLD);
    self_phase();
    fence_phase();
    pscw_phase();
    lock_phase();
    req_phase();
    MPI_Win_free(&win);
    return t_finish("stall_rma");
}
