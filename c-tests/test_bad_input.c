/* Test 5: bad input.  Every item returns its documented code and the process
 * stays healthy (a real exchange with a peer still works afterwards).
 *
 * Scenario A (private shm_dir under /dev/shm):
 *   t0 tester (node 1): bad configs, bad address buffers, malformed blobs
 *      (truncated, random, wrong magic), another job's blob (a peer id of its
 *      own), unknown task, unknown
 *      window, oversize and (size_t)-1 lengths, then strangers sending garbage
 *      and the old protocol's hello (tasks 0, 1, 9999) with forged frames
 *      to every TCP port its process listens on (found via /proc/self/fd and
 *      /proc/net/tcp{,6});
 *   t1 TCP peer (node 2): answers "ping" with "pong" all along;
 *   t2 an endpoint of another job: only its blob is used;
 *   t3 a TCP peer (node 4) that makes first contact only after the strangers:
 *      the listener must still accept real peers.
 * Scenario B (private mount namespace): shm_dir is a full tmpfs; B1 is 64 KiB:
 *   endpoint_create, connect or the first send must return
 *   DOORBELL_ERR_NO_SHM_SPACE (not crash with SIGBUS).  (Room for the
 *   endpoints and little else: test_shm_full.c.)
 * Afterwards no file is left in either shm_dir nor under the job key in
 * /dev/shm. */
#include "dbt.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXMSG 65536u

static char *g_shm_a;

/* ------------------------------------------------------------ receiving */

struct inbox {
  int n;
  struct {
    uint32_t task, window;
    uint8_t tag;
    size_t len;
    uint8_t data[96];
    uint64_t sum;
  } m[64];
};

static uint64_t sum_bytes(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void to_inbox(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                     size_t len) {
  struct inbox *in = ctx;
  if (in->n >= 64) return;
  in->m[in->n].task = task;
  in->m[in->n].window = window;
  in->m[in->n].tag = tag;
  in->m[in->n].len = len;
  memcpy(in->m[in->n].data, data, len < 96 ? len : 96);
  in->m[in->n].sum = sum_bytes(data, len);
  in->n++;
}

/* Wait on `window` until a message whose text starts with `prefix` from task
 * `from` arrives (others are kept in *in).  Returns its index or -1. */
static int wait_for(doorbell_endpoint *ep, uint32_t window, struct inbox *in, uint32_t from,
                    const char *prefix, double timeout_s) {
  double t0 = dbt_now();
  for (;;) {
    for (int i = 0; i < in->n; i++)
      if (in->m[i].task == from && in->m[i].len >= strlen(prefix) &&
          !memcmp(in->m[i].data, prefix, strlen(prefix))) {
        return i;
      }
    if (dbt_now() - t0 > timeout_s) return -1;
    doorbell_wake wake;
    int rc = doorbell_wait(ep, window, DOORBELL_WAIT_BLOCK, 200000, to_inbox, in, &wake);
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "wait for \"%s\" from task %u", prefix, from);
      return -1;
    }
  }
}

static int ping(doorbell_endpoint *ep, uint32_t peer, int n, const char *when) {
  struct inbox in = {0};
  char msg[32], want[32];
  snprintf(msg, sizeof msg, "ping%d", n);
  snprintf(want, sizeof want, "pong%d", n);
  uint32_t w0 = 0;
  int rc = dbt_send_retry(ep, peer, 0, 1, msg, strlen(msg), &w0, 1, to_inbox, &in, NULL);
  if (rc == DOORBELL_OK) rc = dbt_drain(ep, &w0, 1, to_inbox, &in, 10);
  int got = rc == DOORBELL_OK ? wait_for(ep, 0, &in, peer, want, 20) : -1;
  return dbt_check(got >= 0, "%s: ping/pong with TCP peer task %u works (send rc %d)", when, peer,
                   rc);
}

/* The peers' loop: answer pings, join a barrier on "sync", stop on "bye".
 * One inbox for waits and drains alike, so no message is dropped. */
static struct inbox g_in; /* what a peer received and has not handled yet */

static int responder(doorbell_endpoint *ep) {
  struct inbox *in = &g_in;
  int done = 0;
  double t0 = dbt_now();
  uint32_t w0 = 0;
  while (dbt_now() - t0 < 150) {
    if (done == in->n) {
      in->n = done = 0;
      doorbell_wake wake;
      int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 1000000, to_inbox, in, &wake);
      if (rc < 0) {
        dbt_check_rc(rc, DOORBELL_OK, "responder wait");
        return 1;
      }
      continue;
    }
    uint32_t from = in->m[done].task;
    size_t len = in->m[done].len;
    char d[96];
    memcpy(d, in->m[done].data, len < 96 ? len : 96);
    done++;
    if (len >= 4 && !memcmp(d, "ping", 4)) {
      char pong[40];
      snprintf(pong, sizeof pong, "pong%.*s", (int)(len - 4 < 30 ? len - 4 : 30), d + 4);
      int rc = dbt_send_retry(ep, from, 0, 2, pong, strlen(pong), &w0, 1, to_inbox, in, NULL);
      if (rc == DOORBELL_OK) rc = dbt_drain(ep, &w0, 1, to_inbox, in, 10);
      if (rc != DOORBELL_OK) dbt_check_rc(rc, DOORBELL_OK, "send pong");
    } else if (len == 4 && !memcmp(d, "sync", 4)) {
      dbt_barrier();
    } else if (len == 3 && !memcmp(d, "bye", 3)) {
      return 0;
    }
  }
  dbt_check(0, "responder never got \"bye\"");
  return 1;
}

/* ------------------------------------------------------------ strangers */

/* Listening TCP sockets owned by this process: inodes from /proc/self/fd,
 * states and addresses from /proc/net/tcp and tcp6. */
