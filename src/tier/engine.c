/* The tiering engine (see engine.h): a round on the loop thread, the job on
 * the thread pool, and recovery at open. About 650 lines: the three share
 * the engine's state (volumes, pending sources, the op list) and nothing
 * else; the journal's SQL is in journal.c and the rules in policy.c. */
#include "tier/engine.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "tier/journal.h"
#include "tier/policy.h"

#define ADVISOR_WORKER "_advisor"
#define BACKOFF_MS 30000

typedef struct vol_s {
  kvp_volume_t *v;
  char name[64];
  int tier;
  uint64_t capacity;
  uint16_t id; /* the index's volume id */
  uint64_t backoff_until_ms;
  kvp__tier_vol_stats_t st; /* name, tier, capacity in st too */
} vol_t;

/* One unit of work for the job, and its outcome. */
typedef struct op_s {
  int kind; /* kvp__tier_kind_t, or -1: delete a moved block's source */
  uint64_t hash, parent, bytes;
  uint32_t tokens;
  int has_parent;
  uint32_t from, to; /* volume indexes; to unused for evict/delete */
  int64_t journal_id;
  int rc;
  int src_missing; /* a demotion's source was not in its volume */
  char err[256];
} op_t;

/* A committed move whose source waits for the grace period. */
typedef struct pend_s {
  uint64_t hash, due_ms;
  uint32_t from;
  int deleting; /* handed to the running job */
  int64_t journal_id;
} pend_t;

struct kvp__tier_engine_s {
  uv_loop_t *loop;
  kvp__adv_index_t *ix;
  char ns[64], db_path[512];
  kvp__tier_params_t prm;
  uint64_t interval_ms, grace_ms;
  size_t max_moves;
  double max_bytes_per_s; /* 0: no throttle */
  double budget;          /* bytes the throttle lets through now (may go negative) */
  uint64_t budget_ms;     /* when the budget was last refilled */
  uint64_t hits[KVP__TIER_HITS_MAX]; /* G4 hits since the last round (kvp__tier_engine_hit) */
  size_t nhits;
  size_t round_taken;     /* moves taken this round (max_moves) */
  vol_t *vols;
  size_t nvols;
  uint16_t advisor_worker;
  kvp_publisher_t *pub; /* the moves as events of worker _advisor; NULL: not published */
  uint64_t published, publish_errors;
  sqlite3 *db; /* the journal's connection: the job's, or the loop's before start */
  uv_timer_t timer;
  int timer_ready, running;
  uv_work_t work;
  op_t *ops;
  size_t nops, ops_cap;
  int busy;
  pend_t *pend;
  size_t npend, pend_cap;
  void (*on_idle)(void *ctx);
  void *idle_ctx;
  kvp__tier_stats_t st;
  /* Candidate scratch, reused across rounds. */
  kvp__tier_cand_t *cands;
  size_t ncands, cands_cap;
  uint32_t *tokens;
  size_t tokens_cap;
  uint64_t *lru;
  size_t lru_cap;
  kvp__adv_loc_t *locs; /* one block's locations (get_block) */
  size_t locs_cap;
};

/* Whether a move copies a block (a demotion, promotion or prefetch), as
 * opposed to deleting one. */
static int is_copy(int kind) {
  return kind == KVP__TIER_DEMOTE || kind == KVP__TIER_PROMOTE || kind == KVP__TIER_PREFETCH;
}

/* --- the job (thread pool) --------------------------------------------------- */

/* Reads block hash from v into *buf (grown as needed), verified. */
static int read_block(kvp_volume_t *v, const char *ns, uint64_t hash, void **buf, size_t *cap,
                      kvp_frame_t *meta, char *err, size_t errlen) {
  int rc = kvp_volume_get_block(v, ns, hash, meta, *buf, *cap, err, errlen);
  if (rc == KVP_ETOOBIG) {
    void *p = realloc(*buf, (size_t)meta->payload_len);
    if (p == NULL)
      return KVP_ENOMEM;
    *buf = p;
    *cap = (size_t)meta->payload_len;
    rc = kvp_volume_get_block(v, ns, hash, meta, *buf, *cap, err, errlen);
  }
  return rc;
}

