/* A shared-memory directory with room for one ring only (issue 10 point 9).
 *
 * Three same-node tasks on a tmpfs (private mount namespace, needs root)
 * sized for their three control segments and one 64 KiB ring, not two:
 *   phase 1: t0 sends to t2 -- the one ring that fits.  t2, which never
 *            connected to t0 (it only knows t0 from its ring), replies:
 *            no ring fits and t0 has no TCP address for t2 to use, so the
 *            send returns DOORBELL_ERR_NO_SHM_SPACE (documented).  After
 *            doorbell_connect to t0 the same send goes over TCP.
 *   phase 2: every ordered pair sends NMSG messages of 100 B and 200 KiB
 *            (the large ones are bulk-sized for a 64 KiB ring: no bulk
 *            buffer fits either).
 * Checks: every message arrives intact and in order; doorbell_peer_path is
 * 1 for t0 -> t2 and 2 for every other pair; each task that fell back
 * printed exactly one stderr warning, naming the directory, the bytes a
 * ring needs and btl_doorbell_ring_size; no task printed it twice; the
 * directory is empty at the end; nobody crashed (a SIGBUS would show in
 * the exit status).  On the old code every send without a ring returned
 * NO_SHM_SPACE. */
#include "dbt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#define NT 3
#define NMSG 10
#define RING (64u << 10)
#define PAGE 4096u
#define PAGES(n) ((((uint64_t)(n)) + PAGE - 1) / PAGE * PAGE)
#define SMALL 100u
#define LARGE (200u << 10)

static char g_dir[PATH_MAX];

static size_t size_of(uint32_t seq) { return seq % 2 ? LARGE : SMALL; }
static uint64_t seed_of(uint32_t src, uint32_t dst, uint32_t seq) {
  return ((uint64_t)src << 40) | ((uint64_t)dst << 32) | seq;
}

struct rx {
  uint32_t me;
  uint32_t next[NT]; /* next expected seq per sender */
  unsigned bad;
};

static void on_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  struct rx *rx = ctx;
  if (task >= NT || task == rx->me) {
    if (rx->bad++ < 5) dbt_check(0, "message from unexpected task %u", task);
    return;
  }
  uint32_t seq = rx->next[task]++;
  int ok = window == 0 && tag == (uint8_t)(20 + task) && len == size_of(seq) &&
           dbt_verify(data, len, seed_of(task, rx->me, seq));
  if (!ok && rx->bad++ < 5)
    dbt_check(0, "message %u from t%u: tag %u, %zu bytes (want %zu), content %s", seq, task, tag,
              len, size_of(seq), len == size_of(seq) ? "differs" : "-");
}

static int send_seq(doorbell_endpoint *ep, struct rx *rx, uint32_t to, uint32_t seq) {
  static uint8_t buf[LARGE];
  uint32_t w0 = 0;
  dbt_fill(buf, size_of(seq), seed_of(rx->me, to, seq));
  return dbt_send_retry(ep, to, 0, (uint8_t)(20 + rx->me), buf, size_of(seq), &w0, 1, on_msg, rx,
                        NULL);
}

/* Messages t0 -> t2 carries: one in phase 1, NMSG in phase 2. */
static uint32_t expected(uint32_t from, uint32_t to) { return NMSG + (from == 0 && to == 2); }

/* Deliver until `want` messages came from each task in `from` (bitmask);
 * want 0: all that phase 2 sends. */
static void receive(doorbell_endpoint *ep, struct rx *rx, unsigned from, uint32_t want) {
  double end = dbt_now() + 30;
  uint32_t w[NT];
  for (uint32_t t = 0; t < NT; t++) w[t] = want ? want : expected(t, rx->me);
  for (;;) {
    int done = 1;
    for (uint32_t t = 0; t < NT; t++)
      if ((from >> t & 1) && rx->next[t] < w[t]) done = 0;
    if (done || dbt_now() > end) break;
    doorbell_wake wk;
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_DEFAULT, 100000, on_msg, rx, &wk);
    if (rc < 0 && !dbt_check_rc(rc, DOORBELL_OK, "doorbell_wait")) break;
  }
  for (uint32_t t = 0; t < NT; t++)
    if (from >> t & 1)
      dbt_check(rx->next[t] == w[t], "t%u: %u of %u messages from t%u arrived", rx->me,
                rx->next[t], w[t], t);
}

/* Lines of `path` that contain `needle`. */
static int count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[4096];
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  if (f) fclose(f);
  return n;
}

