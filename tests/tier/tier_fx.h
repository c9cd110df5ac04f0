/* The tiering engine tests' fixture (test_tier_engine.c, test_tier_scrub.c):
 * a temporary directory with the advisor's database, an index, a config
 * with a posix G3 of ten 1000-byte blocks and a posix G4, the worker's own
 * handle on G3, and the helpers that seed blocks, run a round to its end
 * and read the database. Included once per test program. */
#ifndef KVP_TESTS_TIER_FX_H
#define KVP_TESTS_TIER_FX_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/volume.h"
#include "store/store.h"
#include "tier/engine.h"

#define NOW_MS 1700000000000ull /* in the past: every block may move */

typedef struct fx_s {
  char dir[256], db[300], p3[300], p4[300];
  uv_loop_t loop;
  kvp__index_t *ix;
  kvp__store_t *st;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;
  kvp_volume_t *g3; /* the worker's own handle on G3 */
  uint16_t w, v3;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char err[256];
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->db, sizeof f->db, "%s/a.db", f->dir);
  snprintf(f->p3, sizeof f->p3, "%s/g3", f->dir);
  snprintf(f->p4, sizeof f->p4, "%s/g4", f->dir);
  uv_loop_init(&f->loop);
  if (kvp__index_create(64, 3600, &f->ix) != 0 ||
      kvp__store_open(f->db, &f->st, err, sizeof err) != 0)
    return -1;
  kvp_advisor_config_defaults(&f->cfg);
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "t");
  snprintf(f->cfg.db_path, sizeof f->cfg.db_path, "%s", f->db);
  snprintf(f->cfg.plugin_dir, sizeof f->cfg.plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  f->cfg.tiering = 1;
  f->cfg.nats.servers[0] = '\0'; /* no publisher, unless a test starts nats-server */
  f->cfg.tier_residence_ms = 0;
  f->cfg.tier_grace_ms = 0;
  f->cfg.nvolumes = 2;
  kvp_advisor_volume_t *g3 = &f->cfg.volumes[0], *g4 = &f->cfg.volumes[1];
  snprintf(g3->name, sizeof g3->name, "g3");
  g3->tier = 3;
  snprintf(g3->plugin, sizeof g3->plugin, "posix");
  g3->capacity = 10 * (1000 + KVP_FRAME_HEADER); /* ten blocks */
  snprintf(g3->params, sizeof g3->params, "path=%s\nfsync=off\n", f->p3);
  snprintf(g4->name, sizeof g4->name, "g4");
  g4->tier = 4;
  snprintf(g4->plugin, sizeof g4->plugin, "posix");
  snprintf(g4->params, sizeof g4->params, "path=%s\nfsync=off\n", f->p4);
  kvp_volume_param_t p[2] = {{"path", f->p3}, {"fsync", "off"}};
  if (kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3", p, 2, &f->g3, err, sizeof err) != 0)
    return -1;
  if (kvp__index_worker(f->ix, "w", 0, &f->w) != 0 || kvp__index_volume(f->ix, "g3", &f->v3) != 0)
    return -1;
  return 0;
}

/* An engine a test registers here is closed by teardown if the test failed
 * with it open (its handles would keep the loop below running forever). */
static kvp__tier_engine_t *fx_engine;

static int teardown(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_close(fx_engine);
  fx_engine = NULL;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  kvp_volume_close(f->g3);
  kvp__store_close(f->st);
  kvp__index_destroy(f->ix);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* The worker put blocks 1..n (a chain: i's parent is i - 1) in G3 and the
 * index knows them there; block i was last accessed at NOW + i s. */
static inline void seed(fx_t *f, int n) {
  uint8_t payload[1000];
  char err[256];
  for (int i = 1; i <= n; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = i > 1,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(f->g3, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, (uint64_t)i, i > 1, (uint64_t)i - 1, f->w, 3, f->v3,
                                      16, sizeof payload + KVP_FRAME_HEADER,
                                      NOW_MS + (uint64_t)i * 1000),
                     0);
  }
}

static inline void round_and_wait(fx_t *f, kvp__tier_engine_t *e) {
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(&f->loop, UV_RUN_ONCE);
}

static inline int64_t q1(const char *db, const char *sql) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open(db, &h) == SQLITE_OK && sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

static inline int locs_in(fx_t *f, uint64_t hash, int tier) {
  kvp__index_loc_t l[8];
  size_t n = 0;
  int k = 0;
  if (kvp__index_get(f->ix, hash, NULL, l, 8, &n) != 0)
    return 0;
  for (size_t i = 0; i < n && i < 8; i++)
    k += l[i].tier == tier;
  return k;
}

#endif
