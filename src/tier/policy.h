/* Tiering policy: which blocks move between G3 and G4 volumes, and in what
 * order (DESIGN.md, "Advisor", tiering). The advisor builds a snapshot of
 * the candidates (every block location in a G3 or G4 volume, with what its
 * index keeps: last access, decayed hit frequency, parent) and of the
 * volumes' fill; a plan call returns the moves; the migration engine
 * carries them out and journals them.
 *
 * The rules, each a parameter with a default (kvp__tier_params_init):
 *   - demotion: a G3 volume above the high watermark has its coldest blocks
 *     moved to a G4 volume until it would be below the low watermark. A
 *     block leaves only after its children in the same volume (prefixes
 *     stay whole: a hole in the middle of a prefix wastes the blocks after
 *     it);
 *   - promotion: a G4 block whose decayed hit frequency reaches promote_freq
 *     comes back to G3 when there is room below the low watermark (room up
 *     to the high one would be taken back by the next demotion: a
 *     ping-pong), or when a G3 block colder than keep_freq can be demoted
 *     for it (then up to the high watermark). Between
 *     keep_freq and promote_freq nothing moves (the hysteresis band), and no
 *     block moves within min_residence_ms of its last access (residence
 *     counts from the last access, not from arrival in the volume): no
 *     ping-pong;
 *   - eviction of last resort: a G4 volume above its own high watermark (of
 *     its quota) has its coldest blocks deleted down to its low watermark;
 *   - prefetch (kvp__tier_prefetch): when a prefix's block is hit in G4,
 *     its descendants in G4 come to G3 ahead of the request, bounded in
 *     depth and bytes.
 * Which block is colder is the policy's choice. A policy is one file with
 * an ops table (kvp__tier_policy_t): its plan for a round (most call
 * kvp__tier_plan with their own order, so the rules above, prefixes kept
 * whole among them, hold for every policy), optional state fed by
 * on_access / on_move / on_remove, and its own parameters; the table of
 * policies is policy_registry.c, and [tiering] policy picks one by name
 * (docs/tiering.md). The policies: lru (the default, policy_lru.c),
 * s3fifo (policy_s3fifo.c), lfu (policy_lfu.c), hyperbolic
 * (policy_hyperbolic.c), density (policy_density.c).
 *
 * Moves come out in priority order: prefetch, then demotion (space), then
 * promotion, then eviction.
 *
 * Pure logic: no I/O and no clock (now is an argument). Threads: any; a call
 * uses only its arguments. */
#ifndef KVP_TIER_POLICY_H
#define KVP_TIER_POLICY_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvp__tier_params_s {
  double high_watermark;     /* G3 fill that starts demotion (0.90) */
  double low_watermark;      /* ... and where it stops (0.80) */
  double promote_freq;       /* G4 -> G3 at or above this decayed hit frequency (4.0) */
  double keep_freq;          /* a G3 block at or above this is not demoted for a promotion (2.0) */
  uint64_t min_residence_ms; /* no move sooner than this after the block's last access (60 s) */
  double g4_high_watermark;  /* G4 fill of its quota that starts eviction (1.0) */
  double g4_low_watermark;   /* ... and where it stops (0.95) */
  uint32_t prefetch_depth;   /* descendants followed from a G4 hit (8) */
  uint64_t prefetch_bytes;   /* bytes promoted per G4 hit at most (64 MiB) */
} kvp__tier_params_t;

void kvp__tier_params_init(kvp__tier_params_t *p);

/* Returns 0, or KVP_ECONFIG with err naming the parameter (watermarks in
 * (0, 1] with low < high, keep_freq <= promote_freq, ...). */
int kvp__tier_params_check(const kvp__tier_params_t *p, char *err, size_t errlen);

typedef struct kvp__tier_vol_s {
  int tier;                  /* 3 or 4 */
  uint64_t capacity;         /* bytes (a G4 volume's quota); 0: unbounded, never full */
  uint64_t used;             /* bytes, including moves already queued into it */
  uint64_t backoff_until_ms; /* after a failed move into it (ENOSPC): no moves in before */
} kvp__tier_vol_t;

