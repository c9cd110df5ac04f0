/* The tiering policies (src/tier/policy_*.c) and their registry: each
 * policy's decisions on small hand-made traces, exactly; every policy keeps
 * prefixes whole; names and parameters are checked with errors that list
 * what there is. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"
#include "tier/policy.h"

#define NOW 10000000000ull
#define OLD (NOW - 3600000ull)

static kvp__tier_cand_t cand(uint64_t hash, uint64_t parent, uint32_t vol, uint64_t access) {
  return (kvp__tier_cand_t){.hash = hash,
                            .parent = parent,
                            .has_parent = parent != 0,
                            .vol = vol,
                            .bytes = 100,
                            .last_access_ms = access,
                            .since_ms = OLD};
}

/* Ten blocks 1..10 in G3 (volume 0), block i last read at OLD + i. */
static void ten(kvp__tier_cand_t *c) {
  for (int i = 0; i < 10; i++)
    c[i] = cand((uint64_t)i + 1, 0, 0, OLD + (uint64_t)i + 1);
}

/* Plans with G3 at used bytes of 1000 (high watermark 900, low 800: two
 * blocks of 100 leave when it is full) and an empty G4; returns the moved
 * hashes in order in got (up to 8), their count as the result. */
static size_t plan_at(kvp__tier_pol_t *p, kvp__tier_cand_t *c, size_t n, uint64_t used,
                      uint64_t now, uint64_t *got) {
  kvp__tier_params_t prm;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = used}, {.tier = 4}};
  kvp__tier_move_t *m = NULL;
  size_t nm = 0;

  kvp__tier_params_init(&prm);
  assert_int_equal(kvp__tier_pol_plan(p, &prm, v, 2, c, n, now, &m, &nm), 0);
  for (size_t i = 0; i < nm && i < 8; i++) {
    assert_int_equal(m[i].kind, KVP__TIER_DEMOTE);
    got[i] = m[i].hash;
  }
  free(m);
  return nm;
}

static size_t plan(kvp__tier_pol_t *p, kvp__tier_cand_t *c, size_t n, uint64_t used,
                   uint64_t *got) {
  return plan_at(p, c, n, used, NOW, got);
}

static kvp__tier_pol_t *open_pol(const char *name, const char *params) {
  kvp__tier_pol_t *p = NULL;
  char err[256];
  int rc = kvp__tier_pol_open(name, params, &p, err, sizeof err);
  if (rc != 0)
    fail_msg("%s: %s", name ? name : "(default)", err);
  return p;
}

static void registry_names_and_params(void **state) {
  (void)state;
  kvp__tier_pol_t *p = NULL;
  char err[256];
  double conf[KVP__TIER_POLICY_KEYS_MAX];

  assert_string_equal(kvp__tier_policy_names[0], "lru"); /* the default first */
  for (int i = 0; kvp__tier_policy_names[i]; i++)
    assert_string_equal(kvp__tier_policy_find(kvp__tier_policy_names[i])->name,
                        kvp__tier_policy_names[i]);
  assert_null(kvp__tier_policy_find("arc"));
  assert_int_equal(kvp__tier_pol_open("arc", NULL, &p, err, sizeof err), KVP_ECONFIG);
  assert_null(p);
  assert_non_null(
      strstr(err, "'arc' is not a policy (there are: lru, s3fifo, lfu, hyperbolic, density)"));
  assert_int_equal(kvp__tier_pol_open("s3fifo", "small=0.2 tiny=1", &p, err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "'tiny' is not a parameter of policy s3fifo (its parameters: "
                              "small, ghost)"));
  assert_int_equal(kvp__tier_policy_params("s3fifo", "small=2", conf, err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "s3fifo.small = '2'"));
  assert_int_equal(kvp__tier_policy_params("lru", "x=1", conf, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "(its parameters: none)"));
  assert_int_equal(kvp__tier_policy_params("s3fifo", "ghost=2, small=0.25", conf, err, sizeof err),
                   0);
  assert_true(conf[0] == 0.25 && conf[1] == 2);
  assert_int_equal(kvp__tier_policy_params("lfu", "half_life=2m", conf, err, sizeof err), 0);
  assert_true(conf[0] == 120000);
  assert_int_equal(kvp__tier_policy_params("lfu", NULL, conf, err, sizeof err), 0);
  assert_true(conf[0] == 600000); /* the default */
  assert_int_equal(
      kvp__tier_policy_params("hyperbolic", "weight=0.5 tau=2s", conf, err, sizeof err), 0);
  assert_true(conf[0] == 0.5 && conf[1] == 2000);
  assert_int_equal(kvp__tier_policy_params("hyperbolic", "weight=5", conf, err, sizeof err),
                   KVP_ECONFIG);
  p = open_pol(NULL, NULL);
  assert_string_equal(p->ops->name, "lru");
  kvp__tier_pol_close(p);
  kvp__tier_pol_close(NULL);
}