static int listen_addrs(struct sockaddr_storage *out, int max) {
  unsigned long inodes[256];
  int ni = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d)) && ni < 256) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, link, sizeof link - 1);
    if (l <= 0) continue;
    link[l] = 0;
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ni++] = ino;
  }
  if (d) closedir(d);
  int n = 0;
  for (int v6 = 0; v6 < 2; v6++) {
    FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
    if (!f) continue;
    char line[512];
    if (!fgets(line, sizeof line, f)) {
      fclose(f);
      continue;
    }
    while (fgets(line, sizeof line, f) && n < max) {
      char addr[40];
      unsigned port, st;
      unsigned long ino;
      if (sscanf(line, " %*d: %39[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu",
                 addr, &port, &st, &ino) != 4 || st != 0x0A)
        continue;
      int mine = 0;
      for (int i = 0; i < ni; i++) mine |= inodes[i] == ino;
      if (!mine) continue;
      memset(&out[n], 0, sizeof out[n]);
      if (!v6) {
        struct sockaddr_in *a = (struct sockaddr_in *)&out[n];
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        /* The kernel prints the raw 32-bit word in host order. */
        a->sin_addr.s_addr = (uint32_t)strtoul(addr, NULL, 16);
        if (a->sin_addr.s_addr == 0) a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out[n];
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        int zero = 1;
        for (int k = 0; k < 4; k++) {
          char word[9];
          memcpy(word, addr + 8 * k, 8);
          word[8] = 0;
          uint32_t w = (uint32_t)strtoul(word, NULL, 16);
          memcpy(&a->sin6_addr.s6_addr[4 * k], &w, 4);
          zero &= w == 0;
        }
        if (zero) a->sin6_addr = in6addr_loopback;
      }
      n++;
    }
    fclose(f);
  }
  return n;
}

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const void *)ss;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = ntohs(a->sin_port);
  } else {
    const struct sockaddr_in6 *a = (const void *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  }
  snprintf(buf, len, "%s port %u", ip, port);
  return buf;
}

static int stranger(const struct sockaddr_storage *ss, const void *data, size_t len, int keep) {
  int fd = socket(ss->ss_family, SOCK_STREAM, 0);
  socklen_t sl = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  if (fd < 0 || connect(fd, (const struct sockaddr *)ss, sl) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  if (len && send(fd, data, len, MSG_NOSIGNAL) < 0) {
    close(fd);
    return -1;
  }
  if (!keep) {
    close(fd);
    return 0;
  }
  return fd;
}

/* What a stranger could send with the old protocol:
 * its hello (24 B: "DOORBELL", version 1, task, FNV-1a of the job key, which
 * anyone who sees /dev/shm names can compute), then a message frame for
 * window 0 and a goodbye frame (16 B headers: len, window, tag, kind). */
static size_t old_hello_and_forgery(uint8_t *out, uint32_t task) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *k = dbt_jobkey(); *k; k++) h = (h ^ (uint8_t)*k) * 0x100000001b3ull;
  uint32_t version = 1;
  size_t n = 0;
  memcpy(out + n, "DOORBELL", 8), n += 8;
  memcpy(out + n, &version, 4), n += 4;
  memcpy(out + n, &task, 4), n += 4;
  memcpy(out + n, &h, 8), n += 8;
  uint8_t frame[16] = {6, 0, 0, 0, 0, 0, 0, 0, /* window */ 0, 0, 0, 0, /* tag */ 66, /* kind */ 0, 0, 0};
  memcpy(out + n, frame, 16), n += 16;
  memcpy(out + n, "FORGED", 6), n += 6;
  uint8_t bye[16] = {0};
  bye[13] = 1;
  memcpy(out + n, bye, 16), n += 16;
  return n;
}

static void strangers(doorbell_endpoint *ep, uint32_t peer, int *held, int *nheld) {
  struct sockaddr_storage addrs[16];
  int n = listen_addrs(addrs, 16);
  dbt_check(n > 0, "the endpoint's process listens on %d TCP port(s)", n);
  doorbell_counters c0;
  dbt_check_rc(doorbell_counters_get(ep, &c0), DOORBELL_OK, "counters before the strangers");
  uint8_t junk[4096];
  dbt_fill(junk, sizeof junk, 0xbadbad);
  uint8_t ones[64];
  memset(ones, 0xff, sizeof ones);
  static const char http[] = "GET / HTTP/1.0\r\n\r\n";
  for (int i = 0; i < n; i++) {
    char s[80];
    addr_str(&addrs[i], s, sizeof s);
    int fd = stranger(&addrs[i], junk, sizeof junk, 1); /* garbage, left open */
    if (fd >= 0) held[(*nheld)++] = fd;
    int ok = fd >= 0;
    ok &= stranger(&addrs[i], ones, sizeof ones, 0) == 0;          /* garbage, closed */
    ok &= stranger(&addrs[i], http, sizeof http - 1, 0) == 0;      /* wrong protocol */
    dbt_check(ok, "strangers connected to %s and sent garbage", s);
    /* The old hello for this task, the real peer and a task that is none. */
    static const uint32_t claims[] = {0, 1, 9999};
    for (int k = 0; k < 3; k++) {
      uint8_t forged[128];
      size_t n = old_hello_and_forgery(forged, claims[k]);
      int kept = stranger(&addrs[i], forged, n, 1);
      dbt_check(kept >= 0, "stranger sent the old hello for task %u and forged frames to %s", claims[k], s);
      if (kept >= 0) held[(*nheld)++] = kept;
    }
  }
  /* Rejection happens on the endpoint's side: give it a moment and progress. */
  doorbell_counters c1 = c0;
  double t0 = dbt_now();
  struct inbox none = {0};
  int lost = 0;
  while ((c1.strangers_rejected <= c0.strangers_rejected || dbt_now() - t0 < 1) && dbt_now() - t0 < 5) {
    doorbell_wake wake = {0};
    doorbell_progress(ep, 0, to_inbox, &none, &wake);
    lost += wake.reason == DOORBELL_WOKE_PEER_LOST;
    usleep(10000);
    doorbell_counters_get(ep, &c1);
  }
  dbt_check(lost == 0, "no stranger was reported as a lost peer (%d reports)", lost);
  dbt_check(c1.strangers_rejected > c0.strangers_rejected,
            "counters.strangers_rejected increased (%lu -> %lu)",
            (unsigned long)c0.strangers_rejected, (unsigned long)c1.strangers_rejected);
  dbt_check(none.n == 0, "no message came out of the garbage or the forged frames (%d)", none.n);
  ping(ep, peer, 2, "after the strangers (one still connected)");
}

/* ------------------------------------------------------------ t0 checks */

