/* Why this file is long: three cases, but their fixture (three advisors, four
 * workers and their volumes, listings, database and /metrics reads) is
 * most of it.
 *
 * Switching a tiering deployment from unpartitioned to partitioned
 * (docs/SCALE.md, "Switching a tiering deployment to partitions"): what
 * the unpartitioned advisor left under the key namespace <ns> in the
 * volumes is deleted by the partitioned advisor holding the namespace's
 * lease (key "all"), and never while an unpartitioned tiering advisor
 * still holds it.
 *
 * Real parts: a nats-server with JetStream (first without the partition
 * mapping, as an unpartitioned deployment runs, then restarted on the
 * same store with it), real advisors (in this process, each on its own
 * loop) over real posix volumes (a G3 per worker, one shared G4):
 *   1. an unpartitioned tiering advisor demotes the blocks of workers w0
 *      and w2 from their G3s into G4, objects under "t" (and leaves some
 *      in the G3s);
 *   2. the server gets the mapping; two partitioned advisors (2 of 4
 *      partitions each, each with its partitions' workers' G3s: w0's is
 *      only advisor 0's, w2's only advisor 1's) start while the
 *      unpartitioned one still runs and holds "all": they tier their own
 *      workers' blocks (objects under "t-p<P>") and delete nothing of
 *      "t" over many scrub passes;
 *   3. the unpartitioned advisor stops (its lease released): one
 *      partitioned advisor takes "all" and its scrub deletes every "t"
 *      object of its volumes, then hands "all" on to the other, which
 *      deletes those of its own: no file left in any volume's "t"
 *      directory; each advisor deleted some, and their counters sum to
 *      what was there, objects and bytes; every "t-p<P>" object is still
 *      there, and the shared G4 equals what the partitioned advisors'
 *      databases place there.
 * Loopback only; bounded by the waits below. */
#define _GNU_SOURCE
#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/volume.h"
#include "natsd.h"
#include "scale_tier_fx.h"

#define NPART 4
#define NS "t"
#define BLK 1000
#define FR (BLK + KVP_FRAME_HEADER)
#define CHAIN 8
#define G3_BLOCKS 4
#define G4_BLOCKS 64
#define LEASE_MS 1000

/* A listing's objects under "t" itself have part NPART (obj_t). */
typedef struct fx_s {
  char dir[256], conf[320], g4path[320], g3path[NPART][320];
  kvp_natsd_t natsd;
  int natsd_up;
  char w[NPART][16];
  kvp_volume_t *g3[NPART], *g4;
  adv_t u;    /* the unpartitioned advisor */
  adv_t a[2]; /* the partitioned ones: partitions 0-1 and 2-3 */
} fx_t;

/* An advisor named consumer: partitioned (owning owned of NPART) or not
 * (owned NULL), with the G3 volumes of workers g3a and g3b (as an advisor
 * is configured with its partitions' workers' G3s) and the shared G4, a
 * scrub pass every 100 ms and 1 s leases. */
