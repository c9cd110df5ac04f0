/* Block manager with G3 and G4 volumes (real posix volumes in a temp
 * directory): G2 victims offloaded to G3 off the scheduler thread and
 * announced only once put, onboarding from G3 and G4 with their bytes and
 * Accessed events, a block deleted or corrupted behind the manager's back
 * is a miss (never served, never a crash), failed puts counted, snapshots
 * and reset include G3. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

#define PS 4 /* tokens per block */

/* A thread-safe recording sink: the offload workers emit too. */
typedef struct ev_s {
  int type, tier;
  char volume[32];
  uint64_t hash; /* the first */
  size_t n;
} ev_t;

typedef struct rec_s {
  pthread_mutex_t mu;
  ev_t ev[4096];
  size_t n;
} rec_t;

static int rec_emit(void *ctx, const kvp_event_t *e) {
  rec_t *r = ctx;
  pthread_mutex_lock(&r->mu);
  if (r->n < 4096)
    r->ev[r->n++] = (ev_t){e->type, e->tier, "", e->nhashes ? e->hashes[0] : 0, e->nhashes};
  if (e->volume)
    snprintf(r->ev[r->n - 1].volume, sizeof r->ev[0].volume, "%s", e->volume);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

/* Events of type in tier naming hash, counted. */
static int rec_count(rec_t *r, int type, int tier, uint64_t hash, const char *volume) {
  int k = 0;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n; i++)
    if (r->ev[i].type == type && r->ev[i].tier == tier && r->ev[i].hash == hash &&
        (volume == NULL || strcmp(r->ev[i].volume, volume) == 0))
      k++;
  pthread_mutex_unlock(&r->mu);
  return k;
}

typedef struct fx_s {
  char dir[256], p3[300], p4[300];
  kvp_volume_t *g3, *g4;
  kvp_blockmgr_t *bm;
  rec_t rec;
  uint32_t g3_min_hits; /* the G3 admission filter make() sets */
} fx_t;

static kvp_volume_t *open_vol(const char *path, const char *name, const char *capacity) {
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[3] = {{"path", path}, {"fsync", "off"}, {"capacity", capacity}};
  if (kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", name, p, capacity ? 3 : 2, &v, err,
                      sizeof err) != 0)
    print_error("%s\n", err);
  return v;
}

static kvp_layout_t layout(void) {
  return (kvp_layout_t){.num_layers = 2, .page_size = PS, .inner_dim = 8, .elem_size = 2};
}

static int make(fx_t *f, const char *g3cap, int with_g4) {
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_opts_init(&o);
  o.layout = layout();
  o.g1_blocks = 2;
  o.g2_blocks = 2;
  o.sink = (kvp_event_sink_t){rec_emit, &f->rec};
  f->g3 = open_vol(f->p3, "nvme0", g3cap);
  if (with_g4)
    f->g4 = open_vol(f->p4, "shared", NULL);
  o.g3 = f->g3;
  o.g4 = f->g4;
  o.volume_ns = "test";
  o.g3_min_hits = f->g3_min_hits;
  return f->g3 && (!with_g4 || f->g4) ? kvp_blockmgr_create(&o, &f->bm) : -1;
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  pthread_mutex_init(&f->rec.mu, NULL);
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->p3, sizeof f->p3, "%s/g3", f->dir);
  snprintf(f->p4, sizeof f->p4, "%s/g4", f->dir);
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_destroy(f->bm);
  kvp_volume_close(f->g3);
  kvp_volume_close(f->g4);
  kvp_test_rmtree(f->dir);
  pthread_mutex_destroy(&f->rec.mu);
  free(f);
  return 0;
}

/* A one-block sequence of tokens base..base+3; the engine writes a pattern
 * of its own into the block's bytes (or checks it, on a prefix hit). Returns
 * 1 when the block was a prefix hit with the right bytes, 0 when computed. */
static int run_block(fx_t *f, uint32_t base) {
  uint32_t t[PS];
  kvp_seq_t *s = NULL;
  for (int i = 0; i < PS; i++)
    t[i] = base + (uint32_t)i;
  assert_int_equal(kvp_seq_create(f->bm, t, PS, NULL, 0, &s), 0);
  assert_int_equal(kvp_seq_allocate(s), 0);
  size_t nb;
  const uint32_t *blocks = kvp_seq_blocks(s, &nb);
  uint8_t *kv = kvp_pool_block_layer(kvp_blockmgr_pool(f->bm, KVP_TIER_G1), blocks[0], 0);
  size_t bytes = kvp_layout_block_stride(&(kvp_layout_t){2, PS, 8, 2, 64});
  int hit = kvp_seq_cached_tokens(s) == PS;
  for (size_t i = 0; i < bytes; i++) {
    uint8_t want = (uint8_t)(base * 7 + i);
    if (hit)
      assert_int_equal(kv[i], want);
    else
      kv[i] = want;
  }
  kvp_seq_free(s);
  return hit;
}

static uint64_t hash_of(uint32_t base) {
  uint32_t t[PS];
  uint64_t h;
  for (int i = 0; i < PS; i++)
    t[i] = base + (uint32_t)i;
  kvp_hash_sequence(t, PS, PS, kvp_hash_seed(NULL), &h, 1);
  return h;
}

