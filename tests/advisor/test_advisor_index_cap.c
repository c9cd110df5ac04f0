/* The index at fleet scale (issue 27): the hard memory cap (the index's
 * eviction walk and the advisor's cap over it), the store's load into a
 * reserved index with its progress, and /readyz and /metrics while the
 * database loads. Real SQLite files and a real HTTP server; no NATS. */
#include <arpa/inet.h>
#include <sqlite3.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "advisor/cap.h"
#include "advisor/metrics.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "store/store.h"

#define NOW 1800000000000ull

static uint16_t wid(kvp__index_t *ix, const char *name) {
  uint16_t id;
  assert_int_equal(kvp__index_worker(ix, name, 0, &id), 0);
  return id;
}

static uint64_t chain_hash(size_t c, size_t i) {
  return (c + 1) * 0x9e3779b97f4a7c15ull + i * 0x100000001b3ull;
}

/* Chain c: 8 blocks in G1 of worker w at second c. */
static void store_chain(kvp__index_t *ix, size_t c, uint16_t w, int tier, uint16_t vol) {
  for (size_t i = 0; i < 8; i++)
    assert_int_equal(kvp__index_store(ix, chain_hash(c, i), i > 0, i ? chain_hash(c, i - 1) : 0, w,
                                      tier, vol, 16, 1 << 20, NOW + c * 1000),
                     0);
}

static uint64_t match_len(kvp__index_t *ix, size_t c, uint16_t w, int tier) {
  uint64_t h[8];
  kvp__index_match_t m[16];
  size_t n = 0;
  for (size_t i = 0; i < 8; i++)
    h[i] = chain_hash(c, i);
  assert_int_equal(kvp__index_match(ix, h, 8, m, 16, &n), 0);
  for (size_t i = 0; i < n; i++)
    if (m[i].worker == w && m[i].tier == tier)
      return m[i].length;
  return 0;
}

typedef struct seen_s {
  size_t n, g34;
} seen_t;

static void on_evict(void *ctx, uint64_t hash, uint16_t worker, int tier) {
  seen_t *s = ctx;
  (void)hash;
  (void)worker;
  s->n++;
  s->g34 += tier >= KVP_TIER_G3;
}

/* The walk drops the coldest G1/G2 locations, whole blocks at a time, and
 * never a G3 one; the drops reach the change log as removals. */
static void evict_drops_the_coldest_g1_g2_only(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  uint16_t a = wid(ix, "a"), b = wid(ix, "b"), vol;
  assert_int_equal(kvp__index_volume(ix, "disk", &vol), 0);
  for (size_t c = 0; c < 10; c++) {
    store_chain(ix, c, a, KVP_TIER_G1, 0);
    store_chain(ix, c, b, KVP_TIER_G2, 0);
  }
  store_chain(ix, 0, a, KVP_TIER_G3, vol); /* chain 0 also on disk: G3 */
  kvp__index_changes_t ch;
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  kvp__index_changes_free(&ch);
  seen_t seen = {0};
  /* The 32 coldest G1/G2 locations: chains 0 and 1 (2 x 8 blocks x 2). */
  size_t n = kvp__index_evict(ix, 1u << KVP_TIER_G1 | 1u << KVP_TIER_G2, 32, on_evict, &seen);
  assert_int_equal(n, 32);
  assert_int_equal(seen.n, 32);
  assert_int_equal(seen.g34, 0);
  assert_int_equal(match_len(ix, 0, a, KVP_TIER_G1), 0);
  assert_int_equal(match_len(ix, 1, b, KVP_TIER_G2), 0);
  assert_int_equal(match_len(ix, 0, a, KVP_TIER_G3), 8); /* G3 stays */
  for (size_t c = 2; c < 10; c++) {
    assert_int_equal(match_len(ix, c, a, KVP_TIER_G1), 8);
    assert_int_equal(match_len(ix, c, b, KVP_TIER_G2), 8);
  }
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 72); /* chain 1's blocks are gone, chain 0's stay in G3 */
  assert_int_equal(st.locations, 8 * 8 * 2 + 8);
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  assert_int_equal(ch.ngone, 32);
  kvp__index_changes_free(&ch);
  kvp__index_destroy(ix);
}

/* Filled far past [index] max_memory: after every batch the index is under
 * its cap (what it needs and what it allocated), the newest chains answer
 * whole, G3 is never touched, and the drops are counted. */
