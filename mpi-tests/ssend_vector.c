/* ssend_vector.c -- synchronous sends and a strided (vector) derived datatype.
 *
 * Pairs (r, r + n/2), lower rank = a, higher = b.
 * 1. Ssend semantics: a notes t0, enters a barrier, then MPI_Issend; b leaves
 *    the barrier, sleeps DELAY and only then posts the receive.  b cannot have
 *    left the barrier before a entered it, so the Issend may not complete
 *    before t0 + DELAY on a's own clock (no cross-process clock comparison).
 *    Done for an empty, an eager-sized and a rendezvous-sized message.
 * 2. Vector type: a sends column `col` of a rows x cols int matrix with
 *    MPI_Type_vector(rows, 1, cols); b receives it contiguously; then b sends a
 *    contiguous block back and a receives it into a vector of blocklen 3 with
 *    stride 7 (resized extent); the gaps must stay untouched.  Small and large
 *    (rendezvous, pipelined) sizes, with MPI_Ssend.
 * 3. Buffered sends: both partners MPI_Bsend a burst of 1 KiB and 32 KiB
 *    messages (above the shm eager limit: rendezvous) from a buffer sized for
 *    exactly one burst, receive the partner's burst, synchronise, repeat.
 *    Once the partner has everything, every earlier Bsend must be complete
 *    and its buffer space free: a completion left for a later progress pass
 *    made the next burst fail with MPI_ERR_BUFFER.
 */
#include "common.h"

#define DELAY_MS 300

static void ssend_timing(int partner, int a, size_t len)
{
    unsigned char *buf = t_malloc(len);
    MPI_Request req;
    double t0;
    /* line everyone up first, so the timed barrier below does not also
     * absorb the previous round's delay (that would hide an early completion) */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = t_now();
    MPI_Barrier(MPI_COMM_WORLD);
    if (partner < 0)
        goto out;
    if (a) {
        int flag = 0;
        t_fill(buf, len, 0x55000 + len);
        MPI_Issend(buf, (int)len, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &req);
        /* MPI_Test, not Wait: a completion reported early is what we look for */
        while (!flag) {
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            if (!flag)
                usleep(200);
        }
        double el = t_now() - t0;
        CHECK(el >= DELAY_MS / 1000.0 - 0.005,
              "Issend of %zu bytes completed after %.3f s, before the receive was posted (>= %.3f s)",
              len, el, DELAY_MS / 1000.0);
    } else {
        MPI_Status st;
        int count = -1;
        t_sleep_ms(DELAY_MS);
        memset(buf, 0, len);
        MPI_Recv(buf, (int)len, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == (int)len, "Ssend %zu: count %d", len, count);
        CHECK_PATTERN(buf, len, 0x55000 + len, "Issend %zu", len);
    }
out:
    free(buf);
}

