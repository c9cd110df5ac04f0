/* Why this file is long: one fixture (two advisors, four workers and
 * their volumes) shared by its eight cases.
 *
 * Tiering across partitions (docs/SCALE.md): two real advisors, each
 * owning 2 of 4 partitions and tiering them at once, over real posix
 * volumes (a G3 per worker, one G4 shared by both) and a real nats-server
 * (JetStream, the partition mapping). Four workers, one per partition,
 * each with a chain of blocks in its G3, the first blocks of every chain
 * the same hashes (a prefix shared across partitions). Checked:
 *   - what is on the shared G4 equals the union of what the advisors'
 *     databases place there, each object under its partition's key
 *     namespace and held by that partition's advisor worker;
 *   - each advisor's bytes there stay within its share (capacity * 2/4),
 *     though the volume has room for more;
 *   - every worker's block is in its G3 (object and location agreeing) or
 *     in G4 under its partition's namespace;
 *   - after many scrub passes of both advisors over the shared volume,
 *     each deleted the orphan planted under one of its partitions'
 *     namespaces and nothing else: an advisor takes no other partition's
 *     object for an orphan;
 *   - the operator's controls reach both advisors, each acting for its
 *     own partitions, and a stopped one's partitions are reported missing;
 *     a delete of the shared prefix takes every partition's continuations;
 *   - a hot standby that tiers nothing ([tiering] partitions = none) takes
 *     the tiering over on a live request once the other advisor is gone.
 *   - tiering leases: of two advisors configured to tier the same
 *     partitions only the lease holder moves; the other takes over by
 *     itself when the holder stops, and the old holder restarted makes no
 *     move beside it; a lease left unrenewed (a killed holder) expires
 *     after the TTL and is taken, one taken from under its holder stops
 *     the holder's tiering of that partition.
 * Loopback only; bounded by the waits below. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "advisor/advisor.h"
#include "kvplane/client.h"
#include "harness.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/volume.h"
#include "natsd.h"
#include "scale_tier_fx.h"
#include <nats/nats.h>

#define NPART 4
#define NS "t"
#define BLK 1000
#define FR (BLK + KVP_FRAME_HEADER)
#define CHAIN 8
#define SHARED 3 /* the first SHARED blocks of every chain have the same hashes */
#define G3_BLOCKS 4
#define G4_BLOCKS 16 /* the whole shared volume; each advisor's share: 8 */

typedef struct fx_s {
  char dir[256], conf[320], g4path[320], g3path[NPART][320];
  kvp_natsd_t natsd;
  int natsd_up;
  char w[NPART][16];
  uint64_t h[NPART][CHAIN];
  kvp_volume_t *g3[NPART], *g4;
  adv_t a[2];
  int mport[2];     /* each advisor's [metrics] listen port */
  int owner[NPART]; /* the advisor of each partition */
  int64_t lease_ms; /* [tiering] lease_ms of the advisors started; 0: the default */
  int g4_blocks;    /* the shared G4's capacity in blocks; 0: G4_BLOCKS */
} fx_t;

/* Advisor i owns partitions owned ("2i,2i+1" when NULL) and tiers tiered
 * of them ([tiering] partitions; NULL: all), with every worker's G3 volume
 * (a partition may move to it) and the shared G4. */
static void adv_config(fx_t *f, int i, const char *owned, const char *tiered) {
  adv_t *a = &f->a[i];
  kvp_advisor_config_t *c = &a->cfg;
  char dir[256], url[64];
  kvp_advisor_config_defaults(c);
  memcpy(dir, f->dir, sizeof dir); /* copies: gcc sees the fixture's fields overlap */
  memcpy(url, f->natsd.url, sizeof url);
  snprintf(a->db, sizeof a->db, "%s/adv%d.db", dir, i);
  snprintf(c->db_path, sizeof c->db_path, "%s/adv%d.db", dir, i);
  snprintf(c->nats.servers, sizeof c->nats.servers, "%s", url);
  snprintf(c->ns, sizeof c->ns, NS);
  snprintf(c->consumer, sizeof c->consumer, "adv%d", i);
  if (owned != NULL)
    snprintf(c->owned, sizeof c->owned, "%s", owned);
  else
    snprintf(c->owned, sizeof c->owned, "%d,%d", 2 * i, 2 * i + 1);
  if (tiered != NULL)
    snprintf(c->tier_parts, sizeof c->tier_parts, "%s", tiered);
  snprintf(c->plugin_dir, sizeof c->plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  c->mode = KVP_ADVISOR_JETSTREAM;
  c->partitions = NPART;
  f->mport[i] = kvp_test_free_port();
  snprintf(c->metrics_listen, sizeof c->metrics_listen, "127.0.0.1:%d", f->mport[i]);
  c->flush_interval_ms = 50;
  c->heartbeat_timeout_ms = 0;
  c->log_level = 1;
  c->tiering = 1;
  c->tier_interval_ms = 100;
  c->tier_residence_ms = 0;
  c->tier_grace_ms = 0;
  c->tier_scrub_ms = 100;
  c->tier_high = 0.9;
  c->tier_low = 0.5;
  if (f->lease_ms)
    c->tier_lease_ms = f->lease_ms;
  for (int p = 0; p < NPART; p++) {
    char name[16];
    snprintf(name, sizeof name, "g3w%d", p);
    add_volume(c, name, 3, f->g3path[p], G3_BLOCKS * FR);
  }
  add_volume(c, "g4", 4, f->g4path, (int64_t)(f->g4_blocks ? f->g4_blocks : G4_BLOCKS) * FR);
}

static void adv_start_as(fx_t *f, int i, const char *owned, const char *tiered) {
  adv_t *a = &f->a[i];
  char err[512];
  adv_config(f, i, owned, tiered);
  if (kvp_advisor_open(&a->cfg, &a->adv, err, sizeof err) != 0)
    fail_msg("advisor %d: %s", i, err);
  assert_int_equal(pthread_create(&a->thread, NULL, run_main, a), 0);
  a->running = 1;
}

static void adv_start(fx_t *f, int i) {
  adv_start_as(f, i, NULL, NULL);
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char map[1024], err[256];
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL ||
      kvp_partition_mapping_conf(map, sizeof map, NPART) != 0)
    return -1;
  snprintf(f->conf, sizeof f->conf, "%s/map.conf", f->dir);
  FILE *out = fopen(f->conf, "w");
  if (out == NULL)
    return -1;
  fputs(map, out);
  fclose(out);
  kvp_natsd_opts_t o = {.jetstream = 1, .config = f->conf};
  if (kvp_natsd_start(&f->natsd, &o) != 0)
    return -1;
  f->natsd_up = 1;
  for (int p = 0; p < NPART; p++)
    f->owner[p] = p / 2;
  snprintf(f->g4path, sizeof f->g4path, "%s/g4", f->dir);
  kvp_volume_param_t p4[2] = {{"path", f->g4path}, {"fsync", "off"}};
  if (kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", NS, p4, 2, &f->g4, err, sizeof err) !=
      0)
    return -1;
  for (uint32_t p = 0, i = 0; p < NPART; i++) {
    snprintf(f->w[p], sizeof f->w[p], "w%u", i);
    if (kvp_partition_of(f->w[p], NPART) != p)
      continue;
    char name[16];
    snprintf(name, sizeof name, "g3w%u", p);
    char dir[256];
    memcpy(dir, f->dir, sizeof dir);
    snprintf(f->g3path[p], sizeof f->g3path[p], "%s/g3w%u", dir, p);
    kvp_volume_param_t p3[2] = {{"path", f->g3path[p]}, {"fsync", "off"}};
    if (kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", name, NS, p3, 2, &f->g3[p], err,
                           sizeof err) != 0)
      return -1;
    for (int k = 0; k < CHAIN; k++)
      f->h[p][k] = k < SHARED ? 0x5a5a000000000000ull + (uint64_t)k
                              : 0x1000000000000000ull * (p + 1) + (uint64_t)k;
    p++;
  }
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  for (int i = 0; i < 2; i++) {
    adv_stop(&f->a[i]);
    if (f->a[i].pid > 0) {
      kill(f->a[i].pid, SIGKILL);
      waitpid(f->a[i].pid, NULL, 0);
    }
  }
  for (int p = 0; p < NPART; p++)
    kvp_volume_close(f->g3[p]);
  kvp_volume_close(f->g4);
  if (f->natsd_up)
    kvp_natsd_stop(&f->natsd);
  if (f->dir[0])
    kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Worker p: its chain's frames in its G3 under its partition's key
 * namespace, then Stored G3 for the chain on its partition's stream. */
