/* The tiering engine (see engine.h): the rounds on the loop thread, and
 * start, stop, figures and close. The job is in engine_job.c, opening and
 * recovery in engine_open.c (engine_impl.h lists what they share); the
 * journal's SQL is in journal.c and the rules in policy.c.
 *
 * Why this file is long: a round builds candidates, applies the one-copy
 * rule, plans, prefetches and throttles over the same scratch arrays; it
 * reads as one pass.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"
#include "store/journal.h"

/* --- rounds (loop thread) ------------------------------------------------------ */

/* Whether hash's copy in volume v is a moved block's source waiting for its
 * grace period (or any volume, v < 0). */
static int pending(kvp__tier_engine_t *e, uint64_t hash, long v) {
  const uint64_t *mask = kvp__map64_find(&e->pendset, hash);
  return mask != NULL && (v < 0 || (*mask >> v & 1));
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The G4 volume + 1 of a copy of hash that can stand for its G3 one of
 * part (in an online G4 volume, of the same part: under the key namespace
 * the G3 copy's worker reads, not a moved block's source, reads not
 * backing off), or 0. */
static uint32_t g4_copy(kvp__tier_engine_t *e, uint64_t hash, const kvp__index_loc_t *locs,
                        size_t nl, int part, uint64_t now) {
  for (size_t k = 0; k < nl; k++) {
    long v = locs[k].tier == 4 ? kvp__tier_vol_of(e, 4, locs[k].volume) : -1;
    if (v >= 0 && kvp__tier_part_of(e, locs[k].worker) != part)
      continue;
    if (v >= 0 && !e->vols[v].offline && e->vols[v].out_until_ms <= now && !pending(e, hash, v))
      return (uint32_t)v + 1;
  }
  return 0;
}

/* Every G3/G4 location in a configured volume, with its block's figures;
 * tokens[i] is candidate i's token count; used[v] and blocks[v] sum the
 * bytes and blocks of volume v, not counting sources of finished moves. */
static int build_candidates(kvp__tier_engine_t *e, uint64_t now, uint64_t *used, uint64_t *blocks) {
  kvp__index_stats_t st;
  kvp__index_stats(e->ix, &st);
  e->ncands = 0;
  for (int tier = 3; tier <= 4; tier++) {
    size_t want = st.tier_locations[tier];
    if (want == 0)
      continue;
    if (KVP_ARRAY_RESERVE(e->lru, e->lru_cap, want, 1024) != 0)
      return KVP_ENOMEM;
    size_t n = kvp__index_lru(e->ix, tier, e->lru, want);
    /* One entry per location: a block in two volumes of the tier appears
     * twice, and each of its locations is taken once below. */
    qsort(e->lru, n, sizeof *e->lru, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
      if (u == 0 || e->lru[u - 1] != e->lru[i])
        e->lru[u++] = e->lru[i];
    n = u;
    for (size_t i = 0; i < n; i++) {
      kvp__index_block_t b;
      size_t nl = 0;
      if (kvp__tier_get_block(e, e->lru[i], &b, &nl) != 0)
        continue;
      const kvp__index_loc_t *locs = e->locs;
      for (size_t k = 0; k < nl; k++) {
        long v = locs[k].tier == tier ? kvp__tier_vol_of(e, tier, locs[k].volume) : -1;
        /* The partition filter (parts.c): a location of a worker of a
         * partition this engine does not tier is another advisor's. */
        int part = v >= 0 ? kvp__tier_part_of(e, locs[k].worker) : -1;
        if (part < 0)
          continue;
        if (KVP_ARRAY_RESERVE(e->cands, e->cands_cap, e->ncands + 1, 1024) != 0 ||
            KVP_ARRAY_RESERVE(e->tokens, e->tokens_cap, e->ncands + 1, 1024) != 0 ||
            KVP_ARRAY_RESERVE(e->dup, e->dup_cap, e->ncands + 1, 1024) != 0 ||
            KVP_ARRAY_RESERVE(e->cpart, e->cpart_cap, e->ncands + 1, 1024) != 0)
          return KVP_ENOMEM;
        e->cpart[e->ncands] = (uint16_t)part;
        /* A moved block's source no longer counts in its volume's fill:
         * it goes once the grace period is over. */
        int moved = pending(e, b.hash, v);
        /* Nothing moves out of an offline volume or one whose reads back
         * off. */
        int stuck = e->vols[v].offline || e->vols[v].out_until_ms > now;
        e->tokens[e->ncands] = b.tokens;
        e->dup[e->ncands] = tier == 3 ? g4_copy(e, b.hash, locs, nl, part, now) : 0;
        /* Pinned, or an operator's move or delete waits: the plan leaves
         * it alone (control.c). */
        int held = kvp__map64_find(&e->pinned, b.hash) != NULL ||
                   kvp__map64_find(&e->opset, b.hash) != NULL;
        e->cands[e->ncands++] =
            (kvp__tier_cand_t){.hash = b.hash,
                               .parent = b.parent,
                               .has_parent = b.parent != b.hash,
                               .busy = (uint8_t)(moved || stuck || held || pending(e, b.hash, -1)),
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
    if (e->max_bytes_per_s > 0 && kvp__tier_is_copy(m->kind) && e->budget <= 0) {
      e->st.throttled += nmoves - i;
      return;
    }
    size_t c = m->cand; /* the candidate's block figures */
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      return;
    e->ops[e->nops++] = (op_t){.kind = m->kind,
                               .part = e->cpart[c],
                               .hash = m->hash,
                               .parent = e->cands[c].parent,
                               .has_parent = e->cands[c].has_parent,
                               .bytes = m->bytes,
                               .tokens = e->tokens[c],
                               .from = m->from,
                               .to = m->to,
                               .journal_id = -1};
    e->round_taken++;
    if (e->max_bytes_per_s > 0 && kvp__tier_is_copy(m->kind))
      e->budget -= (double)m->bytes;
  }
}

/* One copy between G3 and G4 (DESIGN.md, "Migrations"): a block in a G3
 * volume and a G4 one (a worker offloaded to G3 a block the advisor had
 * moved to G4) loses one copy, deleted by the job as an eviction and
 * journaled. The G3 copy goes unless a G3 descendant without a G4 copy
 * needs it (G3 holds whole prefixes, like the policy keeps it): then the
 * G4 copy goes. Copies moving (busy) are left for a later round. The
 * removed copies leave used and blocks, and the block's candidates are
 * marked busy so that the plan leaves them alone this round. */
static void plan_one_copy(kvp__tier_engine_t *e, uint64_t *used, uint64_t *blocks) {
  kvp__map64_t g3 = {0}, keep = {0};
  size_t ndup = 0;

  for (size_t i = 0; i < e->ncands; i++)
    ndup += e->dup[i] != 0 && !e->cands[i].busy;
  if (ndup == 0)
    return;
  if (kvp__map64_init(&g3, e->ncands) != 0 || kvp__map64_init(&keep, ndup) != 0)
    goto out;
  for (size_t i = 0; i < e->ncands; i++)
    if (e->vols[e->cands[i].vol].tier == 3 && kvp__map64_put(&g3, e->cands[i].hash, i) != 0)
      goto out;
  /* The redundant G3 copies a G3 descendant with no G4 copy needs: from
   * each such block up its chain in G3, while its ancestors are
   * redundant. */
  for (size_t i = 0; i < e->ncands; i++) {
    const kvp__tier_cand_t *c = &e->cands[i];
    if (e->vols[c->vol].tier != 3 || (e->dup[i] != 0 && !c->busy))
      continue;
    uint64_t p = c->parent, k;
    for (int up = c->has_parent; up && kvp__map64_get(&g3, p, &k) == 0;
         up = e->cands[k].has_parent, p = e->cands[k].parent) {
      if (e->dup[k] == 0 || e->cands[k].busy || kvp__map64_find(&keep, p) != NULL)
        break;
      if (kvp__map64_put(&keep, p, 1) != 0)
        goto out;
    }
  }
  for (size_t i = 0; i < e->ncands; i++) {
    kvp__tier_cand_t *c = &e->cands[i];
    if (e->dup[i] == 0 || c->busy || e->round_taken >= e->max_moves)
      continue;
    uint64_t *r = kvp__map64_find(&keep, c->hash);
    if (r != NULL && *r == 2)
      continue; /* one of its copies goes this round already */
    uint32_t from = r != NULL ? e->dup[i] - 1 : c->vol;
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      break;
    e->ops[e->nops++] = (op_t){.kind = KVP__TIER_EVICT,
                               .part = e->cpart[i],
                               .hash = c->hash,
                               .parent = c->parent,
                               .has_parent = c->has_parent,
                               .bytes = c->bytes,
                               .tokens = e->tokens[i],
                               .from = from,
                               .journal_id = -1,
                               .redundant = 1};
    e->round_taken++;
    used[from] -= used[from] >= c->bytes ? c->bytes : used[from];
    blocks[from] -= blocks[from] > 0;
    if (kvp__map64_put(&keep, c->hash, 2) != 0) /* 2: resolved this round */
      break;
  }
  for (size_t i = 0; i < e->ncands; i++) {
    uint64_t *r = kvp__map64_find(&keep, e->cands[i].hash);
    if (r != NULL && *r == 2)
      e->cands[i].busy = 1;
  }
out:
  kvp__map64_free(&g3);
  kvp__map64_free(&keep);
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

void kvp__tier_engine_access(kvp__tier_engine_t *e, uint64_t hash, int tier) {
  if (e->pol != NULL)
    kvp__tier_pol_access(e->pol, hash, tier, kvp__unix_ms());
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

/* An offline volume is back when its identity is (the plugin's stat checks
 * it: one stat of the marker for posix). */
static void recheck_offline(kvp__tier_engine_t *e) {
  char err[512];
  kvp_volume_stat_t st;
  for (size_t v = 0; v < e->nvols; v++) {
    vol_t *vol = &e->vols[v];
    if (!vol->offline || kvp_volume_stat(vol->v, &st, err, sizeof err) != 0)
      continue;
    vol->offline = 0;
    vol->st.offline = 0;
    vol->fails = 0;
    __atomic_store_n(&vol->offline_job, 0, __ATOMIC_RELAXED);
    vol->log_ms = 0;
    kvp_log_info("tiering: volume %s is back online", vol->name);
  }
}

void kvp__tier_engine_round(kvp__tier_engine_t *e) {
  uint64_t now = kvp__unix_ms();
  kvp__tier_vol_t pv[KVP__TIER_MAX_VOLUMES];
  uint64_t used[KVP__TIER_MAX_VOLUMES] = {0}, blocks[KVP__TIER_MAX_VOLUMES] = {0};
  kvp__tier_move_t *moves = NULL;
  size_t nmoves = 0;

  kvp__tier_parts_poll(e); /* resyncs are answered while a job runs too */
  if (e->busy)
    return;
  /* Unpartitioned with a lease (engine.h, the gate): no round at all while
   * another advisor holds it, so nothing is planned, scrubbed or
   * compacted here; a partitioned engine waits per partition instead
   * (kvp__tier_engine_partition, add -1). */
  if (e->gate != NULL && e->partitions == 0 &&
      (!e->gate(e->gate_ctx, 0) ||
       (e->leased && kvp__tier_parts_publish(e) && e->parts[0].pub == NULL)))
    return; /* not held, or its moves could not be announced yet */
  e->st.rounds++;
  e->nops = 0;
  recheck_offline(e);
  kvp__tier_scrub_queue(e, now);
  kvp__tier_compact_queue(e, now);
  kvp__tier_pins_rebuild(e);
  kvp__tier_control_take(e);
  /* Sources whose grace period is over. Entries stay in pend until the job
   * is done, so that the blocks are neither planned again nor counted in
   * their source's fill meanwhile. */
  for (size_t i = 0; i < e->npend; i++) {
    if (e->pend[i].due_ms > now || e->pend[i].deleting || e->vols[e->pend[i].from].offline ||
        e->parts[e->pend[i].part].retired)
      continue; /* a retired part's kept sources wait until it is tiered again */
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      break;
    e->ops[e->nops++] = (op_t){.kind = -1,
                               .part = e->pend[i].part,
                               .hash = e->pend[i].hash,
                               .from = e->pend[i].from,
                               .journal_id = e->pend[i].journal_id,
                               .pend = i};
    e->pend[i].deleting = 1;
  }
  int built = build_candidates(e, now, used, blocks) == 0;
  size_t first = e->nops;
  e->round_taken = 0;
  if (built)
    plan_one_copy(e, used, blocks);
  if (built) {
    for (size_t v = 0; v < e->nvols; v++) {
      vol_t *vol = &e->vols[v];
      vol->st.used = used[v];
      vol->st.blocks = blocks[v];
      /* The time a G3 volume spends above its high watermark, as the
       * rounds see it: from a round that finds it above to the next. */
      uint64_t dt = e->round_ms ? now - e->round_ms : 0;
      if (vol->above_high) {
        vol->st.above_high_ms += dt;
        vol->above_stretch_ms += dt;
        if (vol->above_stretch_ms > vol->st.above_high_max_ms)
          vol->st.above_high_max_ms = vol->above_stretch_ms;
      }
      vol->above_high = vol->tier == 3 && vol->capacity &&
                        (double)used[v] > e->prm.high_watermark * (double)vol->capacity;
      if (!vol->above_high)
        vol->above_stretch_ms = 0;
    }
    e->round_ms = now;
    for (size_t v = 0; v < e->nvols; v++)
      pv[v] = (kvp__tier_vol_t){.tier = e->vols[v].tier,
                                .capacity = e->vols[v].capacity,
                                .used = used[v],
                                .backoff_until_ms =
                                    e->vols[v].offline ? UINT64_MAX : e->vols[v].backoff_until_ms};
    if (kvp__tier_pol_plan(e->pol, &e->prm, pv, e->nvols, e->cands, e->ncands, now, &moves,
                           &nmoves) != 0)
      nmoves = 0;
  }
  /* Prefetch first: G4 blocks workers read since the last round bring their
   * descendants in G4 to G3. Then the plan's
   * moves, already in priority order (demotion for space, promotion,
   * eviction). */
  kvp__tier_move_t *pre = NULL;
  size_t npre = 0;
  if (e->max_bytes_per_s > 0) {
    double add = e->max_bytes_per_s * (double)(now - e->budget_ms) / 1000.0;
    e->budget = e->budget + add < e->max_bytes_per_s ? e->budget + add : e->max_bytes_per_s;
    e->budget_ms = now;
  }
  if (built && e->ncands > 0)
    plan_prefetches(e, pv, now, &pre, &npre);
  e->nhits = 0;
  take_moves(e, pre, npre, first, SIZE_MAX);
  take_moves(e, moves, nmoves, first, e->nops);
  /* The policy's state follows the moves as planned; one that fails shows
   * in the next round's candidates. */
  for (size_t i = 0; i < e->nops; i++) /* the operator's before first: kinds >= 0 too */
    if (e->ops[i].kind >= 0)
      kvp__tier_pol_move(e->pol, e->ops[i].hash, e->vols[e->ops[i].from].tier,
                         e->ops[i].kind == KVP__TIER_EVICT ? 0 : e->vols[e->ops[i].to].tier, now);
  free(pre);
  free(moves);
  if (e->nops == 0)
    return;
  e->busy = 1;
  e->applied = 0;
  __atomic_store_n(&e->ready, 0, __ATOMIC_RELAXED);
  e->work.data = e;
  if (uv_queue_work(e->loop, &e->work, kvp__tier_job_work, kvp__tier_job_after) != 0) {
    kvp__tier_job_work(&e->work);
    kvp__tier_job_after(&e->work, 0);
  }
}

/* The timer ticks every POLL_MS at most (a resync asked of the advisor
 * workers is answered within a tick, whatever the interval) and a round
 * runs once an interval has passed, give or take half a tick (a repeating
 * timer drifts by what each callback takes). */
#define POLL_MS 250u

static void on_timer(uv_timer_t *t) {
  kvp__tier_engine_t *e = t->data;
  uint64_t now = uv_now(e->loop), tick = e->interval_ms < POLL_MS ? e->interval_ms : POLL_MS;
  if (e->tick_round_ms != 0 && now + tick / 2 < e->tick_round_ms + e->interval_ms) {
    kvp__tier_parts_poll(e); /* a round polls them first itself */
    return;
  }
  e->tick_round_ms = now;
  kvp__tier_engine_round(e);
}

void kvp__tier_engine_start(kvp__tier_engine_t *e) {
  uint64_t tick = e->interval_ms < POLL_MS ? e->interval_ms : POLL_MS;
  e->running = 1;
  e->tick_round_ms = 0;
  uv_timer_start(&e->timer, on_timer, e->interval_ms, tick);
}

int kvp__tier_engine_busy(const kvp__tier_engine_t *e) {
  return e->busy || e->scrub_running;
}

void kvp__tier_engine_stop(kvp__tier_engine_t *e, void (*done)(void *ctx), void *ctx) {
  if (e->timer_ready && e->running)
    uv_timer_stop(&e->timer);
  e->running = 0;
  kvp__tier_scrub_stop(e);
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
    uint64_t now = kvp__unix_ms();
    out[v].backoff =
        e->vols[v].backoff_until_ms > now || e->vols[v].out_until_ms > now || e->vols[v].offline;
    out[v].queued = 0;
    for (size_t i = 0; i < e->npend; i++)
      out[v].queued += e->pend[i].from == v;
  }
  return e->nvols;
}

void kvp__tier_engine_stats(const kvp__tier_engine_t *e, kvp__tier_stats_t *st) {
  *st = e->st;
  st->parallel_peak = __atomic_load_n(&e->par_peak, __ATOMIC_RELAXED);
  st->lane_peak = __atomic_load_n(&e->lane_peak, __ATOMIC_RELAXED);
  if (e->scrub_running) {
    st->scrub_progress_objects = __atomic_load_n(&e->scrub_listed, __ATOMIC_RELAXED);
    st->scrub_progress_verified = __atomic_load_n(&e->scrub_verified, __ATOMIC_RELAXED);
  }
  st->events_published = e->published;
  st->events_dropped = e->publish_errors;
}

/* The close callback of the timer and the async handle: the engine goes
 * with the last. */
static void free_engine(uv_handle_t *h) {
  kvp__tier_engine_t *e = h->data;
  if (--e->handles_open == 0)
    free(e);
}

void kvp__tier_engine_close(kvp__tier_engine_t *e) {
  if (e == NULL)
    return;
  kvp__tier_scrub_stop(e);
  kvp__tier_parts_close(e); /* the publishers flush what is queued, within their close timeout */
  for (size_t v = 0; v < e->nvols; v++) {
    kvp_volume_close(e->vols[v].v);
    kvp__map64_free(&e->vols[v].orphans);
  }
  free(e->vols);
  kvp__tier_pol_close(e->pol);
  kvp__journal_close(e->db);
  kvp__journal_close(e->sdb);
  kvp__journal_close(e->ctl_db);
  free(e->pins);
  free(e->opq);
  kvp__map64_free(&e->pinned);
  kvp__map64_free(&e->opset);
  free(e->ops);
  free(e->bad);
  free(e->badq);
  kvp__map64_free(&e->scrub_touched);
  free(e->pend);
  kvp__map64_free(&e->pendset);
  free(e->cands);
  free(e->tokens);
  free(e->dup);
  free(e->cpart);
  free(e->keys);
  free(e->legacy_keys);
  free(e->orphq);
  free(e->lru);
  free(e->locs);
  if (e->handles_open > 0) {
    /* The loop frees it, once both handles are closed. */
    if (e->async_ready)
      uv_close((uv_handle_t *)&e->async, free_engine);
    if (e->timer_ready)
      uv_close((uv_handle_t *)&e->timer, free_engine);
    return;
  }
  free(e);
}
