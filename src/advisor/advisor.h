/* kvplane-advisor: the storage-advisor daemon as a library (DESIGN.md,
 * "Advisor" and "SQL inspection").
 *
 * The advisor consumes event batches from NATS (a JetStream durable consumer
 * or core subscriptions on kvplane.ev.<ns>.>), keeps an index of where every
 * block lives, writes it behind to a SQLite database, asks workers for a
 * resync on kvplane.ctl.<ns>.<worker>.resync when their stream has a gap,
 * and answers queries on kvplane.api.<ns>.match and kvplane.api.<ns>.stats.
 * The kvplane-advisor program is a thin main over this API, so tests run the
 * whole daemon in-process.
 *
 * The query formats (request/reply on kvplane.api.<ns>.match and .stats)
 * are a public contract: include/kvplane/client.h documents them. This
 * header is the advisor library's, not libkvplane's: it is not installed. */
#ifndef KVP_ADVISOR_ADVISOR_H
#define KVP_ADVISOR_ADVISOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvplane/nats.h"
#include "tier/opts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_advisor_mode_e {
  KVP_ADVISOR_CORE = 0,      /* plain subscriptions; gaps recovered by resync */
  KVP_ADVISOR_JETSTREAM = 1, /* durable consumer; resumes at the committed sequence */
} kvp_advisor_mode_t;

/* Every key of etc/kvplane-advisor.conf; see that file for the meaning. */
/* A storage volume the advisor opens for tiering: a [volume <name>]
 * section (tier/opts.h). */
typedef kvp__tier_volume_conf_t kvp_advisor_volume_t;
#define KVP_ADVISOR_VOLUME_LINES 16

typedef struct kvp_advisor_config_s {
  /* [nats] */
  kvp_nats_opts_t nats; /* servers (old name: url), auth, TLS, connect_timeout */
  int mode;             /* kvp_advisor_mode_t */
  /* [advisor] */
  char ns[64];
  /* [jetstream] */
  char stream[64];
  char consumer[96]; /* empty: kvplane-advisor-<namespace> */
  int64_t fetch_batch;
  int64_t replicas; /* replicas of a stream this advisor creates (1..5) */
  /* [partitions] (partset.h) */
  int64_t partitions; /* partition count of the deployment; 0: not partitioned */
  char owned[256];    /* partitions this advisor consumes: "0,2", "0-3"; empty: all */
  /* [store] */
  char db_path[512];
  int64_t flush_interval_ms;
  int64_t history_interval_ms; /* tier_history sampling; 0: off */
  int64_t history_keep_ms;     /* older samples are deleted; 0: kept forever */
  /* [ingest] */
  int64_t max_message_bytes;
  int64_t max_events;
  int64_t max_blocks;
  int64_t queue_max;
  /* [workers] */
  int64_t heartbeat_timeout_ms;
  int64_t resync_retry_ms;
  /* [index] */
  int64_t initial_blocks;
  int64_t hit_half_life_ms;
  int64_t index_max_memory;    /* bytes, 0: no cap (cap.h) */
  int64_t index_max_locations; /* 0: no cap */
  /* [tiering] (docs: etc/kvplane-advisor.conf) */
  int tiering;                /* enabled */
  int64_t tier_interval_ms;   /* how often moves are planned */
  int64_t tier_grace_ms;      /* a moved block's source is deleted this long after the copy */
  int64_t tier_residence_ms;  /* minimum time since a block's last access before it moves */
  int64_t tier_max_moves;     /* moves per round */
  double tier_high, tier_low; /* G3 fill watermarks */
  double tier_promote_freq, tier_keep_freq;
  int64_t tier_max_bytes_per_s;   /* copies throttled to this rate; 0: unthrottled */
  int64_t tier_prefetch_depth;    /* generations of descendants a G4 hit prefetches */
  int64_t tier_scrub_ms;          /* one volume is scrubbed this often; 0: no scrub */
  int64_t tier_scrub_files_per_s; /* objects a pass lists or reads per second; 0: no limit */
  int64_t tier_scrub_bytes_per_s; /* bytes a pass reads per second; 0: no limit */
  int tier_scrub_verify;          /* a pass reads every object back */
  int64_t tier_max_parallel;      /* moves in flight at once, one per destination */
  int64_t tier_prefetch_bytes;    /* bytes a G4 hit prefetches at most */
  char plugin_dir[512];           /* empty: kvp_volume_plugin_dir() */
  int tier_policy;                /* index into kvp__tier_policy_names */
  char tier_policy_params[256];   /* the policy's parameters, "key=value ..." */
  char tier_parts[256];           /* the owned partitions tiered: "0,1"; "none"; empty: all owned */
  int64_t tier_lease_ms;          /* partitioned: a partition's tiering lease TTL (lease.h) */
  int64_t tier_compact_ms;        /* a compactable volume's garbage is looked at this often */
  double tier_compact_ratio;      /* compacted from this share of dead bytes; 0: never */
  kvp_advisor_volume_t volumes[KVP__TIER_MAX_VOLUMES];
  int nvolumes;
  /* Where the file set them, for errors naming file:line (lines 0 when the
   * volume came from no file): the file, and per volume the line of its
   * first key and of each key (the first KVP_ADVISOR_VOLUME_LINES). */
  char conf_path[512];
  struct kvp_advisor_volume_at_s {
    int line, nkeys;
    struct {
      char key[32];
      int line;
    } keys[KVP_ADVISOR_VOLUME_LINES];
  } volume_at[KVP__TIER_MAX_VOLUMES];
  /* [metrics] */
  char metrics_listen[128];           /* host:port of /metrics, /healthz, /readyz; empty: off */
  int64_t metrics_request_timeout_ms; /* a request's headers and body within this */
  int64_t metrics_per_client;         /* connections per client address; 0: no limit */
  /* [http]: the routers' indexer API (routerapi.h) */
  int http_enabled;
  char http_listen[128];           /* host:port; default 127.0.0.1:13333 */
  int64_t http_block_size;         /* tokens per block when a request has none; 0: required */
  int64_t http_request_timeout_ms; /* a request's headers and body within this */
  int64_t http_per_client;         /* connections per client address; 0: no limit */
  /* [log] */
  int log_level; /* KVP_LOG_* as an enum index: error, warn, info, debug */
  char log_file[512];
  int log_syslog;
  /* Not from the file: the program sets it. */
  int handle_signals; /* SIGTERM/SIGINT stop, SIGHUP reopens the log */
  int takeover;       /* take over a durable consumer this database did not create */
} kvp_advisor_config_t;

