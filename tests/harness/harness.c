/* Test harness; see harness.h. */
#define _GNU_SOURCE
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int kvp_test_run(const char *group, const struct CMUnitTest *tests, size_t n, int argc,
                 char **argv) {
  if (argc > 1) {
    /* A name that matches no case is an error, not a pass of 0 cases: a
     * stale binary or a renamed case would otherwise pass unseen. */
    size_t match = 0;
    for (size_t i = 0; i < n; i++)
      match += fnmatch(argv[1], tests[i].name, 0) == 0;
    if (match == 0) {
      fprintf(stderr, "%s: no case named '%s'\n", group, argv[1]);
      return 2;
    }
    cmocka_set_test_filter(argv[1]);
  }
  return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}

const char *kvp_test_srcdir(void) {
  return KVP_TEST_SRCDIR;
}

char *kvp_test_tmpdir(char *buf, size_t len) {
  const char *base = getenv("TMPDIR");

  if (base == NULL || base[0] == '\0')
    base = "/tmp";
  if ((size_t)snprintf(buf, len, "%s/kvp-test-XXXXXX", base) >= len)
    return NULL;
  return mkdtemp(buf);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void kvp_test_rmtree(const char *path) {
  if (path && path[0])
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int kvp_test_free_port(void) {
  struct sockaddr_in sa = {0};
  socklen_t sl = sizeof sa;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = -1;

  if (fd < 0)
    return -1;
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

pid_t kvp_test_spawn_child(char *const argv[], const char *log_path) {
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent died before the line above */
      _exit(1);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

int kvp_test_http_get(int port, const char *path, char *buf, size_t len) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  char req[512], tmp[512];
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = -1;
  size_t got = 0;
  ssize_t r;
  if (buf == NULL) {
    buf = tmp;
    len = sizeof tmp;
  }
  buf[0] = '\0';
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0)
    return -1;
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && n > 0 && (size_t)n < sizeof req &&
      write(fd, req, (size_t)n) == n) {
    while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0)
      got += (size_t)r;
    buf[got] = '\0';
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
      code = -1;
  }
  close(fd);
  return code;
}

int kvp_test_spawn_wait(char *const argv[], const char *in_path, const char *out_path) {
  pid_t pid = fork();
  int st;

  if (pid < 0)
    return -1;
  if (pid == 0) {
    int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
    int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0)
      _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    execvp(argv[0], argv);
    _exit(127);
  }
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

int kvp_test_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
    return fd;
  if (fd >= 0)
    close(fd);
  return -1;
}

void kvp_test_kill_server(pid_t pid) {
  if (pid <= 0)
    return;
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

pid_t kvp_test_spawn_server(char *const argv[], const char *log_path, int port, const char *who) {
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    setpgid(0, 0);
    execv(argv[0], argv);
    _exit(127);
  }
  for (int i = 0; i < 400; i++) {
    int fd = kvp_test_connect(port);
    if (fd >= 0) {
      close(fd);
      return pid;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      fprintf(stderr, "%s: the server exited at start (log: %s)\n", who, log_path);
      return -1;
    }
    usleep(50000);
  }
  fprintf(stderr, "%s: no answer on port %d after 20 s (log: %s)\n", who, port, log_path);
  kvp_test_kill_server(pid);
  return -1;
}

int kvp_test_nofile_at_least(unsigned long want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
      return 0;
  }
  return rl.rlim_cur >= want;
}

int kvp_test_hold_fds(int *fds, int n) {
  int k = 0;
  while (k < n && (fds[k] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
    k++;
  return k;
}
