/* kvplane-relay's command line (cli.h): options by their long name, and the
 * endpoints expanded over --dp-ranks. */
#include "relay/cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "config/config.h"
#include "metrics/server.h"

#define MAXN KVP_RELAY_MAX_ENDPOINTS

void kvp__relay_cli_init(kvp__relay_cli_t *c) {
  memset(c, 0, sizeof *c);
  kvp_relay_opts_init(&c->o);
  c->dp_ranks = 1;
  kvp__metrics_server_opts_init(&c->metrics_opts);
}

/* An integer option in [min, max]; 0 or KVP_ECONFIG. */
static int count(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *v, char *err,
                 size_t errlen) {
  char *end;
  unsigned long long x = strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || x < min || x > max) {
    snprintf(err, errlen, "%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]", opt, s, min,
             max);
    return KVP_ECONFIG;
  }
  *v = x;
  return 0;
}

int kvp__relay_url_port_check(const char *opt, const char *url, char *err, size_t errlen) {
  const char *colon = strrchr(url, ':');
  unsigned long port = 0;

  if (strncmp(url, "tcp://", 6) != 0)
    return 0;
  if (colon != NULL && colon > url + 5 && colon[1] >= '0' && colon[1] <= '9' &&
      strspn(colon + 1, "0123456789") == strlen(colon + 1) && strlen(colon + 1) <= 5)
    port = strtoul(colon + 1, NULL, 10);
  if (port < 1 || port > 65535) {
    snprintf(err, errlen, "%s %s: port '%s' is not a number in 1..65535", opt, url,
             colon != NULL && colon > url + 5 ? colon + 1 : "");
    return KVP_ECONFIG;
  }
  return 0;
}

/* --server URL, or --nats NAME=VALUE. */
static int nats_option(kvp__relay_cli_t *c, int is_server, const char *arg, char *err,
                       size_t errlen) {
  const char *name = "servers", *val = arg;
  char buf[1100];
  if (!is_server) {
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= 64) {
      snprintf(err, errlen, "--nats: '%s' is not NAME=VALUE", arg);
      return KVP_ECONFIG;
    }
    snprintf(buf, sizeof buf, "%.*s", (int)(eq - arg), arg);
    name = buf;
    val = eq + 1;
  }
  return kvp_nats_opts_set(&c->o.pub.nats, name, val, err, errlen) != 0 ? KVP_ECONFIG : 0;
}

