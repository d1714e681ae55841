/* doorbell_bench.c -- core benchmark of the doorbell transport.
 *
 * Measures one-way latency (ping-pong round trip / 2) and streaming bandwidth
 * of the doorbell core between two forked processes, for shared memory
 * (poll / block / adaptive) and TCP over loopback (poll / block), next to this
 * machine's floors: a bare cross-process futex ping-pong, a bare cache-line
 * ping-pong, memcpy bandwidth and a bare loopback TCP ping-pong.  Every figure
 * is the median of several repetitions; the floors are measured before and
 * after the doorbell runs and the better pass is the floor (host noise drifts).
 * The receiver copies every message out of the callback, as an MPI receive
 * would, and the two processes of a pair are pinned to two CPUs.
 *
 * Usage: doorbell_bench [all|floors|core] [configuration, e.g. "shm block"]
 * Env:   QUICK=1   smoke run (fewer, shorter repetitions)
 *        STRICT=1  a missed target counts as a failure (exit status 1)
 *        PIN=0     leave CPU placement to the scheduler
 *
 * Not a test, but it still fails loudly: every message is checked (length,
 * sequence number at both ends, order), a hang is bounded by timeouts, and the
 * last line is "N passed, M failed" (one item per floor and per doorbell
 * configuration).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "doorbell.h"

/* ------------------------------------------------------------------ sizes */

#define NLAT 4
#define NBW 3
static const size_t lat_sizes[NLAT] = {8, 1024, 64 * 1024, 1024 * 1024};
static const size_t bw_sizes[NBW] = {64 * 1024, 1024 * 1024, 4 * 1024 * 1024};
#define MAX_MSG (4u * 1024 * 1024)
#define MAX_REPS 31

/* Run-length knobs, set from QUICK in main(). */
static int g_reps = 9;              /* repetitions per figure (median taken) */
static double g_rep_s = 0.040;      /* target duration of one repetition */
static double g_warm_s = 0.010;     /* warm-up/calibration duration */

/* Bounded waits: nothing here may hang the caller. */
#define CHILD_ALARM_S 50            /* a forked child kills itself after this */
#define CONFIG_DEADLINE_S 45        /* the parent reaps a config's children by then */
#define WAIT_TIMEOUT_US 5000000     /* one doorbell_wait (5 s: a step takes < 10 ms) */

/* ---------------------------------------------------------------- helpers */

/* CPU placement.  The two processes of every pair (floors and doorbell alike)
 * are pinned to two distinct CPUs, as mpirun binds ranks to cores: unpinned,
 * the scheduler sometimes puts both on one CPU, and a futex or socket wake-up
 * then costs a context switch instead of a cross-CPU wake-up (on a VM, ~3 us
 * vs ~30 us), so figures and floors would come from different draws.
 * PIN=0 leaves placement to the scheduler. */
static cpu_set_t g_cpus;  /* the CPUs we may use, from startup */
static int g_pin = 1;

static int nth_cpu(int slot) {
  int n = CPU_COUNT(&g_cpus), k = 0;
  if (n == 0) return -1;
  slot %= n;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &g_cpus) && k++ == slot) return c;
  return -1;
}

/* Pin the calling process (all its future threads too) to the slot-th CPU;
 * slot < 0 restores the startup set. */
static void pin_slot(int slot) {
  if (!g_pin || CPU_COUNT(&g_cpus) < 2) return;
  cpu_set_t set;
  int c = slot < 0 ? -1 : nth_cpu(slot);
  if (c < 0) {
    set = g_cpus;
  } else {
    CPU_ZERO(&set);
    CPU_SET(c, &set);
  }
  sched_setaffinity(0, sizeof set, &set);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Iterations per repetition from a calibration (seconds for `n` iterations). */
static long iters_for(double secs, long n, long lo, long hi) {
  double per = secs / (double)n;
  long it = per > 0 ? (long)(g_rep_s / per) : hi;
  if (it < lo) it = lo;
  if (it > hi) it = hi;
  return it;
}

static void *shared_map(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(p, 0, len);
  return p;
}

static void *touched_alloc(size_t len, int byte) {
  void *p = malloc(len);
  if (!p) {
    perror("malloc");
    exit(1);
  }
  memset(p, byte, len); /* fault the pages in before timing */
  return p;
}

/* Wait for a child with a deadline; kill it (by pid) if it overstays.
 * Returns 0 if it exited with status 0. */
static int reap(pid_t pid, double deadline) {
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return (WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : -1;
    if (r < 0 && errno != EINTR) return -1;
    if (now_s() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(1000);
  }
}

static int g_passed, g_failed;
static void result_line(int ok, const char *fmt, ...) {
  va_list ap;
  printf("%s: ", ok ? "PASS" : "FAIL");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  if (ok) g_passed++; else g_failed++;
}

/* ================================================================ floors */

static long futex_op(_Atomic uint32_t *addr, int op, uint32_t val) {
  /* Plain FUTEX_WAIT/FUTEX_WAKE, not the _PRIVATE variants: the word lives
   * in a MAP_SHARED page seen by two processes.  The 1 s timeout only lets a
   * waiter notice a dead peer. */
  struct timespec ts = {1, 0};
  return syscall(SYS_futex, (uint32_t *)addr, op, val, op == FUTEX_WAIT ? &ts : NULL, NULL, 0);
}

/* In every forked child: die with the parent, and never outlive the run. */
static void child_setup(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  alarm(CHILD_ALARM_S);
}

/* The futex floor's wake-up protocol.  Each side sleeps on its own bell word,
 * whose value never changes, so a FUTEX_WAIT on it always goes to sleep; the
 * message itself is the sequence word.  The waker publishes the sequence
 * number, then calls FUTEX_WAKE on the peer's bell until it reports a woken
 * sleeper (FUTEX_WAKE returns the number woken): the peer is then known to
 * have slept in the kernel and been woken, every hop, with no idle gap.
 * A plain "check the word, FUTEX_WAIT on it" ping-pong run back to back can
 * fall into a lockstep where every FUTEX_WAIT returns EAGAIN at once (the word
 * already changed) and the "floor" is ~0.2 us of syscalls with no wake-up at
 * all; here that cannot happen, and the counts below show it: every wait
 * slept, none returned EAGAIN.  The price: when the peer is still on its way
 * into FUTEX_WAIT (on this VM, often still returning from its own FUTEX_WAKE
 * call), the waker retries until it is asleep -- a hop cannot include a real
 * sleep any sooner.  The retries are counted and printed (1-19 per hop here). */
struct futex_stats {
  unsigned long waits;        /* FUTEX_WAIT calls */
  unsigned long slept;        /* ... that slept and were woken (returned 0) */
  unsigned long eagain;       /* ... that returned at once (EAGAIN: word changed) */
  unsigned long spurious;     /* woken (0) but no new message */
  unsigned long wakes;        /* FUTEX_WAKE calls */
  unsigned long wake_misses;  /* ... that found nobody asleep yet (retried) */
};

static void futex_stats_add(struct futex_stats *a, const struct futex_stats *b) {
  a->waits += b->waits;
  a->slept += b->slept;
  a->eagain += b->eagain;
  a->spurious += b->spurious;
  a->wakes += b->wakes;
  a->wake_misses += b->wake_misses;
}

/* Has a peer been silent for 10 s?  Checked rarely, off the fast path. */
static int floor_stuck(unsigned long *spins, double *since) {
  if ((++*spins & 0xfffff) != 0) return 0;
  if (*since == 0) *since = now_s();
  return now_s() - *since > 10;
}

/* Sleep on `bell` until `seq` differs from `old`; returns its new value, or
 * 0 if nothing came for 10 s. */
static uint32_t futex_await(_Atomic uint32_t *bell, _Atomic uint32_t *seq, uint32_t old, struct futex_stats *st) {
  int timeouts = 0;
  for (;;) {
    long r = futex_op(bell, FUTEX_WAIT, 0);
    int e = r < 0 ? errno : 0;
    st->waits++;
    if (r == 0) st->slept++;
    else if (e == EAGAIN) st->eagain++;
    else if (e == ETIMEDOUT && ++timeouts >= 10) return 0;
    uint32_t v = atomic_load_explicit(seq, memory_order_acquire);
    if (v != old) return v;
    if (r == 0) st->spurious++;
  }
}

/* Publish `val` in `seq`, then wake the sleeper on `bell`; -1 if nobody
 * went to sleep there for 10 s. */
static int futex_ring(_Atomic uint32_t *bell, _Atomic uint32_t *seq, uint32_t val, struct futex_stats *st) {
  unsigned long spins = 0;
  double since = 0;
  atomic_store_explicit(&*seq, val, memory_order_release);
  for (;;) {
    long r = futex_op(bell, FUTEX_WAKE, 1);
    st->wakes++;
    if (r >= 1) return 0;
    st->wake_misses++;
    if (floor_stuck(&spins, &since)) return -1;
  }
}

/* One shared page for the spinning and the futex floors.  `seq` is odd when
 * the parent has pinged, even when the child has answered; bell[0] is the
 * parent's futex word, bell[1] the child's (futex floor only). */
struct floor_page {
  _Alignas(64) _Atomic uint32_t seq;
  _Alignas(64) _Atomic uint32_t stop;
  _Alignas(64) _Atomic uint32_t bell[2];
  struct futex_stats st[2];
};

enum floor_kind { FLOOR_SPIN, FLOOR_FUTEX };

static void floor_child(struct floor_page *pg, enum floor_kind kind) {
  uint32_t last = 0;
  for (;;) {
    uint32_t v;
    if (kind == FLOOR_FUTEX) {
      if ((v = futex_await(&pg->bell[1], &pg->seq, last, &pg->st[1])) == 0) _exit(1);
    } else {
      while (((v = atomic_load_explicit(&pg->seq, memory_order_acquire)) & 1u) == 0 || v == last) {
      }
    }
    if (atomic_load_explicit(&pg->stop, memory_order_relaxed)) _exit(0);
    last = v + 1;
    if (kind == FLOOR_FUTEX) {
      if (futex_ring(&pg->bell[0], &pg->seq, last, &pg->st[1])) _exit(1);
    } else {
      atomic_store_explicit(&pg->seq, last, memory_order_release);
    }
  }
}

/* n ping-pongs back to back; returns seconds, <0 if the child stopped
 * answering.  Futex kind: both sides sleep in FUTEX_WAIT every hop (see
 * futex_ring), as doorbell's block mode does at best. */
static double floor_pingpong(struct floor_page *pg, enum floor_kind kind, long n, uint32_t *seq) {
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    uint32_t ping = *seq + 1, pong = *seq + 2;
    if (kind == FLOOR_FUTEX) {
      if (futex_ring(&pg->bell[1], &pg->seq, ping, &pg->st[0]) ||
          futex_await(&pg->bell[0], &pg->seq, ping, &pg->st[0]) != pong)
        return -1;
    } else {
      unsigned long spins = 0;
      double since = 0;
      atomic_store_explicit(&pg->seq, ping, memory_order_release);
      while (atomic_load_explicit(&pg->seq, memory_order_acquire) != pong)
        if (floor_stuck(&spins, &since)) return -1;
    }
    *seq = pong;
  }
  return now_s() - t0;
}

/* Median one-way latency in microseconds, or -1 on failure. */
static double floor_shared(enum floor_kind kind, struct futex_stats *st) {
  struct floor_page *pg = shared_map(sizeof *pg);
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    child_setup(parent);
    pin_slot(1);
    floor_child(pg, kind);
  }
  pin_slot(0);
  uint32_t seq = 0;
  long n = 1;
  double t, v[MAX_REPS];
  int ok = 1;
  while ((t = floor_pingpong(pg, kind, n, &seq)) >= 0 && t < g_warm_s && n < (1L << 24)) n *= 2;
  if (t < 0) ok = 0;
  long it = ok ? iters_for(t, n, 50, 1L << 24) : 0;
  for (int r = 0; ok && r < g_reps; r++) {
    if ((t = floor_pingpong(pg, kind, it, &seq)) < 0) ok = 0;
    v[r] = t / (double)it / 2 * 1e6;
  }
  atomic_store_explicit(&pg->stop, 1, memory_order_relaxed);
  if (kind == FLOOR_FUTEX) {
    if (ok) futex_ring(&pg->bell[1], &pg->seq, seq + 1, &pg->st[0]);
  } else {
    atomic_store_explicit(&pg->seq, seq + 1, memory_order_release);
  }
  pin_slot(-1);
  if (reap(pid, now_s() + 10)) ok = 0;
  if (st) {
    memset(st, 0, sizeof *st);
    futex_stats_add(st, &pg->st[0]);
    futex_stats_add(st, &pg->st[1]);
  }
  munmap(pg, sizeof *pg);
  return ok ? median(v, g_reps) : -1;
}

