/* The tiering engine's operator controls (engine.h, "Operator controls"):
 * pins, moves now, and deletes, on the loop thread.
 *
 * Pins. An operator pins hashes (the leaves of prefixes); the engine keeps
 * them in the pins table (the roots) and, rebuilt every round and after
 * every change, the set of pinned blocks: each root and all its ancestors
 * (the index's parent links), so that a pinned prefix is whole and the
 * plan's rule that a parent never leaves a tier before its children holds.
 * A pinned block's candidates are busy: never demoted, evicted or
 * de-duplicated. A pin that would put a volume's pinned bytes over its
 * capacity is refused, naming the volume.
 *
 * Moves and deletes now: validated against the index here for the reply,
 * queued as the block and what to do with it, and taken by the next round
 * ahead of its plan (a round is started at once when no job runs), so
 * that they are journaled, verified and announced like every move. Their
 * blocks are busy for the plan meanwhile. The round resolves each against
 * the index as it stands then (control_take: no job runs, every move is
 * applied): a block a job was moving at the request (in_flight) is
 * deleted where the move put it, or moved from there. A delete takes the
 * prefix's continuations too (continuations.c), as evictions like its own
 * blocks. A delete of a pinned block is refused; so is one with a pinned
 * continuation, whose pin holds the prefix as its ancestors. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

/* Adds root and its ancestors to set, stopping at one already in set or
 * in also (may be NULL): the rest of its chain is there too. */
static int close_over(kvp__tier_engine_t *e, kvp__map64_t *set, const kvp__map64_t *also,
                      uint64_t root) {
  uint64_t h = root;
  for (;;) {
    kvp__index_block_t b;
    if (kvp__map64_find(set, h) != NULL ||
        (also != NULL && kvp__map64_find((kvp__map64_t *)also, h) != NULL))
      return 0;
    if (kvp__map64_put(set, h, 1) != 0)
      return KVP_ENOMEM;
    if (kvp__index_get(e->ix, h, &b, NULL, 0, NULL) != 0 || b.parent == h)
      return 0;
    h = b.parent;
  }
}

/* The bytes of the blocks of set in each volume, into bytes[]. */
static void volume_bytes(kvp__tier_engine_t *e, const kvp__map64_t *set, uint64_t *bytes) {
  size_t it = 0;
  uint64_t h, one;
  memset(bytes, 0, e->nvols * sizeof *bytes);
  while (kvp__map64_next(set, &it, &h, &one)) {
    kvp__index_block_t b;
    size_t n = 0;
    if (kvp__tier_get_block(e, h, &b, &n) != 0)
      continue;
    for (size_t k = 0; k < n; k++) {
      long v = kvp__tier_vol_of(e, e->locs[k].tier, e->locs[k].volume);
      if (v >= 0)
        bytes[v] += b.bytes;
    }
  }
}

int kvp__tier_pins_rebuild(kvp__tier_engine_t *e) {
  uint64_t bytes[KVP__TIER_MAX_VOLUMES];
  int rc = 0;
  kvp__map64_clear(&e->pinned);
  for (size_t i = 0; i < e->npins && rc == 0; i++)
    rc = close_over(e, &e->pinned, NULL, e->pins[i]);
  volume_bytes(e, &e->pinned, bytes);
  for (size_t v = 0; v < e->nvols; v++)
    e->vols[v].st.pinned_bytes = bytes[v];
  e->st.pins = e->npins;
  e->st.pinned_blocks = kvp__map64_count(&e->pinned);
  return rc;
}

static void load_pin(void *ctx, uint64_t hash) {
  kvp__tier_engine_t *e = ctx;
  if (KVP_ARRAY_RESERVE(e->pins, e->pins_cap, e->npins + 1, 64) == 0)
    e->pins[e->npins++] = hash;
}

int kvp__tier_pins_load(kvp__tier_engine_t *e) {
  e->npins = 0;
  int rc = kvp__journal_pins(e->ctl_db, load_pin, e);
  return rc != 0 ? rc : kvp__tier_pins_rebuild(e);
}

