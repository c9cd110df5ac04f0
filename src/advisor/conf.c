/* kvplane-advisor configuration: the key table, defaults and checks, and
 * its two writers (--print-config, --config-reference).
 *
 * Why this file is long: about a fifth of it is the key table itself, one
 * entry per key of etc/kvplane-advisor.conf with its range and help text,
 * and every function here walks that table; it stays static to this file
 * rather than be exported so that the writers can live elsewhere. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "config/config.h"
#include "advisor/advisor.h"
#include "advisor/partset.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "metrics/server.h"
#include "tier/policy.h"

#define OFF(f) offsetof(kvp_advisor_config_t, f)
#define CAP(f) ((int64_t)sizeof(((kvp_advisor_config_t *)0)->f))

static const char *const modes[] = {"core", "jetstream", NULL};
static const char *const levels[] = {"error", "warn", "info", "debug", NULL};

static const kvp_conf_key_t keys[] = {
    {"nats", "servers", KVP_CONF_STR, OFF(nats.servers), 0, CAP(nats.servers), NULL,
     "NATS server URL(s), comma-separated", NULL},
    {"nats", "url", KVP_CONF_STR, OFF(nats.servers), 0, CAP(nats.servers), NULL,
     "old name of servers", "servers"},
    {"nats", "mode", KVP_CONF_ENUM, OFF(mode), 0, 0, modes,
     "core (subscriptions, resync on gaps) or jetstream (durable consumer, exact resume)", NULL},
    {"nats", "user", KVP_CONF_STR, OFF(nats.user), 0, CAP(nats.user), NULL,
     "user name (with password)", NULL},
    {"nats", "password", KVP_CONF_STR, OFF(nats.password), 0, CAP(nats.password), NULL, "password",
     NULL},
    {"nats", "token", KVP_CONF_STR, OFF(nats.token), 0, CAP(nats.token), NULL,
     "authentication token", NULL},
    {"nats", "creds", KVP_CONF_STR, OFF(nats.creds), 0, CAP(nats.creds), NULL,
     "user credentials file (JWT and NKey seed)", NULL},
    {"nats", "tls_ca", KVP_CONF_STR, OFF(nats.tls_ca), 0, CAP(nats.tls_ca), NULL,
     "CA certificates (PEM) to verify the server; enables TLS", NULL},
    {"nats", "tls_cert", KVP_CONF_STR, OFF(nats.tls_cert), 0, CAP(nats.tls_cert), NULL,
     "client certificate chain (PEM), with tls_key", NULL},
    {"nats", "tls_key", KVP_CONF_STR, OFF(nats.tls_key), 0, CAP(nats.tls_key), NULL,
     "client private key (PEM), with tls_cert", NULL},
    {"nats", "connect_timeout", KVP_CONF_DURATION, OFF(nats.connect_timeout_ms), 100, 600000, NULL,
     "timeout of the first connection", NULL},
    {"advisor", "namespace", KVP_CONF_STR, OFF(ns), 0, CAP(ns), NULL,
     "namespace <ns> of the subjects kvplane.ev.<ns>.<worker> and kvplane.api.<ns>.*", NULL},
    {"jetstream", "stream", KVP_CONF_STR, OFF(stream), 0, CAP(stream), NULL,
     "stream name (created with subjects kvplane.ev.> if absent)", NULL},
    {"jetstream", "consumer", KVP_CONF_STR, OFF(consumer), 0, CAP(consumer), NULL,
     "durable consumer name of this advisor; empty: kvplane-advisor-<namespace>", NULL},
    {"jetstream", "fetch_batch", KVP_CONF_INT, OFF(fetch_batch), 1, 65536, NULL,
     "messages per pull request", NULL},
    {"jetstream", "replicas", KVP_CONF_INT, OFF(replicas), 1, 5, NULL,
     "replicas of a stream the advisor creates (3 on a 3-server cluster: any one server may go); "
     "an existing stream keeps its own",
     NULL},
    {"partitions", "count", KVP_CONF_INT, OFF(partitions), 0, KVP_PARTITIONS_MAX, NULL,
     "event partitions of the deployment, as in the servers' subject mapping (kvplane "
     "nats-config N prints it); 0: not partitioned. Each partition p is the "
     "stream <stream>_P<p>",
     NULL},
    {"partitions", "owned", KVP_CONF_STR, OFF(owned), 0, CAP(owned), NULL,
     "partitions this advisor consumes and answers for, e.g. 0,1 or 0-3 (another advisor owning "
     "the same ones is a hot standby); empty: all",
     NULL},
    {"store", "path", KVP_CONF_STR, OFF(db_path), 0, CAP(db_path), NULL,
     "SQLite database file (created with mode 0600)", NULL},
    {"store", "flush_interval", KVP_CONF_DURATION, OFF(flush_interval_ms), 10, 3600000, NULL,
     "write-behind interval: changes are committed in one transaction this often", NULL},
    {"store", "history_interval", KVP_CONF_DURATION, OFF(history_interval_ms), 0, 86400000, NULL,
     "how often tier and volume occupancy is sampled into tier_history (0: never)", NULL},
    {"store", "history_keep", KVP_CONF_DURATION, OFF(history_keep_ms), 0, 3650ll * 86400000, NULL,
     "tier_history rows older than this are deleted (0: kept forever)", NULL},
    {"ingest", "max_message_bytes", KVP_CONF_SIZE, OFF(max_message_bytes), 64, 1 << 30, NULL,
     "larger messages are counted as oversized and skipped", NULL},
    {"ingest", "max_events", KVP_CONF_INT, OFF(max_events), 1, 1 << 24, NULL,
     "events per batch above which a batch is skipped", NULL},
    {"ingest", "max_blocks", KVP_CONF_INT, OFF(max_blocks), 1, 1 << 28, NULL,
     "block hashes per batch above which a batch is skipped", NULL},
    {"ingest", "queue_max", KVP_CONF_INT, OFF(queue_max), 16, 1 << 24, NULL,
     "messages queued for the loop thread; core mode drops beyond (a gap, then resync), "
     "jetstream mode stops fetching",
     NULL},
    {"workers", "heartbeat_timeout", KVP_CONF_DURATION, OFF(heartbeat_timeout_ms), 0, 86400000,
     NULL, "a worker silent this long is marked down and its G1/G2 locations dropped (0: never)",
     NULL},
    {"workers", "resync_retry", KVP_CONF_DURATION, OFF(resync_retry_ms), 100, 3600000, NULL,
     "resend an unanswered resync request after this", NULL},
    {"index", "initial_blocks", KVP_CONF_INT, OFF(initial_blocks), 16, 1ll << 31, NULL,
     "blocks to size the index for at start (it grows as needed)", NULL},
    {"index", "max_memory", KVP_CONF_SIZE, OFF(index_max_memory), 0, 1ll << 50, NULL,
     "hard cap on the index's memory (0: none): past it the coldest G1/G2 locations are dropped "
     "(never G3/G4), counted and logged; the map and records are reserved for it at start",
     NULL},
    {"index", "max_locations", KVP_CONF_INT, OFF(index_max_locations), 0, 1ll << 40, NULL,
     "hard cap on the index's block locations (0: none), enforced the same way", NULL},
    {"index", "hit_half_life", KVP_CONF_DURATION, OFF(hit_half_life_ms), 1000, 365ll * 86400000,
     NULL, "half-life of the decayed hit frequency", NULL},
    {"tiering", "enabled", KVP_CONF_BOOL, OFF(tiering), 0, 0, NULL,
     "move blocks between the G3 and G4 volumes below as they get hot or cold", NULL},
    {"tiering", "partitions", KVP_CONF_STR, OFF(tier_parts), 0, CAP(tier_parts), NULL,
     "of the owned partitions, those this advisor tiers, e.g. 0,1 or 0-3; none: none (a "
     "standby: kvplane partitions ADVISOR tier P,.. starts them once the advisor that tiered "
     "them is gone or untiered them); empty: every owned one. One advisor tiers a partition at "
     "a time, the one holding its tiering lease (lease_ms): another listing it waits and takes "
     "over when the holder is gone",
     NULL},
    {"tiering", "lease_ms", KVP_CONF_DURATION, OFF(tier_lease_ms), 500, 600000, NULL,
     "JetStream mode: TTL of a partition's tiering lease (unpartitioned: the namespace's one "
     "lease) in the key-value bucket kvplane-leases-<namespace>; only the advisor holding it "
     "tiers the partition (the namespace), others configured to tier it wait and take it over "
     "when it is released or expires. Renewed every third of it; "
     "a holder starts no move once 2/3 of it passed without a renewal, so the longest move must "
     "take less than a third of it. The same on every advisor of a namespace",
     NULL},
    {"tiering", "interval", KVP_CONF_DURATION, OFF(tier_interval_ms), 100, 3600000, NULL,
     "how often moves are planned", NULL},
    {"tiering", "grace", KVP_CONF_DURATION, OFF(tier_grace_ms), 0, 3600000, NULL,
     "a moved block's source copy is deleted this long after the verified copy (readers "
     "mid-read finish)",
     NULL},
    {"tiering", "min_residence", KVP_CONF_DURATION, OFF(tier_residence_ms), 0, 86400000, NULL,
     "a block accessed more recently than this does not move", NULL},
    {"tiering", "max_moves", KVP_CONF_INT, OFF(tier_max_moves), 1, 1 << 20, NULL,
     "moves per round at most", NULL},
    {"tiering", "policy", KVP_CONF_ENUM, OFF(tier_policy), 0, 0, kvp__tier_policy_names,
     "which blocks leave G3 first: lru (least recently used, prefix-aware), s3fifo, lfu, "
     "hyperbolic or density (docs/tiering.md)",
     NULL},
    {"tiering", "policy_params", KVP_CONF_STR, OFF(tier_policy_params), 0, CAP(tier_policy_params),
     NULL,
     "the policy's own parameters, \"key=value\" separated by blanks or commas (s3fifo: small, "
     "ghost; lfu: half_life; hyperbolic: weight, tau; density: half_life)",
     NULL},
    {"tiering", "high_watermark", KVP_CONF_DOUBLE, OFF(tier_high), 0, 1, NULL,
     "G3 fill (of a volume's capacity) above which its coldest blocks are demoted to G4", NULL},
    {"tiering", "low_watermark", KVP_CONF_DOUBLE, OFF(tier_low), 0, 1, NULL,
     "... until the fill is below this", NULL},
    {"tiering", "promote_freq", KVP_CONF_DOUBLE, OFF(tier_promote_freq), 0, 1000000, NULL,
     "decayed hits at which a G4 block is worth G3", NULL},
    {"tiering", "keep_freq", KVP_CONF_DOUBLE, OFF(tier_keep_freq), 0, 1000000, NULL,
     "a G3 block this hot is not demoted to make room (the hysteresis band)", NULL},
    {"tiering", "max_bytes_per_s", KVP_CONF_SIZE, OFF(tier_max_bytes_per_s), 0, 1ll << 40, NULL,
     "bytes copied per second at most, over all moves (0: no limit); prefetches go first, then "
     "demotions, then promotions",
     NULL},
    {"tiering", "prefetch_depth", KVP_CONF_INT, OFF(tier_prefetch_depth), 0, 1024, NULL,
     "generations of descendants brought from G4 to G3 when a prefix is hit in G4 (0: no "
     "prefetch)",
     NULL},
    {"tiering", "prefetch_bytes", KVP_CONF_SIZE, OFF(tier_prefetch_bytes), 0, 1ll << 40, NULL,
     "bytes one G4 hit prefetches at most", NULL},
    {"tiering", "scrub_interval", KVP_CONF_DURATION, OFF(tier_scrub_ms), 0, 7ll * 86400000, NULL,
     "every this long one volume, in turn, gets a scrub pass on a thread of its own: locations "
     "without an object are dropped, objects without a location still orphaned at the volume's "
     "next pass are adopted (valid frame, a block the index wants) or deleted (0: no scrub)",
     NULL},
    {"tiering", "scrub_files_per_s", KVP_CONF_INT, OFF(tier_scrub_files_per_s), 0, 1 << 30, NULL,
     "objects a scrub pass lists or reads per second at most (0: no limit)", NULL},
    {"tiering", "scrub_bytes_per_s", KVP_CONF_SIZE, OFF(tier_scrub_bytes_per_s), 0, 1ll << 40, NULL,
     "bytes a scrub pass reads per second at most, with scrub_verify (0: no limit)", NULL},
    {"tiering", "scrub_verify", KVP_CONF_BOOL, OFF(tier_scrub_verify), 0, 0, NULL,
     "a scrub pass reads every object back and checks its frame; a corrupt copy is quarantined",
     NULL},
    {"tiering", "max_parallel", KVP_CONF_INT, OFF(tier_max_parallel), 1, 64, NULL,
     "moves in flight at once, each into a different volume (one at a time per destination)", NULL},
    {"tiering", "compact_ratio", KVP_CONF_DOUBLE, OFF(tier_compact_ratio), 0, 1, NULL,
     "a volume whose plugin compacts (posix with layout=packed) is compacted when this share of "
     "its bytes is dead, down to half of it (0: never)",
     NULL},
    {"tiering", "compact_interval", KVP_CONF_DURATION, OFF(tier_compact_ms), 1000, 7ll * 86400000,
     NULL,
     "how often each compactable volume's dead bytes are looked at; a compaction runs at most "
     "2 s per look",
     NULL},
    {"tiering", "plugin_dir", KVP_CONF_STR, OFF(plugin_dir), 0, CAP(plugin_dir), NULL,
     "volume plugins; empty: $KVPLANE_PLUGIN_DIR, else lib/kvplane/plugins of the installed tree",
     NULL},
    {"metrics", "listen", KVP_CONF_STR, OFF(metrics_listen), 0, CAP(metrics_listen), NULL,
     "host:port serving Prometheus /metrics, /healthz and /readyz over HTTP (e.g. "
     "127.0.0.1:9464); empty: off",
     NULL},
    {"metrics", "request_timeout", KVP_CONF_DURATION, OFF(metrics_request_timeout_ms), 100, 3600000,
     NULL,
     "a request whose headers and body are not all in this long after it began (its connection, "
     "or its first byte on a kept-alive one) is cut: connection closed, counted, logged",
     NULL},
    {"metrics", "max_connections_per_client", KVP_CONF_INT, OFF(metrics_per_client), 0, 64, NULL,
     "connections one client address may hold of the 64 (0: no limit); clients behind one NAT "
     "or proxy share it",
     NULL},
    {"http", "enabled", KVP_CONF_BOOL, OFF(http_enabled), 0, 0, NULL,
     "serve the routers' indexer API (the Mooncake conductor indexer API: POST /query, "
     "/query_by_hash) over HTTP on listen, answered from the same index as "
     "kvplane.api.<ns>.match",
     NULL},
    {"http", "listen", KVP_CONF_STR, OFF(http_listen), 0, CAP(http_listen), NULL,
     "host:port of the indexer API (loopback by default: put a proxy with TLS and "
     "authentication in front to expose it)",
     NULL},
    {"http", "block_size", KVP_CONF_INT, OFF(http_block_size), 0, 1 << 20, NULL,
     "tokens per block for a request without block_size (0: the request must carry it)", NULL},
    {"http", "request_timeout", KVP_CONF_DURATION, OFF(http_request_timeout_ms), 100, 3600000, NULL,
     "a request whose headers and body are not all in this long after it began (its connection, "
     "or its first byte on a kept-alive one) is cut: connection closed, counted "
     "(kvplane_http_requests_timed_out_total), logged",
     NULL},
    {"http", "max_connections_per_client", KVP_CONF_INT, OFF(http_per_client), 0, 256, NULL,
     "connections one client address may hold of the 256 (0: no limit); all routers behind one "
     "NAT or proxy share it: raise it for them",
     NULL},
    {"log", "level", KVP_CONF_ENUM, OFF(log_level), 0, 0, levels, "error, warn, info or debug",
     NULL},
    {"log", "file", KVP_CONF_STR, OFF(log_file), 0, CAP(log_file), NULL,
     "append to this file (reopened on SIGHUP); empty: stderr", NULL},
    {"log", "syslog", KVP_CONF_BOOL, OFF(log_syslog), 0, 0, NULL, "log to syslog instead", NULL},
};
#define NKEYS (sizeof keys / sizeof keys[0])

void kvp_advisor_config_defaults(kvp_advisor_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  kvp_nats_opts_init(&cfg->nats);
  cfg->mode = KVP_ADVISOR_JETSTREAM;
  snprintf(cfg->ns, sizeof cfg->ns, "default");
  snprintf(cfg->stream, sizeof cfg->stream, "KVPLANE_EVENTS");
  cfg->fetch_batch = 512;
  cfg->replicas = 1;
  snprintf(cfg->db_path, sizeof cfg->db_path, "/var/lib/kvplane/advisor.db");
  cfg->flush_interval_ms = 200;
  cfg->history_interval_ms = 10000;
  cfg->history_keep_ms = 7ll * 86400000;
  cfg->max_message_bytes = 8 << 20;
  cfg->max_events = 65536;
  cfg->max_blocks = 1 << 20;
  cfg->queue_max = 65536;
  cfg->heartbeat_timeout_ms = 30000;
  cfg->resync_retry_ms = 5000;
  cfg->initial_blocks = 1 << 16;
  cfg->hit_half_life_ms = 3600000;
  cfg->log_level = 2;
  cfg->tier_interval_ms = 1000;
  cfg->tier_lease_ms = 10000;
  cfg->tier_grace_ms = 5000;
  cfg->tier_residence_ms = 60000;
  cfg->tier_max_moves = 256;
  cfg->tier_high = 0.90;
  cfg->tier_low = 0.80;
  cfg->tier_promote_freq = 4.0;
  cfg->tier_keep_freq = 2.0;
  cfg->tier_prefetch_depth = 8;
  cfg->tier_scrub_ms = 600000;
  cfg->tier_scrub_files_per_s = 2000;
  cfg->tier_scrub_bytes_per_s = 32ll << 20;
  cfg->tier_max_parallel = 4;
  cfg->tier_compact_ms = 60000;
  cfg->tier_compact_ratio = 0.3;
  cfg->tier_prefetch_bytes = 64ll << 20;
  snprintf(cfg->http_listen, sizeof cfg->http_listen, "127.0.0.1:13333");
  cfg->http_request_timeout_ms = 10000;
  cfg->http_per_client = 64;
  cfg->metrics_request_timeout_ms = KVP__METRICS_REQUEST_TIMEOUT_MS;
  cfg->metrics_per_client = KVP__METRICS_PER_CLIENT;
}

/* One key of a [volume <name>] section: tier, plugin and capacity are the
 * advisor's; every other key is a parameter of the plugin. */
