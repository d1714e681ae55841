/* dbt.c -- see dbt.h. */
#include "dbt.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- checks */

struct dbt_shared {
  unsigned passed;
  unsigned failed;
};

static struct dbt_shared *g_sh;
static char g_name[48];
static char g_job[64];
static char g_who[24] = "main";

/* Child state (set after fork). */
static int g_idx = -1;
static int g_ntasks;
static int g_up = -1;   /* child -> parent */
static int g_down = -1; /* parent -> child */

/* One write() per line so lines of concurrent processes do not interleave. */
static void emit(const char *kind, const char *fmt, va_list ap) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%s %s/%s: ", kind, g_name, g_who);
  if (n < 0) n = 0;
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len = strlen(line);
  line[len++] = '\n';
  ssize_t off = 0;
  while ((size_t)off < len) {
    ssize_t w = write(1, line + off, len - (size_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += w;
  }
}

void dbt_begin(const char *name) {
  snprintf(g_name, sizeof g_name, "%s", name);
  /* Pid in the key: concurrent runs of the same test must not collide. */
  snprintf(g_job, sizeof g_job, "dbt-%s-%ld", name, (long)getpid());
  g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  signal(SIGPIPE, SIG_IGN);
  dbt_info("job key %s", g_job);
}

const char *dbt_jobkey(void) { return g_job; }

int dbt_check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(ok ? "PASS:" : "FAIL:", fmt, ap);
  va_end(ap);
  __atomic_fetch_add(ok ? &g_sh->passed : &g_sh->failed, 1, __ATOMIC_SEQ_CST);
  return ok;
}

static const char *code_name(int code) {
  static const char *names[] = {
      "DOORBELL_OK",
      "DOORBELL_ERR_INVALID_ARGUMENT",
      "DOORBELL_ERR_UNKNOWN_WINDOW",
      "DOORBELL_ERR_UNKNOWN_TASK",
      "DOORBELL_ERR_BAD_LENGTH",
      "DOORBELL_ERR_BAD_ADDRESS",
      "DOORBELL_ERR_WOULD_BLOCK",
      "DOORBELL_ERR_TIMED_OUT",
      "DOORBELL_ERR_PEER_LOST",
      "DOORBELL_ERR_NO_SHM_SPACE",
      "DOORBELL_ERR_SHM",
      "DOORBELL_ERR_NETWORK",
      "DOORBELL_ERR_NO_INTERFACE",
      "DOORBELL_ERR_BUFFER_TOO_SMALL",
      "DOORBELL_ERR_INTERNAL",
      "DOORBELL_ERR_SHM_REFUSED",
      "DOORBELL_ERR_IN_USE",
      "DOORBELL_ERR_FLIH_FAILED",
  };
  if (code > 0) return "positive count";
  if (-code < (int)(sizeof names / sizeof names[0])) return names[-code];
  return "unknown code";
}

