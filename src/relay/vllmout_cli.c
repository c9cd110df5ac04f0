/* kvplane-relay --reverse's command line; see vllmout.h. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "relay/cli.h"
#include "relay/vllmenc.h"
#include "config/config.h"
#include "relay/vllmout.h"

static void usage(FILE *f) {
  fputs(
      "usage: kvplane-relay --reverse -e URL -w ID[:DP] [-r URL] [-e URL -w ID [-r URL]]...\n"
      "                     [options]\n\n"
      "The relay's reverse direction: publishes kvplane workers' events from NATS as\n"
      "vLLM KV events (ZMQ PUB: topic, 8-byte big-endian sequence, msgpack payload;\n"
      "ROUTER replay: request the start sequence, replies (topic, seq, payload)\n"
      "ending with seq -1), one stream per kvplane worker, so that routers reading vLLM's stream\n"
      "see kvplane workers. Worker _advisor carries the advisor's G3/G4 moves.\n\n"
      "  -e, --endpoint URL     PUB endpoint to bind (repeatable), e.g. tcp://*:5557\n"
      "  -r, --replay URL       ROUTER endpoint to bind for the preceding --endpoint,\n"
      "                         e.g. tcp://*:5558 (default: none, no replay)\n"
      "  -w, --worker ID[:DP]   kvplane worker of the preceding --endpoint; with :DP\n"
      "                         only that data-parallel rank (default: every rank)\n"
      "      --dp-ranks N       each endpoint stands for N ranks of its worker: rank k\n"
      "                         at port + k (endpoint and replay), as vLLM numbers them\n"
      "  -t, --topic STR        first frame of every message (default empty)\n"
      "      --replay-no-topic  replay replies without the topic frame, (seq, payload),\n"
      "                         as vLLM before 0.26 and SGLang send them (default:\n"
      "                         (topic, seq, payload), as vLLM 0.26+ and llm-d's router)\n"
      "  -s, --server URL       NATS server(s), comma-separated (default\n"
      "                         nats://127.0.0.1:4222)\n"
      "      --nats NAME=VALUE  other NATS option: user, password, token, creds,\n"
      "                         tls_ca, tls_cert, tls_key, connect_timeout_ms\n"
      "  -n, --ns NAME          namespace (default \"default\")\n"
      "      --partitions N     the servers map the event subjects to N partitions\n"
      "                         (kvplane nats-config N): take the events where they\n"
      "                         map them (kvplane.pev.<ns>.*.*); without it nothing\n"
      "                         arrives from a partitioned deployment\n"
      "      --buffer N         messages kept per stream for replay (default 10000)\n"
      "      --buffer-bytes SIZE  and their bytes at most, per stream (default 128MiB;\n"
      "                         the newest message is kept whatever its size); a replay\n"
      "                         from a sequence no longer kept starts at the oldest kept\n"
      "      --hwm N            ZMQ send high-water mark (default 100000)\n"
      "      --format F         vllm (default: the batch an array [ts, events, dp], the\n"
      "                         events maps tagged \"type\", as vLLM's msgspec structs\n"
      "                         encode), map (the batch a map too) or array (tagged\n"
      "                         arrays, older vLLM releases)\n"
      "      --media LIST       medium names by tier, G<n>=NAME,... (default G1=GPU,\n"
      "                         G2=CPU, G3=DISK, G4=EXTERNAL; vLLM itself names its\n"
      "                         offloaded tier STORAGE)\n"
      "      --idle-ms N        an empty batch on a stream silent for N ms (default\n"
      "                         10000; 0: never): its sequence tells a router what it\n"
      "                         missed on an idle stream (a restart of this relay)\n"
      "      --no-resync        never ask a worker for a resync (by default one is asked\n"
      "                         on first sight after missed events, after a gap and\n"
      "                         after a new epoch)\n\n"
      "Figures: one JSON line per stream on stdout at exit.\n"
      "exit status: 0 after SIGINT or SIGTERM, 1 for bad options (an endpoint that\n"
      "cannot be bound included), 2 when NATS cannot be reached.\n",
      f);
}

static kvp__vout_t *running;

static void on_stop(int sig) {
  (void)sig;
  if (running)
    kvp__vout_stop(running);
}

/* url with its port plus k (a new string in *owned), or NULL. */
static char *port_plus(const char *url, unsigned k) {
  const char *colon = strrchr(url, ':');
  char *end, *out;
  if (colon == NULL || colon[1] == '\0')
    return NULL;
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (*end != '\0' || errno != 0 || port + k > 65535)
    return NULL;
  size_t n = (size_t)(colon - url) + 8;
  if ((out = malloc(n)) != NULL)
    snprintf(out, n, "%.*s:%lu", (int)(colon - url), url, port + k);
  return out;
}