static void bad_configs(void) {
  doorbell_config c;
  doorbell_endpoint *ep = NULL;
  dbt_check_rc(doorbell_config_init(NULL), DOORBELL_ERR_INVALID_ARGUMENT, "config_init(NULL)");
  dbt_check_rc(doorbell_batch_end(), DOORBELL_ERR_INVALID_ARGUMENT, "batch_end with no batch open");
  dbt_check_rc(doorbell_batch_begin(), DOORBELL_OK, "batch_begin");
  dbt_check_rc(doorbell_batch_end(), DOORBELL_OK, "batch_end of the open batch");
  dbt_check_rc(doorbell_batch_end(), DOORBELL_ERR_INVALID_ARGUMENT, "a second batch_end");
  dbt_check_rc(doorbell_config_init(&c), DOORBELL_OK, "config_init");
  dbt_check(c.task == 0 && c.node_id == 0 && c.job && !strcmp(c.job, "doorbell"),
            "config_init defaults: task 0, node_id 0, job \"doorbell\"");
  dbt_check_rc(doorbell_endpoint_create(NULL, &ep), DOORBELL_ERR_INVALID_ARGUMENT,
               "endpoint_create(NULL config)");
  dbt_config(&c, 0, 1);
  c.shm_dir = g_shm_a;
  dbt_check_rc(doorbell_endpoint_create(&c, NULL), DOORBELL_ERR_INVALID_ARGUMENT,
               "endpoint_create(NULL out)");

  struct {
    const char *what;
    int field;
    uint64_t val;
    const char *str;
    int want;
  } cases[] = {
      {"job \"\"", 0, 0, "", DOORBELL_ERR_INVALID_ARGUMENT},
      {"job \"a/b\" (path separator)", 0, 0, "a/b", DOORBELL_ERR_INVALID_ARGUMENT},
      {"job \"..\"-escape", 0, 0, "../../etc", DOORBELL_ERR_INVALID_ARGUMENT},
      {"job with a space", 0, 0, "a b", DOORBELL_ERR_INVALID_ARGUMENT},
      {"job of 41 characters", 0, 0, "abcdefghijabcdefghijabcdefghijabcdefghijX",
       DOORBELL_ERR_INVALID_ARGUMENT},
      {"task == DOORBELL_MAX_TASKS", 1, DOORBELL_MAX_TASKS, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"ring_bytes 3000 (not a power of 2)", 2, 3000, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"ring_bytes 2048 (< 4 KiB)", 2, 2048, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"ring_bytes 2 GiB (> 1 GiB)", 2, 0x80000000u, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"wait_mode 9", 3, 9, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"max_message 4 GiB (> 4 GiB - 1)", 4, 1ull << 32, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"port_min > port_max", 5, 0, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
      {"if_include names no interface", 6, 0, "dbt-no-such-if0", DOORBELL_ERR_NO_INTERFACE},
      {"if_include CIDR matches no address", 6, 0, "203.0.113.0/24", DOORBELL_ERR_NO_INTERFACE},
      {"bulk_max_bytes 2 GiB (> 1 GiB)", 7, 0x80000000u, NULL, DOORBELL_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dbt_config(&c, 0, 1);
    c.shm_dir = g_shm_a;
    switch (cases[i].field) {
    case 0: c.job = cases[i].str; break;
    case 1: c.task = (uint32_t)cases[i].val; break;
    case 2: c.ring_bytes = (uint32_t)cases[i].val; break;
    case 3: c.wait_mode = (uint32_t)cases[i].val; break;
    case 4: c.max_message = cases[i].val; break;
    case 5: c.port_min = 40010; c.port_max = 40000; break;
    case 6: c.if_include = cases[i].str; break;
    case 7: c.bulk_max_bytes = (uint32_t)cases[i].val; break;
    }
    ep = NULL;
    int rc = doorbell_endpoint_create(&c, &ep);
    dbt_check_rc(rc, cases[i].want, "endpoint_create with %s", cases[i].what);
    if (rc == DOORBELL_OK) doorbell_endpoint_destroy(ep);
  }
}

static void bad_blobs(doorbell_endpoint *ep, const dbt_peer *peers) {
  const dbt_peer *p1 = &peers[1], *foreign = &peers[2];
  uint32_t t = 12345;
  dbt_check_rc(doorbell_connect(ep, NULL, p1->len, &t), DOORBELL_ERR_INVALID_ARGUMENT,
               "connect(NULL blob)");
  dbt_check_rc(doorbell_connect(NULL, p1->blob, p1->len, &t), DOORBELL_ERR_INVALID_ARGUMENT,
               "connect(NULL endpoint)");
  /* Every truncation of a valid blob. */
  int bad = 0;
  for (uint32_t l = 0; l < p1->len; l++) {
    int rc = doorbell_connect(ep, p1->blob, l, &t);
    int ok = rc == DOORBELL_ERR_BAD_ADDRESS || (l == 0 && rc == DOORBELL_ERR_INVALID_ARGUMENT);
    if (!ok && bad++ < 3) dbt_info("  truncated to %u bytes -> %d (%s)", l, rc, doorbell_error_string(rc));
  }
  dbt_check(bad == 0, "connect with the blob truncated to each of 0..%u bytes -> BAD_ADDRESS "
            "(%d wrong)", p1->len - 1, bad);
  /* Random bytes, of random and of the right length. */
  bad = 0;
  uint8_t junk[DOORBELL_ADDRESS_MAX];
  for (int i = 0; i < 300; i++) {
    size_t l = i < 100 ? p1->len : 1 + (size_t)(dbt_mix((uint64_t)i) % DOORBELL_ADDRESS_MAX);
    dbt_fill(junk, l, 0xabc000u + (uint64_t)i);
    int rc = doorbell_connect(ep, junk, l, &t);
    if (rc != DOORBELL_ERR_BAD_ADDRESS && bad++ < 3)
      dbt_info("  random blob #%d (%zu bytes) -> %d (%s)", i, l, rc, doorbell_error_string(rc));
  }
  dbt_check(bad == 0, "connect with 300 random blobs -> BAD_ADDRESS (%d wrong)", bad);
  /* Wrong magic. */
  uint8_t b[DOORBELL_ADDRESS_MAX];
  memcpy(b, p1->blob, p1->len);
  b[0] ^= 0xff;
  dbt_check_rc(doorbell_connect(ep, b, p1->len, &t), DOORBELL_ERR_BAD_ADDRESS,
               "connect with the first byte of the blob flipped (magic)");
  memcpy(b, p1->blob, p1->len);
  memcpy(b, "XXXX", 4);
  dbt_check_rc(doorbell_connect(ep, b, p1->len, &t), DOORBELL_ERR_BAD_ADDRESS,
               "connect with the first 4 bytes of the blob replaced (magic)");
  /* Another job's blob: a peer with an id of its own, not its task id
   * (two jobs both have a task 2). */
  if (dbt_check(foreign->rc == DOORBELL_OK, "the foreign-job task produced a blob")) {
    uint32_t again = 0;
    t = 12345;
    int rc1 = doorbell_connect(ep, foreign->blob, foreign->len, &t);
    int rc2 = doorbell_connect(ep, foreign->blob, foreign->len, &again);
    dbt_check(rc1 == DOORBELL_OK && rc2 == DOORBELL_OK && t >= DOORBELL_MAX_TASKS &&
                  t < DOORBELL_MAX_PEERS && again == t,
              "connect with a blob of another job -> OK, a peer id in [MAX_TASKS, MAX_PEERS), "
              "the same again (%d %d, %u %u)", rc1, rc2, t, again);
    dbt_check_rc(doorbell_peer_path(ep, t), DOORBELL_PATH_TCP,
                 "the other job's task (another node) is reached over TCP");
  }
  dbt_check_rc(doorbell_peer_path(ep, foreign->task), DOORBELL_ERR_UNKNOWN_TASK,
               "the other job's task id names no peer here (peer_path)");
  /* And a good one still works, idempotently. */
  t = 12345;
  int rc = doorbell_connect(ep, p1->blob, p1->len, &t);
  dbt_check(rc == DOORBELL_OK && t == 1, "connect with t1's valid blob again -> OK, task 1 (%d, %u)",
            rc, t);
}

static void bad_tasks_windows_lengths(doorbell_endpoint *ep) {
  static uint8_t buf[MAXMSG + 16];
  dbt_fill(buf, sizeof buf, 77);
  /* Self-connect so task 0 is a known peer whose windows we know. */
  uint8_t blob[DOORBELL_ADDRESS_MAX];
  size_t blen = sizeof blob;
  uint32_t t = 12345;
  dbt_check_rc(doorbell_address(ep, blob, &blen), DOORBELL_OK, "address");
  int rc = doorbell_connect(ep, blob, blen, &t);
  dbt_check(rc == DOORBELL_OK && t == 0, "connect to itself -> OK, task 0 (%d, %u)", rc, t);

  /* Unknown tasks. */
  dbt_check_rc(doorbell_send(ep, 7, 0, 0, buf, 8), DOORBELL_ERR_UNKNOWN_TASK, "send to task 7 (never connected)");
  dbt_check_rc(doorbell_send(ep, 3, 0, 0, buf, 8), DOORBELL_ERR_UNKNOWN_TASK, "send to task 3 (blob seen, not connected yet)");
  dbt_check_rc(doorbell_send(ep, DOORBELL_MAX_TASKS, 0, 0, buf, 8), DOORBELL_ERR_UNKNOWN_TASK,
               "send to task DOORBELL_MAX_TASKS");
  dbt_check_rc(doorbell_send(ep, UINT32_MAX, 0, 0, buf, 8), DOORBELL_ERR_UNKNOWN_TASK, "send to task UINT32_MAX");
  dbt_check_rc(doorbell_peer_path(ep, 7), DOORBELL_ERR_UNKNOWN_TASK, "peer_path(task 7)");
  dbt_check_rc(doorbell_local_notify(ep, 7, 0), DOORBELL_ERR_UNKNOWN_TASK, "local_notify(task 7)");
  doorbell_iovec iv1 = {buf, 8};
  dbt_check_rc(doorbell_sendv(ep, 7, 0, 0, &iv1, 1), DOORBELL_ERR_UNKNOWN_TASK, "sendv to task 7");
  dbt_check_rc(doorbell_send2(ep, 7, 0, 0, buf, 8, buf, 8), DOORBELL_ERR_UNKNOWN_TASK, "send2 to task 7");
  dbt_check_rc(doorbell_send2(ep, 0, 5, 0, buf, 8, NULL, 0), DOORBELL_ERR_UNKNOWN_WINDOW, "send2 to own window 5 (not open)");

  /* Unknown windows. */
  dbt_check_rc(doorbell_send(ep, 0, 5, 0, buf, 8), DOORBELL_ERR_UNKNOWN_WINDOW, "send to own window 5 (not open)");
  dbt_check_rc(doorbell_send(ep, 0, DOORBELL_MAX_WINDOWS, 0, buf, 8), DOORBELL_ERR_UNKNOWN_WINDOW,
               "send to own window DOORBELL_MAX_WINDOWS");
  dbt_check_rc(doorbell_send(ep, 1, DOORBELL_MAX_WINDOWS, 0, buf, 8), DOORBELL_ERR_UNKNOWN_WINDOW,
               "send to t1's window DOORBELL_MAX_WINDOWS");
  dbt_check_rc(doorbell_send(ep, 1, UINT32_MAX, 0, buf, 8), DOORBELL_ERR_UNKNOWN_WINDOW, "send to t1's window UINT32_MAX");
  doorbell_wake wake;
  struct inbox junk = {0};
  dbt_check_rc(doorbell_progress(ep, 5, to_inbox, &junk, &wake), DOORBELL_ERR_UNKNOWN_WINDOW, "progress(window 5)");
  dbt_check_rc(doorbell_progress(ep, DOORBELL_MAX_WINDOWS, to_inbox, &junk, &wake), DOORBELL_ERR_UNKNOWN_WINDOW,
               "progress(window DOORBELL_MAX_WINDOWS)");
  dbt_check_rc(doorbell_wait(ep, 5, DOORBELL_WAIT_BLOCK, 1000, to_inbox, &junk, &wake), DOORBELL_ERR_UNKNOWN_WINDOW,
               "wait(window 5)");
  dbt_check_rc(doorbell_local_notify(ep, 0, 5), DOORBELL_ERR_UNKNOWN_WINDOW, "local_notify(self, window 5)");
  dbt_check_rc(doorbell_work_pending(ep, 5), DOORBELL_ERR_UNKNOWN_WINDOW, "work_pending(window 5)");
  dbt_check_rc(doorbell_work_pending(ep, UINT32_MAX), DOORBELL_ERR_UNKNOWN_WINDOW, "work_pending(window UINT32_MAX)");
  dbt_check_rc(doorbell_progress_local(ep, 5, to_inbox, &junk), DOORBELL_ERR_UNKNOWN_WINDOW, "progress_local(window 5)");

  /* Lengths (max_message is 64 KiB here). */
  dbt_check_rc(doorbell_send(ep, 0, 0, 0, buf, MAXMSG + 1), DOORBELL_ERR_BAD_LENGTH, "send max_message + 1 bytes to self");
  dbt_check_rc(doorbell_send(ep, 0, 0, 0, buf, (size_t)-1), DOORBELL_ERR_BAD_LENGTH, "send (size_t)-1 bytes to self");
  dbt_check_rc(doorbell_send(ep, 0, 0, 0, buf, SIZE_MAX / 2), DOORBELL_ERR_BAD_LENGTH, "send SIZE_MAX/2 bytes to self");
  dbt_check_rc(doorbell_send(ep, 0, 0, 0, buf, (size_t)1 << 32), DOORBELL_ERR_BAD_LENGTH, "send 4 GiB to self");
  dbt_check_rc(doorbell_send(ep, 1, 0, 0, buf, MAXMSG + 1), DOORBELL_ERR_BAD_LENGTH, "send max_message + 1 bytes to t1 (tcp)");
  dbt_check_rc(doorbell_send(ep, 1, 0, 0, buf, (size_t)-1), DOORBELL_ERR_BAD_LENGTH, "send (size_t)-1 bytes to t1 (tcp)");
  doorbell_iovec big[2] = {{buf, 40000}, {buf, 40000}};
  dbt_check_rc(doorbell_sendv(ep, 0, 0, 0, big, 2), DOORBELL_ERR_BAD_LENGTH, "sendv of 2 x 40000 bytes");
  /* Pieces whose sum wraps around: a length check on the sum alone passes. */
  doorbell_iovec wrap1[2] = {{buf, SIZE_MAX}, {buf, 2}};
  dbt_check_rc(doorbell_sendv(ep, 0, 0, 0, wrap1, 2), DOORBELL_ERR_BAD_LENGTH, "sendv {SIZE_MAX, 2} (sum wraps to 1)");
  doorbell_iovec wrap0[2] = {{buf, SIZE_MAX / 2 + 1}, {buf, SIZE_MAX / 2 + 1}};
  dbt_check_rc(doorbell_sendv(ep, 1, 0, 0, wrap0, 2), DOORBELL_ERR_BAD_LENGTH, "sendv to t1 {2^63, 2^63} (sum wraps to 0)");
  dbt_check_rc(doorbell_send2(ep, 0, 0, 0, buf, 40000, buf, 40000), DOORBELL_ERR_BAD_LENGTH, "send2 of 2 x 40000 bytes");
  dbt_check_rc(doorbell_send2(ep, 0, 0, 0, buf, SIZE_MAX, buf, 2), DOORBELL_ERR_BAD_LENGTH, "send2 (SIZE_MAX, 2) (sum wraps to 1)");
  dbt_check_rc(doorbell_send2(ep, 1, 0, 0, buf, SIZE_MAX / 2 + 1, buf, SIZE_MAX / 2 + 1), DOORBELL_ERR_BAD_LENGTH,
               "send2 to t1 (2^63, 2^63) (sum wraps to 0)");

  /* NULL pointers and bad modes. */
  dbt_check_rc(doorbell_send(ep, 0, 0, 0, NULL, 10), DOORBELL_ERR_INVALID_ARGUMENT, "send(NULL data, 10 bytes)");
  dbt_check_rc(doorbell_sendv(ep, 0, 0, 0, NULL, 2), DOORBELL_ERR_INVALID_ARGUMENT, "sendv(NULL iov, 2)");
  dbt_check_rc(doorbell_send2(ep, 0, 0, 0, NULL, 4, buf, 4), DOORBELL_ERR_INVALID_ARGUMENT, "send2(NULL first piece, 4 bytes)");
  dbt_check_rc(doorbell_send2(ep, 0, 0, 0, buf, 4, NULL, 4), DOORBELL_ERR_INVALID_ARGUMENT, "send2(NULL second piece, 4 bytes)");
  dbt_check_rc(doorbell_send2(NULL, 0, 0, 0, buf, 4, buf, 4), DOORBELL_ERR_INVALID_ARGUMENT, "send2(NULL endpoint)");
  dbt_check_rc(doorbell_send(NULL, 0, 0, 0, buf, 1), DOORBELL_ERR_INVALID_ARGUMENT, "send(NULL endpoint)");
  dbt_check_rc(doorbell_progress(NULL, 0, to_inbox, &junk, &wake), DOORBELL_ERR_INVALID_ARGUMENT, "progress(NULL endpoint)");
  dbt_check_rc(doorbell_work_pending(NULL, 0), DOORBELL_ERR_INVALID_ARGUMENT, "work_pending(NULL endpoint)");
  dbt_check_rc(doorbell_progress_local(NULL, 0, to_inbox, &junk), DOORBELL_ERR_INVALID_ARGUMENT, "progress_local(NULL endpoint)");
  dbt_check_rc(doorbell_progress_local(ep, 0, NULL, &junk), DOORBELL_ERR_INVALID_ARGUMENT, "progress_local(NULL callback)");
  dbt_check_rc(doorbell_wait(ep, 0, 9, 1000, to_inbox, &junk, &wake), DOORBELL_ERR_INVALID_ARGUMENT, "wait with mode 9");
  dbt_check_rc(doorbell_counters_get(ep, NULL), DOORBELL_ERR_INVALID_ARGUMENT, "counters_get(NULL out)");
  doorbell_counters cc;
  dbt_check_rc(doorbell_counters_get(NULL, &cc), DOORBELL_ERR_INVALID_ARGUMENT, "counters_get(NULL endpoint)");
  uint32_t wout;
  dbt_check_rc(doorbell_window_open(ep, NULL), DOORBELL_ERR_INVALID_ARGUMENT, "window_open(NULL out)");
  dbt_check_rc(doorbell_window_open(NULL, &wout), DOORBELL_ERR_INVALID_ARGUMENT, "window_open(NULL endpoint)");
  dbt_check_rc(doorbell_endpoint_destroy(NULL), DOORBELL_OK, "endpoint_destroy(NULL)");

  /* Nothing of the above was delivered; legal boundary cases are. */
  uint32_t w1 = 0;
  dbt_check_rc(doorbell_window_open(ep, &w1), DOORBELL_OK, "window_open");
  dbt_check_rc(doorbell_send(ep, 0, 0, 3, buf, MAXMSG), DOORBELL_OK, "send exactly max_message to self");
  doorbell_iovec three[3] = {{buf, 10}, {buf + 10, 0}, {buf + 10, MAXMSG - 10}};
  dbt_check_rc(doorbell_sendv(ep, 0, w1, 4, three, 3), DOORBELL_OK, "sendv of 3 pieces (max_message) to own new window");
  dbt_check_rc(doorbell_send(ep, 0, w1, 5, NULL, 0), DOORBELL_OK, "send 0 bytes (NULL data) to own new window");
  dbt_check_rc(doorbell_send2(ep, 0, w1, 6, buf, 10, buf + 10, MAXMSG - 10), DOORBELL_OK,
               "send2 of 2 pieces (max_message) to own new window");
  dbt_check_rc(doorbell_send2(ep, 0, w1, 7, NULL, 0, NULL, 0), DOORBELL_OK, "send2 of 0 bytes (NULL pieces)");
  struct inbox in0 = {0}, in1 = {0};
  double t0 = dbt_now();
  while ((in0.n < 1 || in1.n < 4) && dbt_now() - t0 < 5) {
    doorbell_progress(ep, 0, to_inbox, &in0, &wake);
    doorbell_progress(ep, w1, to_inbox, &in1, &wake);
  }
  uint64_t full = sum_bytes(buf, MAXMSG);
  dbt_check(in0.n == 1 && in0.m[0].task == 0 && in0.m[0].tag == 3 && in0.m[0].len == MAXMSG &&
                in0.m[0].sum == full,
            "window 0 got exactly the one legal self message, intact (%d messages)", in0.n);
  dbt_check(in1.n == 4 && in1.m[0].tag == 4 && in1.m[0].len == MAXMSG && in1.m[0].sum == full &&
                in1.m[1].tag == 5 && in1.m[1].len == 0 && in1.m[0].window == w1 && in1.m[2].tag == 6 &&
                in1.m[2].len == MAXMSG && in1.m[2].sum == full && in1.m[3].tag == 7 && in1.m[3].len == 0,
            "window %u got the gathered messages intact and the empty ones, in order (%d messages)", w1, in1.n);

  /* Error strings. */
  int distinct = 1, nonnull = 1;
  for (int a = 0; a >= -14; a--) {
    const char *sa = doorbell_error_string(a);
    nonnull &= sa != NULL && sa[0] != 0;
    for (int b2 = a - 1; b2 >= -14 && sa; b2--) {
      const char *sb = doorbell_error_string(b2);
      if (sb && !strcmp(sa, sb)) distinct = 0;
    }
  }
  nonnull &= doorbell_error_string(12345) != NULL && doorbell_error_string(-999) != NULL &&
             doorbell_error_string(INT32_MIN) != NULL;
  dbt_check(nonnull && distinct, "error_string: non-empty and distinct for 0..-14, non-NULL for unknown codes");
}

/* ------------------------------------------------------------ scenario A */

static int tester(doorbell_endpoint *ep, const dbt_peer *peers, int *held, int *nheld) {
  uint8_t buf[DOORBELL_ADDRESS_MAX];
  size_t len = 8;
  dbt_check_rc(doorbell_address(ep, buf, &len), DOORBELL_ERR_BUFFER_TOO_SMALL, "address into 8 bytes");
  len = sizeof buf;
  dbt_check_rc(doorbell_address(ep, NULL, &len), DOORBELL_ERR_INVALID_ARGUMENT, "address(NULL buf)");
  dbt_check_rc(doorbell_address(ep, buf, NULL), DOORBELL_ERR_INVALID_ARGUMENT, "address(NULL len)");
  dbt_check_rc(doorbell_address(NULL, buf, &len), DOORBELL_ERR_INVALID_ARGUMENT, "address(NULL endpoint)");
  len = sizeof buf;
  int rc = doorbell_address(ep, buf, &len);
  dbt_check(rc == DOORBELL_OK && len > 0 && len <= DOORBELL_ADDRESS_MAX,
            "address -> OK, %zu bytes <= DOORBELL_ADDRESS_MAX", len);

  ping(ep, 1, 0, "before the bad input");
  bad_blobs(ep, peers);
  bad_tasks_windows_lengths(ep);
  ping(ep, 1, 1, "after the bad input");
  strangers(ep, 1, held, nheld);

  /* Release t3: its first contact comes after the strangers. */
  uint32_t w0 = 0;
  dbt_check_rc(dbt_send_retry(ep, 1, 0, 1, "sync", 4, &w0, 1, NULL, NULL, NULL), DOORBELL_OK, "send sync to t1");
  dbt_drain(ep, &w0, 1, NULL, NULL, 10);
  dbt_barrier();
  uint32_t t = 0;
  rc = doorbell_connect(ep, peers[3].blob, peers[3].len, &t);
  dbt_check(rc == DOORBELL_OK && t == 3, "connect to t3 -> OK (%d)", rc);
  struct inbox in = {0};
  double t0 = dbt_now();
  int late = 0;
  while (late < 5 && dbt_now() - t0 < 20) {
    doorbell_wake wake;
    rc = doorbell_wait(ep, 0, DOORBELL_WAIT_BLOCK, 200000, to_inbox, &in, &wake);
    if (rc < 0) {
      dbt_check_rc(rc, DOORBELL_OK, "wait for t3");
      break;
    }
    late = 0;
    for (int i = 0; i < in.n; i++) late += in.m[i].task == 3 && in.m[i].len == 5 && !memcmp(in.m[i].data, "late", 4);
  }
  dbt_check(late == 5, "a new TCP peer (t3) reached the endpoint after the strangers: %d of 5 messages", late);
  ping(ep, 3, 3, "new peer");
  doorbell_counters c;
  doorbell_counters_get(ep, &c);
  dbt_info("tester counters: tcp_received=%lu shm_received=%lu strangers_rejected=%lu",
           (unsigned long)c.tcp_received, (unsigned long)c.shm_received,
           (unsigned long)c.strangers_rejected);
  for (uint32_t p = 1; p <= 3; p += 2) {
    rc = dbt_send_retry(ep, p, 0, 1, "bye", 3, &w0, 1, NULL, NULL, NULL);
    dbt_check_rc(rc, DOORBELL_OK, "send bye to t%u", p);
  }
  dbt_check_rc(dbt_drain(ep, &w0, 1, NULL, NULL, 10), DOORBELL_OK, "flush");
  return 0;
}

static int child_a(int idx, void *arg) {
  (void)arg;
  char foreign_job[64];
  if (idx == 0) bad_configs();
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, idx == 0 ? 1 : (uint64_t)idx + 1);
  cfg.shm_dir = g_shm_a;
  cfg.max_message = MAXMSG;
  if (idx == 2) {
    snprintf(foreign_job, sizeof foreign_job, "dbt-foreign-%ld", (long)getppid());
    cfg.job = foreign_job;
  }
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[4];
  me.task = cfg.task;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %u, job %s)", cfg.task, cfg.job);
  /* Connections: only t0 <-> t1 now; t3 later; t2 never. */
  uint64_t mask = idx == 0 ? 1u << 1 : idx == 1 ? 1u << 0 : 0;
  int bad = dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, mask) || me.rc != DOORBELL_OK;
  if (idx == 2 || bad) {
    if (ep) doorbell_endpoint_destroy(ep);
    return bad;
  }
  int rc = 0;
  int held[64], nheld = 0;
  if (idx == 0) {
    rc = tester(ep, peers, held, &nheld);
  } else if (idx == 1) {
    rc = responder(ep);
  } else { /* t3 */
    dbt_barrier();
    uint32_t t = 0, w0 = 0;
    int r = doorbell_connect(ep, peers[0].blob, peers[0].len, &t);
    dbt_check(r == DOORBELL_OK && t == 0, "t3: connect to t0 -> OK (%d)", r);
    for (int i = 0; i < 5 && r == DOORBELL_OK; i++) {
      r = dbt_send_retry(ep, 0, 0, 9, "late!", 5, &w0, 1, to_inbox, &g_in, NULL);
      dbt_check_rc(r, DOORBELL_OK, "t3: send late message %d", i);
    }
    dbt_drain(ep, &w0, 1, to_inbox, &g_in, 10); /* a ping may already come back */
    rc = responder(ep);
  }
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  for (int i = 0; i < nheld; i++) close(held[i]);
  return rc;
}