/* memcpy bandwidth between two 4 MiB buffers, GB/s (1e9 B/s). */
static double floor_memcpy(void) {
  size_t len = MAX_MSG;
  pin_slot(0);
  char *a = touched_alloc(len, 1), *b = touched_alloc(len, 2);
  long n = 1;
  double t;
  for (;;) {
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
      memcpy((i & 1) ? a : b, (i & 1) ? b : a, len);
      __asm__ volatile("" ::: "memory"); /* keep every copy */
    }
    t = now_s() - t0;
    if (t >= g_warm_s || n >= (1L << 20)) break;
    n *= 2;
  }
  long it = iters_for(t, n, 4, 1L << 20);
  double v[MAX_REPS];
  for (int r = 0; r < g_reps; r++) {
    double t0 = now_s();
    for (long i = 0; i < it; i++) {
      memcpy((i & 1) ? a : b, (i & 1) ? b : a, len);
      __asm__ volatile("" ::: "memory");
    }
    v[r] = (double)len * (double)it / (now_s() - t0) / 1e9;
  }
  pin_slot(-1);
  int sane = a[0] == a[len - 1] && b[0] == b[len - 1];
  free(a);
  free(b);
  return sane ? median(v, g_reps) : -1;
}

/* ---- bare loopback TCP.  A small command precedes each repetition so the
 * timed part carries only the payload, exactly like a hand-written
 * ping-pong would. */
enum { TCMD_PINGPONG = 1, TCMD_STREAM = 2, TCMD_STOP = 3 };
struct tcmd {
  uint32_t op;
  uint32_t poll; /* 1: both sides receive with recv_spin */
  uint64_t size;
  uint64_t count;
};

static int send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

static int recv_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t k = recv(fd, p, len, 0); /* blocking */
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

/* The busy-polled receive: non-blocking recv (MSG_DONTWAIT) retried on
 * EAGAIN, never sleeping -- what a polling transport does at best. */
static int recv_spin(int fd, void *buf, size_t len) {
  char *p = buf;
  unsigned long spins = 0;
  double since = 0;
  while (len) {
    ssize_t k = recv(fd, p, len, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      /* 10 s of EAGAIN: the peer is gone or stuck (checked rarely) */
      if ((++spins & 0xffff) == 0) {
        if (since == 0) since = now_s();
        else if (now_s() - since > 10) return -1;
      }
      continue;
    }
    if (k <= 0) return -1;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

static int recv_mode(int fd, void *buf, size_t len, int poll) {
  return poll ? recv_spin(fd, buf, len) : recv_all(fd, buf, len);
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void tcp_floor_child(int lfd) {
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) _exit(1);
  set_nodelay(fd);
  char *buf = touched_alloc(MAX_MSG, 0);
  for (;;) {
    struct tcmd c;
    if (recv_all(fd, &c, sizeof c)) _exit(1);
    if (c.op == TCMD_STOP) _exit(0);
    if (c.size > MAX_MSG) _exit(1);
    for (uint64_t i = 0; i < c.count; i++) {
      if (recv_mode(fd, buf, c.size, (int)c.poll)) _exit(1);
      uint64_t seq;
      memcpy(&seq, buf, sizeof seq);
      if (seq != i) _exit(2); /* the stream lost or reordered bytes */
      if (c.op == TCMD_PINGPONG && send_all(fd, buf, c.size)) _exit(1);
    }
    if (c.op == TCMD_STREAM) {
      char ack = 'A';
      if (send_all(fd, &ack, 1)) _exit(1);
    }
  }
}

/* Returns seconds for `count` ping-pongs / streamed messages, <0 on error. */
static double tcp_floor_rep(int fd, char *buf, uint32_t op, size_t size, long count, int poll) {
  struct tcmd c = {op, (uint32_t)poll, size, (uint64_t)count};
  if (send_all(fd, &c, sizeof c)) return -1;
  double t0 = now_s();
  for (long i = 0; i < count; i++) {
    uint64_t seq = (uint64_t)i;
    memcpy(buf, &seq, sizeof seq);
    if (send_all(fd, buf, size)) return -1;
    if (op == TCMD_PINGPONG) {
      if (recv_mode(fd, buf, size, poll)) return -1;
      memcpy(&seq, buf, sizeof seq);
      if (seq != (uint64_t)i) return -1;
    }
  }
  if (op == TCMD_STREAM) {
    char ack;
    if (recv_all(fd, &ack, 1) || ack != 'A') return -1;
  }
  return now_s() - t0;
}

/* Median over repetitions after calibration; latency (us) for PINGPONG,
 * bandwidth (GB/s) for STREAM.  <0 on error. */
static double tcp_floor_measure(int fd, char *buf, uint32_t op, size_t size, int poll) {
  long n = 1, lo = op == TCMD_STREAM ? 8 : 20;
  double t;
  while ((t = tcp_floor_rep(fd, buf, op, size, n, poll)) >= 0 && t < g_warm_s && n < (1L << 20)) n *= 2;
  if (t < 0) return -1;
  long it = iters_for(t, n, lo, 1L << 20);
  double v[MAX_REPS];
  for (int r = 0; r < g_reps; r++) {
    if ((t = tcp_floor_rep(fd, buf, op, size, it, poll)) < 0) return -1;
    v[r] = op == TCMD_PINGPONG ? t / (double)it / 2 * 1e6 : (double)size * (double)it / t / 1e9;
  }
  return median(v, g_reps);
}

/* lat: blocking recv; lat_poll: busy-polled recv_spin on both sides. */
struct tcp_floor { double lat[NLAT], lat_poll[NLAT], bw[NBW]; };

/* A listening socket on a free loopback port; *sa gets its address.  <0 on failure. */
static int loopback_listener(struct sockaddr_in *sa) {
  socklen_t sl = sizeof *sa;
  *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) return -1;
  if (bind(lfd, (struct sockaddr *)sa, sizeof *sa) || listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)sa, &sl)) {
    close(lfd);
    return -1;
  }
  return lfd;
}

