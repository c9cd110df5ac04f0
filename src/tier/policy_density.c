/* The density policy: the block with the fewest expected reads per unit
 * of G3 space-time leaves first, the expectation learned online from every
 * lower-tier read. After LHD (Beckmann et al., NSDI'18), with two changes
 * that the G3/G4 pair allows: the statistics come from every read in G3
 * *or* G4 (on_access), not only from G3 hits, so that what the policy
 * learns does not depend on what it kept; and a block's kind is its index
 * hit count when its life starts (1, 2, 3, 4, 5, 6-7, 8-11, 12 and more
 * uses) and whether it was ever seen as a parent (the last block of a
 * prompt is nobody's parent and is almost never read again: the next turn
 * has a fuller block with another hash there).
 *
 * A block's life starts at its last use (the index's last access, or a
 * read from G3/G4) and ends at its next read. Per kind and per age bin
 * (half-octaves of age from 8 s to 68 min, and one beyond), the policy
 * counts the reads that came at that age and the lives that passed the
 * bin's upper bound unread; the hazard h of a read in a bin is its reads
 * over the lives that entered it (over the same bin's passings it would be
 * too high where the passings lag the reads: the old bins). For a block of
 * kind c in bin b, with S the chance to live unread to each later bin,
 *   density = sum_k S_k h_k / sum_k S_k (h_k w_k / 2 + (1 - h_k) w_k)
 * over the bins k >= b (w_k the bin's width; the last bin, where no read
 * is expected, counts TAIL times its start), the reads it is expected to
 * bring over the space-time it is expected to take; the lowest leaves
 * first, then the least recently used, then by hash. A kind or bin not
 * seen yet has density 0.
 *
 * Why: on the bundled Mooncake trace (kvp-bench policy) a third of what
 * workers offload to G3 is read again, a block used once a quarter of the
 * time and one used 8 times or more four times in five, and the chance of
 * a read falls with the time since the last use; the density weighs count,
 * age and parenthood by what the trace shows rather than by a fixed formula
 * (hyperbolic's count / age). docs/tiering.md has the figures, and why no
 * online order comes near Belady's MIN there.
 *
 * Prefixes stay whole by kvp__tier_plan (it moves leaves only).
 *
 * State: per block in G3 or G4, its life (start, class, a generation,
 * parenthood), and a min-heap of when each life passes its next age bound
 * (lives start out of order: a block first seen by a plan starts at its
 * last use, seconds to minutes back), so the counting costs O(log n) per
 * block and bound. A record in G4 past the last bound is dropped (a later
 * read of it starts a life afresh; one still among the candidates, a G4
 * block hot enough to be promoted, starts it in the same plan). Parameter: half_life, of the counts
 * (0: never forgotten). */
#include <math.h>
#include <stdlib.h>

#include "common/array.h"
#include "common/map64.h"
#include "kvplane/status.h"
#include "tier/policy.h"

#define NCLASS 8           /* hit-count classes */
#define NKIND (NCLASS * 2) /* and whether a parent */
#define NBOUND 19          /* boundaries 8 s * 2^(k/2), k = 0..18 (68 min) */
#define NBIN (NBOUND + 1)  /* bin 0 is [0, 8 s), bin k [B(k-1), B(k)) */
#define NO_CLASS UINT8_MAX /* a life whose class the next plan sets */
#define FIRST_BOUND_MS 8000.0
#define TAIL 4.0 /* the last bin's width, in ages of its start */

typedef struct life_s {
  uint64_t hash;
  uint64_t t0_ms; /* the life's start: the last use */
  uint32_t gen;   /* lives so far: a heap entry of an older life is stale */
  uint8_t cls, in3;
  uint8_t fixed;  /* cls is from the index's count, not a guess */
  uint8_t parent; /* a block was seen with this one as its parent */
} life_t;

/* A life to pass boundary k at due_ms. */
typedef struct entry_s {
  uint64_t hash, due_ms;
  uint32_t gen;
  uint8_t k;
} entry_t;

typedef struct dens_s {
  double half_life_ms;
  kvp__map64_t at; /* hash -> index in lives */
  life_t *lives;
  size_t n, cap;
  entry_t *due; /* a min-heap by due time: lives start out of order */
  size_t ndue, due_cap;
  double reads[NKIND][NBIN], lived[NKIND][NBIN];
  uint64_t decayed_ms;
  double density[NKIND][NBIN];
  double bound[NBOUND];
  double *score; /* per candidate of the current plan */
  size_t score_cap;
  uint32_t *life_of; /* per candidate: its index in lives */
  size_t life_cap;
  const kvp__tier_cand_t *base;
} dens_t;

static const kvp__tier_policy_key_t keys[] = {
    {"half_life", 1, 0, 0, 30.0 * 86400000, "half-life of the learned counts (0: kept forever)"},
};

static int class_of(double freq) {
  return freq < 1.5    ? 0
         : freq < 2.5  ? 1
         : freq < 3.5  ? 2
         : freq < 4.5  ? 3
         : freq < 5.5  ? 4
         : freq < 7.5  ? 5
         : freq < 11.5 ? 6
                       : 7;
}