static void worker_offloads(fx_t *f, uint32_t p) {
  char ns[KVP_PARTITION_NS_MAX + 1], vol[16];
  assert_int_equal(kvp_partition_volume_ns(ns, sizeof ns, NS, p), 0);
  snprintf(vol, sizeof vol, "g3w%u", p);
  offload_chain(f->natsd.url, NS, f->g3[p], f->w[p], vol, ns, NPART, f->h[p], CHAIN, BLK);
}

static int on_key(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  listing_t *l = ctx;
  unsigned p;
  char tail;
  (void)bytes;
  if (sscanf(ns, NS "-p%u%c", &p, &tail) != 1 || p >= NPART) {
    l->bad_ns++;
    return 0;
  }
  if (l->n < MAXOBJ)
    l->o[l->n++] = (obj_t){p, hash, 0};
  return 0;
}

static void list_g4(fx_t *f, listing_t *l) {
  char err[256];
  memset(l, 0, sizeof *l);
  assert_int_equal(kvp_volume_iterate(f->g4, on_key, l, err, sizeof err), 0);
  qsort(l->o, l->n, sizeof *l->o, cmp_obj);
}

/* What advisor i's database places in G4, as (partition of the holder,
 * hash); a holder that is not one of its partitions' advisor workers
 * counts in *foreign. Returns -1 when the database cannot be read. */
static int db_g4(fx_t *f, int i, listing_t *l, int *foreign) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (sqlite3_open_v2(f->a[i].db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
    goto out;
  sqlite3_busy_timeout(db, 2000);
  if (sqlite3_prepare_v2(db, "SELECT hash, worker FROM block_locations WHERE tier = 4", -1, &s,
                         NULL) != SQLITE_OK)
    goto out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
    const char *w = (const char *)sqlite3_column_text(s, 1);
    uint32_t p = kvp_partition_of(w, NPART);
    char want[64];
    if (f->owner[p] != i || kvp_partition_advisor_worker(want, sizeof want, p, NPART) != 0 ||
        strcmp(w, want) != 0)
      (*foreign)++;
    if (l->n < MAXOBJ)
      l->o[l->n++] = (obj_t){p, h, 0};
  }
  rc = 0;
out:
  sqlite3_finalize(s);
  sqlite3_close(db);
  return rc;
}

static long long db_count(fx_t *f, int i, const char *sql) {
  return db_count_at(f->a[i].db, sql);
}

/* The volume equals the union of the databases (and nothing is foreign).
 * Returns 0, or -1 with why. */
static int union_equals_volume(fx_t *f, listing_t *vol, char *why, size_t whylen) {
  listing_t u;
  int foreign = 0;
  memset(&u, 0, sizeof u);
  list_g4(f, vol);
  if (db_g4(f, 0, &u, &foreign) != 0 || db_g4(f, 1, &u, &foreign) != 0) {
    snprintf(why, whylen, "a database cannot be read");
    return -1;
  }
  qsort(u.o, u.n, sizeof *u.o, cmp_obj);
  if (vol->bad_ns || foreign) {
    snprintf(why, whylen, "%d objects outside the partitions' namespaces, %d foreign holders",
             vol->bad_ns, foreign);
    return -1;
  }
  if (u.n != vol->n || (u.n && memcmp(u.o, vol->o, u.n * sizeof *u.o) != 0)) {
    snprintf(why, whylen, "the databases place %zu objects in G4, the volume holds %zu", u.n,
             vol->n);
    return -1;
  }
  return 0;
}

/* Every block of every worker is in the worker's G3 (object and location
 * in its advisor's database, both or neither) or in the shared G4 under
 * its partition's namespace; with evictions, a block may be in neither (an
 * advisor whose share shrank evicts from G4, the last tier). Returns 0, or
 * -1 with why. */
