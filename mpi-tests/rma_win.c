/* rma_win.c -- one-sided communication on MPI_Win_create windows, with
 * whatever osc component Open MPI picks (run it with no osc flag: Debian's
 * default list, ^ucx,pt2pt, leaves osc rdma, which needs the BTL's put,
 * get and atomics).
 *
 * Usage: rma_win [atomics_while_computing]   (any number of ranks >= 2)
 * Every window is the application's own malloc'd memory.  Phases:
 *   fence    Put / Get / Accumulate(SUM int64, SUM double) to the neighbours
 *   pscw     Post/Start/Complete/Wait: Put, Fetch_and_op, Compare_and_swap
 *   lock     exclusive Lock on the right neighbour: Put, Flush, Get,
 *            Fetch_and_op(SUM, MAX, SWAP), Compare_and_swap, Get_accumulate
 *   lock_all every rank updates rank 0's counters (Fetch_and_op,
 *            Accumulate with MAX on int32, Compare_and_swap)
 *   compute  rank 0 computes without any MPI call until every other rank's
 *            passive-target Put has landed in its window; with
 *            `atomics_while_computing` 1 they Fetch_and_op it first (over
 *            TCP the target's event thread serves atomics, and in a job
 *            on several nodes also a same-node initiator's; on one node
 *            an atomic waits for the target's next MPI call, so the flag
 *            is 0 there).  A watchdog fails the run if the target never
 *            sees the data.
 *   sleep    rank 0 waits in MPI_Recv while the others run passive epochs
 *            with every operation on it; one of them sends only after all
 *            are done, and rank 0 checks its window then.
 *   dynamic  an MPI_Win_create_dynamic window: each rank attaches two
 *            regions, the left neighbour locks them (shared, then
 *            exclusive) and runs Put, Get, Fetch_and_op (64-bit SUM,
 *            32-bit REPLACE) and Compare_and_swap on each; then every rank
 *            detaches them and attaches two others (the origins' cached
 *            copies of the target's regions are then stale), and again.  Across nodes this is where Open MPI 4.1.1-4.1.4's osc
 *            rdma deadlocked in its region lock (ompi/hooks/
 *            btl_doorbell_osc_fix.c).
 * Data is checked in every phase.  Prints "rma_win: OK" or the failures.
 */
#include "common.h"

#include <signal.h>

#define LEN 4096
#define ROUNDS 40
/* window layout (bytes) */
#define OFF_DATA 0
#define OFF_CNT (2 * LEN)           /* 8 int64 counters */
#define OFF_I32 (OFF_CNT + 64)      /* 4 int32 */
#define OFF_DBL (OFF_I32 + 16)      /* 2 doubles */
#define OFF_FLAG (OFF_DBL + 16)     /* one int64 per rank */
#define WIN_BYTES(n) (OFF_FLAG + 8 * (size_t)(n))

static unsigned char *base;
static MPI_Win win;
static int left, right;

static int64_t cnt(int k)
{
    int64_t v;
    memcpy(&v, base + OFF_CNT + 8 * k, 8);
    return v;
}

static void fence_phase(void)
{
    static unsigned char sbuf[LEN], gbuf[LEN];
    const int64_t one = 1;
    const double half = 0.5;
    for (int r = 0; r < ROUNDS; r++) {
        /* the half others Get is set before the epoch opens */
        t_fill(base + OFF_DATA + LEN, LEN, 1000 + (uint64_t)r * 64 + t_rank);
        t_fill(sbuf, LEN, (uint64_t)r * 64 + t_rank);
        MPI_Win_fence(0, win);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_DATA, LEN, MPI_BYTE, win);
        MPI_Get(gbuf, LEN, MPI_BYTE, left, OFF_DATA + LEN, LEN, MPI_BYTE, win);
        MPI_Accumulate(&one, 1, MPI_INT64_T, right, OFF_CNT, 1, MPI_INT64_T, MPI_SUM, win);
        MPI_Accumulate(&half, 1, MPI_DOUBLE, left, OFF_DBL, 1, MPI_DOUBLE, MPI_SUM, win);
        MPI_Win_fence(0, win);
        CHECK_PATTERN(base + OFF_DATA, LEN, (uint64_t)r * 64 + left, "fence round %d: Put", r);
        CHECK_PATTERN(gbuf, LEN, 1000 + (uint64_t)r * 64 + left, "fence round %d: Get", r);
        CHECK(cnt(0) == r + 1, "fence round %d: counter %lld", r, (long long)cnt(0));
        double d;
        memcpy(&d, base + OFF_DBL, 8);
        CHECK(d == 0.5 * (r + 1), "fence round %d: double sum %g", r, d);
    }
}