static void victims_go_to_g3_and_come_back(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  assert_int_equal(make(f, NULL, 0), 0);

  /* Eight blocks through G1 (2) and G2 (2): the first four leave G2. */
  for (uint32_t b = 0; b < 8; b++)
    assert_int_equal(run_block(f, 100 * b), 0);
  kvp_blockmgr_drain(f->bm);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.offloads_g3, 4);
  assert_int_equal(st.g3_blocks, 4);
  assert_int_equal(st.offloads_g3_failed, 0);
  for (uint32_t b = 0; b < 4; b++) {
    assert_int_equal(rec_count(&f->rec, KVP_EV_STORED, KVP_TIER_G3, hash_of(100 * b), "nvme0"), 1);
    assert_int_equal(rec_count(&f->rec, KVP_EV_REMOVED, KVP_TIER_G2, hash_of(100 * b), NULL), 1);
  }
  /* Snapshot of G3: this manager's four. */
  uint64_t *h, *p;
  size_t n;
  assert_int_equal(kvp_blockmgr_snapshot(f->bm, KVP_TIER_G3, &h, &p, &n), 0);
  assert_int_equal(n, 4);
  free(h);
  free(p);
  /* Block 1 again: found only in G3, read with its bytes (run_block checks
   * them), announced Accessed in G3 and Stored in G1. */
  assert_int_equal(run_block(f, 100), 1);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.hits_g3, 1);
  assert_int_equal(rec_count(&f->rec, KVP_EV_ACCESSED, KVP_TIER_G3, hash_of(100), "nvme0"), 1);
  assert_int_equal(rec_count(&f->rec, KVP_EV_STORED, KVP_TIER_G1, hash_of(100), NULL), 2);
}

static void g3_gone_or_corrupt_is_a_miss(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  char err[256], path[512];
  assert_int_equal(make(f, NULL, 0), 0);
  for (uint32_t b = 0; b < 8; b++)
    run_block(f, 100 * b);
  kvp_blockmgr_drain(f->bm);
  /* Deleted behind the manager's back (the advisor moved it). */
  assert_int_equal(kvp_volume_delete(f->g3, "test", hash_of(0), err, sizeof err), 0);
  assert_int_equal(run_block(f, 0), 0); /* computed again */
  /* A flipped bit on disk. */
  uint64_t h = hash_of(200);
  snprintf(path, sizeof path, "%s/test/%02x/%016llx", f->p3, (unsigned)(h >> 56),
           (unsigned long long)h);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint8_t byte;
  assert_int_equal(pread(fd, &byte, 1, KVP_FRAME_HEADER + 5), 1);
  byte ^= 1;
  assert_int_equal(pwrite(fd, &byte, 1, KVP_FRAME_HEADER + 5), 1);
  close(fd);
  assert_int_equal(run_block(f, 200), 0); /* not served: computed again */
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.lower_gone, 1);
  assert_int_equal(st.lower_corrupt, 1);
  assert_int_equal(st.hits_g3, 0);
}

static void g4_is_read_after_g3(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  char err[256];
  assert_int_equal(make(f, NULL, 1), 0);
  /* The advisor put block 5 (base 500) in the shared G4 volume. */
  size_t bytes = kvp_layout_block_stride(&(kvp_layout_t){2, PS, 8, 2, 64});
  uint8_t *payload = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(500 * 7 + i);
  kvp_frame_t m = {.hash = hash_of(500), .layout = layout(), .payload_len = bytes};
  assert_int_equal(kvp_volume_put_block(f->g4, "test", &m, payload, err, sizeof err), 0);
  free(payload);
  assert_int_equal(run_block(f, 500), 1);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.hits_g4, 1);
  assert_int_equal(rec_count(&f->rec, KVP_EV_ACCESSED, KVP_TIER_G4, hash_of(500), "shared"), 1);
}

/* The advisor promoted block 6 (base 600) from G4 to the G3 volume and
 * deleted the G4 copy after the grace period: this manager never put it
 * there, and still reads it from G3 (before, it looked in G3 only for its
 * own blocks, and recomputed the block). */
static void block_promoted_to_g3_is_read_there(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  char err[256];
  assert_int_equal(make(f, NULL, 1), 0);
  size_t bytes = kvp_layout_block_stride(&(kvp_layout_t){2, PS, 8, 2, 64});
  uint8_t *payload = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(600 * 7 + i);
  kvp_frame_t m = {.hash = hash_of(600), .layout = layout(), .payload_len = bytes};
  assert_int_equal(kvp_volume_put_block(f->g3, "test", &m, payload, err, sizeof err), 0);
  free(payload);
  assert_int_equal(run_block(f, 600), 1);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.hits_g3, 1);
  assert_int_equal(st.hits_g4, 0);
  assert_int_equal(rec_count(&f->rec, KVP_EV_ACCESSED, KVP_TIER_G3, hash_of(600), "nvme0"), 1);
}

