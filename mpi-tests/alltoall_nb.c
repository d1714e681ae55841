/* alltoall_nb.c -- hundreds of outstanding Isend/Irecv in an all-to-all.
 *
 * Every rank exchanges M messages with every other rank (M chosen so that each
 * rank has >= 600 requests in flight), sizes cycling from 0 B to 150 KB, in
 * three rounds that differ in posting order and completion call:
 *   round 0: all Irecvs first, then Isends; MPI_Waitall
 *   round 1: all Isends first (receives arrive unexpected); MPI_Waitsome loop
 *   round 2: interleaved, peers in a rotated order; MPI_Testany loop
 * Each receive is checked for source, tag, count and pattern.
 */
#include "common.h"

static size_t msg_len(int src, int dst, int k)
{
    static const size_t sz[] = { 0, 1, 100, 4000, 20000, 150000, 64 };
    return sz[(unsigned)(k + src + dst) % 7];
}

static uint64_t seed(int round, int src, int dst, int k)
{
    return ((uint64_t)round << 36) | ((uint64_t)src << 24) | ((uint64_t)dst << 12) | (uint64_t)k;
}

int main(int argc, char **argv)
{
    int round, peers, m, nreq, i;
    t_init(&argc, &argv);
    peers = t_size - 1;
    if (peers == 0)
        return t_finish("alltoall_nb");
    m = (300 + peers - 1) / peers; /* per peer and direction */
    nreq = 2 * m * peers;

    MPI_Request *req = t_malloc(sizeof(MPI_Request) * (size_t)nreq);
    MPI_Status *sts = t_malloc(sizeof(MPI_Status) * (size_t)nreq);
    MPI_Status *wst = t_malloc(sizeof(MPI_Status) * (size_t)nreq);
    int *idx = t_malloc(sizeof(int) * (size_t)nreq);
    unsigned char **buf = t_malloc(sizeof(unsigned char *) * (size_t)nreq);
    /* request slot j: j < m*peers are receives, the rest sends */
    int *r_src = t_malloc(sizeof(int) * (size_t)nreq), *r_k = t_malloc(sizeof(int) * (size_t)nreq);

    for (round = 0; round < 3; round++) {
        int p, k, nr = 0, ns = m * peers, done = 0;
        /* receives */
        for (p = 1; p <= peers; p++) {
            int src = (t_rank + p) % t_size;
            for (k = 0; k < m; k++, nr++) {
                r_src[nr] = src;
                r_k[nr] = k;
                buf[nr] = t_malloc(msg_len(src, t_rank, k) + 16);
                memset(buf[nr], 0x5A, msg_len(src, t_rank, k) + 16);
            }
        }
        for (i = 0; i < ns; i++) {
            int dst = (t_rank + 1 + i / m) % t_size, kk = i % m;
            size_t len = msg_len(t_rank, dst, kk);
            buf[ns + i] = t_malloc(len);
            t_fill(buf[ns + i], len, seed(round, t_rank, dst, kk));
        }
#define POST_RECV(j)                                                                         \
    MPI_Irecv(buf[j], (int)msg_len(r_src[j], t_rank, r_k[j]) + 16, MPI_BYTE, r_src[j], r_k[j], \
              MPI_COMM_WORLD, &req[j])
#define POST_SEND(i)                                                                         \
    MPI_Isend(buf[ns + (i)], (int)msg_len(t_rank, (t_rank + 1 + (i) / m) % t_size, (i) % m),   \
              MPI_BYTE, (t_rank + 1 + (i) / m) % t_size, (i) % m, MPI_COMM_WORLD, &req[ns + (i)])
        if (round == 0) {
            for (i = 0; i < ns; i++)
                POST_RECV(i);
            for (i = 0; i < ns; i++)
                POST_SEND(i);
            MPI_Waitall(nreq, req, sts);
        } else if (round == 1) {
            for (i = 0; i < ns; i++)
                POST_SEND(i);
            MPI_Barrier(MPI_COMM_WORLD); /* sends are out before anyone posts a receive */
            for (i = 0; i < ns; i++)
                POST_RECV(i);
            while (done < nreq) {
                int outc = 0, j;
                MPI_Waitsome(nreq, req, &outc, idx, wst);
                CHECK(outc != MPI_UNDEFINED, "Waitsome: no active requests with %d done", done);
                if (outc == MPI_UNDEFINED)
                    break;
                for (j = 0; j < outc; j++)
                    sts[idx[j]] = wst[j];
                done += outc;
            }
        } else {
            for (i = 0; i < ns; i++) {
                POST_RECV(ns - 1 - i);
                POST_SEND(i);
            }
            while (done < nreq) {
                int j, flag;
                MPI_Status st;
                MPI_Testany(nreq, req, &j, &flag, &st);
                if (flag && j != MPI_UNDEFINED) {
                    sts[j] = st;
                    done++;
                } else if (flag) {
                    CHECK(0, "Testany: no active requests with %d done", done);
                    break;
                }
            }
        }
        for (i = 0; i < ns; i++) {
            size_t len = msg_len(r_src[i], t_rank, r_k[i]);
            int count = -1;
            MPI_Get_count(&sts[i], MPI_BYTE, &count);
            CHECK(sts[i].MPI_SOURCE == r_src[i] && sts[i].MPI_TAG == r_k[i] && count == (int)len,
                  "round %d recv %d: source %d/%d tag %d/%d count %d/%zu", round, i,
                  sts[i].MPI_SOURCE, r_src[i], sts[i].MPI_TAG, r_k[i], count, len);
            CHECK_PATTERN(buf[i], len, seed(round, r_src[i], t_rank, r_k[i]),
                          "round %d from %d k %d", round, r_src[i], r_k[i]);
            for (size_t g = 0; g < 16; g++)
                if (buf[i][len + g] != 0x5A) {
                    CHECK(0, "round %d from %d k %d: wrote past the message", round, r_src[i], r_k[i]);
                    break;
                }
        }
        for (i = 0; i < nreq; i++) {
            CHECK(req[i] == MPI_REQUEST_NULL, "round %d: request %d not completed", round, i);
            free(buf[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (t_rank == 0)
        printf("alltoall_nb: %d requests in flight per rank per round\n", nreq);
    free(req); free(sts); free(wst); free(idx); free(buf); free(r_src); free(r_k);
    return t_finish("alltoall_nb");
}
