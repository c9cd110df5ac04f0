/* kvp-bench ingest, persist: the advisor's figures (issue 6).
 * Why this file is long: ingest and persist share the trace-driven batch
 * builder and the database fixture; split, each would carry a copy.
 *
 *   ingest   decode + apply of trace-driven event batches into the index,
 *            block-events/s, against decoding the same batches only.
 *   persist  block changes written per second by the write-behind flush,
 *            against a plain SQLite upsert loop doing the same row work on
 *            the same schema; persistence lag with changes offered at half
 *            the plain loop's rate measured in the same run (on a slower
 *            disk the plain loop itself may run below 100k/s, and the lag
 *            target must not depend on the disk).
 *
 * (match is in bench_index.c.) Everything runs in process, no NATS: these are the costs of the
 * advisor's own code. The trace is data/conversation_trace.jsonl.gz (KVP_TRACE).
 */
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "store/store.h"
#include "bench.h"
#include "bench_index.h"
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

/* --- a tiny open-addressing set (bench bookkeeping and the baseline) ---- */

typedef struct uset_s {
  uint64_t *k; /* 0 = empty */
  uint32_t *v;
  size_t cap, n;
} uset_t;

static void us_init(uset_t *s, size_t n) {
  s->cap = 16;
  while (s->cap < n * 2)
    s->cap *= 2;
  s->k = calloc(s->cap, sizeof *s->k);
  s->v = calloc(s->cap, sizeof *s->v);
  s->n = 0;
}

static size_t us_slot(const uset_t *s, uint64_t h) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & (s->cap - 1);
}

static uint32_t *us_get(const uset_t *s, uint64_t h) {
  for (size_t i = us_slot(s, h);; i = (i + 1) & (s->cap - 1)) {
    if (s->k[i] == h)
      return &s->v[i];
    if (s->k[i] == 0)
      return NULL;
  }
}

static void us_put(uset_t *s, uint64_t h, uint32_t v) {
  size_t i = us_slot(s, h);
  while (s->k[i] != 0 && s->k[i] != h)
    i = (i + 1) & (s->cap - 1);
  if (s->k[i] == 0)
    s->n++;
  s->k[i] = h;
  s->v[i] = v;
}

static void us_free(uset_t *s) {
  free(s->k);
  free(s->v);
}

/* --- ingest ------------------------------------------------------------- */

static void msgs_add(kvp_bench_msgs_t *m, const kvp_batch_t *b) {
  size_t need = kvp_wire_encoded_size(b), len;
  uint8_t *buf = malloc(need);
  if (kvp_wire_encode(b, buf, need, &len) != 0) {
    free(buf);
    return;
  }
  if (m->n == m->cap) {
    m->cap = m->cap ? m->cap * 2 : 1024;
    m->buf = realloc(m->buf, m->cap * sizeof *m->buf);
    m->len = realloc(m->len, m->cap * sizeof *m->len);
  }
  m->buf[m->n] = buf;
  m->len[m->n++] = len;
  for (size_t i = 0; i < b->nevents; i++)
    m->block_events += b->events[i].nhashes;
}

/* A simulated worker: G1 of g1_cap blocks, FIFO eviction offloads to G2. */
typedef struct sim_s {
  char name[24];
  uint64_t next_id;
  uset_t g1;
  uint64_t *fifo;
  size_t head, count, cap;
} sim_t;

/* Turns the trace into batches: each request goes to a worker (by its
 * first block, as a prefix-aware router would), which reports the cached
 * prefix as accessed, stores the rest in G1 and offloads evicted G1 blocks
 * to G2. Returns the number of requests. */
