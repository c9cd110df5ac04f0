/* The advisor daemon in-process against a real nats-server, with real
 * SQLite files: replays, gaps and resyncs, restarts, malformed input, the
 * query API and the kvplane CLI, sqlite3 readers while it writes.
 *
 * Why this file is long: its cases share one daemon fixture (nats-server,
 * advisor thread, database readers) that would otherwise be copied.
 */
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "advfix.h"
#include "common/clock.h"
#include "harness.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

static void assert_equal_soon(advfix_t *f, tw_t **w, int n) {
  char why[512] = "";
  if (advfix_wait_equal(f, w, n, 20000, why, sizeof why) != 0)
    fail_msg("database differs from the workers: %s", why);
}

static void core_replay_equals_registered_sets(void **state) {
  advfix_t *f = *state;
  tw_t *w[3] = {tw_create("t", "w0", 0, 1, 1), tw_create("t", "w1", 0, 1, 2),
                tw_create("t", "w2", 1, 1, 3)};
  assert_int_equal(advfix_start(f), 0);
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 3; i++)
      advfix_publish_batches(f, w[i], 50, 12);
  assert_equal_soon(f, w, 3);
  assert_int_equal(advfix_stat(f, "ingest.resyncs"), 0);
  assert_int_equal(advfix_stat(f, "ingest.batches"), 600);
  assert_int_equal(advfix_stop(f), 0);
  for (int i = 0; i < 3; i++)
    tw_destroy(w[i]);
}

static void jetstream_restart_resumes_exactly(void **state) {
  advfix_t *f = *state;
  tw_t *w[2] = {tw_create("t", "w0", 0, 1, 11), tw_create("t", "w1", 0, 1, 12)};
  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, w[0], 100, 8);
  advfix_publish_batches(f, w[1], 100, 8);
  assert_equal_soon(f, w, 2);
  assert_int_equal(advfix_stop(f), 0);
  /* Published while the advisor is down: the stream keeps it. */
  advfix_publish_batches(f, w[0], 100, 8);
  advfix_publish_batches(f, w[1], 50, 8);
  assert_int_equal(advfix_start(f), 0);
  assert_equal_soon(f, w, 2);
  /* Nothing was applied twice: the restarted advisor saw only the new part. */
  assert_int_equal(advfix_stat(f, "ingest.batches"), 150);
  assert_int_equal(advfix_stat(f, "ingest.duplicates"), 0);
  assert_int_equal(advfix_stat(f, "store.stream_seq"), 350);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
  tw_destroy(w[1]);
}

static void gap_leads_to_resync_and_convergence(void **state) {
  advfix_t *f = *state;
  natsSubscription *ctl = NULL;
  natsMsg *req = NULL;
  const uint8_t *buf;
  size_t len;
  tw_t *w[1] = {tw_create("t", "w0", 0, 1, 21)};
  assert_int_equal(natsConnection_SubscribeSync(&ctl, f->nc, "kvplane.ctl.t.w0.resync"), NATS_OK);
  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, w[0], 20, 8);
  /* A batch lost on the way. */
  assert_int_equal(tw_batch(w[0], 8, &buf, &len), 0);
  advfix_publish_batches(f, w[0], 20, 8);
  assert_int_equal(natsSubscription_NextMsg(&req, ctl, 10000), NATS_OK);
  json_t *j = json_loadb(natsMsg_GetData(req), (size_t)natsMsg_GetDataLength(req), 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "reason")), "gap");
  assert_string_equal(json_string_value(json_object_get(j, "worker")), "w0");
  json_decref(j);
  natsMsg_Destroy(req);
  /* The worker answers with its full state; more events follow. */
  assert_int_equal(tw_publish_snapshot(w[0], f->nc, NULL, 16), 0);
  advfix_publish_batches(f, w[0], 10, 8);
  assert_equal_soon(f, w, 1);
  assert_true(advfix_stat(f, "ingest.snapshots") >= 4);
  assert_int_equal(advfix_stat(f, "ingest.gaps"), 1);
  natsSubscription_Destroy(ctl);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
}