static int floor_tcp(struct tcp_floor *out) {
  struct sockaddr_in sa;
  int lfd = loopback_listener(&sa);
  if (lfd < 0) return -1;
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    child_setup(parent);
    pin_slot(1);
    tcp_floor_child(lfd);
  }
  pin_slot(0);
  close(lfd);
  int fd = socket(AF_INET, SOCK_STREAM, 0), rc = 0;
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) rc = -1;
  char *buf = touched_alloc(MAX_MSG, 3);
  if (rc == 0) {
    set_nodelay(fd);
    for (int i = 0; i < NLAT && rc == 0; i++)
      if ((out->lat[i] = tcp_floor_measure(fd, buf, TCMD_PINGPONG, lat_sizes[i], 0)) < 0) rc = -1;
    for (int i = 0; i < NLAT && rc == 0; i++)
      if ((out->lat_poll[i] = tcp_floor_measure(fd, buf, TCMD_PINGPONG, lat_sizes[i], 1)) < 0) rc = -1;
    for (int i = 0; i < NBW && rc == 0; i++)
      if ((out->bw[i] = tcp_floor_measure(fd, buf, TCMD_STREAM, bw_sizes[i], 0)) < 0) rc = -1;
    struct tcmd stop = {TCMD_STOP, 0, 0, 0};
    send_all(fd, &stop, sizeof stop);
  }
  if (fd >= 0) close(fd);
  free(buf);
  pin_slot(-1);
  if (reap(pid, now_s() + 10)) rc = -1;
  return rc;
}

/* ============================================================= doorbell */

enum { TAG_PING = 1, TAG_PONG = 2, TAG_STREAM = 3, TAG_SYNC = 4, TAG_ACK = 5, TAG_STOP = 6, TAG_FLOOR = 7 };

struct config {
  const char *name;
  int tcp;          /* different node_id per task, loopback only */
  uint32_t mode;    /* DOORBELL_WAIT_* */
  int pair;         /* PAIR_*: the floor measured beside each latency repetition */
};

/* Paired floors.  This host moves between placements within one run (the
 * cache-line floor reads 0.05 us in one, 0.22 us in the other, and loopback
 * TCP 40 us or 180 us), so a figure and a floor taken minutes apart can come
 * from different machines.  The pair's own two processes therefore run the
 * bare floor right before every latency repetition, on the same pinned CPUs,
 * and the ratio is the median of the per-repetition ratios.  Each mode
 * gets the floor of its own way of waiting: a spinning cache line (shm poll,
 * adaptive), a gap-free futex ping-pong where both sides sleep every hop
 * (shm block, see futex_ring), a busy-polled non-blocking socket (tcp poll)
 * and a blocking socket (tcp block). */
enum { PAIR_NONE = 0, PAIR_SPIN = 1, PAIR_TCP = 2, PAIR_FUTEX = 3, PAIR_TCP_POLL = 4 };
static int pair_is_tcp(int p) { return p == PAIR_TCP || p == PAIR_TCP_POLL; }
static int pair_is_shm(int p) { return p == PAIR_SPIN || p == PAIR_FUTEX; }

static const struct config configs[] = {
    {"shm poll", 0, DOORBELL_WAIT_POLL, PAIR_SPIN},
    {"shm block", 0, DOORBELL_WAIT_BLOCK, PAIR_FUTEX},
    {"shm adaptive", 0, DOORBELL_WAIT_ADAPTIVE, PAIR_SPIN},
    {"tcp poll", 1, DOORBELL_WAIT_POLL, PAIR_TCP_POLL},
    {"tcp block", 1, DOORBELL_WAIT_BLOCK, PAIR_TCP},
};
#define NCONFIG (int)(sizeof configs / sizeof configs[0])

/* Shared between the parent and the two tasks of one configuration. */
struct db_page {
  _Atomic uint32_t ready[2];          /* address published */
  _Atomic uint32_t barrier;           /* arrivals, counts up across barriers */
  uint8_t addr[2][DOORBELL_ADDRESS_MAX];
  size_t addr_len[2];
  int path[2];                        /* doorbell_peer_path seen by each task */
  double lat[NLAT], bw[NBW];          /* written by task 0 */
  doorbell_counters ctr[2];
  int done[2];
  char err[2][400];
  /* Paired floors (PAIR_*): per latency size and repetition, one-way us. */
  double pair_floor[NLAT][MAX_REPS], pair_db[NLAT][MAX_REPS];
  /* ... and per stream size: GB/s of the bare stream and of doorbell. */
  double pair_bw_floor[NBW][MAX_REPS], pair_bw_db[NBW][MAX_REPS];
  /* PAIR_SPIN stream: slot i of g_pair_buf holds a message while pair_full[i]. */
  _Alignas(64) _Atomic uint32_t pair_full[2][16];
  int pair_port;                      /* PAIR_TCP: task 1's loopback listener */
  _Atomic uint32_t pair_listening;
  _Alignas(64) _Atomic uint32_t pair_seq; /* PAIR_SPIN/FUTEX: the ping-pong word, alone on its line */
  char pair_line_end[60];
  _Alignas(64) _Atomic uint32_t pair_bell[2]; /* PAIR_FUTEX: each task's futex word (never changes) */
  struct futex_stats pair_fx[2];      /* PAIR_FUTEX: each task's waits and wakes */
  /* Did doorbell sleep?  Task 0's wakeups and round trips over the timed
   * latency repetitions, per size; task 1's wakeups counter at each floor
   * command it took (the latency commands come first, g_reps per size). */
  uint64_t lat_wakeups[NLAT], lat_rounds[NLAT];
  uint64_t resp_wakeups[(NLAT + NBW) * MAX_REPS + 1];
  int resp_nfloor;
};

/* Per-task receive state, filled by the callback.  Every message is copied
 * out of the callback into `dst`, as an MPI receive copies into the user's
 * buffer (the callback's data is valid only during the call, and a benchmark
 * that never touches the payload would flatter a zero-copy ring).  Every
 * message is checked (length, sequence number in its first and last word,
 * order) so a broken transport cannot post a good-looking figure. */
struct rx {
  uint8_t *dst;         /* MAX_MSG bytes, pre-touched */
  /* initiator side */
  size_t pong_len;
  uint64_t pong_seq;
  int got_pong, got_ack;
  uint64_t ack_count, ack_bytes;
  /* responder side */
  int got_ping, got_sync, stop, got_floor;
  uint64_t floor_size, floor_count, floor_stream;
  size_t ping_len;
  uint64_t ping_seq;
  uint64_t stream_count, stream_bytes;
  /* either */
  int bad;
  char why[128];
};

static void rx_bad(struct rx *s, const char *why) {
  if (!s->bad) snprintf(s->why, sizeof s->why, "%s", why);
  s->bad = 1;
}

static uint64_t get_u64(const uint8_t *d, size_t len) {
  uint64_t v = 0;
  memcpy(&v, d, len < 8 ? len : 8);
  return v;
}

/* Payload stamp: the sequence number in the first and the last 8 bytes. */
static void stamp(uint8_t *buf, size_t len, uint64_t seq) {
  memcpy(buf, &seq, 8);
  memcpy(buf + len - 8, &seq, 8);
}

/* Copy a payload out (the receive) and return its stamp, or ~0 if the two
 * stamps disagree (torn, truncated or misassembled message). */
static uint64_t receive_payload(struct rx *s, const uint8_t *data, size_t len) {
  if (len < 8 || len > MAX_MSG) return ~(uint64_t)0;
  memcpy(s->dst, data, len);
  uint64_t a = get_u64(s->dst, 8), b = get_u64(s->dst + len - 8, 8);
  return a == b ? a : ~(uint64_t)0;
}

static void on_recv(void *ctx, uint32_t task, uint32_t window, uint8_t tag,
                    const uint8_t *data, size_t len) {
  struct rx *s = ctx;
  (void)task;
  if (window != 0) rx_bad(s, "message on an unexpected window");
  switch (tag) {
  case TAG_PING: /* responder: remember it, echo after the wait returns */
    if (s->got_ping) rx_bad(s, "second ping before the pong");
    s->got_ping = 1;
    s->ping_len = len;
    s->ping_seq = receive_payload(s, data, len);
    if (s->ping_seq == ~(uint64_t)0) rx_bad(s, "ping payload torn or truncated");
    break;
  case TAG_PONG:
    if (len != s->pong_len) rx_bad(s, "pong length differs from ping");
    else if (receive_payload(s, data, len) != s->pong_seq) rx_bad(s, "pong payload differs from ping (seq/torn)");
    s->got_pong = 1;
    break;
  case TAG_STREAM:
    if (receive_payload(s, data, len) != s->stream_count) rx_bad(s, "stream message lost, torn or out of order");
    s->stream_count++;
    s->stream_bytes += len;
    break;
  case TAG_SYNC:
    s->got_sync = 1;
    break;
  case TAG_ACK:
    if (len != 16) {
      rx_bad(s, "bad ack");
    } else {
      s->ack_count = get_u64(data, 8);
      s->ack_bytes = get_u64(data + 8, 8);
    }
    s->got_ack = 1;
    break;
  case TAG_FLOOR:
    if (len != 24) {
      rx_bad(s, "bad floor command");
    } else {
      s->floor_size = get_u64(data, 8);
      s->floor_count = get_u64(data + 8, 8);
      s->floor_stream = get_u64(data + 16, 8);
      s->got_floor = 1;
    }
    break;
  case TAG_STOP:
    s->stop = 1;
    break;
  default:
    rx_bad(s, "unknown tag");
  }
}