size_t kvp_bench_trace_batches(kvp_bench_msgs_t *m, int nworkers, size_t g1_cap) {
  gzFile gz = gzopen(kvp_bench_trace_path(), "rb");
  char *line = malloc(1 << 20);
  sim_t *w = calloc((size_t)nworkers, sizeof *w);
  uint64_t seq[4096], acc[4096], st[4096], ev_out[8192];
  size_t reqs = 0;

  if (gz == NULL) {
    fprintf(stderr, "bench ingest: cannot open %s\n", kvp_bench_trace_path());
    free(line);
    free(w);
    return 0;
  }
  for (int i = 0; i < nworkers; i++) {
    snprintf(w[i].name, sizeof w[i].name, "worker%d", i);
    w[i].next_id = 1;
    us_init(&w[i].g1, g1_cap);
    w[i].cap = g1_cap;
    w[i].fifo = calloc(g1_cap, sizeof *w[i].fifo);
  }
  while (gzgets(gz, line, 1 << 20)) {
    json_t *j = json_loads(line, 0, NULL), *ids = json_object_get(j, "hash_ids");
    size_t n = json_array_size(ids), nacc = 0, nst = 0, nev = 0;
    if (n == 0 || n > 4096) {
      json_decref(j);
      continue;
    }
    uint64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
      uint64_t local = (uint64_t)json_integer_value(json_array_get(ids, i)) * 0x9e3779b97f4a7c15ull;
      seq[i] = i ? kvp_hash_chain(prev, local, KVP_HASH_SEED) : local;
      prev = seq[i];
    }
    json_decref(j);
    if (m->keep_queries) {
      /* The request's hashes, as a router's lookup before it routes. */
      if (m->nq + n > m->qcap) {
        m->qcap = (m->nq + n) * 2;
        m->q = realloc(m->q, m->qcap * sizeof *m->q);
      }
      if (m->n + 1 > m->qoff_cap) {
        m->qoff_cap = m->qoff_cap ? m->qoff_cap * 2 : 1024;
        m->qoff = realloc(m->qoff, (m->qoff_cap + 1) * sizeof *m->qoff);
      }
      memcpy(&m->q[m->nq], seq, n * sizeof *seq);
      m->qoff[m->n] = m->nq;
      m->nq += n;
      m->qoff[m->n + 1] = m->nq;
    }
    sim_t *s = &w[seq[0] % (uint64_t)nworkers];
    size_t i = 0;
    while (i < n && us_get(&s->g1, seq[i]) && *us_get(&s->g1, seq[i]))
      acc[nacc++] = seq[i++];
    for (; i < n; i++)
      st[nst++] = seq[i];
    kvp_event_t ev[4];
    if (nacc)
      ev[nev++] = (kvp_event_t){.type = KVP_EV_ACCESSED, .tier = 1, .hashes = acc, .nhashes = nacc};
    if (nst)
      ev[nev++] = (kvp_event_t){.type = KVP_EV_STORED,
                                .tier = 1,
                                .has_parent = nacc > 0,
                                .parent_hash = nacc ? acc[nacc - 1] : 0,
                                .hashes = st,
                                .nhashes = nst,
                                .block_tokens = 512,
                                .block_bytes = 512 * 160 * 1024};
    /* Make room: the oldest G1 blocks move to G2. */
    size_t nout = 0;
    while (s->count + nst > s->cap && nout < 8192) {
      uint64_t old = s->fifo[s->head];
      s->head = (s->head + 1) % s->cap;
      s->count--;
      if (us_get(&s->g1, old))
        *us_get(&s->g1, old) = 0;
      ev_out[nout++] = old;
    }
    if (nout) {
      /* A move is Stored in the new tier, then Removed from the old
       * (DESIGN.md, "Block manager"). */
      ev[nev++] = (kvp_event_t){.type = KVP_EV_STORED,
                                .tier = 2,
                                .hashes = ev_out,
                                .nhashes = nout,
                                .block_tokens = 512,
                                .block_bytes = 512 * 160 * 1024};
      ev[nev++] =
          (kvp_event_t){.type = KVP_EV_REMOVED, .tier = 1, .hashes = ev_out, .nhashes = nout};
    }
    for (size_t k = 0; k < nst && s->count < s->cap; k++) {
      s->fifo[(s->head + s->count++) % s->cap] = st[k];
      us_put(&s->g1, st[k], 1);
    }
    for (size_t k = 0; k < nev; k++)
      ev[k].event_id = s->next_id + k;
    kvp_batch_t b = {.worker_id = s->name,
                     .epoch = 1,
                     .first_event_id = s->next_id,
                     .events = ev,
                     .nevents = nev};
    s->next_id += nev;
    msgs_add(m, &b);
    reqs++;
    /* The open-addressing bookkeeping set never shrinks; rebuild it when
     * tombstoned entries pile up. */
    if (s->g1.n > s->cap + s->cap / 2) {
      uset_t fresh;
      us_init(&fresh, s->cap);
      for (size_t k = 0; k < s->count; k++)
        us_put(&fresh, s->fifo[(s->head + k) % s->cap], 1);
      us_free(&s->g1);
      s->g1 = fresh;
    }
  }
  gzclose(gz);
  for (int i = 0; i < nworkers; i++) {
    us_free(&w[i].g1);
    free(w[i].fifo);
  }
  free(w);
  free(line);
  return reqs;
}