static void pscw_phase(void)
{
    MPI_Group world, peers;
    int ranks[2] = {left, right};
    static unsigned char sbuf[LEN];
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, left == right ? 1 : 2, ranks, &peers);
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < ROUNDS; r++) {
        int64_t old = -1, cas_old = -1, one = 1, next = r + 1, expect = r;
        t_fill(sbuf, LEN, 7000 + (uint64_t)r * 64 + t_rank);
        MPI_Win_post(peers, 0, win);
        MPI_Win_start(peers, 0, win);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_DATA, LEN, MPI_BYTE, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, right, OFF_CNT + 8, MPI_SUM, win);
        MPI_Compare_and_swap(&next, &expect, &cas_old, MPI_INT64_T, right, OFF_CNT + 16, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        CHECK(old == r, "pscw round %d: Fetch_and_op fetched %lld", r, (long long)old);
        CHECK(cas_old == r, "pscw round %d: Compare_and_swap fetched %lld", r, (long long)cas_old);
        CHECK_PATTERN(base + OFF_DATA, LEN, 7000 + (uint64_t)r * 64 + left, "pscw round %d: Put", r);
        CHECK(cnt(1) == r + 1 && cnt(2) == r + 1, "pscw round %d: counters %lld %lld", r,
              (long long)cnt(1), (long long)cnt(2));
    }
    MPI_Group_free(&peers);
    MPI_Group_free(&world);
}

static void lock_phase(void)
{
    static unsigned char sbuf[LEN], gbuf[LEN];
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < ROUNDS; r++) {
        int64_t one = 1, old = -1, big = 1000 + r, mx = -1, sw = -1, cas_old = -1, ga = -1;
        int64_t expect = r, next = r + 1, val = 10 * r;
        t_fill(sbuf, LEN, 9000 + (uint64_t)r * 64 + t_rank);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
        MPI_Put(sbuf, LEN, MPI_BYTE, right, OFF_DATA, LEN, MPI_BYTE, win);
        MPI_Win_flush(right, win);
        memset(gbuf, 0, LEN);
        MPI_Get(gbuf, LEN, MPI_BYTE, right, OFF_DATA, LEN, MPI_BYTE, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, right, OFF_CNT, MPI_SUM, win);
        MPI_Fetch_and_op(&big, &mx, MPI_INT64_T, right, OFF_CNT + 8, MPI_MAX, win);
        MPI_Fetch_and_op(&val, &sw, MPI_INT64_T, right, OFF_CNT + 24, MPI_REPLACE, win);
        MPI_Compare_and_swap(&next, &expect, &cas_old, MPI_INT64_T, right, OFF_CNT + 16, win);
        MPI_Get_accumulate(&one, 1, MPI_INT64_T, &ga, 1, MPI_INT64_T, right, OFF_CNT + 32, 1,
                           MPI_INT64_T, MPI_SUM, win);
        MPI_Win_unlock(right, win);
        CHECK_PATTERN(gbuf, LEN, 9000 + (uint64_t)r * 64 + t_rank, "lock round %d: Get after Put", r);
        CHECK(old == r && ga == r, "lock round %d: Fetch_and_op %lld Get_accumulate %lld", r,
              (long long)old, (long long)ga);
        CHECK(mx == (r ? 1000 + r - 1 : 0), "lock round %d: MAX fetched %lld", r, (long long)mx);
        CHECK(sw == (r ? 10 * (r - 1) : 0), "lock round %d: REPLACE fetched %lld", r, (long long)sw);
        CHECK(cas_old == r, "lock round %d: Compare_and_swap fetched %lld", r, (long long)cas_old);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(cnt(0) == ROUNDS && cnt(2) == ROUNDS && cnt(4) == ROUNDS, "lock: counters %lld %lld %lld",
          (long long)cnt(0), (long long)cnt(2), (long long)cnt(4));
    CHECK(cnt(1) == 1000 + ROUNDS - 1 && cnt(3) == 10 * (ROUNDS - 1), "lock: MAX %lld REPLACE %lld",
          (long long)cnt(1), (long long)cnt(3));
}

