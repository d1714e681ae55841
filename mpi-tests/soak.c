/* soak.c -- a long run of mixed traffic that checks every byte.
 *
 * Usage: soak SECONDS [PIDDIR]
 *
 * Rounds until rank 0 says SECONDS are up.  In each round every rank sends
 * every other rank a burst of messages whose number, sizes and seeds come
 * from plan() -- a pure function of (round, source, destination), so the
 * receiver knows what to expect without being told.  Sizes run from 1 B to
 * 4 MiB, across the eager limit (64 KiB), the max send size (128 KiB), the
 * ring's quarter (256 KiB: only for the C API, MPI sends fragments) and the
 * single-copy (RGET) sizes.  Sends are Isends, all posted at once (a burst);
 * receives are wildcards (MPI_ANY_SOURCE, MPI_ANY_TAG), a different way each
 * round: Probe + Recv, pre-posted Irecvs completed by Waitany, or blocking
 * Recv into a buffer of the largest size.  The tag is the message's number
 * in its burst; source, tag and length say which message arrived, and its
 * bytes must be that message's pattern.  Each message must arrive exactly
 * once.  A round ends with an Allreduce (rank 0's "stop?" and everyone's
 * error count), so rounds never mix.
 *
 * With PIDDIR, each rank writes its pid to PIDDIR/rank.N, so that soak.sh
 * can SIGSTOP and SIGCONT ranks while they work.
 *
 * Rank 0 prints "soak: OK ..." (or failed checks) with messages, bytes and
 * rounds; soak.sh adds the wake-ups from the component's counters. */
#include "common.h"

#include <errno.h>

#define MAX_BURST 48
#define MAX_LEN (4u << 20)
#define POSTED 4

/* One message of a burst. */
struct msg {
    uint32_t len;
    uint64_t seed;
};