struct task {
  doorbell_endpoint *ep;
  uint32_t me, peer, mode;
  int pair;             /* PAIR_* */
  int pair_fd;          /* PAIR_TCP: bare loopback socket to the peer task */
  uint32_t pair_seq;    /* PAIR_SPIN: last value both sides agreed on */
  struct rx rx;
  uint8_t *buf;
  struct db_page *pg;
  char phase[64];       /* what was being measured, for error messages */
  char err[256];
};

static int task_fail(struct task *t, const char *what, int rc) {
  snprintf(t->err, sizeof t->err, "[%s] %s: %s (%d)", t->phase, what, doorbell_error_string(rc), rc);
  return -1;
}

/* Send, pushing the backlog while it is full. */
static int db_send(struct task *t, uint8_t tag, const void *data, size_t len) {
  /* The deadline is read only once the send has to wait: a clock read per
   * message would be the harness's cost in every latency figure. */
  double deadline = 0;
  for (;;) {
    int rc = doorbell_send(t->ep, t->peer, 0, tag, data, len);
    if (rc == DOORBELL_OK) return 0;
    if (rc != DOORBELL_ERR_WOULD_BLOCK) return task_fail(t, "doorbell_send", rc);
    if (deadline == 0) deadline = now_s() + WAIT_TIMEOUT_US / 1e6;
    doorbell_wake w = {0, 0};
    rc = doorbell_progress(t->ep, 0, on_recv, &t->rx, &w);
    if (rc < 0) return task_fail(t, "doorbell_progress", rc);
    if (now_s() > deadline) return task_fail(t, "send backlog never drained", DOORBELL_ERR_TIMED_OUT);
  }
}

/* One doorbell_wait in the task's mode, with every outcome checked. */
static int db_wait_once(struct task *t) {
  doorbell_wake w = {0, 0};
  int rc = doorbell_wait(t->ep, 0, t->mode, WAIT_TIMEOUT_US, on_recv, &t->rx, &w);
  if (rc < 0) return task_fail(t, "doorbell_wait", rc);
  if (t->rx.bad) {
    snprintf(t->err, sizeof t->err, "[%s] data check: %s", t->phase, t->rx.why);
    return -1;
  }
  if (rc == 0 && w.reason == DOORBELL_WOKE_TIMEOUT)
    return task_fail(t, "doorbell_wait: nothing arrived", DOORBELL_ERR_TIMED_OUT);
  if (rc == 0 && w.reason == DOORBELL_WOKE_PEER_LOST)
    return task_fail(t, "doorbell_wait", DOORBELL_ERR_PEER_LOST);
  return 0;
}

static int db_wait_for(struct task *t, int *flag) {
  while (!*flag)
    if (db_wait_once(t)) return -1;
  return 0;
}

/* Barrier between the two tasks over the shared page (spins politely). */
static int page_barrier(struct db_page *pg, uint32_t *gen) {
  uint32_t target = (++*gen) * 2;
  atomic_fetch_add(&pg->barrier, 1);
  double deadline = now_s() + 30;
  while (atomic_load(&pg->barrier) < target) {
    if (now_s() > deadline) return -1;
    usleep(50);
  }
  return 0;
}

/* ---- paired floors (see PAIR_*): the bare ping-pong, between the pair's
 * own two processes.  The initiator announces each repetition over doorbell
 * (TAG_FLOOR: size, count); the responder echoes `count` bare rounds. */

/* One side of the bare rounds.  Initiator: ping then wait for the pong;
 * responder: wait for the ping, then pong.  Returns 0, or -1 on failure. */
static int pair_round(struct task *t, uint8_t *buf, size_t size, uint64_t i) {
  if (t->pair == PAIR_FUTEX) {
    uint32_t ping = t->pair_seq + 1, pong = t->pair_seq + 2;
    struct db_page *pg = t->pg;
    struct futex_stats *st = &pg->pair_fx[t->me];
    if (t->me == 0) {
      if (futex_ring(&pg->pair_bell[1], &pg->pair_seq, ping, st) ||
          futex_await(&pg->pair_bell[0], &pg->pair_seq, ping, st) != pong)
        return -1;
    } else if (futex_await(&pg->pair_bell[1], &pg->pair_seq, t->pair_seq, st) != ping ||
               futex_ring(&pg->pair_bell[0], &pg->pair_seq, pong, st)) {
      return -1;
    }
    t->pair_seq = pong;
    return 0;
  }
  if (t->pair == PAIR_SPIN) {
    uint32_t ping = t->pair_seq + 1, pong = t->pair_seq + 2, want = t->me == 0 ? pong : ping;
    unsigned long spins = 0;
    double since = 0;
    if (t->me == 0) atomic_store_explicit(&t->pg->pair_seq, ping, memory_order_release);
    while (atomic_load_explicit(&t->pg->pair_seq, memory_order_acquire) != want)
      if (floor_stuck(&spins, &since)) return -1;
    if (t->me == 1) atomic_store_explicit(&t->pg->pair_seq, pong, memory_order_release);
    t->pair_seq = pong;
    return 0;
  }
  uint64_t seq;
  int poll = t->pair == PAIR_TCP_POLL;
  if (t->me == 0) {
    memcpy(buf, &i, sizeof i);
    if (send_all(t->pair_fd, buf, size) || recv_mode(t->pair_fd, buf, size, poll)) return -1;
  } else {
    if (recv_mode(t->pair_fd, buf, size, poll)) return -1;
    if (send_all(t->pair_fd, buf, size)) return -1;
  }
  memcpy(&seq, buf, sizeof seq);
  return seq == i ? 0 : -1;
}

/* Initiator: one paired floor repetition of `n` rounds of `size` bytes.
 * Round 0 waits for the responder to take the command and is not timed.
 * Returns one-way us, <0 on failure. */
static double pair_floor_rep(struct task *t, size_t size, long n) {
  uint64_t cmd[3] = {size, (uint64_t)n + 1, 0};
  if (db_send(t, TAG_FLOOR, cmd, sizeof cmd)) return -1;
  double t0 = 0;
  for (long i = 0; i <= n; i++) {
    if (i == 1) t0 = now_s();
    if (pair_round(t, t->buf, size, (uint64_t)i)) {
      snprintf(t->err, sizeof t->err, "[%s] paired floor: the peer stopped answering", t->phase);
      return -1;
    }
  }
  return (now_s() - t0) / (double)n / 2 * 1e6;
}

/* The paired stream floor.  PAIR_SPIN: a bare two-slot copy pipeline
 * through a shared mapping made before the fork (the initiator copies a
 * message into a free slot, the responder copies it out and frees the slot:
 * one copy per side, as doorbell's bulk path and the receiving callback
 * make).  PAIR_TCP: the bare socket streams, the responder acks the end. */
static uint8_t *g_pair_buf; /* 2 x MAX_MSG, MAP_SHARED, PAIR_SPIN only */

static int pair_slot_wait(struct task *t, int slot, uint32_t want) {
  unsigned long spins = 0;
  double since = 0;
  while (atomic_load_explicit(&t->pg->pair_full[slot][0], memory_order_acquire) != want)
    if (floor_stuck(&spins, &since)) return -1;
  return 0;
}

/* Initiator: one repetition of `n` messages of `size` bytes; GB/s, <0 on failure. */
static double pair_stream_rep(struct task *t, size_t size, long n) {
  uint64_t cmd[3] = {size, (uint64_t)n, 1};
  if (db_send(t, TAG_FLOOR, cmd, sizeof cmd)) return -1;
  double t0 = now_s();
  char ack = 0;
  for (long i = 0; i < n; i++) {
    stamp(t->buf, size, (uint64_t)i);
    if (pair_is_shm(t->pair)) {
      int slot = (int)(i & 1);
      if (pair_slot_wait(t, slot, 0)) return -1;
      memcpy(g_pair_buf + (size_t)slot * MAX_MSG, t->buf, size);
      atomic_store_explicit(&t->pg->pair_full[slot][0], 1, memory_order_release);
    } else if (send_all(t->pair_fd, t->buf, size)) {
      return -1;
    }
  }
  if (pair_is_shm(t->pair) ? pair_slot_wait(t, 0, 0) || pair_slot_wait(t, 1, 0)
                           : recv_mode(t->pair_fd, &ack, 1, t->pair == PAIR_TCP_POLL) || ack != 'A')
    return -1;
  return (double)size * (double)n / (now_s() - t0) / 1e9;
}

