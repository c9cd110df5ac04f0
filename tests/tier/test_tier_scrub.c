/* The tiering engine's scrub (src/tier/scrub.c) and its parallel moves
 * (engine_job.c), with real posix volumes and the real database: a pass is
 * paced to scrub_files_per_s and scrub_bytes_per_s; a verifying pass finds
 * a flipped byte and the copy is quarantined once; orphans are adopted
 * when their frame is valid and the index wants the block, deleted
 * otherwise, each journaled; passes are rows of the scrubs table that
 * outlive the process; moves into two volumes overlap, never two into
 * one; the time a G3 volume spends above its high watermark is counted
 * round by round. */
#include <fcntl.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvplane/status.h"
#include "tier_fx.h"

/* Flips one payload byte of (ns t, hash) in the posix volume at root. */
static void flip(const char *root, uint64_t hash) {
  char path[512];
  uint8_t c;
  snprintf(path, sizeof path, "%s/t/%02x/%016llx", root, (unsigned)(hash >> 56),
           (unsigned long long)hash);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, &c, 1, KVP_FRAME_HEADER + 10), 1);
  c ^= 0x40;
  assert_int_equal(pwrite(fd, &c, 1, KVP_FRAME_HEADER + 10), 1);
  close(fd);
}

static kvp_volume_t *open_g4(fx_t *f) {
  kvp_volume_t *g4 = NULL;
  char err[256];
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  return g4;
}

static void put(kvp_volume_t *v, uint64_t hash, uint64_t parent, size_t len) {
  static uint8_t payload[1 << 16];
  char err[256];
  memset(payload, (int)hash, len);
  kvp_frame_t m = {.hash = hash, .parent = parent, .has_parent = parent != 0, .payload_len = len};
  assert_int_equal(kvp_volume_put_block(v, "t", &m, payload, err, sizeof err), 0);
}

/* Rounds until the scrub has finished passes passes (or 200 rounds). */
static void scrub_passes(fx_t *f, kvp__tier_engine_t *e, uint64_t passes) {
  kvp__tier_stats_t st;
  for (int i = 0; i < 200; i++) {
    kvp__tier_engine_stats(e, &st);
    if (st.scrubs >= passes)
      break;
    usleep(2000);
    round_and_wait(f, e);
  }
  round_and_wait(f, e); /* the ops the last pass queued */
}

/* 20 objects of 1064 bytes: listing them at 50 files/s takes about 0.4 s;
 * verifying too, 20 more files and 21280 bytes at 10000 bytes/s, about
 * 2.1 s; unlimited, a few ms. */
static void a_pass_keeps_to_its_files_and_bytes_limits(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  f->cfg.volumes[0].capacity = 100 * (1000 + KVP_FRAME_HEADER); /* no move for space */
  seed(f, 20);
  f->cfg.tier_scrub_ms = 1;
  f->cfg.nvolumes = 1;
  f->cfg.tier_scrub_files_per_s = 0;
  f->cfg.tier_scrub_bytes_per_s = 0;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 1);
  kvp__tier_engine_stats(e, &st);
  /* scrub_passes's last round may start one more pass: per pass. */
  assert_int_equal(st.scrub_objects, 20 * st.scrubs);
  uint64_t free_ms = st.scrub_ms / st.scrubs;
  kvp__tier_engine_close(e);

  f->cfg.tier_scrub_files_per_s = 50;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 1);
  kvp__tier_engine_stats(e, &st);
  uint64_t files_ms = st.scrub_ms / st.scrubs;
  kvp__tier_engine_close(e);

  f->cfg.tier_scrub_verify = 1;
  f->cfg.tier_scrub_bytes_per_s = 10000;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 1);
  kvp__tier_engine_stats(e, &st);
  uint64_t bytes_ms = st.scrub_ms / st.scrubs;
  assert_int_equal(st.scrub_verified, 20 * st.scrubs);
  assert_int_equal(st.scrub_verified_bytes, 20 * (1000 + KVP_FRAME_HEADER) * st.scrubs);
  assert_int_equal(st.scrub_corrupt, 0);
  kvp__tier_engine_close(e);
  print_message("pass of 20 objects: %llu ms unlimited, %llu ms at 50 files/s, %llu ms verifying "
                "at 10000 B/s\n",
                (unsigned long long)free_ms, (unsigned long long)files_ms,
                (unsigned long long)bytes_ms);
  assert_true(free_ms < 300);
  assert_true(files_ms >= 380);
  assert_true(bytes_ms >= 2100);
}

