/* Test 1: one receiver blocked in doorbell_wait(DOORBELL_WAIT_BLOCK) gets
 * messages from a same-node sender (shared memory) and from a sender on
 * another node_id (TCP) in the same run.
 *
 * Tasks: 0 = receiver (node 1), 1 = local sender (node 1), 2 = remote sender
 * (node 2).  Senders pause between messages so the receiver really sleeps and
 * each path has to wake it. */
#include "dbt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NMSG 24
#define GAP_US 30000 /* long enough that the receiver is asleep when a message lands */

/* Sizes cycle through the interesting cases: empty, tiny, a cache line,
 * a page, more than a TCP segment, more than a shared-memory chunk. */
static const size_t sizes[] = {0, 1, 63, 4096, 65543, 300000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static uint64_t seed_of(uint32_t sender, uint32_t seq) { return ((uint64_t)sender << 32) | seq; }

struct rx {
  uint32_t next[3]; /* next expected seq per sender */
  unsigned bad;
};

static void on_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  struct rx *rx = ctx;
  if (task != 1 && task != 2) {
    if (rx->bad++ < 5) dbt_check(0, "message from unexpected task %u", task);
    return;
  }
  uint32_t seq = rx->next[task]++;
  size_t want = sizes[seq % NSIZES];
  int ok = window == 0 && tag == (uint8_t)(10 + task) && len == want &&
           dbt_verify(data, len, seed_of(task, seq));
  if (!ok && rx->bad++ < 5)
    dbt_check(0, "message %u from task %u: window %u tag %u len %zu (want 0/%u/%zu) or content wrong",
              seq, task, window, tag, len, 10 + task, want);
}

static int receiver(doorbell_endpoint *ep, const dbt_peer *peers) {
  (void)peers;
  struct rx rx = {{0}, 0};
  double t0 = dbt_now();
  int waits = 0;
  while ((rx.next[1] < NMSG || rx.next[2] < NMSG) && dbt_now() - t0 < 60) {
    doorbell_wake wake = {0, 0};
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 10 * 1000000, on_msg, &rx, &wake);
    waits++;
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "doorbell_wait(BLOCK) while senders are sending");
      break;
    }
    if (rc > 0 && wake.reason != DOORBELL_WOKE_MESSAGE) {
      dbt_check(0, "wait delivered %d messages but wake.reason = %u, want WOKE_MESSAGE", rc,
                wake.reason);
    }
    if (rc == 0 && wake.reason == DOORBELL_WOKE_TIMEOUT) {
      dbt_check(0, "wait timed out after 10 s with messages still outstanding");
      break;
    }
  }
  dbt_info("receiver: %u from shm sender, %u from tcp sender, in %d waits", rx.next[1],
           rx.next[2], waits);
  dbt_check(rx.next[1] == NMSG && rx.next[2] == NMSG && rx.bad == 0,
            "received all %d messages of each sender, in order, with intact data (bad=%u)",
            NMSG, rx.bad);
  dbt_check(doorbell_peer_path(ep, 1) == 1, "receiver: peer_path(task 1, same node) == 1 (shm), got %d",
            doorbell_peer_path(ep, 1));
  dbt_check(doorbell_peer_path(ep, 2) == 2, "receiver: peer_path(task 2, other node) == 2 (tcp), got %d",
            doorbell_peer_path(ep, 2));
  doorbell_counters c;
  memset(&c, 0xff, sizeof c);
  dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK, "doorbell_counters_get");
  dbt_info("receiver counters: shm_received=%lu tcp_received=%lu wakeups=%lu spurious=%lu "
           "shm_wakeups=%lu tcp_wakeups=%lu",
           (unsigned long)c.shm_received, (unsigned long)c.tcp_received, (unsigned long)c.wakeups,
           (unsigned long)c.spurious_wakeups, (unsigned long)c.shm_wakeups,
           (unsigned long)c.tcp_wakeups);
  dbt_check(c.shm_received == NMSG, "counters.shm_received == %d (got %lu)", NMSG,
            (unsigned long)c.shm_received);
  dbt_check(c.tcp_received == NMSG, "counters.tcp_received == %d (got %lu)", NMSG,
            (unsigned long)c.tcp_received);
  dbt_check(c.wakeups > 0, "counters.wakeups > 0 (the receiver really slept): %lu",
            (unsigned long)c.wakeups);
  dbt_check(c.shm_wakeups > 0, "counters.shm_wakeups > 0 (a shm message ended a sleep): %lu",
            (unsigned long)c.shm_wakeups);
  dbt_check(c.tcp_wakeups > 0, "counters.tcp_wakeups > 0 (a TCP message ended a sleep): %lu",
            (unsigned long)c.tcp_wakeups);
  dbt_check(c.spurious_wakeups <= c.wakeups, "counters.spurious_wakeups <= wakeups");
  return 0;
}

