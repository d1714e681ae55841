/* fi_check.c -- the doorbell provider through libfabric's own API, no MPI.
 *
 * Usage: FI_PROVIDER_PATH=<dir of libdoorbell-fi.so> fi_check [api [waitfd]]
 *   api: "1.17" (default) or "core": ask for the running core's version
 *   (2.x under the MPICH wheel's libfabric; the error entry then has the
 *   2.x source address after the 1.17 fields, which is checked).
 *   waitfd: the receiver's CQ has FI_WAIT_FD; fi_trywait, then poll() on
 *   its descriptor must wake on the late message.
 *
 * Forks a peer; the two are tasks 0 and 1 of a private job and talk over
 * the core's shared memory (FI_DOORBELL_FORCE_TCP=1: over TCP).  Checks:
 * a peek that finds nothing completes with FI_ENOMSG; peek+claim then a
 * claimed receive; remote CQ data and tags; truncation (FI_ETRUNC, olen);
 * fi_cancel (FI_ECANCELED); directed receives ignore other sources;
 * multi-receive offsets and release; a message to ourselves; fi_cq_sread
 * waking on a message and timing out; fi_cntr_wait; five messages that
 * wait in the core until one read of 16 entries (fi_cq_readfrom) takes
 * them, a truncated one among them: the completions leave in their order,
 * the error through fi_cq_readerr in its place, each with its source;
 * forty sends completed before any read, then taken by reads of 16: each
 * context reported once.
 * Prints "fi_check: OK" when every check held.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int me, failures;
static int to_peer, from_peer; /* pipes */

#define CHECK(c, ...)                                                                      \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "task %d: CHECK FAILED %s:%d: %s: ", me, __FILE__, __LINE__, #c); \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)
#define OK(call)                                                                           \
    do {                                                                                   \
        long rc_ = (long)(call);                                                           \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "task %d: %s failed: %ld %s\n", me, #call, rc_, fi_strerror((int)-rc_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_cntr *rcntr;
static fi_addr_t self_addr, peer_addr;
static int api_2x, waitfd, long_msg, drain;
static double wait_s = 5; /* how long next() waits for a completion */
static size_t info_max_msg; /* the provider's max_msg_size */
static const char *step = "start"; /* for the error message */
static struct fid_fabric *fabric;

/* The error entry as a 2.x core's application sees it. */
struct err_entry_2x {
    struct fi_cq_err_entry e;
    fi_addr_t src_addr;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sync_peer(void)
{
    char c = 's';
    if (write(to_peer, &c, 1) != 1 || read(from_peer, &c, 1) != 1) {
        fprintf(stderr, "task %d: peer gone\n", me);
        exit(2);
    }
}

/* One completion or error: 1 ok, -1 error (in *err), spinning up to wait_s. */
static int next(struct fi_cq_tagged_entry *e, struct err_entry_2x *err)
{
    double end = now_s() + wait_s;
    while (now_s() < end) {
        ssize_t n = fi_cq_read(cq, e, 1);
        if (n == 1)
            return 1;
        if (n == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            err->src_addr = 0x5a5a5a5a;
            OK(fi_cq_readerr(cq, &err->e, 0));
            return -1;
        }
        if (n != -FI_EAGAIN) {
            fprintf(stderr, "task %d: fi_cq_read: %zd\n", me, n);
            exit(2);
        }
    }
    fprintf(stderr, "task %d: no completion in %.0f s (%s)\n", me, wait_s, step);
    exit(2);
}

static void expect_ok(struct fi_cq_tagged_entry *e, void *ctx, const char *what)
{
    struct err_entry_2x err;
    int r;
    step = what;
    r = next(e, &err);
    CHECK(r == 1, "%s: error %d", what, r == 1 ? 0 : err.e.err);
    CHECK(e->op_context == ctx, "%s: context %p, want %p", what, e->op_context, ctx);
}

static void expect_err(int want, void *ctx, size_t olen, const char *what)
{
    struct fi_cq_tagged_entry e;
    struct err_entry_2x err;
    int r;
    step = what;
    r = next(&e, &err);
    CHECK(r == -1 && err.e.err == want, "%s: got %s err %d, want %d", what, r == 1 ? "success" : "error",
          r == 1 ? 0 : err.e.err, want);
    if (r == -1) {
        CHECK(err.e.op_context == ctx, "%s: context %p, want %p", what, err.e.op_context, ctx);
        CHECK(err.e.olen == olen, "%s: olen %zu, want %zu", what, err.e.olen, olen);
        /* 2.x writes the source address after the 1.17 fields; 1.17 does not. */
        if (api_2x)
            CHECK(err.src_addr != 0x5a5a5a5a, "%s: 2.x src_addr not written", what);
        else
            CHECK(err.src_addr == 0x5a5a5a5a, "%s: wrote past the 1.17 error entry", what);
    }
}

static void send_tagged(const void *buf, size_t len, uint64_t tag, uint64_t data, fi_addr_t to)
{
    static struct fi_context ctx;
    struct fi_cq_tagged_entry e;
    ssize_t rc;
    while ((rc = fi_tsenddata(ep, buf, len, NULL, data, to, tag, &ctx)) == -FI_EAGAIN)
        (void)fi_cq_read(cq, NULL, 0);
    OK(rc);
    expect_ok(&e, &ctx, "send completion");
    CHECK(e.flags & FI_SEND, "send flags %#llx", (unsigned long long)e.flags);
}

/* One-copy messages (at least FI_DOORBELL_RNDV_MIN, 64 KiB): a pattern
 * per tag, so that a read of the wrong bytes or the wrong offset shows. */
#define BIG (200 * 1024)
static unsigned char pattern(uint64_t tag, size_t i) { return (unsigned char)(i * 7 + tag * 13 + (i >> 9)); }
static void fill_big(unsigned char *b, uint64_t tag)
{
    for (size_t i = 0; i < BIG; i++)
        b[i] = pattern(tag, i);
}
static int big_ok(const unsigned char *b, size_t from, size_t n, uint64_t tag)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(tag, from + i))
            return 0;
    return 1;
}