/* lru through the registry: the least recently read leave first, and a
 * parent only after its child (1 <- 2: 2 goes, then 1). */
static void lru_decisions(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("lru", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  ten(c);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 2);
  ten(c);
  c[1].parent = 1, c[1].has_parent = 1;
  c[1].last_access_ms = NOW - 1000000; /* 2, child of 1, read more recently than 3 */
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 3);
  assert_int_equal(got[1], 4);
  kvp__tier_pol_close(p);
}

/* lfu: the fewest (decayed) reads leave first, equal counts the least
 * recently read first; counts decay with the half-life; a parent leaves
 * only after its child, however often the child was read. */
static void lfu_decisions(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("lfu", "half_life=1h");
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  ten(c);
  assert_int_equal(plan(p, c, 10, 500, got), 0); /* learns the ten blocks: one read each */
  for (uint64_t h = 1; h <= 10; h++)
    if (h != 9 && h != 4)
      kvp__tier_pol_access(p, h, 3, OLD + 100);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 4); /* one read each: 4 was read before 9 */
  assert_int_equal(got[1], 9);
  kvp__tier_pol_move(p, 4, 3, 4, NOW);
  kvp__tier_pol_move(p, 9, 3, 4, NOW);
  kvp__tier_pol_close(p);

  /* Decay: 1 was read 4 times 10 s ago, 2 once half a second ago, the others
   * twice half a second ago; with a half-life of 1 s, 1 is the coldest. */
  p = open_pol("lfu", "half_life=1s");
  for (uint64_t k = 0; k < 4; k++)
    kvp__tier_pol_access(p, 1, 3, NOW - 10000);
  kvp__tier_pol_access(p, 2, 3, NOW - 500);
  for (uint64_t h = 3; h <= 10; h++) {
    kvp__tier_pol_access(p, h, 3, NOW - 500);
    kvp__tier_pol_access(p, h, 3, NOW - 500);
  }
  ten(c);
  c[0].last_access_ms = NOW - 10000;
  for (int i = 1; i < 10; i++)
    c[i].last_access_ms = NOW - 500;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 2);
  kvp__tier_pol_close(p);

  /* Prefixes whole: 1 (read once) is the parent of 2 (read 5 times); 10
   * read twice, the others 3 times: 10 goes, then the least recently read
   * of 2..9 at 3 reads (3); 1 stays, held by its child. */
  p = open_pol("lfu", "half_life=1h");
  ten(c);
  c[1].parent = 1, c[1].has_parent = 1;
  assert_int_equal(plan(p, c, 10, 500, got), 0);
  for (uint64_t h = 2; h <= 10; h++)
    for (int k = 0; k < (h == 2 ? 4 : h == 10 ? 1 : 2); k++)
      kvp__tier_pol_access(p, h, 3, OLD + 100);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 10);
  assert_int_equal(got[1], 3);
  kvp__tier_pol_close(p);
}

/* s3fifo on a trace: 1..10 arrive (all in S); 2 is read (the hook) and 3
 * too (a later last access in the candidates); room for two: S's head 1
 * leaves, 2 and 3 go to M, 4 leaves. 1 comes back to G3: a ghost, so into
 * M. Room for two again: S is 5..10, over its share: 5 and 6 leave. 7 is
 * read: next, 7 goes to M and 8, 9 leave. */
