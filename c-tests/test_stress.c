/* Test 2: stress.  4 processes, >= 200,000 messages in total, sizes 0..1 MiB
 * (mostly small, a few large), every message checked (length, tag, header,
 * checksum, full content), no loss / duplication / reordering per
 * (sender, window).  Tasks 0,1 share node 1 and tasks 2,3 node 2, so every
 * task has one shared-memory peer and two TCP peers; each task opens a second
 * window.  Small rings and a small backlog force chunking, ring wrap-around
 * and DOORBELL_ERR_WOULD_BLOCK.  Runs under the parent's watchdog; no
 * wall-time assert.
 *
 * Everything about message k of sender s is a pure function of (seed, s, k):
 * destination and window; and of (seed, s, dest, window, seq): length and
 * bytes.  So a receiver knows exactly what its next message from (s, window)
 * must be, and how many to expect in all.
 *
 * Env (for debugging only): DBT_STRESS_MSGS per sender (default 50000),
 * DBT_SEED. */
#include "dbt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NPROC 4
#define NWIN 2
#define MAXLEN (1u << 20)
#define HDR 32
#define MAGIC 0xD00DBE11u

static uint64_t g_seed;
static uint32_t g_per_sender = 50000;

/* Per-task tuning: different ring sizes per shm pair direction. */
static const uint32_t ring_bytes[NPROC] = {64 << 10, 0 /* default 512 KiB */, 4 << 10, 256 << 10}; /* each task's inbound queue */
/* Each task drains in a different wait mode. */
static const uint32_t drain_mode[NPROC] = {DOORBELL_WAIT_BLOCK, DOORBELL_WAIT_ADAPTIVE,
                                           DOORBELL_WAIT_POLL, DOORBELL_WAIT_DEFAULT};

static uint64_t node_of(uint32_t t) { return t < 2 ? 1 : 2; }

/* Destination (never the sender) and window index of message k of sender s. */
static void route(uint32_t s, uint32_t k, uint32_t *dest, uint32_t *win) {
  uint64_t h = dbt_mix(g_seed ^ dbt_mix(((uint64_t)s << 32) | k));
  uint32_t d = (uint32_t)(h % (NPROC - 1));
  *dest = d >= s ? d + 1 : d;
  *win = (uint32_t)((h >> 32) & 1);
}

static uint64_t msg_seed(uint32_t s, uint32_t d, uint32_t w, uint32_t seq) {
  return dbt_mix(g_seed + 0x51ed) ^ dbt_mix(((uint64_t)s << 48) ^ ((uint64_t)d << 40) ^
                                            ((uint64_t)w << 32) ^ seq);
}

/* Mostly small (< 256 B), 8 % medium (256 B..64 KiB), 1 % large (64 KiB..1 MiB);
 * the first two messages of each stream are the extremes 0 and 1 MiB. */
static size_t msg_len(uint32_t s, uint32_t d, uint32_t w, uint32_t seq) {
  if (seq == 0) return 0;
  if (seq == 1) return MAXLEN;
  uint64_t h = dbt_mix(msg_seed(s, d, w, seq));
  uint32_t r = (uint32_t)(h % 1000);
  uint64_t x = h >> 20;
  if (r < 10) return 65536 + x % (MAXLEN - 65536 + 1);
  if (r < 90) return 256 + x % (65536 - 256);
  return x % 256;
}

/* Header of messages >= HDR bytes; the body after it is the generator stream. */
struct hdr {
  uint32_t magic;
  uint16_t sender, receiver;
  uint32_t window, seq, len, pad;
  uint64_t sum; /* checksum of the body */
};

