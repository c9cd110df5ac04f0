/* The table of tiering policies and what every policy shares: finding one
 * by name, its parameters, its state (see policy.h). A new policy is one
 * file, one row below and one test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kvplane/status.h"
#include "tier/policy.h"

static const kvp__tier_policy_t *const policies[] = {
    &kvp__tier_policy_lru, /* the default */
    &kvp__tier_policy_s3fifo,     &kvp__tier_policy_lfu,
    &kvp__tier_policy_hyperbolic, &kvp__tier_policy_density,
};
#define NPOLICIES (sizeof policies / sizeof policies[0])

const char *const kvp__tier_policy_names[] = {"lru",        "s3fifo",  "lfu",
                                              "hyperbolic", "density", NULL};

const kvp__tier_policy_t *kvp__tier_policy_find(const char *name) {
  for (size_t i = 0; i < NPOLICIES; i++)
    if (strcmp(policies[i]->name, name) == 0)
      return policies[i];
  return NULL;
}

static void list_names(char *out, size_t len) {
  size_t off = 0;
  out[0] = '\0';
  for (size_t i = 0; i < NPOLICIES && off < len; i++)
    off += (size_t)snprintf(out + off, len - off, "%s%s", i ? ", " : "", policies[i]->name);
}

static void list_keys(const kvp__tier_policy_t *pol, char *out, size_t len) {
  size_t off = 0;
  snprintf(out, len, "none");
  for (size_t i = 0; i < pol->nkeys && off < len; i++)
    off += (size_t)snprintf(out + off, len - off, "%s%s", i ? ", " : "", pol->keys[i].name);
}

int kvp__tier_policy_params(const char *name, const char *params, double *conf, char *err,
                            size_t errlen) {
  const kvp__tier_policy_t *pol = kvp__tier_policy_find(name && name[0] ? name : "lru");
  char names[256], buf[1024];

  if (pol == NULL) {
    list_names(names, sizeof names);
    snprintf(err, errlen, "[tiering] policy: '%s' is not a policy (there are: %s)", name, names);
    return KVP_ECONFIG;
  }
  for (size_t i = 0; i < pol->nkeys; i++)
    conf[i] = pol->keys[i].def;
  if (params == NULL)
    return 0;
  if (strlen(params) >= sizeof buf) {
    snprintf(err, errlen, "[tiering] policy_params: longer than %zu bytes", sizeof buf - 1);
    return KVP_ECONFIG;
  }
  snprintf(buf, sizeof buf, "%s", params);
  char *save = NULL;
  for (char *tok = strtok_r(buf, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
    char *eq = strchr(tok, '=');
    size_t k = pol->nkeys;
    if (eq != NULL) {
      *eq = '\0';
      for (k = 0; k < pol->nkeys && strcmp(pol->keys[k].name, tok) != 0; k++)
        ;
    }
    if (eq == NULL || k == pol->nkeys) {
      list_keys(pol, names, sizeof names);
      snprintf(err, errlen,
               "[tiering] policy_params: '%s' is not a parameter of policy %s (its "
               "parameters: %s)",
               tok, pol->name, names);
      return KVP_ECONFIG;
    }
    const kvp__tier_policy_key_t *key = &pol->keys[k];
    double v;
    char *end = NULL;
    int64_t ms;
    if (key->duration) {
      if (kvp__parse_duration_ms(eq + 1, &ms) != 0)
        end = NULL;
      else
        end = eq + 1 + strlen(eq + 1), v = (double)ms;
    } else {
      v = strtod(eq + 1, &end);
    }
    if (end == NULL || end == eq + 1 || *end != '\0' || !(v >= key->min && v <= key->max)) {
      snprintf(err, errlen, "[tiering] policy_params: %s.%s = '%s': need a %s in [%g, %g]",
               pol->name, key->name, eq + 1, key->duration ? "duration (ms)" : "number", key->min,
               key->max);
      return KVP_ECONFIG;
    }
    conf[k] = v;
  }
  return 0;
}

int kvp__tier_pol_open(const char *name, const char *params, kvp__tier_pol_t **out, char *err,
                       size_t errlen) {
  kvp__tier_pol_t *p;
  int rc;

  *out = NULL;
  if ((p = calloc(1, sizeof *p)) == NULL)
    return KVP_ENOMEM;
  if ((rc = kvp__tier_policy_params(name, params, p->conf, err, errlen)) != 0) {
    free(p);
    return rc;
  }
  p->ops = kvp__tier_policy_find(name && name[0] ? name : "lru");
  if (p->ops->open != NULL && (rc = p->ops->open(p->conf, &p->state)) != 0) {
    snprintf(err, errlen, "tiering policy %s: %s", p->ops->name, kvp_strerror(rc));
    free(p);
    return rc;
  }
  *out = p;
  return 0;
}

void kvp__tier_pol_close(kvp__tier_pol_t *p) {
  if (p == NULL)
    return;
  if (p->ops->close != NULL)
    p->ops->close(p->state);
  free(p);
}

int kvp__tier_pol_plan(kvp__tier_pol_t *p, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols,
                       size_t nvols, const kvp__tier_cand_t *cands, size_t ncands, uint64_t now_ms,
                       kvp__tier_move_t **moves, size_t *nmoves) {
  return p->ops->plan(p->state, prm, vols, nvols, cands, ncands, now_ms, moves, nmoves);
}

void kvp__tier_pol_access(kvp__tier_pol_t *p, uint64_t hash, int tier, uint64_t now_ms) {
  if (p->ops->on_access != NULL)
    p->ops->on_access(p->state, hash, tier, now_ms);
}

void kvp__tier_pol_move(kvp__tier_pol_t *p, uint64_t hash, int from_tier, int to_tier,
                        uint64_t now_ms) {
  if (p->ops->on_move != NULL)
    p->ops->on_move(p->state, hash, from_tier, to_tier, now_ms);
}

void kvp__tier_pol_remove(kvp__tier_pol_t *p, uint64_t hash, int tier) {
  if (p->ops->on_remove != NULL)
    p->ops->on_remove(p->state, hash, tier);
}