KVP_BENCH_SUITE(ingest, "advisor: decode + apply of trace-driven batches, block-events/s") {
  (void)argc;
  (void)argv;
  kvp_bench_msgs_t m = {0};
  /* Steady state: freed index memory stays in the heap for the next round,
   * as it does in a long-running daemon, so the best round does not pay
   * first-touch page faults. */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  size_t reqs = kvp_bench_trace_batches(&m, 8, 16384);
  if (reqs == 0)
    return 1;
  double best_apply = 1e30, best_decode = 1e30;
  for (int r = 0; r < 9; r++) {
    kvp__index_t *ix = NULL;
    kvp__adv_ingest_t *ing = NULL;
    kvp__index_changes_t ch;
    kvp__index_create(1 << 18, 3600, &ix);
    kvp__adv_ingest_create(ix, NULL, &ing);
    uint64_t t0 = kvp_bench_now_ns();
    for (size_t i = 0; i < m.n; i++)
      kvp__adv_ingest_message(ing, m.buf[i], m.len[i], NULL, NOW_MS);
    double dt = (double)(kvp_bench_now_ns() - t0) / 1e9;
    if (dt < best_apply)
      best_apply = dt;
    if (kvp__adv_ingest_counters(ing)->block_events != m.block_events)
      fprintf(stderr, "bench ingest: applied %llu of %llu block events\n",
              (unsigned long long)kvp__adv_ingest_counters(ing)->block_events,
              (unsigned long long)m.block_events);
    kvp__index_changes_take(ix, &ch);
    kvp__index_changes_free(&ch);
    kvp__adv_ingest_destroy(ing);
    kvp__index_destroy(ix);

    t0 = kvp_bench_now_ns();
    for (size_t i = 0; i < m.n; i++) {
      kvp_wire_batch_t *wb = NULL;
      if (kvp_wire_decode(m.buf[i], m.len[i], NULL, &wb) == 0)
        kvp_bench_sink(kvp_wire_batch_view(wb)->nevents);
      kvp_wire_batch_free(wb);
    }
    dt = (double)(kvp_bench_now_ns() - t0) / 1e9;
    if (dt < best_decode)
      best_decode = dt;
  }
  printf("# %zu trace requests over 8 workers -> %zu batches, %llu block-events\n", reqs, m.n,
         (unsigned long long)m.block_events);
  kvp_bench_report("ingest.block_events_per_s", (double)m.block_events / best_apply, "events/s",
                   "decode-only", (double)m.block_events / best_decode);
  kvp_bench_report("ingest.batches_per_s", (double)m.n / best_apply, "batches/s", NULL, 0);
  for (size_t i = 0; i < m.n; i++)
    free(m.buf[i]);
  free(m.buf);
  free(m.len);
  return 0;
}

/* --- persist ------------------------------------------------------------ */

typedef struct change_s {
  int op; /* 0 store, 1 access, 2 remove */
  uint64_t hash;
  uint16_t worker;
} change_t;

/* A round of changes over a live set: 60% new blocks, 20% hits, 20%
 * removals of live blocks. */
static void make_changes(change_t *c, size_t n, uint64_t *live, size_t *nlive, uint16_t nworkers) {
  for (size_t i = 0; i < n; i++) {
    unsigned r = (unsigned)(rnd() % 10);
    if (r < 6 || *nlive < 1000) {
      uint64_t h = rnd() | 1;
      c[i] = (change_t){0, h, (uint16_t)(h % nworkers)};
      live[(*nlive)++] = h;
    } else if (r < 8) {
      uint64_t h = live[rnd() % *nlive];
      c[i] = (change_t){1, h, (uint16_t)(h % nworkers)};
    } else {
      size_t k = rnd() % *nlive;
      uint64_t h = live[k];
      live[k] = live[--*nlive];
      c[i] = (change_t){2, h, (uint16_t)(h % nworkers)};
    }
  }
}

static void apply_changes(kvp__index_t *ix, const change_t *c, size_t n, uint64_t now) {
  for (size_t i = 0; i < n; i++) {
    if (c[i].op == 0)
      kvp__index_store(ix, c[i].hash, 0, 0, c[i].worker, 1, 0, 16, 1 << 20, now);
    else if (c[i].op == 1)
      kvp__index_access(ix, c[i].hash, 1, 1, now);
    else
      kvp__index_remove(ix, c[i].hash, c[i].worker, 1, 0);
  }
}

