/* The partitions an advisor owns; see partset.h. */
#include "advisor/partset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/subjects.h"

static int bad(char *err, size_t errlen, const char *fmt, const char *arg) {
  char why[160];
  snprintf(why, sizeof why, fmt, arg);
  snprintf(err, errlen, "[partitions] owned: %s", why);
  return KVP_ECONFIG;
}

static int number(const char *s, size_t n, uint32_t *out) {
  char buf[16];
  char *end;
  if (n == 0 || n >= sizeof buf)
    return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  errno = 0;
  unsigned long v = strtoul(buf, &end, 10);
  if (errno || *end || buf[0] < '0' || buf[0] > '9' || v >= KVP_PARTITIONS_MAX)
    return -1;
  *out = (uint32_t)v;
  return 0;
}

int kvp__adv_partset_parse(kvp__adv_partset_t *ps, uint32_t count, const char *owned, char *err,
                           size_t errlen) {
  uint8_t seen[KVP_PARTITIONS_MAX] = {0};
  const char *s = owned;

  memset(ps, 0, sizeof *ps);
  ps->count = count;
  if (count == 0) {
    ps->n = 1;
    if (owned[0])
      return bad(err, errlen, "'%s' is set but [partitions] count is 0", owned);
    return 0;
  }
  if (owned[0] == '\0') {
    if (count > KVP__ADV_MAX_OWNED)
      return bad(err, errlen, "empty means all, and an advisor owns at most 64 partitions%s", "");
    for (uint32_t p = 0; p < count; p++)
      ps->p[ps->n++] = p;
    return 0;
  }
  while (*s) {
    size_t n = strcspn(s, ",");
    const char *dash = memchr(s, '-', n);
    uint32_t lo, hi;
    char tok[64];
    snprintf(tok, sizeof tok, "%.*s", (int)(n < 63 ? n : 63), s);
    if (dash ? number(s, (size_t)(dash - s), &lo) != 0 ||
                   number(dash + 1, n - (size_t)(dash - s) - 1, &hi) != 0 || hi < lo
             : number(s, n, &lo) != 0)
      return bad(err, errlen, "'%s' is not a partition or a range a-b", tok);
    if (!dash)
      hi = lo;
    if (hi >= count)
      return bad(err, errlen, "'%s' is beyond [partitions] count", tok);
    for (uint32_t p = lo; p <= hi; p++) {
      if (seen[p]++)
        return bad(err, errlen, "'%s' names a partition twice", tok);
      if (ps->n == KVP__ADV_MAX_OWNED)
        return bad(err, errlen, "more than 64 partitions (at '%s')", tok);
      ps->n++;
    }
    s += n;
    if (*s == ',' && *++s == '\0')
      return bad(err, errlen, "'%s' ends with a comma", owned);
  }
  ps->n = 0;
  for (uint32_t p = 0; p < count; p++)
    if (seen[p])
      ps->p[ps->n++] = p;
  return 0;
}

int kvp__adv_partset_tiered(const kvp_advisor_config_t *cfg, const kvp__adv_partset_t *owned,
                            kvp__adv_partset_t *tiered, int *all, char *err, size_t errlen) {
  *all = cfg->tier_parts[0] == '\0';
  if (*all) {
    *tiered = *owned;
    return 0;
  }
  if (owned->count == 0) {
    snprintf(err, errlen, "[tiering] partitions: '%s' is set but [partitions] count is 0",
             cfg->tier_parts);
    return KVP_ECONFIG;
  }
  memset(tiered, 0, sizeof *tiered);
  tiered->count = owned->count;
  if (strcmp(cfg->tier_parts, "none") == 0)
    return 0;
  char why[256];
  if (kvp__adv_partset_parse(tiered, owned->count, cfg->tier_parts, why, sizeof why) != 0) {
    const char *cause = strchr(why, ':'); /* after "[partitions] owned" */
    snprintf(err, errlen, "[tiering] partitions%s", cause ? cause : why);
    return KVP_ECONFIG;
  }
  for (int i = 0; i < tiered->n; i++)
    if (kvp__adv_partset_slot(owned, tiered->p[i]) < 0) {
      snprintf(err, errlen,
               "[tiering] partitions: %" PRIu32 " is not in [partitions] owned (%s): an advisor "
               "tiers only partitions it consumes",
               tiered->p[i], cfg->owned[0] ? cfg->owned : "all");
      return KVP_ECONFIG;
    }
  return 0;
}