static int volume_entry(void *ctx, const char *name, const char *key, const char *value, int line,
                        char *err, size_t errlen) {
  kvp_advisor_config_t *cfg = ctx;
  kvp_advisor_volume_t *v = NULL;

  for (int i = 0; i < cfg->nvolumes; i++)
    if (strcmp(cfg->volumes[i].name, name) == 0)
      v = &cfg->volumes[i];
  if (v == NULL) {
    if (cfg->nvolumes == KVP__TIER_MAX_VOLUMES) {
      snprintf(err, errlen, "more than %d volumes", KVP__TIER_MAX_VOLUMES);
      return KVP_ECONFIG;
    }
    if (name[0] == '\0' || strlen(name) >= sizeof v->name || strpbrk(name, " \t/")) {
      snprintf(err, errlen, "volume name '%s': 1..63 characters, no blanks or '/'", name);
      return KVP_ECONFIG;
    }
    v = &cfg->volumes[cfg->nvolumes++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    memset(&cfg->volume_at[v - cfg->volumes], 0, sizeof cfg->volume_at[0]);
    cfg->volume_at[v - cfg->volumes].line = line;
  }
  struct kvp_advisor_volume_at_s *at = &cfg->volume_at[v - cfg->volumes];
  if (at->nkeys < KVP_ADVISOR_VOLUME_LINES) {
    snprintf(at->keys[at->nkeys].key, sizeof at->keys[0].key, "%s", key);
    at->keys[at->nkeys++].line = line;
  }
  if (strcmp(key, "tier") == 0) {
    if (strcmp(value, "3") != 0 && strcmp(value, "4") != 0 && strcmp(value, "G3") != 0 &&
        strcmp(value, "G4") != 0) {
      snprintf(err, errlen, "tier: '%s' is not 3 or 4 (G3 or G4)", value);
      return KVP_ECONFIG;
    }
    v->tier = value[strlen(value) - 1] - '0';
  } else if (strcmp(key, "plugin") == 0) {
    if (value[0] == '\0' || strlen(value) >= sizeof v->plugin || strchr(value, '/')) {
      snprintf(err, errlen, "plugin: '%s' is not a plugin name", value);
      return KVP_ECONFIG;
    }
    snprintf(v->plugin, sizeof v->plugin, "%s", value);
  } else if (strcmp(key, "capacity") == 0) {
    if (kvp__parse_size(value, &v->capacity) != 0) {
      snprintf(err, errlen, "capacity: '%s' is not a size", value);
      return KVP_ECONFIG;
    }
  } else {
    size_t used = strlen(v->params);
    int n = snprintf(v->params + used, sizeof v->params - used, "%s=%s\n", key, value);
    if (n < 0 || (size_t)n >= sizeof v->params - used) {
      snprintf(err, errlen, "%s: the volume's parameters exceed %zu bytes", key, sizeof v->params);
      return KVP_ECONFIG;
    }
  }
  return 0;
}

int kvp_advisor_config_load(kvp_advisor_config_t *cfg, const char *path, char *err, size_t errlen) {
  snprintf(cfg->conf_path, sizeof cfg->conf_path, "%s", path);
  return kvp__conf_load_dyn(path, keys, NKEYS, cfg, "volume", volume_entry, cfg, err, errlen);
}

int kvp_advisor_config_set(kvp_advisor_config_t *cfg, const char *assignment, char *err,
                           size_t errlen) {
  /* "volume g3.path=..." would read as the unknown section [volume g3],
   * which the file does know. */
  if (strncmp(assignment, "volume ", 7) == 0 || strncmp(assignment, "volume.", 7) == 0) {
    snprintf(err, errlen,
             "'%s': [volume NAME] sections are set in the configuration file (-c), not with -o",
             assignment);
    return KVP_ECONFIG;
  }
  return kvp__conf_override(assignment, keys, NKEYS, cfg, err, errlen);
}

static int name_ok(const char *s, const char *extra) {
  if (s[0] == '\0')
    return 0;
  for (; *s; s++) {
    char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || (extra && strchr(extra, c))))
      return 0;
  }
  return 1;
}

