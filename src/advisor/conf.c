/* kvplane-advisor configuration: the key table, defaults and checks. */
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "kvplane/advisor.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

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
    {"nats", "password", KVP_CONF_STR, OFF(nats.password), 0, CAP(nats.password), NULL,
     "password", NULL},
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
    {"store", "path", KVP_CONF_STR, OFF(db_path), 0, CAP(db_path), NULL,
     "SQLite database file (created with mode 0600)", NULL},
    {"store", "flush_interval", KVP_CONF_DURATION, OFF(flush_interval_ms), 10, 3600000, NULL,
     "write-behind interval: changes are committed in one transaction this often", NULL},
    {"ingest", "max_message_bytes", KVP_CONF_SIZE, OFF(max_message_bytes), 64, 1 << 30, NULL,
     "larger messages are counted as oversized and skipped", NULL},
    {"ingest", "max_events", KVP_CONF_INT, OFF(max_events), 1, 1 << 24, NULL,
     "events per batch above which a batch is skipped", NULL},
    {"ingest", "max_blocks", KVP_CONF_INT, OFF(max_blocks), 1, 1 << 28, NULL,
     "block hashes per batch above which a batch is skipped", NULL},
    {"ingest", "queue_max", KVP_CONF_INT, OFF(queue_max), 16, 1 << 24, NULL,
     "messages queued for the loop thread; core mode drops beyond (a gap, then resync), "
     "jetstream mode stops fetching", NULL},
    {"workers", "heartbeat_timeout", KVP_CONF_DURATION, OFF(heartbeat_timeout_ms), 0, 86400000,
     NULL, "a worker silent this long is marked down and its G1/G2 locations dropped (0: never)", NULL},
    {"workers", "resync_retry", KVP_CONF_DURATION, OFF(resync_retry_ms), 100, 3600000, NULL,
     "resend an unanswered resync request after this", NULL},
    {"index", "initial_blocks", KVP_CONF_INT, OFF(initial_blocks), 16, 1ll << 31, NULL,
     "blocks to size the index for at start (it grows as needed)", NULL},
    {"index", "hit_half_life", KVP_CONF_DURATION, OFF(hit_half_life_ms), 1000, 365ll * 86400000,
     NULL, "half-life of the decayed hit frequency", NULL},
    {"log", "level", KVP_CONF_ENUM, OFF(log_level), 0, 0, levels, "error, warn, info or debug", NULL},
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
  snprintf(cfg->db_path, sizeof cfg->db_path, "/var/lib/kvplane/advisor.db");
  cfg->flush_interval_ms = 200;
  cfg->max_message_bytes = 8 << 20;
  cfg->max_events = 65536;
  cfg->max_blocks = 1 << 20;
  cfg->queue_max = 65536;
  cfg->heartbeat_timeout_ms = 30000;
  cfg->resync_retry_ms = 5000;
  cfg->initial_blocks = 1 << 16;
  cfg->hit_half_life_ms = 3600000;
  cfg->log_level = 2;
}

int kvp_advisor_config_load(kvp_advisor_config_t *cfg, const char *path, char *err, size_t errlen) {
  return kvp__conf_load(path, keys, NKEYS, cfg, err, errlen);
}

int kvp_advisor_config_set(kvp_advisor_config_t *cfg, const char *assignment, char *err,
                           size_t errlen) {
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
  if (cfg->db_path[0] == '\0') {
    snprintf(err, errlen, "[store] path: must not be empty");
    return KVP_ECONFIG;
  }
  if (cfg->log_syslog && cfg->log_file[0]) {
    snprintf(err, errlen, "[log] file: set either file or syslog");
    return KVP_ECONFIG;
  }
  return 0;
}

void kvp_advisor_config_print(const kvp_advisor_config_t *cfg, void *file) {
  FILE *f = file;
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
}