/* ------------------------------------------------------------ scenario B */

struct tiny {
  char dir[PATH_MAX];
  uint64_t used;  /* measured: bytes one endpoint occupies in its shm_dir */
  int bulk;       /* run child_b3 (large messages, no room for a bulk buffer) */
};

static uint64_t dir_bytes(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  uint64_t n = 0;
  char path[PATH_MAX + 256];
  while (d && (e = readdir(d))) {
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.' && stat(path, &st) == 0) n += (uint64_t)st.st_blocks * 512;
  }
  if (d) closedir(d);
  return n;
}

/* How much shared memory a lone endpoint takes (so scenario B3 can leave
 * room for exactly two endpoints with 64 KiB queues). */
static int child_measure(int idx, void *arg) {
  struct tiny *ty = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.shm_dir = ty->dir;
  doorbell_endpoint *ep = NULL;
  int rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(rc, DOORBELL_OK, "endpoint_create in a scratch shm_dir (to measure it)");
  if (rc != DOORBELL_OK) return 1;
  ty->used = dir_bytes(ty->dir);
  doorbell_endpoint_destroy(ep);
  return 0;
}

static int child_b(int idx, void *arg) {
  struct tiny *ty = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.shm_dir = ty->dir;
  cfg.ring_bytes = 1u << 20; /* a queue far larger than the room left */
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_info("endpoint_create -> %d (%s)", me.rc, doorbell_error_string(me.rc));
  dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, 0);
  if (idx == 0) {
    int rcs[4] = {me.rc, peers[1].rc, 1, 1}; /* create t0, create t1, connect, send; 1 = not tried */
    const char *what[4] = {"endpoint_create (t0)", "endpoint_create (t1)", "connect t0 -> t1",
                           "first send t0 -> t1"};
    if (me.rc == DOORBELL_OK && peers[1].rc == DOORBELL_OK) {
      uint32_t t;
      rcs[2] = doorbell_connect(ep, peers[1].blob, peers[1].len, &t);
      if (rcs[2] == DOORBELL_OK) {
        uint8_t byte = 42;
        rcs[3] = doorbell_send(ep, 1, 0, 0, &byte, 1);
        if (rcs[3] == DOORBELL_ERR_WOULD_BLOCK) rcs[3] = doorbell_flush(ep, 1000000);
      }
    }
    int first = -1;
    for (int i = 0; i < 4; i++)
      if (rcs[i] != DOORBELL_OK && rcs[i] != 1) {
        first = i;
        break;
      }
    for (int i = 0; i < 4; i++)
      if (rcs[i] != 1) dbt_info("  %s -> %d (%s)", what[i], rcs[i], doorbell_error_string(rcs[i]));
    if (first < 0)
      dbt_check(0, "a 1 MiB queue in a full shm_dir: create, connect and send all returned OK "
                "(want DOORBELL_ERR_NO_SHM_SPACE)");
    else
      dbt_check_rc(rcs[first], DOORBELL_ERR_NO_SHM_SPACE, "shm_dir full: %s", what[first]);
    if (me.rc == DOORBELL_OK) {
      doorbell_counters c;
      dbt_check_rc(doorbell_counters_get(ep, &c), DOORBELL_OK,
                   "the endpoint still answers after NO_SHM_SPACE (counters_get)");
      if (rcs[3] == DOORBELL_ERR_NO_SHM_SPACE) {
        uint8_t byte = 43;
        int rc = doorbell_send(ep, 1, 0, 0, &byte, 1);
        dbt_check(rc < 0 && rc != DOORBELL_ERR_INTERNAL,
                  "a second send also fails cleanly (%d %s)", rc, doorbell_error_string(rc));
      }
    }
  }
  dbt_barrier(); /* t1 stays alive until t0 tried */
  if (ep) dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy (full shm_dir)");
  return 0;
}

