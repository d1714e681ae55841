/* test_tcp_stopped.c -- a peer stopped (SIGSTOP) before the first message
 * to it is slow, not dead.
 *
 * Two tasks on one node with force_tcp.  Task 0 stops itself right after
 * the address exchange, before task 1 ever connected to it; task 1 sends
 * it a message, which has to pass the handshake with task 0's stopped
 * epoll thread, and resumes task 0 (SIGCONT) from another thread later.
 * The send must succeed and task 0 must receive the message.
 *
 *   answer   stopped STOP_S seconds: task 1's connection waits in task 0's
 *            backlog for a challenge, longer than a connector once waited
 *            for one (30 s);
 *   backlog  stopped BACKLOG_STOP_S seconds with its listen backlog full
 *            of strangers' connections (task 1 fills it first), so task
 *            1's SYNs are dropped: longer than a connect once waited (5 s).
 *            Once task 0 runs again its epoll thread takes in thousands of
 *            strangers at once, pushing the oldest out of its pending set.
 *
 * No timer may make either a lost peer: only a pidfd or a closed socket
 * says a peer died. */
#include "dbt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 100
#define STOP_S 35
#define BACKLOG_STOP_S 8
#define MAX_STRANGERS 20000

static char proc_state(uint32_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] ? p[2] : 0;
}

struct resume { uint32_t pid; int after_s; };

static void *resume_later(void *arg) {
  struct resume *r = arg;
  sleep((unsigned)r->after_s);
  kill((pid_t)r->pid, SIGCONT);
  return NULL;
}

/* A free loopback port, for task 0 to listen on (so task 1 knows it). */
static uint16_t free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &len)) {
    perror("free_port");
    exit(2);
  }
  close(s);
  return ntohs(a.sin_port);
}

/* Open connections to 127.0.0.1:port until one is not established within
 * 300 ms: the listener's accept queue is full and drops SYNs.  Returns how
 * many are open (their fds in fds[]); -1 if the queue never filled. */
static int fill_backlog(uint16_t port, int *fds) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int n = 0;
  while (n < MAX_STRANGERS) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      dbt_info("socket: %s after %d connections", strerror(errno), n);
      return -1;
    }
    fds[n++] = s;
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) continue;
    if (errno != EINPROGRESS) {
      dbt_info("connect: %s after %d connections", strerror(errno), n);
      return -1;
    }
    struct pollfd p = {.fd = s, .events = POLLOUT};
    if (poll(&p, 1, 300) == 0) return n;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      dbt_info("connect: %s after %d connections", strerror(err), n);
      return -1;
    }
  }
  return -1;
}

enum { ANSWER, BACKLOG };
static const char *const names[] = {"answer", "backlog"};

struct scenario { int which; uint16_t port; };

static int child(int idx, void *arg) {
  const struct scenario *sc = arg;
  const char *name = names[sc->which];
  int stop_s = sc->which == BACKLOG ? BACKLOG_STOP_S : STOP_S;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.force_tcp = 1;
  cfg.if_include = "lo";
  if (idx == 0) cfg.port_min = cfg.port_max = sc->port;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "%s: endpoint_create(task %d)", name, idx);
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, idx == 1 ? DBT_OTHERS : 0) ||
      me.rc != DOORBELL_OK) {
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  if (idx == 0) {
    raise(SIGSTOP); /* task 1 resumes us after stop_s */
    dbt_tally t = {.from = 1, .sizes = {SMALL}};
    dbt_collect(ep, &t, 1, 0, 60);
    dbt_check(t.msgs == 1 && t.bad == 0, "%s: the stopped task got the message once resumed (%d)", name, t.msgs);
    dbt_barrier();
    pause(); /* task 1 kills us */
    return 1;
  }
  for (int i = 0; i < 1000 && proc_state(peers[0].pid) != 'T'; i++) usleep(10000);
  dbt_check(proc_state(peers[0].pid) == 'T', "%s: task 0 is stopped before the first message to it", name);
  int *strangers = NULL, nstrangers = 0;
  if (sc->which == BACKLOG) {
    strangers = malloc(sizeof *strangers * MAX_STRANGERS);
    nstrangers = fill_backlog(sc->port, strangers);
    dbt_check(nstrangers > 0, "%s: strangers filled task 0's backlog (%d connections)", name, nstrangers);
    if (nstrangers < 0) nstrangers = 0;
  }
  pthread_t th;
  struct resume r = {peers[0].pid, stop_s};
  pthread_create(&th, NULL, resume_later, &r);
  double t0 = dbt_now();
  int sent = dbt_send_seeded(ep, 0, SMALL, 1, dbt_ignore_msg, NULL);
  dbt_check(sent, "%s: a send to a task stopped for %d s succeeds", name, stop_s);
  dbt_info("%s: the send returned after %.1f s", name, dbt_now() - t0);
  pthread_join(th, NULL);
  dbt_barrier(); /* task 0 has the message */
  for (int i = 0; i < nstrangers; i++) close(strangers[i]);
  free(strangers);
  kill((pid_t)peers[0].pid, SIGKILL);
  dbt_wait_exited(peers[0].pid, 30000);
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "%s: endpoint_destroy", name);
  return 0;
}

int main(void) {
  dbt_begin("tcp_stopped");
  for (int which = ANSWER; which <= BACKLOG; which++) {
    struct scenario sc = {which, free_port()};
    dbt_job *job = dbt_spawn(2, child, &sc);
    dbt_serve(job, 150);
    dbt_check(WIFSIGNALED(dbt_status(job, 0)) && WTERMSIG(dbt_status(job, 0)) == SIGKILL, "%s: task 0 was killed at the end",
              names[which]);
    dbt_check_exit0(job, 1);
    dbt_free(job);
  }
  return dbt_finish();
}