int kvp_advisor_config_check(const kvp_advisor_config_t *cfg, char *err, size_t errlen) {
  int rc;

  if ((rc = kvp_nats_opts_check(&cfg->nats, "[nats] ", err, errlen)) != 0)
    return rc;
  if (!kvp_subject_token_valid(cfg->ns)) {
    snprintf(err, errlen, "[advisor] namespace: '%s' must be 1..63 of [A-Za-z0-9_-]", cfg->ns);
    return KVP_ECONFIG;
  }
  if (cfg->mode == KVP_ADVISOR_JETSTREAM && !name_ok(cfg->stream, NULL)) {
    snprintf(err, errlen, "[jetstream] stream: '%s' must be 1..63 of [A-Za-z0-9_-]", cfg->stream);
    return KVP_ECONFIG;
  }
  if (cfg->mode == KVP_ADVISOR_JETSTREAM && cfg->consumer[0] && !name_ok(cfg->consumer, NULL)) {
    snprintf(err, errlen, "[jetstream] consumer: '%s' must be empty or 1..95 of [A-Za-z0-9_-]",
             cfg->consumer);
    return KVP_ECONFIG;
  }
  if ((rc = kvp__adv_partset_check(cfg, err, errlen)) != 0)
    return rc;
  if (cfg->db_path[0] == '\0') {
    snprintf(err, errlen, "[store] path: must not be empty");
    return KVP_ECONFIG;
  }
  if (cfg->log_syslog && cfg->log_file[0]) {
    snprintf(err, errlen, "[log] file: set either file or syslog");
    return KVP_ECONFIG;
  }
  if (!(cfg->tier_high > 0 && cfg->tier_high <= 1 && cfg->tier_low > 0 &&
        cfg->tier_low < cfg->tier_high)) {
    snprintf(err, errlen,
             "[tiering] low_watermark %g and high_watermark %g: need 0 < low < high "
             "<= 1",
             cfg->tier_low, cfg->tier_high);
    return KVP_ECONFIG;
  }
  if (!(cfg->tier_keep_freq >= 0 && cfg->tier_keep_freq <= cfg->tier_promote_freq)) {
    snprintf(err, errlen, "[tiering] keep_freq %g: must be in [0, promote_freq %g]",
             cfg->tier_keep_freq, cfg->tier_promote_freq);
    return KVP_ECONFIG;
  }
  double pconf[KVP__TIER_POLICY_KEYS_MAX];
  if ((rc = kvp__tier_policy_params(kvp__tier_policy_names[cfg->tier_policy],
                                    cfg->tier_policy_params, pconf, err, errlen)) != 0)
    return rc;
  for (int i = 0; i < cfg->nvolumes; i++) {
    const kvp_advisor_volume_t *v = &cfg->volumes[i];
    const char *miss = v->tier == 0 ? "tier" : !v->plugin[0] ? "plugin" : NULL;
    if (miss == NULL && v->tier == 3 && v->capacity <= 0)
      miss = "capacity (a G3 volume's watermarks are fractions of it)";
    if (miss != NULL) {
      kvp__adv_volume_errf(cfg, i, NULL, err, errlen, "%s: required", miss);
      return KVP_ECONFIG;
    }
  }
  if (cfg->metrics_listen[0]) {
    struct sockaddr_storage sa;
    unsigned salen;
    if ((rc = kvp__metrics_parse_addr("[metrics] listen", cfg->metrics_listen, &sa, &salen, err,
                                      errlen)) != 0)
      return rc;
  }
  if (cfg->http_enabled) {
    struct sockaddr_storage sa;
    unsigned salen;
    if ((rc = kvp__metrics_parse_addr("[http] listen", cfg->http_listen, &sa, &salen, err,
                                      errlen)) != 0)
      return rc;
  }
  if (cfg->tiering && cfg->nvolumes == 0) {
    snprintf(err, errlen, "[tiering] enabled: no [volume <name>] sections to tier between");
    return KVP_ECONFIG;
  }
  return 0;
}