static void cap_holds_the_bound_and_queries_stay_correct(void **state) {
  (void)state;
  const uint64_t max_memory = 256 << 10;
  kvp__index_t *ix = NULL;
  kvp__adv_cap_t cap;
  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__adv_cap_init(&cap, ix, max_memory, 0), 0);
  uint16_t a = wid(ix, "a"), b = wid(ix, "b"), vol;
  assert_int_equal(kvp__index_volume(ix, "disk", &vol), 0);
  kvp__index_track_dirty(ix, 0); /* as between flushes */
  size_t chains = 2000, g3 = 0;
  for (size_t c = 0; c < chains; c++) {
    store_chain(ix, c, c % 2 ? a : b, KVP_TIER_G1, 0);
    if (c % 100 == 0) {
      store_chain(ix, c, a, KVP_TIER_G3, vol);
      g3 += 8;
    }
    kvp__adv_cap_check(&cap, ix);
    kvp__index_stats_t st;
    kvp__index_stats(ix, &st);
    assert_true(kvp__index_memory_used(ix) <= max_memory);
    assert_true(st.memory_bytes <= max_memory + 4096); /* names and shapes beside */
    assert_true(kvp__adv_cap_headroom_bytes(&cap, ix) >= 0);
    assert_int_equal(st.tier_locations[KVP_TIER_G3], g3);
  }
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  print_message("cap %llu B: %zu blocks, %zu locations kept, %llu dropped in %llu rounds, "
                "%zu B used, %zu B allocated\n",
                (unsigned long long)max_memory, st.blocks, st.locations,
                (unsigned long long)cap.evicted, (unsigned long long)cap.rounds,
                kvp__index_memory_used(ix), st.memory_bytes);
  assert_true(cap.evicted > 0);
  assert_int_equal(st.locations + cap.evicted, chains * 8 + g3);
  assert_int_equal(cap.stuck, 0);
  /* The newest 100 chains are whole; every G3 chain still answers. */
  for (size_t c = chains - 100; c < chains; c++)
    assert_int_equal(match_len(ix, c, c % 2 ? a : b, KVP_TIER_G1), 8);
  for (size_t c = 0; c < chains; c += 100)
    assert_int_equal(match_len(ix, c, a, KVP_TIER_G3), 8);
  /* Whatever G1 answers is right for what remains: the leading blocks the
   * worker still holds (a round may cut a chain stored in one second). */
  size_t held = 0;
  for (size_t c = 0; c < chains; c++) {
    uint16_t w = c % 2 ? a : b;
    uint64_t lead = 0;
    int gap = 0;
    for (size_t i = 0; i < 8; i++) {
      kvp__index_loc_t l[4];
      size_t n = 0, has = 0;
      if (kvp__index_get(ix, chain_hash(c, i), NULL, l, 4, &n) == 0)
        for (size_t k = 0; k < n && k < 4; k++)
          has |= l[k].worker == w && l[k].tier == KVP_TIER_G1;
      held += has;
      if (!has)
        gap = 1;
      else if (!gap)
        lead++;
    }
    assert_int_equal(match_len(ix, c, w, KVP_TIER_G1), lead);
  }
  assert_int_equal(held, st.tier_locations[KVP_TIER_G1]);
  kvp__index_destroy(ix);
}

/* G3 alone past max_locations: nothing of it goes, and the cap says so. */
static void cap_never_drops_g3_g4(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  kvp__adv_cap_t cap;
  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__adv_cap_init(&cap, ix, 0, 40), 0);
  uint16_t a = wid(ix, "a"), vol;
  assert_int_equal(kvp__index_volume(ix, "disk", &vol), 0);
  for (size_t c = 0; c < 10; c++)
    store_chain(ix, c, a, KVP_TIER_G4, vol);
  store_chain(ix, 99, a, KVP_TIER_G1, 0);
  kvp__adv_cap_check(&cap, ix);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.tier_locations[KVP_TIER_G4], 80);
  assert_int_equal(st.tier_locations[KVP_TIER_G1], 0);
  assert_int_equal(cap.evicted, 8);
  assert_int_equal(cap.stuck, 1);
  assert_true(kvp__adv_cap_headroom_locations(&cap, ix) < 0);
  kvp__index_destroy(ix);
}

typedef struct prog_s {
  uint64_t calls, done, total;
} prog_t;

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
  prog_t *p = ctx;
  p->calls++;
  assert_true(done >= p->done && done <= total);
  p->done = done;
  p->total = total;
}

