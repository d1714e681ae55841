/* An orderly close over TCP (force_tcp, two tasks on one node).
 *
 * Rule: what a sender handed to doorbell_send is delivered when it
 * destroys its endpoint, however large and however long its receiver
 * computes before reading, and the receiver is then told
 * DOORBELL_WOKE_PEER_CLOSED, after the last message -- never PEER_LOST.
 * A task that dies is still PEER_LOST.
 *
 *   - 100 B, the receiver busy until the sender's process is gone (a pidfd
 *     says so), three times; then once with a receiver that never
 *     connected to the sender (it knows it only by its connection);
 *   - 64 MiB, more than the sockets hold: the sender's flush may time out
 *     (the receiver is busy), its destroy must still deliver everything;
 *     four times with a receiver busy for 1 s, once with a 2 s flush
 *     against a receiver busy for 5 s;
 *   - both close at once with 16 MiB queued to each other that neither
 *     reads: both destroys return;
 *   - SIGKILL after send and flush: PEER_LOST;
 *   - the receiver closes first: the sender is told PEER_CLOSED, and a
 *     send to the closed task fails with PEER_LOST;
 *   - no shm directory at all (shm_dir names one that does not exist):
 *     force_tcp needs none, so both endpoints are made and the 100 B case
 *     runs as above. */
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
#define HUGE (64u << 20)
#define CROSS (16u << 20)

enum kind { AFTER_EXIT, SLOW_READER, BOTH_CLOSE, KILLED, RECEIVER_CLOSED };

struct scenario {
  const char *name;
  enum kind kind;
  size_t size;
  int receiver_connects;
  double busy_s;        /* SLOW_READER: the receiver computes this long first */
  int64_t flush_us;     /* SLOW_READER: the sender's flush before destroy */
  int no_shm_dir;       /* shm_dir names a directory that does not exist */
  char *dir;
};



static void busy(double seconds) {
  double end = dbt_now() + seconds;
  while (dbt_now() < end) usleep(10000);
}

static int receiver(doorbell_endpoint *ep, const dbt_peer *peers, const struct scenario *sc) {
  dbt_tally t = {.from = 1, .sizes = {SMALL, HUGE, CROSS}};
  dbt_barrier(); /* the sender has sent */
  if (sc->kind == SLOW_READER) busy(sc->busy_s);
  else dbt_wait_exited(peers[1].pid, 60000);
  dbt_collect(ep, &t, 0, 1, 60);
  dbt_check(t.bad == 0 && t.other == 0, "%s: no wrong message or error (bad %d, error %d)", sc->name,
            t.bad, t.other);
  if (sc->kind == KILLED) {
    dbt_check(t.lost == 1 && t.closed == 0, "%s: PEER_LOST (got %d lost, %d closed)", sc->name,
              t.lost, t.closed);
    return 0;
  }
  dbt_check(t.msgs == 1, "%s: the message (%zu B) delivered intact (%d)", sc->name, sc->size, t.msgs);
  dbt_check(t.lost == 0 && t.closed == 1, "%s: PEER_CLOSED, not PEER_LOST (got %d closed, %d lost)",
            sc->name, t.closed, t.lost);
  dbt_check(t.msgs_at_end == 1, "%s: after the message (%d before it)", sc->name, t.msgs_at_end);
  doorbell_wake again = {0, 0};
  int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 100000, dbt_tally_msg, &t, &again);
  dbt_check(rc == 0 && again.reason == DOORBELL_WOKE_TIMEOUT, "%s: then a plain timeout (rc %d reason %u)",
            sc->name, rc, again.reason);
  return 0;
}

static int sender(doorbell_endpoint *ep, const struct scenario *sc) {
  uint32_t w0 = 0;
  dbt_send_seeded(ep, 0, sc->size, 1, dbt_ignore_msg, NULL);
  if (sc->kind == SLOW_READER) {
    int rc = doorbell_flush(ep, sc->flush_us);
    dbt_check(rc == DOORBELL_OK || rc == DOORBELL_ERR_TIMED_OUT, "%s: flush -> %d", sc->name, rc);
    dbt_info("%s: a %.1f s flush against a busy receiver: %s", sc->name, sc->flush_us / 1e6,
             doorbell_error_string(rc));
    dbt_barrier();
  } else {
    dbt_check_rc(dbt_drain(ep, &w0, 1, dbt_ignore_msg, NULL, 30), DOORBELL_OK, "%s: sender flush", sc->name);
  }
  if (sc->kind == KILLED) {
    dbt_barrier();
    raise(SIGKILL);
  }
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: sender endpoint_destroy", sc->name);
  if (sc->kind != SLOW_READER) dbt_barrier();
  return 0;
}

