/* A same-node sender that closes before its receiver polls.
 *
 * Rule: what a sender handed to doorbell_send and flushed is delivered, and
 * an orderly close is told from a death.  Each scenario runs a receiver
 * (task 0) and a sender (task 1) on one node, in a private shm directory.
 * The sender sends, flushes, destroys its endpoint and exits 0; only after
 * its process is gone (a pidfd says so) does the receiver poll.  The
 * receiver must get every message, byte for byte, then
 * DOORBELL_WOKE_PEER_CLOSED naming the sender -- never PEER_LOST.
 *
 *   - first message on a ring, 100 B (in the ring) and 1 MiB (the ring's
 *     bulk slot), with the receiver connected to the sender (it watches the
 *     sender's pid) and without (a receive-only peer learns of the sender
 *     from its ring); the 100 B connected case five times;
 *   - ring in use: one message read, then a 1 MiB one (a new bulk file)
 *     sent before the close;
 *   - both directions: each sends 100 B and 1 MiB to the other; task 1
 *     reads task 0's, closes and exits, then task 0 reads task 1's;
 *   - the ring full: 20,000 messages of 100 B (more than the ring holds;
 *     the rest waits in the sender's backlog) against a receiver busy for
 *     3 s: the sender's destroy waits for room, however long it takes;
 *   - SIGKILL instead of a close: the receiver gets PEER_LOST, not
 *     PEER_CLOSED;
 *   - the other way round, the receiver closes first: the sender is told
 *     PEER_CLOSED, and a send to the closed task fails with PEER_LOST
 *     instead of queueing a message nobody will read.
 *
 * Afterwards no file is left in the directory. */
#include "dbt.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 100
#define LARGE (1u << 20)
#define RING_FILL 20000
#define BUSY_S 3.0

enum kind { FIRST_MESSAGE, RING_IN_USE, BOTH_WAYS, RING_FULL, KILLED, RECEIVER_CLOSED };

struct scenario {
  const char *name;
  enum kind kind;
  size_t size;            /* FIRST_MESSAGE, KILLED: the one message */
  int receiver_connects;  /* the receiver calls doorbell_connect(sender) */
  char *dir;
};


static void judge(const struct scenario *sc, const dbt_tally *t, int want, int killed) {
  dbt_check(t->bad == 0 && t->other == 0, "%s: no wrong message or error (bad %d, error %d)",
            sc->name, t->bad, t->other);
  if (killed) {
    dbt_check(t->lost == 1 && t->closed == 0, "%s: PEER_LOST (got %d lost, %d closed)", sc->name,
              t->lost, t->closed);
    dbt_info("%s: %d of %d message(s) of the killed sender delivered", sc->name, t->msgs, want);
    return;
  }
  dbt_check(t->msgs == want, "%s: %d of %d message(s) delivered intact", sc->name, t->msgs, want);
  dbt_check(t->lost == 0, "%s: no PEER_LOST for a sender that closed in order (got %d)", sc->name,
            t->lost);
  dbt_check(t->closed == 1, "%s: PEER_CLOSED reported once (got %d)", sc->name, t->closed);
  dbt_check(t->msgs_at_end == want, "%s: after every message (%d of %d before it)", sc->name,
            t->msgs_at_end, want);
}