static void restarted_worker_loses_stale_locations(void **state) {
  advfix_t *f = *state;
  tw_t *w[2] = {tw_create("t", "w0", 0, 100, 31), tw_create("t", "w1", 0, 5, 32)};
  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, w[0], 60, 8);
  advfix_publish_batches(f, w[1], 30, 8);
  assert_equal_soon(f, w, 2);
  tw_restart(w[0], 101);
  advfix_publish_batches(f, w[0], 5, 4);
  assert_equal_soon(f, w, 2);
  assert_int_equal(advfix_stat(f, "ingest.epochs"), 1);
  assert_int_equal(advfix_stat(f, "ingest.resyncs"), 0);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
  tw_destroy(w[1]);
}

static void malformed_and_oversized_are_skipped(void **state) {
  advfix_t *f = *state;
  tw_t *w[1] = {tw_create("t", "w0", 0, 1, 41)};
  uint8_t junk[300], big[20000];
  f->cfg.max_message_bytes = 16384;
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (uint8_t)(i * 131 + 7);
  memset(big, 0x0a, sizeof big);
  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, w[0], 10, 8);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.w0", junk, sizeof junk), NATS_OK);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.evil", big, sizeof big), NATS_OK);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.w0", "", 0), NATS_OK);
  advfix_publish_batches(f, w[0], 10, 8);
  assert_equal_soon(f, w, 1);
  assert_int_equal(advfix_stat(f, "ingest.oversized"), 1);
  /* junk and the empty message (no worker id) are malformed too. */
  assert_int_equal(advfix_stat(f, "ingest.malformed"), 3);
  assert_int_equal(advfix_stat(f, "ingest.batches"), 20);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
}