static int child(int idx, void *arg) {
  (void)arg;
  uint32_t me = (uint32_t)idx;
  /* This task's stderr goes to a file: the warning is counted below. */
  char errpath[PATH_MAX + 32];
  snprintf(errpath, sizeof errpath, "%s.t%d.stderr", g_dir, idx);
  int errfd = open(errpath, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  int saved = dup(2);
  if (errfd >= 0) dup2(errfd, 2);

  doorbell_config cfg;
  dbt_config(&cfg, me, 1);
  cfg.shm_dir = g_dir;
  cfg.ring_bytes = RING;
  doorbell_endpoint *ep = NULL;
  dbt_peer mine = {0}, peers[NT];
  mine.task = me;
  mine.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(mine.rc, DOORBELL_OK, "t%d: endpoint_create (room for 3 control segments)", idx);
  /* t2 does not connect to t0: it learns of t0 only from t0's ring. */
  uint64_t mask = idx == 2 ? 1u << 1 : DBT_OTHERS;
  dbt_exchange(mine.rc == DOORBELL_OK ? ep : NULL, &mine, peers, mask);
  if (mine.rc != DOORBELL_OK) {
    dbt_barrier();
    dbt_barrier();
    dbt_barrier();
    return 1;
  }
  struct rx rx = {.me = me};
  uint32_t w0 = 0;

  /* phase 1: the one ring that fits is t0 -> t2 */
  if (idx == 0) {
    dbt_check_rc(send_seq(ep, &rx, 2, 0), DOORBELL_OK, "t0 -> t2: first send makes the ring");
    dbt_check_rc(dbt_drain(ep, &w0, 1, on_msg, &rx, 30), DOORBELL_OK, "t0: flush");
  }
  if (idx == 2) receive(ep, &rx, 1u << 0, 1);
  dbt_barrier();
  if (idx == 2) {
    uint8_t b = 1;
    int rc = doorbell_send(ep, 0, 0, 99, &b, 1);
    dbt_check_rc(rc, DOORBELL_ERR_NO_SHM_SPACE,
                 "t2 -> t0 with no room for a ring and no TCP address for t0");
    uint32_t t = UINT32_MAX;
    dbt_check_rc(doorbell_connect(ep, peers[0].blob, peers[0].len, &t), DOORBELL_OK,
                 "t2: connect to t0");
  }
  dbt_barrier();

  /* phase 2: every ordered pair */
  for (uint32_t seq = 0; seq < NMSG; seq++)
    for (uint32_t d = 1; d < NT; d++) {
      uint32_t to = (me + d) % NT;
      uint32_t s = seq + (me == 0 && to == 2); /* t0 -> t2 sent seq 0 in phase 1 */
      int rc = send_seq(ep, &rx, to, s);
      if (rc != DOORBELL_OK) dbt_check_rc(rc, DOORBELL_OK, "t%u -> t%u: message %u", me, to, s);
    }
  dbt_check_rc(dbt_drain(ep, &w0, 1, on_msg, &rx, 60), DOORBELL_OK, "t%d: flush", idx);
  receive(ep, &rx, ((1u << NT) - 1) & ~(1u << me), 0);

  for (uint32_t t = 0; t < NT; t++) {
    if (t == me) continue;
    int want = me == 0 && t == 2 ? 1 : 2;
    dbt_check_rc(doorbell_peer_path(ep, t), want, "t%u -> t%u: path %s", me, t,
                 want == 1 ? "shm (the one ring that fit)" : "tcp (no room for a ring)");
  }
  dbt_barrier(); /* everyone received everything */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "t%d: endpoint_destroy", idx);

  fflush(stderr);
  if (saved >= 0) dup2(saved, 2);
  char room[PATH_MAX + 16];
  snprintf(room, sizeof room, "no room in %s ", g_dir);
  char need[64];
  snprintf(need, sizeof need, "needs %llu bytes", (unsigned long long)PAGES(RING + DOORBELL_RING_HEADER_BYTES));
  int warned = count_lines(errpath, "btl_doorbell_ring_size");
  int full = count_lines(errpath, room) == 1 && count_lines(errpath, need) == 1 &&
             count_lines(errpath, "ring_bytes 65536") == 1;
  /* every task had a ring refused: t0 to t1, t1 to both, t2 to both */
  dbt_check(warned == 1 && full,
            "t%d: one stderr warning naming %s, \"%s\" and btl_doorbell_ring_size (%d lines)", idx,
            g_dir, need, warned);
  unlink(errpath);
  return 0;
}

int main(void) {
  dbt_begin("shm_full");
  /* A private mount namespace: the tmpfs is invisible to everyone else and
   * vanishes with this process.  Needs root (CAP_SYS_ADMIN). */
  if (!dbt_check(unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS) (needs root): %s", strerror(errno)))
    return dbt_finish();
  if (!dbt_check(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0, "make mounts private: %s",
                 strerror(errno)))
    return dbt_finish();
  char *d = dbt_tempdir("/tmp", "shmfull");
  snprintf(g_dir, sizeof g_dir, "%s", d);
  free(d);
  /* three control segments and one ring, and half a ring to spare */
  uint64_t one_ring = PAGES(RING + DOORBELL_RING_HEADER_BYTES);
  uint64_t bytes = NT * PAGES(DOORBELL_CONTROL_BYTES) + one_ring + one_ring / 2;
  char opts[64];
  snprintf(opts, sizeof opts, "size=%llu,mode=1777", (unsigned long long)bytes);
  dbt_info("shm_dir %s: a %llu-byte tmpfs (3 x %llu control, 1 x %llu ring + half)", g_dir,
           (unsigned long long)bytes, (unsigned long long)PAGES(DOORBELL_CONTROL_BYTES),
           (unsigned long long)one_ring);
  if (dbt_check(mount("tmpfs", g_dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0,
                "mount a %llu-byte tmpfs on %s: %s", (unsigned long long)bytes, g_dir,
                strerror(errno))) {
    dbt_job *job = dbt_spawn(NT, child, NULL);
    dbt_serve(job, 150);
    for (int i = 0; i < NT; i++) dbt_check_exit0(job, i); /* a SIGBUS would show here */
    dbt_free(job);
    int left = dbt_dir_entries(g_dir, NULL);
    dbt_check(left == 0, "the shm_dir is empty afterwards (%d left)", left);
    umount2(g_dir, MNT_DETACH);
  }
  rmdir(g_dir);
  return dbt_finish();
}