static void lock_all_phase(void)
{
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t seen_max = -1;
    MPI_Win_lock_all(0, win);
    for (int r = 0; r < ROUNDS; r++) {
        int64_t one = 1, old = -1;
        int32_t mine = t_rank * 1000 + r;
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, OFF_CNT, MPI_SUM, win);
        MPI_Accumulate(&mine, 1, MPI_INT32_T, 0, OFF_I32, 1, MPI_INT32_T, MPI_MAX, win);
        MPI_Win_flush(0, win);
        CHECK(old >= 0 && old < (int64_t)ROUNDS * t_size, "lock_all round %d: fetched %lld", r,
              (long long)old);
        if (old > seen_max)
            seen_max = old;
    }
    /* a ticket lock's worth of CAS: each rank claims one slot of flags */
    int64_t zero = 0, me = t_rank + 1, got = -1;
    MPI_Compare_and_swap(&me, &zero, &got, MPI_INT64_T, 0, OFF_FLAG + 8 * t_rank, win);
    MPI_Win_unlock_all(win);
    CHECK(got == 0, "lock_all: Compare_and_swap on my own slot fetched %lld", (long long)got);
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == 0) {
        int32_t mx;
        memcpy(&mx, base + OFF_I32, 4);
        CHECK(cnt(0) == (int64_t)ROUNDS * t_size, "lock_all: counter %lld, want %lld",
              (long long)cnt(0), (long long)ROUNDS * t_size);
        CHECK(mx == (t_size - 1) * 1000 + ROUNDS - 1, "lock_all: MAX %d", mx);
        for (int k = 0; k < t_size; k++) {
            int64_t f;
            memcpy(&f, base + OFF_FLAG + 8 * k, 8);
            CHECK(f == k + 1, "lock_all: slot %d holds %lld", k, (long long)f);
        }
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "rma_win: watchdog: the target never saw the origins' data\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

/* Rank 0 computes without MPI until every other rank's data landed. */
static void compute_phase(int atomics)
{
    static unsigned char sbuf[LEN];
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == 0) {
        volatile int64_t *flags = (volatile int64_t *)(base + OFF_FLAG);
        signal(SIGALRM, on_alarm);
        alarm(60);
        for (;;) {
            int all = 1;
            for (int k = 1; k < t_size; k++)
                all &= flags[k] == k;
            if (all)
                break;
            __asm__ volatile("" ::: "memory");
        }
        alarm(0);
        MPI_Win_sync(win);
        for (int k = 1; k < t_size && k < 2; k++)
            CHECK_PATTERN(base + OFF_DATA, LEN, 11000 + (uint64_t)k, "compute: Put of rank %d", k);
        if (atomics)
            CHECK(cnt(0) == t_size - 1, "compute: counter %lld", (long long)cnt(0));
    } else {
        int64_t flag = t_rank, one = 1, old = -1;
        t_fill(sbuf, LEN, 11000 + (uint64_t)t_rank);
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        if (t_rank == 1)
            MPI_Put(sbuf, LEN, MPI_BYTE, 0, OFF_DATA, LEN, MPI_BYTE, win);
        if (atomics)
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, OFF_CNT, MPI_SUM, win);
        MPI_Win_flush(0, win);
        MPI_Put(&flag, 1, MPI_INT64_T, 0, OFF_FLAG + 8 * t_rank, 1, MPI_INT64_T, win);
        MPI_Win_unlock(0, win);
        if (atomics)
            CHECK(old >= 0 && old < t_size - 1, "compute: fetched %lld", (long long)old);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 sleeps in MPI_Recv while the others work on its window. */
static void sleep_phase(void)
{
    MPI_Comm origins;
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_split(MPI_COMM_WORLD, t_rank == 0, t_rank, &origins);
    if (t_rank == 0) {
        int token = 0;
        MPI_Recv(&token, 1, MPI_INT, 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(token == 42, "sleep: token %d", token);
        CHECK(cnt(0) == (int64_t)ROUNDS * (t_size - 1), "sleep: counter %lld", (long long)cnt(0));
        CHECK(cnt(1) == ROUNDS, "sleep: CAS chain %lld", (long long)cnt(1));
        for (int k = 1; k < t_size; k++) {
            int64_t f;
            memcpy(&f, base + OFF_FLAG + 8 * k, 8);
            CHECK(f == k * 100 + ROUNDS - 1, "sleep: slot %d holds %lld", k, (long long)f);
        }
    } else {
        /* give rank 0 time to fall asleep first */
        t_sleep_ms(200);
        for (int r = 0; r < ROUNDS; r++) {
            int64_t one = 1, old = -1, v = t_rank * 100 + r, back = -1;
            MPI_Win_lock(r % 2 ? MPI_LOCK_SHARED : MPI_LOCK_EXCLUSIVE, 0, 0, win);
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, OFF_CNT, MPI_SUM, win);
            MPI_Put(&v, 1, MPI_INT64_T, 0, OFF_FLAG + 8 * t_rank, 1, MPI_INT64_T, win);
            MPI_Win_flush(0, win);
            MPI_Get(&back, 1, MPI_INT64_T, 0, OFF_FLAG + 8 * t_rank, 1, MPI_INT64_T, win);
            MPI_Win_unlock(0, win);
            CHECK(back == v, "sleep round %d: Get after Put %lld", r, (long long)back);
            if (t_rank == 1) {
                /* the CAS chain: only rank 1, so each CAS must succeed */
                int64_t expect = r, next = r + 1, was = -1;
                MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
                MPI_Compare_and_swap(&next, &expect, &was, MPI_INT64_T, 0, OFF_CNT + 8, win);
                MPI_Win_unlock(0, win);
                CHECK(was == r, "sleep round %d: CAS fetched %lld", r, (long long)was);
            }
        }
        MPI_Barrier(origins);
        if (t_rank == 1) {
            int token = 42;
            MPI_Send(&token, 1, MPI_INT, 0, 77, MPI_COMM_WORLD);
        }
    }
    MPI_Comm_free(&origins);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void dynamic_phase(void)
{
    /* int64 per region: data, then a counter; two regions of several
     * pages each, attached apart: osc rdma keeps a table of them, and an
     * operation names one by its address */
    enum { N = 1024 };
    MPI_Win dwin;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dwin);
    for (int round = 0; round < 2; round++) {
        int64_t *mem[2];
        int64_t src[N - 1], back[N - 1];
        MPI_Aint mine[2], *addrs = t_malloc(2 * t_size * sizeof(MPI_Aint));
        for (int k = 0; k < 2; k++) {
            mem[k] = t_malloc(N * sizeof(int64_t));
            memset(mem[k], 0, N * sizeof(int64_t));
            MPI_Win_attach(dwin, mem[k], N * sizeof(int64_t));
            MPI_Get_address(mem[k], &mine[k]);
        }
        MPI_Allgather(mine, 2, MPI_AINT, addrs, 2, MPI_AINT, MPI_COMM_WORLD);
        for (int r = 0; r < ROUNDS / 4; r++) {
            int lock = r % 2 ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED;
            int32_t swap = (int32_t)(t_rank * 100 + r), swapped = -1, seen = -1;
            int64_t one = 1, old = -1, expect = r, next = r + 1, cas_old = -1;
            for (int k = 0; k < 2; k++) {
                MPI_Aint at = addrs[2 * right + k];
                for (int i = 0; i < N - 1; i++)
                    src[i] = (int64_t)round << 40 | (int64_t)t_rank << 20 | (int64_t)r << 10 | k << 9 | i;
                MPI_Win_lock(lock, right, 0, dwin);
                MPI_Put(src, N - 1, MPI_INT64_T, right, at, N - 1, MPI_INT64_T, dwin);
                MPI_Win_flush(right, dwin);
                memset(back, 0, sizeof back);
                MPI_Get(back, N - 1, MPI_INT64_T, right, at, N - 1, MPI_INT64_T, dwin);
                MPI_Win_flush(right, dwin);
                MPI_Fetch_and_op(&one, &old, MPI_INT64_T, right, MPI_Aint_add(at, (N - 1) * 8), MPI_SUM,
                                 dwin);
                MPI_Compare_and_swap(&next, &expect, &cas_old, MPI_INT64_T, right, at, dwin);
                /* 32 bits, as MPI_INT: replaced in place, then read back */
                MPI_Fetch_and_op(&swap, &swapped, MPI_INT32_T, right, MPI_Aint_add(at, 8), MPI_REPLACE,
                                 dwin);
                MPI_Win_flush(right, dwin);
                MPI_Get(&seen, 1, MPI_INT32_T, right, MPI_Aint_add(at, 8), 1, MPI_INT32_T, dwin);
                MPI_Win_unlock(right, dwin);
                CHECK(0 == memcmp(src, back, sizeof src), "dynamic round %d.%d region %d: Get after Put",
                      round, r, k);
                CHECK(old == r, "dynamic round %d.%d region %d: Fetch_and_op fetched %lld", round, r, k,
                      (long long)old);
                CHECK(cas_old == src[0], "dynamic round %d.%d region %d: Compare_and_swap fetched %llx",
                      round, r, k, (long long)cas_old);
                CHECK(swapped == (int32_t)src[1] && seen == swap,
                      "dynamic round %d.%d region %d: 32-bit REPLACE fetched %d, then read %d, want %d",
                      round, r, k, swapped, seen, swap);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int k = 0; k < 2; k++) {
            CHECK(mem[k][N - 1] == ROUNDS / 4, "dynamic round %d region %d: counter %lld, want %d", round,
                  k, (long long)mem[k][N - 1], ROUNDS / 4);
            MPI_Win_detach(dwin, mem[k]);
            free(mem[k]);
        }
        free(addrs);
    }
    MPI_Win_free(&dwin);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int atomics = argc > 1 && atoi(argv[1]) != 0;
    left = (t_rank + t_size - 1) % t_size;
    right = (t_rank + 1) % t_size;
    base = t_malloc(WIN_BYTES(t_size));
    memset(base, 0, WIN_BYTES(t_size));
    MPI_Win_create(base, WIN_BYTES(t_size), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    const char *phases[] = {"fence", "pscw", "lock", "lock_all", "compute", "sleep", "dynamic"};
    for (int p = 0; p < 7; p++) {
        double t0 = t_now();
        switch (p) {
        case 0: fence_phase(); break;
        case 1: pscw_phase(); break;
        case 2: lock_phase(); break;
        case 3: lock_all_phase(); break;
        case 4: compute_phase(atomics); break;
        case 5: sleep_phase(); break;
        case 6: dynamic_phase(); break;
        }
        if (t_rank == 0) {
            printf("rma_win: %-8s done in %.3f s\n", phases[p], t_now() - t0);
            fflush(stdout);
        }
    }
    MPI_Win_free(&win);
    free(base);
    return t_finish("rma_win");
}