int kvp__relay_cli_set(kvp__relay_cli_t *c, const char *name, const char *value, char *err,
                       size_t errlen) {
  uint64_t v = 0;
  int rc = 0;
  if (strcmp(name, "endpoint") == 0) {
    if (c->nargs == MAXN) {
      snprintf(err, errlen, "--endpoint: at most %d", MAXN);
      return KVP_ECONFIG;
    }
    if ((rc = kvp__relay_url_port_check("--endpoint", value, err, errlen)) != 0)
      return rc;
    c->endpoint[c->nargs++] = value;
  } else if (strcmp(name, "replay") == 0 || strcmp(name, "worker") == 0) {
    const char **slot =
        c->nargs > 0 ? (name[0] == 'r' ? c->replay : c->worker) + (c->nargs - 1) : NULL;
    if (!slot || *slot) {
      snprintf(err, errlen, "--%s must follow its --endpoint (one each)", name);
      return KVP_ECONFIG;
    }
    if (name[0] == 'r' && value[0] == '\0') {
      snprintf(err, errlen, "--replay of %s: empty", c->endpoint[c->nargs - 1]);
      return KVP_ECONFIG;
    }
    if (name[0] == 'r' && (rc = kvp__relay_url_port_check("--replay", value, err, errlen)) != 0)
      return rc;
    *slot = value;
  } else if (strcmp(name, "dp-ranks") == 0) {
    if ((rc = count("--dp-ranks", value, 1, MAXN, &v, err, errlen)) == 0)
      c->dp_ranks = (unsigned)v;
  } else if (strcmp(name, "topic") == 0) {
    c->o.topic = value;
  } else if (strcmp(name, "server") == 0 || strcmp(name, "nats") == 0) {
    rc = nats_option(c, name[0] == 's', value, err, errlen);
  } else if (strcmp(name, "ns") == 0) {
    if (!kvp_subject_token_valid(value)) { /* "" would silently be "default" */
      snprintf(err, errlen, "--ns: '%s' is not 1..64 characters of [A-Za-z0-9_-]", value);
      return KVP_ECONFIG;
    }
    c->o.pub.ns = value;
  } else if (strcmp(name, "mode") == 0) {
    if (strcmp(value, "core") != 0 && strcmp(value, "jetstream") != 0) {
      snprintf(err, errlen, "--mode: '%s' is not core or jetstream", value);
      return KVP_ECONFIG;
    }
    c->o.pub.mode = strcmp(value, "core") == 0 ? KVP_PUB_CORE : KVP_PUB_JETSTREAM;
    c->o.pub.stream_create = 1;
  } else if (strcmp(name, "partitions") == 0) {
    if ((rc = count("--partitions", value, 1, KVP_PARTITIONS_MAX, &v, err, errlen)) == 0)
      c->o.pub.partitions = (uint32_t)v;
  } else if (strcmp(name, "media") == 0) {
    c->o.media = value;
  } else if (strcmp(name, "block-size") == 0) {
    if ((rc = count("--block-size", value, 1, 1u << 20, &v, err, errlen)) == 0)
      c->o.block_size = (uint32_t)v;
  } else if (strcmp(name, "map-cap") == 0) {
    if ((rc = count("--map-cap", value, 1, 1u << 30, &v, err, errlen)) == 0)
      c->o.map_cap = v;
  } else if (strcmp(name, "hwm") == 0) {
    if ((rc = count("--hwm", value, 1, 1u << 30, &v, err, errlen)) == 0)
      c->o.rcvhwm = (int)v;
  } else if (strcmp(name, "replay-timeout-ms") == 0) {
    if ((rc = count("--replay-timeout-ms", value, 1, 600000, &v, err, errlen)) == 0)
      c->o.replay_timeout_ms = (uint32_t)v;
  } else if (strcmp(name, "join-window") == 0) {
    if ((rc = count("--join-window", value, 1, 1u << 30, &v, err, errlen)) == 0)
      c->o.join_window = (uint32_t)v;
  } else if (strcmp(name, "stats-interval") == 0) {
    if ((rc = count("--stats-interval", value, 0, 86400, &v, err, errlen)) == 0)
      c->stats_interval = (unsigned)v;
  } else if (strcmp(name, "state-dir") == 0) {
    if (!value || !value[0]) {
      snprintf(err, errlen, "--state-dir: empty");
      return KVP_ECONFIG;
    }
    c->o.state_dir = value;
  } else if (strcmp(name, "metrics") == 0) {
    struct sockaddr_storage sa;
    unsigned salen;
    if ((rc = kvp__metrics_parse_addr("--metrics", value, &sa, &salen, err, errlen)) == 0)
      c->metrics = value;
  } else if (strcmp(name, "metrics-timeout") == 0) {
    int64_t ms;
    if (kvp__parse_duration_ms(value, &ms) != 0 || ms <= 0) {
      snprintf(err, errlen, "--metrics-timeout: '%s' is not a duration above 0 (e.g. 10s, 500ms)",
               value);
      return KVP_ECONFIG;
    }
    c->metrics_opts.request_timeout_ms = ms;
  } else if (strcmp(name, "metrics-per-client") == 0) {
    if ((rc = count("--metrics-per-client", value, 0, 1u << 16, &v, err, errlen)) == 0)
      c->metrics_opts.per_client = (unsigned)v;
  } else {
    snprintf(err, errlen, "--%s: unknown option", name);
    return KVP_ECONFIG;
  }
  return rc;
}

/* url with its port plus k; NULL when url has no numeric port (or no
 * memory). */
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

/* Endpoint i's rank k: its URLs with the rank added to their ports and its
 * worker id with -dp<k>, into e. */