static void adv_start(fx_t *f, adv_t *a, const char *consumer, const char *owned, int g3a,
                      int g3b) {
  kvp_advisor_config_t *c = &a->cfg;
  char dir[256], url[64], err[512];
  kvp_advisor_config_defaults(c);
  memcpy(dir, f->dir, sizeof dir); /* copies: gcc sees the fixture's fields overlap */
  memcpy(url, f->natsd.url, sizeof url);
  snprintf(c->db_path, sizeof c->db_path, "%s/%s.db", dir, consumer);
  snprintf(c->nats.servers, sizeof c->nats.servers, "%s", url);
  snprintf(c->ns, sizeof c->ns, NS);
  snprintf(c->consumer, sizeof c->consumer, "%s", consumer);
  if (owned != NULL) {
    snprintf(c->owned, sizeof c->owned, "%s", owned);
    c->partitions = NPART;
  }
  snprintf(c->plugin_dir, sizeof c->plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  c->mode = KVP_ADVISOR_JETSTREAM;
  a->mport = kvp_test_free_port();
  snprintf(c->metrics_listen, sizeof c->metrics_listen, "127.0.0.1:%d", a->mport);
  c->flush_interval_ms = 50;
  c->heartbeat_timeout_ms = 0;
  c->log_level = 1;
  c->tiering = 1;
  c->tier_interval_ms = 100;
  c->tier_residence_ms = 0;
  c->tier_grace_ms = 0;
  c->tier_scrub_ms = a->no_scrub ? 0 : 100;
  c->tier_high = 0.9;
  c->tier_low = 0.5;
  c->tier_lease_ms = LEASE_MS;
  for (int p = 0; p < NPART; p++) {
    char name[16];
    if (p != g3a && p != g3b)
      continue;
    snprintf(name, sizeof name, "g3w%d", p);
    add_volume(c, name, 3, f->g3path[p], G3_BLOCKS * FR);
  }
  if (!a->no_g4)
    add_volume(c, "g4", 4, f->g4path, (int64_t)G4_BLOCKS * FR);
  if (kvp_advisor_open(c, &a->adv, err, sizeof err) != 0)
    fail_msg("advisor %s: %s", consumer, err);
  assert_int_equal(pthread_create(&a->thread, NULL, run_main, a), 0);
  a->running = 1;
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
  /* An unpartitioned deployment's server: no mapping (yet). */
  kvp_natsd_opts_t o = {.jetstream = 1};
  if (kvp_natsd_start(&f->natsd, &o) != 0)
    return -1;
  f->natsd_up = 1;
  snprintf(f->g4path, sizeof f->g4path, "%s/g4", f->dir);
  kvp_volume_param_t p4[2] = {{"path", f->g4path}, {"fsync", "off"}};
  if (kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", NS, p4, 2, &f->g4, err, sizeof err) !=
      0)
    return -1;
  for (uint32_t p = 0, i = 0; p < NPART; i++) {
    snprintf(f->w[p], sizeof f->w[p], "w%u", i);
    if (kvp_partition_of(f->w[p], NPART) != p)
      continue;
    char name[16], dir[256];
    snprintf(name, sizeof name, "g3w%u", p);
    memcpy(dir, f->dir, sizeof dir);
    snprintf(f->g3path[p], sizeof f->g3path[p], "%s/g3w%u", dir, p);
    kvp_volume_param_t p3[2] = {{"path", f->g3path[p]}, {"fsync", "off"}};
    if (kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", name, NS, p3, 2, &f->g3[p], err,
                           sizeof err) != 0)
      return -1;
    p++;
  }
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  adv_stop(&f->u);
  for (int i = 0; i < 2; i++)
    adv_stop(&f->a[i]);
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

/* Worker p offloads a chain of CHAIN blocks (hashes from base) into its
 * G3, under key namespace ns, and says so on the stream: unpartitioned
 * (partitions 0: "t", the events on the namespace's one stream) or as a
 * partitioned deployment's worker ("t-p<P>", the partition's stream). */
static void worker_offloads(fx_t *f, uint32_t p, uint32_t partitions, uint64_t base) {
  char ns[KVP_PARTITION_NS_MAX + 1], vol[16];
  uint64_t h[CHAIN];
  if (partitions > 0)
    assert_int_equal(kvp_partition_volume_ns(ns, sizeof ns, NS, p), 0);
  else
    snprintf(ns, sizeof ns, NS);
  for (int k = 0; k < CHAIN; k++)
    h[k] = base + (uint64_t)k;
  snprintf(vol, sizeof vol, "g3w%u", p);
  offload_chain(f->natsd.url, NS, f->g3[p], f->w[p], vol, ns, partitions, h, CHAIN, BLK);
}

static int on_key(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  listing_t *l = ctx;
  unsigned p;
  char tail;
  if (strcmp(ns, NS) == 0)
    p = NPART;
  else if (sscanf(ns, NS "-p%u%c", &p, &tail) != 1 || p >= NPART)
    fail_msg("an object under key namespace %s", ns);
  if (l->n < MAXOBJ)
    l->o[l->n++] = (obj_t){p, hash, bytes};
  return 0;
}

/* Every object of v, sorted: the partitions' first, then those under "t". */
static void list_vol(kvp_volume_t *v, listing_t *l) {
  char err[256];
  memset(l, 0, sizeof *l);
  assert_int_equal(kvp_volume_iterate(v, on_key, l, err, sizeof err), 0);
  qsort(l->o, l->n, sizeof *l->o, cmp_obj);
}

/* Of a listing, the objects under "t" (legacy 1) or under the
 * partitions' namespaces (0): count and bytes. */
static size_t count_of(const listing_t *l, int legacy, uint64_t *bytes) {
  size_t n = 0;
  if (bytes)
    *bytes = 0;
  for (size_t k = 0; k < l->n; k++)
    if ((l->o[k].part == NPART) == legacy) {
      n++;
      if (bytes)
        *bytes += l->o[k].bytes;
    }
  return n;
}

static long long db_count(const adv_t *a, const char *sql) {
  return db_count_at(a->cfg.db_path, sql);
}

/* Appends what advisor a's database places in G4 (partition of the
 * holder, hash) to l. Returns -1 when the database cannot be read. */
static int db_g4(const adv_t *a, listing_t *l) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (sqlite3_open_v2(a->cfg.db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
    goto out;
  sqlite3_busy_timeout(db, 2000);
  if (sqlite3_prepare_v2(db, "SELECT hash, worker FROM block_locations WHERE tier = 4", -1, &s,
                         NULL) != SQLITE_OK)
    goto out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    const char *w = (const char *)sqlite3_column_text(s, 1);
    if (l->n < MAXOBJ)
      l->o[l->n++] = (obj_t){kvp_partition_of(w, NPART), (uint64_t)sqlite3_column_int64(s, 0), 0};
  }
  rc = 0;
out:
  sqlite3_finalize(s);
  sqlite3_close(db);
  return rc;
}

/* The partitions' objects of the shared G4 equal the union of the
 * partitioned advisors' databases (hashes and partitions). */
static int g4_is_partitioned_advisors(fx_t *f, listing_t *vol) {
  listing_t u;
  memset(&u, 0, sizeof u);
  list_vol(f->g4, vol);
  if (db_g4(&f->a[0], &u) != 0 || db_g4(&f->a[1], &u) != 0)
    return 0;
  qsort(u.o, u.n, sizeof *u.o, cmp_obj);
  size_t n = count_of(vol, 0, NULL);
  if (u.n != n)
    return 0;
  for (size_t k = 0; k < n; k++) /* sorted: the partitions' objects first */
    if (u.o[k].part != vol->o[k].part || u.o[k].hash != vol->o[k].hash)
      return 0;
  return 1;
}

/* A sample's value from advisor a's /metrics (-1 when absent). */
static double metric(const adv_t *a, const char *name) {
  static char buf[262144];
  char key[160];
  if (kvp_test_http_get(a->mport, "/metrics", buf, sizeof buf) != 200)
    return -1;
  snprintf(key, sizeof key, "\n%s ", name);
  const char *at = strstr(buf, key);
  return at ? strtod(at + strlen(key), NULL) : -1;
}

/* Waits up to ms for advisor a's sample name to be want. */
static void wait_metric(const adv_t *a, const char *name, double want, int ms, const char *when) {
  double got = -1;
  for (uint64_t end = now_ms() + (uint64_t)ms; now_ms() < end; sleep_ms(100))
    if ((got = metric(a, name)) == want)
      return;
  fail_msg("%s: advisor %s: %s is %g, not %g", when, a->cfg.consumer, name, got, want);
}

static int files;
static int count_file(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)path;
  (void)sb;
  (void)ftw;
  files += type == FTW_F;
  return 0;
}