int kvp__adv_partset_check(const kvp_advisor_config_t *cfg, char *err, size_t errlen) {
  kvp__adv_partset_t ps, tiered;
  int all;
  int rc = kvp__adv_partset_parse(&ps, (uint32_t)cfg->partitions, cfg->owned, err, errlen);
  if (rc != 0 || (rc = kvp__adv_partset_tiered(cfg, &ps, &tiered, &all, err, errlen)) != 0)
    return rc;
  if (cfg->partitions > 0 && cfg->mode != KVP_ADVISOR_JETSTREAM) {
    snprintf(err, errlen, "[partitions] count: partitions need [nats] mode = jetstream");
    return KVP_ECONFIG;
  }
  /* Tiering across partitions (docs/SCALE.md, src/tier/parts.c): each
   * partition's objects live under <ns>-p<p> in every volume, which must
   * be a volume namespace (at most 64 bytes). */
  if (cfg->partitions > 0 && cfg->tiering) {
    char kns[KVP_PARTITION_NS_MAX + 8];
    if (kvp_partition_volume_ns(kns, sizeof kns, cfg->ns, (uint32_t)cfg->partitions - 1) != 0) {
      snprintf(err, errlen,
               "[tiering] enabled: namespace '%s' with %d partitions makes key namespaces "
               "longer than %d bytes (%s-p<partition>)",
               cfg->ns, (int)cfg->partitions, KVP_PARTITION_NS_MAX, cfg->ns);
      return KVP_ECONFIG;
    }
  }
  return 0;
}

int kvp__adv_partset_slot(const kvp__adv_partset_t *ps, uint32_t p) {
  if (ps->count == 0)
    return 0;
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i] == p)
      return i;
  return -1;
}

void kvp__adv_partset_format(const kvp__adv_partset_t *ps, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0)
    return;
  buf[0] = '\0';
  if (ps->count == 0) {
    snprintf(buf, len, "-");
    return;
  }
  for (int i = 0; i < ps->n && used < len; i++) {
    int w = snprintf(buf + used, len - used, "%s%" PRIu32, i ? "," : "", ps->p[i]);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

static int keep_worker(void *ctx, const char *worker) {
  const kvp__adv_partset_t *ps = ctx;
  return strcmp(worker, "_advisor") == 0 ||
         kvp__adv_partset_slot(ps, kvp_partition_of(worker, ps->count)) >= 0;
}

int kvp__adv_partset_prepare_db(const kvp__adv_partset_t *ps, kvp__store_t *st, char *err,
                                size_t errlen) {
  uint32_t gone[KVP_PARTITIONS_MAX];
  size_t ngone = 0, dropped = 0;
  int rc;

  if (ps->count == 0)
    return 0;
  for (uint32_t p = 0; p < ps->count; p++)
    if (kvp__adv_partset_slot(ps, p) < 0)
      gone[ngone++] = p;
  if ((rc = kvp__store_drop_workers(st, keep_worker, (void *)ps, gone, ngone, &dropped)) != 0) {
    snprintf(err, errlen, "[store] path: cannot drop the rows of partitions not owned: %s",
             kvp_strerror(rc));
    return rc;
  }
  return 0;
}

int kvp__adv_partset_positions(const kvp__adv_partset_t *ps, kvp__store_t *st, uint64_t stream_seq,
                               uint64_t *pos, uint64_t *sum) {
  *sum = 0;
  if (ps->count == 0) {
    pos[0] = *sum = stream_seq;
    return 0;
  }
  for (int i = 0; i < ps->n; i++) {
    int rc = kvp__store_position(st, ps->p[i], &pos[i]);
    if (rc != 0)
      return rc;
    *sum += pos[i];
  }
  return 0;
}