/* A message longer than the core's 1 GiB limit (the "long" argument):
 * one-copy over any path, read over TCP in 64 MiB pieces. */
#define LONG (((size_t)1 << 30) + 12345)
static void fill_long(unsigned char *b)
{
    for (size_t i = 0; i < LONG; i++)
        b[i] = pattern(30, i);
}

/* "drain" (run with FI_DOORBELL_WAIT=block and 20 s sleeps): the read
 * right after a find must not sleep.  Open MPI's progress reads the queue
 * until a read comes back empty; that read is no wait, and a sleep there
 * held every message for the whole bound.  The message comes 100 ms after
 * the receiver starts reading, so it is found after a sleep (the path that
 * also skipped the idle bookkeeping).  A read that slept would take 20 s;
 * the receiver allows 5. */
static void drain_sender(void)
{
    char b = 7;
    sync_peer();
    usleep(100000);
    send_tagged(&b, 1, 9, 0, peer_addr);
    sync_peer();
}

static void drain_receiver(void)
{
    static struct fi_context ctx;
    struct fi_cq_tagged_entry e;
    char b = 0;
    OK(fi_trecv(ep, &b, 1, NULL, peer_addr, 9, 0, &ctx));
    sync_peer();
    expect_ok(&e, &ctx, "drain: the message, found after a sleep");
    CHECK(b == 7, "drain: payload %d", b);
    double t0 = now_s();
    ssize_t n = fi_cq_read(cq, &e, 1);
    double took = now_s() - t0;
    CHECK(n == -FI_EAGAIN, "drain: the read after the find returned %zd", n);
    CHECK(took < 5, "drain: the read after a find slept %.1f s", took);
    sync_peer();
}