/* An integer option in min..max; else -1 after an error naming it. */
static int parse_uint(const char *name, const char *s, unsigned long min, unsigned long max,
                      unsigned long *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0 || v < min || v > max || s[0] == '-') {
    fprintf(stderr, "kvplane-relay: --%s: '%s' is not a number in %lu..%lu\n", name, s, min, max);
    return -1;
  }
  *out = v;
  return 0;
}

int kvp__vout_main(int argc, char **argv) {
  static const struct option opts[] = {
      {"reverse", no_argument, 0, 'R'},        {"endpoint", required_argument, 0, 'e'},
      {"replay", required_argument, 0, 'r'},   {"worker", required_argument, 0, 'w'},
      {"dp-ranks", required_argument, 0, 1},   {"topic", required_argument, 0, 't'},
      {"server", required_argument, 0, 's'},   {"nats", required_argument, 0, 2},
      {"ns", required_argument, 0, 'n'},       {"buffer", required_argument, 0, 3},
      {"hwm", required_argument, 0, 4},        {"format", required_argument, 0, 5},
      {"no-resync", no_argument, 0, 6},        {"media", required_argument, 0, 7},
      {"partitions", required_argument, 0, 8}, {"replay-no-topic", no_argument, 0, 9},
      {"idle-ms", required_argument, 0, 10},   {"buffer-bytes", required_argument, 0, 11},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  kvp__vout_opts_t o;
  const char *ep[KVP_RELAY_MAX_ENDPOINTS] = {0}, *rp[KVP_RELAY_MAX_ENDPOINTS] = {0},
             *wk[KVP_RELAY_MAX_ENDPOINTS] = {0};
  char *owned[3 * KVP_RELAY_MAX_ENDPOINTS];
  size_t nep = 0, nowned = 0;
  unsigned long dp_ranks = 1, v;
  char err[512];
  int c, status = 1;
  kvp__vout_t *vo = NULL;

  kvp__vout_opts_init(&o);
  optind = 1;
  while ((c = getopt_long(argc, argv, "e:r:w:t:s:n:h", opts, NULL)) != -1) {
    switch (c) {
    case 'R':
      break;
    case 'e':
      if (nep == KVP_RELAY_MAX_ENDPOINTS) {
        fprintf(stderr, "kvplane-relay: more than %d endpoints\n", KVP_RELAY_MAX_ENDPOINTS);
        return 1;
      }
      if (kvp__relay_url_port_check("--endpoint", optarg, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: %s\n", err);
        return 1;
      }
      ep[nep++] = optarg;
      break;
    case 'r':
    case 'w':
      if (nep == 0) {
        fprintf(stderr, "kvplane-relay: --%s before any --endpoint\n",
                c == 'r' ? "replay" : "worker");
        return 1;
      }
      /* Not (c == 'r' ? rp : wk)[nep - 1]: GCC's UndefinedBehaviorSanitizer
       * (object-size) took that store for one past a single pointer. */
      if (c == 'r' && kvp__relay_url_port_check("--replay", optarg, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: %s\n", err);
        return 1;
      }
      if (c == 'r')
        rp[nep - 1] = optarg;
      else
        wk[nep - 1] = optarg;
      break;
    case 1:
      if (parse_uint("dp-ranks", optarg, 1, 64, &dp_ranks) != 0)
        return 1;
      break;
    case 't':
      o.topic = optarg;
      break;
    case 9:
      o.replay_topic = 0;
      break;
    case 's':
      if (kvp_nats_opts_set(&o.nats, "servers", optarg, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: --server: %s\n", err);
        return 1;
      }
      break;
    case 2: {
      char name[64];
      const char *eq = strchr(optarg, '=');
      if (eq == NULL || (size_t)(eq - optarg) >= sizeof name) {
        fprintf(stderr, "kvplane-relay: --nats: '%s' is not NAME=VALUE\n", optarg);
        return 1;
      }
      snprintf(name, sizeof name, "%.*s", (int)(eq - optarg), optarg);
      if (kvp_nats_opts_set(&o.nats, name, eq + 1, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane-relay: --nats: %s\n", err);
        return 1;
      }
      break;
    }
    case 'n':
      o.ns = optarg;
      break;
    case 3:
      if (parse_uint("buffer", optarg, 1, 1ul << 24, &v) != 0)
        return 1;
      o.buffer_steps = v;
      break;
    case 11: {
      int64_t bytes;
      if (kvp__parse_size(optarg, &bytes) != 0 || bytes <= 0) {
        fprintf(stderr, "kvplane-relay: --buffer-bytes: '%s' is not a size above 0 (e.g. 64MiB)\n",
                optarg);
        return 1;
      }
      o.buffer_bytes = (size_t)bytes;
      break;
    }
    case 4:
      /* 0 would be libzmq's "no limit": an unbounded queue per slow router. */
      if (parse_uint("hwm", optarg, 1, 1ul << 30, &v) != 0)
        return 1;
      o.sndhwm = (int)v;
      break;
    case 5:
      if (strcmp(optarg, "vllm") == 0)
        o.format = KVP__VOUT_VLLM;
      else if (strcmp(optarg, "map") == 0)
        o.format = KVP__VOUT_MAP;
      else if (strcmp(optarg, "array") == 0)
        o.format = KVP__VOUT_ARRAY;
      else {
        fprintf(stderr, "kvplane-relay: --format: '%s' is not vllm, map or array\n", optarg);
        return 1;
      }
      break;
    case 6:
      o.no_resync = 1;
      break;
    case 7:
      o.media = optarg;
      break;
    case 8: /* any count: every partition of the namespace is taken */
      if (parse_uint("partitions", optarg, 1, KVP_PARTITIONS_MAX, &v) != 0)
        return 1;
      o.partitioned = 1;
      break;
    case 10:
      if (parse_uint("idle-ms", optarg, 0, 86400000ul, &v) != 0)
        return 1;
      o.idle_ms = (uint32_t)v;
      break;
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
  if (nep * dp_ranks > KVP_RELAY_MAX_ENDPOINTS) {
    fprintf(stderr, "kvplane-relay: more than %d streams\n", KVP_RELAY_MAX_ENDPOINTS);
    return 1;
  }
  for (size_t i = 0; i < nep; i++) {
    char *w;
    int64_t dp = -1;
    if (wk[i] == NULL) {
      fprintf(stderr, "kvplane-relay: --endpoint %s: no --worker\n", ep[i]);
      goto out;
    }
    if ((w = strdup(wk[i])) == NULL)
      goto out;
    owned[nowned++] = w;
    char *colon = strchr(w, ':');
    if (colon != NULL) {
      *colon = '\0';
      if (parse_uint("worker", colon + 1, 0, UINT32_MAX, &v) != 0 || dp_ranks > 1) {
        if (dp_ranks > 1)
          fprintf(stderr, "kvplane-relay: --worker %s: a rank with --dp-ranks\n", wk[i]);
        goto out;
      }
      dp = (int64_t)v;
    }
    for (unsigned k = 0; k < dp_ranks; k++) {
      kvp__vout_stream_opts_t *s = &o.streams[o.nstreams++];
      s->worker = w;
      s->dp_rank = dp_ranks > 1 ? (int64_t)k : dp;
      s->endpoint = ep[i];
      s->replay = rp[i];
      if (dp_ranks > 1) {
        char *e = port_plus(ep[i], k), *r = rp[i] ? port_plus(rp[i], k) : NULL;
        if (e)
          owned[nowned++] = e;
        if (r)
          owned[nowned++] = r;
        if (e == NULL || (rp[i] && r == NULL)) {
          fprintf(stderr, "kvplane-relay: --endpoint %s: no port to add rank %u to\n", ep[i], k);
          goto out;
        }
        s->endpoint = e;
        s->replay = r;
      }
    }
  }
  kvp__log_setup(KVP_LOG_INFO, "kvplane-relay");
  int rc = kvp__vout_open(&o, &vo, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "kvplane-relay: %s\n", err);
    status = rc == KVP_ECONFIG ? 1 : 2;
    goto out;
  }
  for (size_t i = 0; i < o.nstreams; i++) {
    char dp[24] = "every";
    if (o.streams[i].dp_rank >= 0)
      snprintf(dp, sizeof dp, "%" PRId64, o.streams[i].dp_rank);
    fprintf(stderr, "kvplane-relay: worker %s dp %s -> vLLM events on %s (replay %s), ns %s\n",
            o.streams[i].worker, dp, o.streams[i].endpoint,
            o.streams[i].replay ? o.streams[i].replay : "none", o.ns);
  }
  running = vo;
  signal(SIGINT, on_stop);
  signal(SIGTERM, on_stop);
  signal(SIGPIPE, SIG_IGN);
  kvp__vout_run(vo);
  running = NULL;
  kvp__vout_stats_print(vo, stdout);
  status = 0;
out:
  kvp__vout_close(vo);
  for (size_t i = 0; i < nowned; i++)
    free(owned[i]);
  return status;
}