int dbt_check_rc(int got, int want, const char *fmt, ...) {
  char what[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (got == want)
    return dbt_check(1, "%s -> %s", what, code_name(got));
  return dbt_check(0, "%s -> got %d %s (\"%s\"), want %s", what, got, code_name(got),
                   doorbell_error_string(got), code_name(want));
}

void dbt_info(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("INFO:", fmt, ap);
  va_end(ap);
}

unsigned dbt_failures(void) { return __atomic_load_n(&g_sh->failed, __ATOMIC_SEQ_CST); }

int dbt_finish(void) {
  unsigned p = __atomic_load_n(&g_sh->passed, __ATOMIC_SEQ_CST);
  unsigned f = __atomic_load_n(&g_sh->failed, __ATOMIC_SEQ_CST);
  printf("%u passed, %u failed\n", p, f);
  fflush(stdout);
  return f == 0 && p > 0 ? 0 : 1;
}

double dbt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- processes */

#define FRAME_MAX (1u << 20)
#define ABSENT UINT32_MAX

struct dbt_job {
  int n;
  pid_t *pid;
  int *up;     /* parent's read end */
  int *down;   /* parent's write end */
  int *status;
  int *eof;
  int *reaped;
  int *have;   /* a frame is waiting for the round to complete */
  uint8_t **frame;
  uint32_t *flen;
};

static int read_full(int fd, void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t r = read(fd, (uint8_t *)buf + off, len - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    off += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, (const uint8_t *)buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  return 0;
}

dbt_job *dbt_spawn(int n, dbt_child_fn fn, void *arg) {
  dbt_job *j = calloc(1, sizeof *j);
  j->n = n;
  j->pid = calloc((size_t)n, sizeof *j->pid);
  j->up = calloc((size_t)n, sizeof *j->up);
  j->down = calloc((size_t)n, sizeof *j->down);
  j->status = calloc((size_t)n, sizeof *j->status);
  j->eof = calloc((size_t)n, sizeof *j->eof);
  j->reaped = calloc((size_t)n, sizeof *j->reaped);
  j->have = calloc((size_t)n, sizeof *j->have);
  j->frame = calloc((size_t)n, sizeof *j->frame);
  j->flen = calloc((size_t)n, sizeof *j->flen);
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    int up[2], down[2];
    if (pipe(up) || pipe(down)) {
      perror("pipe");
      exit(2);
    }
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      exit(2);
    }
    if (p == 0) {
      /* Die with the parent: the watchdog lives there. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      for (int k = 0; k < i; k++) {
        close(j->up[k]);
        close(j->down[k]);
      }
      close(up[0]);
      close(down[1]);
      g_up = up[1];
      g_down = down[0];
      g_idx = i;
      g_ntasks = n;
      snprintf(g_who, sizeof g_who, "t%d", i);
      int rc = fn(i, arg);
      fflush(stdout);
      _exit(rc < 0 || rc > 100 ? 100 : rc);
    }
    close(up[1]);
    close(down[0]);
    j->pid[i] = p;
    j->up[i] = up[0];
    j->down[i] = down[1];
  }
  return j;
}

/* Broadcast the round once every child still connected has posted a frame. */
static void maybe_broadcast(dbt_job *j) {
  int any = 0;
  for (int i = 0; i < j->n; i++) {
    if (!j->eof[i] && !j->have[i]) return;
    any |= j->have[i];
  }
  if (!any) return;
  size_t total = 4;
  for (int i = 0; i < j->n; i++) total += 4 + (j->have[i] ? j->flen[i] : 0);
  uint8_t *msg = malloc(total), *p = msg;
  uint32_t n = (uint32_t)j->n;
  memcpy(p, &n, 4);
  p += 4;
  for (int i = 0; i < j->n; i++) {
    uint32_t l = j->have[i] ? j->flen[i] : ABSENT;
    memcpy(p, &l, 4);
    p += 4;
    if (j->have[i]) {
      memcpy(p, j->frame[i], j->flen[i]);
      p += j->flen[i];
    }
  }
  for (int i = 0; i < j->n; i++)
    if (!j->eof[i]) (void)write_full(j->down[i], msg, total); /* a dying child is fine */
  free(msg);
  for (int i = 0; i < j->n; i++) {
    j->have[i] = 0;
    free(j->frame[i]);
    j->frame[i] = NULL;
  }
}

int dbt_serve(dbt_job *j, unsigned timeout_s) {
  double deadline = dbt_now() + timeout_s;
  struct pollfd *pf = calloc((size_t)j->n, sizeof *pf);
  int *map = calloc((size_t)j->n, sizeof *map);
  int fired = 0;
  for (;;) {
    int live = 0;
    for (int i = 0; i < j->n; i++) {
      if (!j->reaped[i]) {
        int st;
        pid_t r = waitpid(j->pid[i], &st, WNOHANG);
        if (r == j->pid[i]) {
          j->reaped[i] = 1;
          j->status[i] = st;
        }
      }
      if (!j->reaped[i] || !j->eof[i]) live++;
    }
    if (!live) break;
    if (dbt_now() > deadline) {
      fired = 1;
      dbt_check(0, "watchdog: children still running after %u s, killing them", timeout_s);
      for (int i = 0; i < j->n; i++)
        if (!j->reaped[i]) kill(j->pid[i], SIGKILL);
      for (int i = 0; i < j->n; i++)
        if (!j->reaped[i]) {
          waitpid(j->pid[i], &j->status[i], 0);
          j->reaped[i] = 1;
        }
      break;
    }
    int k = 0;
    for (int i = 0; i < j->n; i++)
      if (!j->eof[i]) {
        pf[k].fd = j->up[i];
        pf[k].events = POLLIN;
        pf[k].revents = 0;
        map[k++] = i;
      }
    if (k == 0) {
      usleep(10000); /* only reaping left */
      continue;
    }
    int r = poll(pf, (nfds_t)k, 50);
    if (r < 0 && errno != EINTR) {
      perror("poll");
      exit(2);
    }
    for (int q = 0; r > 0 && q < k; q++) {
      if (!pf[q].revents) continue;
      int i = map[q];
      uint32_t len;
      if (read_full(j->up[i], &len, 4) != 0 || len > FRAME_MAX) {
        j->eof[i] = 1;
        close(j->up[i]);
        close(j->down[i]);
        continue;
      }
      uint8_t *buf = malloc(len ? len : 1);
      if (read_full(j->up[i], buf, len) != 0) {
        free(buf);
        j->eof[i] = 1;
        close(j->up[i]);
        close(j->down[i]);
        continue;
      }
      free(j->frame[i]);
      j->frame[i] = buf;
      j->flen[i] = len;
      j->have[i] = 1;
    }
    maybe_broadcast(j);
  }
  for (int i = 0; i < j->n; i++)
    if (!j->eof[i]) {
      close(j->up[i]);
      close(j->down[i]);
      j->eof[i] = 1;
    }
  free(pf);
  free(map);
  return fired ? -1 : 0;
}

int dbt_status(const dbt_job *j, int idx) { return j->status[idx]; }
pid_t dbt_pid(const dbt_job *j, int idx) { return j->pid[idx]; }

int dbt_check_exit0(const dbt_job *j, int idx) {
  int st = j->status[idx];
  if (WIFEXITED(st))
    return dbt_check(WEXITSTATUS(st) == 0, "task %d exited with status %d", idx, WEXITSTATUS(st));
  return dbt_check(0, "task %d killed by signal %d (%s)", idx, WTERMSIG(st), strsignal(WTERMSIG(st)));
}

void dbt_free(dbt_job *j) {
  for (int i = 0; i < j->n; i++) free(j->frame[i]);
  free(j->pid);
  free(j->up);
  free(j->down);
  free(j->status);
  free(j->eof);
  free(j->reaped);
  free(j->have);
  free(j->frame);
  free(j->flen);
  free(j);
}

int dbt_allgather(const void *mine, size_t len, void *all, size_t slot, size_t *lens) {
  uint32_t l = (uint32_t)len;
  if (len > FRAME_MAX || write_full(g_up, &l, 4) || write_full(g_up, mine, len)) return -1;
  uint32_t n;
  if (read_full(g_down, &n, 4)) return -1;
  for (uint32_t i = 0; i < n; i++) {
    if (read_full(g_down, &l, 4)) return -1;
    if (l == ABSENT) {
      if (lens) lens[i] = SIZE_MAX;
      continue;
    }
    if (l > slot) {
      fprintf(stderr, "dbt_allgather: frame %u bytes > slot %zu\n", l, slot);
      return -1;
    }
    if (read_full(g_down, (uint8_t *)all + i * slot, l)) return -1;
    if (lens) lens[i] = l;
  }
  return 0;
}

int dbt_barrier(void) {
  uint8_t dummy[64 * 4];
  size_t lens[64];
  return dbt_allgather(NULL, 0, dummy, 4, lens);
}

int dbt_idx(void) { return g_idx; }
int dbt_ntasks(void) { return g_ntasks; }

/* ------------------------------------------------------ doorbell helpers */

void dbt_config(doorbell_config *cfg, uint32_t task, uint64_t node) {
  int rc = doorbell_config_init(cfg);
  if (rc != DOORBELL_OK) dbt_check_rc(rc, DOORBELL_OK, "doorbell_config_init");
  cfg->job = dbt_jobkey();
  cfg->task = task;
  cfg->node_id = node;
}

int dbt_exchange(doorbell_endpoint *ep, dbt_peer *me, dbt_peer *peers, uint64_t connect_mask) {
  int n = dbt_ntasks();
  me->pid = (uint32_t)getpid();
  if (ep) {
    size_t len = sizeof me->blob;
    me->rc = doorbell_address(ep, me->blob, &len);
    me->len = (uint32_t)len;
    if (me->rc != DOORBELL_OK) dbt_check_rc(me->rc, DOORBELL_OK, "doorbell_address");
  }
  size_t lens[64];
  if (n > 64 || dbt_allgather(me, sizeof *me, peers, sizeof *peers, lens)) {
    dbt_check(0, "address exchange with the parent failed");
    return -1;
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (lens[i] != sizeof *peers) {
      peers[i].rc = INT32_MIN;
      continue;
    }
    if (!ep || peers[i].rc != DOORBELL_OK || !(connect_mask >> i & 1)) continue;
    uint32_t task = UINT32_MAX;
    int rc = doorbell_connect(ep, peers[i].blob, peers[i].len, &task);
    if (rc != DOORBELL_OK || task != peers[i].task) {
      dbt_check(0, "doorbell_connect to task %u -> %d (%s), task_out %u", peers[i].task, rc,
                code_name(rc), task);
      bad++;
    }
  }
  return bad ? -1 : 0;
}

/* Stands in for a NULL callback: a task that expects nothing fails if it gets something. */
static void unexpected_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag,
                           const uint8_t *data, size_t len) {
  (void)ctx;
  (void)data;
  dbt_check(0, "unexpected message from task %u window %u tag %u (%zu bytes)", task, window, tag,
            len);
}

int dbt_send_retry(doorbell_endpoint *ep, uint32_t task, uint32_t window, uint8_t tag,
                   const void *data, size_t len, const uint32_t *windows, int nwindows,
                   doorbell_recv_fn cb, void *ctx, uint64_t *wouldblock) {
  double deadline = 0;
  if (!cb) cb = unexpected_msg;
  for (;;) {
    int rc = doorbell_send(ep, task, window, tag, data, len);
    if (rc != DOORBELL_ERR_WOULD_BLOCK) return rc;
    if (wouldblock) (*wouldblock)++;
    if (deadline == 0) deadline = dbt_now() + 120;
    else if (dbt_now() > deadline) return rc;
    int got = 0;
    for (int w = 0; w < nwindows; w++) {
      doorbell_wake wake;
      int p = doorbell_progress(ep, windows[w], cb, ctx, &wake);
      if (p < 0) return p;
      got += p;
    }
    if (!got) sched_yield(); /* 2 cores, 4 processes: let the receiver drain */
  }
}

int dbt_drain(doorbell_endpoint *ep, const uint32_t *windows, int nwindows,
              doorbell_recv_fn cb, void *ctx, double timeout_s) {
  double deadline = dbt_now() + timeout_s;
  if (!cb) cb = unexpected_msg;
  for (;;) {
    int rc = doorbell_flush(ep, 2000);
    if (rc != DOORBELL_ERR_TIMED_OUT) return rc;
    for (int w = 0; w < nwindows; w++) {
      doorbell_wake wake;
      int p = doorbell_progress(ep, windows[w], cb, ctx, &wake);
      if (p < 0) return p;
    }
    if (dbt_now() > deadline) return rc;
  }
}

int dbt_dir_entries(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (needle && !strstr(e->d_name, needle)) continue;
    dbt_info("  entry in %s: %s", dir, e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

char *dbt_tempdir(const char *base, const char *tag) {
  char *p = malloc(PATH_MAX);
  snprintf(p, PATH_MAX, "%s/dbt-%s-XXXXXX", base, tag);
  if (!mkdtemp(p)) {
    dbt_check(0, "mkdtemp %s: %s", p, strerror(errno));
    exit(dbt_finish());
  }
  return p;
}

void dbt_rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[PATH_MAX];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ------------------------------------------------------------ generators */

uint64_t dbt_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint64_t xs_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

void dbt_fill(uint8_t *buf, size_t len, uint64_t seed) {
  uint64_t s = dbt_mix(seed) | 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = xs_next(&s);
    memcpy(buf + i, &w, 8);
  }
  if (i < len) {
    uint64_t w = xs_next(&s);
    memcpy(buf + i, &w, len - i);
  }
}

int dbt_verify(const uint8_t *buf, size_t len, uint64_t seed) {
  uint64_t s = dbt_mix(seed) | 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = xs_next(&s), g;
    memcpy(&g, buf + i, 8);
    if (g != w) return 0;
  }
  if (i < len) {
    uint64_t w = xs_next(&s);
    if (memcmp(buf + i, &w, len - i)) return 0;
  }
  return 1;
}

int dbt_run_all(int n, dbt_child_fn fn, void *arg, unsigned timeout_s, const char *dir,
                const char *needle) {
  unsigned before = dbt_failures();
  dbt_job *job = dbt_spawn(n, fn, arg);
  dbt_serve(job, timeout_s);
  for (int i = 0; i < n; i++) dbt_check_exit0(job, i);
  dbt_free(job);
  int left = dbt_dir_entries(dir, needle);
  dbt_check(left == 0, "no file%s%s left in %s after every endpoint was destroyed (%d found)",
            needle ? " named after job " : "", needle ? needle : "", dir, left);
  return (int)(dbt_failures() - before);
}

/* ---- the close tests ---- */

uint64_t dbt_seed_of(size_t len, uint8_t tag) { return len * 7 + tag; }

void dbt_tally_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  (void)window;
  dbt_tally *t = ctx;
  int size_ok = 0;
  for (int i = 0; i < 4 && t->sizes[i]; i++) size_ok |= len == t->sizes[i];
  if (task == t->from && size_ok && dbt_verify(data, len, dbt_seed_of(len, tag))) t->msgs++;
  else t->bad++;
}

void dbt_ignore_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                    size_t len) {
  (void)ctx, (void)task, (void)window, (void)tag, (void)data, (void)len;
}

