/* test_tcp_stopped.c -- a peer stopped (SIGSTOP) before the first message
 * to it is slow, not dead.
 *
 * Two tasks on one node with force_tcp.  Task 0 stops itself right after
 * the address exchange, before task 1 ever connected to it; task 1 sends
 * it a message, which has to pass the handshake with task 0's stopped
 * epoll thread, and resumes task 0 (SIGCONT) from another thread after
 * STOP_S seconds, longer than a connector used to wait for an answer
 * (30 s).  The send must succeed and task 0 must receive the message. */
#include "dbt.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 100
#define STOP_S 35

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

struct resume { uint32_t pid; };

static void *resume_later(void *arg) {
  struct resume *r = arg;
  sleep(STOP_S);
  kill((pid_t)r->pid, SIGCONT);
  return NULL;
}

static int child(int idx, void *arg) {
  (void)arg;
  doorbell_config cfg;
  dbt_config(&cfg, (uint32_t)idx, 1);
  cfg.force_tcp = 1;
  doorbell_endpoint *ep = NULL;
  dbt_peer me = {0}, peers[2];
  me.task = (uint32_t)idx;
  me.rc = doorbell_endpoint_create(&cfg, &ep);
  dbt_check_rc(me.rc, DOORBELL_OK, "endpoint_create(task %d)", idx);
  if (dbt_exchange(me.rc == DOORBELL_OK ? ep : NULL, &me, peers, idx == 1 ? DBT_OTHERS : 0) ||
      me.rc != DOORBELL_OK) {
    if (ep) doorbell_endpoint_destroy(ep);
    return 1;
  }
  if (idx == 0) {
    raise(SIGSTOP); /* task 1 resumes us after STOP_S */
    dbt_tally t = {.from = 1, .sizes = {SMALL}};
    dbt_collect(ep, &t, 1, 0, 60);
    dbt_check(t.msgs == 1 && t.bad == 0, "the stopped task got the message once resumed (%d)", t.msgs);
    dbt_barrier();
    pause(); /* task 1 kills us */
    return 1;
  }
  for (int i = 0; i < 1000 && proc_state(peers[0].pid) != 'T'; i++) usleep(10000);
  dbt_check(proc_state(peers[0].pid) == 'T', "task 0 is stopped before the first message to it");
  pthread_t th;
  struct resume r = {peers[0].pid};
  pthread_create(&th, NULL, resume_later, &r);
  double t0 = dbt_now();
  int sent = dbt_send_seeded(ep, 0, SMALL, 1, dbt_ignore_msg, NULL);
  dbt_check(sent, "a send to a task stopped for %d s succeeds", STOP_S);
  dbt_info("the send returned after %.1f s", dbt_now() - t0);
  pthread_join(th, NULL);
  dbt_barrier(); /* task 0 has the message */
  kill((pid_t)peers[0].pid, SIGKILL);
  dbt_wait_exited(peers[0].pid, 30000);
  dbt_check_rc(doorbell_endpoint_destroy(ep), DOORBELL_OK, "endpoint_destroy");
  return 0;
}

int main(void) {
  dbt_begin("tcp_stopped");
  dbt_job *job = dbt_spawn(2, child, NULL);
  dbt_serve(job, 150);
  dbt_check(WIFSIGNALED(dbt_status(job, 0)) && WTERMSIG(dbt_status(job, 0)) == SIGKILL, "task 0 was killed at the end");
  dbt_check_exit0(job, 1);
  dbt_free(job);
  return dbt_finish();
}