/* A database of 200k blocks with 1-3 locations each (some without a block
 * row, which are skipped as before) loads into the index side by side,
 * with its progress reported to the end. */
static void load_reports_progress_and_keeps_every_row(void **state) {
  (void)state;
  char dir[256], path[300], err[256];
  kvp__index_t *ix = NULL, *back = NULL;
  kvp__store_t *st = NULL;
  const size_t N = 200000;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/advisor.db", dir);
  assert_int_equal(kvp__index_create(N, 3600, &ix), 0);
  uint16_t w[3] = {wid(ix, "a"), wid(ix, "b"), wid(ix, "c")}, vol;
  assert_int_equal(kvp__index_volume(ix, "disk", &vol), 0);
  for (size_t i = 0; i < N; i++) {
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k <= i % 3; k++)
      assert_int_equal(kvp__index_store(ix, h, 0, 0, w[k], k == 2 ? KVP_TIER_G3 : (int)k + 1,
                                        k == 2 ? vol : 0, 16, 4096 + i % 3, NOW),
                       0);
  }
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 42, NULL), 0);
  kvp__store_close(st);
  st = NULL;

  prog_t p = {0};
  uint64_t seq = 0;
  assert_int_equal(kvp__index_create(16, 3600, &back), 0);
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  kvp__store_on_progress(st, on_progress, &p);
  assert_int_equal(kvp__store_load(st, back, NULL, NULL, &seq), 0);
  assert_int_equal(seq, 42);
  assert_true(p.calls >= 3);
  assert_int_equal(p.done, N);
  assert_int_equal(p.total, N);
  kvp__index_stats_t s1, s2;
  kvp__index_stats(ix, &s1);
  kvp__index_stats(back, &s2);
  assert_int_equal(s2.blocks, s1.blocks);
  assert_int_equal(s2.locations, s1.locations);
  for (int t = 1; t <= 4; t++) {
    assert_int_equal(s2.tier_locations[t], s1.tier_locations[t]);
    assert_true(s2.tier_bytes[t] == s1.tier_bytes[t]);
  }
  for (size_t i = 0; i < N; i += 997) {
    kvp__index_loc_t l1[4], l2[4];
    size_t n1 = 0, n2 = 0;
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
    assert_int_equal(kvp__index_get(back, h, NULL, l2, 4, &n2), 0);
    assert_int_equal(kvp__index_get(ix, h, NULL, l1, 4, &n1), 0);
    assert_int_equal(n1, n2);
  }
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp__index_destroy(back);
  unlink(path);
  char p2[320];
  snprintf(p2, sizeof p2, "%s-wal", path);
  unlink(p2);
  snprintf(p2, sizeof p2, "%s-shm", path);
  unlink(p2);
  rmdir(dir);
}

/* One HTTP/1.0 request; returns the status code, the reply in buf. */
static int http(int port, const char *path, char *buf, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
  assert_int_equal(write(fd, req, (size_t)n), n);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0)
    got += (size_t)r;
  buf[got] = '\0';
  close(fd);
  int code = 0;
  assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", &code), 1);
  return code;
}

/* The rows' reader hands them over in batches of 4096 records: a block
 * whose locations span several batches keeps them all, and the rows the
 * load skips (a location without its block, a worker name over 4 KiB)
 * are skipped without losing the rows around them. */