static void sender(void)
{
    char big[100];
    int i;
    memset(big, 'b', sizeof big);
    sync_peer(); /* 1: the peer checked an empty peek */
    send_tagged("hello", 5, 7, 42, peer_addr);
    send_tagged(big, sizeof big, 8, 0, peer_addr);
    send_tagged("x", 1, 5, 0, peer_addr);
    sync_peer(); /* 2: untagged messages for the multi-receive buffer */
    for (i = 0; i < 4; i++) {
        char m[50];
        memset(m, 'a' + i, sizeof m);
        OK(fi_inject(ep, m, sizeof m, peer_addr));
    }
    sync_peer(); /* 3: one message after 200 ms, for sread */
    usleep(200000);
    send_tagged("late", 4, 11, 0, peer_addr);
    sync_peer(); /* 4: three for the counter */
    for (i = 0; i < 3; i++)
        OK(fi_tinject(ep, "c", 1, peer_addr, 12));
    sync_peer(); /* 5: one-copy messages; each send completes once the
                  * receiver took (or dropped) it */
    {
        static unsigned char b[BIG];
        static const uint64_t tags[] = {23, 20, 21, 22};
        for (i = 0; i < 4; i++) {
            step = "one-copy send";
            fill_big(b, tags[i]);
            send_tagged(b, BIG, tags[i], tags[i] == 23 ? 99 : 0, peer_addr);
        }
    }
    sync_peer(); /* 5b: the receiver posted five receives */
    {
        char m8[8] = "batch..", m100[100];
        memset(m100, 'z', sizeof m100);
        for (i = 0; i < 5; i++)
            OK(fi_tinject(ep, i == 2 ? m100 : m8, i == 2 ? sizeof m100 : sizeof m8, peer_addr, 40 + i));
    }
    sync_peer(); /* 5c: all five sent */
    {
        /* Forty sends, no read between them: their completions wait for
         * reads of 16 entries, each reported once. */
        static struct fi_context sctx[40];
        struct fi_cq_tagged_entry se[16];
        int seen[40] = {0}, got = 0;
        double t0;
        step = "send batch";
        for (i = 0; i < 40; i++) {
            ssize_t rc;
            while ((rc = fi_tsend(ep, "sendbat", 8, NULL, peer_addr, 50, &sctx[i])) == -FI_EAGAIN)
                ;
            OK(rc);
        }
        t0 = now_s();
        while (got < 40 && now_s() < t0 + wait_s) {
            ssize_t n = fi_cq_read(cq, se, 16);
            if (n == -FI_EAGAIN)
                continue;
            CHECK(n > 0, "send batch: fi_cq_read %zd after %d", n, got);
            if (n <= 0)
                break;
            for (int k = 0; k < n; k++) {
                int x = (int)((struct fi_context *)se[k].op_context - sctx);
                CHECK(x >= 0 && x < 40 && !seen[x] && (se[k].flags & FI_SEND), "send batch: entry of send %d (seen %d)",
                      x, x >= 0 && x < 40 ? seen[x] : -1);
                if (x >= 0 && x < 40)
                    seen[x]++;
                got++;
            }
        }
        CHECK(got == 40, "send batch: %d completions of 40", got);
    }
    sync_peer(); /* 5d: forty sent */
    if (long_msg) {
        unsigned char *b = malloc(LONG);
        CHECK(b != NULL, "malloc of %zu", LONG);
        fill_long(b);
        sync_peer(); /* 6: one long message */
        step = "long untagged send";
        CHECK(fi_send(ep, b, LONG, NULL, peer_addr, NULL) == -FI_EMSGSIZE, "an untagged send over 1 GiB: FI_EMSGSIZE");
        step = "long send";
        wait_s = 120;
        send_tagged(b, LONG, 30, 0, peer_addr);
        free(b);
    }
    sync_peer(); /* 7: done */
}

/* Peek with `flags` (FI_PEEK and FI_CLAIM or FI_DISCARD) until a message
 * is found; a miss must be FI_ENOMSG.  Leaves the find in *e. */
static void peek_until_found(struct fi_msg_tagged *m, uint64_t flags, struct fi_cq_tagged_entry *e, const char *what)
{
    for (;;) {
        struct err_entry_2x err;
        OK(fi_trecvmsg(ep, m, flags));
        if (next(e, &err) == 1)
            return;
        CHECK(err.e.err == FI_ENOMSG, "%s: err %d", what, err.e.err);
    }
}