/* A volume holds more objects than a pass may list: the pass goes on with
 * those it listed (a listing cut at the cap is no failure) and drops no
 * location, since an object it did not list is not known to be missing;
 * a pass that lists the volume whole drops it. (With the cap a pass
 * failed, "scrub of g3 failed", every time.) */
static void a_pass_past_its_listing_cap_goes_on(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  f->cfg.volumes[0].capacity = 100 * (1000 + KVP_FRAME_HEADER); /* no move for space */
  f->cfg.nvolumes = 1;
  seed(f, 8);
  /* Block 100 is in G3 by the index, with no object there. */
  assert_int_equal(
      kvp__index_store(f->ix, 100, 0, 0, f->w, 3, f->v3, 16, 1000 + KVP_FRAME_HEADER, NOW_MS), 0);
  f->cfg.tier_scrub_ms = 1;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  fx_engine = e;
  kvp__tier_engine_set_scrub_max_keys(e, 4);
  usleep(2000);
  scrub_passes(f, e, 2);
  kvp__tier_engine_stats(e, &st);
  assert_true(st.scrubs >= 2);
  assert_int_equal(st.scrub_objects, 4 * st.scrubs);
  assert_int_equal(locs_in(f, 100, 3), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM scrubs WHERE state = 'failed'"), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM scrubs WHERE state = 'done' AND volume = 'g3'"),
                   (int64_t)st.scrubs);
  /* Listed whole: the missing object's location goes. */
  kvp__tier_engine_set_scrub_max_keys(e, 1000);
  uint64_t before = st.scrubs;
  scrub_passes(f, e, before + 1);
  kvp__tier_engine_stats(e, &st);
  assert_true(st.scrubs > before);
  assert_int_equal(locs_in(f, 100, 3), 0);
  for (uint64_t h = 1; h <= 8; h++)
    assert_int_equal(locs_in(f, h, 3), 1);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
}

/* A verifying pass reads a G3 copy with a flipped byte: the next job
 * quarantines it, once (the file and its location go, one journal row,
 * counted, and lost: it was the block's only copy); later passes find
 * nothing more. The other blocks stay. */
static void a_verifying_pass_quarantines_a_flipped_byte_once(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  seed(f, 5);
  flip(f->p3, 3);
  f->cfg.tier_scrub_ms = 1;
  f->cfg.tier_scrub_verify = 1;
  f->cfg.nvolumes = 1;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 3);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.scrub_corrupt, 1);
  assert_int_equal(st.quarantined, 1);
  assert_int_equal(st.lost, 1);
  assert_int_equal(locs_in(f, 3, 3), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 3), 0);
  for (uint64_t h = 1; h <= 5; h++)
    if (h != 3)
      assert_int_equal(kvp_volume_exists(f->g3, "t", h), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed' AND"
                             " error LIKE 'quarantined: scrub:%'"),
                   1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations"), 1);
  assert_int_equal(q1(f->db, "SELECT max(corrupt) FROM scrubs"), 1);
  assert_int_equal(q1(f->db, "SELECT sum(corrupt) FROM scrubs"), 1);
  kvp__tier_engine_close(e);
}

/* Orphans in G4 (objects no location names), confirmed at two passes: 50,
 * a block a worker holds in G2 with no G3/G4 copy, is adopted (its G4
 * location recorded and a migrations row 'adopted'); 52, the same but with
 * a flipped byte, 2, a block G3 holds already, and 99, a block the index
 * does not know, are deleted, each an 'orphan_deleted' row. */