static void match_and_stats_answer(void **state) {
  advfix_t *f = *state;
  uint64_t h[10];
  uint8_t buf[4096], bin[4 + 11 * 8];
  size_t len;
  for (int i = 0; i < 10; i++)
    h[i] = 0xa000000000000000ull + (uint64_t)i;
  kvp_event_t ev[2] = {
      {.event_id = 1,
       .type = KVP_EV_STORED,
       .tier = 1,
       .hashes = h,
       .nhashes = 10,
       .block_tokens = 16,
       .block_bytes = 4096},
      {.event_id = 2,
       .type = KVP_EV_STORED,
       .tier = 3,
       .volume = "nvme0",
       .hashes = h,
       .nhashes = 4,
       .block_tokens = 16,
       .block_bytes = 4096},
  };
  kvp_batch_t b = {.worker_id = "m0", .epoch = 1, .first_event_id = 1, .events = ev, .nevents = 2};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.m0", buf, (int)len), NATS_OK);
  natsConnection_Flush(f->nc);
  for (int t = 0; t < 100 && advfix_stat(f, "locations") != 14; t++)
    nats_Sleep(50);
  const char *q = "{\"hashes\":[\"a000000000000000\",\"0xa000000000000001\",\"a000000000000002\","
                  "\"a000000000000003\",\"a000000000000004\",\"a000000000000005\","
                  "\"a000000000000006\",\"a000000000000007\",\"a000000000000008\","
                  "\"a000000000000009\",\"ffff\"]}";
  char *rep = advfix_request(f, "match", q, (int)strlen(q));
  assert_non_null(rep);
  json_t *j = json_loads(rep, 0, NULL);
  json_t *m = json_object_get(j, "matches");
  assert_int_equal(json_array_size(m), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "tier")), "G1");
  assert_int_equal(json_integer_value(json_object_get(json_array_get(m, 0), "length")), 10);
  assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "tier")), "G3");
  assert_int_equal(json_integer_value(json_object_get(json_array_get(m, 1), "length")), 4);
  json_decref(j);
  free(rep);
  /* The binary form: "KVPM" and little-endian u64s. */
  memcpy(bin, "KVPM", 4);
  for (int i = 0; i < 11; i++)
    for (int k = 0; k < 8; k++)
      bin[4 + i * 8 + k] = (uint8_t)((i < 10 ? h[i] : 1) >> (8 * k));
  rep = advfix_request(f, "match", bin, sizeof bin);
  assert_non_null(strstr(rep, "\"length\":10"));
  free(rep);
  /* JSON integers, "read as the same 64 bits" (client.h): the u64 above
   * 2^63 (half of all hashes) was refused as "too big integer", and its
   * i64 form as SQLite shows it. */
  const char *qn = "{\"hashes\":[11529215046068469760,11529215046068469761,11529215046068469762]}";
  rep = advfix_request(f, "match", qn, (int)strlen(qn));
  assert_non_null(rep);
  if (strstr(rep, "\"length\":3") == NULL)
    fail_msg("u64 JSON numbers: %s", rep);
  free(rep);
  const char *qi = "{\"hashes\":[-6917529027641081856,-6917529027641081855]}";
  rep = advfix_request(f, "match", qi, (int)strlen(qi));
  assert_non_null(strstr(rep, "\"length\":2"));
  free(rep);
  rep = advfix_request(f, "match", "{\"hashes\":[\"zz\"]}", 17);
  assert_non_null(strstr(rep, "\"error\""));
  free(rep);
  assert_int_equal(advfix_stat(f, "tiers.G3.locations"), 4);
  assert_int_equal(advfix_stat(f, "workers"), 1);
  /* Freshness is reported (docs/stats.md); a loopback batch is applied well
   * within a minute of its timestamp. */
  long long lag = advfix_stat(f, "freshness.apply_lag_max_ms");
  assert_true(lag >= 0 && lag < 60000);
  assert_true(advfix_stat(f, "freshness.pending_ms") >= 0);

  /* The kvplane CLI sends the same requests. */
  char cli[512], out[512], *txt = NULL;
  snprintf(cli, sizeof cli, "%s/tools/kvplane", getenv("KVP_TEST_BINDIR"));
  snprintf(out, sizeof out, "%s/cli.out", f->dir);
  char *argv1[] = {cli,    "match", "--server",         f->natsd.url,
                   "--ns", "t",     "a000000000000000", "a000000000000001",
                   NULL};
  assert_int_equal(kvp_test_spawn_wait(argv1, NULL, out), 0);
  FILE *fp = fopen(out, "r");
  txt = calloc(1, 8192);
  assert_true(fread(txt, 1, 8191, fp) > 0);
  fclose(fp);
  assert_non_null(strstr(txt, "\"length\": 2"));
  free(txt);
  char *argv2[] = {cli, "stats", "-s", f->natsd.url, "-n", "t", NULL};
  assert_int_equal(kvp_test_spawn_wait(argv2, NULL, NULL), 0);
  char *argv3[] = {cli, "match", "-s", f->natsd.url, "-n", "nobody", "-w", "300", "0xab", NULL};
  assert_int_equal(kvp_test_spawn_wait(argv3, NULL, NULL), 2);
  /* Bad input is refused before anything is asked: exit 1. */
  char *argv4[] = {cli, "match", "-s", f->natsd.url, "-n", "t", "ab", NULL};
  assert_int_equal(kvp_test_spawn_wait(argv4, NULL, NULL), 1);
  char *argv5[] = {cli, "stats", "-s", f->natsd.url, "-w", "abc", NULL};
  assert_int_equal(kvp_test_spawn_wait(argv5, NULL, NULL), 1);
  char *argv6[] = {cli, "statz", "-s", f->natsd.url, NULL};
  assert_int_equal(kvp_test_spawn_wait(argv6, NULL, NULL), 1);
  /* The signed decimal sqlite3 shows finds the same block as its hex. */
  snprintf(out, sizeof out, "%s/cli2.out", f->dir);
  char *argv7[] = {cli,
                   "match",
                   "-s",
                   f->natsd.url,
                   "-n",
                   "t",
                   "--",
                   "-6917529027641081856",
                   "0xa000000000000001",
                   NULL};
  assert_int_equal(kvp_test_spawn_wait(argv7, NULL, out), 0);
  fp = fopen(out, "r");
  txt = calloc(1, 8192);
  assert_true(fread(txt, 1, 8191, fp) > 0);
  fclose(fp);
  assert_non_null(strstr(txt, "\"length\": 2"));
  free(txt);
  assert_int_equal(advfix_stop(f), 0);
}

/* Operators read the views with the sqlite3 shell while the daemon writes. */
/* [index] max_locations in the daemon: batches past it drop the coldest
 * G1/G2 locations after each one (never G3), the stats reply counts them
 * and shows the headroom, match answers for what remains, and the drops
 * reach the database as removals. Recency is kept to the second, so the
 * batches go a second apart. */