/* Responder side of pair_stream_rep: take `count` messages, check each. */
static int pair_stream_take(struct task *t, size_t size, uint64_t count) {
  for (uint64_t i = 0; i < count; i++) {
    if (pair_is_shm(t->pair)) {
      int slot = (int)(i & 1);
      if (pair_slot_wait(t, slot, 1)) return -1;
      memcpy(t->rx.dst, g_pair_buf + (size_t)slot * MAX_MSG, size);
      atomic_store_explicit(&t->pg->pair_full[slot][0], 0, memory_order_release);
    } else if (recv_mode(t->pair_fd, t->rx.dst, size, t->pair == PAIR_TCP_POLL)) {
      return -1;
    }
    if (get_u64(t->rx.dst, 8) != i || get_u64(t->rx.dst + size - 8, 8) != i) return -1;
  }
  return pair_is_tcp(t->pair) ? send_all(t->pair_fd, "A", 1) : 0;
}

/* Responder: echo the rounds (or take the stream) a TAG_FLOOR asked for. */
static int pair_floor_echo(struct task *t) {
  struct rx *s = &t->rx;
  s->got_floor = 0;
  doorbell_counters k; /* outside any timed part: the initiator waits for round 0 */
  if (t->pg->resp_nfloor < (NLAT + NBW) * MAX_REPS + 1 && doorbell_counters_get(t->ep, &k) == 0)
    t->pg->resp_wakeups[t->pg->resp_nfloor++] = k.wakeups;
  if (t->pair == PAIR_NONE || s->floor_size < 8 || s->floor_size > MAX_MSG) {
    snprintf(t->err, sizeof t->err, "[%s] unexpected floor command", t->phase);
    return -1;
  }
  if (s->floor_stream) {
    if (pair_stream_take(t, s->floor_size, s->floor_count)) {
      snprintf(t->err, sizeof t->err, "[%s] paired stream floor: stopped or corrupt", t->phase);
      return -1;
    }
    return 0;
  }
  for (uint64_t i = 0; i < s->floor_count; i++)
    if (pair_round(t, t->buf, s->floor_size, i)) {
      snprintf(t->err, sizeof t->err, "[%s] paired floor: the initiator stopped", t->phase);
      return -1;
    }
  return 0;
}

/* PAIR_TCP: task 1 listens on loopback, task 0 connects (blocking socket,
 * TCP_NODELAY: the bare floor's own settings). */
static int pair_connect(struct task *t) {
  if (!pair_is_tcp(t->pair)) return 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  double deadline = now_s() + 30;
  if (t->me == 1) {
    int lfd = loopback_listener(&sa);
    if (lfd < 0) return -1;
    t->pg->pair_port = ntohs(sa.sin_port);
    atomic_store(&t->pg->pair_listening, 1);
    t->pair_fd = accept(lfd, NULL, NULL); /* the child's alarm bounds this */
    close(lfd);
  } else {
    while (!atomic_load(&t->pg->pair_listening)) {
      if (now_s() > deadline) return -1;
      usleep(100);
    }
    sa.sin_port = htons((uint16_t)t->pg->pair_port);
    t->pair_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (t->pair_fd >= 0 && connect(t->pair_fd, (struct sockaddr *)&sa, sizeof sa)) {
      close(t->pair_fd);
      t->pair_fd = -1;
    }
  }
  if (t->pair_fd < 0) return -1;
  set_nodelay(t->pair_fd);
  return 0;
}

/* ---- task 0, the initiator: drives every measurement. */

static double db_pingpong(struct task *t, size_t size, long n, uint64_t *seq) {
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    uint64_t s = ++*seq;
    stamp(t->buf, size, s);
    t->rx.pong_len = size;
    t->rx.pong_seq = s;
    t->rx.got_pong = 0;
    if (db_send(t, TAG_PING, t->buf, size) || db_wait_for(t, &t->rx.got_pong)) return -1;
  }
  return now_s() - t0;
}

static double db_stream(struct task *t, size_t size, long n) {
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    stamp(t->buf, size, (uint64_t)i);
    if (db_send(t, TAG_STREAM, t->buf, size)) return -1;
  }
  /* A window is FIFO, so the ack to SYNC means every STREAM was delivered. */
  t->rx.got_ack = 0;
  if (db_send(t, TAG_SYNC, t->buf, 0) || db_wait_for(t, &t->rx.got_ack)) return -1;
  double el = now_s() - t0;
  if (t->rx.ack_count != (uint64_t)n || t->rx.ack_bytes != (uint64_t)n * size) {
    snprintf(t->err, sizeof t->err, "[%s] receiver got %llu messages / %llu bytes, sent %ld / %llu",
             t->phase, (unsigned long long)t->rx.ack_count, (unsigned long long)t->rx.ack_bytes, n,
             (unsigned long long)((uint64_t)n * size));
    return -1;
  }
  return el;
}

static int initiator(struct task *t) {
  uint64_t seq = 0;
  double v[MAX_REPS], s;
  for (int i = 0; i < NLAT; i++) {
    long n = 1;
    snprintf(t->phase, sizeof t->phase, "ping-pong %zu B", lat_sizes[i]);
    while ((s = db_pingpong(t, lat_sizes[i], n, &seq)) >= 0 && s < g_warm_s && n < (1L << 22)) n *= 2;
    if (s < 0) return -1;
    long it = iters_for(s, n, 20, 1L << 22);
    for (int r = 0; r < g_reps; r++) {
      if (t->pair != PAIR_NONE && (t->pg->pair_floor[i][r] = pair_floor_rep(t, lat_sizes[i], it)) < 0) return -1;
      doorbell_counters k0, k1; /* read outside the timed part */
      if (doorbell_counters_get(t->ep, &k0)) memset(&k0, 0, sizeof k0);
      if ((s = db_pingpong(t, lat_sizes[i], it, &seq)) < 0) return -1;
      if (doorbell_counters_get(t->ep, &k1)) k1 = k0;
      t->pg->lat_wakeups[i] += k1.wakeups - k0.wakeups;
      t->pg->lat_rounds[i] += (uint64_t)it;
      v[r] = t->pg->pair_db[i][r] = s / (double)it / 2 * 1e6;
    }
    t->pg->lat[i] = median(v, g_reps);
  }
  for (int i = 0; i < NBW; i++) {
    long n = 1;
    snprintf(t->phase, sizeof t->phase, "stream %zu B", bw_sizes[i]);
    while ((s = db_stream(t, bw_sizes[i], n)) >= 0 && s < g_warm_s && n < (1L << 20)) n *= 2;
    if (s < 0) return -1;
    long it = iters_for(s, n, 8, 1L << 20);
    for (int r = 0; r < g_reps; r++) {
      if (t->pair != PAIR_NONE && (t->pg->pair_bw_floor[i][r] = pair_stream_rep(t, bw_sizes[i], it)) < 0) {
        snprintf(t->err, sizeof t->err, "[%s] paired stream floor failed", t->phase);
        return -1;
      }
      if ((s = db_stream(t, bw_sizes[i], it)) < 0) return -1;
      v[r] = t->pg->pair_bw_db[i][r] = (double)bw_sizes[i] * (double)it / s / 1e9;
    }
    t->pg->bw[i] = median(v, g_reps);
  }
  snprintf(t->phase, sizeof t->phase, "stop");
  return db_send(t, TAG_STOP, t->buf, 0);
}

/* ---- task 1, the responder: echoes PINGs, counts STREAMs, acks SYNCs. */

static int responder(struct task *t) {
  struct rx *s = &t->rx;
  size_t last_len = 0;
  while (!s->stop) {
    if (db_wait_once(t)) return -1;
    if (s->got_ping) {
      /* Echo from a pre-touched buffer: same length, same sequence number. */
      s->got_ping = 0;
      if (s->ping_len != last_len) /* phase text only on a change: off the hot path */
        snprintf(t->phase, sizeof t->phase, "echoing %zu B pings", last_len = s->ping_len);
      stamp(t->buf, s->ping_len, s->ping_seq);
      if (db_send(t, TAG_PONG, t->buf, s->ping_len)) return -1;
    }
    if (s->got_floor && pair_floor_echo(t)) return -1;
    if (s->got_sync) {
      uint64_t ack[2] = {s->stream_count, s->stream_bytes};
      s->got_sync = 0;
      s->stream_count = s->stream_bytes = 0;
      if (db_send(t, TAG_ACK, ack, sizeof ack)) return -1;
      snprintf(t->phase, sizeof t->phase, "after a stream ack");
    }
  }
  return 0;
}