typedef struct kvp__tier_cand_s {
  uint64_t hash, parent;
  uint8_t has_parent;
  uint8_t busy; /* a move of it is queued or running: not planned again */
  uint32_t vol; /* index into the volumes */
  uint64_t bytes;
  uint64_t last_access_ms;
  double freq;       /* decayed hit frequency, at the plan's now */
  uint64_t since_ms; /* residence counts from here: the engine sets its last access */
} kvp__tier_cand_t;

typedef enum kvp__tier_kind_e {
  KVP__TIER_PREFETCH, /* G4 -> G3 ahead of a request */
  KVP__TIER_DEMOTE,   /* G3 -> G4 for space */
  KVP__TIER_PROMOTE,  /* G4 -> G3, hot */
  KVP__TIER_EVICT,    /* deleted from G4, last resort */
} kvp__tier_kind_t;

const char *kvp__tier_kind_name(int kind);

#define KVP__TIER_NOWHERE UINT32_MAX /* the destination of an eviction */

typedef struct kvp__tier_move_s {
  uint64_t hash;
  uint64_t bytes;
  uint32_t from, to; /* volume indexes; to is KVP__TIER_NOWHERE for an eviction */
  uint32_t cand;     /* the candidate moved: an index into the plan's cands */
  uint8_t kind;      /* kvp__tier_kind_t */
} kvp__tier_move_t;

/* An order of the candidates of one plan: colder(ctx, a, b, now) is 1 when
 * a leaves before b (is colder), else 0. It must be a strict weak order
 * over each plan's candidates. */
typedef struct kvp__tier_order_s {
  int (*colder)(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                uint64_t now_ms);
  const void *ctx;
} kvp__tier_order_t;

/* Least recently used first, the decayed hit frequency breaking ties within
 * a second, then the hash (policy_lru.c). */
extern const kvp__tier_order_t kvp__tier_order_lru;

/* Plans demotions, promotions and evictions. The volumes' used bytes are
 * updated as if the moves were done (so a caller may plan again with the
 * same arrays only after it rebuilt them). *moves is malloc'd (free it),
 * in priority order. Returns 0 or KVP_ENOMEM. */
int kvp__tier_plan(const kvp__tier_order_t *ord, const kvp__tier_params_t *prm,
                   kvp__tier_vol_t *vols, size_t nvols, const kvp__tier_cand_t *cands,
                   size_t ncands, uint64_t now_ms, kvp__tier_move_t **moves, size_t *nmoves);

/* Plans the prefetch of hit's descendants that are in G4 (breadth first,
 * at most prefetch_depth generations and prefetch_bytes), into the G3
 * volume with the most room below its high watermark. Blocks already in a
 * G3 volume are followed but not moved. Returns 0 (no G3 room: no moves) or
 * KVP_ENOMEM; *moves is malloc'd or NULL. */
int kvp__tier_prefetch(const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                       const kvp__tier_cand_t *cands, size_t ncands, uint64_t hit, uint64_t now_ms,
                       kvp__tier_move_t **moves, size_t *nmoves);

/* --- policies ------------------------------------------------------------ */

/* One parameter of a policy: [tiering] policy_params = "name=value ...". */
typedef struct kvp__tier_policy_key_s {
  const char *name;
  int duration; /* 1: a duration ("10m", "30s", ms); 0: a number */
  double def, min, max;
  const char *help;
} kvp__tier_policy_key_t;

#define KVP__TIER_POLICY_KEYS_MAX 8

/* A policy's ops. Only name and plan are required. State is the policy's
 * own (open's *state, NULL for a stateless policy); calls on one state come
 * from one thread (the advisor's loop, or a replay). The candidates are the
 * truth: a policy whose hooks were not called for some change (a block
 * moved or removed by someone else, an access the engine did not see)
 * learns it from the next plan's candidates. */