/* Fills o, the tiering engine's options, from cfg (o points into cfg) and
 * returns o. */
const kvp__tier_opts_t *kvp__adv_tier_opts(const kvp_advisor_config_t *cfg, kvp__tier_opts_t *o);

/* Fills cfg with the defaults (the values shown in etc/kvplane-advisor.conf). */
void kvp_advisor_config_defaults(kvp_advisor_config_t *cfg);

/* Reads an INI file over cfg. Returns 0, KVP_EIO (file unreadable) or
 * KVP_ECONFIG; err then reads "path:line: [section] key: cause". */
int kvp_advisor_config_load(kvp_advisor_config_t *cfg, const char *path, char *err, size_t errlen);

/* Applies one "section.key=value" override. Returns 0 or KVP_ECONFIG. */
int kvp_advisor_config_set(kvp_advisor_config_t *cfg, const char *assignment, char *err,
                           size_t errlen);

/* Checks the keys against each other (namespace syntax, TLS pairs, one auth
 * method). Returns 0 or KVP_ECONFIG with err naming the key. */
int kvp_advisor_config_check(const kvp_advisor_config_t *cfg, char *err, size_t errlen);

/* Checks each [volume] section (volcheck.c): its plugin file exists in the
 * plugin directory, a path parameter's parent directory exists, and the
 * plugin's open accepts the parameters (a path replaced by a scratch
 * directory, removed after, so nothing is written where the volume lives).
 * Returns 0, or KVP_ECONFIG with err "file:line: [volume NAME] key: cause";
 * an open failing for another reason (a store not answering) is left to the
 * advisor's own open. */
int kvp_advisor_config_check_volumes(const kvp_advisor_config_t *cfg, char *err, size_t errlen);

/* Formats "file:line: [volume NAME] <fmt>" into err, the line of key in
 * volume i (of its section's first key when key is NULL or not set). */
void kvp__adv_volume_errf(const kvp_advisor_config_t *cfg, int i, const char *key, char *err,
                          size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Writes every key with its help text and current value, INI syntax. */
void kvp_advisor_config_print(const kvp_advisor_config_t *cfg, FILE *f);

/* Writes the configuration reference (Markdown: every key with its type,
 * default, range and help; docs/config.md is this output). */
void kvp_advisor_config_reference(FILE *f);

typedef struct kvp_advisor_s kvp_advisor_t;

/* Opens the database (loading the index from it), connects to NATS, creates
 * the JetStream stream and consumer if absent and subscribes. Returns 0 or
 * KVP_ECONFIG, KVP_EDB, KVP_EIO, KVP_ECONN, KVP_EAUTH, KVP_ENOMEM, or
 * KVP_EBUSY when another advisor holds the database (dblock.h), with err
 * describing the cause; nothing is left open on error. */
int kvp_advisor_open(const kvp_advisor_config_t *cfg, kvp_advisor_t **out, char *err,
                     size_t errlen);

/* Runs the daemon's loop on the calling thread until kvp_advisor_stop() or a
 * handled signal; then applies what was received, flushes a last time and
 * returns 0, or the code of a failed final flush. */
int kvp_advisor_run(kvp_advisor_t *adv);

/* Asks a running advisor to stop. Safe from any thread (it takes a mutex,
 * so not from a signal handler: set handle_signals instead). */
void kvp_advisor_stop(kvp_advisor_t *adv);

/* Closes everything; NULL is accepted. Call after kvp_advisor_run returned
 * (or without running it). */
void kvp_advisor_close(kvp_advisor_t *adv);

#ifdef __cplusplus
}
#endif
#endif /* KVP_ADVISOR_ADVISOR_H */