static int run_task_inner(struct task *t, const struct config *c, const char *job) {
  snprintf(t->phase, sizeof t->phase, "setup");
  struct db_page *pg = t->pg;
  uint32_t gen = 0;
  doorbell_config cfg;
  int rc = doorbell_config_init(&cfg);
  if (rc) return task_fail(t, "doorbell_config_init", rc);
  cfg.task = t->me;
  cfg.job = job;
  cfg.wait_mode = c->mode;
  if (c->tcp) {
    cfg.node_id = 100 + t->me; /* different nodes: the TCP path */
    cfg.if_include = "lo";     /* keep it on loopback */
  } else {
    cfg.node_id = 7;
  }
  if ((rc = doorbell_endpoint_create(&cfg, &t->ep))) return task_fail(t, "doorbell_endpoint_create", rc);

  size_t len = DOORBELL_ADDRESS_MAX;
  if ((rc = doorbell_address(t->ep, pg->addr[t->me], &len))) return task_fail(t, "doorbell_address", rc);
  pg->addr_len[t->me] = len;
  atomic_store(&pg->ready[t->me], 1);
  double deadline = now_s() + 30;
  while (!atomic_load(&pg->ready[t->peer])) {
    if (now_s() > deadline) return task_fail(t, "peer never published its address", DOORBELL_ERR_TIMED_OUT);
    usleep(100);
  }
  uint32_t got = UINT32_MAX;
  if ((rc = doorbell_connect(t->ep, pg->addr[t->peer], pg->addr_len[t->peer], &got)))
    return task_fail(t, "doorbell_connect", rc);
  if (got != t->peer) {
    snprintf(t->err, sizeof t->err, "doorbell_connect returned task %u, expected %u", got, t->peer);
    return -1;
  }
  pg->path[t->me] = doorbell_peer_path(t->ep, t->peer);
  if (pair_connect(t)) return task_fail(t, "paired floor: loopback socket to the peer", DOORBELL_ERR_NETWORK);
  if (page_barrier(pg, &gen)) return task_fail(t, "barrier", DOORBELL_ERR_TIMED_OUT);

  snprintf(t->phase, sizeof t->phase, "%s", t->me == 0 ? "start" : "responding");
  if ((t->me == 0 ? initiator(t) : responder(t))) return -1;
  snprintf(t->phase, sizeof t->phase, "teardown");
  if (t->pair_fd >= 0) close(t->pair_fd), t->pair_fd = -1;

  if ((rc = doorbell_counters_get(t->ep, &pg->ctr[t->me]))) return task_fail(t, "doorbell_counters_get", rc);
  /* Neither side tears down while the other may still need the link. */
  if (page_barrier(pg, &gen)) return task_fail(t, "barrier", DOORBELL_ERR_TIMED_OUT);
  rc = doorbell_endpoint_destroy(t->ep);
  t->ep = NULL;
  if (rc < 0) return task_fail(t, "doorbell_endpoint_destroy", rc);
  return 0;
}

static void run_task(struct db_page *pg, const struct config *c, uint32_t me, const char *job, pid_t parent) {
  child_setup(parent);
  pin_slot((int)me); /* before endpoint_create: its FLIH thread inherits the CPU */
  struct task t;
  memset(&t, 0, sizeof t);
  t.me = me;
  t.peer = 1 - me;
  t.mode = c->mode;
  t.pair = c->pair;
  t.pair_fd = -1;
  t.pg = pg;
  t.buf = touched_alloc(MAX_MSG, 0x5a);
  t.rx.dst = touched_alloc(MAX_MSG, 0xa5);
  if (run_task_inner(&t, c, job)) {
    /* Leave the counters and progress behind for the diagnosis. */
    if (t.ep) doorbell_counters_get(t.ep, &pg->ctr[me]);
    snprintf(pg->err[me], sizeof pg->err[me], "%s (stream messages received since the last ack: %llu)", t.err,
             (unsigned long long)t.rx.stream_count);
    _exit(1);
  }
  pg->done[me] = 1;
  _exit(0);
}

/* Runs one configuration in two forked tasks.  Returns 0 on success. */
static int run_config(int ci, struct db_page *out, char *why, size_t whylen) {
  const struct config *c = &configs[ci];
  struct db_page *pg = shared_map(sizeof *pg);
  g_pair_buf = pair_is_shm(c->pair) ? shared_map(2 * (size_t)MAX_MSG) : NULL;
  char job[41];
  snprintf(job, sizeof job, "dbbench%d_%d", (int)getpid(), ci);
  pid_t pid[2], parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (uint32_t me = 0; me < 2; me++) {
    pid[me] = fork();
    if (pid[me] < 0) {
      snprintf(why, whylen, "fork: %s", strerror(errno));
      if (me == 1) kill(pid[0], SIGKILL), waitpid(pid[0], NULL, 0);
      return -1;
    }
    if (pid[me] == 0) run_task(pg, c, me, job, parent);
  }
  /* Reap both.  If one fails, the other cannot finish: give it a moment to
   * report its own view (peer lost, timeout), then kill it (by pid). */
  double deadline = now_s() + CONFIG_DEADLINE_S;
  int status_ok[2] = {0, 0}, left = 2, timed_out = 0;
  pid_t live[2] = {pid[0], pid[1]};
  while (left) {
    for (int i = 0; i < 2; i++) {
      if (!live[i]) continue;
      int st;
      pid_t r = waitpid(live[i], &st, WNOHANG);
      if (r != live[i]) continue;
      live[i] = 0;
      left--;
      status_ok[i] = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!status_ok[i] && live[1 - i] && deadline > now_s() + 3) deadline = now_s() + 3;
    }
    if (left && now_s() > deadline) {
      timed_out = 1;
      for (int i = 0; i < 2; i++)
        if (live[i]) kill(live[i], SIGKILL), waitpid(live[i], NULL, 0), live[i] = 0;
      left = 0;
    }
    if (left) usleep(2000);
  }
  *out = *pg;
  munmap(pg, sizeof *pg);
  if (g_pair_buf) munmap(g_pair_buf, 2 * (size_t)MAX_MSG), g_pair_buf = NULL;
  if (timed_out && !out->err[0][0] && !out->err[1][0]) {
    snprintf(why, whylen, "timed out after %d s (a doorbell call never returned?)", CONFIG_DEADLINE_S);
    return -1;
  }
  if (!(status_ok[0] && out->done[0] && status_ok[1] && out->done[1])) {
    /* Show both: the task that failed second often reports only the symptom. */
    snprintf(why, whylen, "task 0: %s; task 1: %s",
             status_ok[0] && out->done[0] ? "ok" : out->err[0][0] ? out->err[0] : "killed (stuck) or died",
             status_ok[1] && out->done[1] ? "ok" : out->err[1][0] ? out->err[1] : "killed (stuck) or died");
    return -1;
  }
  /* Make sure the figure measures the path and mode it claims to. */
  int want_path = c->tcp ? 2 : 1;
  for (int i = 0; i < 2; i++) {
    const doorbell_counters *k = &out->ctr[i];
    if (out->path[i] != want_path) {
      snprintf(why, whylen, "task %d: doorbell_peer_path = %d, expected %d", i, out->path[i], want_path);
      return -1;
    }
    uint64_t on_path = c->tcp ? k->tcp_sent : k->shm_sent, off_path = c->tcp ? k->shm_sent : k->tcp_sent;
    if (on_path == 0 || off_path != 0) {
      snprintf(why, whylen, "task %d: counters show shm_sent=%llu tcp_sent=%llu for a %s run", i,
               (unsigned long long)k->shm_sent, (unsigned long long)k->tcp_sent, c->tcp ? "TCP" : "shm");
      return -1;
    }
    if (c->mode == DOORBELL_WAIT_POLL && k->wakeups != 0) {
      snprintf(why, whylen, "task %d: poll mode slept (%llu wakeups)", i, (unsigned long long)k->wakeups);
      return -1;
    }
    if (c->mode == DOORBELL_WAIT_BLOCK && k->wakeups == 0) {
      snprintf(why, whylen, "task %d: block mode never slept (0 wakeups)", i);
      return -1;
    }
  }
  return 0;
}

/* ================================================================= main */

struct floors {
  double spin, futex, mcpy; /* us, us, GB/s; <0: failed */
  struct tcp_floor tcp;
  int tcp_ok;
};

static void measure_floors(struct floors *f, const char *when) {
  memset(f, 0, sizeof *f);
  struct futex_stats fx;
  f->spin = floor_shared(FLOOR_SPIN, NULL);
  result_line(f->spin > 0, "floor cache-line ping-pong (%s): %.3f us one-way", when, f->spin);
  f->futex = floor_shared(FLOOR_FUTEX, &fx);
  /* A futex floor whose waits did not all sleep measured no wake-up: fail it. */
  result_line(f->futex > 0 && fx.eagain == 0 && fx.slept + fx.spurious >= fx.waits,
              "floor futex ping-pong, gap-free, shared not private (%s): %.2f us one-way; %lu of %lu FUTEX_WAITs "
              "slept (%lu EAGAIN, %lu spurious), %lu of %lu FUTEX_WAKEs found the peer not yet asleep (retried)",
              when, f->futex, fx.slept, fx.waits, fx.eagain, fx.spurious, fx.wake_misses, fx.wakes);
  f->mcpy = floor_memcpy();
  result_line(f->mcpy > 0, "floor memcpy 4 MiB (%s): %.2f GB/s", when, f->mcpy);
  f->tcp_ok = floor_tcp(&f->tcp) == 0;
  result_line(f->tcp_ok, "floor loopback TCP ping-pong, TCP_NODELAY (%s): blocking recv %.2f us, busy-polled "
              "MSG_DONTWAIT recv %.2f us one-way at 8 B", when, f->tcp_ok ? f->tcp.lat[0] : -1.0,
              f->tcp_ok ? f->tcp.lat_poll[0] : -1.0);
}

/* The better of two passes, per figure (a floor is the best the machine
 * does); a failed figure stays failed. */
static double best_lat(double a, double b) { return a <= 0 || b <= 0 ? -1 : a < b ? a : b; }
static double best_bw(double a, double b) { return a <= 0 || b <= 0 ? -1 : a > b ? a : b; }