int dbt_send_seeded(doorbell_endpoint *ep, uint32_t to, size_t len, uint8_t tag,
                    doorbell_recv_fn cb, void *ctx) {
  uint8_t *buf = malloc(len);
  dbt_fill(buf, len, dbt_seed_of(len, tag));
  uint32_t w0 = 0;
  int rc = dbt_send_retry(ep, to, 0, tag, buf, len, &w0, 1, cb, ctx, NULL);
  free(buf);
  return dbt_check_rc(rc, DOORBELL_OK, "send %zu B to task %u", len, to);
}

void dbt_collect(doorbell_endpoint *ep, dbt_tally *t, int want, int until_event, double seconds) {
  double end = dbt_now() + seconds;
  while (dbt_now() < end) {
    if (!until_event && t->msgs >= want) return;
    doorbell_wake wake = {0, UINT32_MAX};
    int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 200000, dbt_tally_msg, t, &wake);
    int event = 0;
    if (rc == DOORBELL_ERR_PEER_LOST && wake.task == t->from) t->lost++, event = 1;
    else if (rc < 0) t->other = rc;
    else if (wake.reason == DOORBELL_WOKE_PEER_CLOSED && wake.task == t->from) t->closed++, event = 1;
    if (event && t->closed + t->lost == 1) t->msgs_at_end = t->msgs;
    if (event && until_event) return;
  }
}

void dbt_wait_exited(uint32_t pid, int timeout_ms) {
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd >= 0) {
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout_ms);
    dbt_check(n == 1, "process %u exited", pid);
    close(fd);
  }
  usleep(50000);
}