static long find_pin(const kvp__tier_engine_t *e, uint64_t h) {
  for (size_t i = 0; i < e->npins; i++)
    if (e->pins[i] == h)
      return (long)i;
  return -1;
}

int kvp__tier_engine_pin(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int pin,
                         const char *note, size_t *changed, char *err, size_t errlen) {
  uint64_t now = kvp__unix_ms();
  *changed = 0;
  if (!pin) {
    for (size_t i = 0; i < n; i++) {
      long k = find_pin(e, hashes[i]);
      if (k < 0)
        continue;
      if (kvp__journal_pin(e->ctl_db, hashes[i], 0, NULL, now) != 0) {
        snprintf(err, errlen, "unpin %016" PRIx64 ": the database: %s", hashes[i],
                 kvp__journal_errmsg(e->ctl_db));
        kvp__tier_pins_rebuild(e);
        return KVP_EDB;
      }
      e->pins[k] = e->pins[--e->npins];
      (*changed)++;
    }
    return kvp__tier_pins_rebuild(e);
  }
  /* What the new pins add, per volume, against each capacity. */
  kvp__map64_t add;
  uint64_t bytes[KVP__TIER_MAX_VOLUMES];
  int rc = kvp__map64_init(&add, 64);
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = close_over(e, &add, &e->pinned, hashes[i]);
  if (rc != 0) {
    kvp__map64_free(&add);
    return rc;
  }
  volume_bytes(e, &add, bytes);
  kvp__map64_free(&add);
  for (size_t v = 0; v < e->nvols; v++) {
    const vol_t *vol = &e->vols[v];
    if (vol->capacity && vol->st.pinned_bytes + bytes[v] > vol->capacity) {
      snprintf(err, errlen,
               "pin refused: volume %s would hold %" PRIu64 " pinned bytes (%" PRIu64
               " now, %" PRIu64 " more), over its capacity of %" PRIu64 " bytes",
               vol->name, vol->st.pinned_bytes + bytes[v], vol->st.pinned_bytes, bytes[v],
               vol->capacity);
      return KVP_ENOSPC;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (find_pin(e, hashes[i]) >= 0)
      continue;
    if (KVP_ARRAY_RESERVE(e->pins, e->pins_cap, e->npins + 1, 64) != 0)
      return KVP_ENOMEM;
    if (kvp__journal_pin(e->ctl_db, hashes[i], 1, note, now) != 0) {
      snprintf(err, errlen, "pin %016" PRIx64 ": the database: %s", hashes[i],
               kvp__journal_errmsg(e->ctl_db));
      kvp__tier_pins_rebuild(e);
      return KVP_EDB;
    }
    e->pins[e->npins++] = hashes[i];
    (*changed)++;
  }
  return kvp__tier_pins_rebuild(e);
}

int kvp__tier_engine_pinned(const kvp__tier_engine_t *e, uint64_t hash) {
  return kvp__map64_find((kvp__map64_t *)&e->pinned, hash) != NULL;
}

/* The volume of tier with the most room (capacity less what the last round
 * saw used; no capacity: unbounded), online and not backing off; -1 when
 * none. */
static long roomiest(const kvp__tier_engine_t *e, int tier, uint64_t now) {
  long best = -1;
  uint64_t best_room = 0;
  for (size_t v = 0; v < e->nvols; v++) {
    const vol_t *vol = &e->vols[v];
    if (vol->tier != tier || vol->offline || vol->backoff_until_ms > now)
      continue;
    uint64_t room = vol->capacity == 0             ? UINT64_MAX
                    : vol->capacity > vol->st.used ? vol->capacity - vol->st.used
                                                   : 0;
    if (best < 0 || room > best_room) {
      best = (long)v;
      best_room = room;
    }
  }
  return best;
}

static int queue(kvp__tier_engine_t *e, const op_t *o) {
  if (KVP_ARRAY_RESERVE(e->opq, e->opq_cap, e->nopq + 1, 64) != 0 ||
      kvp__map64_put(&e->opset, o->hash, 1) != 0)
    return KVP_ENOMEM;
  e->opq[e->nopq++] = *o;
  return 0;
}

/* The blocks the running job copies (none when no job runs), into m: the
 * index places them where they were until the job's outcome is applied. */
static int moving(const kvp__tier_engine_t *e, kvp__map64_t *m) {
  int rc = kvp__map64_init(m, e->busy ? e->nops : 0);
  for (size_t i = 0; e->busy && i < e->nops && rc == 0; i++)
    if (kvp__tier_is_copy(e->ops[i].kind))
      rc = kvp__map64_put(m, e->ops[i].hash, 1);
  return rc;
}

/* Where a move of hash to tier would come from: sets *from and *part (the
 * first copy in an engine volume of the other tier, of a partition the
 * engine tiers, not a moved block's source); *there when such a copy is
 * in tier already.
 * Returns 0 or KVP_ENOENT / KVP_ENOMEM. */
static int move_source(kvp__tier_engine_t *e, uint64_t hash, int tier, kvp__index_block_t *b,
                       long *from, int *part, int *there) {
  size_t nl = 0;
  int rc = kvp__tier_get_block(e, hash, b, &nl);
  *from = -1;
  *part = -1;
  *there = 0;
  for (size_t k = 0; rc == 0 && k < nl; k++) {
    long v = kvp__tier_vol_of(e, e->locs[k].tier, e->locs[k].volume);
    int pk = v >= 0 ? kvp__tier_part_of(e, e->locs[k].worker) : -1;
    if (pk < 0)
      continue; /* not in a volume of the engine, or another advisor's partition */
    const uint64_t *src = kvp__map64_find(&e->pendset, hash);
    if (src != NULL && (*src >> v & 1))
      continue; /* a moved block's source, deleted once its grace period is over */
    if (e->vols[v].tier == tier)
      *there = 1;
    else if (*from < 0) {
      *from = v;
      *part = pk;
    }
  }
  return rc;
}

int kvp__tier_engine_move(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                          const char *volume, kvp__tier_ctl_counts_t *c, char *err, size_t errlen) {
  uint64_t now = kvp__unix_ms();
  long to = -1;
  kvp__map64_t busy = {0};
  int rc = 0;
  memset(c, 0, sizeof *c);
  if (tier != 3 && tier != 4) {
    snprintf(err, errlen, "move: tier %d: the engine moves blocks to G3 or G4", tier);
    return KVP_EINVAL;
  }
  if (volume && volume[0]) {
    for (size_t v = 0; v < e->nvols && to < 0; v++)
      if (strcmp(e->vols[v].name, volume) == 0)
        to = (long)v;
    if (to < 0 || e->vols[to].tier != tier) {
      snprintf(err, errlen, "move: volume '%s' is not a G%d volume of this advisor", volume, tier);
      return KVP_EINVAL;
    }
  } else if ((to = roomiest(e, tier, now)) < 0) {
    snprintf(err, errlen, "move: no G%d volume is online and out of backoff", tier);
    return KVP_EAGAIN;
  }
  if ((rc = moving(e, &busy)) != 0)
    goto out;
  for (size_t i = 0; i < n; i++) {
    kvp__index_block_t b;
    long from;
    int part, there;
    op_t o = {.kind = tier == 4 ? KVP__TIER_DEMOTE : KVP__TIER_PROMOTE,
              .hash = hashes[i],
              .to = (uint32_t)to,
              .journal_id = -1};
    if (kvp__map64_find(&e->opset, hashes[i]) != NULL) {
      c->skipped++; /* a move or delete of it waits already */
      continue;
    }
    if (kvp__map64_find(&busy, hashes[i]) != NULL) {
      /* The running job moves it: where it will be decides, then. */
      if ((rc = queue(e, &o)) != 0)
        goto out;
      c->in_flight++;
      continue;
    }
    if (move_source(e, hashes[i], tier, &b, &from, &part, &there) != 0 || there || from < 0) {
      c->skipped++; /* unknown, already there, or in no volume of the engine (G1/G2 only) */
      continue;
    }
    if ((rc = queue(e, &o)) != 0)
      goto out;
    c->queued++;
  }
out:
  kvp__map64_free(&busy);
  if (c->queued + c->in_flight && !e->busy && e->running)
    kvp__tier_engine_round(e);
  return rc;
}

/* Calls fn for each copy of hash a delete from tier (0: G3 and G4) takes:
 * in an engine volume, held by a worker of a partition it tiers. Returns
 * how many there are (0 for an unknown block). */
static size_t drop_each(kvp__tier_engine_t *e, uint64_t hash, int tier, kvp__index_block_t *b,
                        int (*fn)(kvp__tier_engine_t *, const op_t *), size_t *failed) {
  size_t nl = 0, n = 0;
  if (kvp__tier_get_block(e, hash, b, &nl) != 0)
    return 0;
  for (size_t k = 0; k < nl; k++) {
    long v = kvp__tier_vol_of(e, e->locs[k].tier, e->locs[k].volume);
    int pk = v >= 0 ? kvp__tier_part_of(e, e->locs[k].worker) : -1;
    if (pk < 0 || (tier != 0 && e->vols[v].tier != tier))
      continue;
    op_t o = {.kind = KVP__TIER_EVICT,
              .part = (uint16_t)pk,
              .hash = b->hash,
              .parent = b->parent,
              .has_parent = b->parent != b->hash,
              .bytes = b->bytes,
              .tokens = b->tokens,
              .from = (uint32_t)v,
              .to = KVP__TIER_NOWHERE,
              .journal_id = -1};
    n++;
    if (fn != NULL && fn(e, &o) != 0)
      (*failed)++;
  }
  return n;
}

/* An operator's delete of hash from tier, or its move (kind, to), in
 * opq: resolved when a round takes it (control_take). */
static int intend(kvp__tier_engine_t *e, uint64_t hash, int kind, int tier) {
  op_t o = {
      .kind = kind, .hash = hash, .ctl_tier = tier, .to = KVP__TIER_NOWHERE, .journal_id = -1};
  return queue(e, &o);
}

int kvp__tier_engine_drop(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                          kvp__tier_ctl_counts_t *c, char *err, size_t errlen) {
  uint64_t *below = NULL;
  size_t nbelow = 0;
  kvp__map64_t busy = {0};
  int rc;
  memset(c, 0, sizeof *c);
  if (tier != 0 && tier != 3 && tier != 4) {
    snprintf(err, errlen, "delete: tier %d: the engine deletes from G3, G4 or both (0)", tier);
    return KVP_EINVAL;
  }
  /* The pinned set as the index stands now (a pin's chain may have grown
   * since the last round). A pinned continuation needs no check of its
   * own: the pinned set holds its ancestors up the same parent links the
   * continuations are found by, so the prefix's end is pinned too. */
  kvp__tier_pins_rebuild(e);
  for (size_t i = 0; i < n; i++) {
    if (kvp__map64_find(&e->pinned, hashes[i]) != NULL) {
      snprintf(err, errlen,
               "delete refused: block %016" PRIx64
               " is pinned, itself or as an ancestor of a pinned block (unpin it first)",
               hashes[i]);
      return KVP_EBUSY;
    }
  }
  if ((rc = kvp__tier_continuations(e, hashes, n, tier, &below, &nbelow)) != 0 ||
      (rc = moving(e, &busy)) != 0)
    goto out;
  /* Leaves first (the continuations deepest first, then the request from
   * its end): within a volume the job deletes in this order, so a crash
   * midway leaves whole prefixes. */
  for (size_t k = 0; k < nbelow + n; k++) {
    uint64_t h = k < nbelow ? below[k] : hashes[n - 1 - (k - nbelow)];
    int asked = k >= nbelow;
    kvp__index_block_t b;
    size_t copies = 0;
    if (kvp__map64_find(&e->opset, h) != NULL) {
      c->skipped += (size_t)asked; /* a move or delete of it waits already */
      continue;
    }
    int flying = kvp__map64_find(&busy, h) != NULL;
    if (!flying && (copies = drop_each(e, h, tier, &b, NULL, NULL)) == 0) {
      c->skipped += (size_t)asked;
      continue;
    }
    if ((rc = intend(e, h, KVP__TIER_EVICT, tier)) != 0)
      goto out;
    c->queued += copies;
    c->in_flight += (size_t)flying;
    c->continuations += (size_t)!asked;
  }
out:
  free(below);
  kvp__map64_free(&busy);
  if (c->queued + c->in_flight && !e->busy && e->running)
    kvp__tier_engine_round(e);
  return rc;
}

static int take_one(kvp__tier_engine_t *e, const op_t *o) {
  if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
    return KVP_ENOMEM;
  e->ops[e->nops++] = *o;
  e->st.operator_ops++;
  return 0;
}

/* take_one for a copy in an online volume (an offline one's waits). */
static int take_online(kvp__tier_engine_t *e, const op_t *o) {
  return e->vols[o->from].offline ? 0 : take_one(e, o);
}

/* Resolves an operator's delete or move against the index as it stands
 * now (no job runs): its ops into e->ops. Returns 1 when it waits for a
 * later round (a volume it needs is offline, or no memory), else 0 (done,
 * or nothing left to do: the block is gone or already where asked). */
static int resolve(kvp__tier_engine_t *e, const op_t *in) {
  kvp__index_block_t b;
  size_t failed = 0;
  if (in->kind == KVP__TIER_EVICT) {
    /* A copy in an offline volume waits; the rest go now. */
    size_t nl = 0;
    int wait = 0;
    if (kvp__tier_get_block(e, in->hash, &b, &nl) != 0)
      return 0;
    for (size_t k = 0; k < nl && !wait; k++) {
      long v = kvp__tier_vol_of(e, e->locs[k].tier, e->locs[k].volume);
      wait = v >= 0 && e->vols[v].offline &&
             (in->ctl_tier == 0 || e->vols[v].tier == in->ctl_tier) &&
             kvp__tier_part_of(e, e->locs[k].worker) >= 0;
    }
    drop_each(e, in->hash, in->ctl_tier, &b, take_online, &failed);
    return wait || failed;
  }
  long from;
  int part, there;
  if (move_source(e, in->hash, e->vols[in->to].tier, &b, &from, &part, &there) != 0 || there ||
      from < 0)
    return 0;
  /* A moved block's source goes first (this round's job may delete it):
   * a copy into its volume meanwhile would be deleted with it. */
  if (kvp__map64_find(&e->pendset, in->hash) != NULL || e->vols[from].offline ||
      e->vols[in->to].offline)
    return 1;
  op_t o = {.kind = in->kind,
            .part = (uint16_t)part,
            .hash = b.hash,
            .parent = b.parent,
            .has_parent = b.parent != b.hash,
            .bytes = b.bytes,
            .tokens = b.tokens,
            .from = (uint32_t)from,
            .to = in->to,
            .journal_id = -1};
  return take_one(e, &o) != 0;
}

void kvp__tier_control_take(kvp__tier_engine_t *e) {
  size_t keep = 0;
  for (size_t i = 0; i < e->nopq; i++) {
    op_t o = e->opq[i];
    if (resolve(e, &o))
      e->opq[keep++] = o;
  }
  e->nopq = keep;
}

void kvp__tier_control_done(kvp__tier_engine_t *e) {
  kvp__map64_clear(&e->opset);
  for (size_t i = 0; i < e->nopq; i++)
    kvp__map64_put(&e->opset, e->opq[i].hash, 1); /* fits: it held them before */
}
