/* What the tiering engine is configured with. The advisor fills it from its
 * configuration ([tiering], the [volume <name>] sections, [nats],
 * [jetstream], [store]: kvp__adv_tier_opts); tests and benchmarks fill it
 * the same way. The engine copies what it keeps: the strings need to live
 * only through kvp__tier_engine_open. */
#ifndef KVP_TIER_OPTS_H
#define KVP_TIER_OPTS_H

#include <stdint.h>

#include "kvplane/nats.h"

#define KVP__TIER_MAX_VOLUMES 64

/* A storage volume the engine opens: one [volume <name>] section
 * (docs/volumes.md for each plugin's parameters). */
typedef struct kvp__tier_volume_conf_s {
  char name[64];
  int tier; /* 3 or 4 */
  char plugin[32];
  int64_t capacity;  /* bytes; the fill watermarks are of this */
  char params[1024]; /* the plugin's parameters, "key=value" lines */
} kvp__tier_volume_conf_t;

typedef struct kvp__tier_opts_s {
  const char *ns;
  const char *db_path;         /* the advisor's database, for the migrations journal */
  const kvp_nats_opts_t *nats; /* NULL or no servers: moves are not announced */
  int jetstream;               /* announce through JetStream (stream), else core NATS */
  const char *stream;
  const char *plugin_dir; /* NULL or "": kvp_volume_plugin_dir() */
  int64_t interval_ms;    /* how often moves are planned */
  int64_t grace_ms;       /* a moved block's source is deleted this long after the copy */
  int64_t residence_ms;   /* minimum time since a block's last access before it moves */
  int64_t max_moves;      /* moves per round */
  double high, low;       /* G3 fill watermarks */
  double promote_freq, keep_freq;
  int64_t max_bytes_per_s;   /* copies throttled to this rate; 0: unthrottled */
  int64_t prefetch_depth;    /* generations of descendants a G4 hit prefetches */
  int64_t prefetch_bytes;    /* bytes a G4 hit prefetches at most */
  int64_t scrub_ms;          /* one volume is scrubbed this often, in turn; 0: no scrub */
  int64_t scrub_files_per_s; /* objects a pass lists or reads per second; 0: no limit */
  int64_t scrub_bytes_per_s; /* bytes a pass reads per second; 0: no limit */
  int scrub_verify;          /* a pass reads every object back (a full-checksum scrub) */
  int64_t max_parallel;      /* moves in flight at once, each into another volume; 0: 1 */
  const char *policy;        /* [tiering] policy (policy.h's registry); NULL or "": lru */
  const char *policy_params; /* its parameters, "key=value ..."; NULL: its defaults */
  int64_t compact_ms;        /* a compactable volume's garbage is looked at this often */
  double compact_ratio;      /* compacted from this share of dead bytes; 0: never */
  const kvp__tier_volume_conf_t *volumes;
  int nvolumes;
  /* Partitioned tiering (parts.c, docs/SCALE.md): the deployment's
   * partition count (0: not partitioned) and the partitions this advisor
   * owns. The engine then moves only locations of workers of owned
   * partitions, keeps each partition's objects under its own key
   * namespace (kvp_partition_volume_ns), announces them as that
   * partition's advisor worker, scrubs only those namespaces, and takes
   * of each G4 volume the share capacity * nowned / partitions. */
  uint32_t partitions;
  const uint32_t *owned;
  size_t nowned;
  /* Partitioned under tiering leases (advisor/lease.h): another advisor
   * may tier these partitions now, so crash recovery at open deletes no
   * partial copy of an interrupted move (it may be that advisor's object
   * by now, under the same key); the lease holder's scrub deletes or
   * adopts it. */
  int leased;
} kvp__tier_opts_t;

#endif
