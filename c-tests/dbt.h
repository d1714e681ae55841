/* dbt.h -- tiny harness shared by the doorbell C tests.
 *
 * Two halves:
 *   - checks: PASS/FAIL lines counted in an anonymous shared mapping, so the
 *     checks made by forked children add up in the parent's final
 *     "N passed, M failed" line;
 *   - processes: the parent forks n children ("tasks") and then only serves
 *     all-gather rounds over pipes (address blobs, barriers) until they exit,
 *     killing them all if a watchdog deadline passes.  The parent never
 *     creates a doorbell endpoint, so nothing is forked after one exists.
 */
#ifndef DBT_H
#define DBT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <doorbell.h>

/* ---- checks ---- */

/* Start a test program: shared counters, job key "dbt-<name>-<pid>". */
void dbt_begin(const char *name);
/* The job key of this run (same in every child). */
const char *dbt_jobkey(void);
/* Print "PASS: ..." or "FAIL: ...", count it, return ok. */
int dbt_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Check that a doorbell call returned `want`; names both codes on failure. */
int dbt_check_rc(int got, int want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An informational line (not counted). */
void dbt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "N passed, M failed"; return the process exit code (0 iff M == 0). */
int dbt_finish(void);
/* Failures counted so far (all processes). */
unsigned dbt_failures(void);

/* Monotonic seconds (CLOCK_MONOTONIC is system wide: comparable across processes). */
double dbt_now(void);

/* ---- processes ---- */

typedef int (*dbt_child_fn)(int idx, void *arg);
typedef struct dbt_job dbt_job;

/* Fork n children running fn(idx, arg); their return value is the exit code. */
dbt_job *dbt_spawn(int n, dbt_child_fn fn, void *arg);
/* Serve all-gather rounds until every child exited; after timeout_s SIGKILL
 * them all (counted as a FAIL).  Returns 0 if no watchdog fired. */
int dbt_serve(dbt_job *job, unsigned timeout_s);
/* Raw wait status of child idx (valid after dbt_serve). */
int dbt_status(const dbt_job *job, int idx);
pid_t dbt_pid(const dbt_job *job, int idx);
/* Count a check "child idx exited with status 0". */
int dbt_check_exit0(const dbt_job *job, int idx);
void dbt_free(dbt_job *job);
/* Spawn n children running fn, serve them for timeout_s, check every one
 * exited 0, and check that no file containing `needle` (NULL: any file) is
 * left in `dir`.  Returns the number of failed checks. */
int dbt_run_all(int n, dbt_child_fn fn, void *arg, unsigned timeout_s, const char *dir,
                const char *needle);

/* Child side.  Every live child contributes `len` bytes; on return
 * all[i*slot ...] holds child i's bytes and lens[i] its length, or SIZE_MAX
 * if child i has exited.  Returns 0, or -1 if the parent went away. */
int dbt_allgather(const void *mine, size_t len, void *all, size_t slot, size_t *lens);
int dbt_barrier(void);
/* This child's index and the number of children. */
int dbt_idx(void);
int dbt_ntasks(void);

/* ---- doorbell helpers ---- */

/* config_init + job key + task + node (fails the test if config_init fails). */
void dbt_config(doorbell_config *cfg, uint32_t task, uint64_t node);

/* What children exchange: the blob plus what tests want to know about a peer. */
typedef struct dbt_peer {
  int32_t rc;        /* endpoint_create / address status of that child */
  uint32_t pid;
  uint32_t task;
  uint32_t nwin;     /* windows the child opened (window numbers below) */
  uint32_t win[4];
  uint32_t len;      /* blob length */
  uint8_t blob[DOORBELL_ADDRESS_MAX];
} dbt_peer;

/* Fill *me from ep (ep may be NULL: rc says why), all-gather, and connect
 * to every child i with bit i set in connect_mask whose rc == 0.
 * peers must hold dbt_ntasks() entries; absent children get rc = INT32_MIN.
 * Counts a FAIL for each connect that fails or returns the wrong task. */
int dbt_exchange(doorbell_endpoint *ep, dbt_peer *me, dbt_peer *peers, uint64_t connect_mask);
/* connect_mask: every child but this one. */
#define DBT_OTHERS (~(1ull << dbt_idx()))

/* doorbell_send that progresses `windows` and retries on WOULD_BLOCK (for up
 * to 120 s); returns the final code; *wouldblock counts retries.  A NULL cb
 * means "no message expected": any delivery counts as a FAIL. */
int dbt_send_retry(doorbell_endpoint *ep, uint32_t task, uint32_t window, uint8_t tag,
                   const void *data, size_t len, const uint32_t *windows, int nwindows,
                   doorbell_recv_fn cb, void *ctx, uint64_t *wouldblock);
/* Flush while progressing `windows` (peers may need us to drain rings to
 * make room); returns DOORBELL_OK or the last error. */
int dbt_drain(doorbell_endpoint *ep, const uint32_t *windows, int nwindows,
              doorbell_recv_fn cb, void *ctx, double timeout_s);

/* Entries in dir whose name contains needle (all entries if needle is NULL);
 * prints each one.  -1 if dir cannot be read. */
int dbt_dir_entries(const char *dir, const char *needle);
/* mkdtemp under base ("/dev/shm" for a private shm_dir); exits on failure. */
char *dbt_tempdir(const char *base, const char *tag);
/* Remove dir and the files in it (one level). */
void dbt_rmtree(const char *dir);

/* Deterministic generators shared by senders and receivers. */
uint64_t dbt_mix(uint64_t x);                          /* splitmix64 finaliser */
void dbt_fill(uint8_t *buf, size_t len, uint64_t seed); /* xorshift stream */
/* 1 if buf equals dbt_fill(seed) over len bytes. */
int dbt_verify(const uint8_t *buf, size_t len, uint64_t seed);

/* ---- the close tests: one peer's messages and the end it reports ---- */
/* A message's bytes follow from its length and tag. */
uint64_t dbt_seed_of(size_t len, uint8_t tag);
typedef struct {
  uint32_t from;     /* the peer whose messages and events count */
  size_t sizes[4];   /* the lengths a message may have (0 ends the list) */
  int msgs;          /* right messages from `from` */
  int bad;           /* anything else delivered */
  int closed;        /* PEER_CLOSED events for `from` */
  int lost;          /* PEER_LOST events for `from` */
  int msgs_at_end;   /* messages delivered when the first of those came */
  int other;         /* any other error code */
} dbt_tally;
/* A doorbell_recv_fn whose ctx is a dbt_tally. */
void dbt_tally_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len);
/* A doorbell_recv_fn that drops what comes (ctx unused). */
void dbt_ignore_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                    size_t len);
/* Send one seeded message on window 0, delivering to cb while waiting for room. */
int dbt_send_seeded(doorbell_endpoint *ep, uint32_t to, size_t len, uint8_t tag,
                    doorbell_recv_fn cb, void *ctx);
/* Wait (block mode, window 0) until `want` messages came, or the first
 * close or loss of t->from once `until_event`, or `seconds` passed. */
void dbt_collect(doorbell_endpoint *ep, dbt_tally *t, int want, int until_event, double seconds);
/* Block until process `pid` exited (a zombie counts; checked within
 * timeout_ms), then give the endpoint's epoll thread, which watches the same
 * pidfd, time to act on it. */
void dbt_wait_exited(uint32_t pid, int timeout_ms);

#endif /* DBT_H */