static int blocks_kept(fx_t *f, const listing_t *vol, int evictions, char *why, size_t whylen) {
  for (uint32_t p = 0; p < NPART; p++) {
    char ns[KVP_PARTITION_NS_MAX + 1], sql[200];
    kvp_partition_volume_ns(ns, sizeof ns, NS, p);
    for (int k = 0; k < CHAIN; k++) {
      uint64_t h = f->h[p][k];
      obj_t want = {p, h, 0};
      int g3obj = kvp_volume_exists(f->g3[p], ns, h) == 1;
      snprintf(sql, sizeof sql,
               "SELECT count(*) FROM block_locations WHERE worker = '%s' AND tier = 3 AND "
               "hash = %lld",
               f->w[p], (long long)h);
      long long g3loc = db_count(f, f->owner[p], sql);
      int g4 = vol->n && bsearch(&want, vol->o, vol->n, sizeof want, cmp_obj) != NULL;
      if (g3obj != (g3loc == 1) || !(g3obj || g4 || evictions)) {
        snprintf(why, whylen,
                 "worker %s block %016llx: G3 object %d, G3 location %lld, G4 object %d", f->w[p],
                 (unsigned long long)h, g3obj, g3loc, g4);
        return -1;
      }
    }
  }
  return 0;
}

static size_t objects_of(const fx_t *f, const listing_t *l, int i) {
  size_t n = 0;
  for (size_t k = 0; k < l->n; k++)
    n += f->owner[l->o[k].part] == i;
  return n;
}

/* Waits until the volume equals the union of the databases and every
 * block is kept, and stays so for 1.5 s, with at least min objects of
 * each advisor. */
static void settle(fx_t *f, listing_t *vol, size_t min, int evictions, const char *when) {
  char why[256] = "";
  uint64_t end = now_ms() + 30000, stable_since = 0;
  size_t last = SIZE_MAX;
  while (now_ms() < end) {
    if (union_equals_volume(f, vol, why, sizeof why) == 0 &&
        blocks_kept(f, vol, evictions, why, sizeof why) == 0) {
      if (vol->n != last) {
        last = vol->n;
        stable_since = now_ms();
      } else if (now_ms() - stable_since > 1500 && objects_of(f, vol, 0) >= min &&
                 objects_of(f, vol, 1) >= min) {
        return;
      }
    }
    sleep_ms(100);
  }
  if (union_equals_volume(f, vol, why, sizeof why) != 0 ||
      blocks_kept(f, vol, evictions, why, sizeof why) != 0)
    fail_msg("%s: the shared G4, the G3s and the advisors' databases differ: %s", when, why);
  fail_msg("%s: not settled after 30 s (%zu and %zu objects)", when, objects_of(f, vol, 0),
           objects_of(f, vol, 1));
}

static void two_advisors_tier_their_partitions_on_one_g4(void **state) {
  fx_t *f = *state;
  listing_t vol, later;
  char why[256] = "";
  adv_start(f, 0);
  adv_start(f, 1);
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p);

  /* Each advisor demotes its workers' G3 below the low watermark into its
   * share of G4 (8 blocks of 16); its 10 blocks to demote do not fit, so
   * the share's coldest are evicted (the last tier) to make room: a block
   * may be in neither. */
  settle(f, &vol, 4, 1, "first moves");
  printf("shared G4: %zu objects, %zu of partitions 0-1 (advisor 0), %zu of 2-3 (advisor 1)\n",
         vol.n, objects_of(f, &vol, 0), objects_of(f, &vol, 1));
  /* Shares: 8 blocks each of the 16 the volume holds. */
  assert_true(objects_of(f, &vol, 0) >= 4 && objects_of(f, &vol, 0) <= G4_BLOCKS / 2);
  assert_true(objects_of(f, &vol, 1) >= 4 && objects_of(f, &vol, 1) <= G4_BLOCKS / 2);
  /* A shared prefix block demoted by both is two objects, one per
   * partition (counted for the reader: which blocks go first is the
   * policy's). */
  size_t twice = 0;
  for (size_t k = 0; k + 1 < vol.n; k++)
    for (size_t j = k + 1; j < vol.n; j++)
      twice += vol.o[k].hash == vol.o[j].hash;
  printf("shared G4: %zu hashes stored under two partitions' namespaces\n", twice);

  /* An object of partition 0 and one of partition 2 that no location
   * names (orphans): each is its partition's advisor's to delete. */
  for (uint32_t p = 0; p < NPART; p += 2) {
    char ns[KVP_PARTITION_NS_MAX + 1], err[256];
    static uint8_t payload[BLK];
    kvp_frame_t m = {.hash = 0xdead000000000000ull + p, .payload_len = BLK};
    kvp_partition_volume_ns(ns, sizeof ns, NS, p);
    if (kvp_volume_put_block(f->g4, ns, &m, payload, err, sizeof err) != 0)
      fail_msg("orphan: %s", err);
  }

  /* Both scrub the shared volume over and over (one volume and partition
   * every 100 ms; an object no location names is deleted at its second
   * pass): each deletes its own orphan and nothing of the other's. */
  long long d0 = db_count(f, 0, "SELECT count(*) FROM scrubs WHERE state = 'done'");
  long long d1 = db_count(f, 1, "SELECT count(*) FROM scrubs WHERE state = 'done'");
  uint64_t end = now_ms() + 30000;
  while (now_ms() < end &&
         (db_count(f, 0, "SELECT count(*) FROM scrubs WHERE state = 'done'") < d0 + 24 ||
          db_count(f, 1, "SELECT count(*) FROM scrubs WHERE state = 'done'") < d1 + 24))
    sleep_ms(100);
  assert_true(db_count(f, 0,
                       "SELECT count(*) FROM scrubs WHERE state = 'done' AND "
                       "volume = 'g4'") >= 4);
  if (union_equals_volume(f, &later, why, sizeof why) != 0 ||
      blocks_kept(f, &later, 1, why, sizeof why) != 0)
    fail_msg("after the scrubs: %s", why);
  assert_int_equal(later.n, vol.n);
  assert_memory_equal(later.o, vol.o, vol.n * sizeof *vol.o);
  for (int i = 0; i < 2; i++) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM migrations WHERE state = 'orphan_deleted' AND hash = %lld",
             (long long)(0xdead000000000000ull + 2u * (unsigned)i));
    assert_int_equal(db_count(f, i, sql), 1);
    assert_int_equal(db_count(f, i,
                              "SELECT count(*) FROM migrations WHERE state IN "
                              "('orphan_deleted', 'adopted')"),
                     1);
  }
}