static void s3fifo_decisions(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("s3fifo", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  ten(c);
  assert_int_equal(plan(p, c, 10, 500, got), 0); /* admitted, in S */
  kvp__tier_pol_access(p, 2, 3, NOW - 10);
  c[2].last_access_ms = NOW - 10;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 4);
  kvp__tier_pol_move(p, 1, 3, 4, NOW);
  kvp__tier_pol_move(p, 4, 3, 4, NOW);

  c[0].last_access_ms = NOW - 5; /* 1 is back in G3 */
  c[3].vol = 1;                  /* 4 is in G4 */
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 5);
  assert_int_equal(got[1], 6);
  kvp__tier_pol_move(p, 5, 3, 4, NOW);
  kvp__tier_pol_move(p, 6, 3, 4, NOW);
  c[4].vol = c[5].vol = 1;

  kvp__tier_pol_access(p, 7, 3, NOW);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 8);
  assert_int_equal(got[1], 9);
  kvp__tier_pol_move(p, 8, 3, 4, NOW);
  kvp__tier_pol_move(p, 9, 3, 4, NOW);
  c[7].vol = c[8].vol = 1;

  /* Left in G3: 10 in S; 2, 3, 1, 7 in M with no reads since. S is over
   * its share (1 > 0.5): 10 leaves; then M's head, 2. 1, the ghost that
   * came back, outlives blocks read before it left. */
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 10);
  assert_int_equal(got[1], 2);
  kvp__tier_pol_close(p);
}

/* s3fifo keeps prefixes whole: 1 <- 2 arrive first (S's head is 1), but 1
 * leaves only after its child. */
static void s3fifo_keeps_prefixes_whole(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("s3fifo", "small=0.1");
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  ten(c);
  c[1].parent = 1, c[1].has_parent = 1;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 1);
  kvp__tier_pol_close(p);
}

/* Blocks 1..10 in G3: 1 read 100 s ago, 4 times; 2 read 30 s ago, once;
 * 3 read 60 s ago, twice; 4..10 read 10 s ago, once each. */
static void counted(kvp__tier_cand_t *c) {
  ten(c);
  for (int i = 0; i < 10; i++) {
    c[i].last_access_ms = NOW - 10000;
    c[i].freq = 1;
  }
  c[0].last_access_ms = NOW - 100000, c[0].freq = 4;
  c[1].last_access_ms = NOW - 30000;
  c[2].last_access_ms = NOW - 60000, c[2].freq = 2;
}

/* hyperbolic: (age + tau) / count, highest first. With tau 1 s: 2 is at
 * 31000, 3 at 30500, 1 at 25250, the others at 11000: 2 and 3 leave, where
 * lru sends 1 and 3 (the least recently read) and weight=0 is lru. */
static void hyperbolic_decisions(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("hyperbolic", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  counted(c);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 3);
  kvp__tier_pol_close(p);
  p = open_pol("lru", NULL);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 3);
  kvp__tier_pol_close(p);
  p = open_pol("hyperbolic", "weight=0");
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 3);
  kvp__tier_pol_close(p);

  /* tau: 4 read now, once (tau / 1), against 5 read 2 s ago, 4 times
   * ((2000 + tau) / 4) and 6..10, 1..3 as above but read 1 s ago, 8 times
   * ((1000 + tau) / 8). tau 1 s: 4 at 1000, 5 at 750, the others at 250:
   * 4 and 5 leave. tau 1 ms: 4 at 1, 5 at 500, the others at 125: 5 leaves,
   * then the least recently read of the others (1, by hash). */
  ten(c);
  for (int i = 0; i < 10; i++)
    c[i].last_access_ms = NOW - 1000, c[i].freq = 8;
  c[3].last_access_ms = NOW, c[3].freq = 1;
  c[4].last_access_ms = NOW - 2000, c[4].freq = 4;
  p = open_pol("hyperbolic", "tau=1s");
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 4);
  assert_int_equal(got[1], 5);
  kvp__tier_pol_close(p);
  p = open_pol("hyperbolic", "tau=1");
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 5);
  assert_int_equal(got[1], 1);
  kvp__tier_pol_close(p);
}

