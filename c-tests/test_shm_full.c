/* A shared-memory directory with room for the tasks' control segments
 * and little else.
 *
 * Three same-node tasks on a tmpfs (private mount namespace, needs root)
 * sized for their three control segments (each with its window-0 queue of
 * 64 KiB) and half a queue more.  Every ordered pair sends NMSG messages
 * of 100 B and 200 KiB; the large ones are bulk-sized for a 64 KiB queue,
 * and no bulk buffer fits, so they go through the queue in chunks.
 * Checks: every message arrives intact and in order; doorbell_peer_path
 * is 1 (shared memory) for every pair: a sender needs no memory of its own
 * to reach a receiver; a second window, whose queue does not fit, is
 * refused by doorbell_window_open with DOORBELL_ERR_NO_SHM_SPACE (the
 * defined point), and the first window still works after that; the
 * directory is empty at the end; nobody crashed (a SIGBUS would show in
 * the exit status).  With a ring per pair (before the shared queue) no pair but
 * one had room for a ring: they went over TCP (path 2). */
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
#define QUEUE (64u << 10)
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

/* Deliver until NMSG messages came from each other task. */
static void receive(doorbell_endpoint *ep, struct rx *rx) {
  double end = dbt_now() + 30;
  for (;;) {
    int done = 1;
    for (uint32_t t = 0; t < NT; t++)
      if (t != rx->me && rx->next[t] < NMSG) done = 0;
    if (done || dbt_now() > end) break;
    doorbell_wake wk;
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_DEFAULT, 100000, on_msg, rx, &wk);
    if (rc < 0 && !dbt_check_rc(rc, DOORBELL_OK, "doorbell_wait")) break;
  }
  for (uint32_t t = 0; t < NT; t++)
    if (t != rx->me)
      dbt_check(rx->next[t] == NMSG, "t%u: %u of %u messages from t%u arrived", rx->me,
                rx->next[t], NMSG, t);
}

static int child(int idx, void *arg) {
  (void)arg;
  uint32_t me = (uint32_t)idx;
  doorbell_config cfg;
  dbt_config(&cfg, me, 1);
  cfg.shm_dir = g_dir;
  cfg.ring_bytes = QUEUE;
  doorbell_endpoint *ep = NULL;
  dbt_peer mine = {0}, peers[NT];
  mine.task = me;
  mine.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(mine.rc, DOORBELL_OK, "t%d: endpoint_create (room for 3 control segments)", idx);
  dbt_exchange(mine.rc == DOORBELL_OK ? ep : NULL, &mine, peers, DBT_OTHERS);
  if (mine.rc != DOORBELL_OK) {
    dbt_barrier();
    dbt_barrier();
    return 1;
  }
  struct rx rx = {.me = me};
  uint32_t w0 = 0;

  /* t0 first asks for a second window: its queue does not fit. */
  if (idx == 0) {
    uint32_t w = UINT32_MAX;
    dbt_check_rc(doorbell_window_open(ep, &w), DOORBELL_ERR_NO_SHM_SPACE,
                 "t0: a second window, with no room for its queue");
  }
  dbt_barrier();

  /* every ordered pair */
  for (uint32_t seq = 0; seq < NMSG; seq++)
    for (uint32_t d = 1; d < NT; d++) {
      uint32_t to = (me + d) % NT;
      int rc = send_seq(ep, &rx, to, seq);
      if (rc != DOORBELL_OK) dbt_check_rc(rc, DOORBELL_OK, "t%u -> t%u: message %u", me, to, seq);
    }
  dbt_check_rc(dbt_drain(ep, &w0, 1, on_msg, &rx, 60), DOORBELL_OK, "t%d: flush", idx);
  receive(ep, &rx);

  for (uint32_t t = 0; t < NT; t++)
    if (t != me)
      dbt_check_rc(doorbell_peer_path(ep, t), 1, "t%u -> t%u: path shm", me, t);
  dbt_barrier(); /* everyone received everything */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "t%d: endpoint_destroy", idx);
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
  /* three control segments with their first queue, and half a queue more */
  uint64_t queue = DOORBELL_QUEUE_HEADER_BYTES + QUEUE;
  uint64_t control = PAGES(DOORBELL_CONTROL_BYTES + queue);
  uint64_t bytes = NT * control + PAGES(queue / 2);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%llu,mode=1777", (unsigned long long)bytes);
  dbt_info("shm_dir %s: a %llu-byte tmpfs (3 x %llu control with its queue, half a queue more)",
           g_dir, (unsigned long long)bytes, (unsigned long long)control);
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