typedef struct kvp__tier_policy_s {
  const char *name;
  const char *help;
  const kvp__tier_policy_key_t *keys; /* its parameters, nkeys of them */
  size_t nkeys;
  /* conf[i] is keys[i]'s value. Returns 0 or KVP_ENOMEM. */
  int (*open)(const double *conf, void **state);
  void (*close)(void *state);
  /* A worker read hash in tier (3 or 4) at now. */
  void (*on_access)(void *state, uint64_t hash, int tier, uint64_t now_ms);
  /* hash moved from a tier to another (to_tier 0: deleted), planned by the
   * engine or placed by a worker's offload (from_tier 0: a new block). */
  void (*on_move)(void *state, uint64_t hash, int from_tier, int to_tier, uint64_t now_ms);
  /* hash left tier for another reason (its location dropped). */
  void (*on_remove)(void *state, uint64_t hash, int tier);
  /* Plans a round: as kvp__tier_plan. */
  int (*plan)(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
              const kvp__tier_cand_t *cands, size_t ncands, uint64_t now_ms,
              kvp__tier_move_t **moves, size_t *nmoves);
} kvp__tier_policy_t;

/* The registry (policy_registry.c): the policies' names, NULL-terminated,
 * the default first; the choices of [tiering] policy. */
extern const char *const kvp__tier_policy_names[];

/* The policy called name, or NULL. */
const kvp__tier_policy_t *kvp__tier_policy_find(const char *name);

/* A policy with its state. */
typedef struct kvp__tier_pol_s {
  const kvp__tier_policy_t *ops;
  void *state;
  double conf[KVP__TIER_POLICY_KEYS_MAX];
} kvp__tier_pol_t;

/* Checks params ("key=value" pairs separated by blanks or commas) against
 * the policy's keys into conf (the defaults for keys not given). Returns 0,
 * or KVP_ECONFIG with err naming the policy, the key and, for an unknown
 * key or policy, the ones there are. */
int kvp__tier_policy_params(const char *name, const char *params, double *conf, char *err,
                            size_t errlen);

/* Opens the policy called name (NULL or "": the default) with params.
 * Returns 0, KVP_ECONFIG (err says why, listing the names or keys there
 * are) or KVP_ENOMEM. */
int kvp__tier_pol_open(const char *name, const char *params, kvp__tier_pol_t **out, char *err,
                       size_t errlen);

/* NULL is accepted. */
void kvp__tier_pol_close(kvp__tier_pol_t *p);

int kvp__tier_pol_plan(kvp__tier_pol_t *p, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols,
                       size_t nvols, const kvp__tier_cand_t *cands, size_t ncands, uint64_t now_ms,
                       kvp__tier_move_t **moves, size_t *nmoves);

/* The hooks, when the policy has them. */
void kvp__tier_pol_access(kvp__tier_pol_t *p, uint64_t hash, int tier, uint64_t now_ms);
void kvp__tier_pol_move(kvp__tier_pol_t *p, uint64_t hash, int from_tier, int to_tier,
                        uint64_t now_ms);
void kvp__tier_pol_remove(kvp__tier_pol_t *p, uint64_t hash, int tier);

extern const kvp__tier_policy_t kvp__tier_policy_lru;
extern const kvp__tier_policy_t kvp__tier_policy_s3fifo;
extern const kvp__tier_policy_t kvp__tier_policy_lfu;
extern const kvp__tier_policy_t kvp__tier_policy_hyperbolic;
extern const kvp__tier_policy_t kvp__tier_policy_density;

/* The order of policies that score each candidate (lfu, density): the
 * lower score[cand - base] is colder; ties by older last access, then by
 * hash. */
static inline int kvp__tier_colder_by_score(const double *score, const kvp__tier_cand_t *base,
                                            const kvp__tier_cand_t *a, const kvp__tier_cand_t *b) {
  double sa = score[a - base], sb = score[b - base];
  if (sa != sb)
    return sa < sb;
  if (a->last_access_ms != b->last_access_ms)
    return a->last_access_ms < b->last_access_ms;
  return a->hash < b->hash;
}

#endif
