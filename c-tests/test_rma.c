/* One-sided operations through the C API (doorbell_expose_rma,
 * doorbell_rma_put/get/atomic): task 0 (node 1) exposes memory and then
 * computes without one doorbell call until task 1 (node 2, so over TCP)
 * has put a flag into it; task 1 gets, puts and runs every atomic op on
 * it, asleep in doorbell_wait(BLOCK) between completions.  Task 0's event
 * thread serves it all.  A range task 0 did not expose for writes is
 * refused, and its memory stays as it was. */
#include "dbt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define WORDS 1024
#define FLAG (WORDS - 1)

struct shared { uint64_t base, key, ro_base, ro_key; };

static void no_message(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                       size_t len) {
  (void)ctx; (void)window; (void)tag; (void)data;
  dbt_check(0, "a %zu-byte message from task %u: none was sent", len, task);
}

/* Wait (asleep) for `want` ended ops; their statuses by cookie into st[]. */
static int ended(doorbell_endpoint *ep, int want, int *st) {
  int got = 0;
  double t0 = dbt_now();
  while (got < want && dbt_now() - t0 < 30) {
    doorbell_read_result r[16];
    int n = doorbell_reads_done(ep, 0, r, 16);
    if (n < 0) return dbt_check_rc(n, DOORBELL_OK, "reads_done");
    for (int i = 0; i < n; i++) st[r[i].cookie] = r[i].status;
    got += n;
    if (got < want && n < 16) {
      doorbell_wake w = {0, 0};
      int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 5 * 1000000, no_message, NULL, &w);
      if (rc < 0) return dbt_check_rc(rc, DOORBELL_OK, "doorbell_wait");
    }
  }
  return dbt_check(got == want, "%d of %d ops ended", got, want);
}

static int target(doorbell_endpoint *ep) {
  static int64_t mem[WORDS];
  static int64_t ro[4] = {5, 6, 7, 8};
  for (int i = 0; i < WORDS; i++) mem[i] = i;
  mem[FLAG] = 0;
  struct shared s = {(uint64_t)(uintptr_t)mem, 0, (uint64_t)(uintptr_t)ro, 0};
  uint64_t unused;
  dbt_check_rc(doorbell_expose_rma(ep, mem, sizeof mem, DOORBELL_RMA_READ | DOORBELL_RMA_WRITE | DOORBELL_RMA_ATOMIC, &s.key),
               DOORBELL_OK, "expose_rma");
  dbt_check_rc(doorbell_expose_rma(ep, ro, sizeof ro, DOORBELL_RMA_READ, &s.ro_key), DOORBELL_OK, "expose_rma read-only");
  dbt_check_rc(doorbell_expose_rma(ep, mem, 8, 0, &unused), DOORBELL_ERR_INVALID_ARGUMENT,
               "expose_rma without access");
  struct shared all[2];
  size_t lens[2];
  dbt_allgather(&s, sizeof s, all, sizeof s, lens);
  /* compute: no doorbell call until the flag lands */
  double t0 = dbt_now();
  while (__atomic_load_n(&mem[FLAG], __ATOMIC_ACQUIRE) != 77 && dbt_now() - t0 < 30) {
  }
  dbt_check(mem[FLAG] == 77, "the initiator's put landed while this task computed");
  dbt_check(mem[0] == 3 + 10, "fetch-add x3 then add 10 on word 0: %lld", (long long)mem[0]);
  dbt_check(mem[1] == 99, "compare-and-swap on word 1: %lld", (long long)mem[1]);
  dbt_check(mem[2] == -4, "signed min on word 2: %lld", (long long)mem[2]);
  int32_t lo, hi;
  memcpy(&lo, &mem[3], 4);
  memcpy(&hi, (char *)&mem[3] + 4, 4);
  dbt_check(lo == 3 + 40 && hi == 0, "4-byte add on word 3's low half: %d %d", lo, hi);
  dbt_check(mem[100] == 1000 && mem[101] == 1001, "put of words 100-101");
  dbt_check(ro[0] == 5 && ro[3] == 8, "the read-only range is unchanged");
  dbt_barrier();
  dbt_check_rc(doorbell_unexpose(ep, s.key), DOORBELL_OK, "unexpose");
  return 0;
}

