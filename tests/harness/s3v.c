/* The verifying S3 server for tests (see s3v.h). */
#include "s3v.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static int spawn(kvp_s3v_t *s) {
  char port[16], data[300], log[300], prog[512], page[16], c1[128], c2[256];
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(page, sizeof page, "%d", s->page);
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(log, sizeof log, "%s/server.log", s->dir);
  snprintf(prog, sizeof prog, "%s/tools/s3_verify.py", kvp_test_srcdir());
  snprintf(c1, sizeof c1, "%s:%s", KVP_S3V_ACCESS, KVP_S3V_SECRET);
  snprintf(c2, sizeof c2, "%s:%s:%s", KVP_S3V_SESSION_ACCESS, KVP_S3V_SESSION_SECRET,
           KVP_S3V_SESSION_TOKEN);
  char *argv[] = {"/usr/bin/python3", prog,      "--port",   port,      "--dir",  data,
                  "--bucket",         s->bucket, "--region", s->region, "--page", page,
                  "--cred",           c1,        "--cred",   c2,        NULL};
  s->pid = kvp_test_spawn_server(argv, log, s->port, "s3v (python3-botocore?)");
  return s->pid > 0 ? 0 : -1;
}

int kvp_s3v_start(kvp_s3v_t *s, const char *region) {
  memset(s, 0, sizeof *s);
  snprintf(s->bucket, sizeof s->bucket, "kvb");
  snprintf(s->region, sizeof s->region, "%s", region ? region : "us-east-1");
  s->page = 1000;
  if (kvp_test_tmpdir(s->dir, sizeof s->dir) == NULL)
    return -1;
  s->port = kvp_test_free_port();
  snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", s->port);
  snprintf(s->host_endpoint, sizeof s->host_endpoint, "http://localhost:%d", s->port);
  if (spawn(s) != 0) {
    kvp_test_rmtree(s->dir);
    s->dir[0] = '\0';
    return -1;
  }
  return 0;
}

int kvp_s3v_control(const kvp_s3v_t *s, const char *query) {
  char req[512], resp[256];
  int fd = kvp_test_connect(s->port), ok = 0;
  if (fd < 0)
    return -1;
  int n =
      snprintf(req, sizeof req,
               "GET /__kvp_ctl?%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", query);
  if (write(fd, req, (size_t)n) == n) {
    ssize_t got = read(fd, resp, sizeof resp - 1);
    if (got > 0) {
      resp[got] = '\0';
      ok = strncmp(resp, "HTTP/1.1 200", 12) == 0 || strncmp(resp, "HTTP/1.0 200", 12) == 0;
    }
  }
  close(fd);
  return ok ? 0 : -1;
}

void kvp_s3v_kill(kvp_s3v_t *s) {
  kvp_test_kill_server(s->pid);
  s->pid = 0;
}

int kvp_s3v_restart(kvp_s3v_t *s) {
  return spawn(s);
}

void kvp_s3v_stop(kvp_s3v_t *s) {
  kvp_s3v_kill(s);
  if (s->dir[0]) {
    kvp_test_rmtree(s->dir);
    s->dir[0] = '\0';
  }
}
