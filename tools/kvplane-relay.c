/* kvplane-relay: KV events of vLLM and SGLang engines (ZMQ) republished as
 * kvplane events on NATS. A thin main over kvplane/relay.h. */
#include <getopt.h>
#include <pthread.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay/relay.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "metrics/server.h"
#include "relay/metrics.h"

#define MAXN KVP_RELAY_MAX_ENDPOINTS

static kvp_relay_t *g_relay;
static volatile sig_atomic_t g_dump;

static void on_stop(int sig) {
  (void)sig;
  if (g_relay)
    kvp_relay_stop(g_relay);
}
static void on_usr1(int sig) {
  (void)sig;
  g_dump = 1;
}

static void *run_loop(void *r) {
  kvp_relay_run(r);
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f, "usage: kvplane-relay -e URL -w ID [-r URL] [-e URL -w ID [-r URL]]... [options]\n\n"
             "Subscribes to the ZMQ KV-event publishers of vLLM or SGLang engines and\n"
             "republishes their events as kvplane events on NATS, one worker id per engine\n"
             "endpoint (subject kvplane.ev.<ns>.<worker>).\n\n"
             "  -e, --endpoint URL     engine PUB endpoint to connect (repeatable), e.g.\n"
             "                         tcp://10.0.0.5:5557\n"
             "  -r, --replay URL       replay (ROUTER) endpoint of the preceding --endpoint,\n"
             "                         e.g. tcp://10.0.0.5:5558; without one a sequence gap\n"
             "                         clears the worker's blocks\n"
             "  -w, --worker ID        worker id of the preceding --endpoint ([A-Za-z0-9_-])\n"
             "      --dp-ranks N       each endpoint is a data-parallel engine of N ranks:\n"
             "                         rank k at port + k (endpoint and replay), worker\n"
             "                         ID-dp<k> (default 1: no expansion)\n"
             "  -t, --topic STR        ZMQ topic filter (default: every topic)\n"
             "  -s, --server URL       NATS server(s), comma-separated (default\n"
             "                         nats://127.0.0.1:4222)\n"
             "      --nats NAME=VALUE  other NATS option: user, password, token, creds,\n"
             "                         tls_ca, tls_cert, tls_key, connect_timeout_ms\n"
             "  -n, --ns NAME          namespace (default \"default\")\n"
             "  -m, --mode MODE        core or jetstream (default core)\n"
             "      --media LIST       medium-to-tier overrides, NAME=G<n>,... (default table:\n"
             "                         GPU=G1, CPU/CPU_PINNED=G2, DISK/STORAGE/SHARED_STORAGE/\n"
             "                         NVME=G3, OBJECT_STORE/REMOTE/EXTERNAL=G4)\n"
             "      --block-size N     tokens per block when events omit block_size\n"
             "      --map-cap N        engine-to-kvplane hashes remembered per worker, LRU\n"
             "                         (default 1048576)\n"
             "      --hwm N            ZMQ receive high-water mark (default 100000)\n"
             "      --replay-timeout-ms N  wait for each replay reply (default 1000)\n"
             "      --stats-interval S print the figures every S seconds on stdout (default\n"
             "                         0: only at exit and on SIGUSR1)\n"
             "      --metrics ADDR     serve Prometheus /metrics, /healthz and /readyz over\n"
             "                         HTTP on host:port, e.g. 127.0.0.1:9465 (default: off)\n"
             "  -h, --help             this text\n\n"
             "Figures are one JSON line per endpoint. Blocks whose engine event carries\n"
             "token ids (and no extra_keys) get kvplane sequence hashes; others keep the\n"
             "engine's hash, counted as engine_native.\n\n"
             "exit status: 0 after SIGINT or SIGTERM, 1 for bad arguments or options (a\n"
             "malformed endpoint URL included),\n"
             "2 when NATS could not be reached or refused the credentials.\n");
}

static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "kvplane-relay: %s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
            opt, s, min, max);
    exit(1);
  }
  return v;
}