static int initiator(doorbell_endpoint *ep) {
  struct shared s = {0}, all[2];
  size_t lens[2];
  dbt_allgather(&s, sizeof s, all, sizeof s, lens);
  s = all[0];
  int st[16];
  for (int i = 0; i < 16; i++) st[i] = 1;
  int64_t got[8] = {0}, old[3] = {0};
  uint32_t old4 = 0;
  /* the target's words 8..15, then atomics */
  dbt_check_rc(doorbell_rma_get(ep, 0, 0, got, sizeof got, s.base + 64, s.key, 0), DOORBELL_OK, "rma_get");
  for (int i = 0; i < 3; i++)
    dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_ADD, 8, 1, 0, &old[i], s.base, s.key, 1 + i),
                 DOORBELL_OK, "fetch-add %d", i);
  ended(ep, 4, st);
  dbt_check(st[0] == 0 && st[1] == 0 && st[2] == 0 && st[3] == 0, "get and fetch-adds succeeded");
  dbt_check(got[0] == 8 && got[7] == 15, "get brought words 8..15 (%lld..%lld)", (long long)got[0], (long long)got[7]);
  dbt_check(old[0] + old[1] + old[2] == 0 + 1 + 2 && old[0] != old[1], "each fetch-add saw its own old value");
  int64_t cas_old = -1, min_old = -1, put[2] = {1000, 1001};
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_ADD, 8, 10, 0, NULL, s.base, s.key, 4), DOORBELL_OK, "add");
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_CSWAP, 8, 99, 1, &cas_old, s.base + 8, s.key, 5), DOORBELL_OK, "cswap");
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_MIN, 8, (uint64_t)-4, 0, &min_old, s.base + 16, s.key, 6), DOORBELL_OK, "min");
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_ADD, 4, 40, 0, &old4, s.base + 24, s.key, 7), DOORBELL_OK, "4-byte add");
  dbt_check_rc(doorbell_rma_put(ep, 0, 0, put, sizeof put, s.base + 800, s.key, 8), DOORBELL_OK, "put");
  dbt_check_rc(doorbell_rma_put(ep, 0, 0, put, 8, s.ro_base, s.ro_key, 9), DOORBELL_OK,
               "a put with a read-only key starts (and fails at the target)");
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, 42, 8, 1, 0, NULL, s.base, s.key, 10), DOORBELL_ERR_INVALID_ARGUMENT, "unknown op");
  dbt_check_rc(doorbell_rma_atomic(ep, 0, 0, DOORBELL_AOP_ADD, 2, 1, 0, NULL, s.base, s.key, 10), DOORBELL_ERR_INVALID_ARGUMENT, "width 2");
  ended(ep, 6, st);
  dbt_check(st[4] == 0 && st[5] == 0 && st[6] == 0 && st[7] == 0 && st[8] == 0, "atomics and put succeeded");
  dbt_check(st[9] == DOORBELL_ERR_INVALID_ARGUMENT, "the refused put ended with INVALID_ARGUMENT: %d", st[9]);
  dbt_check(cas_old == 1 && min_old == 2 && old4 == 3, "old values: cswap %lld min %lld add4 %u",
            (long long)cas_old, (long long)min_old, old4);
  int64_t flag = 77;
  dbt_check_rc(doorbell_rma_put(ep, 0, 0, &flag, 8, s.base + 8 * FLAG, s.key, 11), DOORBELL_OK, "put the flag");
  ended(ep, 1, st);
  dbt_check(st[11] == 0, "the flag's put succeeded");
  dbt_barrier();
  return 0;
}

static int child(int idx, void *arg) {
  (void)arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, (uint64_t)idx + 1);
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d)", idx);
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, DBT_OTHERS) || me.rc != DOORBELL_OK) {
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  int rc = idx == 0 ? target(ep) : initiator(ep);
  dbt_barrier(); /* nobody leaves before the other is done */
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  return rc;
}

int main(void) {
  dbt_begin("rma");
  dbt_run_all(2, child, NULL, 60, "/dev/shm", dbt_jobkey());
  return dbt_finish();
}
