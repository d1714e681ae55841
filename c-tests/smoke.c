/* Package smoke test: a program built with find_package(doorbell) links,
 * loads the library it should (the .so, or nothing for the static build)
 * and can send itself a message on two windows. */
#define _GNU_SOURCE
#include <doorbell.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int passed, failed;

static void check(int ok, const char *what, int rc) {
  printf("%s smoke: %s (rc %d: %s)\n", ok ? "PASS:" : "FAIL:", what, rc, doorbell_error_string(rc));
  ok ? passed++ : failed++;
}

struct got {
  int n;
  uint32_t window;
  char text[16];
};

static void on_msg(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  struct got *g = ctx;
  (void)task;
  (void)tag;
  g->n++;
  g->window = window;
  snprintf(g->text, sizeof g->text, "%.*s", (int)(len < 15 ? len : 15), (const char *)data);
}

/* Is libdoorbell.so mapped into this process? */
static int so_loaded(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  while (f && fgets(line, sizeof line, f)) found |= strstr(line, "libdoorbell.so") != NULL;
  if (f) fclose(f);
  return found;
}

int main(void) {
#ifdef DBT_EXPECT_STATIC
  check(!so_loaded(), "static build does not load libdoorbell.so", 0);
#else
  check(so_loaded(), "shared build loaded libdoorbell.so (found through the rpath)", 0);
#endif
  doorbell_config cfg;
  int rc = doorbell_config_init(&cfg);
  check(rc == DOORBELL_OK && cfg.task == 0 && cfg.node_id == 0 && !strcmp(cfg.job, "doorbell"),
        "config_init defaults", rc);
  char job[64];
  snprintf(job, sizeof job, "dbt-smoke-%ld", (long)getpid());
  cfg.job = job;
  cfg.node_id = 1;
  doorbell_endpoint *ep = NULL;
  rc = doorbell_endpoint_create(&cfg, &ep);
  check(rc == DOORBELL_OK && ep, "endpoint_create", rc);
  if (!ep) goto out;
  uint8_t blob[DOORBELL_ADDRESS_MAX];
  size_t len = sizeof blob;
  rc = doorbell_address(ep, blob, &len);
  check(rc == DOORBELL_OK && len > 0 && len <= DOORBELL_ADDRESS_MAX, "address", rc);
  uint32_t me = 99;
  rc = doorbell_connect(ep, blob, len, &me);
  check(rc == DOORBELL_OK && me == 0, "connect to itself", rc);
  uint32_t w1 = 0;
  rc = doorbell_window_open(ep, &w1);
  check(rc == DOORBELL_OK && w1 != 0, "window_open", rc);
  for (uint32_t w = 0; w <= w1; w += w1) {
    struct got g = {0, 0, ""};
    rc = doorbell_send(ep, 0, w, 1, "hello", 5);
    check(rc == DOORBELL_OK, "send to self", rc);
    doorbell_wake wake;
    rc = doorbell_wait(ep, w, DOORBELL_WAIT_BLOCK, 2000000, on_msg, &g, &wake);
    check(rc == 1 && g.n == 1 && g.window == w && !strcmp(g.text, "hello"),
          w ? "wait delivers it on the new window" : "wait delivers it on window 0", rc);
  }
  rc = doorbell_endpoint_destroy(ep);
  check(rc == DOORBELL_OK, "endpoint_destroy", rc);
  int left = 0;
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  while (d && (e = readdir(d))) left += strstr(e->d_name, job) != NULL;
  if (d) closedir(d);
  check(left == 0, "no file of the job left in /dev/shm", left);
out:
  printf("%d passed, %d failed\n", passed, failed);
  return failed || !passed;
}