/* l's kind: its count class, and whether it is a parent; -1 while its
 * count class is not known. */
static int kind_of(const life_t *l) {
  return l->cls == NO_CLASS ? -1 : l->cls + NCLASS * !l->parent;
}

static int bin_of(const dens_t *s, double age_ms) {
  int b = 0;
  while (b < NBOUND && age_ms >= s->bound[b])
    b++;
  return b;
}

static life_t *find(dens_t *s, uint64_t hash) {
  uint64_t i;
  return kvp__map64_get(&s->at, hash, &i) == 0 ? &s->lives[i] : NULL;
}

static void forget(dens_t *s, uint64_t hash) {
  uint64_t i;
  if (kvp__map64_del(&s->at, hash, &i) != 0)
    return;
  if (i != s->n - 1) {
    s->lives[i] = s->lives[s->n - 1];
    kvp__map64_put(&s->at, s->lives[i].hash, i); /* replaces: no allocation */
  }
  s->n--;
}

static int push(dens_t *s, int k, const life_t *l) {
  if (KVP_ARRAY_RESERVE(s->due, s->due_cap, s->ndue + 1, 1024) != 0)
    return KVP_ENOMEM;
  entry_t e = {l->hash, l->t0_ms + (uint64_t)s->bound[k], l->gen, (uint8_t)k};
  size_t i = s->ndue++;
  while (i > 0 && s->due[(i - 1) / 2].due_ms > e.due_ms) {
    s->due[i] = s->due[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->due[i] = e;
  return 0;
}

static entry_t pop(dens_t *s) {
  entry_t top = s->due[0], last = s->due[--s->ndue];
  size_t i = 0, n = s->ndue;
  for (;;) {
    size_t m = 2 * i + 1;
    if (m >= n)
      break;
    if (m + 1 < n && s->due[m + 1].due_ms < s->due[m].due_ms)
      m++;
    if (s->due[m].due_ms >= last.due_ms)
      break;
    s->due[i] = s->due[m];
    i = m;
  }
  if (n > 0)
    s->due[i] = last;
  return top;
}

/* A new life of l from t0 (class cls, or NO_CLASS: the next plan sets it). */
static int start(dens_t *s, life_t *l, uint64_t t0, uint8_t cls) {
  l->t0_ms = t0;
  l->gen++;
  l->cls = cls;
  l->fixed = 0;
  return push(s, 0, l);
}

static life_t *add(dens_t *s, uint64_t hash) {
  if (KVP_ARRAY_RESERVE(s->lives, s->cap, s->n + 1, 1024) != 0 ||
      kvp__map64_put(&s->at, hash, s->n) != 0)
    return NULL;
  life_t *l = &s->lives[s->n++];
  *l = (life_t){.hash = hash, .cls = NO_CLASS};
  return l;
}

/* l was read at now: a read at its age, and a new life. */
static int read_at(dens_t *s, life_t *l, uint64_t now) {
  int k = kind_of(l);
  if (k >= 0 && now >= l->t0_ms)
    s->reads[k][bin_of(s, (double)(now - l->t0_ms))] += 1;
  /* One more use: the next plan reads the index's count for the class;
   * until then, the next class up. */
  uint8_t up = l->cls == NO_CLASS ? NO_CLASS : (uint8_t)(l->cls + 1 < NCLASS ? l->cls + 1 : l->cls);
  return start(s, l, now, up);
}

/* The lives that passed a boundary by now: counted as having lived
 * through the bin before it. */
static int advance(dens_t *s, uint64_t now) {
  while (s->ndue > 0 && s->due[0].due_ms <= now) {
    entry_t e = pop(s);
    life_t *l = find(s, e.hash);
    if (l == NULL || l->gen != e.gen)
      continue; /* read since, or forgotten */
    int kind = kind_of(l);
    if (kind >= 0)
      s->lived[kind][e.k] += 1;
    if (e.k + 1 < NBOUND) {
      if (push(s, e.k + 1, l) != 0)
        return KVP_ENOMEM;
    } else if (!l->in3) {
      forget(s, e.hash);
    }
  }
  return 0;
}

static void decay(dens_t *s, uint64_t now) {
  if (s->half_life_ms <= 0 || now <= s->decayed_ms)
    return;
  double f = exp2(-(double)(now - s->decayed_ms) / s->half_life_ms);
  for (int c = 0; c < NKIND; c++)
    for (int b = 0; b < NBIN; b++)
      s->reads[c][b] *= f, s->lived[c][b] *= f;
  s->decayed_ms = now;
}

/* density[c][b] from the counts; a bin not seen yet counts half a read in
 * two lives. */
static void tabulate(dens_t *s) {
  for (int c = 0; c < NKIND; c++) {
    double hits = 0, time = 0;
    for (int b = NBIN - 1; b >= 0; b--) {
      /* The lives that entered bin b: those that passed its lower
       * boundary (bin 0: those that passed its upper one or were read in
       * it). Reads come at once and passings later, so a hazard over the
       * reads and passings of the same bin would be too high where the
       * passings lag (the old bins). */
      double in = b == 0 ? s->reads[c][0] + s->lived[c][0] : s->lived[c][b - 1];
      double h =
          b < NBOUND ? s->reads[c][b] / (in > s->reads[c][b] ? in + 1 : s->reads[c][b] + 1) : 0;
      double lo = b ? s->bound[b - 1] : 0;
      double w = b < NBOUND ? s->bound[b] - lo : TAIL * s->bound[NBOUND - 1];
      /* From the bin's start: this bin, then the later ones if unread. */
      hits = h + (1 - h) * hits;
      time = h * w / 2 + (1 - h) * (w + time);
      s->density[c][b] = hits / time;
    }
  }
}

static int dens_open(const double *conf, void **state) {
  dens_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return KVP_ENOMEM;
  s->half_life_ms = conf[0];
  for (int k = 0; k < NBOUND; k++)
    s->bound[k] = FIRST_BOUND_MS * exp2(k / 2.0);
  kvp__map64_init(&s->at, 0);
  *state = s;
  return 0;
}

static void dens_close(void *state) {
  dens_t *s = state;
  kvp__map64_free(&s->at);
  free(s->lives);
  free(s->due);
  free(s->score);
  free(s->life_of);
  free(s);
}

static void dens_access(void *state, uint64_t hash, int tier, uint64_t now) {
  dens_t *s = state;
  life_t *l = find(s, hash);
  if (l == NULL && (l = add(s, hash)) != NULL)
    l->in3 = tier == 3;
  if (l != NULL)
    read_at(s, l, now); /* out of memory: the read goes uncounted */
}

static void dens_move(void *state, uint64_t hash, int from_tier, int to_tier, uint64_t now) {
  dens_t *s = state;
  (void)from_tier;
  (void)now;
  if (to_tier == 0) {
    forget(s, hash);
    return;
  }
  life_t *l = find(s, hash);
  if (l == NULL)
    l = add(s, hash); /* its life starts at its last use: the next plan */
  if (l != NULL)
    l->in3 = to_tier == 3;
}

static void dens_remove(void *state, uint64_t hash, int tier) {
  dens_t *s = state;
  life_t *l = find(s, hash);
  if (l != NULL && (tier == 3) == (l->in3 != 0))
    forget(s, hash);
}

static int dens_colder(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                       uint64_t now) {
  const dens_t *s = ctx;
  (void)now;
  return kvp__tier_colder_by_score(s->score, s->base, a, b);
}

static int dens_plan(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols,
                     size_t nvols, const kvp__tier_cand_t *c, size_t n, uint64_t now,
                     kvp__tier_move_t **moves, size_t *nmoves) {
  dens_t *s = state;

  *moves = NULL;
  *nmoves = 0;
  if (KVP_ARRAY_RESERVE(s->score, s->score_cap, n ? n : 1, 1024) != 0 ||
      KVP_ARRAY_RESERVE(s->life_of, s->life_cap, n ? n : 1, 1024) != 0)
    return KVP_ENOMEM;
  /* The lives that passed a bound first: it may drop a record, which
   * moves another (so not between the candidates' lookups and their
   * scores). */
  if (advance(s, now) != 0)
    return KVP_ENOMEM;
  /* Then the candidates: a use the hooks did not report (a later last
   * access) is a read; a life without a class takes the index's count. */
  for (size_t i = 0; i < n; i++) {
    life_t *l = find(s, c[i].hash);
    if (l == NULL) {
      if ((l = add(s, c[i].hash)) == NULL)
        return KVP_ENOMEM;
      l->in3 = vols[c[i].vol].tier == 3;
    }
    if (l->gen == 0 || c[i].last_access_ms > l->t0_ms) {
      if ((l->gen ? read_at(s, l, c[i].last_access_ms)
                  : start(s, l, c[i].last_access_ms, NO_CLASS)) != 0)
        return KVP_ENOMEM;
    }
    if (c[i].has_parent) {
      life_t *par = find(s, c[i].parent);
      if (par != NULL)
        par->parent = 1;
    }
    if (!l->fixed) {
      l->cls = (uint8_t)class_of(c[i].freq);
      l->fixed = 1;
    }
    s->life_of[i] = (uint32_t)(l - s->lives);
  }
  decay(s, now);
  tabulate(s);
  for (size_t i = 0; i < n; i++) {
    const life_t *l = &s->lives[s->life_of[i]];
    double age = now > c[i].last_access_ms ? (double)(now - c[i].last_access_ms) : 0;
    s->score[i] = s->density[kind_of(l)][bin_of(s, age)];
  }
  s->base = c;
  kvp__tier_order_t ord = {dens_colder, s};
  return kvp__tier_plan(&ord, prm, vols, nvols, c, n, now, moves, nmoves);
}

const kvp__tier_policy_t kvp__tier_policy_density = {
    .name = "density",
    .help = "fewest expected reads per unit of space-time first, learned from every G3/G4 read "
            "per hit count and age (half_life)",
    .keys = keys,
    .nkeys = sizeof keys / sizeof keys[0],
    .open = dens_open,
    .close = dens_close,
    .on_access = dens_access,
    .on_move = dens_move,
    .on_remove = dens_remove,
    .plan = dens_plan,
};
