/* s3rver for tests (see s3d.h). */
#include "s3d.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

const char *kvp_s3d_program(void) {
  static char path[1024];
  const char *env = getenv("KVP_S3RVER");
  if (env && env[0])
    return access(env, X_OK) == 0 ? env : NULL;
  snprintf(path, sizeof path, "%s/../.npm-tools/node_modules/.bin/s3rver", kvp_test_srcdir());
  return access(path, X_OK) == 0 ? path : NULL;
}

void kvp_s3d_require(void) {
  if (kvp_s3d_program() != NULL)
    return;
  printf("SKIP: s3rver is not installed: scripts/setup.sh installs it (npm install s3rver), "
         "or KVP_S3RVER=PATH names one\n");
  fflush(stdout);
  exit(77);
}

static int spawn(kvp_s3d_t *s) {
  char port[16], data[300], log[300], prog[1024];

  kvp_s3d_require();
  snprintf(prog, sizeof prog, "%s", kvp_s3d_program());
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(log, sizeof log, "%s/server.log", s->dir);
  mkdir(data, 0700);
  char *argv[] = {prog,      "-d", data, "-a", "127.0.0.1", "-p", port, "--configure-bucket",
                  s->bucket, "-s", NULL};
  s->pid = kvp_test_spawn_server(argv, log, s->port, "s3d");
  return s->pid > 0 ? 0 : -1;
}

int kvp_s3d_start(kvp_s3d_t *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->bucket, sizeof s->bucket, "kvb");
  if (kvp_test_tmpdir(s->dir, sizeof s->dir) == NULL)
    return -1;
  s->port = kvp_test_free_port();
  snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", s->port);
  if (spawn(s) != 0) {
    kvp_test_rmtree(s->dir);
    s->dir[0] = '\0';
    return -1;
  }
  return 0;
}

void kvp_s3d_kill(kvp_s3d_t *s) {
  kvp_test_kill_server(s->pid);
  s->pid = 0;
}

int kvp_s3d_restart(kvp_s3d_t *s) {
  return spawn(s);
}

void kvp_s3d_stop(kvp_s3d_t *s) {
  kvp_s3d_kill(s);
  if (s->dir[0]) {
    kvp_test_rmtree(s->dir);
    s->dir[0] = '\0';
  }
}