/* Both queue CROSS bytes to the other, read nothing, and destroy. */
static int both_close(doorbell_endpoint *ep, int idx, const struct scenario *sc) {
  dbt_send_seeded(ep, (uint32_t)!idx, CROSS, 1, dbt_ignore_msg, NULL);
  dbt_barrier();
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: task %d endpoint_destroy", sc->name, idx);
  return 0;
}

static int send_to_closed(doorbell_endpoint *ep, const struct scenario *sc) {
  dbt_tally t = {.from = 0, .sizes = {SMALL, HUGE, CROSS}};
  dbt_send_seeded(ep, 0, SMALL, 1, dbt_ignore_msg, NULL); /* a connection for task 0's goodbye */
  dbt_barrier();
  dbt_barrier(); /* task 0 has destroyed its endpoint */
  dbt_collect(ep, &t, 0, 1, 10);
  dbt_check(t.closed == 1 && t.lost == 0, "%s: the sender is told PEER_CLOSED (closed %d, lost %d)",
            sc->name, t.closed, t.lost);
  uint8_t *buf = malloc(SMALL);
  dbt_fill(buf, SMALL, dbt_seed_of(SMALL, 1));
  dbt_check_rc(doorbell_send(ep, 0, 0, 1, buf, SMALL), DOORBELL_ERR_PEER_LOST,
               "%s: a send to the closed task", sc->name);
  free(buf);
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: sender endpoint_destroy", sc->name);
  return 0;
}

static int child(int idx, void *arg) {
  const struct scenario *sc = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  char missing[4200];
  snprintf(missing, sizeof missing, "%s/missing", sc->dir);
  cfg.shm_dir = sc->no_shm_dir ? missing : sc->dir;
  cfg.force_tcp = 1;
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
  if (mask) dbt_check(doorbell_peer_path(ep, (uint32_t)!idx) == 2, "task %d reaches task %d over TCP", idx, !idx);
  if (sc->kind == BOTH_CLOSE) return both_close(ep, idx, sc);
  if (sc->kind == RECEIVER_CLOSED) {
    if (idx == 1) return send_to_closed(ep, sc);
    dbt_barrier(); /* task 1 has sent */
    /* Its message came: the connection is up on this side too (one still
     * in its handshake would end with no goodbye: a loss to task 1). */
    dbt_tally t = {.from = 1, .sizes = {SMALL}};
    dbt_collect(ep, &t, 1, 0, 30);
    dbt_check(t.msgs == 1 && t.bad == 0, "%s: the sender's message came", sc->name);
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
  sc->dir = dbt_tempdir("/dev/shm", "tcpclose");
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
  dbt_begin("tcp_close");
  char name[128];
  for (int i = 1; i <= 3; i++) {
    snprintf(name, sizeof name, "100 B, read after the sender exited, run %d of 3", i);
    struct scenario sc = {name, AFTER_EXIT, SMALL, 1, 0, 0, 0, NULL};
    run(&sc);
  }
  struct scenario receive_only = {"100 B, receive-only (no connect)", AFTER_EXIT, SMALL, 0, 0, 0, 0, NULL};
  run(&receive_only);
  for (int i = 1; i <= 4; i++) {
    snprintf(name, sizeof name, "64 MiB, receiver busy 1 s, run %d of 4", i);
    struct scenario sc = {name, SLOW_READER, HUGE, 1, 1.0, 200000, 0, NULL};
    run(&sc);
  }
  struct scenario more[] = {
      {"64 MiB, 2 s flush, receiver busy 5 s", SLOW_READER, HUGE, 1, 5.0, 2000000, 0, NULL},
      {"both close with 16 MiB queued each way", BOTH_CLOSE, CROSS, 1, 0, 0, 0, NULL},
      {"SIGKILL after send and flush", KILLED, SMALL, 1, 0, 0, 0, NULL},
      {"the receiver closes first", RECEIVER_CLOSED, 0, 1, 0, 0, 0, NULL},
      {"100 B, no shm directory", AFTER_EXIT, SMALL, 1, 0, 0, 1, NULL},
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run(&more[i]);
  return dbt_finish();
}