/* The I/O of one op; the journal is written around it by job_work. */
static void do_io(kvp__tier_engine_t *e, op_t *o, void **a, size_t *acap, void **b, size_t *bcap) {
  vol_t *from = &e->vols[o->from], *to = is_copy(o->kind) ? &e->vols[o->to] : NULL;
  kvp_frame_t m, back;

  if (o->kind < 0 || o->kind == KVP__TIER_EVICT) {
    o->rc = kvp_volume_delete(from->v, e->ns, o->hash, o->err, sizeof o->err);
    if (o->rc == KVP_ENOENT)
      o->rc = 0; /* gone already: the goal */
    return;
  }
  o->rc = read_block(from->v, e->ns, o->hash, a, acap, &m, o->err, sizeof o->err);
  o->src_missing = o->rc == KVP_ENOENT;
  if (o->rc == 0)
    o->rc = kvp_volume_put_block(to->v, e->ns, &m, *a, o->err, sizeof o->err);
  /* Committed means the destination's frame was read back and verified. */
  if (o->rc == 0)
    o->rc = read_block(to->v, e->ns, o->hash, b, bcap, &back, o->err, sizeof o->err);
  if (o->rc == 0 && back.checksum != m.checksum) {
    snprintf(o->err, sizeof o->err, "volume %s: block %016" PRIx64 " read back differs", to->name,
             o->hash);
    o->rc = KVP_ECORRUPT;
  }
  if (o->rc == 0) {
    o->bytes = m.payload_len;
  } else if (o->rc != KVP_ENOENT) {
    char ignore[256];
    kvp_volume_delete(to->v, e->ns, o->hash, ignore, sizeof ignore); /* a partial copy */
  }
}

/* The job: the journal in three transactions around the I/O (queued, then
 * copying, then each move's outcome), so that a crash at any point leaves
 * rows that open can resume or roll back. */
static void job_work(uv_work_t *req) {
  kvp__tier_engine_t *e = req->data;
  void *a = NULL, *b = NULL;
  size_t acap = 0, bcap = 0;
  uint64_t now = kvp__unix_ms();

  kvp__tier_journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++) {
    op_t *o = &e->ops[i];
    if (o->kind >= 0)
      o->journal_id = kvp__tier_journal_insert(
          e->db, o->hash, e->vols[o->from].tier, e->vols[o->from].name,
          is_copy(o->kind) ? e->vols[o->to].tier : 0, is_copy(o->kind) ? e->vols[o->to].name : "",
          o->bytes, now);
  }
  kvp__tier_journal_commit(e->db);
  kvp__tier_journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++)
    if (is_copy(e->ops[i].kind))
      kvp__tier_journal_set(e->db, e->ops[i].journal_id, "copying", NULL);
  kvp__tier_journal_commit(e->db);
  for (size_t i = 0; i < e->nops; i++)
    do_io(e, &e->ops[i], &a, &acap, &b, &bcap);
  kvp__tier_journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++) {
    const op_t *o = &e->ops[i];
    const char *state = o->rc != 0 ? "failed" : is_copy(o->kind) ? "committed" : "source_deleted";
    kvp__tier_journal_set(e->db, o->journal_id, state, o->rc ? o->err : NULL);
  }
  kvp__tier_journal_commit(e->db);
  free(a);
  free(b);
}

/* Looks hash up with all its locations, however many workers hold it, into
 * the engine's location scratch (e->locs). Returns 0 or KVP_ENOENT /
 * KVP_ENOMEM. */
static int get_block(kvp__tier_engine_t *e, uint64_t hash, kvp__adv_block_t *b, size_t *n) {
  int rc = kvp__adv_index_get(e->ix, hash, b, e->locs, e->locs_cap, n);
  if (rc == 0 && *n > e->locs_cap) {
    if (KVP_ARRAY_RESERVE(e->locs, e->locs_cap, *n, 64) != 0)
      return KVP_ENOMEM;
    rc = kvp__adv_index_get(e->ix, hash, b, e->locs, e->locs_cap, n);
  }
  return rc;
}

/* Removes every location of hash in (tier, volume), whoever holds it. */
static void drop_locations(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v) {
  size_t n = 0;
  if (get_block(e, hash, NULL, &n) != 0)
    return;
  /* Backwards: a removal does not move the locations before it in e->locs
   * (the copy), and the index is asked for each one by its key. */
  for (size_t i = n; i-- > 0;)
    if (e->locs[i].tier == v->tier && e->locs[i].volume == v->id)
      kvp__adv_index_remove(e->ix, hash, e->locs[i].worker, v->tier, v->id);
}

/* Tells workers and routers (and this advisor, through the stream) about a
 * move, as worker _advisor: Stored in the destination once the copy is
 * verified, Removed from the source once it is deleted. The publisher is
 * thread-safe and drops rather than blocks the loop when its queue is full
 * (counted). */