/* Waits (30 s at most) until the count sql gives on advisor a is at least
 * min and has not changed for 1.5 s; returns it. */
static long long wait_stable(const adv_t *a, const char *sql, long long min) {
  long long last = -1;
  uint64_t since = now_ms(), end = since + 30000;
  while (now_ms() < end) {
    long long n = db_count(a, sql);
    if (n != last) {
      last = n;
      since = now_ms();
    } else if (n >= min && now_ms() - since >= 1500) {
      return n;
    }
    sleep_ms(100);
  }
  fail_msg("advisor %s: %s: %lld, not settled at %lld or more", a->cfg.consumer, sql, last, min);
  return -1;
}

/* Regular files under dir/ns (0 when it does not exist). */
static int files_under(const char *dir, const char *ns) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", dir, ns);
  files = 0;
  if (access(path, F_OK) == 0)
    assert_int_equal(nftw(path, count_file, 16, FTW_PHYS), 0);
  return files;
}

static void partitioned_advisors_delete_what_an_unpartitioned_one_left(void **state) {
  fx_t *f = *state;
  listing_t g4, g3[2], g4p, g3p[2], later;
  uint64_t b4 = 0, b3[2] = {0, 0};
  size_t n3[2];
  const int wk[2] = {0, 2}; /* the workers of the unpartitioned deployment */
  const char *moved = "SELECT count(*) FROM migrations WHERE state = 'source_deleted'";
  const char *done = "SELECT count(*) FROM scrubs WHERE state = 'done'";

  /* 1. Unpartitioned: w0's and w2's chains demoted from their G3s into G4,
   * under "t". */
  adv_start(f, &f->u, "u", NULL, wk[0], wk[1]);
  for (int k = 0; k < 2; k++)
    worker_offloads(f, (uint32_t)wk[k], 0, 0x1000000000000000ull * (uint64_t)(k + 1));
  long long um = wait_stable(&f->u, moved, CHAIN);
  list_vol(f->g4, &g4);
  size_t n4 = count_of(&g4, 1, &b4);
  for (int k = 0; k < 2; k++) {
    list_vol(f->g3[wk[k]], &g3[k]);
    n3[k] = count_of(&g3[k], 1, &b3[k]);
  }
  size_t total = n4 + n3[0] + n3[1];
  uint64_t total_bytes = b4 + b3[0] + b3[1];
  printf("unpartitioned: %zu objects (%llu bytes) under \"t\" in G4, %zu and %zu in w0's and "
         "w2's G3s; %zu objects, %llu bytes in all\n",
         n4, (unsigned long long)b4, n3[0], n3[1], total, (unsigned long long)total_bytes);
  assert_int_equal(n4, um); /* one G4 object per demotion */
  assert_int_equal(total, 2 * CHAIN);
  assert_true(n3[0] > 0 && n3[1] > 0);
  assert_int_equal(files_under(f->g4path, NS), (int)n4);

  /* 2. The deployment is partitioned: the server maps the events to
   * partitions (restarted on its store with the mapping); the
   * unpartitioned advisor runs on and holds the namespace's lease. */
  f->natsd.opts.config = f->conf;
  assert_int_equal(kvp_natsd_restart(&f->natsd), 0);
  sleep_ms(2 * LEASE_MS); /* its lease renewed, or expired and taken again */
  wait_metric(&f->u, "kvplane_tier_leases_held", 1, 15000, "after the server's restart");
  adv_start(f, &f->a[0], "adv0", "0,1", 0, 1);
  adv_start(f, &f->a[1], "adv1", "2,3", 2, 3);
  for (uint32_t p = 0; p < NPART; p++)
    worker_offloads(f, p, NPART, 0x2000000000000000ull * (p + 1));
  /* Each advisor demotes its workers' chains into G4, under "t-p<P>". */
  long long m0 = wait_stable(&f->a[0], moved, CHAIN), m1 = wait_stable(&f->a[1], moved, CHAIN);
  uint64_t end = now_ms() + 10000;
  while (now_ms() < end && !g4_is_partitioned_advisors(f, &g4p))
    sleep_ms(100);
  assert_true(g4_is_partitioned_advisors(f, &g4p));
  assert_int_equal(count_of(&g4p, 0, NULL), m0 + m1);
  /* The unpartitioned advisor's worker, mapped into a partition's stream
   * (its heartbeats, and its answer to a resync), is ignored there: no
   * partitioned index holds its objects under "t". */
  const char *ignored = "kvplane_advisor_skipped_total{cause=\"unpartitioned_advisor\"}";
  assert_true(metric(&f->a[0], ignored) + metric(&f->a[1], ignored) > 0);
  /* Many scrub passes of both over every volume later, while the
   * unpartitioned advisor holds "all": nothing of "t" is gone. */
  long long d0 = db_count(&f->a[0], done), d1 = db_count(&f->a[1], done);
  const long long turns = 5 * 3 * 2; /* 5 turns over 3 volumes and 2 partitions */
  end = now_ms() + 30000;
  while (now_ms() < end &&
         (db_count(&f->a[0], done) < d0 + turns || db_count(&f->a[1], done) < d1 + turns))
    sleep_ms(100);
  assert_true(db_count(&f->a[0], done) >= d0 + turns);
  assert_true(db_count(&f->a[1], done) >= d1 + turns);
  assert_int_equal(metric(&f->u, "kvplane_tier_leases_held"), 1);
  list_vol(f->g4, &later);
  assert_int_equal(count_of(&later, 1, NULL), n4);
  assert_memory_equal(later.o + later.n - n4, g4.o + g4.n - n4, n4 * sizeof *g4.o);
  for (int k = 0; k < 2; k++) {
    list_vol(f->g3[wk[k]], &later);
    assert_int_equal(count_of(&later, 1, NULL), n3[k]);
  }
  for (int i = 0; i < 2; i++) { /* not held, nothing counted (step 3 wants the samples there) */
    assert_true(metric(&f->a[i], "kvplane_tier_namespace_lease_held") != 1);
    assert_true(metric(&f->a[i], "kvplane_tier_legacy_deleted_objects_total") <= 0);
  }
  printf("while the unpartitioned advisor holds the namespace's lease: %lld and %lld scrub "
         "passes of the partitioned advisors, all %zu objects under \"t\" kept\n",
         db_count(&f->a[0], done) - d0, db_count(&f->a[1], done) - d1, total);

  /* 3. The unpartitioned advisor stops (its lease released): the
   * partitioned advisor that takes "all" deletes what is under "t" in its
   * volumes, then hands it on to the other, which deletes the rest (w2's
   * G3 is only advisor 1's, w0's only advisor 0's). */
  for (int k = 0; k < 2; k++)
    list_vol(f->g3[wk[k]], &g3p[k]);
  adv_stop(&f->u);
  uint64_t t0 = now_ms();
  end = t0 + 30000;
  while (now_ms() < end && (files_under(f->g4path, NS) > 0 || files_under(f->g3path[0], NS) > 0 ||
                            files_under(f->g3path[2], NS) > 0))
    sleep_ms(100);
  uint64_t took = now_ms() - t0;
  assert_int_equal(files_under(f->g4path, NS), 0);
  assert_int_equal(files_under(f->g3path[0], NS), 0);
  assert_int_equal(files_under(f->g3path[2], NS), 0);
  /* The counters sum to what was there, each advisor's its share. A pass
   * counts its deletes once it is done, and /metrics shows them at the
   * advisor's next tick: waited for. */
  double objs[2] = {0, 0}, bytes = 0;
  for (end = now_ms() + 10000; now_ms() < end; sleep_ms(100)) {
    for (int i = 0; i < 2; i++)
      objs[i] = metric(&f->a[i], "kvplane_tier_legacy_deleted_objects_total");
    bytes = metric(&f->a[0], "kvplane_tier_legacy_deleted_bytes_total") +
            metric(&f->a[1], "kvplane_tier_legacy_deleted_bytes_total");
    if (objs[0] + objs[1] >= (double)total)
      break;
  }
  printf("the unpartitioned advisor stopped: everything under \"t\" deleted within %llu ms: "
         "%g objects by adv0, %g by adv1, %g bytes\n",
         (unsigned long long)took, objs[0], objs[1], bytes);
  assert_int_equal((long long)(objs[0] + objs[1]), (long long)total);
  assert_int_equal((long long)bytes, (long long)total_bytes);
  assert_true(objs[0] >= (double)n3[0] && objs[1] >= (double)n3[1]);
  /* The partitions' objects are all there: in G4 as before, and the
   * shared G4 is what the databases place there; the G3s as before. */
  assert_true(g4_is_partitioned_advisors(f, &later));
  assert_int_equal(later.n, count_of(&g4p, 0, NULL));
  assert_memory_equal(later.o, g4p.o, later.n * sizeof *later.o);
  for (int k = 0; k < 2; k++) {
    list_vol(f->g3[wk[k]], &later);
    assert_true(later.n > 0);
    assert_int_equal(later.n, count_of(&g3p[k], 0, NULL));
    assert_memory_equal(later.o, g3p[k].o, later.n * sizeof *later.o);
  }
  for (int i = 0; i < 2; i++)
    assert_int_equal(db_count(&f->a[i], "SELECT count(*) FROM migrations WHERE state IN "
                                        "('orphan_deleted', 'adopted')"),
                     0);
  /* The stats say it too (tiering.legacy), here of the first to answer. */
  char *st = NULL;
  stats_reply(f->natsd.url, NS, &st);
  const char *lg = strstr(st, "\"legacy\":{\"namespace\":\"" NS "\",\"held\":");
  if (lg == NULL || strstr(lg, "\"deleted\":") == NULL)
    fail_msg("no tiering.legacy in a partitioned advisor's stats: %.3000s", st);
  printf("stats: %.*s\n", (int)(strchr(lg, '}') ? strchr(lg, '}') - lg + 1 : 0), lg);
  kvp_client_reply_free(st);
}

