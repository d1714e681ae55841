/* Test 4: SIGKILL of a sender while the receiver waits.  The receiver's
 * doorbell_wait must return DOORBELL_ERR_PEER_LOST naming the sender within
 * 1 s of the kill.  Run three times: sender on the same node (shared memory,
 * pid watch), on another node_id (TCP hang-up), and on the same node with no
 * pidfd to be had when the receiver connects (its fd table is full then, as
 * under valgrind or on a kernel before 5.3 pidfd_open fails): that is no
 * loss -- the message must still arrive -- and the kill is still seen.
 *
 * Tasks: 0 = receiver, 1 = sender.  A thread inside the receiver kills the
 * sender 300 ms after the receiver entered its wait, so both time stamps come
 * from one clock in one process. */
#include "dbt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_AFTER_US 300000
#define LIMIT_S 1.0

struct scenario {
  const char *name;
  uint64_t sender_node;
  int want_path;
  int no_pidfd; /* the receiver connects with its fd table full */
  char *shm_dir;
};

struct killer {
  pid_t victim;
  double t_kill;
};

static void *killer_main(void *arg) {
  struct killer *k = arg;
  usleep(KILL_AFTER_US);
  k->t_kill = dbt_now();
  kill(k->victim, SIGKILL);
  return NULL;
}

static void count_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                      size_t len) {
  (void)window;
  int ok = task == 1 && tag == 7 && len == 5 && memcmp(data, "hello", 5) == 0;
  if (ok) (*(unsigned *)ctx)++;
  else dbt_check(0, "unexpected message task %u tag %u len %zu", task, tag, len);
}

static int receiver(doorbell_endpoint *ep, const dbt_peer *peers, const struct scenario *sc) {
  unsigned got = 0;
  double t0 = dbt_now();
  while (got < 1 && dbt_now() - t0 < 30) {
    doorbell_wake wake;
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 1000000, count_msg, &got, &wake);
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "wait for the sender's message");
      break; /* carry on: the sender must still be killed */
    }
  }
  dbt_check(got == 1, "%s: the sender's message arrived", sc->name);
  dbt_check(doorbell_peer_path(ep, 1) == sc->want_path, "%s: peer_path(sender) == %d (got %d)",
            sc->name, sc->want_path, doorbell_peer_path(ep, 1));
  dbt_barrier(); /* the sender is now idle in pause() */

  struct killer k = {(pid_t)peers[1].pid, 0};
  pthread_t th;
  pthread_create(&th, NULL, killer_main, &k);
  doorbell_wake wake = {0, UINT32_MAX};
  double w0 = dbt_now();
  int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 10 * 1000000, count_msg, &got, &wake);
  double t_ret = dbt_now();
  pthread_join(th, NULL);
  dbt_info("%s: wait returned %d (%s) reason %u task %u, %.3f s after entering, %.3f s after the kill",
           sc->name, rc, doorbell_error_string(rc), wake.reason, wake.task, t_ret - w0,
           t_ret - k.t_kill);
  dbt_check_rc(rc, DOORBELL_ERR_PEER_LOST, "%s: doorbell_wait while the sender is SIGKILLed",
               sc->name);
  dbt_check(wake.task == 1, "%s: wake.task == 1 (the sender), got %u", sc->name, wake.task);
  dbt_check(wake.reason == DOORBELL_WOKE_PEER_LOST, "%s: wake.reason == WOKE_PEER_LOST, got %u",
            sc->name, wake.reason);
  dbt_check(t_ret >= k.t_kill, "%s: the wait did not return before the kill", sc->name);
  dbt_check(t_ret - k.t_kill < LIMIT_S, "%s: woke %.3f s after the kill (< %.1f s)", sc->name,
            t_ret - k.t_kill, LIMIT_S);

  /* The loss is reported once; the endpoint stays usable. */
  doorbell_wake again = {0, 0};
  rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 200000, count_msg, &got, &again);
  dbt_check(rc == 0 && again.reason == DOORBELL_WOKE_TIMEOUT,
            "%s: the next wait times out normally (rc %d reason %u): loss reported once", sc->name,
            rc, again.reason);
  doorbell_counters c;
  dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK, "doorbell_counters_get");
  dbt_check(c.peers_lost == 1, "%s: counters.peers_lost == 1 (got %lu)", sc->name,
            (unsigned long)c.peers_lost);
  rc = doorbell_send(ep, 1, 0, 7, "late", 4);
  dbt_info("%s: send to the lost task returns %d (%s)", sc->name, rc, doorbell_error_string(rc));
  return 0;
}

