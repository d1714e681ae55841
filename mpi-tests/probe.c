/* probe.c -- MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv and MPI_Improbe.
 *
 * Pairs (r, r + n/2): the lower rank sends N messages of assorted sizes (0 B to
 * above every eager limit) with varying tags; the higher rank learns each
 * message's size by probing, receives it into a buffer of exactly that size and
 * checks it.  The probe method rotates: Probe (then Iprobe must see the same
 * message again: probing does not consume), Iprobe polling, Mprobe + Mrecv,
 * Improbe polling + Mrecv.  Also: a tag that is never sent is never probed,
 * and Mprobe on MPI_PROC_NULL yields MPI_MESSAGE_NO_PROC.
 */
#include "common.h"

#define N 80
#define HDR 2 /* ints: seq, len */
#define NEVER_TAG 31999

static size_t msg_len(int i)
{
    static const size_t sz[] = { 0, 8, 1, 100, 4095, 4097, 33000, 65600, 140000, 1 << 20 };
    size_t s = sz[i % 10];
    return s < HDR * sizeof(int) ? HDR * sizeof(int) : s; /* header always fits */
}

static int msg_tag(int i)
{
    return 10 + (i * 13) % 50;
}

static void check_msg(const unsigned char *buf, int count, int i, int src, const char *how)
{
    const int *h = (const int *)buf;
    CHECK(count == (int)msg_len(i), "%s msg %d: count %d expected %zu", how, i, count, msg_len(i));
    CHECK(h[0] == i, "%s msg %d: payload seq %d (order broken)", how, i, h[0]);
    CHECK(h[1] == count, "%s msg %d: payload len %d count %d", how, i, h[1], count);
    CHECK_PATTERN(buf + HDR * sizeof(int), (size_t)count - HDR * sizeof(int),
                  ((uint64_t)src << 16) | (uint64_t)i, "%s msg %d", how, i);
}

int main(int argc, char **argv)
{
    int partner, i, flag;
    MPI_Status st, st2;

    t_init(&argc, &argv);
    partner = t_partner(t_rank, t_size);
    if (partner >= 0 && t_rank < partner) {
        MPI_Request req[N];
        unsigned char *bufs[N];
        for (i = 0; i < N; i++) {
            size_t len = msg_len(i);
            int h[HDR] = { i, (int)len };
            bufs[i] = t_malloc(len);
            memcpy(bufs[i], h, sizeof h);
            t_fill(bufs[i] + sizeof h, len - sizeof h, ((uint64_t)t_rank << 16) | (uint64_t)i);
            MPI_Isend(bufs[i], (int)len, MPI_BYTE, partner, msg_tag(i), MPI_COMM_WORLD, &req[i]);
        }
        MPI_Waitall(N, req, MPI_STATUSES_IGNORE);
        for (i = 0; i < N; i++)
            free(bufs[i]);
    } else if (partner >= 0) {
        for (i = 0; i < N; i++) {
            int count = -1, count2 = -1, method = i % 4;
            unsigned char *buf;
            if (method == 0) {
                MPI_Probe(partner, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                /* probing again must find the same, still unreceived, message */
                MPI_Iprobe(partner, st.MPI_TAG, MPI_COMM_WORLD, &flag, &st2);
                MPI_Get_count(&st2, MPI_BYTE, &count2);
                CHECK(flag && st2.MPI_TAG == st.MPI_TAG && count2 == count,
                      "msg %d: re-probe flag %d tag %d/%d count %d/%d", i, flag, st2.MPI_TAG,
                      st.MPI_TAG, count2, count);
            } else if (method == 1) {
                do {
                    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
                } while (!flag);
                MPI_Get_count(&st, MPI_BYTE, &count);
            }
            if (method <= 1) {
                CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == msg_tag(i),
                      "msg %d: probed source %d tag %d, expected %d %d", i, st.MPI_SOURCE,
                      st.MPI_TAG, partner, msg_tag(i));
                buf = t_malloc((size_t)count);
                MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2);
                MPI_Get_count(&st2, MPI_BYTE, &count2);
                CHECK(count2 == count, "msg %d: probed %d bytes, received %d", i, count, count2);
                check_msg(buf, count2, i, partner, method == 0 ? "Probe" : "Iprobe");
            } else {
                MPI_Message msg = MPI_MESSAGE_NULL;
                if (method == 2) {
                    MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
                } else {
                    do {
                        MPI_Improbe(partner, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
                    } while (!flag);
                }
                CHECK(msg != MPI_MESSAGE_NULL && msg != MPI_MESSAGE_NO_PROC, "msg %d: no message handle", i);
                CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == msg_tag(i),
                      "msg %d: mprobed source %d tag %d", i, st.MPI_SOURCE, st.MPI_TAG);
                MPI_Get_count(&st, MPI_BYTE, &count);
                buf = t_malloc((size_t)count);
                MPI_Mrecv(buf, count, MPI_BYTE, &msg, &st2);
                CHECK(msg == MPI_MESSAGE_NULL, "msg %d: Mrecv did not reset the handle", i);
                MPI_Get_count(&st2, MPI_BYTE, &count2);
                CHECK(count2 == count && st2.MPI_SOURCE == partner && st2.MPI_TAG == msg_tag(i),
                      "msg %d: Mrecv count %d/%d source %d tag %d", i, count2, count, st2.MPI_SOURCE,
                      st2.MPI_TAG);
                check_msg(buf, count2, i, partner, method == 2 ? "Mprobe" : "Improbe");
            }
            free(buf);
        }
        /* everything sent has been received: nothing may be left to probe */
        MPI_Iprobe(partner, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        CHECK(!flag, "a message nobody sent was probed (tag %d)", st.MPI_TAG);
    }

    /* never-sent tag: Iprobe must say no, even after a barrier lets traffic settle */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Iprobe(MPI_ANY_SOURCE, NEVER_TAG, MPI_COMM_WORLD, &flag, &st);
    CHECK(!flag, "Iprobe found tag %d that nobody sent", NEVER_TAG);
    {
        MPI_Message msg = MPI_MESSAGE_NULL;
        int count = -1;
        MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st);
        CHECK(msg == MPI_MESSAGE_NO_PROC, "Mprobe(PROC_NULL) handle is not MESSAGE_NO_PROC");
        MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && count == 0, "Mrecv(NO_PROC): source %d count %d",
              st.MPI_SOURCE, count);
    }
    return t_finish("probe");
}