static void vector_exchange(int partner, int a, int rows, int cols, int col)
{
    MPI_Datatype column, strided3, strided3r;
    MPI_Status st;
    int count, i, j;
    MPI_Type_vector(rows, 1, cols, MPI_INT, &column);
    MPI_Type_commit(&column);
    /* 3 ints used out of every 7: blocklen 3, stride 7; count `rows` of the
     * resized type (extent 7 ints) so the type also works with count > 1 */
    MPI_Type_vector(1, 3, 7, MPI_INT, &strided3);
    MPI_Type_create_resized(strided3, 0, (MPI_Aint)(7 * sizeof(int)), &strided3r);
    MPI_Type_commit(&strided3r);

    if (a) {
        int *m = t_malloc(sizeof(int) * (size_t)rows * (size_t)cols);
        for (i = 0; i < rows; i++)
            for (j = 0; j < cols; j++)
                m[(size_t)i * cols + j] = (int)(t_mix((uint64_t)i * 1000003u + (uint64_t)j) & 0x7fffffff);
        MPI_Ssend(m + col, 1, column, partner, 20, MPI_COMM_WORLD);

        /* back: 3*rows contiguous ints into the strided layout */
        int *s = t_malloc(sizeof(int) * 7 * (size_t)rows);
        for (i = 0; i < 7 * rows; i++)
            s[i] = -12345;
        MPI_Recv(s, rows, strided3r, partner, 21, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, strided3r, &count);
        CHECK(count == rows, "strided recv: count %d of %d", count, rows);
        MPI_Get_elements(&st, MPI_INT, &count);
        CHECK(count == 3 * rows, "strided recv: %d ints of %d", count, 3 * rows);
        long bad = 0, gap = 0;
        for (i = 0; i < rows; i++)
            for (j = 0; j < 7; j++) {
                int v = s[(size_t)i * 7 + j];
                if (j < 3) {
                    int want = (int)(t_mix(0xABCD0000u + (uint64_t)i * 3 + (uint64_t)j) & 0x7fffffff);
                    bad += v != want;
                } else {
                    gap += v != -12345;
                }
            }
        CHECK(bad == 0 && gap == 0, "strided recv of %d rows: %ld wrong values, %ld gap ints written",
              rows, bad, gap);
        free(m);
        free(s);
    } else {
        int *c = t_malloc(sizeof(int) * (size_t)rows + 64);
        memset(c, 0x11, sizeof(int) * (size_t)rows + 64);
        MPI_Recv(c, rows, MPI_INT, partner, 20, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(count == rows, "column recv: %d ints of %d", count, rows);
        long bad = 0;
        for (i = 0; i < rows; i++)
            bad += c[i] != (int)(t_mix((uint64_t)i * 1000003u + (uint64_t)col) & 0x7fffffff);
        CHECK(bad == 0, "column %d of %dx%d: %ld wrong values", col, rows, cols, bad);
        for (i = 0; i < 64; i++)
            if (((unsigned char *)(c + rows))[i] != 0x11) {
                CHECK(0, "column recv wrote past %d ints", rows);
                break;
            }

        int *s = t_malloc(sizeof(int) * 3 * (size_t)rows);
        for (i = 0; i < rows; i++)
            for (j = 0; j < 3; j++)
                s[(size_t)i * 3 + j] = (int)(t_mix(0xABCD0000u + (uint64_t)i * 3 + (uint64_t)j) & 0x7fffffff);
        MPI_Ssend(s, 3 * rows, MPI_INT, partner, 21, MPI_COMM_WORLD);
        free(c);
        free(s);
    }
    MPI_Type_free(&column);
    MPI_Type_free(&strided3);
    MPI_Type_free(&strided3r);
}

#define BURST 8
#define BURSTS 3000

static void bsend_bursts(int partner)
{
    int need = 0, one;
    for (int k = 0; k < BURST; k++) {
        MPI_Pack_size(k % 2 ? 32768 : 1024, MPI_BYTE, MPI_COMM_WORLD, &one);
        need += one + MPI_BSEND_OVERHEAD;
    }
    unsigned char *att = t_malloc((size_t)need), *sb = t_malloc(32768), *rb = t_malloc(32768);
    void *got;
    int sz;
    MPI_Buffer_attach(att, need);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    unsigned char *fallback = t_malloc((size_t)BURST * 32768);
    for (int i = 0; i < BURSTS; i++) {
        MPI_Request sent[BURST];
        int nsent = 0;
        for (int k = 0; k < BURST; k++) {
            int len = k % 2 ? 32768 : 1024, rc;
            t_fill(sb, (size_t)len, (uint64_t)(i * BURST + k) ^ ((uint64_t)t_rank << 32));
            rc = MPI_Bsend(sb, len, MPI_BYTE, partner, 40 + k, MPI_COMM_WORLD);
            CHECK(rc == MPI_SUCCESS, "burst %d: MPI_Bsend of %d bytes failed (error %d)", i, len, rc);
            if (rc != MPI_SUCCESS) {
                /* still deliver it, so the partner does not hang */
                memcpy(fallback + (size_t)k * 32768, sb, (size_t)len);
                MPI_Isend(fallback + (size_t)k * 32768, len, MPI_BYTE, partner, 40 + k, MPI_COMM_WORLD,
                          &sent[nsent++]);
            }
        }
        for (int k = 0; k < BURST; k++) {
            int len = k % 2 ? 32768 : 1024;
            MPI_Recv(rb, len, MPI_BYTE, partner, 40 + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK_PATTERN(rb, (size_t)len, (uint64_t)(i * BURST + k) ^ ((uint64_t)partner << 32),
                          "burst %d message %d", i, k);
        }
        MPI_Waitall(nsent, sent, MPI_STATUSES_IGNORE);
        MPI_Sendrecv(NULL, 0, MPI_BYTE, partner, 49, NULL, 0, MPI_BYTE, partner, 49, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
    free(fallback);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Buffer_detach(&got, &sz);
    free(att);
    free(sb);
    free(rb);
}

int main(int argc, char **argv)
{
    int partner, a;
    t_init(&argc, &argv);
    partner = t_partner(t_rank, t_size);
    a = partner >= 0 && t_rank < partner;

    ssend_timing(partner, a, 0);
    ssend_timing(partner, a, 1000);
    ssend_timing(partner, a, 300000);

    if (partner >= 0) {
        vector_exchange(partner, a, 5, 4, 2);
        vector_exchange(partner, a, 1000, 9, 8);       /* 4 KB: around eager limits */
        vector_exchange(partner, a, 200000, 5, 0);     /* 800 KB column from a 4 MB matrix */
        /* blocking Ssend of 0 bytes still synchronises and delivers an empty message */
        if (a) {
            MPI_Ssend(NULL, 0, MPI_BYTE, partner, 30, MPI_COMM_WORLD);
        } else {
            MPI_Status st;
            int count = -1;
            MPI_Recv(NULL, 0, MPI_BYTE, partner, 30, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(count == 0 && st.MPI_SOURCE == partner && st.MPI_TAG == 30,
                  "empty Ssend: count %d source %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
        }
    }
    if (partner >= 0) {
        bsend_bursts(partner);
    }
    return t_finish("ssend_vector");
}
