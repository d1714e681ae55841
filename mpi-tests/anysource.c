/* anysource.c -- MPI_ANY_SOURCE / MPI_ANY_TAG matching and the non-overtaking rule.
 *
 * In round `root` every other rank posts K sends to root, in order, with varying
 * tags and a mix of small (eager) and large (rendezvous) sizes.  Each message
 * carries (sender, seq, tag, len) and a patterned body.  Root receives:
 *   even rounds: all messages with ANY_SOURCE + ANY_TAG;
 *   odd rounds:  sender by sender in descending rank order with ANY_TAG, so
 *                the other senders' messages pile up as unexpected meanwhile.
 * Either way, messages from one sender must arrive in the order sent (seq+1),
 * and status source/tag/count must match what the message says about itself.
 */
#include "common.h"

#define K 100
#define HDR 4 /* ints: sender, seq, tag, len */

static size_t msg_len(int seq)
{
    /* every 10th is above every eager limit we test (tcp's is 64 KiB) */
    return seq % 10 == 9 ? (size_t)70000 + (size_t)seq : HDR * sizeof(int) + (size_t)(seq % 50) * 3;
}

static int msg_tag(int src, int seq)
{
    return (seq * 7 + src * 3) % 97;
}

static uint64_t msg_seed(int src, int dst, int seq)
{
    return ((uint64_t)src << 24) ^ ((uint64_t)dst << 12) ^ (uint64_t)seq;
}

int main(int argc, char **argv)
{
    int root, i;
    size_t maxlen = 70000 + K;

    t_init(&argc, &argv);
    for (root = 0; root < t_size; root++) {
        if (t_rank == root) {
            int *next = calloc((size_t)t_size, sizeof(int));
            unsigned char *buf = t_malloc(maxlen);
            int total = (t_size - 1) * K, got = 0;
            int src_order = t_size - 1;
            while (got < total) {
                MPI_Status st;
                int count, want_src = MPI_ANY_SOURCE;
                if (root % 2 == 1) {
                    /* sender by sender, highest rank first, skipping root */
                    while (src_order == root || (src_order >= 0 && next[src_order] == K))
                        src_order--;
                    want_src = src_order;
                }
                /* halfway, let messages pile up in the unexpected queue */
                if (got == total / 2)
                    t_sleep_ms(50);
                MPI_Recv(buf, (int)maxlen, MPI_BYTE, want_src, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                got++;
                int *h = (int *)buf;
                if (count < (int)(HDR * sizeof(int))) {
                    CHECK(0, "round %d: short message %d bytes from %d", root, count, st.MPI_SOURCE);
                    continue;
                }
                int src = h[0], seq = h[1];
                CHECK(src == st.MPI_SOURCE, "round %d: status source %d, payload says %d", root,
                      st.MPI_SOURCE, src);
                if (want_src != MPI_ANY_SOURCE)
                    CHECK(st.MPI_SOURCE == want_src, "round %d: asked for %d got %d", root, want_src,
                          st.MPI_SOURCE);
                if (src < 0 || src >= t_size || src == root) {
                    CHECK(0, "round %d: bogus sender %d", root, src);
                    continue;
                }
                CHECK(seq == next[src], "round %d: from %d got seq %d, expected %d (overtaking)",
                      root, src, seq, next[src]);
                CHECK(h[2] == st.MPI_TAG && st.MPI_TAG == msg_tag(src, seq),
                      "round %d: tag %d, payload %d, expected %d", root, st.MPI_TAG, h[2], msg_tag(src, seq));
                CHECK(h[3] == count && (size_t)count == msg_len(seq),
                      "round %d: count %d, payload %d, expected %zu", root, count, h[3], msg_len(seq));
                CHECK_PATTERN(buf + HDR * sizeof(int), (size_t)count - HDR * sizeof(int),
                              msg_seed(src, root, seq), "round %d from %d seq %d", root, src, seq);
                next[src] = seq + 1;
            }
            for (i = 0; i < t_size; i++)
                if (i != root)
                    CHECK(next[i] == K, "round %d: %d messages from %d", root, next[i], i);
            free(next);
            free(buf);
        } else {
            MPI_Request req[K];
            unsigned char *bufs[K];
            for (i = 0; i < K; i++) {
                size_t len = msg_len(i);
                bufs[i] = t_malloc(len);
                int h[HDR] = { t_rank, i, msg_tag(t_rank, i), (int)len };
                memcpy(bufs[i], h, sizeof h);
                t_fill(bufs[i] + sizeof h, len - sizeof h, msg_seed(t_rank, root, i));
                /* posted in seq order: that order is what non-overtaking promises */
                MPI_Isend(bufs[i], (int)len, MPI_BYTE, root, msg_tag(t_rank, i), MPI_COMM_WORLD, &req[i]);
            }
            MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
            for (i = 0; i < K; i++)
                free(bufs[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    return t_finish("anysource");
}