/* The burst from src to dst in `round`: returns the count, fills m[]. */
static int plan(long round, int src, int dst, struct msg *m)
{
    uint64_t s = t_mix(((uint64_t)round << 20) ^ ((uint64_t)src << 10) ^ (uint64_t)dst ^ 0x50a6ull);
    uint64_t r = t_mix(s);
    int n;
    if (r % 10 == 0)
        n = 16 + (int)(t_mix(r) % (MAX_BURST - 15)); /* a burst of many */
    else
        n = (int)(r % 6);
    for (int k = 0; k < n; k++) {
        uint64_t x = t_mix(s + 1 + (uint64_t)k);
        uint32_t len;
        switch (x % 20) {
        case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7:
            len = 1 + (uint32_t)((x >> 8) % 256); /* small: one ring record */
            break;
        case 8: case 9: case 10: case 11: case 12:
            len = 256 + (uint32_t)((x >> 8) % (64 << 10)); /* up to the eager limit */
            break;
        case 13: case 14: case 15:
            len = (64 << 10) + (uint32_t)((x >> 8) % (960 << 10)); /* rendezvous, RGET */
            break;
        case 16:
            len = (64 << 10) + (uint32_t)((x >> 8) % 16) - 8; /* around the eager limit */
            break;
        default:
            len = (1u << 20) + (uint32_t)((x >> 8) % (MAX_LEN - (1u << 20) + 1));
            break;
        }
        /* a burst of many stays small, so a round stays short */
        if (n > 8 && len > 4096)
            len = 1 + len % 4096;
        m[k].len = len;
        m[k].seed = t_mix(x ^ 0x5eedull) & 0xffffff;
    }
    return n;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (argc < 2 || t_size < 2) {
        if (t_rank == 0)
            fprintf(stderr, "usage: mpirun -np N>=2 soak SECONDS [PIDDIR]\n");
        MPI_Finalize();
        return 2;
    }
    double seconds = atof(argv[1]);
    if (argc > 2) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank.%d", argv[2], t_rank);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "cannot write %s: %s", path, strerror(errno));
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    int n = t_size;
    struct msg (*out)[MAX_BURST] = t_malloc(sizeof(*out) * (size_t)n);
    struct msg (*in)[MAX_BURST] = t_malloc(sizeof(*in) * (size_t)n);
    int *nout = t_malloc(sizeof(int) * (size_t)n);
    int *nin = t_malloc(sizeof(int) * (size_t)n);
    unsigned char (*seen)[MAX_BURST] = t_malloc(sizeof(*seen) * (size_t)n);
    unsigned char **sbuf = t_malloc(sizeof(unsigned char *) * (size_t)n * MAX_BURST);
    MPI_Request *sreq = t_malloc(sizeof(MPI_Request) * (size_t)n * MAX_BURST);
    unsigned char *rbuf[POSTED];
    for (int i = 0; i < POSTED; i++)
        rbuf[i] = t_malloc(MAX_LEN);
    long long msgs = 0, bytes = 0;
    long round = 0;
    double t0 = t_now();

    for (;; round++) {
        /* ---- sends: every burst of this round, posted at once ---- */
        int ns = 0;
        for (int d = 0; d < n; d++) {
            nout[d] = d == t_rank ? 0 : plan(round, t_rank, d, out[d]);
            for (int k = 0; k < nout[d]; k++) {
                unsigned char *b = t_malloc(out[d][k].len);
                t_fill(b, out[d][k].len, out[d][k].seed);
                sbuf[ns] = b;
                MPI_Isend(b, (int)out[d][k].len, MPI_BYTE, d, k, MPI_COMM_WORLD, &sreq[ns]);
                ns++;
            }
        }
        /* ---- what to expect ---- */
        long expect = 0;
        for (int s = 0; s < n; s++) {
            nin[s] = s == t_rank ? 0 : plan(round, s, t_rank, in[s]);
            memset(seen[s], 0, MAX_BURST);
            expect += nin[s];
        }
        /* ---- wildcard receives, one of three ways ---- */
        int how = (int)(round % 3);
        long got = 0, posted = 0;
        MPI_Request rreq[POSTED];
        if (how == 1) {
            for (int i = 0; i < POSTED; i++) {
                rreq[i] = MPI_REQUEST_NULL;
                if (posted < expect) {
                    MPI_Irecv(rbuf[i], MAX_LEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rreq[i]);
                    posted++;
                }
            }
        }
        while (got < expect) {
            MPI_Status st;
            unsigned char *b;
            int idx = -1, count = 0;
            if (how == 0) {
                MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                b = t_malloc((size_t)count);
                MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
            } else if (how == 1) {
                MPI_Waitany(POSTED, rreq, &idx, &st);
                b = rbuf[idx];
            } else {
                MPI_Recv(rbuf[0], MAX_LEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                b = rbuf[0];
            }
            MPI_Get_count(&st, MPI_BYTE, &count);
            int s = st.MPI_SOURCE, k = st.MPI_TAG;
            if (s < 0 || s >= n || s == t_rank || k < 0 || k >= nin[s]) {
                t_fail(__FILE__, __LINE__, "known message", "round %ld: from %d tag %d (%d B): not in the plan",
                       round, s, k, count);
            } else {
                CHECK(!seen[s][k], "round %ld: message %d from %d arrived twice", round, k, s);
                seen[s][k] = 1;
                CHECK((uint32_t)count == in[s][k].len, "round %ld: message %d from %d: %d B, expected %u",
                      round, k, s, count, in[s][k].len);
                if ((uint32_t)count == in[s][k].len)
                    CHECK_PATTERN(b, (size_t)count, in[s][k].seed, "round %ld message %d from %d", round, k, s);
            }
            msgs++;
            bytes += count;
            got++;
            if (how == 0)
                free(b);
            if (how == 1 && posted < expect) {
                MPI_Irecv(rbuf[idx], MAX_LEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rreq[idx]);
                posted++;
            }
        }
        MPI_Waitall(ns, sreq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < ns; i++)
            free(sbuf[i]);
        for (int s = 0; s < n; s++)
            for (int k = 0; k < nin[s]; k++)
                CHECK(seen[s][k], "round %ld: message %d from %d never arrived", round, k, s);
        /* ---- end of round: stop?  (rank 0's clock decides for all) ---- */
        long v[2] = { t_rank == 0 && t_now() - t0 >= seconds, t_errors }, w[2];
        MPI_Allreduce(v, w, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (w[0] || w[1] > 100)
            break;
    }

    long long mine[2] = { msgs, bytes }, all[2];
    MPI_Reduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (t_rank == 0) {
        printf("soak: %ld rounds in %.1f s, messages=%lld bytes=%lld\n", round + 1, t_now() - t0, all[0], all[1]);
        fflush(stdout);
    }
    for (int i = 0; i < POSTED; i++)
        free(rbuf[i]);
    free(out);
    free(in);
    free(nout);
    free(nin);
    free(seen);
    free(sbuf);
    free(sreq);
    return t_finish("soak");
}