/* Three objects under "t" in w2's G3 and three in G4, as an unpartitioned
 * deployment leaves them (hashes from base), then the server restarted
 * with the partition mapping. */
static void leave_three_and_map(fx_t *f, uint64_t base) {
  char err[256];
  static uint8_t payload[BLK];
  for (int k = 0; k < 3; k++) {
    kvp_frame_t m = {.hash = base + (uint64_t)k, .payload_len = BLK};
    assert_int_equal(kvp_volume_put_block(f->g3[2], NS, &m, payload, err, sizeof err), 0);
    m.hash += 0x100;
    assert_int_equal(kvp_volume_put_block(f->g4, NS, &m, payload, err, sizeof err), 0);
  }
  f->natsd.opts.config = f->conf;
  assert_int_equal(kvp_natsd_restart(&f->natsd), 0);
}

/* Waits up to 15 s until nothing is left under "t" in G4 and w2's G3;
 * returns the ms waited. */
static unsigned long long wait_w2_and_g4_swept(fx_t *f) {
  uint64_t t0 = now_ms(), end = t0 + 15000;
  while (now_ms() < end && (files_under(f->g4path, NS) > 0 || files_under(f->g3path[2], NS) > 0))
    sleep_ms(100);
  return (unsigned long long)(now_ms() - t0);
}