static void receiver(void)
{
    struct fi_cq_tagged_entry e;
    struct fi_msg_tagged m;
    struct iovec iov;
    struct fi_context pctx, rctx, cctx, mctx;
    char buf[256];
    double t0;
    ssize_t rc;
    int i;

    /* A peek that finds nothing completes with FI_ENOMSG. */
    memset(&m, 0, sizeof m);
    m.addr = FI_ADDR_UNSPEC;
    m.tag = 7;
    m.context = &pctx;
    OK(fi_trecvmsg(ep, &m, FI_PEEK));
    expect_err(FI_ENOMSG, &pctx, 0, "empty peek");
    sync_peer(); /* 1 */

    /* Peek until it comes, claiming it; then receive the claimed one. */
    step = "peek until found";
    peek_until_found(&m, FI_PEEK | FI_CLAIM, &e, "peek");
    CHECK(e.len == 5 && e.tag == 7 && e.data == 42 && (e.flags & FI_REMOTE_CQ_DATA), "peek: len %zu tag %llu data %llu",
          e.len, (unsigned long long)e.tag, (unsigned long long)e.data);
    iov.iov_base = buf;
    iov.iov_len = sizeof buf;
    m.msg_iov = &iov;
    m.iov_count = 1;
    memset(buf, 0, sizeof buf);
    OK(fi_trecvmsg(ep, &m, FI_CLAIM));
    expect_ok(&e, &pctx, "claimed receive");
    CHECK(e.len == 5 && memcmp(buf, "hello", 5) == 0 && e.data == 42, "claimed: len %zu", e.len);

    /* Truncation: 100 bytes into 10. */
    OK(fi_trecv(ep, buf, 10, NULL, peer_addr, 8, 0, &rctx));
    expect_err(FI_ETRUNC, &rctx, 90, "truncation");

    /* Directed: a receive for our own address ignores the peer's tag 5. */
    OK(fi_trecv(ep, buf, sizeof buf, NULL, self_addr, 5, 0, &cctx));
    OK(fi_trecv(ep, buf, sizeof buf, NULL, peer_addr, 5, 0, &rctx));
    expect_ok(&e, &rctx, "directed receive");
    CHECK(buf[0] == 'x', "directed: %c", buf[0]);
    /* ... and that one is canceled. */
    OK(fi_cancel(&ep->fid, &cctx));
    expect_err(FI_ECANCELED, &cctx, 0, "cancel");
    CHECK(fi_cancel(&ep->fid, &cctx) == -FI_ENOENT, "second cancel");

    /* A message to ourselves. */
    send_tagged("me", 2, 9, 0, self_addr);
    OK(fi_trecv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 9, 0, &rctx));
    expect_ok(&e, &rctx, "self receive");
    CHECK(e.len == 2 && memcmp(buf, "me", 2) == 0, "self: len %zu", e.len);

    /* Multi-receive: 4 x 50 bytes into 256 with a minimum of 64. */
    {
        size_t min = 64;
        struct fi_msg mm;
        OK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min));
        iov.iov_base = buf;
        iov.iov_len = 256;
        memset(&mm, 0, sizeof mm);
        mm.msg_iov = &iov;
        mm.iov_count = 1;
        mm.addr = FI_ADDR_UNSPEC;
        mm.context = &mctx;
        OK(fi_recvmsg(ep, &mm, FI_MULTI_RECV));
        sync_peer(); /* 2 */
        for (i = 0; i < 4; i++) {
            expect_ok(&e, &mctx, "multi-receive");
            CHECK((char *)e.buf == buf + 50 * i && e.len == 50 && ((char *)e.buf)[0] == 'a' + i,
                  "multi %d: offset %td len %zu", i, (char *)e.buf - buf, e.len);
            CHECK(!!(e.flags & FI_MULTI_RECV) == (i == 3), "multi %d: FI_MULTI_RECV %d", i,
                  !!(e.flags & FI_MULTI_RECV));
        }
    }

    /* sread wakes on a message that comes 200 ms later. */
    OK(fi_trecv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 11, 0, &rctx));
    sync_peer(); /* 3 */
    t0 = now_s();
    if (waitfd) {
        /* The queue is empty: trywait says block; the descriptor wakes
         * when the message comes, with nobody progressing. */
        int fd = -1;
        struct fid *f = &cq->fid;
        struct pollfd p;
        OK(fi_control(&cq->fid, FI_GETWAIT, &fd));
        CHECK(fi_trywait(fabric, &f, 1) == 0, "trywait on an empty queue");
        p.fd = fd;
        p.events = POLLIN;
        CHECK(poll(&p, 1, 3000) == 1, "poll on the wait fd");
        CHECK(now_s() - t0 > 0.1, "the fd was readable after %.3f s", now_s() - t0);
        CHECK(fi_trywait(fabric, &f, 1) == -FI_EAGAIN, "trywait with a completion queued");
    }
    rc = fi_cq_sread(cq, &e, 1, NULL, 3000);
    CHECK(rc == 1 && e.op_context == &rctx, "sread: %zd", rc);
    CHECK(now_s() - t0 > 0.1 && now_s() - t0 < 2.5, "sread took %.3f s", now_s() - t0);
    /* ... and times out when nothing comes. */
    t0 = now_s();
    rc = fi_cq_sread(cq, &e, 1, NULL, 100);
    CHECK(rc == -FI_ETIMEDOUT || rc == -FI_EAGAIN, "sread timeout: %zd", rc);
    CHECK(now_s() - t0 >= 0.09, "sread returned after %.3f s", now_s() - t0);

    /* The receive counter reaches 3. */
    {
        uint64_t base = fi_cntr_read(rcntr);
        for (i = 0; i < 3; i++)
            OK(fi_trecv(ep, buf + i, 1, NULL, peer_addr, 12, 0, NULL));
        sync_peer(); /* 4 */
        OK(fi_cntr_wait(rcntr, base + 3, 3000));
        CHECK(fi_cntr_read(rcntr) == base + 3, "counter %llu", (unsigned long long)fi_cntr_read(rcntr));
        for (i = 0; i < 3; i++)
            expect_ok(&e, NULL, "counted receive");
    }

    /* One-copy messages: the receiver reads the sender's buffer. */
    {
        static unsigned char big[BIG + 4096], a[80 * 1024], b2[150 * 1024];
        struct iovec two[2] = {{a, sizeof a}, {b2, sizeof b2}};
        struct fi_msg_tagged tm;
        struct fi_context ctx23;
        /* Tag 23, posted before it is sent, into two iovecs. */
        memset(&tm, 0, sizeof tm);
        tm.msg_iov = two;
        tm.iov_count = 2;
        tm.addr = peer_addr;
        tm.tag = 23;
        tm.context = &ctx23;
        OK(fi_trecvmsg(ep, &tm, FI_COMPLETION));
        sync_peer(); /* 5 */
        /* Tag 23, sent first, lands in the receive posted before it. */
        expect_ok(&e, &ctx23, "one-copy receive into two iovecs");
        CHECK(e.len == BIG && e.data == 99 && (e.flags & FI_REMOTE_CQ_DATA) && big_ok(a, 0, sizeof a, 23) &&
                  big_ok(b2, sizeof a, BIG - sizeof a, 23),
              "one-copy into two iovecs: len %zu data %llu", e.len, (unsigned long long)e.data);


        /* Tag 20, unexpected: a peek reports its whole length; then the
         * claim reads it. */
        step = "one-copy peek";
        memset(&m, 0, sizeof m);
        m.addr = FI_ADDR_UNSPEC;
        m.tag = 20;
        m.context = &pctx;
        peek_until_found(&m, FI_PEEK | FI_CLAIM, &e, "one-copy peek");
        CHECK(e.len == BIG && e.tag == 20, "one-copy peek: len %zu tag %llu", e.len, (unsigned long long)e.tag);
        iov.iov_base = big;
        iov.iov_len = sizeof big;
        m.msg_iov = &iov;
        m.iov_count = 1;
        memset(big, 0, sizeof big);
        OK(fi_trecvmsg(ep, &m, FI_CLAIM));
        expect_ok(&e, &pctx, "one-copy claimed receive");
        CHECK(e.len == BIG && big_ok(big, 0, BIG, 20), "one-copy claimed: len %zu, bytes %s", e.len,
              big_ok(big, 0, BIG, 20) ? "right" : "wrong");

        /* Tag 21 into 1000 bytes: truncated, the first 1000 right. */
        memset(big, 0, sizeof big);
        OK(fi_trecv(ep, big, 1000, NULL, peer_addr, 21, 0, &rctx));
        expect_err(FI_ETRUNC, &rctx, BIG - 1000, "one-copy truncation");
        CHECK(big_ok(big, 0, 1000, 21) && big[1000] == 0, "one-copy truncation: bytes");

        /* Tag 22, dropped by a peek with FI_DISCARD: its sender completes. */
        step = "one-copy discard";
        m.tag = 22;
        m.msg_iov = NULL;
        m.iov_count = 0;
        peek_until_found(&m, FI_PEEK | FI_DISCARD, &e, "one-copy discard");
        CHECK(e.len == BIG && e.tag == 22, "one-copy discard: len %zu", e.len);

    }
    {
        /* Five receives posted, then five messages that wait in the core
         * (nothing reads meanwhile) until reads of 16 entries take them:
         * the third is truncated.  Its error leaves in its place, between
         * the two before and the two after. */
        static struct fi_context bctx[5];
        static char bbuf[5][10];
        struct fi_cq_tagged_entry be[16];
        fi_addr_t bsrc[16];
        int order[8], got = 0, batched = 0;
        step = "batch";
        for (i = 0; i < 5; i++)
            OK(fi_trecv(ep, bbuf[i], i == 2 ? 10 : 8, NULL, peer_addr, 40 + i, 0, &bctx[i]));
        sync_peer(); /* 5b */
        sync_peer(); /* 5c */
        t0 = now_s();
        while (got < 5 && now_s() < t0 + wait_s) {
            rc = fi_cq_readfrom(cq, be, 16, bsrc);
            if (rc == -FI_EAGAIN)
                continue;
            if (rc == -FI_EAVAIL) {
                struct err_entry_2x err;
                memset(&err, 0, sizeof err);
                OK(fi_cq_readerr(cq, &err.e, 0));
                CHECK(err.e.err == FI_ETRUNC && err.e.olen == 90, "batch: error %d olen %zu", err.e.err, err.e.olen);
                order[got++] = 100 + (int)((struct fi_context *)err.e.op_context - bctx);
                continue;
            }
            CHECK(rc > 0 && got + rc <= 5, "batch: fi_cq_readfrom %zd after %d", rc, got);
            if (rc <= 0 || got + rc > 5)
                break;
            batched |= rc > 1;
            for (int k = 0; k < rc; k++) {
                int x = (int)((struct fi_context *)be[k].op_context - bctx);
                CHECK(x >= 0 && x < 5 && x != 2 && be[k].len == 8 && be[k].tag == (uint64_t)(40 + x) &&
                          memcmp(bbuf[x], "batch..", 8) == 0 && bsrc[k] == peer_addr,
                      "batch: entry %d: receive %d len %zu tag %llu src %llu", k, x, be[k].len,
                      (unsigned long long)be[k].tag, (unsigned long long)bsrc[k]);
                order[got++] = x;
            }
        }
        CHECK(got == 5 && order[0] == 0 && order[1] == 1 && order[2] == 102 && order[3] == 3 && order[4] == 4,
              "batch: %d completions, order %d %d %d %d %d (102: the truncated one's error)", got, order[0],
              got > 1 ? order[1] : -1, got > 2 ? order[2] : -1, got > 3 ? order[3] : -1, got > 4 ? order[4] : -1);
        /* Over shared memory the five wait in one queue: a read takes two. */
        if (!getenv("FI_DOORBELL_FORCE_TCP"))
            CHECK(batched, "batch: no read returned more than one completion");
    }
    {
        /* The sender's forty (tag 50), received in order. */
        char rb[8];
        step = "send batch receive";
        for (i = 0; i < 40; i++) {
            memset(rb, 0, sizeof rb);
            OK(fi_trecv(ep, rb, sizeof rb, NULL, peer_addr, 50, 0, &rctx));
            expect_ok(&e, &rctx, "send batch receive");
            CHECK(e.len == 8 && 0 == memcmp(rb, "sendbat", 8), "send batch receive %d: len %zu", i, e.len);
        }
        sync_peer(); /* 5d */
    }
    if (long_msg) {
        /* One byte more room than it takes; the byte past it stays 0. */
        unsigned char *b = calloc(LONG + 1, 1);
        size_t bad = 0;
        CHECK(b != NULL, "calloc of %zu", LONG + 1);
        CHECK(info_max_msg >= LONG, "max_msg_size %zu, want at least %zu", info_max_msg, LONG);
        sync_peer(); /* 6 */
        step = "long receive";
        wait_s = 120;
        OK(fi_trecv(ep, b, LONG + 1, NULL, peer_addr, 30, 0, &rctx));
        expect_ok(&e, &rctx, "long receive");
        for (size_t i = 0; i < LONG; i++)
            bad += b[i] != pattern(30, i);
        CHECK(e.len == LONG && bad == 0 && b[LONG] == 0, "long receive: len %zu, %zu bytes wrong", e.len, bad);
        free(b);
    }
    sync_peer(); /* 7 */
}

