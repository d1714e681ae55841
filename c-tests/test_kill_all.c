/* kill -9 of every process leaves no file behind.
 *
 * Every segment loses its name as soon as every peer that needs it has
 * mapped it: a ring and a bulk file when their receiver maps them, a
 * control segment once the `local_peers` tasks its owner was told about
 * have mapped it.  So once tasks have exchanged messages, nothing of theirs
 * has a name any more, and killing them all leaves nothing to clean up.
 *
 *   - all-to-all: 4 tasks (local_peers = 3) each send 100 B and 1 MiB
 *     (bulk) to each other and receive all; the private shm directory is
 *     then already empty; every task SIGKILLs itself; still empty.
 *   - late connect: tasks 0 and 1 (local_peers = 1) connect to each other,
 *     so their control files are gone; task 2 then connects to task 0 and
 *     sends: it reaches task 0's control segment without its name (through
 *     task 0's descriptor) and the message arrives; then all are killed and
 *     nothing is left. */
#include "dbt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 100
#define LARGE (1u << 20)

struct scenario {
  const char *name;
  int tasks;
  int late; /* the late-connect scenario */
  char *dir;
};

static uint64_t seed_of(size_t len, uint32_t from) { return len * 31 + from; }

struct tally {
  int msgs;
  int bad;
};

static void on_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  (void)window, (void)tag;
  struct tally *t = ctx;
  if ((len == SMALL || len == LARGE) && dbt_verify(data, len, seed_of(len, task))) t->msgs++;
  else t->bad++;
}

static void send_one(doorbell_endpoint *ep, uint32_t me, uint32_t to, size_t len, struct tally *t) {
  uint8_t *buf = malloc(len);
  dbt_fill(buf, len, seed_of(len, me));
  uint32_t w0 = 0;
  dbt_check_rc(dbt_send_retry(ep, to, 0, 1, buf, len, &w0, 1, on_msg, t, NULL), DOORBELL_OK,
               "task %u: send %zu B to task %u", me, len, to);
  free(buf);
}

static void receive(doorbell_endpoint *ep, struct tally *t, int want) {
  double end = dbt_now() + 60;
  while (t->msgs < want && dbt_now() < end) {
    doorbell_wake wake;
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 200000, on_msg, t, &wake);
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "doorbell_wait");
      return;
    }
  }
}

static void all_to_all(doorbell_endpoint *ep, uint32_t me, const struct scenario *sc) {
  struct tally t = {0};
  for (int to = 0; to < sc->tasks; to++) {
    if (to == (int)me) continue;
    send_one(ep, me, (uint32_t)to, SMALL, &t);
    send_one(ep, me, (uint32_t)to, LARGE, &t);
  }
  receive(ep, &t, 2 * (sc->tasks - 1));
  uint32_t w0 = 0;
  dbt_check_rc(dbt_drain(ep, &w0, 1, on_msg, &t, 30), DOORBELL_OK, "task %u: flush", me);
  dbt_check(t.msgs == 2 * (sc->tasks - 1) && t.bad == 0, "task %u: all %d messages arrived intact (%d, %d bad)",
            me, 2 * (sc->tasks - 1), t.msgs, t.bad);
  dbt_barrier(); /* everyone has received everything */
  if (me == 0) {
    int left = dbt_dir_entries(sc->dir, NULL);
    dbt_check(left == 0, "%s: after the exchange, with every task alive, no segment has a name (%d)",
              sc->name, left);
  }
}

static void late_connect(doorbell_endpoint *ep, uint32_t me, const dbt_peer *peers,
                         const struct scenario *sc) {
  struct tally t = {0};
  dbt_barrier(); /* tasks 0 and 1 have connected to each other */
  if (me == 2) {
    dbt_check(dbt_dir_entries(sc->dir, "-c0") == 0, "%s: task 0's control file has no name any more", sc->name);
    uint32_t task = UINT32_MAX;
    dbt_check_rc(doorbell_connect(ep, peers[0].blob, peers[0].len, &task), DOORBELL_OK,
                 "%s: task 2 connects to task 0 late", sc->name);
    send_one(ep, me, 0, SMALL, &t);
    uint32_t w0 = 0;
    dbt_check_rc(dbt_drain(ep, &w0, 1, on_msg, &t, 30), DOORBELL_OK, "task 2: flush");
  }
  if (me == 0) {
    receive(ep, &t, 1);
    dbt_check(t.msgs == 1 && t.bad == 0, "%s: task 0 got the late peer's message", sc->name);
  }
  dbt_barrier();
  if (me == 0) {
    int left = dbt_dir_entries(sc->dir, NULL);
    dbt_check(left == 0, "%s: with every task alive, no segment has a name (%d)", sc->name, left);
  }
}

static int child(int idx, void *arg) {
  const struct scenario *sc = arg;
  uint32_t me = (uint32_t)idx;
  doorbell_config cfg;
  dbt_config(&cfg, me, 1);
  cfg.shm_dir = sc->dir;
  cfg.local_peers = sc->late ? 1 : sc->tasks - 1;
  doorbell_endpoint *ep = NULL;
  dbt_peer mine = {0}, peers[8];
  mine.task = me;
  mine.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(mine.rc, DOORBELL_OK, "endpoint_create(task %u)", me);
  /* Late connect: 0 and 1 connect to each other, 2 to nobody yet. */
  uint64_t mask = !sc->late ? DBT_OTHERS : me == 2 ? 0 : 1ull << (1 - me);
  if (dbt_exchange(mine.rc == DOORBELL_OK ? ep : NULL, &mine, peers, mask) || mine.rc != DOORBELL_OK) {
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  if (sc->late) late_connect(ep, me, peers, sc);
  else all_to_all(ep, me, sc);
  dbt_barrier(); /* the directory was looked at */
  raise(SIGKILL);
  return 1;
}

static void run(struct scenario *sc) {
  dbt_info("--- %s ---", sc->name);
  sc->dir = dbt_tempdir("/dev/shm", "killall");
  dbt_job *job = dbt_spawn(sc->tasks, child, sc);
  dbt_serve(job, 120);
  for (int i = 0; i < sc->tasks; i++) {
    int st = dbt_status(job, i);
    dbt_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: task %d died of SIGKILL", sc->name, i);
  }
  dbt_free(job);
  int left = dbt_dir_entries(sc->dir, NULL);
  dbt_check(left == 0, "%s: no file left after kill -9 of every task (%d)", sc->name, left);
  dbt_rmtree(sc->dir);
  free(sc->dir);
  sc->dir = NULL;
}

int main(void) {
  dbt_begin("kill_all");
  struct scenario all = {"all-to-all, 4 tasks, 100 B + 1 MiB", 4, 0, NULL};
  struct scenario late = {"late connect, 3 tasks", 3, 1, NULL};
  run(&all);
  run(&late);
  return dbt_finish();
}