/* The baseline: the same row work as plain prepared upserts and deletes on
 * the same schema, one transaction per round. */
static double baseline_round(sqlite3 *db, sqlite3_stmt **s, const change_t *c, size_t n) {
  uint64_t t0 = kvp_bench_now_ns();
  char name[16];
  sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
  for (size_t i = 0; i < n; i++) {
    snprintf(name, sizeof name, "worker%u", c[i].worker);
    if (c[i].op == 2) {
      sqlite3_bind_int64(s[2], 1, (sqlite3_int64)c[i].hash);
      sqlite3_bind_text(s[2], 2, name, -1, SQLITE_TRANSIENT);
      sqlite3_step(s[2]);
      sqlite3_reset(s[2]);
      sqlite3_bind_int64(s[3], 1, (sqlite3_int64)c[i].hash);
      sqlite3_step(s[3]);
      sqlite3_reset(s[3]);
      continue;
    }
    sqlite3_bind_int64(s[0], 1, (sqlite3_int64)c[i].hash);
    sqlite3_bind_int64(s[0], 2, (sqlite3_int64)NOW_MS);
    sqlite3_step(s[0]);
    sqlite3_reset(s[0]);
    if (c[i].op == 0) {
      sqlite3_bind_int64(s[1], 1, (sqlite3_int64)c[i].hash);
      sqlite3_bind_text(s[1], 2, name, -1, SQLITE_TRANSIENT);
      sqlite3_step(s[1]);
      sqlite3_reset(s[1]);
    }
  }
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

static sqlite3 *baseline_open(const char *path, sqlite3_stmt **s) {
  static const char *const sql[4] = {
      "INSERT INTO blocks(hash, parent, tokens, bytes, first_seen, last_access, hits, freq)"
      " VALUES(?1, NULL, 16, 1048576, ?2, ?2, 0, 0) ON CONFLICT(hash) DO UPDATE SET"
      " last_access = ?2, hits = hits + 1",
      "INSERT OR IGNORE INTO block_locations(hash, worker, dp_rank, tier, volume)"
      " VALUES(?1, ?2, 0, 1, '')",
      "DELETE FROM block_locations WHERE hash = ?1 AND worker = ?2 AND dp_rank = 0 AND tier = 1"
      " AND volume = ''",
      "DELETE FROM blocks WHERE hash = ?1"};
  sqlite3 *db = NULL;
  kvp__store_create_version(path, KVP__STORE_SCHEMA_VERSION);
  sqlite3_open(path, &db);
  sqlite3_exec(db,
               "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
               " PRAGMA cache_size = -65536;",
               NULL, NULL, NULL);
  for (int i = 0; i < 4; i++)
    sqlite3_prepare_v3(db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s[i], NULL);
  return db;
}

typedef struct writer_s {
  kvp__store_t *st;
  kvp__store_flush_t *fl;
  pthread_t thread;
  uint64_t oldest, end_ns;
  int rc, done;
} writer_t;

static void *writer_main(void *arg) {
  writer_t *w = arg;
  w->rc = kvp__store_write(w->st, w->fl);
  w->end_ns = kvp_bench_now_ns();
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

KVP_BENCH_SUITE(persist, "advisor: write-behind changes/s vs plain SQLite upserts; lag at half "
                         "the plain rate") {
  (void)argc;
  (void)argv;
  char dir[] = "/tmp/kvp-bench-persist-XXXXXX", p1[128], p2[128];
  const size_t per_round = 100000, rounds = 8;
  change_t *c = malloc(per_round * sizeof *c);
  uint64_t *live = malloc(per_round * rounds * sizeof *live);
  size_t nlive = 0;
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  sqlite3_stmt *bs[4] = {0};
  char err[256];
  uint16_t w;
  double t_adv = 0, t_base = 0;
  size_t written = 0;

  if (mkdtemp(dir) == NULL)
    return 1;
  snprintf(p1, sizeof p1, "%s/advisor.db", dir);
  snprintf(p2, sizeof p2, "%s/baseline.db", dir);
  kvp__index_create(per_round * rounds, 3600, &ix);
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%d", i);
    kvp__index_worker(ix, name, 0, &w);
  }
  if (kvp__store_open(p1, &st, err, sizeof err) != 0) {
    fprintf(stderr, "bench persist: %s\n", err);
    return 1;
  }
  sqlite3 *bdb = baseline_open(p2, bs);
  for (size_t r = 0; r < rounds; r++) {
    size_t n = 0;
    make_changes(c, per_round, live, &nlive, 8);
    apply_changes(ix, c, per_round, NOW_MS + r);
    uint64_t t0 = kvp_bench_now_ns();
    kvp__store_flush(st, ix, NULL, 0, r, &n);
    t_adv += (double)(kvp_bench_now_ns() - t0) / 1e9;
    written += n;
    t_base += baseline_round(bdb, bs, c, per_round);
  }
  printf("# %zu rounds of %zu changes (60%% new blocks, 20%% hits, 20%% removals);"
         " %zu block rows written by the flushes\n",
         rounds, per_round, written);
  kvp_bench_report("persist.changes_per_s", (double)(per_round * rounds) / t_adv, "changes/s",
                   "plain-upsert-loop", (double)(per_round * rounds) / t_base);

  /* Lag, as the daemon runs: changes arrive at half the plain loop's rate
   * just measured (spread over 10 ms ticks) on the loop thread, which every 200 ms takes the
   * changes (prepare) and hands the transaction to another thread, one flush at a time. Lag =
   * commit time minus the scheduled arrival of the oldest change in it. */
  const double plain_rate = (double)(per_round * rounds) / t_base, rate = plain_rate / 2, secs = 5;
  const uint64_t flush_ns = 200000000ull, tick_ns = 10000000ull;
  uint64_t start = kvp_bench_now_ns(), next_tick = start, next_flush = start + flush_ns;
  uint64_t oldest = 0, max_lag = 0, sum_lag = 0, flushes = 0, applied = 0;
  size_t per_tick = (size_t)(rate * (double)tick_ns / 1e9);
  if (per_tick == 0)
    per_tick = 1;
  printf("# lag: changes offered at %.0f/s, half the plain loop's %.0f/s\n", rate, plain_rate);
  writer_t wr = {.st = st};
  int busy = 0;
  while (applied < (uint64_t)(rate * secs) || busy) {
    uint64_t now = kvp_bench_now_ns();
    if (busy && __atomic_load_n(&wr.done, __ATOMIC_ACQUIRE)) {
      pthread_join(wr.thread, NULL);
      busy = 0;
      if (wr.rc != 0)
        kvp__index_rows_restore(ix, kvp__store_flush_rows(wr.fl));
      kvp__store_flush_free(wr.fl);
      uint64_t lag = wr.end_ns > wr.oldest ? wr.end_ns - wr.oldest : 0;
      max_lag = lag > max_lag ? lag : max_lag;
      sum_lag += lag;
      flushes++;
      continue;
    }
    if (now >= next_tick && applied < (uint64_t)(rate * secs)) {
      make_changes(c, per_tick, live, &nlive, 8);
      apply_changes(ix, c, per_tick, NOW_MS + now / 1000000);
      if (oldest == 0)
        oldest = next_tick; /* the scheduled arrival, so falling behind counts */
      applied += per_tick;
      next_tick += tick_ns;
      continue;
    }
    if (now >= next_flush && !busy && oldest) {
      kvp__index_rows_t rows;
      int prc = kvp__index_rows_take(ix, kvp__store_volumes_written(st), &rows);
      if (prc == 0 && (prc = kvp__store_prepare(st, &rows, NULL, 0, applied, &wr.fl)) != 0)
        kvp__index_rows_restore(ix, &rows);
      if (prc == 0) {
        wr.oldest = oldest;
        wr.done = 0;
        oldest = 0;
        busy = 1;
        pthread_create(&wr.thread, NULL, writer_main, &wr);
      }
      next_flush += flush_ns;
      continue;
    }
    usleep(200);
  }
  double achieved = (double)applied / ((double)(kvp_bench_now_ns() - start) / 1e9);
  kvp_bench_report("persist.lag_max_ms_at_half_plain", (double)max_lag / 1e6, "ms", NULL, 0);
  kvp_bench_report("persist.lag_mean_ms_at_half_plain",
                   flushes ? (double)sum_lag / (double)flushes / 1e6 : 0, "ms", NULL, 0);
  kvp_bench_report("persist.offered_rate", achieved, "changes/s", "half-plain-loop", rate);

  for (int i = 0; i < 4; i++)
    sqlite3_finalize(bs[i]);
  sqlite3_close(bdb);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  free(c);
  free(live);
  static const char *const files[] = {"advisor.db",  "advisor.db-wal",  "advisor.db-shm",
                                      "baseline.db", "baseline.db-wal", "baseline.db-shm"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
  return 0;
}