static void load_keeps_a_block_wider_than_a_batch(void **state) {
  (void)state;
  char dir[256], path[300], err[256], p2[320];
  kvp__index_t *ix = NULL, *back = NULL;
  kvp__store_t *st = NULL;
  const size_t W = 5000, CHAIN = 10000;
  const uint64_t wide = 0x5eed5eed5eed5eedull;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/advisor.db", dir);
  assert_int_equal(kvp__index_create(CHAIN + 1, 3600, &ix), 0);
  for (size_t k = 0; k < W; k++) {
    char name[32];
    snprintf(name, sizeof name, "w%zu", k);
    assert_int_equal(kvp__index_store(ix, wide, 0, 0, wid(ix, name), 1, 0, 16, 4096, NOW), 0);
  }
  uint64_t prev = 0;
  for (size_t i = 0; i < CHAIN; i++) {
    uint64_t h = (i + 7) * 0x9e3779b97f4a7c15ull;
    assert_int_equal(kvp__index_store(ix, h, i > 0, prev, wid(ix, "w1"), 2, 0, 16, 4096, NOW), 0);
    prev = h;
  }
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 7, NULL), 0);
  kvp__store_close(st);
  /* Two rows the load skips, by hand: a location of a block that has no
   * row, and one whose worker name is 5000 bytes long. */
  sqlite3 *db = NULL;
  char *longname = malloc(5001);
  memset(longname, 'x', 5000);
  longname[5000] = '\0';
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_stmt *ins = NULL;
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "INSERT INTO block_locations(hash, worker, dp_rank, tier,"
                                      " volume) VALUES(?1, ?2, 0, 1, '')",
                                      -1, &ins, NULL),
                   SQLITE_OK);
  sqlite3_bind_int64(ins, 1, 12345);
  sqlite3_bind_text(ins, 2, "w1", -1, SQLITE_STATIC);
  assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
  sqlite3_reset(ins);
  sqlite3_bind_int64(ins, 1, (sqlite3_int64)wide);
  sqlite3_bind_text(ins, 2, longname, -1, SQLITE_STATIC);
  assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
  sqlite3_finalize(ins);
  sqlite3_close(db);
  free(longname);

  uint64_t seq = 0;
  assert_int_equal(kvp__index_create(16, 3600, &back), 0);
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_load(st, back, NULL, NULL, &seq), 0);
  assert_int_equal(seq, 7);
  assert_false(kvp__store_loaded_snapshot(st));
  kvp__index_stats_t s1, s2;
  kvp__index_stats(ix, &s1);
  kvp__index_stats(back, &s2);
  assert_int_equal(s2.blocks, s1.blocks);
  assert_int_equal(s2.locations, s1.locations);
  kvp__index_loc_t *l = calloc(W + 1, sizeof *l);
  size_t n = 0;
  assert_int_equal(kvp__index_get(back, wide, NULL, l, W + 1, &n), 0);
  assert_int_equal(n, W);
  free(l);
  kvp__index_block_t b;
  assert_int_equal(kvp__index_get(back, (CHAIN + 6) * 0x9e3779b97f4a7c15ull, &b, NULL, 0, NULL), 0);
  assert_true(b.parent == (CHAIN + 5) * 0x9e3779b97f4a7c15ull);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp__index_destroy(back);
  unlink(path);
  snprintf(p2, sizeof p2, "%s-wal", path);
  unlink(p2);
  snprintf(p2, sizeof p2, "%s-shm", path);
  unlink(p2);
  rmdir(dir);
}

/* While the database loads: /readyz 503 with the progress, /metrics
 * answers (no snapshot yet) with ready 0 and the load gauges. */