/* kvp_client_tier_all of body; the merged reply parsed into *doc. */
static void tier_all(fx_t *f, const char *body, uint32_t timeout_ms, json_t **doc) {
  kvp_client_t *c = NULL;
  char err[512], *reply = NULL;
  kvp_nats_opts_t no;
  kvp_nats_opts_init(&no);
  snprintf(no.servers, sizeof no.servers, "%s", f->natsd.url);
  if (kvp_client_open(&no, NS, &c, err, sizeof err) != 0 ||
      kvp_client_tier_all(c, body, timeout_ms, &reply, err, sizeof err) != 0)
    fail_msg("tier_all: %s", err);
  *doc = json_loads(reply, 0, NULL);
  assert_non_null(*doc);
  kvp_client_reply_free(reply);
  kvp_client_close(c);
}

static json_int_t int_of(json_t *doc, const char *key) {
  json_t *v = json_object_get(doc, key);
  if (!json_is_integer(v))
    fail_msg("reply: no integer \"%s\"", key);
  return json_integer_value(v);
}

/* The operator's controls reach every partition's advisor: a pin of the
 * prefix block every worker shares is made by both (each for its own
 * partitions' blocks) and the merged reply sums them; with one advisor
 * stopped, its partitions are reported missing, an error, not hidden. */
static void controls_reach_every_partitions_advisor(void **state) {
  fx_t *f = *state;
  listing_t vol;
  json_t *doc = NULL;
  char body[256];
  adv_start(f, 0);
  adv_start(f, 1);
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p);
  settle(f, &vol, 4, 1, "first moves"); /* the shares are too small: evictions */

  snprintf(body, sizeof body, "{\"op\":\"pin\",\"hashes\":[\"%016llx\"]}",
           (unsigned long long)f->h[0][0]);
  tier_all(f, body, 5000, &doc);
  char *text = json_dumps(doc, JSON_COMPACT);
  printf("pin, gathered: %s\n", text);
  free(text);
  assert_null(json_object_get(doc, "error"));
  assert_int_equal(json_array_size(json_object_get(doc, "advisors")), 2);
  assert_int_equal(json_array_size(json_object_get(doc, "missing")), 0);
  assert_int_equal(int_of(doc, "partitions"), NPART);
  assert_int_equal(int_of(doc, "changed"), 2); /* one pin row in each database */
  json_decref(doc);
  for (int i = 0; i < 2; i++)
    assert_int_equal(db_count(f, i, "SELECT count(*) FROM pins"), 1);

  /* Advisor 1 gone: partitions 2 and 3 have no one to act for them. */
  adv_stop(&f->a[1]);
  snprintf(body, sizeof body, "{\"op\":\"unpin\",\"hashes\":[\"%016llx\"]}",
           (unsigned long long)f->h[0][0]);
  tier_all(f, body, 1000, &doc);
  assert_non_null(json_object_get(doc, "error"));
  assert_non_null(strstr(json_string_value(json_object_get(doc, "error")), "partitions 2,3"));
  assert_int_equal(json_array_size(json_object_get(doc, "advisors")), 1);
  assert_int_equal(int_of(doc, "changed"), 1);
  json_decref(doc);
  assert_int_equal(db_count(f, 0, "SELECT count(*) FROM pins"), 0);
}

/* A delete of the prefix every chain shares reaches every partition's
 * advisor, and each deletes that prefix's continuations among its own
 * partitions' blocks: the rest of every chain, in the workers' G3s and
 * the shared G4. The merged reply counts them all. */
static void a_prefix_delete_takes_every_partitions_continuations(void **state) {
  fx_t *f = *state;
  listing_t vol;
  json_t *doc = NULL;
  char body[256], ns[KVP_PARTITION_NS_MAX + 1];
  adv_start(f, 0);
  adv_start(f, 1);
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p);
  settle(f, &vol, 4, 1, "first moves");
  /* The chains' blocks below the shared prefix still in G3 or G4. */
  json_int_t below = 0;
  for (uint32_t p = 0; p < NPART; p++) {
    kvp_partition_volume_ns(ns, sizeof ns, NS, p);
    for (int k = SHARED; k < CHAIN; k++) {
      obj_t want = {p, f->h[p][k], 0};
      below += kvp_volume_exists(f->g3[p], ns, f->h[p][k]) == 1 ||
               (vol.n && bsearch(&want, vol.o, vol.n, sizeof want, cmp_obj) != NULL);
    }
  }
  assert_true(below >= NPART);

  snprintf(body, sizeof body,
           "{\"op\":\"delete\",\"hashes\":[\"%016llx\",\"%016llx\",\"%016llx\"]}",
           (unsigned long long)f->h[0][0], (unsigned long long)f->h[0][1],
           (unsigned long long)f->h[0][2]);
  tier_all(f, body, 5000, &doc);
  char *text = json_dumps(doc, JSON_COMPACT);
  printf("delete, gathered: %s (%lld blocks below the prefix)\n", text, (long long)below);
  free(text);
  assert_null(json_object_get(doc, "error"));
  assert_int_equal(json_array_size(json_object_get(doc, "advisors")), 2);
  assert_int_equal(int_of(doc, "continuations"), below);
  json_decref(doc);

  /* Nothing of any chain is left in a volume or a database's G3/G4. */
  uint64_t end = now_ms() + 20000;
  long long left = -1;
  while (now_ms() < end) {
    list_g4(f, &vol);
    left = (long long)vol.n;
    for (uint32_t p = 0; p < NPART; p++) {
      kvp_partition_volume_ns(ns, sizeof ns, NS, p);
      for (int k = 0; k < CHAIN; k++)
        left += kvp_volume_exists(f->g3[p], ns, f->h[p][k]) == 1;
    }
    for (int i = 0; i < 2; i++)
      left += db_count(f, i, "SELECT count(*) FROM block_locations WHERE tier IN (3, 4)");
    if (left == 0)
      break;
    sleep_ms(100);
  }
  assert_int_equal(left, 0);
}

static void ask_partitions(fx_t *f, int i, const char *body, char *out, size_t outlen);

/* Advisor 0 tiers all four partitions, advisor 1 owns them too but tiers
 * none (a hot standby: [tiering] partitions = none). Advisor 1 moves
 * nothing while advisor 0 runs, nor after it stopped, until a live request
 * tiers the partitions there: then it demotes the workers' new blocks,
 * and what is on the shared G4 equals what its database places there
 * (advisor 0's moves learned from the partitions' streams, and its own). */
/* One advisor's stats reply (the first to answer; the caller frees it
 * with kvp_client_reply_free). */
static char *stats_of(fx_t *f) {
  char *st = NULL;
  stats_reply(f->natsd.url, NS, &st);
  return st;
}