void kvp_advisor_config_print(const kvp_advisor_config_t *cfg, FILE *f) {
  const char *section = "";
  for (size_t i = 0; i < NKEYS; i++) {
    const kvp_conf_key_t *k = &keys[i];
    const char *p = (const char *)cfg + k->offset;
    if (strcmp(section, k->section) != 0) {
      fprintf(f, "%s[%s]\n", i ? "\n" : "", k->section);
      section = k->section;
    }
    if (k->alias_of != NULL)
      continue;
    fprintf(f, "# %s\n%s = ", k->help, k->name);
    switch (k->type) {
    case KVP_CONF_STR:
      /* Never echo secrets. */
      if ((strcmp(k->name, "password") == 0 || strcmp(k->name, "token") == 0) && p[0])
        fprintf(f, "<redacted>\n");
      else
        fprintf(f, "%s\n", p);
      break;
    case KVP_CONF_ENUM:
      fprintf(f, "%s\n", k->choices[*(const int *)p]);
      break;
    case KVP_CONF_BOOL:
      fprintf(f, "%s\n", *(const int *)p ? "true" : "false");
      break;
    case KVP_CONF_DURATION:
      fprintf(f, "%lldms\n", (long long)*(const int64_t *)p);
      break;
    case KVP_CONF_DOUBLE:
      fprintf(f, "%g\n", *(const double *)p);
      break;
    default:
      fprintf(f, "%lld\n", (long long)*(const int64_t *)p);
      break;
    }
  }
  for (int i = 0; i < cfg->nvolumes; i++) {
    const kvp_advisor_volume_t *v = &cfg->volumes[i];
    fprintf(f, "\n[volume %s]\ntier = %d\nplugin = %s\ncapacity = %lld\n", v->name, v->tier,
            v->plugin, (long long)v->capacity);
    /* The plugin's parameters, "key=value" lines; secrets are not echoed. */
    for (const char *line = v->params, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
      const char *eq = memchr(line, '=', (size_t)(nl - line));
      if (eq == NULL)
        continue;
      int klen = (int)(eq - line);
      int secret = memmem(line, (size_t)klen, "secret", 6) ||
                   memmem(line, (size_t)klen, "password", 8) ||
                   memmem(line, (size_t)klen, "token", 5);
      fprintf(f, "%.*s = %.*s\n", klen, line, secret ? 10 : (int)(nl - eq - 1),
              secret ? "<redacted>" : eq + 1);
    }
  }
}