static int receiver(doorbell_endpoint *ep, const dbt_peer *peers, const struct scenario *sc) {
  dbt_tally t = {.from = 1, .sizes = {SMALL, LARGE}};
  int want = sc->kind == RING_IN_USE ? 2 : sc->kind == BOTH_WAYS ? 2 : sc->kind == RING_FULL ? RING_FILL : 1;
  if (sc->kind == BOTH_WAYS) {
    /* Task 1 sends only after this barrier, so it all arrives below. */
    dbt_send_seeded(ep, 1, SMALL, 1, dbt_tally_msg, &t);
    dbt_send_seeded(ep, 1, LARGE, 2, dbt_tally_msg, &t);
    uint32_t w0 = 0;
    dbt_check_rc(dbt_drain(ep, &w0, 1, dbt_tally_msg, &t, 30), DOORBELL_OK, "%s: flush", sc->name);
    dbt_barrier();
  }
  if (sc->kind == RING_IN_USE) {
    dbt_barrier(); /* the first message is in the ring */
    dbt_collect(ep, &t, 1, 0, 10);
    /* >= 1: the second, sent right after the barrier, may come in the
     * same progress pass. */
    dbt_check(t.msgs >= 1, "%s: the first message arrived while the sender lives (%d)", sc->name,
              t.msgs);
  }
  if (sc->kind == RING_FULL) {
    dbt_barrier(); /* the sender has queued everything; it destroys next */
    double end = dbt_now() + BUSY_S;
    while (dbt_now() < end) usleep(10000); /* busy: no progress */
    dbt_collect(ep, &t, want, 1, 60);
    judge(sc, &t, want, 0);
    return 0;
  }
  dbt_barrier(); /* the sender has sent, flushed and destroyed its endpoint */
  dbt_wait_exited(peers[1].pid, 30000);
  dbt_collect(ep, &t, want, 1, 10);
  judge(sc, &t, want, sc->kind == KILLED);
  /* The event is reported once: the next wait just times out. */
  doorbell_wake again = {0, 0};
  int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 100000, dbt_tally_msg, &t, &again);
  dbt_check(rc == 0 && again.reason == DOORBELL_WOKE_TIMEOUT, "%s: then a plain timeout (rc %d reason %u)",
            sc->name, rc, again.reason);
  return 0;
}

static int sender(doorbell_endpoint *ep, const struct scenario *sc) {
  dbt_tally t = {.from = 0, .sizes = {SMALL, LARGE}};
  uint32_t w0 = 0;
  switch (sc->kind) {
  case FIRST_MESSAGE:
  case KILLED:
    dbt_send_seeded(ep, 0, sc->size, 1, dbt_tally_msg, &t);
    break;
  case RING_IN_USE:
    dbt_send_seeded(ep, 0, SMALL, 1, dbt_tally_msg, &t);
    dbt_barrier();
    dbt_send_seeded(ep, 0, LARGE, 2, dbt_tally_msg, &t);
    break;
  case BOTH_WAYS:
    dbt_barrier(); /* task 0 has sent and flushed */
    dbt_collect(ep, &t, 2, 0, 30);
    dbt_check(t.msgs == 2 && t.bad == 0, "%s: task 1 got task 0's two messages (%d)", sc->name, t.msgs);
    dbt_send_seeded(ep, 0, SMALL, 1, dbt_tally_msg, &t);
    dbt_send_seeded(ep, 0, LARGE, 2, dbt_tally_msg, &t);
    break;
  case RING_FULL: {
    uint8_t buf[SMALL];
    int bad = 0;
    for (int i = 0; i < RING_FILL; i++) {
      dbt_fill(buf, SMALL, dbt_seed_of(SMALL, (uint8_t)i));
      bad += dbt_send_retry(ep, 0, 0, (uint8_t)i, buf, SMALL, &w0, 1, dbt_tally_msg, &t, NULL) != DOORBELL_OK;
    }
    dbt_check(bad == 0, "%s: %d sends of 100 B (%d failed)", sc->name, RING_FILL, bad);
    dbt_barrier();
    dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: sender endpoint_destroy", sc->name);
    return 0;
  }
  case RECEIVER_CLOSED: /* send_to_closed */
    break;
  }
  dbt_check_rc(dbt_drain(ep, &w0, 1, dbt_tally_msg, &t, 30), DOORBELL_OK, "%s: sender flush", sc->name);
  if (sc->kind == KILLED) {
    dbt_barrier();
    raise(SIGKILL);
  }
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: sender endpoint_destroy", sc->name);
  dbt_barrier();
  return 0;
}

/* RECEIVER_CLOSED: task 0 closes at once; task 1 then hears of it and
 * tries to send to it. */
