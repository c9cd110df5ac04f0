/* A 3-node nats-server cluster for tests; see natscluster.h. */
#define _GNU_SOURCE
#include "natscluster.h"

#include <fcntl.h>
#include <nats/nats.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/subjects.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int write_conf(kvp_cluster_t *c, int i) {
  FILE *f = fopen(c->node[i].conf, "w");
  char map[1024] = "";
  if (f == NULL)
    return -1;
  if (c->partitions > 0)
    kvp_partition_mapping_conf(map, sizeof map, (uint32_t)c->partitions);
  fprintf(f,
          "server_name: n%d\nlisten: 127.0.0.1:%d\n"
          "jetstream { store_dir: \"%s/n%d\" }\n"
          "cluster {\n  name: kvpc\n  listen: 127.0.0.1:%d\n  routes: [\n",
          i, c->node[i].port, c->dir, i, c->node[i].route_port);
  for (int j = 0; j < KVP_CLUSTER_NODES; j++)
    if (j != i)
      fprintf(f, "    nats-route://127.0.0.1:%d\n", c->node[j].route_port);
  fprintf(f, "  ]\n}\n%s", map);
  return fclose(f) == 0 ? 0 : -1;
}

static int spawn(kvp_cluster_t *c, int i) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fd = open(c->node[i].log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execlp("nats-server", "nats-server", "-c", c->node[i].conf, (char *)NULL);
    _exit(127);
  }
  c->node[i].pid = pid;
  for (int t = 0; t < 400; t++) {
    int fd = kvp_test_connect(c->node[i].port), st;
    if (fd >= 0) {
      close(fd);
      return 0;
    }
    if (waitpid(pid, &st, WNOHANG) == pid) {
      fprintf(stderr, "cluster: node %d exited at start (log: %s)\n", i, c->node[i].log);
      c->node[i].pid = 0;
      return -1;
    }
    sleep_ms(50);
  }
  fprintf(stderr, "cluster: node %d: no answer on port %d after 20 s (log: %s)\n", i,
          c->node[i].port, c->node[i].log);
  kvp_cluster_kill(c, i);
  return -1;
}

/* 0 once the JetStream API answers an account info request. */
static int js_ready(kvp_cluster_t *c) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsAccountInfo *ai = NULL;
  jsErrCode jerr = 0;
  int ok = -1;
  natsOptions *o = NULL;
  const char *urls[KVP_CLUSTER_NODES];
  for (int i = 0; i < KVP_CLUSTER_NODES; i++)
    urls[i] = c->node[i].url;
  if (natsOptions_Create(&o) == NATS_OK &&
      natsOptions_SetServers(o, urls, KVP_CLUSTER_NODES) == 0 &&
      natsConnection_Connect(&nc, o) == NATS_OK &&
      natsConnection_JetStream(&js, nc, NULL) == NATS_OK &&
      js_GetAccountInfo(&ai, js, NULL, &jerr) == NATS_OK) {
    /* Every peer known: an R3 stream can be placed. */
    jsStreamConfig sc;
    jsStreamInfo *si = NULL;
    const char *subj[] = {"kvp-test-probe"};
    jsStreamConfig_Init(&sc);
    sc.Name = "KVP_TEST_PROBE";
    sc.Subjects = subj;
    sc.SubjectsLen = 1;
    sc.Replicas = KVP_CLUSTER_NODES;
    sc.Storage = js_MemoryStorage;
    if (js_AddStream(&si, js, &sc, NULL, &jerr) == NATS_OK &&
        js_DeleteStream(js, "KVP_TEST_PROBE", NULL, &jerr) == NATS_OK)
      ok = 0;
    jsStreamInfo_Destroy(si);
  }
  jsAccountInfo_Destroy(ai);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(o);
  return ok;
}

int kvp_cluster_start(kvp_cluster_t *c, int partitions) {
  memset(c, 0, sizeof *c);
  c->partitions = partitions;
  if (kvp_test_tmpdir(c->dir, sizeof c->dir) == NULL)
    return -1;
  for (int i = 0; i < KVP_CLUSTER_NODES; i++) {
    /* Six distinct ports that were free a moment ago. */
    for (;;) {
      int p = kvp_test_free_port(), q = kvp_test_free_port(), clash = p == q || p <= 0 || q <= 0;
      for (int j = 0; j < i && !clash; j++)
        clash = p == c->node[j].port || p == c->node[j].route_port || q == c->node[j].port ||
                q == c->node[j].route_port;
      if (!clash) {
        c->node[i].port = p;
        c->node[i].route_port = q;
        break;
      }
    }
    snprintf(c->node[i].conf, sizeof c->node[i].conf, "%s/n%d.conf", c->dir, i);
    snprintf(c->node[i].log, sizeof c->node[i].log, "%s/n%d.log", c->dir, i);
    snprintf(c->node[i].url, sizeof c->node[i].url, "nats://127.0.0.1:%d", c->node[i].port);
    snprintf(c->urls + strlen(c->urls), sizeof c->urls - strlen(c->urls), "%s%s", i ? "," : "",
             c->node[i].url);
  }
  for (int i = 0; i < KVP_CLUSTER_NODES; i++)
    if (write_conf(c, i) != 0 || spawn(c, i) != 0)
      goto fail;
  for (int t = 0; t < 300; t++) {
    if (js_ready(c) == 0)
      return 0;
    sleep_ms(100);
  }
  fprintf(stderr, "cluster: JetStream not ready after 30 s (logs: %s/n*.log)\n", c->dir);
fail:
  kvp_cluster_stop(c);
  return -1;
}

void kvp_cluster_kill(kvp_cluster_t *c, int i) {
  if (c->node[i].pid > 0) {
    kill(c->node[i].pid, SIGKILL);
    waitpid(c->node[i].pid, NULL, 0);
    c->node[i].pid = 0;
  }
}

int kvp_cluster_restart(kvp_cluster_t *c, int i) {
  kvp_cluster_kill(c, i);
  return spawn(c, i);
}

int kvp_cluster_wait_stream(kvp_cluster_t *c, const char *stream, int timeout_ms) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  natsOptions *o = NULL;
  const char *urls[KVP_CLUSTER_NODES];
  int ok = -1;
  for (int i = 0; i < KVP_CLUSTER_NODES; i++)
    urls[i] = c->node[i].url;
  if (natsOptions_Create(&o) != NATS_OK ||
      natsOptions_SetServers(o, urls, KVP_CLUSTER_NODES) != 0 ||
      natsConnection_Connect(&nc, o) != NATS_OK ||
      natsConnection_JetStream(&js, nc, NULL) != NATS_OK)
    goto out;
  for (int t = 0; t * 100 < timeout_ms && ok != 0; t++) {
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    if (js_GetStreamInfo(&si, js, stream, NULL, &jerr) == NATS_OK && si->Cluster != NULL &&
        si->Cluster->Leader != NULL) {
      int current = 1;
      for (int r = 0; r < si->Cluster->ReplicasLen; r++)
        current &= si->Cluster->Replicas[r]->Current && !si->Cluster->Replicas[r]->Offline;
      if (current)
        ok = 0;
    }
    jsStreamInfo_Destroy(si);
    if (ok != 0)
      sleep_ms(100);
  }
out:
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(o);
  return ok;
}

void kvp_cluster_stop(kvp_cluster_t *c) {
  for (int i = 0; i < KVP_CLUSTER_NODES; i++)
    kvp_cluster_kill(c, i);
  if (c->dir[0]) {
    kvp_test_rmtree(c->dir);
    c->dir[0] = '\0';
  }
}