static void readyz_and_metrics_say_loading_until_loaded(void **state) {
  (void)state;
  kvp_advisor_config_t cfg;
  kvp__adv_metrics_t m;
  char err[256], buf[16384];
  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.metrics_listen, sizeof cfg.metrics_listen, "127.0.0.1:0");
  snprintf(cfg.db_path, sizeof cfg.db_path, "/var/lib/kvplane/advisor.db");
  assert_int_equal(kvp__adv_metrics_start(&m, &cfg, err, sizeof err), 0);
  int port = kvp__metrics_server_port(m.srv);
  assert_int_equal(http(port, "/readyz", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "starting: connecting to NATS"));
  kvp__adv_metrics_load_progress(&m, 65536, 262144);
  assert_int_equal(http(port, "/readyz", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "loading /var/lib/kvplane/advisor.db: 65536 of 262144 blocks (25%)"));
  assert_int_equal(http(port, "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "\nkvplane_advisor_ready 0\n"));
  assert_non_null(strstr(buf, "\nkvplane_advisor_load_blocks 65536\n"));
  assert_non_null(strstr(buf, "\nkvplane_advisor_load_blocks_at_start 262144\n"));
  assert_non_null(strstr(buf, "\nkvplane_advisor_loaded 0\n"));
  kvp__adv_metrics_load_progress(&m, 262144, 262144);
  assert_int_equal(http(port, "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "\nkvplane_advisor_loaded 1\n"));
  /* Loaded but the loop not running yet: still not ready. */
  assert_int_equal(http(port, "/readyz", buf, sizeof buf), 503);
  kvp__adv_metrics_stop(&m);
}

/* A partitioned advisor's figures per owned partition: the gauges, and
 * /readyz?partition=P: 200 caught up, 503 catching up (with the count) or
 * the whole advisor not ready, 404 not owned, 400 not a partition number. */
static void partition_readiness_and_gauges(void **state) {
  (void)state;
  kvp__adv_metrics_snap_t s;
  char why[256];
  memset(&s, 0, sizeof s);
  s.part_count = 8;
  s.nparts = 3;
  s.tiering = 1;
  s.parts[0] = (kvp__adv_part_fig_t){.p = 1, .ready = 1, .tiered = 1, .pos = 41};
  s.parts[1] = (kvp__adv_part_fig_t){.p = 4, .ready = 0, .pos = 7, .behind = 1234};
  s.parts[2] = (kvp__adv_part_fig_t){.p = 6, .ready = 1, .pos = 9};
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, "1", why, sizeof why), 1);
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, "4", why, sizeof why), 0);
  assert_string_equal(why,
                      "partition 4: catching up with its stream, 1234 messages still to apply");
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, "2", why, sizeof why), KVP_ENOENT);
  assert_string_equal(why, "partition 2 is not owned by this advisor (owned: 1,4,6)");
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, "8", why, sizeof why), KVP_EINVAL);
  assert_string_equal(why, "partition: '8' is not a partition number (0..7)");
  const char *bad[] = {"", "-1", "x", "1x", " 1", "99999999999", "+1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, bad[i], why, sizeof why), KVP_EINVAL);
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 0, "1", why, sizeof why), 0);
  s.part_count = 0;
  assert_int_equal(kvp__adv_metrics_partition_ready(&s, 1, "1", why, sizeof why), KVP_ENOENT);
  /* The key that is 0, as the operator writes it (it said [nats] partitions). */
  assert_non_null(strstr(why, "not partitioned ([partitions] count = 0)"));
  s.part_count = 8;

  kvp__prom_t p;
  kvp__prom_init(&p);
  kvp__adv_metrics_write(&s, &p);
  assert_int_equal(p.err, 0);
  assert_non_null(strstr(p.buf, "\nkvplane_partition_ready{partition=\"1\"} 1\n"
                                "kvplane_partition_ready{partition=\"4\"} 0\n"
                                "kvplane_partition_ready{partition=\"6\"} 1\n"));
  assert_non_null(strstr(p.buf, "\nkvplane_partition_behind_messages{partition=\"4\"} 1234\n"));
  assert_non_null(strstr(p.buf, "\nkvplane_partition_applied_sequence{partition=\"1\"} 41\n"));
  assert_non_null(strstr(p.buf, "\nkvplane_partition_tiered{partition=\"1\"} 1\n"
                                "kvplane_partition_tiered{partition=\"4\"} 0\n"));
  kvp__prom_free(&p);

  /* Over HTTP: the advisor as a whole is not ready here (no NATS), so an
   * owned partition is 503 with the advisor's reason; the others say why. */
  kvp_advisor_config_t cfg;
  kvp__adv_metrics_t m;
  char err[256], buf[16384];
  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.metrics_listen, sizeof cfg.metrics_listen, "127.0.0.1:0");
  assert_int_equal(kvp__adv_metrics_start(&m, &cfg, err, sizeof err), 0);
  int port = kvp__metrics_server_port(m.srv);
  assert_int_equal(http(port, "/readyz?partition=1", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "starting: no figures yet"));
  kvp__adv_metrics_publish(&m, &s);
  kvp__adv_metrics_set_phase(&m, KVP__ADV_RUNNING);
  assert_int_equal(http(port, "/readyz?partition=1", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "partition 1: the advisor is not ready: NATS: not connected"));
  assert_int_equal(http(port, "/readyz?partition=4", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "1234 messages still to apply"));
  assert_int_equal(http(port, "/readyz?partition=3", buf, sizeof buf), 404);
  assert_int_equal(http(port, "/readyz?partition=abc", buf, sizeof buf), 400);
  assert_int_equal(http(port, "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "kvplane_partition_ready{partition=\"6\"} 1\n"));
  kvp__adv_metrics_stop(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(evict_drops_the_coldest_g1_g2_only),
    cmocka_unit_test(cap_holds_the_bound_and_queries_stay_correct),
    cmocka_unit_test(cap_never_drops_g3_g4),
    cmocka_unit_test(load_reports_progress_and_keeps_every_row),
    cmocka_unit_test(load_keeps_a_block_wider_than_a_batch),
    cmocka_unit_test(readyz_and_metrics_say_loading_until_loaded),
    cmocka_unit_test(partition_readiness_and_gauges),
};

KVP_TEST_MAIN("advisor_index_cap", tests)