static void a_standby_takes_over_the_tiering(void **state) {
  fx_t *f = *state;
  listing_t vol, mine;
  char reply[1024];
  const char *moved = "SELECT count(*) FROM migrations WHERE state = 'source_deleted'";
  /* Room in G4 for both generations: G4 evicts only past its capacity
   * (g4_high_watermark 1.0), so a G4 the first advisor filled would take
   * no demotion of the standby's (before the standby learned of the
   * first's deleted sources, its stale G3 locations of blocks already in
   * G4 made "moves" that needed no room). */
  f->g4_blocks = 96;
  adv_start_as(f, 0, "0-3", NULL);
  adv_start_as(f, 1, "0-3", "none");
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p);
  uint64_t end = now_ms() + 30000;
  while (now_ms() < end && db_count(f, 0, moved) < 8)
    sleep_ms(100);
  assert_true(db_count(f, 0, moved) >= 8);
  ask_partitions(f, 1, "{}", reply, sizeof reply);
  printf("standby: %s\n", reply);
  assert_non_null(strstr(reply, "\"tiering\":[]"));
  adv_stop(&f->a[0]);

  /* New blocks over the G3s' watermarks, nobody tiering: they stay. */
  for (uint32_t p = 0; p < NPART; p++) {
    f->owner[p] = 1;
    for (int k = 0; k < CHAIN; k++)
      f->h[p][k] = 0x2000000000000000ull * (p + 1) + 100 + (uint64_t)k;
    worker_offloads(f, p);
  }
  sleep_ms(1500);
  assert_int_equal(db_count(f, 1, "SELECT count(*) FROM migrations"), 0);

  ask_partitions(f, 1, "{\"tier\":[0,1,2,3]}", reply, sizeof reply);
  printf("tier: %s\n", reply);
  assert_null(strstr(reply, "\"error\""));
  assert_true(strstr(reply, "\"tiering\":[0,1,2,3]") != NULL ||
              strstr(reply, "\"tiering_soon\":[") != NULL);
  int foreign = 0, same = 0;
  end = now_ms() + 30000;
  while (now_ms() < end && !same) {
    sleep_ms(200);
    if (db_count(f, 1, moved) < 4)
      continue;
    list_g4(f, &vol);
    memset(&mine, 0, sizeof mine);
    foreign = 0;
    if (db_g4(f, 1, &mine, &foreign) != 0)
      continue;
    qsort(mine.o, mine.n, sizeof *mine.o, cmp_obj);
    same = vol.n == mine.n && vol.n > 0 && !vol.bad_ns &&
           memcmp(vol.o, mine.o, vol.n * sizeof *vol.o) == 0;
  }
  printf("after the takeover: %lld moves by the standby, %zu objects on the shared G4\n",
         db_count(f, 1, moved), vol.n);
  assert_true(db_count(f, 1, moved) >= 4);
  assert_true(same);
  assert_int_equal(foreign, 0);
  /* Its stats say what it tiers now (tiering.partitions). */
  char *st = stats_of(f);
  assert_non_null(strstr(st, "\"partitions\":[0,1,2,3]"));
  kvp_client_reply_free(st);
  /* And untier stops it. */
  ask_partitions(f, 1, "{\"untier\":[0,1,2,3]}", reply, sizeof reply);
  assert_non_null(strstr(reply, "\"tiering\":[]"));
}

/* The shared G4 equals what advisor i's database places there (every
 * partition's owner set to i), with at least one object. */
static int g4_is_advisors(fx_t *f, int i, listing_t *vol) {
  listing_t mine;
  int foreign = 0;
  list_g4(f, vol);
  memset(&mine, 0, sizeof mine);
  if (db_g4(f, i, &mine, &foreign) != 0)
    return 0;
  qsort(mine.o, mine.n, sizeof *mine.o, cmp_obj);
  return foreign == 0 && !vol->bad_ns && vol->n == mine.n && vol->n > 0 &&
         memcmp(vol->o, mine.o, vol->n * sizeof *vol->o) == 0;
}

/* Every worker offloads a new chain (generation gen) over its G3's
 * watermark. */
static void new_chains(fx_t *f, int gen) {
  for (uint32_t p = 0; p < NPART; p++) {
    for (int k = 0; k < CHAIN; k++)
      f->h[p][k] = 0x0100000000000000ull * (uint64_t)gen + 0x10000ull * (p + 1) + (uint64_t)k;
    worker_offloads(f, p);
  }
}

/* Moves committed (demotions, promotions) and evictions. */
#define MOVES_SQL                                                                                  \
  "SELECT count(*) FROM migrations WHERE state IN ('source_deleted', 'committed', 'evicted')"

/* Waits (30 s at most) until advisor i made at least n moves and the
 * shared G4 equals its database; returns the ms it took. */
static uint64_t wait_moves(fx_t *f, int i, long long n, listing_t *vol, const char *when) {
  const char *moved = MOVES_SQL;
  uint64_t t0 = now_ms(), end = t0 + 30000;
  int same = 0;
  while (now_ms() < end && !same) {
    sleep_ms(100);
    same = db_count(f, i, moved) >= n && g4_is_advisors(f, i, vol);
  }
  if (!same)
    fail_msg("%s: advisor %d made %lld moves (%lld wanted); the shared G4 %s its database", when, i,
             db_count(f, i, moved), n, g4_is_advisors(f, i, vol) ? "equals" : "differs from");
  return now_ms() - t0;
}

static natsStatus try_partitions(fx_t *f, int i, const char *body, char *out, size_t outlen);

/* Asks advisor i until its reply holds want (10 s at most; an advisor
 * process may not listen yet). */
static void wait_reply(fx_t *f, int i, const char *want, char *reply, size_t len) {
  uint64_t end = now_ms() + 10000;
  try_partitions(f, i, "{}", reply, len);
  while (strstr(reply, want) == NULL && now_ms() < end) {
    sleep_ms(100);
    try_partitions(f, i, "{}", reply, len);
  }
  if (strstr(reply, want) == NULL)
    fail_msg("advisor %d: no %s in %s", i, want, reply);
}

static void adv_spawn(fx_t *f, int i, const char *owned, const char *tiered);

/* Advisor 0, the lease holder before advisor 1, starts again as it was
 * configured (tiering all four partitions; in this process, or as a
 * process of its own), and advisor 1 tiers three new chains beside it:
 * advisor 0's journal gets no row. Its partitions reply is left in reply. */