static int expand_rank(kvp__relay_cli_t *c, size_t i, unsigned k, kvp_relay_endpoint_t *e,
                       char *err, size_t errlen) {
  const char *ep = c->endpoint[i], *rp = c->replay[i], *wk = c->worker[i];
  char *u = port_plus(ep, k), *r = rp ? port_plus(rp, k) : NULL;
  char *w = malloc(80);
  c->owned[c->nowned++] = u;
  c->owned[c->nowned++] = r;
  c->owned[c->nowned++] = w;
  if (!w) {
    snprintf(err, errlen, "--dp-ranks: out of memory");
    return KVP_ENOMEM;
  }
  if (!u || (rp && !r)) {
    snprintf(err, errlen, "--dp-ranks: %s has no port to add the rank to", !u ? ep : rp);
    return KVP_ECONFIG;
  }
  snprintf(w, 80, "%s-dp%u", wk, k);
  if (!kvp_subject_token_valid(w)) {
    snprintf(err, errlen, "--worker %s: too long with -dp%u", wk, k);
    return KVP_ECONFIG;
  }
  e->endpoint = u;
  e->replay = r;
  e->worker_id = w;
  return 0;
}

int kvp__relay_cli_finish(kvp__relay_cli_t *c, char *err, size_t errlen) {
  unsigned dp = c->dp_ranks ? c->dp_ranks : 1;
  int rc;
  kvp__relay_cli_cleanup(c);
  c->o.nendpoints = 0;
  if (c->nargs == 0) {
    snprintf(err, errlen, "--endpoint is required");
    return KVP_ECONFIG;
  }
  if (c->nargs * dp > MAXN) {
    snprintf(err, errlen, "--dp-ranks: %zu endpoints x %u ranks is above %d", c->nargs, dp, MAXN);
    return KVP_ECONFIG;
  }
  for (size_t i = 0; i < c->nargs; i++) {
    if (!c->worker[i] || !kvp_subject_token_valid(c->worker[i])) {
      snprintf(err, errlen, "--worker of %s: %s", c->endpoint[i],
               c->worker[i] ? "not 1..64 characters of [A-Za-z0-9_-]" : "missing");
      return KVP_ECONFIG;
    }
    for (unsigned k = 0; k < dp; k++) {
      kvp_relay_endpoint_t *e = &c->o.endpoints[c->o.nendpoints++];
      e->dp_rank = k;
      if (dp == 1) {
        e->endpoint = c->endpoint[i];
        e->replay = c->replay[i];
        e->worker_id = c->worker[i];
      } else if ((rc = expand_rank(c, i, k, e, err, errlen)) != 0) {
        return rc;
      }
    }
  }
  /* One socket per address: a rank's endpoint on another's replay port
   * (replay = endpoint + 1 with --dp-ranks 2 or more) cannot be bound by
   * the engine, nor told apart here. */
  size_t n = c->o.nendpoints;
  for (size_t a = 0; a < 2 * n; a++)
    for (size_t b = a + 1; b < 2 * n; b++) {
      const kvp_relay_endpoint_t *ea = &c->o.endpoints[a / 2], *eb = &c->o.endpoints[b / 2];
      const char *ua = a % 2 ? ea->replay : ea->endpoint, *ub = b % 2 ? eb->replay : eb->endpoint;
      if (ua && ub && strcmp(ua, ub) == 0) {
        snprintf(err, errlen, "%s is both %s %s and %s %s%s", ua,
                 a % 2 ? "the replay of" : "the endpoint of", ea->worker_id,
                 b % 2 ? "the replay of" : "the endpoint of", eb->worker_id,
                 dp > 1 ? " (--dp-ranks adds the rank to both ports: put the replay ports "
                          "at least --dp-ranks above the endpoint's)"
                        : "");
        return KVP_ECONFIG;
      }
    }
  /* One publisher per worker id: two endpoints publishing as one worker
   * would each announce its own epoch and event ids on the same subject,
   * and the advisor would take every switch for a restart of the worker. */
  for (size_t a = 0; a < n; a++)
    for (size_t b = a + 1; b < n; b++)
      if (strcmp(c->o.endpoints[a].worker_id, c->o.endpoints[b].worker_id) == 0) {
        snprintf(
            err, errlen, "--worker %s is the worker of both %s and %s (one worker id per endpoint)",
            c->o.endpoints[a].worker_id, c->o.endpoints[a].endpoint, c->o.endpoints[b].endpoint);
        return KVP_ECONFIG;
      }
  if (kvp_nats_opts_check(&c->o.pub.nats, "--nats ", err, errlen) != 0)
    return KVP_ECONFIG;
  return 0;
}

void kvp__relay_cli_cleanup(kvp__relay_cli_t *c) {
  for (size_t i = 0; i < c->nowned; i++)
    free(c->owned[i]);
  c->nowned = 0;
}