/* An advisor without scrub ([tiering] scrub_interval = 0) never sweeps
 * its volumes, so it must not hold the namespace's lease: held, it would
 * never hand it on, and the advisor with a scrub would never delete what
 * is left under "t" in its own volumes. Advisor 0 (no scrub) starts first
 * and holds its partitions' leases; advisor 1 (a scrub every 100 ms)
 * deletes the "t" objects of w2's G3 and of G4. */
static void an_advisor_without_scrub_leaves_the_sweep_to_one_with(void **state) {
  fx_t *f = *state;
  leave_three_and_map(f, 0x3000000000000000ull);
  f->a[0].no_scrub = 1;
  adv_start(f, &f->a[0], "adv0", "0,1", 0, 1);
  wait_metric(&f->a[0], "kvplane_tier_leases_held", 2, 15000, "advisor 0 without scrub");
  sleep_ms(2 * LEASE_MS);
  printf("advisor 0 (no scrub) holds its partitions' leases; the namespace's: %g\n",
         metric(&f->a[0], "kvplane_tier_namespace_lease_held"));
  adv_start(f, &f->a[1], "adv1", "2,3", 2, 3);
  unsigned long long waited = wait_w2_and_g4_swept(f);
  printf("advisor 1 (scrub): %d objects left under \"t\" in G4, %d in w2's G3 after %llu ms; "
         "advisor 0 holds the namespace's lease: %g\n",
         files_under(f->g4path, NS), files_under(f->g3path[2], NS), waited,
         metric(&f->a[0], "kvplane_tier_namespace_lease_held"));
  assert_int_equal(files_under(f->g4path, NS), 0);
  assert_int_equal(files_under(f->g3path[2], NS), 0);
  assert_true(metric(&f->a[0], "kvplane_tier_namespace_lease_held") != 1);
}