/* Scenario B3: room for both endpoints with 64 KiB queues, not for a bulk
 * double buffer (2 x 256 KiB).  Messages too large to sit whole in the
 * queue would go through one; making it fails, and they must still arrive,
 * intact and in order, in queue chunks. */
#define B3_MSGS 3
#define B3_LEN (200u << 10)
static int b3_got;
static void b3_recv(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                    size_t len) {
  (void)ctx; (void)task; (void)window;
  dbt_check(tag == 5 && len == B3_LEN && dbt_verify(data, len, 300 + (uint64_t)b3_got),
            "B3: message %d arrived intact and in order (tag %u, %zu bytes)", b3_got, tag, len);
  b3_got++;
}

static int child_b3(int idx, void *arg) {
  struct tiny *ty = arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.shm_dir = ty->dir;
  cfg.ring_bytes = 64u << 10;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "B3: endpoint_create with a 64 KiB queue");
  dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, idx == 0 ? 2 : 0);
  if (me.rc != DOORBELL_OK) {
    dbt_barrier();
    return 1;
  }
  uint32_t w0 = 0;
  if (idx == 0) {
    uint8_t *buf = malloc(B3_LEN);
    for (int i = 0; i < B3_MSGS; i++) {
      dbt_fill(buf, B3_LEN, 300 + (uint64_t)i);
      dbt_check_rc(dbt_send_retry(ep, 1, 0, 5, buf, B3_LEN, &w0, 1, NULL, NULL, NULL), DOORBELL_OK,
                   "B3: send %d of %u bytes (no room for a bulk buffer)", i, B3_LEN);
    }
    dbt_check_rc(dbt_drain(ep, &w0, 1, NULL, NULL, 60), DOORBELL_OK, "B3: flush");
    free(buf);
  } else {
    double end = dbt_now() + 60;
    while (b3_got < B3_MSGS && dbt_now() < end) {
      doorbell_wake wk;
      int rc = doorbell_wait(ep, 0, DOORBELL_WAIT_DEFAULT, 1000000, b3_recv, NULL, &wk);
      if (rc < 0) {
        dbt_check_rc(rc, DOORBELL_OK, "B3: doorbell_wait");
        break;
      }
    }
    dbt_check(b3_got == B3_MSGS, "B3: all %d messages arrived (%d)", B3_MSGS, b3_got);
  }
  dbt_barrier();
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "B3: endpoint_destroy");
  return 0;
}