/* G3 admission after one hit (g3_min_hits 1, kvp-bench policy's
 * admission1): blocks used once are not offloaded; a block read back from
 * G4 was a hit, so when it leaves G2 again it goes to G3. */
static void admission_counts_a_lower_tier_hit(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  char err[256];
  f->g3_min_hits = 1;
  assert_int_equal(make(f, NULL, 1), 0);
  for (uint32_t b = 0; b < 8; b++)
    assert_int_equal(run_block(f, 100 * b), 0);
  kvp_blockmgr_drain(f->bm);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.offloads_g3, 0); /* each used once */
  size_t bytes = kvp_layout_block_stride(&(kvp_layout_t){2, PS, 8, 2, 64});
  uint8_t *payload = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(500 * 7 + i);
  kvp_frame_t m = {.hash = hash_of(500), .layout = layout(), .payload_len = bytes};
  assert_int_equal(kvp_volume_put_block(f->g4, "test", &m, payload, err, sizeof err), 0);
  free(payload);
  assert_int_equal(run_block(f, 500), 1); /* from G4 */
  for (uint32_t b = 10; b < 14; b++)      /* push it through G1 and G2 */
    assert_int_equal(run_block(f, 100 * b), 0);
  kvp_blockmgr_drain(f->bm);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.offloads_g3, 1);
  assert_int_equal(rec_count(&f->rec, KVP_EV_STORED, KVP_TIER_G3, hash_of(500), "nvme0"), 1);
}

static void failed_puts_lose_only_the_copy(void **state) {
  fx_t *f = *state;
  kvp_blockmgr_stats_t st;
  /* Room for one framed block (128 + 64 bytes) only. */
  assert_int_equal(make(f, "200", 0), 0);
  for (uint32_t b = 0; b < 8; b++)
    run_block(f, 100 * b);
  kvp_blockmgr_drain(f->bm);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.offloads_g3, 1);
  /* The puts that would pass G3's capacity are skipped, not tried: the
   * volume never goes past it. */
  assert_int_equal(st.offloads_g3_full, 3);
  assert_int_equal(st.offloads_g3_failed, 0);
  assert_int_equal(st.g3_blocks, 1);
  /* Only the one put is announced. */
  int stored = 0;
  for (uint32_t b = 0; b < 4; b++)
    stored += rec_count(&f->rec, KVP_EV_STORED, KVP_TIER_G3, hash_of(100 * b), NULL);
  assert_int_equal(stored, 1);
  {
    kvp_volume_stat_t vs0;
    char err0[256];
    assert_int_equal(kvp_volume_stat(f->g3, &vs0, err0, sizeof err0), 0);
    assert_true(vs0.used <= 200);
  }
  /* Reset deletes what this manager put in G3. */
  assert_int_equal(kvp_blockmgr_reset(f->bm), 0);
  kvp_volume_stat_t vs;
  char err[256];
  assert_int_equal(kvp_volume_stat(f->g3, &vs, err, sizeof err), 0);
  assert_int_equal(vs.blocks, 0);
  kvp_blockmgr_stats(f->bm, &st);
  assert_int_equal(st.g3_blocks, 0);
}

static int dev_alloc(void *ctx, size_t size, size_t alignment, void **base) {
  (void)ctx;
  *base = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  return *base ? 0 : KVP_ENOMEM;
}
static void dev_free(void *ctx, void *base, size_t size) {
  (void)ctx;
  (void)size;
  free(base);
}
static int dev_copy(void *ctx, void *dst, const kvp_storage_t *src_storage, const void *src,
                    size_t n) {
  (void)ctx;
  (void)src_storage;
  memcpy(dst, src, n);
  return 0;
}

/* Reads from a volume go straight into G1 blocks: a G1 that is not system
 * memory (a GPU) is refused with volumes, accepted without. */
static void g1_elsewhere_is_refused_with_volumes(void **state) {
  fx_t *f = *state;
  static const kvp_storage_ops_t dev = {"device", dev_alloc, dev_free, dev_copy};
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;

  kvp_blockmgr_opts_init(&o);
  o.layout = layout();
  o.g1_blocks = 2;
  o.g1_storage = (kvp_storage_t){&dev, NULL};
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  kvp_blockmgr_drain(bm); /* a no-op without G3 */
  kvp_blockmgr_destroy(bm);
  f->g3 = open_vol(f->p3, "nvme0", NULL);
  o.g3 = f->g3;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_ENOTSUP);
  assert_null(bm);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(victims_go_to_g3_and_come_back, setup, teardown),
    cmocka_unit_test_setup_teardown(g3_gone_or_corrupt_is_a_miss, setup, teardown),
    cmocka_unit_test_setup_teardown(g4_is_read_after_g3, setup, teardown),
    cmocka_unit_test_setup_teardown(block_promoted_to_g3_is_read_there, setup, teardown),
    cmocka_unit_test_setup_teardown(admission_counts_a_lower_tier_hit, setup, teardown),
    cmocka_unit_test_setup_teardown(failed_puts_lose_only_the_copy, setup, teardown),
    cmocka_unit_test_setup_teardown(g1_elsewhere_is_refused_with_volumes, setup, teardown),
};

KVP_TEST_MAIN("block_volumes", tests)