static void old_holder_restarts_idle(fx_t *f, int as_process, listing_t *vol, char *reply,
                                     size_t len) {
  const char *any = "SELECT count(*) FROM migrations";
  long long before = db_count(f, 0, any), moved1 = db_count(f, 1, MOVES_SQL);
  if (as_process)
    adv_spawn(f, 0, "0-3", NULL);
  else
    adv_start_as(f, 0, "0-3", NULL);
  wait_reply(f, 0, "\"ready\":[0,1,2,3]", reply, len);
  new_chains(f, 3);
  wait_moves(f, 1, moved1 + 4, vol, "advisor 1 tiers beside the restarted advisor 0");
  sleep_ms(2000);
  printf("restarted advisor 0%s: %lld journal rows before, %lld after; advisor 1: %lld moves\n",
         as_process ? " (a process)" : "", before, db_count(f, 0, any), db_count(f, 1, MOVES_SQL));
  assert_int_equal(db_count(f, 0, any), before);
  try_partitions(f, 0, "{}", reply, len);
}

/* Both advisors own all four partitions and are configured to tier them
 * all: only the one holding a partition's tiering lease (docs/SCALE.md,
 * "Tiering and standbys") moves its blocks. Advisor 0 takes the leases
 * first; advisor 1 makes no move while 0 runs and says who holds them.
 * Advisor 0 stops: advisor 1 takes the leases over by itself and tiers.
 * Advisor 0 starts again with the same configuration (step 3 of the old
 * procedure, "nothing stops a restarted OLD from tiering P again"): it
 * makes no move at all while advisor 1 runs, and the shared G4 equals
 * advisor 1's database. */