static uint64_t checksum(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static void build(uint8_t *buf, uint32_t s, uint32_t d, uint32_t w, uint32_t seq, size_t len) {
  uint64_t seed = msg_seed(s, d, w, seq);
  if (len < HDR) {
    dbt_fill(buf, len, seed);
    return;
  }
  dbt_fill(buf + HDR, len - HDR, seed);
  struct hdr h = {MAGIC, (uint16_t)s, (uint16_t)d, w, seq, (uint32_t)len, 0,
                  checksum(buf + HDR, len - HDR)};
  memcpy(buf, &h, sizeof h);
}

struct state {
  uint32_t me;
  uint32_t win[NWIN];            /* my window numbers */
  uint32_t peer_win[NPROC][NWIN];/* peers' window numbers */
  uint32_t expect[NPROC][NWIN];  /* total messages I must get from (s, w) */
  uint32_t next[NPROC][NWIN];    /* next seq I expect */
  uint64_t received, from_shm, from_tcp, bytes;
  uint64_t errors, extra;
  int path[NPROC];
  int after_done;                /* anything delivered now is a duplicate */
};

static void fail_msg(struct state *st, const char *fmt, uint32_t s, uint32_t w, uint32_t seq,
                     size_t len) {
  if (st->errors++ < 10) dbt_check(0, fmt, s, w, seq, len);
}

static void on_msg(void *ctx, uint32_t s, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  struct state *st = ctx;
  int wi = -1;
  for (int i = 0; i < NWIN; i++)
    if (st->win[i] == window) wi = i;
  if (s >= NPROC || s == st->me || wi < 0) {
    fail_msg(st, "message from bad task %u / window %u (seq ?%u, %zu bytes)", s, window, 0, len);
    return;
  }
  uint32_t w = (uint32_t)wi;
  uint32_t seq = st->next[s][w]++;
  st->received++;
  st->bytes += len;
  if (st->path[s] == 1) st->from_shm++;
  else st->from_tcp++;
  if (st->after_done || seq >= st->expect[s][w]) {
    st->extra++;
    fail_msg(st, "extra (duplicated?) message from task %u window %u: seq %u, %zu bytes", s, w,
             seq, len);
    return;
  }
  size_t want = msg_len(s, st->me, w, seq);
  if (len != want || tag != (uint8_t)seq) {
    fail_msg(st, "from task %u window %u seq %u: %zu bytes or tag wrong (lost/reordered?)", s, w,
             seq, len);
    dbt_info("  want %zu bytes tag %u, got tag %u", want, (uint8_t)seq, tag);
    return;
  }
  uint64_t seed = msg_seed(s, st->me, w, seq);
  if (len < HDR) {
    if (!dbt_verify(data, len, seed))
      fail_msg(st, "from task %u window %u seq %u: %zu bytes corrupted", s, w, seq, len);
    return;
  }
  struct hdr h;
  memcpy(&h, data, sizeof h);
  if (h.magic != MAGIC || h.sender != s || h.receiver != st->me || h.window != w ||
      h.seq != seq || h.len != len) {
    fail_msg(st, "from task %u window %u seq %u: header wrong (%zu bytes)", s, w, seq, len);
    return;
  }
  if (checksum(data + HDR, len - HDR) != h.sum || !dbt_verify(data + HDR, len - HDR, seed))
    fail_msg(st, "from task %u window %u seq %u: checksum / content wrong (%zu bytes)", s, w, seq,
             len);
}

static int all_received(const struct state *st) {
  for (int s = 0; s < NPROC; s++)
    for (int w = 0; w < NWIN; w++)
      if (st->next[s][w] < st->expect[s][w]) return 0;
  return 1;
}

static int progress_all(doorbell_endpoint *ep, struct state *st) {
  int n = 0;
  for (int w = 0; w < NWIN; w++) {
    doorbell_wake wake;
    int rc = doorbell_progress(ep, st->win[w], on_msg, st, &wake);
    if (rc < 0) return rc;
    n += rc;
  }
  return n;
}

static int child(int idx, void *arg) {
  (void)arg;
  static struct state st;
  uint32_t me = (uint32_t)idx;
  st.me = me;
  doorbell_config cfg;
  dbt_config(&cfg, me, node_of(me));
  cfg.shm_dir = (const char *)arg;
  cfg.ring_bytes = ring_bytes[me];
  cfg.max_backlog = 4u << 20; /* small: WOULD_BLOCK must happen and be survived */
  doorbell_endpoint *ep = NULL;
  dbt_peer mine = {0}, peers[NPROC];
  mine.task = me;
  mine.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(mine.rc, DOORBELL_OK, "endpoint_create(task %u, node %lu, ring %u)", me,
               (unsigned long)cfg.node_id, cfg.ring_bytes);
  st.win[0] = 0;
  if (mine.rc == DOORBELL_OK) {
    int rc = doorbell_window_open(ep, &st.win[1]);
    dbt_check(rc == DOORBELL_OK && st.win[1] != 0, "window_open -> %d, window %u", rc, st.win[1]);
  }
  mine.nwin = NWIN;
  memcpy(mine.win, st.win, sizeof st.win);
  int bad = dbt_exchange(mine.rc == DOORBELL_OK ? ep : NULL, &mine, peers, DBT_OTHERS) != 0 ||
            mine.rc != DOORBELL_OK;
  for (uint32_t p = 0; p < NPROC && !bad; p++) {
    memcpy(st.peer_win[p], peers[p].win, sizeof st.peer_win[p]);
    if (p == me) continue;
    st.path[p] = doorbell_peer_path(ep, p);
    int want = node_of(p) == node_of(me) ? 1 : 2;
    if (!dbt_check(st.path[p] == want, "peer_path(task %u) == %d (%s), got %d", p, want,
                   want == 1 ? "shm" : "tcp", st.path[p]))
      bad = 1;
  }
  /* Replay every sender's routing to know what I must receive. */
  for (uint32_t s = 0; s < NPROC; s++)
    for (uint32_t k = 0; k < g_per_sender; k++) {
      uint32_t d, w;
      route(s, k, &d, &w);
      if (d == me) st.expect[s][w]++;
    }
  dbt_barrier(); /* everyone connected */
  if (bad) {
    dbt_barrier();
    dbt_barrier();
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }

  uint8_t *buf = malloc(MAXLEN);
  uint32_t seq[NPROC][NWIN] = {{0}};
  uint64_t sent_shm = 0, sent_tcp = 0, wouldblock = 0, sent_bytes = 0;
  double t0 = dbt_now();
  int rc = DOORBELL_OK;
  for (uint32_t k = 0; k < g_per_sender; k++) {
    uint32_t d, w;
    route(me, k, &d, &w);
    uint32_t q = seq[d][w]++;
    size_t len = msg_len(me, d, w, q);
    build(buf, me, d, w, q, len);
    rc = dbt_send_retry(ep, d, st.peer_win[d][w], (uint8_t)q, buf, len, st.win, NWIN, on_msg,
                        &st, &wouldblock);
    if (rc != DOORBELL_OK) {
      dbt_check_rc(rc, DOORBELL_OK, "send #%u to task %u window %u (%zu bytes)", k, d, w, len);
      break;
    }
    sent_bytes += len;
    if (st.path[d] == 1) sent_shm++;
    else sent_tcp++;
    if ((k & 7) == 0 && (rc = progress_all(ep, &st)) < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "progress while sending");
      break;
    }
    rc = DOORBELL_OK;
  }
  double t_sent = dbt_now();
  /* Drain: receive the rest, alternating windows, in this task's wait mode. */
  uint32_t turn = 0;
  uint64_t last_count = st.received;
  double last_t = dbt_now();
  while (rc == DOORBELL_OK && !all_received(&st) && !st.errors) {
    doorbell_wake wake;
    int r = doorbell_wait(ep, st.win[turn++ % NWIN], drain_mode[me], 2000, on_msg, &st, &wake);
    if (r < 0) {
      dbt_check_rc(r, DOORBELL_OK, "wait while draining");
      rc = r;
    }
    /* Not a time limit: a stall detector, so a lost message fails fast. */
    if (st.received != last_count) {
      last_count = st.received;
      last_t = dbt_now();
    } else if (dbt_now() - last_t > 60) {
      dbt_check(0, "task %u: nothing arrived for 60 s with messages still missing", me);
      for (int s = 0; s < NPROC; s++)
        for (int w = 0; w < NWIN; w++)
          if (st.next[s][w] < st.expect[s][w])
            dbt_info("  from task %d window %d: got %u of %u", s, w, st.next[s][w],
                     st.expect[s][w]);
      rc = DOORBELL_ERR_TIMED_OUT;
    }
    if (rc == DOORBELL_OK) {
      r = doorbell_flush(ep, 0);
      if (r != DOORBELL_OK && r != DOORBELL_ERR_TIMED_OUT) {
        dbt_check_rc(r, DOORBELL_OK, "flush while draining");
        rc = r;
      }
    }
  }
  if (rc == DOORBELL_OK)
    dbt_check_rc(dbt_drain(ep, st.win, NWIN, on_msg, &st, 120), DOORBELL_OK, "final flush");
  double t_done = dbt_now();
  dbt_barrier(); /* everything sent and received everywhere */
  /* Nobody sends any more: whatever still arrives is a duplicate. */
  st.after_done = 1;
  double t1 = dbt_now();
  while (dbt_now() - t1 < 0.2) {
    int r = progress_all(ep, &st);
    if (r < 0) {
      dbt_check_rc(r, DOORBELL_OK, "progress after the run");
      break;
    }
  }
  dbt_barrier();

  uint64_t expected = 0;
  for (int s = 0; s < NPROC; s++)
    for (int w = 0; w < NWIN; w++) expected += st.expect[s][w];
  dbt_info("task %u: sent %u msgs (%.1f MiB, %lu shm, %lu tcp) in %.1f s, %lu WOULD_BLOCK retries; "
           "received %lu msgs (%.1f MiB) by %.1f s",
           me, g_per_sender, sent_bytes / 1048576.0, (unsigned long)sent_shm,
           (unsigned long)sent_tcp, t_sent - t0, (unsigned long)wouldblock,
           (unsigned long)st.received, st.bytes / 1048576.0, t_done - t0);
  dbt_check(st.errors == 0, "task %u: every message had the right length, tag, header, checksum "
            "and bytes (%lu errors)", me, (unsigned long)st.errors);
  dbt_check(st.received == expected && all_received(&st) && st.extra == 0,
            "task %u: got exactly the %lu messages addressed to it, per (sender, window), "
            "nothing extra", me, (unsigned long)expected);
  doorbell_counters c;
  dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK, "doorbell_counters_get");
  dbt_info("task %u counters: shm_sent=%lu tcp_sent=%lu shm_received=%lu tcp_received=%lu "
           "notifies_sent=%lu notifies_skipped=%lu wakeups=%lu spurious=%lu",
           me, (unsigned long)c.shm_sent, (unsigned long)c.tcp_sent,
           (unsigned long)c.shm_received, (unsigned long)c.tcp_received,
           (unsigned long)c.notifies_sent, (unsigned long)c.notifies_skipped,
           (unsigned long)c.wakeups, (unsigned long)c.spurious_wakeups);
  dbt_check(c.shm_sent == sent_shm && c.tcp_sent == sent_tcp,
            "task %u: counters.shm_sent/tcp_sent match what was sent (%lu/%lu)", me,
            (unsigned long)sent_shm, (unsigned long)sent_tcp);
  dbt_check(c.shm_received == st.from_shm && c.tcp_received == st.from_tcp,
            "task %u: counters.shm_received/tcp_received match what was delivered (%lu/%lu)", me,
            (unsigned long)st.from_shm, (unsigned long)st.from_tcp);
  dbt_check(c.peers_lost == 0, "task %u: no peer lost during the run", me);
  free(buf);
  dbt_barrier(); /* counters read: now endpoints may go */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  return 0;
}

int main(void) {
  dbt_begin("stress");
  const char *env = getenv("DBT_STRESS_MSGS");
  if (env) g_per_sender = (uint32_t)strtoul(env, NULL, 10);
  env = getenv("DBT_SEED");
  g_seed = env ? strtoull(env, NULL, 0) : dbt_mix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
  dbt_info("seed 0x%016" PRIx64 " (DBT_SEED to replay), %u messages per sender, %u in total",
           g_seed, g_per_sender, g_per_sender * NPROC);
  dbt_check(g_per_sender * NPROC >= 200000, "at least 200,000 messages in total");
  char *shm_dir = dbt_tempdir("/dev/shm", "stress");
  dbt_run_all(NPROC, child, shm_dir, 600, shm_dir, NULL);
  dbt_rmtree(shm_dir);
  free(shm_dir);
  return dbt_finish();
}