static void orphans_are_adopted_or_deleted_and_journaled(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  seed(f, 3);
  kvp_volume_t *g4 = open_g4(f);
  put(g4, 50, 0, 1000);
  put(g4, 52, 0, 1000);
  put(g4, 2, 1, 1000);
  put(g4, 99, 0, 1000);
  flip(f->p4, 52);
  assert_int_equal(
      kvp__index_store(f->ix, 50, 0, 0, f->w, 2, 0, 16, 1000 + KVP_FRAME_HEADER, NOW_MS), 0);
  assert_int_equal(
      kvp__index_store(f->ix, 52, 0, 0, f->w, 2, 0, 16, 1000 + KVP_FRAME_HEADER, NOW_MS), 0);
  f->cfg.tier_scrub_ms = 1;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 4); /* g3, g4, g3, g4 */
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.scrub_orphans, 4);
  assert_int_equal(st.orphans_adopted, 1);
  assert_int_equal(st.orphans_deleted, 3);
  assert_int_equal(locs_in(f, 50, 4), 1);
  assert_int_equal(kvp_volume_exists(g4, "t", 50), 1);
  assert_int_equal(locs_in(f, 52, 4), 0);
  for (uint64_t h = 52; h <= 99; h += 47)
    assert_int_equal(kvp_volume_exists(g4, "t", h), 0);
  assert_int_equal(kvp_volume_exists(g4, "t", 2), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 2), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'adopted' AND"
                             " hash = 50 AND from_volume = 'g4'"),
                   1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'orphan_deleted' AND"
                             " from_volume = 'g4' AND to_volume = ''"),
                   3);
  assert_int_equal(q1(f->db, "SELECT sum(orphans_confirmed) FROM scrubs WHERE volume = 'g4'"), 4);
  /* Nothing more: the adopted block is located now. */
  scrub_passes(f, e, 6);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.orphans_adopted + st.orphans_deleted, 4);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations"), 4);
  kvp__tier_engine_close(e);
  kvp_volume_close(g4);
}

/* Passes are rows of the scrubs table: done with their figures, in the
 * scrub_status view; a pass stopped mid-way is 'stopped'; a row left
 * running by a process that died is 'interrupted' at the next open; and
 * the next open goes on with the volume whose last pass is the oldest. */
static void scrub_rows_outlive_the_process(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  seed(f, 5);
  f->cfg.tier_scrub_ms = 1;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 1); /* g3 */
  kvp__tier_engine_close(e);
  assert_int_equal(q1(f->db, "SELECT objects FROM scrub_status WHERE volume = 'g3' AND"
                             " state = 'done'"),
                   5);
  assert_int_equal(q1(f->db, "SELECT passes FROM scrub_status WHERE volume = 'g3'"), 1);
  /* The next process starts with g4 (never scrubbed), then g3. */
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  scrub_passes(f, e, 1);
  kvp__tier_engine_stats(e, &st);
  assert_string_equal(st.scrub_volume, "g4");
  kvp__tier_engine_close(e);
  /* A slow pass (5 files/s) stopped mid-way. */
  f->cfg.tier_scrub_files_per_s = 5;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  usleep(2000);
  kvp__tier_engine_round(e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.scrub_running, 1);
  assert_string_equal(st.scrub_volume, "g3");
  usleep(300000);
  kvp__tier_engine_stats(e, &st); /* the running pass's progress */
  assert_true(st.scrub_progress_objects >= 1 && st.scrub_progress_objects <= 4);
  kvp__tier_engine_stop(e, NULL, NULL);
  assert_false(kvp__tier_engine_busy(e));
  kvp__tier_engine_close(e);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM scrubs WHERE state = 'stopped' AND"
                             " volume = 'g3' AND objects BETWEEN 1 AND 4"),
                   1);
  /* A row a dead process left running. */
  sqlite3 *h = NULL;
  assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
  assert_int_equal(sqlite3_exec(h,
                                "INSERT INTO scrubs(volume, tier, verify, started, updated, state)"
                                " VALUES('g4', 4, 0, 1, 1, 'running')",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(h);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  kvp__tier_engine_close(e);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM scrubs WHERE state = 'interrupted'"), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM scrubs WHERE state = 'running'"), 0);
}

/* One G3 at twice its capacity, two G4 volumes with room: the demotions
 * alternate between the G4s. With max_parallel 2, two moves are in flight
 * at once (one per G4), never two into one volume; with 1, one. Either
 * way no block is lost. */