int main(int argc, char **argv)
{
    int p2c[2], c2p[2], api;
    pid_t child;
    char job[64], name[64], peer_name[64];
    size_t len = sizeof name;
    struct fi_info *hints, *info;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
    struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP};
    fi_addr_t addrs[2];

    api = FI_VERSION(1, 17);
    if (argc > 1 && strcmp(argv[1], "core") == 0)
        api = (int)fi_version();
    api_2x = FI_MAJOR(api) >= 2 || (FI_MAJOR(api) == 1 && FI_MINOR(api) >= 20);
    for (int i = 2; i < argc; i++) {
        waitfd |= strcmp(argv[i], "waitfd") == 0;
        long_msg |= strcmp(argv[i], "long") == 0;
        drain |= strcmp(argv[i], "drain") == 0;
    }
    if (waitfd)
        cq_attr.wait_obj = FI_WAIT_FD;

    snprintf(job, sizeof job, "fi_check.%d", (int)getpid());
    setenv("FI_DOORBELL_JOB", job, 1);
    if (pipe(p2c) || pipe(c2p))
        return 2;
    child = fork();
    if (child < 0)
        return 2;
    me = child == 0;
    setenv("FI_DOORBELL_TASK", me ? "1" : "0", 1);
    to_peer = me ? c2p[1] : p2c[1];
    from_peer = me ? p2c[0] : c2p[0];

    hints = fi_allocinfo();
    hints->caps = FI_TAGGED | FI_MSG | FI_MULTI_RECV | FI_DIRECTED_RECV;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("doorbell");
    hints->domain_attr->av_type = FI_AV_TABLE;
    OK(fi_getinfo(api, NULL, NULL, 0, hints, &info));
    info_max_msg = info->ep_attr->max_msg_size;
    OK(fi_fabric(info->fabric_attr, &fabric, NULL));
    OK(fi_domain(fabric, info, &domain, NULL));
    OK(fi_av_open(domain, &av_attr, &av, NULL));
    OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    OK(fi_cntr_open(domain, &cntr_attr, &rcntr, NULL));
    OK(fi_endpoint(domain, info, &ep, NULL));
    OK(fi_ep_bind(ep, &av->fid, 0));
    OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(ep, &rcntr->fid, FI_RECV));
    OK(fi_enable(ep));
    OK(fi_getname(&ep->fid, name, &len));

    /* Exchange addresses; insert both in task order (table: 0, 1). */
    if (write(to_peer, name, len) != (ssize_t)len || read(from_peer, peer_name, len) != (ssize_t)len)
        return 2;
    {
        char both[128];
        memcpy(both, me ? peer_name : name, len);
        memcpy(both + len, me ? name : peer_name, len);
        CHECK(fi_av_insert(av, both, 2, addrs, 0, NULL) == 2, "av insert");
    }
    self_addr = addrs[me];
    peer_addr = addrs[!me];

    if (drain)
        me ? drain_sender() : drain_receiver();
    else if (me)
        sender();
    else
        receiver();

    fi_close(&ep->fid);
    fi_close(&rcntr->fid);
    fi_close(&cq->fid);
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    if (!me) {
        int status = 0;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures++;
        if (failures == 0)
            printf("fi_check: OK (api %d.%d%s%s)\n", FI_MAJOR(api), FI_MINOR(api), waitfd ? ", FI_WAIT_FD" : "",
                   drain ? ", drain" : "");
    }
    return failures ? 1 : 0;
}
