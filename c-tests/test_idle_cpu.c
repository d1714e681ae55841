/* Test 3: a receiver blocked 3 s in doorbell_wait with no message arriving
 * uses < 5 % CPU (getrusage RUSAGE_SELF: every thread of the process,
 * including the endpoint's FLIH thread).
 *
 * Tasks: 0 = receiver (node 1), 1 = shm peer (node 1), 2 = TCP peer (node 2).
 * Each peer first sends one message so the ring and the socket exist and the
 * receiver really has something to watch; then everyone is idle. */
#include "dbt.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define IDLE_S 3.0
#define MAX_CPU 0.05

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

static void count_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                      size_t len) {
  (void)window;
  (void)tag;
  (void)data;
  (void)len;
  if (task < 3) ((unsigned *)ctx)[task]++;
}

/* One wait of `secs` in `mode`; returns CPU fraction (-1 on a wrong return). */
static double measure(doorbell_endpoint *ep, uint32_t mode, const char *name, double secs) {
  unsigned got[3] = {0, 0, 0};
  doorbell_wake wake = {0, 0};
  double c0 = cpu_seconds(), t0 = dbt_now();
  int rc = doorbell_wait(ep, 0, mode, (int64_t)(secs * 1e6), count_msg, got, &wake);
  double wall = dbt_now() - t0, cpu = cpu_seconds() - c0;
  int ok = dbt_check(rc == 0 && wake.reason == DOORBELL_WOKE_TIMEOUT,
                     "%s wait with nothing arriving returns 0 / WOKE_TIMEOUT (rc %d reason %u)",
                     name, rc, wake.reason);
  ok &= dbt_check(wall >= secs * 0.98 && wall < secs + 1.0,
                  "%s wait lasted its %.1f s timeout (%.3f s)", name, secs, wall);
  dbt_info("%s: cpu %.4f s over %.3f s wall = %.2f %%", name, cpu, wall, 100 * cpu / wall);
  return ok ? cpu / wall : -1;
}

static int receiver(doorbell_endpoint *ep) {
  unsigned got[3] = {0, 0, 0};
  double t0 = dbt_now();
  while ((got[1] < 1 || got[2] < 1) && dbt_now() - t0 < 30) {
    doorbell_wake wake;
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 1000000, count_msg, got, &wake);
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "wait for the peers' first messages");
      break;
    }
  }
  dbt_check(got[1] == 1 && got[2] == 1, "first message from the shm and the tcp peer arrived");
  dbt_barrier(); /* peers are idle from here on */

  double block = measure(ep, DOORBELL_WAIT_BLOCK, "BLOCK", IDLE_S);
  if (block >= 0)
    dbt_check(block < MAX_CPU, "BLOCK wait of %.0f s used %.2f %% CPU (< %.0f %%)", IDLE_S,
              100 * block, 100 * MAX_CPU);
  /* Adaptive spins spin_us (50 us) and then sleeps like BLOCK. */
  double adaptive = measure(ep, DOORBELL_WAIT_ADAPTIVE, "ADAPTIVE", IDLE_S);
  if (adaptive >= 0)
    dbt_check(adaptive < MAX_CPU, "ADAPTIVE wait of %.0f s used %.2f %% CPU (< %.0f %%)", IDLE_S,
              100 * adaptive, 100 * MAX_CPU);
  /* Control: a POLL wait must burn CPU, or the measurement above proves nothing. */
  double poll = measure(ep, DOORBELL_WAIT_POLL, "POLL (control)", 0.5);
  if (poll >= 0)
    dbt_check(poll > 0.10, "POLL wait (control) used %.1f %% CPU (> 10 %%: the measurement works)",
              100 * poll);
  doorbell_counters c;
  dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK, "doorbell_counters_get");
  dbt_info("receiver counters: wakeups=%lu spurious=%lu", (unsigned long)c.wakeups,
           (unsigned long)c.spurious_wakeups);
  return 0;
}

static int peer(doorbell_endpoint *ep, uint32_t me) {
  uint32_t w0 = 0;
  uint8_t hello[16];
  memset(hello, (int)me, sizeof hello);
  dbt_check_rc(dbt_send_retry(ep, 0, 0, 1, hello, sizeof hello, &w0, 1, NULL, NULL, NULL),
               DOORBELL_OK, "send the first message to the receiver");
  dbt_check_rc(dbt_drain(ep, &w0, 1, NULL, NULL, 30), DOORBELL_OK, "flush");
  dbt_barrier();
  /* Idle until the receiver is done: only the endpoint's own threads run. */
  double c0 = cpu_seconds(), t0 = dbt_now();
  dbt_barrier();
  double wall = dbt_now() - t0, cpu = cpu_seconds() - c0;
  dbt_check(cpu / wall < MAX_CPU,
            "idle peer endpoint used %.2f %% CPU over %.1f s while the receiver slept (< %.0f %%)",
            100 * cpu / wall, wall, 100 * MAX_CPU);
  return 0;
}

static int child(int idx, void *arg) {
  (void)arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, idx == 2 ? 2 : 1);
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[3];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d)", idx);
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, DBT_OTHERS) || me.rc != DOORBELL_OK) {
    dbt_barrier();
    dbt_barrier();
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  int rc = idx == 0 ? receiver(ep) : peer(ep, (uint32_t)idx);
  if (idx == 0) dbt_barrier(); /* releases the idle peers */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  return rc;
}

int main(void) {
  dbt_begin("idle_cpu");
  dbt_run_all(3, child, NULL, 120, "/dev/shm", dbt_jobkey());
  return dbt_finish();
}
