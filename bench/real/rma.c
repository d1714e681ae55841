/* rma.c -- one-sided communication in every synchronisation mode.
 *
 * Usage: rma [scale]      (any number of ranks >= 2; run.sh also runs it with
 *                          --mca osc pt2pt, where RMA becomes btl traffic)
 * Phases, each timed (RESULT phase <name> <s>), data checked every iteration:
 *   fence  MPI_Win_fence epochs: Put to the right neighbour, Get from it,
 *          Accumulate into its counter
 *   pscw   the same with Post/Start/Complete/Wait on neighbour groups
 *   lock   Lock(shared)/Put/Flush/Get/Flush/Fetch_and_op/Unlock to the right
 *   req    Lock_all with request-based Rput/Rget/Raccumulate, Waitall
 *   self   every rank on its own MPI_COMM_SELF window: Lock(exclusive), Put,
 *          Flush, Get_accumulate, Flush, Get, Flush, Unlock
 */
#include "real.h"

#define SLOT 512                        /* bytes per Put/Get */
#define NSLOT 16
#define ABYTES (SLOT * NSLOT)           /* region A: Put target (8 KiB) */
/* Window layout in bytes: A[2] (parity), B[2] (Get source, parity), C[8] counters. */
#define OFF_A(p) ((MPI_Aint)(p) * ABYTES)
#define OFF_B(p) ((MPI_Aint)(2 + (p)) * ABYTES)
#define OFF_C(k) ((MPI_Aint)4 * ABYTES + (MPI_Aint)(k) * 8)
#define WBYTES (4 * ABYTES + 64)

enum { C_FENCE, C_PSCW, C_LOCK, C_REQ };

static uint64_t seed(int rank, long i, int what) { return ((uint64_t)rank << 40) ^ ((uint64_t)i << 8) ^ (uint64_t)what; }

static unsigned char *win_base;
static MPI_Win win;
static int left, right;
static unsigned char sendbuf[ABYTES], getbuf[ABYTES];
static const int64_t one = 1;

static int64_t counter(int k)
{
    int64_t v;
    memcpy(&v, win_base + OFF_C(k), 8);
    return v;
}