/* hyperbolic keeps prefixes whole: 1, the coldest (read 100 s ago, once),
 * is the parent of 2 (read 1 s ago, 5 times): 1 stays and the next
 * coldest leaves, 3 and 4 (read 10 s ago, once, equal: by hash). With 2
 * the coldest but one (read 50 s ago, once), 2 leaves and then 1. */
static void hyperbolic_keeps_prefixes_whole(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("hyperbolic", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  counted(c);
  c[0].freq = 1;
  c[1].parent = 1, c[1].has_parent = 1;
  c[1].last_access_ms = NOW - 1000, c[1].freq = 5;
  c[2].last_access_ms = NOW - 10000, c[2].freq = 1;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 3);
  assert_int_equal(got[1], 4);
  c[1].last_access_ms = NOW - 50000, c[1].freq = 1;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 1);
  kvp__tier_pol_close(p);
}

/* density, taught by a hand-made history: at T0 = NOW - 200 s, blocks 1..5
 * (used once: class 1 use) and 6..10 (used twice) enter G3; 6..10 are read
 * 20 s later (bin [16 s, 22.6 s)), 1..5 never. By NOW, 1..5 lived through
 * every bin up to 181 s unread: a block used once has no expected read at
 * any age (density 0); one used twice has a read expected in its fourth
 * bin, so a younger one has a density above 0, an older one (past every
 * read seen) 0. */
static kvp__tier_pol_t *density_taught(void) {
  kvp__tier_pol_t *p = open_pol("density", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8], t0 = NOW - 200000;

  for (int i = 0; i < 10; i++) {
    c[i] = cand((uint64_t)i + 1, 0, 0, t0);
    c[i].freq = i < 5 ? 1 : 2;
    kvp__tier_pol_move(p, (uint64_t)i + 1, 0, 3, t0);
  }
  assert_int_equal(plan_at(p, c, 10, 500, t0, got), 0); /* lives start; nothing moves */
  for (int i = 5; i < 10; i++)
    kvp__tier_pol_access(p, (uint64_t)i + 1, 3, t0 + 20000);
  return p;
}

/* Then, at NOW, blocks 11..15 used once, read 1 s ago, and 16..20 used
 * twice, read 15 s ago: 11..15 have density 0, 16..20 above; the lowest
 * leave, equal ones least recently read first, then by hash: 11 and 12,
 * where lru sends 16 and 17. With 20 replaced by 21, used twice but read
 * 300 s ago (past every read seen: density 0, and the least recently
 * read), 21 leaves, then 11. */
static void density_decisions(void **state) {
  (void)state;
  kvp__tier_pol_t *p = density_taught();
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  for (int i = 0; i < 10; i++) {
    c[i] = cand((uint64_t)i + 11, 0, 0, i < 5 ? NOW - 1000 : NOW - 15000);
    c[i].freq = i < 5 ? 1 : 2;
  }
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 11);
  assert_int_equal(got[1], 12);
  c[9] = cand(21, 0, 0, NOW - 300000);
  c[9].freq = 2;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 21);
  assert_int_equal(got[1], 11);
  kvp__tier_pol_close(p);

  /* The ages swapped (11..15 read 15 s ago, 16..20 1 s ago): 11 and 12
   * still, where one class for all (the reads of 6..10 taken for every
   * block) would send the youngest, 16 and 17, for their longer wait. */
  p = density_taught();
  for (int i = 0; i < 10; i++) {
    c[i] = cand((uint64_t)i + 11, 0, 0, i < 5 ? NOW - 15000 : NOW - 1000);
    c[i].freq = i < 5 ? 1 : 2;
  }
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 11);
  assert_int_equal(got[1], 12);
  kvp__tier_pol_close(p);

  p = open_pol("lru", NULL); /* the first case's candidates */
  for (int i = 0; i < 10; i++) {
    c[i] = cand((uint64_t)i + 11, 0, 0, i < 5 ? NOW - 1000 : NOW - 15000);
    c[i].freq = i < 5 ? 1 : 2;
  }
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 16);
  assert_int_equal(got[1], 17);
  kvp__tier_pol_close(p);
}

/* density keeps prefixes whole: as above, but 11 (density 0) is the parent
 * of 16 (density above 0): 11 stays and 12, 13 leave. */