/* A duration in the largest unit that divides it (the parser reads each). */
static void fmt_duration(char *buf, size_t len, int64_t ms) {
  static const struct {
    const char *unit;
    int64_t mul;
  } u[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
    if (ms != 0 && ms % u[i].mul == 0) {
      snprintf(buf, len, "%lld%s", (long long)(ms / u[i].mul), u[i].unit);
      return;
    }
  snprintf(buf, len, "%lldms", (long long)ms);
}

/* A size in the largest binary unit that divides it. */
static void fmt_size(char *buf, size_t len, int64_t b) {
  static const char *const unit[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; i++) {
    int64_t mul = (int64_t)1 << (10 * (4 - i));
    if (b != 0 && b % mul == 0) {
      snprintf(buf, len, "%lld%s", (long long)(b / mul), unit[i]);
      return;
    }
  }
  snprintf(buf, len, "%lld", (long long)b);
}

static const char *type_name(const kvp_conf_key_t *k) {
  switch (k->type) {
  case KVP_CONF_STR:
    return "string";
  case KVP_CONF_INT:
    return "integer";
  case KVP_CONF_BOOL:
    return "boolean";
  case KVP_CONF_DOUBLE:
    return "number";
  case KVP_CONF_DURATION:
    return "duration";
  case KVP_CONF_SIZE:
    return "size";
  case KVP_CONF_ENUM:
    return "choice";
  }
  return "?";
}

/* A Markdown table cell: '|' escaped, '<' and '>' as entities. */
static void cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '|')
      fputs("\\|", f);
    else
      fputc(*s, f);
  }
}