static void phase_fence(long n)
{
    r_stamp(win_base + OFF_B(0), SLOT, seed(r_rank, 0, 'B'));
    R_MPI(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
    for (long i = 0; i < n; i++) {
        int p = (int)(i % 2);
        r_stamp(sendbuf, SLOT, seed(r_rank, i, 'A'));
        R_MPI(MPI_Put(sendbuf, SLOT, MPI_BYTE, right, OFF_A(p), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Get(getbuf, SLOT, MPI_BYTE, right, OFF_B(p), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Accumulate(&one, 1, MPI_INT64_T, right, OFF_C(C_FENCE), 1, MPI_INT64_T,
                             MPI_SUM, win));
        /* our own B of the other parity, read by the left neighbour next epoch */
        r_stamp(win_base + OFF_B(1 - p), SLOT, seed(r_rank, i + 1, 'B'));
        R_MPI(MPI_Win_fence(i == n - 1 ? MPI_MODE_NOSUCCEED : 0, win));
        r_check_stamp(getbuf, SLOT, seed(right, i, 'B'), "fence: Get");
        r_check_stamp(win_base + OFF_A(p), SLOT, seed(left, i, 'A'), "fence: Put target");
    }
    R_CHECK(counter(C_FENCE) == n, "fence: counter %lld, want %ld", (long long)counter(C_FENCE), n);
}

static void phase_pscw(long n)
{
    MPI_Group world, gl, gr;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &gl);
    MPI_Group_incl(world, 1, &right, &gr);
    for (long i = 0; i < n; i++) {
        /* the left neighbour reads our B and writes our A during our exposure */
        r_stamp(win_base + OFF_B(0), SLOT, seed(r_rank, i, 'b'));
        R_MPI(MPI_Win_post(gl, 0, win));
        R_MPI(MPI_Win_start(gr, 0, win));
        r_stamp(sendbuf, SLOT, seed(r_rank, i, 'a'));
        R_MPI(MPI_Put(sendbuf, SLOT, MPI_BYTE, right, OFF_A(0), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Get(getbuf, SLOT, MPI_BYTE, right, OFF_B(0), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Accumulate(&one, 1, MPI_INT64_T, right, OFF_C(C_PSCW), 1, MPI_INT64_T,
                             MPI_SUM, win));
        R_MPI(MPI_Win_complete(win));
        R_MPI(MPI_Win_wait(win));
        r_check_stamp(getbuf, SLOT, seed(right, i, 'b'), "pscw: Get");
        r_check_stamp(win_base + OFF_A(0), SLOT, seed(left, i, 'a'), "pscw: Put target");
        R_CHECK(counter(C_PSCW) == i + 1, "pscw: counter %lld after epoch %ld",
                (long long)counter(C_PSCW), i);
    }
    MPI_Group_free(&gl);
    MPI_Group_free(&gr);
    MPI_Group_free(&world);
}

static void phase_lock(long n)
{
    for (long i = 0; i < n; i++) {
        int64_t old = -1;
        R_MPI(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
        r_stamp(sendbuf, SLOT, seed(r_rank, i, 'L'));
        R_MPI(MPI_Put(sendbuf, SLOT, MPI_BYTE, right, OFF_A(0), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Win_flush(right, win));
        R_MPI(MPI_Get(getbuf, SLOT, MPI_BYTE, right, OFF_A(0), SLOT, MPI_BYTE, win));
        R_MPI(MPI_Win_flush(right, win));
        r_check_stamp(getbuf, SLOT, seed(r_rank, i, 'L'), "lock: Get after Put+Flush");
        R_MPI(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, right, OFF_C(C_LOCK), MPI_SUM, win));
        R_MPI(MPI_Win_unlock(right, win));
        R_CHECK(old == i, "lock: Fetch_and_op returned %lld, want %ld", (long long)old, i);
    }
}

static void phase_req(long n)
{
    MPI_Request rq[3];
    R_MPI(MPI_Win_lock_all(0, win));
    r_stamp(win_base + OFF_B(0), ABYTES, seed(r_rank, 0, 'G'));
    R_MPI(MPI_Win_sync(win));
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));
    R_MPI(MPI_Win_sync(win));
    for (long i = 0; i < n; i++) {
        int s = (int)(i % NSLOT);
        r_stamp(sendbuf + s * SLOT, SLOT, seed(r_rank, i, 'R'));
        R_MPI(MPI_Rput(sendbuf + s * SLOT, SLOT, MPI_BYTE, right, OFF_A(0) + s * SLOT, SLOT,
                       MPI_BYTE, win, &rq[0]));
        R_MPI(MPI_Rget(getbuf, ABYTES, MPI_BYTE, right, OFF_B(0), ABYTES, MPI_BYTE, win, &rq[1]));
        R_MPI(MPI_Raccumulate(&one, 1, MPI_INT64_T, right, OFF_C(C_REQ), 1, MPI_INT64_T,
                              MPI_SUM, win, &rq[2]));
        R_MPI(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
        r_check_stamp(getbuf, ABYTES, seed(right, 0, 'G'), "req: Rget");
        if (s == NSLOT - 1 || i == n - 1) {
            /* everything we put is at the target now: read it back */
            R_MPI(MPI_Win_flush(right, win));
            R_MPI(MPI_Get(getbuf, ABYTES, MPI_BYTE, right, OFF_A(0), ABYTES, MPI_BYTE, win));
            R_MPI(MPI_Win_flush(right, win));
            for (int k = 0; k <= s; k++)
                r_check_stamp(getbuf + k * SLOT, SLOT, seed(r_rank, i - s + k, 'R'),
                              "req: Rput read back");
        }
    }
    R_MPI(MPI_Win_unlock_all(win));
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));
    R_MPI(MPI_Win_lock(MPI_LOCK_SHARED, r_rank, 0, win)); /* sync our own copy */
    int64_t c = counter(C_REQ);
    R_MPI(MPI_Win_unlock(r_rank, win));
    R_CHECK(c == n, "req: Raccumulate counter %lld, want %ld", (long long)c, n);
}

static void phase_self(long n)
{
    unsigned char *base;
    MPI_Win sw;
    R_MPI(MPI_Win_allocate(SLOT + 8, 1, MPI_INFO_NULL, MPI_COMM_SELF, &base, &sw));
    memset(base, 0, SLOT + 8);
    for (long i = 0; i < n; i++) {
        int64_t old = -1;
        R_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, sw));
        r_stamp(sendbuf, SLOT, seed(r_rank, i, 'S'));
        R_MPI(MPI_Put(sendbuf, SLOT, MPI_BYTE, 0, 0, SLOT, MPI_BYTE, sw));
        R_MPI(MPI_Win_flush(0, sw));
        R_MPI(MPI_Get_accumulate(&one, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, 0, SLOT, 1,
                                 MPI_INT64_T, MPI_SUM, sw));
        R_MPI(MPI_Win_flush(0, sw));
        R_MPI(MPI_Get(getbuf, SLOT, MPI_BYTE, 0, 0, SLOT, MPI_BYTE, sw));
        R_MPI(MPI_Win_flush(0, sw));
        R_MPI(MPI_Win_unlock(0, sw));
        R_CHECK(old == i, "self: Get_accumulate returned %lld, want %ld", (long long)old, i);
        r_check_stamp(getbuf, SLOT, seed(r_rank, i, 'S'), "self: Get after Put");
    }
    R_MPI(MPI_Win_free(&sw));
}

int main(int argc, char **argv)
{
    r_init(&argc, &argv);
    left = (r_rank + r_size - 1) % r_size;
    right = (r_rank + 1) % r_size;
    R_CHECK(r_size >= 2, "needs at least 2 ranks");

    R_MPI(MPI_Win_allocate(WBYTES, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_base, &win));
    memset(win_base, 0, WBYTES);
    R_MPI(MPI_Barrier(MPI_COMM_WORLD));

    double t0 = r_phase_begin(), t;
    t = r_phase_begin();
    phase_fence(r_iters(100000, 4));
    r_phase_end("fence", t);
    t = r_phase_begin();
    phase_pscw(r_iters(100000, 4));
    r_phase_end("pscw", t);
    t = r_phase_begin();
    phase_lock(r_iters(100000, 4));
    r_phase_end("lock", t);
    t = r_phase_begin();
    phase_req(r_iters(100000, 4));
    r_phase_end("req", t);
    t = r_phase_begin();
    phase_self(r_iters(100000, 4));
    r_phase_end("self", t);
    double wall = r_now() - t0;
    r_result("wall", "-", wall);

    R_MPI(MPI_Win_free(&win));
    if (r_rank == 0)
        printf("rma: OK (%d ranks)\n", r_size);
    MPI_Finalize();
    return 0;
}
