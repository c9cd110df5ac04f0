/* What the tiering-across-partitions tests share (test_scale_tier.c,
 * test_scale_tier_legacy.c): an advisor run in-process on a thread of its
 * own, its volumes, and the clocks the waits use. */
#ifndef KVP_TESTS_SCALE_TIER_FX_H
#define KVP_TESTS_SCALE_TIER_FX_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/advisor.h"
#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/publisher.h"
#include "kvplane/volume.h"

typedef struct adv_s {
  kvp_advisor_config_t cfg;
  kvp_advisor_t *adv;
  pthread_t thread;
  int running;
  char db[320];
  pid_t pid;    /* a kvplane-advisor process (test_scale_tier.c's adv_spawn), or 0 */
  int mport;    /* [metrics] listen port, where a test gives one */
  int no_scrub; /* [tiering] scrub_interval = 0 (test_scale_tier_legacy.c) */
  int no_g4;    /* no G4 volume (test_scale_tier_legacy.c) */
} adv_t;

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void *run_main(void *arg) {
  adv_t *a = arg;
  kvp_advisor_run(a->adv);
  return NULL;
}

static inline void adv_stop(adv_t *a) {
  if (!a->running)
    return;
  kvp_advisor_stop(a->adv);
  pthread_join(a->thread, NULL);
  kvp_advisor_close(a->adv);
  a->running = 0;
}

static inline void add_volume(kvp_advisor_config_t *cfg, const char *name, int tier,
                              const char *path, int64_t capacity) {
  kvp_advisor_volume_t *v = &cfg->volumes[cfg->nvolumes++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->tier = tier;
  snprintf(v->plugin, sizeof v->plugin, "posix");
  v->capacity = capacity;
  snprintf(v->params, sizeof v->params, "path=%s\nfsync=off\n", path);
}

/* An object a volume lists: its partition (by its key namespace), hash
 * and bytes (0 where a test does not look). */
typedef struct obj_s {
  uint32_t part;
  uint64_t hash, bytes;
} obj_t;

#define MAXOBJ 256
typedef struct listing_s {
  obj_t o[MAXOBJ];
  size_t n;
  int bad_ns; /* objects under a key namespace the listing does not take */
} listing_t;

/* By partition, then hash. */
static inline int cmp_obj(const void *a, const void *b) {
  const obj_t *x = a, *y = b;
  if (x->part != y->part)
    return x->part < y->part ? -1 : 1;
  return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* The first column of sql's first row in the database at path, read-only
 * beside its advisor; -1 when it cannot be read. */
static inline long long db_count_at(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  long long n = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      n = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

/* One advisor's stats reply on namespace ns into *st (the first to
 * answer; the caller frees it with kvp_client_reply_free). */
static inline void stats_reply(const char *url, const char *ns, char **st) {
  kvp_nats_opts_t no;
  kvp_client_t *c = NULL;
  char err[256];
  kvp_nats_opts_init(&no);
  snprintf(no.servers, sizeof no.servers, "%s", url);
  assert_int_equal(kvp_client_open(&no, ns, &c, err, sizeof err), 0);
  assert_int_equal(kvp_client_request(c, "stats", "{}", 5000, st, err, sizeof err), 0);
  kvp_client_close(c);
}

/* A worker's offload of a chain: h[0..n) (each the parent of the next)
 * put in its G3 volume g3 under key namespace keyns, blk payload bytes
 * each, and announced as Stored in G3 volume vol by worker's publisher
 * on namespace ns (JetStream, partitions as given). */
static inline void offload_chain(const char *url, const char *ns, kvp_volume_t *g3,
                                 const char *worker, const char *vol, const char *keyns,
                                 uint32_t partitions, const uint64_t *h, int n, size_t blk) {
  static uint8_t payload[1 << 16];
  char err[256];
  assert_true(blk <= sizeof payload);
  for (int k = 0; k < n; k++) {
    kvp_frame_t m = {
        .hash = h[k], .parent = k ? h[k - 1] : 0, .has_parent = k > 0, .payload_len = blk};
    memset(payload, (int)(h[k] & 0xff), blk);
    if (kvp_volume_put_block(g3, keyns, &m, payload, err, sizeof err) != 0)
      fail_msg("worker %s: put: %s", worker, err);
  }
  kvp_publisher_opts_t po;
  kvp_publisher_t *pub = NULL;
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", url);
  po.ns = ns;
  po.worker_id = worker;
  po.mode = KVP_PUB_JETSTREAM;
  po.partitions = partitions;
  po.max_delay_ms = 1;
  if (kvp_publisher_open(&po, &pub, err, sizeof err) != 0)
    fail_msg("worker %s: publisher: %s", worker, err);
  assert_int_equal(kvp_publisher_stored(pub, KVP_TIER_G3, vol, NULL, h, (size_t)n, 16,
                                        blk + KVP_FRAME_HEADER, 0),
                   0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_close(pub);
}

#endif