static void density_keeps_prefixes_whole(void **state) {
  (void)state;
  kvp__tier_pol_t *p = density_taught();
  kvp__tier_cand_t c[10];
  uint64_t got[8];

  for (int i = 0; i < 10; i++) {
    c[i] = cand((uint64_t)i + 11, 0, 0, i < 5 ? NOW - 1000 : NOW - 15000);
    c[i].freq = i < 5 ? 1 : 2;
  }
  c[5].parent = 11, c[5].has_parent = 1;
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 12);
  assert_int_equal(got[1], 13);
  kvp__tier_pol_close(p);
}

/* density learns parents apart from the blocks nobody extends (the last
 * block of a prompt is rarely read again: the next turn's block there is a
 * fuller one). Taught at T0 = NOW - 200 s: 1..4 and 9..12 used once, no
 * child; 5..8 used once, the parents of 9..12; 5..8 are read 20 s later,
 * the others never. At NOW, used once: 21..24 read 1 s ago, 25..27 read
 * 15 s ago with children 28..30, read 15 s ago too. Three leave: the
 * childless ones have density 0, the least recently read first: 28, 29,
 * 30; 25, a leaf once 28 has left, has a parent's density, above 0, and
 * stays. Counting every block as childless, the reads of 5..8 would give
 * every block used once a density above 0, the youngest the lowest: 21,
 * 22 and 23 would leave. */
static void density_parents_apart(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("density", NULL);
  kvp__tier_cand_t c[12];
  uint64_t got[8], t0 = NOW - 200000;

  for (int i = 0; i < 12; i++) {
    c[i] = cand((uint64_t)i + 1, i >= 8 ? (uint64_t)i - 3 : 0, 0, t0);
    c[i].freq = 1;
  }
  assert_int_equal(plan_at(p, c, 12, 500, t0, got), 0);
  for (uint64_t h = 5; h <= 8; h++)
    kvp__tier_pol_access(p, h, 3, t0 + 20000);
  for (int i = 0; i < 10; i++) {
    c[i] =
        cand((uint64_t)i + 21, i >= 7 ? (uint64_t)i + 18 : 0, 0, i < 4 ? NOW - 1000 : NOW - 15000);
    c[i].freq = 1;
  }
  assert_int_equal(plan(p, c, 10, 1100, got), 3);
  assert_int_equal(got[0], 28);
  assert_int_equal(got[1], 29);
  assert_int_equal(got[2], 30);
  kvp__tier_pol_close(p);
}

/* density drops the record of a block in G4 unread past its last age bin
 * (68 min): one that is still a candidate (a G4 block hot enough to be
 * promoted) starts a life afresh, and the plan goes on. Block 11 in G4,
 * read 2 h before NOW, seen at NOW - 2 h and at NOW; 1..9 in G3 as in
 * ten(): G3 over its high watermark, the least recently read leave (every
 * block in G3 has density 0: nothing was read). */
static void density_forgets_and_goes_on(void **state) {
  (void)state;
  kvp__tier_pol_t *p = open_pol("density", NULL);
  kvp__tier_cand_t c[10];
  uint64_t got[8], t0 = NOW - 7200000;

  ten(c);
  c[9] = cand(11, 0, 1, t0);
  c[9].freq = 8;
  assert_int_equal(plan_at(p, c, 10, 500, t0, got), 0);
  assert_int_equal(plan(p, c, 10, 1000, got), 2);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 2);
  kvp__tier_pol_close(p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(registry_names_and_params),
    cmocka_unit_test(lru_decisions),
    cmocka_unit_test(lfu_decisions),
    cmocka_unit_test(s3fifo_decisions),
    cmocka_unit_test(s3fifo_keeps_prefixes_whole),
    cmocka_unit_test(hyperbolic_decisions),
    cmocka_unit_test(hyperbolic_keeps_prefixes_whole),
    cmocka_unit_test(density_decisions),
    cmocka_unit_test(density_keeps_prefixes_whole),
    cmocka_unit_test(density_parents_apart),
    cmocka_unit_test(density_forgets_and_goes_on),
};

KVP_TEST_MAIN("tier_policies", tests)