__attribute__((noreturn)) static int sender(doorbell_endpoint *ep) {
  uint32_t w0 = 0;
  dbt_check_rc(dbt_send_retry(ep, 0, 0, 7, "hello", 5, &w0, 1, NULL, NULL, NULL), DOORBELL_OK,
               "send hello");
  dbt_check_rc(dbt_drain(ep, &w0, 1, NULL, NULL, 30), DOORBELL_OK, "flush");
  dbt_barrier();
  for (;;) pause(); /* until SIGKILL */
}

/* Connect to `peer` while no new fd can be opened: the lowest free fd
 * number becomes the limit, so pidfd_open inside doorbell_connect fails
 * with EMFILE.  The limit is put back right after. */
static int connect_with_full_fd_table(doorbell_endpoint *ep, const dbt_peer *peer) {
  struct rlimit old, full;
  int lowest_free = dup(0);
  if (lowest_free < 0 || getrlimit(RLIMIT_NOFILE, &old) != 0) return -1;
  close(lowest_free);
  full = old;
  full.rlim_cur = (rlim_t)lowest_free;
  dbt_check(setrlimit(RLIMIT_NOFILE, &full) == 0, "setrlimit(RLIMIT_NOFILE, %d)", lowest_free);
  int probe = dup(0);
  dbt_check(probe < 0 && errno == EMFILE, "the fd table is full (dup -> %d, errno %d)", probe, errno);
  if (probe >= 0) close(probe);
  uint32_t task = UINT32_MAX;
  int rc = doorbell_connect(ep, peer->blob, peer->len, &task);
  setrlimit(RLIMIT_NOFILE, &old);
  dbt_check_rc(rc, DOORBELL_OK, "doorbell_connect with a full fd table");
  return rc == DOORBELL_OK ? 0 : -1;
}

static int child(int idx, void *arg) {
  const struct scenario *sc = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, idx == 0 ? 1 : sc->sender_node);
  cfg.shm_dir = sc->shm_dir;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d)", idx);
  /* The receiver connects to the sender's blob too: that is what lets it watch the sender. */
  int full_fds = sc->no_pidfd && idx == 0;
  int bad = dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, full_fds ? 0 : DBT_OTHERS);
  if (!bad && full_fds && me.rc == DOORBELL_OK) bad = connect_with_full_fd_table(ep, &peers[1]);
  if (bad || me.rc != DOORBELL_OK) {
    dbt_barrier();
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  int rc = idx == 0 ? receiver(ep, peers, sc) : sender(ep);
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "receiver endpoint_destroy");
  return rc;
}

static void run(struct scenario *sc) {
  dbt_info("--- scenario %s ---", sc->name);
  sc->shm_dir = dbt_tempdir("/dev/shm", "peerlost");
  dbt_job *job = dbt_spawn(2, child, sc);
  dbt_serve(job, 90);
  dbt_check_exit0(job, 0);
  int st = dbt_status(job, 1);
  dbt_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the sender died of SIGKILL", sc->name);
  dbt_free(job);
  /* The killed sender could not unlink its own segments; report, do not judge. */
  int left = dbt_dir_entries(sc->shm_dir, NULL);
  dbt_info("%s: %d file(s) left in the shm_dir after the kill", sc->name, left);
  dbt_rmtree(sc->shm_dir);
  free(sc->shm_dir);
  sc->shm_dir = NULL;
}

int main(void) {
  dbt_begin("peer_lost");
  struct scenario shm = {"shm (same node)", 1, 1, 0, NULL};
  struct scenario tcp = {"tcp (other node)", 2, 2, 0, NULL};
  struct scenario nopidfd = {"shm, no pidfd at connect", 1, 1, 1, NULL};
  run(&shm);
  run(&tcp);
  run(&nopidfd);
  return dbt_finish();
}