static void index_cap_drops_coldest_g1_g2_and_says_so(void **state) {
  advfix_t *f = *state;
  enum { BATCH = 40, NB = 4, CAP = 100 };
  uint64_t h[NB][BATCH], g3[10];
  uint8_t buf[8192];
  size_t len;
  f->cfg.index_max_locations = CAP;
  assert_int_equal(advfix_start(f), 0);
  for (int i = 0; i < 10; i++)
    g3[i] = 0xc000000000000000ull + (uint64_t)i;
  kvp_event_t e3 = {.event_id = 1,
                    .type = KVP_EV_STORED,
                    .tier = 3,
                    .volume = "nvme0",
                    .hashes = g3,
                    .nhashes = 10,
                    .block_tokens = 16,
                    .block_bytes = 4096};
  kvp_batch_t b3 = {
      .worker_id = "m0", .epoch = 1, .first_event_id = 1, .events = &e3, .nevents = 1};
  assert_int_equal(kvp_wire_encode(&b3, buf, sizeof buf, &len), 0);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.m0", buf, (int)len), NATS_OK);
  for (int k = 0; k < NB; k++) {
    for (int i = 0; i < BATCH; i++)
      h[k][i] = 0xb000000000000000ull + (uint64_t)k * 1000 + (uint64_t)i;
    kvp_event_t ev = {.event_id = (uint64_t)k + 2,
                      .type = KVP_EV_STORED,
                      .tier = 1,
                      .hashes = h[k],
                      .nhashes = BATCH,
                      .block_tokens = 16,
                      .block_bytes = 4096};
    kvp_batch_t b = {.worker_id = "m0",
                     .epoch = 1,
                     .first_event_id = (uint64_t)k + 2,
                     .events = &ev,
                     .nevents = 1};
    assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
    assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.m0", buf, (int)len), NATS_OK);
    natsConnection_Flush(f->nc);
    if (k + 1 < NB)
      nats_Sleep(1100);
  }
  long long applied = 0;
  for (int t = 0; t < 100 && (applied = advfix_stat(f, "ingest.block_events")) < 10 + NB * BATCH;
       t++)
    nats_Sleep(50);
  assert_int_equal(applied, 10 + NB * BATCH);
  long long locs = advfix_stat(f, "locations"), evicted = advfix_stat(f, "index.evicted_locations");
  print_message("cap %d: %lld locations, %lld dropped, headroom %lld\n", CAP, locs, evicted,
                advfix_stat(f, "index.headroom_locations"));
  assert_true(locs > 0 && locs <= CAP);
  assert_int_equal(locs + evicted, 10 + NB * BATCH);
  assert_true(advfix_stat(f, "index.headroom_locations") >= 0);
  assert_int_equal(advfix_stat(f, "index.max_locations"), CAP);
  assert_int_equal(advfix_stat(f, "tiers.G3.locations"), 10);
  /* The newest batch answers whole, the oldest not at all. */
  char q[64 + BATCH * 24], *p = q;
  p += sprintf(p, "{\"hashes\":[");
  for (int i = 0; i < BATCH; i++)
    p += sprintf(p, "%s\"%016llx\"", i ? "," : "", (unsigned long long)h[NB - 1][i]);
  sprintf(p, "]}");
  char *rep = advfix_request(f, "match", q, (int)strlen(q));
  assert_non_null(rep);
  assert_non_null(strstr(rep, "\"length\": 40") ? rep : strstr(rep, "\"length\":40"));
  free(rep);
  p = q + sprintf(q, "{\"hashes\":[\"%016llx\"]}", (unsigned long long)h[0][0]);
  rep = advfix_request(f, "match", q, (int)strlen(q));
  assert_non_null(rep);
  assert_null(strstr(rep, "\"worker\""));
  free(rep);
  /* The drops reach the database: its locations match the index's. */
  sqlite3 *db = NULL;
  long long rows = -1;
  for (int t = 0; t < 100 && rows != locs; t++) {
    nats_Sleep(50);
    sqlite3_stmt *s = NULL;
    if (db == NULL)
      assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM block_locations", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
      rows = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  assert_int_equal(rows, locs);
}

static void sqlite3_shell_reads_views_while_writing(void **state) {
  advfix_t *f = *state;
  tw_t *w[2] = {tw_create("t", "w0", 0, 1, 51), tw_create("t", "w1", 0, 1, 52)};
  char out[512];
  snprintf(out, sizeof out, "%s/sql.out", f->dir);
  assert_int_equal(advfix_start(f), 0);
  for (int r = 0; r < 21; r++) {
    if (r < 20)
      advfix_publish_batches(f, w[r % 2], 40, 16);
    else
      assert_equal_soon(f, w, 2); /* the last read sees the final state */
    nats_Sleep(20);
    char *argv[] = {"sqlite3",
                    "-readonly",
                    "-bail",
                    f->db,
                    "SELECT tier, volume, blocks, bytes FROM tier_usage;"
                    "SELECT count(*) FROM hot_blocks; SELECT count(*) FROM cold_blocks;"
                    "SELECT worker, status, g1_blocks FROM worker_status;"
                    "SELECT count(*) FROM recent_migrations;",
                    NULL};
    assert_int_equal(kvp_test_spawn_wait(argv, NULL, out), 0);
  }
  FILE *fp = fopen(out, "r");
  char line[256];
  int g1 = 0;
  while (fgets(line, sizeof line, fp))
    g1 += strncmp(line, "1||", 3) == 0;
  fclose(fp);
  assert_int_equal(g1, 1);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
  tw_destroy(w[1]);
}

static void open_fails_cleanly(void **state) {
  advfix_t *f = *state;
  kvp_advisor_t *adv = NULL;
  char err[512] = "";
  kvp_advisor_config_t c = f->cfg;
  snprintf(c.nats.servers, sizeof c.nats.servers, "nats://127.0.0.1:%d", kvp_test_free_port());
  c.nats.connect_timeout_ms = 500;
  assert_int_equal(kvp_advisor_open(&c, &adv, err, sizeof err), KVP_ECONN);
  assert_null(adv);
  /* NATS is tried before the database: no file is left behind. */
  struct stat sb;
  assert_int_not_equal(stat(c.db_path, &sb), 0);
  assert_null(strstr(err, "conn.c:"));
  c = f->cfg;
  snprintf(c.db_path, sizeof c.db_path, "/nonexistent-dir/x/a.db");
  assert_int_equal(kvp_advisor_open(&c, &adv, err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent-dir/x/a.db"));
  assert_non_null(strstr(err, "mode 0700"));
  /* A missing directory whose parent exists is made, private. */
  snprintf(c.db_path, sizeof c.db_path, "%s/lib-kvplane/a.db", f->dir);
  int rc = kvp_advisor_open(&c, &adv, err, sizeof err);
  if (rc != 0)
    fail_msg("open %s: %s", c.db_path, err);
  kvp_advisor_close(adv);
  adv = NULL;
  snprintf(c.db_path, sizeof c.db_path, "%s/lib-kvplane", f->dir);
  assert_int_equal(stat(c.db_path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  /* A file that is not a database is named in the error. */
  snprintf(c.db_path, sizeof c.db_path, "%s/junk.db", f->dir);
  FILE *fp = fopen(c.db_path, "w");
  fputs("this is not a SQLite database, not even close; padding padding padding padding\n", fp);
  fclose(fp);
  assert_int_equal(kvp_advisor_open(&c, &adv, err, sizeof err), KVP_EDB);
  print_message("junk: %s\n", err);
  assert_non_null(strstr(err, c.db_path));
}

/* A second advisor on a running advisor's database is refused, naming the
 * file, before it touches NATS; it started and ran beside the first (both
 * writing the file; in JetStream mode remaking each other's consumer). */
static void one_advisor_per_database(void **state) {
  advfix_t *f = *state;
  kvp_advisor_t *adv = NULL;
  char err[512] = "";

  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(kvp_advisor_open(&f->cfg, &adv, err, sizeof err), KVP_EBUSY);
  assert_null(adv);
  assert_non_null(strstr(err, f->cfg.db_path));
  assert_non_null(strstr(err, "in use by another kvplane-advisor"));
  /* The first one is unharmed, and its database is free once it stops.
   * It may not be heard yet: nats-server takes its subscription (sent at
   * open) in that connection's own time, and a request before that has no
   * responders at once (4 of 6 runs here with two busy loops beside); under
   * parallel ASan runs one also went unanswered for its whole 5 s (1 of 12,
   * the outside helper's runs). Asked again for 20 s at most. */
  char *reply = NULL;
  for (time_t t0 = time(NULL); reply == NULL && time(NULL) - t0 < 20;) {
    if ((reply = advfix_request(f, "stats", "{}", 2)) == NULL)
      usleep(50000);
  }
  assert_non_null(reply);
  assert_null(strstr(reply, "\"error\""));
  free(reply);
  assert_int_equal(advfix_stop(f), 0);
  int rc = kvp_advisor_open(&f->cfg, &adv, err, sizeof err);
  if (rc != 0)
    fail_msg("open after the first stopped: %s", err);
  kvp_advisor_close(adv);
}

/* One integer from the database (-2 for NULL, -1 on error). */
static long long db_int(advfix_t *f, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  long long v = -1;
  if (sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      v = sqlite3_column_type(s, 0) == SQLITE_NULL ? -2 : sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static void publish_raw(advfix_t *f, const char *worker, uint64_t first, kvp_event_t *ev,
                        size_t n) {
  uint8_t buf[4096];
  size_t len;
  char subject[128];
  kvp_batch_t b = {
      .worker_id = worker, .epoch = 1, .first_event_id = first, .events = ev, .nevents = n};
  for (size_t i = 0; i < n; i++)
    ev[i].event_id = first + i;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  snprintf(subject, sizeof subject, "kvplane.ev.t.%s", worker);
  assert_int_equal(natsConnection_Publish(f->nc, subject, buf, (int)len), NATS_OK);
  natsConnection_Flush(f->nc);
}

/* After the last worker stops, the heartbeat timeout drops its G1/G2
 * locations: the workers table says when and how many, so an operator who
 * finds the database nearly empty knows why. The marks go when it returns. */
static void down_worker_row_says_when_and_how_many(void **state) {
  advfix_t *f = *state;
  uint64_t h[8];
  for (int i = 0; i < 8; i++)
    h[i] = 0xd000000000000000ull + (uint64_t)i;
  kvp_event_t ev[3] = {
      {.type = KVP_EV_STORED,
       .tier = 1,
       .hashes = h,
       .nhashes = 5,
       .block_tokens = 16,
       .block_bytes = 4096},
      {.type = KVP_EV_STORED,
       .tier = 2,
       .hashes = h,
       .nhashes = 3,
       .block_tokens = 16,
       .block_bytes = 4096},
      {.type = KVP_EV_STORED,
       .tier = 3,
       .volume = "nvme0",
       .hashes = h,
       .nhashes = 2,
       .block_tokens = 16,
       .block_bytes = 4096},
  };
  f->cfg.heartbeat_timeout_ms = 300;
  assert_int_equal(advfix_start(f), 0);
  long long t0 = (long long)kvp__unix_ms();
  publish_raw(f, "d0", 1, ev, 3);
  for (int t = 0; t < 200 && db_int(f, "SELECT count(*) FROM workers WHERE status = 'down'") != 1;
       t++)
    nats_Sleep(50);
  assert_int_equal(db_int(f, "SELECT count(*) FROM workers WHERE status = 'down'"), 1);
  long long down_at = db_int(f, "SELECT down_at FROM workers WHERE worker = 'd0'");
  assert_true(down_at >= t0 + 300);
  assert_true(down_at <= (long long)kvp__unix_ms());
  assert_int_equal(db_int(f, "SELECT locations_dropped FROM workers WHERE worker = 'd0'"), 8);
  /* G3 outlives the process. */
  assert_int_equal(db_int(f, "SELECT count(*) FROM block_locations"), 2);
  /* Back: up again, the marks cleared. */
  kvp_event_t again[1] = {{.type = KVP_EV_STORED,
                           .tier = 1,
                           .hashes = h + 5,
                           .nhashes = 1,
                           .block_tokens = 16,
                           .block_bytes = 4096}};
  publish_raw(f, "d0", 4, again, 1);
  for (int t = 0; t < 100 && db_int(f, "SELECT count(*) FROM workers WHERE status = 'up'") != 1;
       t++)
    nats_Sleep(20);
  assert_int_equal(db_int(f, "SELECT count(*) FROM workers WHERE status = 'up'"), 1);
  assert_int_equal(db_int(f, "SELECT down_at FROM workers WHERE worker = 'd0'"), -2);
  assert_int_equal(db_int(f, "SELECT locations_dropped FROM workers WHERE worker = 'd0'"), 0);
  assert_int_equal(advfix_stop(f), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(core_replay_equals_registered_sets, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(jetstream_restart_resumes_exactly, advfix_cm_setup_js,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(gap_leads_to_resync_and_convergence, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(restarted_worker_loses_stale_locations, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(malformed_and_oversized_are_skipped, advfix_cm_setup_js,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(match_and_stats_answer, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(index_cap_drops_coldest_g1_g2_and_says_so, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(sqlite3_shell_reads_views_while_writing, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(open_fails_cleanly, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(one_advisor_per_database, advfix_cm_setup_js,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(down_worker_row_says_when_and_how_many, advfix_cm_setup_core,
                                    advfix_cm_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_daemon", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