static void publish(kvp__tier_engine_t *e, int type, const vol_t *v, const op_t *o) {
  if (e->pub == NULL)
    return;
  int rc = type == KVP_EV_STORED
               ? kvp_publisher_stored(e->pub, v->tier, v->name, o->has_parent ? &o->parent : NULL,
                                      &o->hash, 1, o->tokens, o->bytes, 0)
               : kvp_publisher_removed(e->pub, v->tier, v->name, &o->hash, 1);
  if (rc == 0)
    e->published++;
  else
    e->publish_errors++;
}

/* The pend entry of a source delete that ran: gone when it succeeded, due
 * again when it failed. */
static void pend_done(kvp__tier_engine_t *e, uint64_t hash, uint32_t from, int ok) {
  for (size_t i = 0; i < e->npend; i++)
    if (e->pend[i].hash == hash && e->pend[i].from == from && e->pend[i].deleting) {
      if (ok)
        e->pend[i] = e->pend[--e->npend];
      else
        e->pend[i].deleting = 0;
      return;
    }
}

static void job_after(uv_work_t *req, int status) {
  kvp__tier_engine_t *e = req->data;
  uint64_t now = kvp__unix_ms();

  (void)status;
  for (size_t i = 0; i < e->nops; i++) {
    op_t *o = &e->ops[i];
    vol_t *from = &e->vols[o->from];
    if (o->kind < 0)
      pend_done(e, o->hash, o->from, o->rc == 0);
    if (o->rc != 0 && o->src_missing) {
      /* The index placed a block where it is not (a location replayed
       * after a crash, a block deleted behind the advisor's back): the
       * location goes, so the index heals where the engine looks. */
      drop_locations(e, o->hash, from);
      e->st.failed++;
      from->st.missing++;
      kvp_log_warn("tiering: block %016" PRIx64 " is not in %s: its location there is dropped",
                   o->hash, from->name);
      continue;
    }
    if (o->rc != 0) {
      e->st.failed++;
      if (is_copy(o->kind) && o->rc == KVP_ENOSPC)
        e->vols[o->to].st.failed_full++;
      else
        from->st.failed_other++;
      if (is_copy(o->kind) && o->rc == KVP_ENOSPC)
        e->vols[o->to].backoff_until_ms = now + BACKOFF_MS;
      kvp_log_warn("tiering: %s of block %016" PRIx64 " from %s failed: %s%s",
                   o->kind < 0 ? "source delete" : kvp__tier_kind_name(o->kind), o->hash,
                   from->name, o->err, o->rc == KVP_ENOSPC ? " (no moves into it for 30 s)" : "");
      continue;
    }
    if (o->kind < 0 || o->kind == KVP__TIER_EVICT) {
      drop_locations(e, o->hash, from);
      if (o->kind < 0)
        e->st.sources_deleted++;
      else {
        e->st.evicted++;
        from->st.evicted++;
      }
      publish(e, KVP_EV_REMOVED, from, o);
    } else {
      vol_t *to = &e->vols[o->to];
      publish(e, KVP_EV_STORED, to, o);
      kvp__adv_index_store(e->ix, o->hash, o->has_parent, o->parent, e->advisor_worker, to->tier,
                           to->id, o->tokens, o->bytes, now);
      if (o->kind == KVP__TIER_DEMOTE)
        e->st.demoted++;
      else
        e->st.promoted++;
      if (o->kind == KVP__TIER_PREFETCH)
        e->st.prefetched++;
      from->st.moved_out++;
      from->st.bytes_out += o->bytes;
      to->st.moved_in++;
      to->st.bytes_in += o->bytes;
      e->st.bytes_moved += o->bytes;
      e->st.bytes_tiers[from->tier][to->tier] += o->bytes; /* volumes are G3 or G4 (conf.c) */
      if (KVP_ARRAY_RESERVE(e->pend, e->pend_cap, e->npend + 1, 64) == 0)
        e->pend[e->npend++] = (pend_t){o->hash, now + e->grace_ms, o->from, 0, o->journal_id};
    }
  }
  e->nops = 0;
  e->busy = 0;
  if (e->on_idle != NULL) {
    void (*f)(void *) = e->on_idle;
    e->on_idle = NULL;
    f(e->idle_ctx);
  }
}

/* --- rounds (loop thread) ------------------------------------------------------ */

static long vol_of(const kvp__tier_engine_t *e, int tier, uint16_t id) {
  for (size_t v = 0; v < e->nvols; v++)
    if (e->vols[v].tier == tier && e->vols[v].id == id)
      return (long)v;
  return -1;
}