static int sender(doorbell_endpoint *ep, uint32_t me) {
  static uint8_t buf[300000];
  uint32_t w0 = 0;
  for (uint32_t seq = 0; seq < NMSG; seq++) {
    usleep(GAP_US);
    size_t len = sizes[seq % NSIZES];
    dbt_fill(buf, len, seed_of(me, seq));
    int rc = dbt_send_retry(ep, 0, 0, (uint8_t)(10 + me), buf, len, &w0, 1, NULL, NULL, NULL);
    if (rc != DOORBELL_OK) {
      dbt_check_rc(rc, DOORBELL_OK, "send message %u (%zu bytes) to task 0", seq, len);
      return 1;
    }
  }
  dbt_check_rc(dbt_drain(ep, &w0, 1, NULL, NULL, 60), DOORBELL_OK, "flush after %d sends", NMSG);
  int want_path = me == 1 ? 1 : 2;
  dbt_check(doorbell_peer_path(ep, 0) == want_path, "sender: peer_path(task 0) == %d, got %d",
            want_path, doorbell_peer_path(ep, 0));
  doorbell_counters c;
  dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK, "doorbell_counters_get");
  dbt_info("sender counters: shm_sent=%lu tcp_sent=%lu notifies_sent=%lu notifies_skipped=%lu",
           (unsigned long)c.shm_sent, (unsigned long)c.tcp_sent, (unsigned long)c.notifies_sent,
           (unsigned long)c.notifies_skipped);
  if (me == 1) {
    dbt_check(c.shm_sent == NMSG && c.tcp_sent == 0, "counters: shm_sent == %d, tcp_sent == 0",
              NMSG);
    /* The receiver sleeps between messages: a doorbell must have been rung. */
    dbt_check(c.notifies_sent > 0, "counters.notifies_sent > 0 (rang a sleeping receiver): %lu",
              (unsigned long)c.notifies_sent);
  } else {
    dbt_check(c.tcp_sent == NMSG && c.shm_sent == 0, "counters: tcp_sent == %d, shm_sent == 0",
              NMSG);
  }
  return 0;
}

static int child(int idx, void *arg) {
  (void)arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, idx == 2 ? 2 : 1);
  cfg.wait_mode = DOORBELL_WAIT_BLOCK;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[3];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d, node %lu)", idx,
               (unsigned long)cfg.node_id);
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, DBT_OTHERS) || me.rc != DOORBELL_OK) {
    dbt_barrier(); /* keep the others' rounds going */
    dbt_barrier();
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  dbt_barrier(); /* everyone connected */
  int rc = idx == 0 ? receiver(ep, peers) : sender(ep, (uint32_t)idx);
  dbt_barrier(); /* receiver done: nobody may disappear earlier */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  return rc;
}

int main(void) {
  dbt_begin("two_paths");
  dbt_run_all(3, child, NULL, 120, "/dev/shm", dbt_jobkey());
  return dbt_finish();
}