void kvp_advisor_config_reference(FILE *f) {
  kvp_advisor_config_t def;
  char a[64], b[64];

  kvp_advisor_config_defaults(&def);
  fputs("<!-- Generated by `kvplane-advisor --config-reference` from the advisor's key\n"
        "     table (src/advisor/conf.c); test advisor_config_reference_is_current\n"
        "     fails when this file and the table differ. Do not edit by hand. -->\n"
        "# kvplane-advisor configuration reference\n\n"
        "An INI file (`kvplane-advisor -c FILE`; `etc/kvplane-advisor.conf` is the\n"
        "commented example) whose keys can also be set with `-o section.key=value`.\n"
        "An unknown section or key, a bad value or one out of range is an error that\n"
        "names the file, the line and the key; the advisor does not start.\n"
        "Durations take `ms`, `s`, `m`, `h`, `d` (a bare number is milliseconds);\n"
        "sizes take `KiB`, `MiB`, `GiB`, `TiB` (a bare number is bytes).\n",
        f);
  const char *section = "";
  for (size_t i = 0; i < NKEYS; i++) {
    const kvp_conf_key_t *k = &keys[i];
    const char *p = (const char *)&def + k->offset;
    if (k->alias_of != NULL)
      continue;
    if (strcmp(section, k->section) != 0) {
      fprintf(f,
              "\n## [%s]\n\n| key | type | default | range | meaning |\n| --- | --- | --- | --- | "
              "--- |\n",
              k->section);
      section = k->section;
    }
    fprintf(f, "| `%s` | %s | ", k->name, type_name(k));
    switch (k->type) {
    case KVP_CONF_STR:
      if (p[0]) {
        fputc('`', f);
        cell(f, p);
        fputc('`', f);
      } else {
        fputs("(empty)", f);
      }
      fprintf(f, " | up to %lld bytes | ", (long long)k->max - 1);
      break;
    case KVP_CONF_ENUM: {
      fprintf(f, "`%s` | ", k->choices[*(const int *)p]);
      for (int c = 0; k->choices[c]; c++)
        fprintf(f, "%s`%s`", c ? ", " : "", k->choices[c]);
      fputs(" | ", f);
      break;
    }
    case KVP_CONF_BOOL:
      fprintf(f, "`%s` | true, false | ", *(const int *)p ? "true" : "false");
      break;
    case KVP_CONF_DOUBLE:
      fprintf(f, "`%g` | %lld .. %lld | ", *(const double *)p, (long long)k->min,
              (long long)k->max);
      break;
    case KVP_CONF_DURATION:
      fmt_duration(a, sizeof a, *(const int64_t *)p);
      fprintf(f, "`%s` | ", a);
      fmt_duration(a, sizeof a, k->min);
      fmt_duration(b, sizeof b, k->max);
      fprintf(f, "%s .. %s | ", k->min == 0 ? "0" : a, b);
      break;
    case KVP_CONF_SIZE:
      fmt_size(a, sizeof a, *(const int64_t *)p);
      fprintf(f, "`%s` | ", a);
      fmt_size(a, sizeof a, k->min);
      fmt_size(b, sizeof b, k->max);
      fprintf(f, "%s .. %s | ", a, b);
      break;
    default:
      fprintf(f, "`%lld` | %lld .. %lld | ", (long long)*(const int64_t *)p, (long long)k->min,
              (long long)k->max);
      break;
    }
    cell(f, k->help);
    fputs(" |\n", f);
  }
  fputs("\n## [volume NAME]\n\n"
        "One section per volume the tiering engine manages (`[tiering] enabled`).\n"
        "`tier` (3 or 4), `plugin` (a plugin name, looked up in `[tiering] plugin_dir`,\n"
        "or a path to a `.so`) and `capacity` (a size) are the advisor's; every\n"
        "other key is handed to the plugin as a parameter (the posix plugin takes\n"
        "`path` and `fsync`; the s3 plugin its endpoint, bucket and credentials: see\n"
        "`plugins/`). A volume whose plugin fails to open stops the advisor, naming\n"
        "the volume. NAME is 1..63 characters without blanks or `/`, and at most 31\n"
        "when the advisor announces its moves on NATS (its events and snapshots name\n"
        "the volume, and a publisher takes no longer name: the advisor refuses to\n"
        "start otherwise). These sections are read from the file only: `-o` sets\n"
        "the keys of the sections above.\n",
        f);
}

