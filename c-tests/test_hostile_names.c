/* Hostile names in the shared-memory directory.
 *
 * Anyone may create files in /dev/shm.  doorbell names an endpoint's files
 * after a random token, so nobody can plant a file at a name before it is
 * made; a file planted where a name can be guessed -- a symbolic link, a
 * file of another user, a file open to group/other -- must cost nothing
 * but a fresh name, and be neither followed, written nor removed.  A
 * peer's segment replaced by a symlink once its name is known is refused
 * with DOORBELL_ERR_SHM_REFUSED and a line on stderr that names it.
 *
 * One process, a private shm directory; stderr is captured around each call
 * to check what it says. */
#include "dbt.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *g_dir;
static char g_cap_path[PATH_MAX];
static int g_saved_fd = -1;

static void capture_begin(void) {
  fflush(stderr);
  g_saved_fd = dup(2);
  int fd = open(g_cap_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
}

/* Stop capturing; returns what was written to stderr (static buffer). */
static const char *capture_end(void) {
  static char buf[8192];
  fflush(stderr);
  dup2(g_saved_fd, 2);
  close(g_saved_fd);
  buf[0] = 0;
  FILE *f = fopen(g_cap_path, "r");
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
  }
  if (buf[0]) dbt_info("stderr: %s", buf);
  return buf;
}

static void path_of(char *out, const char *name) { snprintf(out, PATH_MAX, "%s/%s", g_dir, name); }

/* The name the control segment of a task had when names followed from the
 * job key alone. */
static void old_name(char *out, const char *kind) {
  char name[256];
  snprintf(name, sizeof name, "doorbell-%s-%s", dbt_jobkey(), kind);
  path_of(out, name);
}

/* The path of the file in g_dir whose name starts with "doorbell-<job>-"
 * and ends with `suffix` (an endpoint's control segment: "-c3"); 0 if
 * none. */
static int find_named(char *out, const char *suffix) {
  char prefix[256];
  snprintf(prefix, sizeof prefix, "doorbell-%s-", dbt_jobkey());
  DIR *d = opendir(g_dir);
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name), k = strlen(suffix);
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && n > k && strcmp(e->d_name + n - k, suffix) == 0) {
      path_of(out, e->d_name);
      found = 1;
      break;
    }
  }
  if (d) closedir(d);
  return found;
}

static void make_file(const char *path, mode_t mode, const char *content) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t)strlen(content)) {
    dbt_check(0, "create %s", path);
  }
  if (fd >= 0) close(fd);
  chmod(path, mode);
}

static int file_has(const char *path, const char *content) {
  char buf[256] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  return n == strlen(content) && memcmp(buf, content, n) == 0;
}