/* An advisor that holds the namespace's lease while none of its volumes is
 * online cannot sweep anything: it hands the lease on as if swept (and
 * takes it again after its rest), so the advisors whose volumes are online
 * sweep them. Advisor 0 owns partitions 0 and 1 with w0's and w1's G3 and
 * no G4; their identity markers go (a dropped mount: offline), and after 5
 * TTLs advisor 0 has had the lease to itself for a while; advisor 1 then
 * deletes the "t" objects of w2's G3 and of G4. Before the fix advisor 0
 * kept the lease and advisor 1 deleted nothing. */
static void a_holder_with_no_volume_online_hands_the_namespace_on(void **state) {
  fx_t *f = *state;
  char from[400], to[400];
  leave_three_and_map(f, 0x5000000000000000ull);
  f->a[0].no_g4 = 1;
  adv_start(f, &f->a[0], "adv0", "0,1", 0, 1);
  wait_metric(&f->a[0], "kvplane_tier_leases_held", 2, 15000, "advisor 0");
  for (int p = 0; p < 2; p++) {
    snprintf(from, sizeof from, "%s/.kvplane-volume", f->g3path[p]);
    snprintf(to, sizeof to, "%s/.kvplane-volume.gone", f->g3path[p]);
    assert_int_equal(rename(from, to), 0);
  }
  sleep_ms(5 * LEASE_MS);
  printf("advisor 0, every volume offline for 5 TTLs, holds the namespace's lease: %g\n",
         metric(&f->a[0], "kvplane_tier_namespace_lease_held"));
  adv_start(f, &f->a[1], "adv1", "2,3", 2, 3);
  unsigned long long waited = wait_w2_and_g4_swept(f);
  printf("advisor 1: %d objects left under \"t\" in G4, %d in w2's G3 after %llu ms\n",
         files_under(f->g4path, NS), files_under(f->g3path[2], NS), waited);
  assert_int_equal(files_under(f->g4path, NS), 0);
  assert_int_equal(files_under(f->g3path[2], NS), 0);
  for (int p = 0; p < 2; p++) { /* the mounts come back */
    snprintf(from, sizeof from, "%s/.kvplane-volume.gone", f->g3path[p]);
    snprintf(to, sizeof to, "%s/.kvplane-volume", f->g3path[p]);
    assert_int_equal(rename(from, to), 0);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(partitioned_advisors_delete_what_an_unpartitioned_one_left,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(an_advisor_without_scrub_leaves_the_sweep_to_one_with, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_holder_with_no_volume_online_hands_the_namespace_on, setup,
                                      teardown),
  };
  return kvp_test_run("scale_tier_legacy", tests, sizeof tests / sizeof tests[0], argc, argv);
}
