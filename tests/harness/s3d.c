/* s3rver for tests (see s3d.h). */
#include "s3d.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

static int port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

static int spawn(kvp_s3d_t *s) {
  char port[16], data[300], log[300];
  const char *prog = kvp_s3d_program();

  kvp_s3d_require();
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(log, sizeof log, "%s/server.log", s->dir);
  mkdir(data, 0700);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    setpgid(0, 0);
    execl(prog, "s3rver", "-d", data, "-a", "127.0.0.1", "-p", port, "--configure-bucket",
          s->bucket, "-s", (char *)NULL);
    _exit(127);
  }
  s->pid = pid;
  for (int i = 0; i < 400; i++) {
    if (port_open(s->port))
      return 0;
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      s->pid = 0;
      fprintf(stderr, "s3d: the server exited at start (log: %s)\n", log);
      return -1;
    }
    usleep(50000);
  }
  fprintf(stderr, "s3d: no answer on port %d after 20 s (log: %s)\n", s->port, log);
  kvp_s3d_kill(s);
  return -1;
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
  if (s->pid > 0) {
    kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
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