static void full_tmpfs(struct tiny *ty, uint64_t bytes, const char *name) {
  dbt_info("--- scenario %s: shm_dir on a %lu-byte tmpfs ---", name, (unsigned long)bytes);
  char *d = dbt_tempdir("/tmp", "tinyshm");
  snprintf(ty->dir, sizeof ty->dir, "%s", d);
  free(d);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%lu,mode=1777", (unsigned long)bytes);
  if (!dbt_check(mount("tmpfs", ty->dir, "tmpfs", MS_NOSUID | MS_NODEV, opts) == 0,
                 "mount a %lu-byte tmpfs on %s: %s", (unsigned long)bytes, ty->dir,
                 strerror(errno))) {
    rmdir(ty->dir);
    return;
  }
  dbt_job *job = dbt_spawn(2, ty->bulk ? child_b3 : child_b, ty);
  dbt_serve(job, 60);
  for (int i = 0; i < 2; i++) dbt_check_exit0(job, i); /* a SIGBUS would show here */
  dbt_free(job);
  int left = dbt_dir_entries(ty->dir, NULL);
  dbt_check(left == 0, "%s: the full shm_dir is empty afterwards (%d left)", name, left);
  umount2(ty->dir, MNT_DETACH);
  rmdir(ty->dir);
}