static void print_floor_row(const char *name, const struct floors *f) {
  printf("%-22s %9.3f %9s %9s %9s | %9s %9s %9.2f   (cache line, memcpy)\n", name, f->spin, "", "", "", "", "",
         f->mcpy);
  printf("%-22s %9.2f %9s %9s %9s | %9s %9s %9s   (futex)\n", "", f->futex, "", "", "", "", "", "");
  if (f->tcp_ok) {
    printf("%-22s %9.2f %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f   (bare TCP, blocking)\n", "", f->tcp.lat[0],
           f->tcp.lat[1], f->tcp.lat[2], f->tcp.lat[3], f->tcp.bw[0], f->tcp.bw[1], f->tcp.bw[2]);
    printf("%-22s %9.2f %9.2f %9.2f %9.2f | %9s %9s %9s   (bare TCP, busy-polled)\n", "", f->tcp.lat_poll[0],
           f->tcp.lat_poll[1], f->tcp.lat_poll[2], f->tcp.lat_poll[3], "", "", "");
  }
}

static void print_machine(void) {
  struct utsname u;
  double la[1] = {0};
  uname(&u);
  getloadavg(la, 1);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("machine: %s %s, %ld CPUs, load average %.2f%s\n", u.sysname, u.release, ncpu, la[0],
         la[0] > 0.5 ? "  (busy machine: figures will be noisy)" : "");
  if (g_pin && CPU_COUNT(&g_cpus) >= 2)
    printf("placement: the two processes of each pair pinned to CPUs %d and %d (PIN=0: unpinned)\n", nth_cpu(0),
           nth_cpu(1));
  else
    printf("placement: unpinned%s\n", g_pin ? " (fewer than 2 usable CPUs)" : " (PIN=0)");
  printf("method: median of %d repetitions of ~%.0f ms each; latency = round trip / 2 (us); "
         "bandwidth = streamed bytes / time to the receiver's ack (GB/s = 1e9 B/s)\n\n",
         g_reps, g_rep_s * 1e3);
}

/* Paired floors, per size: the median over the repetitions of one row (a
 * floor), and the median of the per-repetition ratios fig / (floor + extra)
 * (latency: extra = the payload's copy time; bandwidth: 0).  <0: not measured. */
static double median_row(const double *row) {
  double v[MAX_REPS];
  memcpy(v, row, sizeof(double) * (size_t)g_reps); /* median sorts */
  return median(v, g_reps);
}

static double median_ratio(const double *fig, const double *floor, double extra) {
  double v[MAX_REPS];
  for (int r = 0; r < g_reps; r++) {
    if (floor[r] <= 0 || fig[r] <= 0) return -1;
    v[r] = fig[r] / (floor[r] + extra);
  }
  return median(v, g_reps);
}

/* What a paired shm floor adds for the payload: one copy at memcpy speed.
 * Unknown (<0) without a memcpy floor, except at 8 B where it is nil. */
static double pair_extra_us(const struct config *c, int i, double mcpy) {
  if (!pair_is_shm(c->pair)) return 0;
  if (mcpy > 0) return (double)lat_sizes[i] / (mcpy * 1e3);
  return i == 0 ? 0 : -1;
}