/* Whether hash's copy in volume v is a moved block's source waiting for its
 * grace period (or any volume, v < 0). */
static int pending(const kvp__tier_engine_t *e, uint64_t hash, long v) {
  for (size_t i = 0; i < e->npend; i++)
    if (e->pend[i].hash == hash && (v < 0 || e->pend[i].from == (uint32_t)v))
      return 1;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Every G3/G4 location in a configured volume, with its block's figures;
 * tokens[i] is candidate i's token count; used[v] and blocks[v] sum the
 * bytes and blocks of volume v, not counting sources of finished moves. */
static int build_candidates(kvp__tier_engine_t *e, uint64_t *used, uint64_t *blocks) {
  kvp__adv_index_stats_t st;
  kvp__adv_index_stats(e->ix, &st);
  e->ncands = 0;
  for (int tier = 3; tier <= 4; tier++) {
    size_t want = st.tier_locations[tier];
    if (want == 0)
      continue;
    if (KVP_ARRAY_RESERVE(e->lru, e->lru_cap, want, 1024) != 0)
      return KVP_ENOMEM;
    size_t n = kvp__adv_index_lru(e->ix, tier, e->lru, want);
    /* One entry per location: a block in two volumes of the tier appears
     * twice, and each of its locations is taken once below. */
    qsort(e->lru, n, sizeof *e->lru, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
      if (u == 0 || e->lru[u - 1] != e->lru[i])
        e->lru[u++] = e->lru[i];
    n = u;
    for (size_t i = 0; i < n; i++) {
      kvp__adv_block_t b;
      size_t nl = 0;
      if (get_block(e, e->lru[i], &b, &nl) != 0)
        continue;
      const kvp__adv_loc_t *locs = e->locs;
      for (size_t k = 0; k < nl; k++) {
        long v = locs[k].tier == tier ? vol_of(e, tier, locs[k].volume) : -1;
        if (v < 0)
          continue;
        if (KVP_ARRAY_RESERVE(e->cands, e->cands_cap, e->ncands + 1, 1024) != 0 ||
            KVP_ARRAY_RESERVE(e->tokens, e->tokens_cap, e->ncands + 1, 1024) != 0)
          return KVP_ENOMEM;
        /* A moved block's source no longer counts in its volume's fill:
         * it goes once the grace period is over. */
        int moved = pending(e, b.hash, v);
        e->tokens[e->ncands] = b.tokens;
        e->cands[e->ncands++] =
            (kvp__tier_cand_t){.hash = b.hash,
                               .parent = b.parent,
                               .has_parent = b.parent != b.hash,
                               .busy = (uint8_t)(moved || pending(e, b.hash, -1)),
                               .vol = (uint32_t)v,
                               .bytes = b.bytes,
                               .last_access_ms = b.last_access_ms,
                               .freq = b.freq,
                               .since_ms = b.last_access_ms};
        if (!moved) {
          used[v] += b.bytes;
          blocks[v]++;
        }
      }
    }
  }
  return 0;
}

/* Adds moves to the job's ops in order, up to max_moves per round and, with
 * a bytes/s throttle, while the budget lasts (a move larger than what is
 * left still goes when some is left: the budget goes negative and the next
 * rounds pay it back). A hash among ops[dedup_from, dedup_to) is skipped
 * (dedup_to SIZE_MAX: up to the last op taken). */
static void take_moves(kvp__tier_engine_t *e, const kvp__tier_move_t *moves, size_t nmoves,
                       size_t dedup_from, size_t dedup_to) {
  for (size_t i = 0; i < nmoves; i++) {
    const kvp__tier_move_t *m = &moves[i];
    int dup = 0;
    for (size_t k = dedup_from; k < e->nops && k < dedup_to && !dup; k++)
      dup = e->ops[k].hash == m->hash;
    if (dup)
      continue;
    if (e->round_taken >= e->max_moves)
      return;
    if (e->max_bytes_per_s > 0 && is_copy(m->kind) && e->budget <= 0) {
      e->st.throttled += nmoves - i;
      return;
    }
    /* The candidate's block figures (the first candidate of that hash). */
    size_t c = 0;
    while (c < e->ncands && !(e->cands[c].hash == m->hash && e->cands[c].vol == m->from))
      c++;
    if (c == e->ncands || KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      continue;
    e->ops[e->nops++] = (op_t){.kind = m->kind,
                               .hash = m->hash,
                               .parent = e->cands[c].parent,
                               .has_parent = e->cands[c].has_parent,
                               .bytes = m->bytes,
                               .tokens = e->tokens[c],
                               .from = m->from,
                               .to = m->to,
                               .journal_id = -1};
    e->round_taken++;
    if (e->max_bytes_per_s > 0 && is_copy(m->kind))
      e->budget -= (double)m->bytes;
  }
}

/* Most G4 hits whose prefixes one round prefetches. */
#define PREFETCH_HITS 16

/* The prefetches of this round: for each G4 hit since the last round
 * (kvp__tier_engine_hit) whose block is in a G4 volume and in no G3 one,
 * its descendants in G4, into G3 (kvp__tier_prefetch); at most
 * PREFETCH_HITS distinct hits. pv is updated as if they were done. */
static void plan_prefetches(kvp__tier_engine_t *e, kvp__tier_vol_t *pv, uint64_t now,
                            kvp__tier_move_t **out, size_t *nout) {
  uint64_t *g3 = NULL, *g4 = NULL;
  size_t done = 0, cap = 0, n3 = 0, n4 = 0;

  *out = NULL;
  *nout = 0;
  if (e->nhits == 0)
    return;
  /* The hashes in G3 and in G4, sorted. */
  if ((g3 = malloc((e->ncands ? e->ncands : 1) * sizeof *g3)) == NULL ||
      (g4 = malloc((e->ncands ? e->ncands : 1) * sizeof *g4)) == NULL)
    goto out;
  for (size_t i = 0; i < e->ncands; i++) {
    if (pv[e->cands[i].vol].tier == 3)
      g3[n3++] = e->cands[i].hash;
    else
      g4[n4++] = e->cands[i].hash;
  }
  qsort(g3, n3, sizeof *g3, cmp_u64);
  qsort(g4, n4, sizeof *g4, cmp_u64);
  qsort(e->hits, e->nhits, sizeof *e->hits, cmp_u64);
  for (size_t i = 0; i < e->nhits && done < PREFETCH_HITS; i++) {
    uint64_t h = e->hits[i];
    if ((i > 0 && e->hits[i - 1] == h) || bsearch(&h, g4, n4, sizeof *g4, cmp_u64) == NULL ||
        bsearch(&h, g3, n3, sizeof *g3, cmp_u64) != NULL)
      continue;
    kvp__tier_move_t *m = NULL;
    size_t nm = 0;
    if (kvp__tier_prefetch(&e->prm, pv, e->nvols, e->cands, e->ncands, h, now, &m, &nm) != 0)
      break;
    done++;
    if (nm > 0 && KVP_ARRAY_RESERVE(*out, cap, *nout + nm, 64) == 0) {
      memcpy(*out + *nout, m, nm * sizeof *m);
      *nout += nm;
    }
    free(m);
  }
out:
  free(g3);
  free(g4);
}

void kvp__tier_engine_hit(kvp__tier_engine_t *e, uint64_t hash) {
  if (e->prm.prefetch_depth == 0)
    return;
  if (e->nhits == KVP__TIER_HITS_MAX) {
    e->st.hits_dropped++;
    return;
  }
  e->hits[e->nhits++] = hash;
}

void kvp__tier_engine_round(kvp__tier_engine_t *e) {
  uint64_t now = kvp__unix_ms();
  kvp__tier_vol_t pv[KVP_ADVISOR_MAX_VOLUMES];
  uint64_t used[KVP_ADVISOR_MAX_VOLUMES] = {0}, blocks[KVP_ADVISOR_MAX_VOLUMES] = {0};
  kvp__tier_move_t *moves = NULL;
  size_t nmoves = 0;

  if (e->busy)
    return;
  e->st.rounds++;
  e->nops = 0;
  /* Sources whose grace period is over. Entries stay in pend until the job
   * is done, so that the blocks are neither planned again nor counted in
   * their source's fill meanwhile. */
  for (size_t i = 0; i < e->npend; i++) {
    if (e->pend[i].due_ms > now || e->pend[i].deleting)
      continue;
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      break;
    e->ops[e->nops++] = (op_t){.kind = -1,
                               .hash = e->pend[i].hash,
                               .from = e->pend[i].from,
                               .journal_id = e->pend[i].journal_id};
    e->pend[i].deleting = 1;
  }
  int built = build_candidates(e, used, blocks) == 0;
  if (built) {
    for (size_t v = 0; v < e->nvols; v++) {
      e->vols[v].st.used = used[v];
      e->vols[v].st.blocks = blocks[v];
    }
    for (size_t v = 0; v < e->nvols; v++)
      pv[v] = (kvp__tier_vol_t){.tier = e->vols[v].tier,
                                .capacity = e->vols[v].capacity,
                                .used = used[v],
                                .backoff_until_ms = e->vols[v].backoff_until_ms};
    if (kvp__tier_plan(&kvp__tier_policy_lru, &e->prm, pv, e->nvols, e->cands, e->ncands, now,
                       &moves, &nmoves) != 0)
      nmoves = 0;
  }
  /* Prefetch first: G4 blocks workers read since the last round bring their
   * descendants in G4 to G3. Then the plan's
   * moves, already in priority order (demotion for space, promotion,
   * eviction). */
  kvp__tier_move_t *pre = NULL;
  size_t npre = 0, first = e->nops;
  if (e->max_bytes_per_s > 0) {
    double add = e->max_bytes_per_s * (double)(now - e->budget_ms) / 1000.0;
    e->budget = e->budget + add < e->max_bytes_per_s ? e->budget + add : e->max_bytes_per_s;
    e->budget_ms = now;
  }
  e->round_taken = 0;
  if (built && e->ncands > 0)
    plan_prefetches(e, pv, now, &pre, &npre);
  e->nhits = 0;
  take_moves(e, pre, npre, first, SIZE_MAX);
  take_moves(e, moves, nmoves, first, e->nops);
  free(pre);
  free(moves);
  if (e->nops == 0)
    return;
  e->busy = 1;
  e->work.data = e;
  if (uv_queue_work(e->loop, &e->work, job_work, job_after) != 0) {
    job_work(&e->work);
    job_after(&e->work, 0);
  }
}

static void on_timer(uv_timer_t *t) {
  kvp__tier_engine_round(t->data);
}

/* --- open, recovery, close ---------------------------------------------------- */

static int open_volume(kvp__tier_engine_t *e, const kvp_advisor_config_t *cfg,
                       const kvp_advisor_volume_t *c, vol_t *v, char *err, size_t errlen) {
  kvp_volume_param_t p[32];
  size_t np = 0;
  char buf[sizeof c->params];
  snprintf(buf, sizeof buf, "%s", c->params);
  for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line && np < 32;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    p[np++] = (kvp_volume_param_t){line, eq + 1};
  }
  snprintf(v->name, sizeof v->name, "%s", c->name);
  v->tier = c->tier;
  v->capacity = (uint64_t)c->capacity;
  int rc = kvp_volume_open(cfg->plugin_dir[0] ? cfg->plugin_dir : NULL, c->plugin, c->name, p, np,
                           &v->v, err, errlen);
  if (rc == 0)
    rc = kvp__adv_index_volume(e->ix, c->name, &v->id);
  return rc;
}

/* One unfinished move of an earlier run: a move that did not commit is
 * failed and its partial copy deleted; an eviction is finished or failed by
 * whether its object is still there; a committed move is recorded at its
 * destination again and its source deleted after the grace period. */
static void recover_row(void *ctx, int64_t id, uint64_t hash, const char *fv, const char *tv,
                        const char *state) {
  kvp__tier_engine_t *e = ctx;
  long from = -1, to = -1;
  char err[256];
  kvp__adv_block_t b;

  for (size_t v = 0; v < e->nvols; v++) {
    if (fv && strcmp(e->vols[v].name, fv) == 0)
      from = (long)v;
    if (tv && strcmp(e->vols[v].name, tv) == 0)
      to = (long)v;
  }
  if (strcmp(state, "committed") != 0 && (tv == NULL || tv[0] == '\0') && from >= 0) {
    int gone = kvp_volume_exists(e->vols[from].v, e->ns, hash) == 0;
    if (gone)
      drop_locations(e, hash, &e->vols[from]);
    kvp__tier_journal_set(e->db, id, gone ? "source_deleted" : "failed",
                          gone ? NULL : "interrupted by a restart; the block stays");
  } else if (strcmp(state, "committed") != 0) {
    if (to >= 0)
      kvp_volume_delete(e->vols[to].v, e->ns, hash, err, sizeof err); /* a partial copy */
    kvp__tier_journal_set(e->db, id, "failed", "interrupted by a restart before it committed");
    kvp_log_info("tiering: move %" PRId64 " of %016" PRIx64 " interrupted; the source stays", id,
                 hash);
  } else if (from >= 0 && to >= 0 && kvp__adv_index_get(e->ix, hash, &b, NULL, 0, NULL) == 0) {
    kvp__adv_index_store(e->ix, hash, b.parent != hash, b.parent, e->advisor_worker,
                         e->vols[to].tier, e->vols[to].id, b.tokens, b.bytes, kvp__unix_ms());
    if (KVP_ARRAY_RESERVE(e->pend, e->pend_cap, e->npend + 1, 64) == 0)
      e->pend[e->npend++] = (pend_t){hash, kvp__unix_ms() + e->grace_ms, (uint32_t)from, 0, id};
    kvp_log_info("tiering: move %" PRId64 " of %016" PRIx64 " committed before a restart; its "
                 "source is deleted after the grace period",
                 id, hash);
  } else {
    kvp__tier_journal_set(e->db, id, "failed",
                          "committed, but its volumes or block are gone; source kept");
  }
}

/* A move finished (source deleted) shortly before the last flush or after
 * it: the index as loaded may miss its destination location or still hold
 * its source location, if the process died before a flush wrote them.
 * What the volumes hold decides: a destination copy there is recorded, a
 * source copy no longer there is dropped. Idempotent. */
static void reconcile_row(void *ctx, int64_t id, uint64_t hash, const char *fv, const char *tv,
                          const char *state) {
  kvp__tier_engine_t *e = ctx;
  long from = -1, to = -1;
  kvp__adv_block_t b;

  (void)id;
  (void)state;
  for (size_t v = 0; v < e->nvols; v++) {
    if (fv && strcmp(e->vols[v].name, fv) == 0)
      from = (long)v;
    if (tv && tv[0] && strcmp(e->vols[v].name, tv) == 0)
      to = (long)v;
  }
  if (kvp__adv_index_get(e->ix, hash, &b, NULL, 0, NULL) != 0)
    return; /* the block left the index (a clear, a worker down): nothing to fix */
  if (to >= 0 && kvp_volume_exists(e->vols[to].v, e->ns, hash) == 1)
    kvp__adv_index_store(e->ix, hash, b.parent != hash, b.parent, e->advisor_worker,
                         e->vols[to].tier, e->vols[to].id, b.tokens, b.bytes, b.last_access_ms);
  if (from >= 0 && kvp_volume_exists(e->vols[from].v, e->ns, hash) == 0)
    drop_locations(e, hash, &e->vols[from]);
}

/* Margin of kvp__tier_journal_recent: a job's final journal commit and its
 * effects on the index (job_after) are this close at most in practice. */
#define RECONCILE_MARGIN_MS 10000

int kvp__tier_engine_open(const kvp_advisor_config_t *cfg, uv_loop_t *loop, kvp__adv_index_t *ix,
                          kvp__tier_engine_t **out, char *err, size_t errlen) {
  kvp__tier_engine_t *e = calloc(1, sizeof *e);
  int rc;

  *out = NULL;
  if (e == NULL)
    return KVP_ENOMEM;
  e->loop = loop;
  e->ix = ix;
  snprintf(e->ns, sizeof e->ns, "%s", cfg->ns);
  snprintf(e->db_path, sizeof e->db_path, "%s", cfg->db_path);
  kvp__tier_params_init(&e->prm);
  e->prm.high_watermark = cfg->tier_high;
  e->prm.low_watermark = cfg->tier_low;
  e->prm.promote_freq = cfg->tier_promote_freq;
  e->prm.keep_freq = cfg->tier_keep_freq;
  e->prm.min_residence_ms = (uint64_t)cfg->tier_residence_ms;
  e->interval_ms = (uint64_t)cfg->tier_interval_ms;
  e->grace_ms = (uint64_t)cfg->tier_grace_ms;
  e->max_moves = (size_t)cfg->tier_max_moves;
  e->max_bytes_per_s = (double)cfg->tier_max_bytes_per_s;
  e->budget = e->max_bytes_per_s;
  e->budget_ms = kvp__unix_ms();
  e->prm.prefetch_depth = (uint32_t)cfg->tier_prefetch_depth;
  e->prm.prefetch_bytes = (uint64_t)cfg->tier_prefetch_bytes;
  if ((rc = kvp__tier_params_check(&e->prm, err, errlen)) != 0)
    goto fail;
  rc = KVP_ENOMEM;
  if ((e->vols = calloc((size_t)cfg->nvolumes + 1, sizeof *e->vols)) == NULL)
    goto fail;
  for (int i = 0; i < cfg->nvolumes; i++) {
    if ((rc = open_volume(e, cfg, &cfg->volumes[i], &e->vols[i], err, errlen)) != 0)
      goto fail;
    e->nvols++;
  }
  if ((rc = kvp__adv_index_worker(ix, ADVISOR_WORKER, 0, &e->advisor_worker)) != 0) {
    snprintf(err, errlen, "tiering: cannot register worker %s: %s", ADVISOR_WORKER,
             kvp_strerror(rc));
    goto fail;
  }
  if ((rc = kvp__tier_journal_open(cfg->db_path, &e->db, err, errlen)) != 0)
    goto fail;
  if (cfg->nats.servers[0] != '\0') {
    kvp_publisher_opts_t po;
    char why[512];
    kvp_publisher_opts_init(&po);
    po.nats = cfg->nats;
    po.ns = cfg->ns;
    po.worker_id = ADVISOR_WORKER;
    po.model = "kvplane-advisor";
    po.mode = cfg->mode == KVP_ADVISOR_JETSTREAM ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
    po.stream = cfg->stream;
    po.overflow = KVP_OVERFLOW_DROP;
    po.snapshot_tiers = 0;
    if ((rc = kvp_publisher_open(&po, &e->pub, why, sizeof why)) != 0) {
      snprintf(err, errlen, "tiering: the publisher of worker %s: %s", ADVISOR_WORKER, why);
      goto fail;
    }
  }
  for (size_t v = 0; v < e->nvols && rc == 0; v++)
    rc = kvp__tier_journal_volume(e->db, e->vols[v].name, e->vols[v].tier, e->vols[v].capacity,
                                  kvp__unix_ms());
  if (rc == 0)
    rc = kvp__tier_journal_recent(e->db, RECONCILE_MARGIN_MS, reconcile_row, e);
  if (rc == 0)
    rc = kvp__tier_journal_unfinished(e->db, recover_row, e);
  if (rc != 0) {
    snprintf(err, errlen, "tiering: %s: the volumes or migrations tables: %s", cfg->db_path,
             sqlite3_errmsg(e->db));
    goto fail;
  }
  if (uv_timer_init(loop, &e->timer) != 0) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  e->timer.data = e;
  e->timer_ready = 1;
  kvp_log_info("tiering: %zu volumes, watermarks %.2f/%.2f, every %" PRIu64 " ms", e->nvols,
               e->prm.low_watermark, e->prm.high_watermark, e->interval_ms);
  *out = e;
  return 0;
fail:
  kvp__tier_engine_close(e);
  return rc;
}

void kvp__tier_engine_start(kvp__tier_engine_t *e) {
  e->running = 1;
  uv_timer_start(&e->timer, on_timer, e->interval_ms, e->interval_ms);
}

int kvp__tier_engine_busy(const kvp__tier_engine_t *e) {
  return e->busy;
}

void kvp__tier_engine_stop(kvp__tier_engine_t *e, void (*done)(void *ctx), void *ctx) {
  if (e->timer_ready && e->running)
    uv_timer_stop(&e->timer);
  e->running = 0;
  if (e->busy) {
    e->on_idle = done;
    e->idle_ctx = ctx;
    return;
  }
  if (done)
    done(ctx);
}

size_t kvp__tier_engine_volumes(const kvp__tier_engine_t *e, kvp__tier_vol_stats_t *out,
                                size_t cap) {
  for (size_t v = 0; v < e->nvols && v < cap; v++) {
    out[v] = e->vols[v].st;
    snprintf(out[v].name, sizeof out[v].name, "%s", e->vols[v].name);
    out[v].tier = e->vols[v].tier;
    out[v].capacity = e->vols[v].capacity;
    out[v].backoff = e->vols[v].backoff_until_ms > kvp__unix_ms();
    out[v].queued = 0;
    for (size_t i = 0; i < e->npend; i++)
      out[v].queued += e->pend[i].from == v;
  }
  return e->nvols;
}

void kvp__tier_engine_stats(const kvp__tier_engine_t *e, kvp__tier_stats_t *st) {
  *st = e->st;
  st->events_published = e->published;
  st->events_dropped = e->publish_errors;
}

static void free_engine(uv_handle_t *h) {
  kvp__tier_engine_t *e = h->data;
  free(e);
}

void kvp__tier_engine_close(kvp__tier_engine_t *e) {
  if (e == NULL)
    return;
  kvp_publisher_close(e->pub); /* flushes what is queued, within its close timeout */
  for (size_t v = 0; v < e->nvols; v++)
    kvp_volume_close(e->vols[v].v);
  free(e->vols);
  sqlite3_close(e->db);
  free(e->ops);
  free(e->pend);
  free(e->cands);
  free(e->tokens);
  free(e->lru);
  free(e->locs);
  if (e->timer_ready && !uv_is_closing((uv_handle_t *)&e->timer)) {
    uv_close((uv_handle_t *)&e->timer, free_engine); /* the loop frees it */
    return;
  }
  free(e);
}