static void tiering_is_exclusive_by_lease(void **state) {
  fx_t *f = *state;
  listing_t vol;
  char reply[2048];
  const char *moved = "SELECT count(*) FROM migrations WHERE state = 'source_deleted'";
  const char *any = "SELECT count(*) FROM migrations";
  f->lease_ms = 1000;
  f->g4_blocks = 96; /* room for three generations of demotions: no G4 full */
  adv_start_as(f, 0, "0-3", NULL);
  wait_reply(f, 0, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  adv_start_as(f, 1, "0-3", NULL);
  wait_reply(f, 1, "\"ready\":[0,1,2,3]", reply, sizeof reply);
  for (uint32_t p = 0; p < NPART; p++)
    f->owner[p] = 0;
  new_chains(f, 1);
  wait_moves(f, 0, 8, &vol, "advisor 0 tiers");
  sleep_ms(2000); /* two lease periods more */
  printf("while advisor 0 holds the leases: %lld moves by advisor 0, %lld by advisor 1\n",
         db_count(f, 0, moved), db_count(f, 1, any));
  assert_int_equal(db_count(f, 1, any), 0);
  ask_partitions(f, 1, "{}", reply, sizeof reply);
  printf("advisor 1 waits: %s\n", reply);
  assert_non_null(strstr(reply, "\"tiering\":[]"));
  assert_non_null(strstr(reply, "\"tiering_soon\":[0,1,2,3]"));
  assert_non_null(strstr(reply, "\"held\":false,\"holder\":\"advisor adv0"));

  /* The holder stops (its leases released): advisor 1 tiers by itself. */
  adv_stop(&f->a[0]);
  uint64_t t0 = now_ms();
  wait_reply(f, 1, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  uint64_t took = now_ms() - t0;
  assert_true(took <= (uint64_t)f->lease_ms * 4 / 3 + 3000); /* TTL, a retry, catch-up */
  for (uint32_t p = 0; p < NPART; p++)
    f->owner[p] = 1;
  new_chains(f, 2);
  wait_moves(f, 1, 4, &vol, "advisor 1 takes over");
  printf("advisor 1 tiers %llu ms after advisor 0 stopped, and moved; the shared G4 (%zu "
         "objects) equals its database\n",
         (unsigned long long)took, vol.n);

  /* The old holder starts again, configured as before: no move. */
  old_holder_restarts_idle(f, 0, &vol, reply, sizeof reply);
  assert_true(g4_is_advisors(f, 1, &vol));
  assert_non_null(strstr(reply, "\"tiering\":[]"));
  assert_non_null(strstr(reply, "\"held\":false,\"holder\":\"advisor adv1"));
}

/* Advisor i as a kvplane-advisor process, configured as adv_start_as
 * would (its configuration written by kvp_advisor_config_print), logging
 * to <dir>/adv<i>.log. */
static void adv_spawn(fx_t *f, int i, const char *owned, const char *tiered) {
  char bin[512], conf[320], log[320], dir[256];
  adv_config(f, i, owned, tiered);
  memcpy(dir, f->dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(conf, sizeof conf, "%s/adv%d.conf", dir, i);
  snprintf(log, sizeof log, "%s/adv%d.log", dir, i);
  FILE *out = fopen(conf, "w");
  assert_non_null(out);
  f->a[i].cfg.log_level = 2;
  kvp_advisor_config_print(&f->a[i].cfg, out);
  fclose(out);
  char *argv[] = {bin, "--config", conf, NULL};
  pid_t pid = kvp_test_spawn_child(argv, log);
  assert_true(pid >= 0);
  f->a[i].pid = pid;
}

/* The exact failure the lease is for: the advisor tiering every partition
 * is a process killed with -9 mid-run (its leases neither renewed nor
 * released). Advisor 1, configured to tier them too, made no move while it
 * ran; it takes the leases within the TTL and a renewal period (plus its
 * catch-up) of the kill, tiers the workers' new blocks, and the shared G4
 * equals its database (what the killed one left half done is its
 * scrub's). Restarted as it was configured, the killed one makes no move
 * beside advisor 1. */
static void a_killed_holders_lease_expires(void **state) {
  fx_t *f = *state;
  listing_t vol;
  char reply[2048];
  const char *any = "SELECT count(*) FROM migrations";
  f->lease_ms = 1000;
  f->g4_blocks = 96;
  adv_spawn(f, 0, "0-3", NULL);
  wait_reply(f, 0, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  adv_start_as(f, 1, "0-3", NULL);
  wait_reply(f, 1, "\"ready\":[0,1,2,3]", reply, sizeof reply);
  for (uint32_t p = 0; p < NPART; p++)
    f->owner[p] = 0;
  new_chains(f, 1);
  uint64_t end = now_ms() + 30000;
  while (now_ms() < end &&
         db_count(f, 0, "SELECT count(*) FROM migrations WHERE state = 'source_deleted'") < 8)
    sleep_ms(100);
  printf("advisor 0 (a process): %lld journal rows; advisor 1: %lld\n", db_count(f, 0, any),
         db_count(f, 1, any));
  assert_true(db_count(f, 0, "SELECT count(*) FROM migrations WHERE state = 'source_deleted'") >=
              8);
  assert_int_equal(db_count(f, 1, any), 0);

  kill(f->a[0].pid, SIGKILL);
  waitpid(f->a[0].pid, NULL, 0);
  f->a[0].pid = 0;
  uint64_t t0 = now_ms();
  wait_reply(f, 1, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  uint64_t took = now_ms() - t0;
  printf("advisor 1 tiers %llu ms after the kill -9 (TTL %lld ms)\n", (unsigned long long)took,
         (long long)f->lease_ms);
  assert_true(took <= (uint64_t)f->lease_ms * 4 / 3 + 3000);
  for (uint32_t p = 0; p < NPART; p++)
    f->owner[p] = 1;
  new_chains(f, 2);
  wait_moves(f, 1, 4, &vol, "advisor 1 after the kill");
  printf("the shared G4 (%zu objects) equals advisor 1's database\n", vol.n);

  /* The killed one restarted, as it was configured: no move beside
   * advisor 1 (its journal keeps the rows of before the kill). */
  old_holder_restarts_idle(f, 1, &vol, reply, sizeof reply);
  assert_non_null(strstr(reply, "\"held\":false,\"holder\":\"advisor adv1"));
  /* What its log says while it waits: a standby of partitions, not an
   * unpartitioned advisor to stop (the holder's value says partitioned). */
  char path[320], line[1024];
  int standby = 0, told_to_stop = 0;
  snprintf(path, sizeof path, "%s/adv0.log", f->dir);
  FILE *lg = fopen(path, "r");
  assert_non_null(lg);
  while (fgets(line, sizeof line, lg) != NULL) {
    standby += strstr(line, "which holds its lease: not tiered here") != NULL;
    if (strstr(line, "this unpartitioned advisor does not tier") != NULL) {
      told_to_stop++;
      printf("restarted advisor 0 logged: %s", line);
    }
  }
  fclose(lg);
  assert_int_equal(told_to_stop, 0);
  assert_true(standby > 0);
}

/* The lease bucket of namespace NS (as the advisors make it), for the
 * test to hold leases as an advisor that then dies would. */
static kvStore *lease_bucket(fx_t *f, natsConnection **nc, jsCtx **js) {
  kvStore *kv = NULL;
  kvConfig kc;
  assert_int_equal(natsConnection_ConnectTo(nc, f->natsd.url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(js, *nc, NULL), NATS_OK);
  kvConfig_Init(&kc);
  kc.Bucket = "kvplane-leases-" NS;
  kc.History = 1;
  kc.TTL = f->lease_ms * 1000000; /* ns */
  kc.StorageType = js_FileStorage;
  assert_int_equal(js_CreateKeyValue(&kv, *js, &kc), NATS_OK);
  return kv;
}

#define GHOST "{\"advisor\":\"ghost\",\"host\":\"elsewhere\",\"pid\":1,\"lease_ms\":1000}"

/* Leases held by an advisor that dies without releasing them (kill -9:
 * the test holds them, renewing them as an advisor does, then stops):
 * advisor 0, configured to tier every partition, moves nothing while they
 * are renewed and says who holds them; once they are no longer renewed it
 * takes them within the TTL (and a renewal period) and tiers. Then the
 * test overwrites partition 0's lease under it: advisor 0's next renewal
 * fails, it stops tiering partition 0 until the key expires, and takes it
 * back. */
static void a_dead_holders_lease_expires(void **state) {
  fx_t *f = *state;
  listing_t vol;
  char reply[2048];
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  uint64_t rev[NPART];
  const char *any = "SELECT count(*) FROM migrations";
  f->lease_ms = 1000;
  kvStore *kv = lease_bucket(f, &nc, &js);
  for (uint32_t p = 0; p < NPART; p++) {
    char key[8];
    snprintf(key, sizeof key, "p%u", p);
    assert_int_equal(kvStore_CreateString(&rev[p], kv, key, GHOST), NATS_OK);
  }
  adv_start_as(f, 0, "0-3", NULL);
  for (uint32_t p = 0; p < NPART; p++)
    f->owner[p] = 0;
  new_chains(f, 1);
  /* The ghost renews for 3 s (every 300 ms): advisor 0 waits. */
  uint64_t t0 = 0;
  for (uint64_t end = now_ms() + 3000; now_ms() < end; sleep_ms(300)) {
    t0 = now_ms(); /* the ghost's last renewal */
    for (uint32_t p = 0; p < NPART; p++) {
      char key[8];
      snprintf(key, sizeof key, "p%u", p);
      assert_int_equal(kvStore_UpdateString(&rev[p], kv, key, GHOST, rev[p]), NATS_OK);
    }
  }
  ask_partitions(f, 0, "{}", reply, sizeof reply);
  printf("while the ghost holds the leases: %s\n", reply);
  assert_int_equal(db_count(f, 0, any), 0);
  assert_non_null(strstr(reply, "\"holder\":\"advisor ghost (host elsewhere, pid 1)\""));
  assert_non_null(strstr(reply, "\"tiering\":[]"));

  /* The ghost dies: its leases expire after the TTL. */
  wait_reply(f, 0, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  uint64_t took = now_ms() - t0;
  printf("advisor 0 tiers %llu ms after the ghost's last renewal (TTL %lld ms)\n",
         (unsigned long long)took, (long long)f->lease_ms);
  assert_true(took >= (uint64_t)f->lease_ms); /* not before the key expired */
  assert_true(took <= (uint64_t)f->lease_ms * 4 / 3 + 3000);
  wait_moves(f, 0, 8, &vol, "advisor 0 tiers after the expiry");
  /* The stats say it too (tiering.leases, leases_held). */
  char *st = stats_of(f);
  assert_non_null(strstr(st, "\"leases_held\":4"));
  assert_non_null(strstr(st, "{\"partition\":0,\"held\":true,\"holder\":\"this advisor\"}"));
  kvp_client_reply_free(st);

  /* Partition 0's lease taken from under it: advisor 0 stops tiering 0. */
  assert_int_equal(kvStore_PutString(&rev[0], kv, "p0", GHOST), NATS_OK);
  wait_reply(f, 0, "\"tiering\":[1,2,3]", reply, sizeof reply);
  printf("lease of partition 0 overwritten: %s\n", reply);
  assert_non_null(strstr(reply, "\"holder\":\"advisor ghost"));
  /* Not renewed by the ghost: advisor 0 takes it back after the TTL. */
  wait_reply(f, 0, "\"tiering\":[0,1,2,3]", reply, sizeof reply);
  kvStore_Destroy(kv);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
}

/* A live rebalance request to advisor i; the reply's JSON text into out.
 * Returns the request's status (out empty unless NATS_OK). */
static natsStatus try_partitions(fx_t *f, int i, const char *body, char *out, size_t outlen) {
  char subj[KVP_SUBJECT_MAX], name[16];
  natsConnection *nc = NULL;
  natsMsg *reply = NULL;
  snprintf(name, sizeof name, "adv%d", i);
  out[0] = '\0';
  assert_int_equal(kvp_subject_api_advisor(subj, sizeof subj, NS, KVP_API_PARTITIONS, name), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, f->natsd.url), NATS_OK);
  natsStatus st = natsConnection_RequestString(&reply, nc, subj, body, 30000);
  if (st == NATS_OK)
    snprintf(out, outlen, "%.*s", natsMsg_GetDataLength(reply), natsMsg_GetData(reply));
  natsMsg_Destroy(reply);
  natsConnection_Destroy(nc);
  return st;
}

static void ask_partitions(fx_t *f, int i, const char *body, char *out, size_t outlen) {
  assert_int_equal(try_partitions(f, i, body, out, outlen), NATS_OK);
}

/* Waits up to 10 s for GET path on port to answer want and, when body is
 * not NULL, to contain it; fails naming the last reply. */
static void wait_http(int port, const char *path, int want, const char *body) {
  char buf[65536];
  int code = -1;
  for (uint64_t end = now_ms() + 10000; now_ms() < end; sleep_ms(100))
    if ((code = kvp_test_http_get(port, path, buf, sizeof buf)) == want &&
        (body == NULL || strstr(buf, body) != NULL))
      return;
  fail_msg("GET %s: %d, wanted %d%s%s; last reply:\n%.2000s", path, code, want,
           body ? " with " : "", body ? body : "", buf);
}

/* Partition 1, tiered by advisor 0, moves live to advisor 1: advisor 1
 * learns its G4 locations from the partition's stream (its advisor
 * worker's events) and tiers it from then on, advisor 0 leaves its
 * objects alone; the shares follow (4 and 12 blocks of 16). */
static void a_tiered_partition_moves_live(void **state) {
  fx_t *f = *state;
  listing_t vol, after;
  char reply[1024];
  adv_start(f, 0);
  adv_start(f, 1);
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p);
  settle(f, &vol, 4, 1, "before the move"); /* the shares are too small: evictions */
  /* Per partition, from /readyz?partition=P and the gauges: advisor 1
   * answers for 2 and 3, tiers them, and does not own 1 (yet). */
  wait_http(f->mport[1], "/readyz?partition=2", 200, NULL);
  wait_http(f->mport[1], "/readyz?partition=1", 404, "partition 1 is not owned by this advisor");
  wait_http(f->mport[1], "/readyz?partition=9", 400, NULL);
  wait_http(f->mport[1], "/metrics", 200,
            "kvplane_partition_tiered{partition=\"2\"} 1\n"
            "kvplane_partition_tiered{partition=\"3\"} 1\n");
  size_t p1 = 0;
  for (size_t k = 0; k < vol.n; k++)
    p1 += vol.o[k].part == 1;
  assert_true(p1 > 0);

  ask_partitions(f, 1, "{\"add\": [1]}", reply, sizeof reply);
  assert_null(strstr(reply, "error"));
  uint64_t end = now_ms() + 30000;
  while (strstr(reply, "\"catching_up\":[]") == NULL && now_ms() < end) {
    sleep_ms(100);
    ask_partitions(f, 1, "{}", reply, sizeof reply);
  }
  assert_non_null(strstr(reply, "\"ready\":[1,2,3]"));
  wait_http(f->mport[1], "/readyz?partition=1", 200, NULL);
  wait_http(f->mport[1], "/metrics", 200, "kvplane_partition_ready{partition=\"1\"} 1\n");
  ask_partitions(f, 0, "{\"drop\": [1]}", reply, sizeof reply);
  assert_non_null(strstr(reply, "\"owned\":[0]"));
  wait_http(f->mport[0], "/readyz?partition=1", 404, NULL);
  wait_http(f->mport[1], "/metrics", 200, "kvplane_partition_tiered{partition=\"1\"} 1\n");
  f->owner[1] = 1;

  /* Settled again: every object of the volume is in one database, the one
   * of its partition's advisor now, and nothing was taken for an orphan. */
  settle(f, &after, 1, 1, "after the move");
  printf("live move: partition 1's %zu objects in G4 before; after, %zu objects of advisor 0, "
         "%zu of advisor 1\n",
         p1, objects_of(f, &after, 0), objects_of(f, &after, 1));
  assert_true(objects_of(f, &after, 0) <= G4_BLOCKS / 4);
  assert_true(objects_of(f, &after, 1) <= 3 * G4_BLOCKS / 4);
  for (int i = 0; i < 2; i++)
    assert_int_equal(db_count(f, i,
                              "SELECT count(*) FROM migrations WHERE state IN "
                              "('orphan_deleted', 'adopted')"),
                     0);
  /* Advisor 0 holds no row of partition 1 any more (one transaction). */
  assert_int_equal(db_count(f, 0,
                            "SELECT count(*) FROM block_locations l JOIN workers w USING "
                            "(worker) WHERE w.worker LIKE '_advisor-p1-%'"),
                   0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(two_advisors_tier_their_partitions_on_one_g4, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_tiered_partition_moves_live, setup, teardown),
      cmocka_unit_test_setup_teardown(controls_reach_every_partitions_advisor, setup, teardown),
      cmocka_unit_test_setup_teardown(a_prefix_delete_takes_every_partitions_continuations, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_standby_takes_over_the_tiering, setup, teardown),
      cmocka_unit_test_setup_teardown(tiering_is_exclusive_by_lease, setup, teardown),
      cmocka_unit_test_setup_teardown(a_dead_holders_lease_expires, setup, teardown),
      cmocka_unit_test_setup_teardown(a_killed_holders_lease_expires, setup, teardown),
  };
  return kvp_test_run("scale_tier", tests, sizeof tests / sizeof tests[0], argc, argv);
}