static void scenario_b(void) {
  /* A private mount namespace: the tmpfs is invisible to everyone else and
   * vanishes with this process.  Needs root (CAP_SYS_ADMIN). */
  if (!dbt_check(unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS) (needs root): %s",
                 strerror(errno)))
    return;
  if (!dbt_check(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0,
                 "make mounts private: %s", strerror(errno)))
    return;
  struct tiny *ty = mmap(NULL, sizeof *ty, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(ty, 0, sizeof *ty);
  full_tmpfs(ty, 64 << 10, "B1 (64 KiB)");

  char *d = dbt_tempdir("/dev/shm", "measure");
  snprintf(ty->dir, sizeof ty->dir, "%s", d);
  dbt_job *job = dbt_spawn(1, child_measure, ty);
  dbt_serve(job, 30);
  dbt_check_exit0(job, 0);
  dbt_free(job);
  dbt_rmtree(d);
  free(d);
  dbt_info("one endpoint occupies %lu bytes of shared memory", (unsigned long)ty->used);
  /* a rank's shared memory (its control segment and queue) is
   * at most 1 MiB with default parameters, whatever the number of peers */
  if (!dbt_check(ty->used > 0 && ty->used <= (1u << 20),
                 "a lone endpoint uses some, but at most 1 MiB, of its shm_dir (%lu bytes)",
                 (unsigned long)ty->used))
    return;
  ty->bulk = 1;
  /* B3's endpoints have 64 KiB queues: 448 KiB less than the default */
  full_tmpfs(ty, 2 * (ty->used - (448u << 10)) + (128 << 10),
             "B3 (room for 2 endpoints with 64 KiB queues, not for a bulk buffer)");
}

int main(void) {
  dbt_begin("bad_input");
  g_shm_a = dbt_tempdir("/dev/shm", "badinput");
  dbt_info("--- scenario A: arguments, blobs, tasks, windows, lengths, strangers ---");
  dbt_run_all(4, child_a, NULL, 150, g_shm_a, NULL);
  dbt_rmtree(g_shm_a);
  scenario_b();
  int left = dbt_dir_entries("/dev/shm", dbt_jobkey());
  dbt_check(left == 0, "no file named after job %s in /dev/shm (%d found)", dbt_jobkey(), left);
  return dbt_finish();
}