static void fmt_lat(char *b, size_t n, double v) {
  if (v <= 0) snprintf(b, n, "-");
  else snprintf(b, n, "%.2f", v);
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  const char *only = argc > 2 ? argv[2] : NULL; /* e.g. "shm block": one configuration */
  int do_floors = !strcmp(what, "all") || !strcmp(what, "floors");
  int do_core = !strcmp(what, "all") || !strcmp(what, "core");
  if (!do_floors && !do_core) {
    fprintf(stderr, "usage: %s [all|floors|core] [\"shm poll\"|\"shm block\"|...]   (env QUICK=1, STRICT=1)\n",
            argv[0]);
    return 2;
  }
  const char *q = getenv("QUICK");
  if (q && *q && strcmp(q, "0")) {
    g_reps = 3;
    g_rep_s = 0.005;
    g_warm_s = 0.002;
  }
  const char *pe = getenv("PIN");
  g_pin = !(pe && !strcmp(pe, "0"));
  if (sched_getaffinity(0, sizeof g_cpus, &g_cpus)) CPU_ZERO(&g_cpus);
  const char *st = getenv("STRICT");
  int strict = st && *st && strcmp(st, "0");
  setvbuf(stdout, NULL, _IOLBF, 0);
  print_machine();

  /* ---- floors, first pass (the second comes after the doorbell runs: the
   * host's noise drifts, and a floor is the best of the two) */
  struct floors f1, f2;
  memset(&f1, 0, sizeof f1);
  memset(&f2, 0, sizeof f2);
  if (do_floors) measure_floors(&f1, do_core ? "start" : "pass 1");

  /* ---- doorbell */
  static struct db_page res[NCONFIG];
  int cfg_ok[NCONFIG] = {0}, cfg_ran[NCONFIG] = {0};
  memset(res, 0, sizeof res);
  if (do_core) {
    for (int ci = 0; ci < NCONFIG; ci++) {
      char why[700] = "";
      if (only && strcmp(only, configs[ci].name)) continue;
      cfg_ran[ci] = 1;
      cfg_ok[ci] = run_config(ci, &res[ci], why, sizeof why) == 0;
      if (cfg_ok[ci])
        result_line(1, "doorbell %s: measured, every message checked", configs[ci].name);
      else
        result_line(0, "doorbell %s: %s", configs[ci].name, why);
    }
  }

  if (do_floors) measure_floors(&f2, do_core ? "end" : "pass 2");
  double spin = best_lat(f1.spin, f2.spin), futex = best_lat(f1.futex, f2.futex), mcpy = best_bw(f1.mcpy, f2.mcpy);
  int tcp_ok = f1.tcp_ok && f2.tcp_ok;
  struct tcp_floor tf;
  for (int i = 0; i < NLAT; i++) tf.lat[i] = best_lat(f1.tcp.lat[i], f2.tcp.lat[i]);
  for (int i = 0; i < NLAT; i++) tf.lat_poll[i] = best_lat(f1.tcp.lat_poll[i], f2.tcp.lat_poll[i]);
  for (int i = 0; i < NBW; i++) tf.bw[i] = best_bw(f1.tcp.bw[i], f2.tcp.bw[i]);

  /* ---- tables */
  char b[NLAT + NBW][32];
  printf("\n%-22s %9s %9s %9s %9s | %9s %9s %9s\n", "one-way latency (us)", "8 B", "1 KiB", "64 KiB",
         "1 MiB", "bw 64 KiB", "1 MiB", "4 MiB");
  printf("%-22s %9s %9s %9s %9s | %9s %9s %9s\n", "", "", "", "", "", "GB/s", "GB/s", "GB/s");
  for (int ci = 0; do_core && ci < NCONFIG; ci++) {
    if (only && strcmp(only, configs[ci].name)) continue;
    if (!cfg_ok[ci]) {
      printf("doorbell %-13s (failed)\n", configs[ci].name);
      continue;
    }
    for (int i = 0; i < NLAT; i++) fmt_lat(b[i], sizeof b[i], res[ci].lat[i]);
    for (int i = 0; i < NBW; i++) fmt_lat(b[NLAT + i], sizeof b[i], res[ci].bw[i]);
    printf("doorbell %-13s %9s %9s %9s %9s | %9s %9s %9s\n", configs[ci].name, b[0], b[1], b[2], b[3],
           b[4], b[5], b[6]);
  }
  if (do_floors) {
    print_floor_row(do_core ? "floors at start" : "floors pass 1", &f1);
    print_floor_row(do_core ? "floors at end" : "floors pass 2", &f2);
  }

  /* Ratios.  Floor of an S-byte shm one-way latency = the wake floor of the
   * mode (cache line for poll/adaptive, futex for block) + S / memcpy
   * bandwidth (one copy); shm bandwidth floor = memcpy; TCP floors = the bare
   * socket at the same size. */
  if (do_floors && do_core && spin > 0 && futex > 0 && mcpy > 0 && tcp_ok) {
    printf("\nratio to floor (latency: lower is better; bandwidth: higher is better)\n"
           "  floors: shm latency = cache-line (poll, adaptive) or gap-free futex (block) one-way + size / memcpy;\n"
           "          shm bandwidth = memcpy; tcp = the bare socket at the same size, busy-polled (poll)\n"
           "          or blocking (block)\n");
    printf("%-22s %9s %9s %9s %9s | %9s %9s %9s\n", "", "8 B", "1 KiB", "64 KiB", "1 MiB", "bw 64 KiB",
           "1 MiB", "4 MiB");
    for (int ci = 0; ci < NCONFIG; ci++) {
      if (!cfg_ok[ci]) continue;
      const struct config *c = &configs[ci];
      double r[NLAT + NBW];
      for (int i = 0; i < NLAT; i++) {
        double fl = c->tcp ? (c->mode == DOORBELL_WAIT_POLL ? tf.lat_poll[i] : tf.lat[i])
                           : (c->mode == DOORBELL_WAIT_BLOCK ? futex : spin) + (double)lat_sizes[i] / (mcpy * 1e3);
        r[i] = res[ci].lat[i] / fl;
      }
      for (int i = 0; i < NBW; i++) r[NLAT + i] = res[ci].bw[i] / (c->tcp ? tf.bw[i] : mcpy);
      printf("doorbell %-13s", c->name);
      for (int i = 0; i < NLAT + NBW; i++) printf(i == NLAT ? " | %8.*fx" : " %8.*fx", r[i] < 0.1 ? 3 : 2, r[i]);
      printf("\n");
    }
  }

  if (do_core) {
    printf("\npaired floors: the bare transfer between the configuration's own two pinned processes, run right\n"
           "  before each repetition (median); ratio = median of the per-repetition ratios.  Latency floor =\n"
           "  size / memcpy + the mode's bare wake-up: a spinning cache line (shm poll, adaptive), a gap-free\n"
           "  futex ping-pong that sleeps every hop (shm block); or the bare loopback socket at the same size,\n"
           "  busy-polled with MSG_DONTWAIT (tcp poll) or blocking (tcp block).  Bandwidth floor = a bare\n"
           "  two-slot copy pipeline, one copy per side (shm) or the bare socket stream (tcp)\n");
    printf("%-22s %9s %9s %9s %9s | %9s %9s %9s\n", "", "8 B", "1 KiB", "64 KiB", "1 MiB", "bw 64 KiB", "1 MiB",
           "4 MiB");
    printf("%-22s %9s %9s %9s %9s | %9s %9s %9s\n", "", "us", "us", "us", "us", "GB/s", "GB/s", "GB/s");
    for (int ci = 0; ci < NCONFIG; ci++) {
      const struct config *c = &configs[ci];
      if (!cfg_ok[ci] || c->pair == PAIR_NONE) continue;
      char name[40];
      snprintf(name, sizeof name, "%s floor", c->name);
      printf("%-22s", name);
      for (int i = 0; i < NLAT; i++) printf(" %9.3f", median_row(res[ci].pair_floor[i]));
      printf(" |");
      for (int i = 0; i < NBW; i++) printf(" %9.2f", median_row(res[ci].pair_bw_floor[i]));
      printf("\n%-22s", "  doorbell / floor");
      for (int i = 0; i < NLAT; i++) {
        double x = pair_extra_us(c, i, mcpy), r = x < 0 ? -1 : median_ratio(res[ci].pair_db[i], res[ci].pair_floor[i], x);
        if (r < 0) printf(" %9s", "-");
        else printf(" %8.2fx", r);
      }
      printf(" |");
      for (int i = 0; i < NBW; i++) {
        double r = median_ratio(res[ci].pair_bw_db[i], res[ci].pair_bw_floor[i], 0);
        if (r < 0) printf(" %9s", "-");
        else printf(" %8.2fx", r);
      }
      printf("\n");
    }
    /* Block mode: did both sides really sleep, in the floor and in doorbell? */
    for (int ci = 0; ci < NCONFIG; ci++) {
      const struct config *c = &configs[ci];
      const struct db_page *pg = &res[ci];
      if (!cfg_ok[ci] || c->pair != PAIR_FUTEX) continue;
      struct futex_stats fx = pg->pair_fx[0];
      futex_stats_add(&fx, &pg->pair_fx[1]);
      printf("%s paired futex floor: %lu of %lu FUTEX_WAITs slept (%lu EAGAIN, %lu spurious); %lu of %lu "
             "FUTEX_WAKEs found the peer not yet asleep and were retried (it was still returning from its own wake call)\n",
             c->name, fx.slept, fx.waits, fx.eagain, fx.spurious, fx.wake_misses, fx.wakes);
      for (int i = 0; i < NLAT; i++) {
        int a = i * g_reps, b = a + g_reps;
        char resp[64] = "?";
        if (b < pg->resp_nfloor)
          snprintf(resp, sizeof resp, "%llu", (unsigned long long)(pg->resp_wakeups[b] - pg->resp_wakeups[a]));
        printf("%s doorbell %zu B, timed round trips %llu: initiator slept %llu times, responder %s "
               "(incl. <= %d waits for floor commands)\n", c->name, lat_sizes[i],
               (unsigned long long)pg->lat_rounds[i], (unsigned long long)pg->lat_wakeups[i], resp, g_reps);
      }
    }
  }

  if (do_core) {
    printf("\ndoorbell counters per configuration (task 0 = initiator, task 1 = responder)\n");
    printf("%-19s %4s %10s %10s %9s %9s %9s %9s %9s %9s\n", "config", "task", "notif.sent", "notif.skip",
           "wakeups", "spurious", "shm sent", "shm recv", "tcp sent", "tcp recv");
    for (int ci = 0; ci < NCONFIG; ci++) {
      if (!cfg_ran[ci]) continue;
      for (int i = 0; i < 2; i++) {
        const doorbell_counters *k = &res[ci].ctr[i];
        char name[32];
        snprintf(name, sizeof name, "%s%s", configs[ci].name, cfg_ok[ci] ? "" : " FAILED");
        printf("%-19s %4d %10llu %10llu %9llu %9llu %9llu %9llu %9llu %9llu\n", i ? "" : name, i,
               (unsigned long long)k->notifies_sent, (unsigned long long)k->notifies_skipped,
               (unsigned long long)k->wakeups, (unsigned long long)k->spurious_wakeups,
               (unsigned long long)k->shm_sent, (unsigned long long)k->shm_received,
               (unsigned long long)k->tcp_sent, (unsigned long long)k->tcp_received);
      }
    }
  }

  /* Targets: reported; counted as pass/fail only with STRICT=1. */
  if (do_floors && do_core) {
    printf("\ntargets%s\n", strict ? " (STRICT=1: a miss is a failure)" : " (informational; STRICT=1 makes a miss fail)");
    struct {
      int ci;
      int lat;     /* 1: latency index, else bandwidth index */
      int idx;
      double floor;
      double limit;
      const char *floor_name;
      int paired;  /* judged against the paired floor (start/end ratio shown beside it) */
    } tg[] = {
        {0, 1, 0, spin, 3.0, "cache-line floor", 1},
        {1, 1, 0, futex, 1.5, "gap-free futex floor", 1},
        {0, 0, 2, mcpy, 0.5, "memcpy", 0},
        {1, 0, 2, mcpy, 0.5, "memcpy", 0},
        {2, 0, 2, mcpy, 0.5, "memcpy", 0},
        {3, 1, 0, tf.lat_poll[0], 1.3, "busy-polled TCP", 1},
        {4, 1, 0, tf.lat[0], 1.3, "blocking TCP", 1},
    };
    for (size_t i = 0; i < sizeof tg / sizeof tg[0]; i++) {
      const char *name = configs[tg[i].ci].name;
      if (!cfg_ran[tg[i].ci]) continue;
      int have = cfg_ok[tg[i].ci] && tg[i].floor > 0;
      double v = !have ? 0 : tg[i].lat ? res[tg[i].ci].lat[tg[i].idx] : res[tg[i].ci].bw[tg[i].idx];
      double ratio = have ? v / tg[i].floor : 0;
      double unpaired = ratio, pfloor = 0;
      if (have && tg[i].paired) {
        const struct config *c = &configs[tg[i].ci];
        const struct db_page *pg = &res[tg[i].ci];
        pfloor = median_row(pg->pair_floor[tg[i].idx]);
        ratio = median_ratio(pg->pair_db[tg[i].idx], pg->pair_floor[tg[i].idx], pair_extra_us(c, tg[i].idx, mcpy));
        have = ratio > 0;
      }
      int met = have && (tg[i].lat ? ratio <= tg[i].limit : ratio >= tg[i].limit);
      char line[256];
      if (tg[i].lat && tg[i].paired)
        snprintf(line, sizeof line, "%s 8 B latency %.3f us = %.2fx paired %s %.3f us (target <= %.1fx; "
                 "%.2fx the start/end floor)", name, v, ratio, tg[i].floor_name, pfloor, tg[i].limit, unpaired);
      else if (tg[i].lat)
        snprintf(line, sizeof line, "%s 8 B latency %.3f us = %.2fx %s (target <= %.1fx)", name, v, ratio,
                 tg[i].floor_name, tg[i].limit);
      else if (have && configs[tg[i].ci].pair != PAIR_NONE)
        snprintf(line, sizeof line, "%s 4 MiB bandwidth %.2f GB/s = %.2fx %s (target >= %.1fx; %.2fx the paired "
                 "two-process copy %.2f GB/s)", name, v, ratio, tg[i].floor_name, tg[i].limit,
                 median_ratio(res[tg[i].ci].pair_bw_db[tg[i].idx], res[tg[i].ci].pair_bw_floor[tg[i].idx], 0),
                 median_row(res[tg[i].ci].pair_bw_floor[tg[i].idx]));
      else
        snprintf(line, sizeof line, "%s 4 MiB bandwidth %.2f GB/s = %.2fx %s (target >= %.1fx)", name, v, ratio,
                 tg[i].floor_name, tg[i].limit);
      if (!have) snprintf(line, sizeof line, "%s: no figure (the configuration failed)", name);
      if (strict) result_line(met, "target %s", line);
      else if (have) printf("target %s: %s\n", met ? "met   " : "MISSED", line);
      else printf("target MISSED: %s: no figure (the configuration failed)\n", name);
    }
  }

  printf("\n%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
