/* nats-server for tests; see natsd.h. */
#define _GNU_SOURCE
#include "natsd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* True once the server accepts a connection and sends its INFO line. */
static int answers(int port) {
  struct sockaddr_in sa = {0};
  struct pollfd pfd;
  char buf[8];
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int ok = 0;

  if (fd < 0)
    return 0;
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
    pfd.fd = fd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, 1000) == 1 && read(fd, buf, 5) == 5 && memcmp(buf, "INFO ", 5) == 0)
      ok = 1;
  }
  close(fd);
  return ok;
}

static int spawn(kvp_natsd_t *d) {
  char port[16], store[300], log[300];
  char *argv[32];
  int n = 0;
  pid_t parent = getpid();

  snprintf(port, sizeof port, "%d", d->port);
  snprintf(store, sizeof store, "%s/js", d->dir);
  snprintf(log, sizeof log, "%s/nats-server.log", d->dir);
  argv[n++] = "nats-server";
  argv[n++] = "-a";
  argv[n++] = "127.0.0.1";
  argv[n++] = "-p";
  argv[n++] = port;
  argv[n++] = "-l";
  argv[n++] = log;
  if (d->opts.jetstream) {
    argv[n++] = "-js";
    argv[n++] = "-sd";
    argv[n++] = store;
  }
  if (d->opts.user) {
    argv[n++] = "--user";
    argv[n++] = (char *)d->opts.user;
    argv[n++] = "--pass";
    argv[n++] = (char *)(d->opts.pass ? d->opts.pass : "");
  }
  if (d->opts.token) {
    argv[n++] = "--auth";
    argv[n++] = (char *)d->opts.token;
  }
  if (d->opts.config) {
    argv[n++] = "-c";
    argv[n++] = (char *)d->opts.config;
  }
  if (d->opts.tls_cert) {
    argv[n++] = "--tls";
    argv[n++] = "--tlscert";
    argv[n++] = (char *)d->opts.tls_cert;
    argv[n++] = "--tlskey";
    argv[n++] = (char *)d->opts.tls_key;
    if (d->opts.tls_ca) {
      argv[n++] = "--tlsverify";
      argv[n++] = "--tlscacert";
      argv[n++] = (char *)d->opts.tls_ca;
    }
  }
  argv[n] = NULL;

  d->pid = fork();
  if (d->pid < 0)
    return -1;
  if (d->pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  for (int i = 0; i < 1000; i++) {
    int st;
    if (answers(d->port))
      return 0;
    if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
      d->pid = 0;
      return -1;
    }
    sleep_ms(10);
  }
  kvp_natsd_kill(d);
  return -1;
}

int kvp_natsd_start(kvp_natsd_t *d, const kvp_natsd_opts_t *opts) {
  memset(d, 0, sizeof *d);
  if (opts)
    d->opts = *opts;
  if (kvp_test_tmpdir(d->dir, sizeof d->dir) == NULL)
    return -1;
  for (int attempt = 0; attempt < 5; attempt++) {
    d->port = kvp_test_free_port();
    if (d->port > 0 && spawn(d) == 0) {
      snprintf(d->url, sizeof d->url, "nats://127.0.0.1:%d", d->port);
      return 0;
    }
  }
  kvp_test_rmtree(d->dir);
  d->dir[0] = '\0';
  return -1;
}

void kvp_natsd_signal(kvp_natsd_t *d, int sig) {
  if (d->pid > 0)
    kill(d->pid, sig);
}

static void reap(kvp_natsd_t *d, int first_sig) {
  int st;

  if (d->pid <= 0)
    return;
  kill(d->pid, SIGCONT);
  kill(d->pid, first_sig);
  for (int i = 0; i < 500; i++) {
    if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
      d->pid = 0;
      return;
    }
    sleep_ms(10);
  }
  kill(d->pid, SIGKILL);
  waitpid(d->pid, &st, 0);
  d->pid = 0;
}

void kvp_natsd_kill(kvp_natsd_t *d) {
  reap(d, SIGKILL);
}

int kvp_natsd_restart(kvp_natsd_t *d) {
  reap(d, SIGKILL);
  /* The old listener's port may linger briefly; retry for a few seconds. */
  for (int i = 0; i < 50; i++) {
    if (spawn(d) == 0)
      return 0;
    sleep_ms(100);
  }
  return -1;
}

void kvp_natsd_stop(kvp_natsd_t *d) {
  reap(d, SIGTERM);
  if (d->dir[0]) {
    kvp_test_rmtree(d->dir);
    d->dir[0] = '\0';
  }
}

/* Runs a shell command line; 0 when it exited 0. */
static int run(const char *cmd) {
  int st = system(cmd);
  return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int kvp_test_make_certs(const char *dir) {
  char cmd[4096];
  /* One CA, a server certificate for the loopback address, a client
   * certificate, and a second CA that signed nothing (to be refused). */
  snprintf(cmd, sizeof cmd,
           "set -e; cd '%s';"
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kvplane-test-ca"
           " -keyout ca-key.pem -out ca.pem;"
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kvplane-rogue-ca"
           " -keyout rogue-ca-key.pem -out rogue-ca.pem;"
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext;"
           "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1"
           " -keyout server-key.pem -out server.csr;"
           "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial"
           " -days 2 -extfile server.ext -out server.pem;"
           "printf 'extendedKeyUsage=clientAuth\\n' > client.ext;"
           "openssl req -newkey rsa:2048 -nodes -subj /CN=kvplane-test-client"
           " -keyout client-key.pem -out client.csr;"
           "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial"
           " -days 2 -extfile client.ext -out client.pem",
           dir);
  /* openssl chatters on stderr; keep test logs readable. */
  strncat(cmd, " >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
  return run(cmd);
}