static void moves_into_two_volumes_overlap_never_two_into_one(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;
  char p4b[320];

  snprintf(p4b, sizeof p4b, "%s/g4b", f->dir);
  f->cfg.nvolumes = 3;
  f->cfg.volumes[0].capacity = 40 * (1000 + KVP_FRAME_HEADER);
  f->cfg.volumes[1].capacity = 1000 * (1000 + KVP_FRAME_HEADER);
  f->cfg.volumes[2] = f->cfg.volumes[1];
  snprintf(f->cfg.volumes[2].name, sizeof f->cfg.volumes[2].name, "g4b");
  snprintf(f->cfg.volumes[2].params, sizeof f->cfg.volumes[2].params, "path=%s\nfsync=off\n", p4b);
  for (int run = 0; run < 2; run++) {
    seed(f, 80); /* fill 2.0: 48 demotions to 0.8 */
    f->cfg.tier_max_parallel = run == 0 ? 2 : 1;
    assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                           &e, err, sizeof err),
                     0);
    round_and_wait(f, e);
    kvp__tier_engine_stats(e, &st);
    print_message("max_parallel %d: %llu demoted, peak %llu in flight, %llu into one volume\n",
                  run == 0 ? 2 : 1, (unsigned long long)st.demoted,
                  (unsigned long long)st.parallel_peak, (unsigned long long)st.lane_peak);
    assert_true(st.demoted >= 40);
    assert_int_equal(st.parallel_peak, run == 0 ? 2 : 1);
    assert_int_equal(st.lane_peak, 1);
    assert_true(q1(f->db, "SELECT count(DISTINCT to_volume) FROM migrations WHERE"
                          " state = 'committed'") == 2);
    kvp__tier_engine_close(e);
    /* Back to G3 for the second run: the G4 copies go. */
    kvp_volume_t *a = open_g4(f), *b = NULL;
    kvp_volume_param_t p[1] = {{"path", p4b}};
    assert_int_equal(
        kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4b", p, 1, &b, err, sizeof err), 0);
    for (uint64_t h = 1; h <= 80; h++) {
      int n = kvp_volume_exists(f->g3, "t", h) + kvp_volume_exists(a, "t", h) +
              kvp_volume_exists(b, "t", h);
      assert_true(n >= 1); /* nothing lost (sources stay until the next round's job) */
      kvp_volume_delete(a, "t", h, err, sizeof err);
      kvp_volume_delete(b, "t", h, err, sizeof err);
    }
    kvp_volume_close(a);
    kvp_volume_close(b);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
    sqlite3_exec(h, "DELETE FROM migrations", NULL, NULL, NULL);
    sqlite3_close(h);
    kvp__index_destroy(f->ix);
    assert_int_equal(kvp__index_create(64, 3600, &f->ix), 0);
    assert_int_equal(kvp__index_worker(f->ix, "w", 0, &f->w), 0);
    assert_int_equal(kvp__index_volume(f->ix, "g3", &f->v3), 0);
  }
}

/* A G3 volume at fill 1.0 with nowhere to demote to (no G4): the rounds
 * count the time it is above the high watermark, from each round that
 * finds it above to the next; once below, the count stops and the longest
 * stretch stays. */
static void time_above_the_high_watermark_is_counted(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_vol_stats_t vs[2];

  seed(f, 10);
  f->cfg.nvolumes = 1;
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  uint64_t t0 = kvp__unix_ms();
  for (int i = 0; i < 4; i++) {
    round_and_wait(f, e);
    usleep(50000);
  }
  round_and_wait(f, e);
  uint64_t t1 = kvp__unix_ms();
  assert_int_equal(kvp__tier_engine_volumes(e, vs, 2), 1);
  print_message("above the high watermark: %llu ms of %llu ms\n",
                (unsigned long long)vs[0].above_high_ms, (unsigned long long)(t1 - t0));
  assert_true(vs[0].above_high_ms >= 200 && vs[0].above_high_ms <= t1 - t0);
  assert_int_equal(vs[0].above_high_max_ms, vs[0].above_high_ms);
  /* Below (the index drops 2 of the 10 blocks): no more time counted. */
  for (uint64_t h = 9; h <= 10; h++)
    assert_int_equal(kvp__index_remove(f->ix, h, f->w, 3, f->v3), 0);
  round_and_wait(f, e); /* counts the stretch up to it, finds it below */
  kvp__tier_engine_volumes(e, vs, 2);
  uint64_t total = vs[0].above_high_ms;
  usleep(50000);
  round_and_wait(f, e);
  kvp__tier_engine_volumes(e, vs, 2);
  assert_int_equal(vs[0].above_high_ms, total);
  assert_int_equal(vs[0].above_high_max_ms, total);
  kvp__tier_engine_close(e);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(a_pass_keeps_to_its_files_and_bytes_limits, setup, teardown),
    cmocka_unit_test_setup_teardown(a_pass_past_its_listing_cap_goes_on, setup, teardown),
    cmocka_unit_test_setup_teardown(a_verifying_pass_quarantines_a_flipped_byte_once, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(orphans_are_adopted_or_deleted_and_journaled, setup, teardown),
    cmocka_unit_test_setup_teardown(scrub_rows_outlive_the_process, setup, teardown),
    cmocka_unit_test_setup_teardown(moves_into_two_volumes_overlap_never_two_into_one, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(time_above_the_high_watermark_is_counted, setup, teardown),
};

KVP_TEST_MAIN("tier_scrub", tests)