static int is_symlink(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static int create(uint32_t task, doorbell_endpoint **ep) {
  doorbell_config cfg;
  dbt_config(&cfg, task, 1);
  cfg.shm_dir = g_dir;
  cfg.if_include = "127.0.0.1/8";
  *ep = NULL;
  return doorbell_endpoint_create(&cfg, ep);
}

/* endpoint_create of `task` with `path` (a guessable name of its control
 * segment) planted: the endpoint is made under a name of its own, the
 * planted file is not used. */
static doorbell_endpoint *create_beside(const char *what, uint32_t task, const char *path) {
  doorbell_endpoint *ep;
  char ctl[PATH_MAX], suffix[32];
  capture_begin();
  int rc = create(task, &ep);
  const char *err = capture_end();
  dbt_check_rc(rc, DOORBELL_OK, "%s at the old control name: endpoint_create goes on", what);
  dbt_check(err[0] == 0, "%s: nothing said (the name was never doorbell's to take)", what);
  snprintf(suffix, sizeof suffix, "-c%u", task);
  dbt_check(find_named(ctl, suffix) && strcmp(ctl, path) != 0, "%s: the control segment has a name of its own", what);
  return ep;
}

/* Counts a 200 KiB message (seed 77) that arrived intact. */
static int g_big_ok;
static void big_cb(void *ctx, uint32_t task, uint32_t window, uint8_t tag, const uint8_t *data,
                   size_t len) {
  (void)ctx, (void)task, (void)window, (void)tag;
  if (len == (200u << 10)) g_big_ok += dbt_verify(data, len, 77);
}

static void connect_pair(doorbell_endpoint *a, doorbell_endpoint *b) {
  uint8_t blob[DOORBELL_ADDRESS_MAX];
  size_t len = sizeof blob;
  uint32_t t;
  doorbell_address(b, blob, &len);
  dbt_check_rc(doorbell_connect(a, blob, len, &t), DOORBELL_OK, "connect");
  len = sizeof blob;
  doorbell_address(a, blob, &len);
  dbt_check_rc(doorbell_connect(b, blob, len, &t), DOORBELL_OK, "connect back");
}

int main(void) {
  dbt_begin("hostile_names");
  g_dir = dbt_tempdir("/dev/shm", "names");
  snprintf(g_cap_path, sizeof g_cap_path, "%s/../dbt-names-stderr-%ld", g_dir, (long)getpid());
  char target[PATH_MAX], path[PATH_MAX];

  /* 1. A symlink at the old control name, pointing at someone's file. */
  path_of(target, "target");
  make_file(target, 0600, "keep");
  old_name(path, "c0");
  if (symlink(target, path) != 0) dbt_check(0, "symlink");
  doorbell_endpoint *e0 = create_beside("a symlink", 0, path);
  dbt_check(file_has(target, "keep"), "the symlink's target is untouched");
  dbt_check(is_symlink(path), "the symlink is left in place");

  /* 2. A file of ours open to group and other. */
  old_name(path, "c1");
  make_file(path, 0644, "loose");
  doorbell_endpoint *e1 = create_beside("a mode 0644 file", 1, path);
  dbt_check(file_has(path, "loose"), "the 0644 file is left as it was");

  /* 3. Another user's file (needs root to make one). */
  old_name(path, "c2");
  doorbell_endpoint *e2 = NULL;
  if (geteuid() == 0) {
    make_file(path, 0600, "foreign");
    if (chown(path, 65534, 65534) != 0) dbt_check(0, "chown");
    e2 = create_beside("another user's file", 2, path);
    dbt_check(file_has(path, "foreign"), "the other user's file is left as it was");
  } else {
    dbt_info("SKIP another user's file: needs root");
  }

  /* 4. A peer's control segment swapped for a symlink to a copy: the sender
   * must not follow it. */
  doorbell_endpoint *rx, *tx;
  dbt_check_rc(create(3, &rx), DOORBELL_OK, "create task 3");
  dbt_check_rc(create(4, &tx), DOORBELL_OK, "create task 4");
  dbt_check(find_named(path, "-c3"), "task 3's control segment is in the directory");
  path_of(target, "moved-c3");
  if (rename(path, target) != 0 || symlink(target, path) != 0) dbt_check(0, "swap c3 for a symlink");
  connect_pair(rx, tx);
  capture_begin();
  int rc = doorbell_send(tx, 3, 0, 1, "x", 1);
  const char *err = capture_end();
  dbt_check_rc(rc, DOORBELL_ERR_SHM_REFUSED, "send to a peer whose control segment is a symlink");
  dbt_check(strstr(err, path) != NULL, "stderr names %s", path);
  unlink(path);
  rename(target, path);

  /* 5. A symlink planted at the first name of the bulk buffer a sender is
   * about to make for a message over a quarter of the receiver's queue (it
   * follows from the receiver's control segment's name, which anyone can
   * read): the sender takes a later generation under a fresh name, says so
   * once, and the message goes through the bulk buffer. */
  doorbell_endpoint *tx2;
  dbt_check_rc(create(5, &tx2), DOORBELL_OK, "create task 5");
  connect_pair(rx, tx2);
  {
    char ctl[PATH_MAX];
    dbt_check(find_named(ctl, "-c3"), "task 3's control segment is in the directory");
    ctl[strlen(ctl) - 3] = 0;
    snprintf(path, sizeof path, "%s-r5-w0-b0", ctl);
  }
  path_of(target, "target2");
  make_file(target, 0600, "keep");
  if (symlink(target, path) != 0) dbt_check(0, "symlink");
  static uint8_t big[200 << 10];
  dbt_fill(big, sizeof big, 77);
  capture_begin();
  rc = doorbell_send(tx2, 3, 0, 1, big, sizeof big);
  for (int i = 0; rc == DOORBELL_ERR_WOULD_BLOCK && i < 100; i++) rc = doorbell_flush(tx2, 100000);
  err = capture_end();
  dbt_check_rc(rc, DOORBELL_OK, "a 200 KiB send whose first bulk buffer name is a planted symlink");
  dbt_check(strstr(err, path) != NULL && strstr(err, "is taken") != NULL, "stderr names %s as taken", path);
  {
    char fresh[PATH_MAX];
    dbt_check(find_named(fresh, "-w0-b0") && strcmp(fresh, path) == 0, "only the planted link has generation 0");
    int other = 0;
    DIR *d = opendir(g_dir);
    struct dirent *e;
    const char *base = strrchr(path, '/') + 1;
    size_t stem_len = strlen(base) - 1; /* "...-r5-w0-b" */
    while (d && (e = readdir(d)) != NULL)
      if (strncmp(e->d_name, base, stem_len) == 0 && strcmp(e->d_name, base) != 0) other++;
    if (d) closedir(d);
    dbt_check(other == 1, "the sender made its bulk buffer under a later generation (%d such files)", other);
  }
  dbt_check(file_has(target, "keep") && is_symlink(path), "the link and its target are left alone");
  unlink(path);

  /* The refused ones did not break the endpoints: after the plants are gone
   * the same sends go through. */
  dbt_check_rc(doorbell_send(tx2, 3, 0, 2, "y", 1), DOORBELL_OK, "send once the planted bulk link is gone");
  dbt_check_rc(doorbell_send(tx, 3, 0, 2, "y", 1), DOORBELL_OK, "send once the control link is gone");
  uint32_t w = 0;
  doorbell_wake wake;
  int got = 0;
  double t0 = dbt_now();
  while (got < 3 && dbt_now() - t0 < 10) {
    int n = doorbell_wait(rx, w, DOORBELL_WAIT_BLOCK, 200000, big_cb, NULL, &wake);
    if (n > 0) got += n;
  }
  dbt_check(got == 3, "the bulk message and both small ones arrived (%d)", got);
  dbt_check(g_big_ok == 1, "the 200 KiB message arrived intact (%d)", g_big_ok);

  doorbell_endpoint_destroy(tx2);
  doorbell_endpoint_destroy(tx);
  doorbell_endpoint_destroy(rx);
  doorbell_endpoint_destroy(e2);
  doorbell_endpoint_destroy(e1);
  doorbell_endpoint_destroy(e0);
  unlink(g_cap_path);
  dbt_rmtree(g_dir);
  return dbt_finish();
}
