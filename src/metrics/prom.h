/* Prometheus text exposition (format 0.0.4): a writer of metric families
 * into a growable buffer, for the /metrics endpoint of the advisor and the
 * relay (server.h).
 *
 *   kvp__prom_t p;
 *   kvp__prom_init(&p);
 *   kvp__prom_family(&p, "kvplane_x_total", "counter", "Things seen.");
 *   kvp__prom_sample(&p, "kvplane_x_total", (const char *[]){"type", "a", NULL}, 3);
 *   ... p.buf holds p.len bytes, NUL-terminated ...
 *   kvp__prom_free(&p);
 *
 * A failed allocation is remembered (p.err) and every later call does
 * nothing, so a collector writes its families without checking each call
 * and tests p.err once at the end.
 *
 * Threads: none of its own; a writer belongs to one thread at a time. */
#ifndef KVP_METRICS_PROM_H
#define KVP_METRICS_PROM_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvp__prom_s {
  char *buf;  /* NUL-terminated text; NULL before the first write */
  size_t len; /* bytes written, without the NUL */
  size_t cap;
  int err; /* 0, or KVP_ENOMEM once a write could not grow the buffer */
} kvp__prom_t;

void kvp__prom_init(kvp__prom_t *p);
/* Forgets the text but keeps the buffer (and clears err). */
void kvp__prom_reset(kvp__prom_t *p);
void kvp__prom_free(kvp__prom_t *p);

/* Writes the "# HELP name help" and "# TYPE name type" lines that open a
 * family; type is counter, gauge or histogram. Help text is escaped
 * (backslash and newline) as the format requires. */
void kvp__prom_family(kvp__prom_t *p, const char *name, const char *type, const char *help);

/* Writes one sample line "name{k="v",...} value". labels is NULL (no
 * labels) or a NULL-terminated list of name, value pairs; values are
 * escaped (backslash, double quote, newline). Integers up to 2^53 print
 * exactly; NaN and infinities print as NaN, +Inf, -Inf. */
void kvp__prom_sample(kvp__prom_t *p, const char *name, const char *const *labels, double value);

/* A histogram with fixed bucket bounds (ascending upper bounds, at most
 * KVP__PROM_MAX_BUCKETS, the +Inf bucket implied). Observations are counted
 * per bucket; the exposition makes them cumulative. */
#define KVP__PROM_MAX_BUCKETS 16
typedef struct kvp__prom_hist_s {
  double bounds[KVP__PROM_MAX_BUCKETS];
  size_t nbounds;
  uint64_t counts[KVP__PROM_MAX_BUCKETS + 1]; /* [nbounds]: above the last bound */
  double sum;
  uint64_t count;
} kvp__prom_hist_t;

/* Sets the bounds (copied; n is cut to KVP__PROM_MAX_BUCKETS) and zeroes
 * the counts. */
void kvp__prom_hist_init(kvp__prom_hist_t *h, const double *bounds, size_t n);
/* Counts value v in the first bucket whose bound is >= v (le semantics). */
void kvp__prom_hist_observe(kvp__prom_hist_t *h, double v);

/* Writes the family of a histogram: HELP and TYPE, one name_bucket line per
 * bound with the cumulative count, the le="+Inf" bucket (= count), name_sum
 * and name_count. labels as for kvp__prom_sample (le is added to them). */
void kvp__prom_histogram(kvp__prom_t *p, const char *name, const char *help,
                         const char *const *labels, const kvp__prom_hist_t *h);

#endif