static int send_to_closed(doorbell_endpoint *ep, const struct scenario *sc) {
  dbt_tally t = {.from = 0, .sizes = {SMALL, LARGE}};
  dbt_barrier(); /* we have connected to task 0 (and mapped its control segment) */
  dbt_barrier(); /* task 0 has destroyed its endpoint */
  dbt_collect(ep, &t, 0, 1, 10);
  dbt_check(t.closed == 1 && t.lost == 0, "%s: the sender is told PEER_CLOSED (closed %d, lost %d)",
            sc->name, t.closed, t.lost);
  size_t sizes[] = {SMALL, LARGE};
  for (int i = 0; i < 2; i++) {
    uint8_t *buf = malloc(sizes[i]);
    dbt_fill(buf, sizes[i], dbt_seed_of(sizes[i], 1));
    dbt_check_rc(doorbell_send(ep, 0, 0, 1, buf, sizes[i]), DOORBELL_ERR_PEER_LOST,
                 "%s: a %zu B send to the closed task", sc->name, sizes[i]);
    free(buf);
  }
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: sender endpoint_destroy", sc->name);
  return 0;
}

static int child(int idx, void *arg) {
  const struct scenario *sc = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.shm_dir = sc->dir;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d)", idx);
  uint64_t mask = idx == 1 || sc->receiver_connects ? DBT_OTHERS : 0;
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, mask) || me.rc != DOORBELL_OK) {
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  if (sc->kind == RECEIVER_CLOSED) {
    if (idx == 1) return send_to_closed(ep, sc);
    /* Close only once task 1 is connected: a task that closed and
     * vanished before its peer ever reached it leaves nothing that tells
     * a close from a death (README, Reliability and security). */
    dbt_barrier();
    dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: receiver closes first", sc->name);
    dbt_barrier();
    return 0;
  }
  if (idx == 1) return sender(ep, sc);
  int rc = receiver(ep, peers, sc);
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: receiver endpoint_destroy", sc->name);
  return rc;
}

static void run(struct scenario *sc) {
  dbt_info("--- %s ---", sc->name);
  sc->dir = dbt_tempdir("/dev/shm", "cleanclose");
  dbt_job *job = dbt_spawn(2, child, sc);
  dbt_serve(job, 120);
  dbt_check_exit0(job, 0);
  int st = dbt_status(job, 1);
  if (sc->kind == KILLED) dbt_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the sender was killed", sc->name);
  else dbt_check_exit0(job, 1);
  dbt_free(job);
  int left = dbt_dir_entries(sc->dir, NULL);
  dbt_check(left == 0, "%s: no file left in the shm directory (%d)", sc->name, left);
  dbt_rmtree(sc->dir);
  free(sc->dir);
  sc->dir = NULL;
}

int main(void) {
  dbt_begin("clean_close");
  char name[128];
  for (int i = 1; i <= 5; i++) {
    snprintf(name, sizeof name, "first message 100 B, receiver connected, run %d of 5", i);
    struct scenario sc = {name, FIRST_MESSAGE, SMALL, 1, NULL};
    run(&sc);
  }
  struct scenario more[] = {
      {"first message 1 MiB (bulk), receiver connected", FIRST_MESSAGE, LARGE, 1, NULL},
      {"first message 100 B, receive-only (no connect)", FIRST_MESSAGE, SMALL, 0, NULL},
      {"first message 1 MiB (bulk), receive-only (no connect)", FIRST_MESSAGE, LARGE, 0, NULL},
      {"ring in use, then 1 MiB (new bulk file)", RING_IN_USE, 0, 1, NULL},
      {"both directions, 100 B + 1 MiB each way", BOTH_WAYS, 0, 1, NULL},
      {"ring full, receiver busy 3 s", RING_FULL, SMALL, 1, NULL},
      {"SIGKILL after send and flush", KILLED, SMALL, 1, NULL},
      {"the receiver closes first", RECEIVER_CLOSED, 0, 1, NULL},
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run(&more[i]);
  return dbt_finish();
}