/* url with its port plus k; NULL when url has no numeric port. */
static char *port_plus(const char *url, unsigned k) {
  const char *c = strrchr(url, ':');
  char *end;
  if (!c || c[1] == '\0')
    return NULL;
  unsigned long p = strtoul(c + 1, &end, 10);
  if (*end != '\0' || p + k > 65535)
    return NULL;
  size_t n = (size_t)(c - url) + 16;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, "%.*s:%lu", (int)(c - url), url, p + k);
  return s;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"endpoint", required_argument, 0, 'e'},
                                       {"replay", required_argument, 0, 'r'},
                                       {"worker", required_argument, 0, 'w'},
                                       {"dp-ranks", required_argument, 0, 1},
                                       {"topic", required_argument, 0, 't'},
                                       {"server", required_argument, 0, 's'},
                                       {"nats", required_argument, 0, 2},
                                       {"ns", required_argument, 0, 'n'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"media", required_argument, 0, 3},
                                       {"block-size", required_argument, 0, 4},
                                       {"map-cap", required_argument, 0, 5},
                                       {"hwm", required_argument, 0, 6},
                                       {"replay-timeout-ms", required_argument, 0, 7},
                                       {"stats-interval", required_argument, 0, 8},
                                       {"metrics", required_argument, 0, 9},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *ep[MAXN] = {0}, *rp[MAXN] = {0}, *wk[MAXN] = {0};
  char *owned[3 * MAXN] = {0};
  size_t nep = 0, nowned = 0;
  unsigned dp = 1, interval = 0;
  const char *metrics = NULL;
  kvp__metrics_server_t *msrv = NULL;
  kvp_relay_opts_t o;
  char err[512];
  int c, status = 0, rc;

  kvp_relay_opts_init(&o);
  while ((c = getopt_long(argc, argv, "e:r:w:t:s:n:m:h", opts, NULL)) != -1) {
    switch (c) {
    case 'e':
      if (nep == MAXN) {
        fprintf(stderr, "kvplane-relay: --endpoint: at most %d\n", MAXN);
        return 1;
      }
      ep[nep++] = optarg;
      break;
    case 'r':
    case 'w': {
      const char **slot = nep > 0 ? (c == 'r' ? rp : wk) + (nep - 1) : NULL;
      if (!slot || *slot) {
        fprintf(stderr, "kvplane-relay: --%s must follow its --endpoint (one each)\n",
                c == 'r' ? "replay" : "worker");
        return 1;
      }
      *slot = optarg;
      break;
    }
    case 1:
      dp = (unsigned)parse_count("--dp-ranks", optarg, 1, MAXN);
      break;
    case 't':
      o.topic = optarg;
      break;
    case 's':
    case 2: {
      const char *name = "servers", *val = optarg;
      char buf[1100];
      if (c == 2) {
        const char *eq = strchr(optarg, '=');
        if (!eq || (size_t)(eq - optarg) >= 64) {
          fprintf(stderr, "kvplane-relay: --nats: '%s' is not NAME=VALUE\n", optarg);
          return 1;
        }
        snprintf(buf, sizeof buf, "%.*s", (int)(eq - optarg), optarg);
        name = buf;
        val = eq + 1;
      }
      if (kvp_nats_opts_set(&o.pub.nats, name, val, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: %s\n", err);
        return 1;
      }
      break;
    }
    case 'n':
      o.pub.ns = optarg;
      break;
    case 'm':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "jetstream") != 0) {
        fprintf(stderr, "kvplane-relay: --mode: '%s' is not core or jetstream\n", optarg);
        return 1;
      }
      o.pub.mode = strcmp(optarg, "core") == 0 ? KVP_PUB_CORE : KVP_PUB_JETSTREAM;
      o.pub.stream_create = 1;
      break;
    case 3:
      o.media = optarg;
      break;
    case 4:
      o.block_size = (uint32_t)parse_count("--block-size", optarg, 1, 1u << 20);
      break;
    case 5:
      o.map_cap = parse_count("--map-cap", optarg, 1, 1u << 30);
      break;
    case 6:
      o.rcvhwm = (int)parse_count("--hwm", optarg, 1, 1u << 30);
      break;
    case 7:
      o.replay_timeout_ms = (uint32_t)parse_count("--replay-timeout-ms", optarg, 1, 600000);
      break;
    case 8:
      interval = (unsigned)parse_count("--stats-interval", optarg, 0, 86400);
      break;
    case 9: {
      struct sockaddr_storage sa;
      unsigned salen;
      if (kvp__metrics_parse_addr("--metrics", optarg, &sa, &salen, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: %s\n", err);
        return 1;
      }
      metrics = optarg;
      break;
    }
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 1;
    }
  }
  if (optind != argc || nep == 0) {
    fprintf(stderr, "kvplane-relay: %s\n", nep ? "unexpected argument" : "--endpoint is required");
    usage(stderr);
    return 1;
  }
  if (nep * dp > MAXN) {
    fprintf(stderr, "kvplane-relay: --dp-ranks: %zu endpoints x %u ranks is above %d\n", nep, dp,
            MAXN);
    return 1;
  }
  for (size_t i = 0; i < nep; i++) {
    if (!wk[i] || !kvp_subject_token_valid(wk[i])) {
      fprintf(stderr, "kvplane-relay: --worker of %s: %s\n", ep[i],
              wk[i] ? "not 1..64 characters of [A-Za-z0-9_-]" : "missing");
      return 1;
    }
    for (unsigned k = 0; k < dp; k++) {
      kvp_relay_endpoint_t *e = &o.endpoints[o.nendpoints++];
      e->dp_rank = k;
      if (dp == 1) {
        e->endpoint = ep[i];
        e->replay = rp[i];
        e->worker_id = wk[i];
        continue;
      }
      char *u = port_plus(ep[i], k), *r = rp[i] ? port_plus(rp[i], k) : NULL;
      char *w = malloc(80);
      owned[nowned++] = u;
      owned[nowned++] = r;
      owned[nowned++] = w;
      if (!u || (rp[i] && !r) || !w) {
        fprintf(stderr, "kvplane-relay: --dp-ranks: %s has no port to add the rank to\n",
                !u ? ep[i] : rp[i]);
        status = 1;
        goto out;
      }
      snprintf(w, 80, "%s-dp%u", wk[i], k);
      if (!kvp_subject_token_valid(w)) {
        fprintf(stderr, "kvplane-relay: --worker %s: too long with -dp%u\n", wk[i], k);
        status = 1;
        goto out;
      }
      e->endpoint = u;
      e->replay = r;
      e->worker_id = w;
    }
  }
  if (kvp_nats_opts_check(&o.pub.nats, "--nats ", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane-relay: %s\n", err);
    status = 1;
    goto out;
  }
  rc = kvp_relay_open(&o, &g_relay, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "kvplane-relay: %s (%s)\n", err, kvp_err_name(rc));
    status = (rc == KVP_ECONFIG || rc == KVP_EINVAL) ? 1 : 2;
    goto out;
  }
  if (metrics != NULL && (rc = kvp__metrics_server_start(
                              "--metrics", metrics, kvp__relay_metrics_collect,
                              kvp__relay_metrics_ready, g_relay, &msrv, err, sizeof err)) != 0) {
    fprintf(stderr, "kvplane-relay: %s (%s)\n", err, kvp_err_name(rc));
    status = 1;
    goto out;
  }
  for (size_t i = 0; i < o.nendpoints; i++)
    fprintf(stderr, "kvplane-relay: %s (%s): subscribed, replay %s\n", o.endpoints[i].endpoint,
            o.endpoints[i].worker_id, o.endpoints[i].replay ? o.endpoints[i].replay : "none");
  signal(SIGINT, on_stop);
  signal(SIGTERM, on_stop);
  signal(SIGUSR1, on_usr1);
  signal(SIGPIPE, SIG_IGN);
  /* The relay loop runs on its own thread; this one prints the figures on
   * SIGUSR1 and every --stats-interval seconds until a signal stops it. */
  {
    pthread_t th;
    if (pthread_create(&th, NULL, run_loop, g_relay) != 0) {
      fprintf(stderr, "kvplane-relay: cannot start the loop thread\n");
      status = 2;
      goto out;
    }
    time_t last = time(NULL);
    for (;;) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
      if (g_dump || (interval && time(NULL) - last >= (time_t)interval)) {
        g_dump = 0;
        last = time(NULL);
        kvp_relay_stats_print(g_relay, stdout);
      }
      if (kvp_relay_stopped(g_relay))
        break;
    }
    pthread_join(th, NULL);
  }
  kvp_relay_stats_print(g_relay, stdout);
out:
  kvp__metrics_server_stop(msrv); /* it reads the relay: stopped first */
  kvp_relay_close(g_relay);
  for (size_t i = 0; i < nowned; i++)
    free(owned[i]);
  return status;
}
