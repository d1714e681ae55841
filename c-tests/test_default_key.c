/* Two independent programs that both use the C API's default job key
 * ("doorbell") on one node at the same time.
 *
 * Program A (child 0) creates tasks 0 and 1 and keeps them.  Program B
 * (child 1) then creates its own tasks 0 and 1 with the same default key.
 * Each program's task 1 sends five messages to its task 0; A sends first and
 * B's task 0 receives before B sends.  No program may ever receive the
 * other's messages, and each must get all of its own: every endpoint names
 * its files after a random token of its own, so B's creation succeeds and
 * B is a job of its own.
 *
 * Both programs share one private shm directory, so the test touches no
 * other job. */
#include "dbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSGS 5

struct tally {
  int prog;
  int own;
  int foreign;
};

static void count(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                  size_t len) {
  (void)task, (void)window, (void)data, (void)len;
  struct tally *t = ctx;
  if (tag == t->prog) t->own++;
  else t->foreign++;
}

static int create(const char *dir, uint32_t task, doorbell_endpoint **ep) {
  doorbell_config cfg;
  int rc = doorbell_config_init(&cfg);
  if (rc != DOORBELL_OK) return rc;
  /* cfg.job is left at its default. */
  cfg.task = task;
  cfg.node_id = 1;
  cfg.shm_dir = dir;
  cfg.if_include = "127.0.0.1/8";
  *ep = NULL;
  return doorbell_endpoint_create(&cfg, ep);
}

static void poll_for(doorbell_endpoint *ep, struct tally *t, double seconds) {
  doorbell_wake wake;
  double t0 = dbt_now();
  while (dbt_now() - t0 < seconds) doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 100000, count, t, &wake);
}

static int program(int idx, void *arg) {
  const char *dir = arg;
  const char *me = idx == 0 ? "A" : "B";
  doorbell_endpoint *t0 = NULL, *t1 = NULL;
  int rc0 = 0, rc1 = 0;
  if (idx == 0) {
    rc0 = create(dir, 0, &t0);
    rc1 = create(dir, 1, &t1);
    dbt_check_rc(rc0, DOORBELL_OK, "A: create task 0 with the default job key");
    dbt_check_rc(rc1, DOORBELL_OK, "A: create task 1 with the default job key");
  }
  dbt_barrier(); /* A's endpoints exist */
  if (idx == 1) {
    rc0 = create(dir, 0, &t0);
    rc1 = create(dir, 1, &t1);
    dbt_info("B: create task 0 -> %d (%s), task 1 -> %d (%s)", rc0, doorbell_error_string(rc0), rc1,
             doorbell_error_string(rc1));
    dbt_check_rc(rc0, DOORBELL_OK, "B: create task 0 with the default job key beside A's");
    dbt_check_rc(rc1, DOORBELL_OK, "B: create task 1 with the default job key beside A's");
  }
  int both = t0 && t1;
  if (both) {
    uint8_t blob[DOORBELL_ADDRESS_MAX];
    size_t len = sizeof blob;
    uint32_t task;
    doorbell_address(t0, blob, &len);
    dbt_check_rc(doorbell_connect(t1, blob, len, &task), DOORBELL_OK, "%s: task 1 connects to its task 0", me);
    len = sizeof blob;
    doorbell_address(t1, blob, &len);
    dbt_check_rc(doorbell_connect(t0, blob, len, &task), DOORBELL_OK, "%s: task 0 connects to its task 1", me);
  }
  dbt_barrier();
  struct tally t = {idx, 0, 0};
  if (idx == 0 && both) {
    for (int i = 0; i < MSGS; i++)
      dbt_check_rc(doorbell_send(t1, 0, 0, (uint8_t)idx, me, 1), DOORBELL_OK, "A: send %d", i);
  }
  dbt_barrier(); /* A's messages are out */
  if (idx == 1 && both) {
    poll_for(t0, &t, 0.5);
    for (int i = 0; i < MSGS; i++)
      dbt_check_rc(doorbell_send(t1, 0, 0, (uint8_t)idx, me, 1), DOORBELL_OK, "B: send %d", i);
  }
  dbt_barrier(); /* B's messages are out */
  if (both) poll_for(t0, &t, 1.0);
  dbt_check(t.foreign == 0, "%s: received none of the other program's messages (%d)", me, t.foreign);
  if (both) dbt_check(t.own == MSGS, "%s: received all %d of its own (%d)", me, MSGS, t.own);
  dbt_check(both, "%s kept both endpoints", me);
  dbt_barrier();
  doorbell_endpoint_destroy(t1);
  doorbell_endpoint_destroy(t0);
  return 0;
}

int main(void) {
  dbt_begin("default_key");
  char *dir = dbt_tempdir("/dev/shm", "defkey");
  dbt_run_all(2, program, dir, 60, dir, NULL);
  dbt_rmtree(dir);
  free(dir);
  return dbt_finish();
}