const kvp__tier_opts_t *kvp__adv_tier_opts(const kvp_advisor_config_t *cfg, kvp__tier_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->ns = cfg->ns;
  o->db_path = cfg->db_path;
  o->nats = &cfg->nats;
  o->jetstream = cfg->mode == KVP_ADVISOR_JETSTREAM;
  o->stream = cfg->stream;
  o->plugin_dir = cfg->plugin_dir;
  o->interval_ms = cfg->tier_interval_ms;
  o->grace_ms = cfg->tier_grace_ms;
  o->residence_ms = cfg->tier_residence_ms;
  o->max_moves = cfg->tier_max_moves;
  o->high = cfg->tier_high;
  o->low = cfg->tier_low;
  o->promote_freq = cfg->tier_promote_freq;
  o->keep_freq = cfg->tier_keep_freq;
  o->max_bytes_per_s = cfg->tier_max_bytes_per_s;
  o->prefetch_depth = cfg->tier_prefetch_depth;
  o->scrub_ms = cfg->tier_scrub_ms;
  o->scrub_files_per_s = cfg->tier_scrub_files_per_s;
  o->scrub_bytes_per_s = cfg->tier_scrub_bytes_per_s;
  o->scrub_verify = cfg->tier_scrub_verify;
  o->max_parallel = cfg->tier_max_parallel;
  o->compact_ms = cfg->tier_compact_ms;
  o->compact_ratio = cfg->tier_compact_ratio;
  o->prefetch_bytes = cfg->tier_prefetch_bytes;
  o->policy = kvp__tier_policy_names[cfg->tier_policy];
  o->policy_params = cfg->tier_policy_params;
  o->volumes = cfg->volumes;
  o->nvolumes = cfg->nvolumes;
  return o;
}
