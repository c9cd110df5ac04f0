/* Prometheus text exposition writer; see prom.h. */
#include "metrics/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "kvplane/status.h"

void kvp__prom_init(kvp__prom_t *p) {
  memset(p, 0, sizeof *p);
}

void kvp__prom_reset(kvp__prom_t *p) {
  p->len = 0;
  p->err = 0;
  if (p->buf != NULL)
    p->buf[0] = '\0';
}

void kvp__prom_free(kvp__prom_t *p) {
  free(p->buf);
  kvp__prom_init(p);
}

/* Room for n more bytes and the NUL; 0 or the remembered error. */
static int room(kvp__prom_t *p, size_t n) {
  if (p->err)
    return p->err;
  if (n > SIZE_MAX / 2 - p->len) {
    p->err = KVP_ENOMEM;
    return p->err;
  }
  if (KVP_ARRAY_RESERVE(p->buf, p->cap, p->len + n + 1, 4096) != 0)
    p->err = KVP_ENOMEM;
  return p->err;
}

static void put(kvp__prom_t *p, const char *s, size_t n) {
  if (room(p, n) != 0)
    return;
  memcpy(p->buf + p->len, s, n);
  p->len += n;
  p->buf[p->len] = '\0';
}

static void puts_(kvp__prom_t *p, const char *s) {
  put(p, s, strlen(s));
}

static void printf_(kvp__prom_t *p, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    put(p, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The format's escapes: \\ and \n always, \" inside label values. */
static void escaped(kvp__prom_t *p, const char *s, int quote) {
  for (const char *c = s; *c; c++) {
    if (*c == '\\')
      put(p, "\\\\", 2);
    else if (*c == '\n')
      put(p, "\\n", 2);
    else if (quote && *c == '"')
      put(p, "\\\"", 2);
    else
      put(p, c, 1);
  }
}

static void value(kvp__prom_t *p, double v) {
  if (isnan(v))
    puts_(p, "NaN");
  else if (isinf(v))
    puts_(p, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) <= 9007199254740992.0)
    printf_(p, "%.0f", v);
  else
    printf_(p, "%.17g", v);
}

void kvp__prom_family(kvp__prom_t *p, const char *name, const char *type, const char *help) {
  puts_(p, "# HELP ");
  puts_(p, name);
  put(p, " ", 1);
  escaped(p, help, 0);
  puts_(p, "\n# TYPE ");
  puts_(p, name);
  put(p, " ", 1);
  puts_(p, type);
  put(p, "\n", 1);
}

/* name{labels[,extra_k="extra_v"]} value\n */
static void line(kvp__prom_t *p, const char *name, const char *suffix, const char *const *labels,
                 const char *extra_k, const char *extra_v, double v) {
  int n = 0;
  puts_(p, name);
  puts_(p, suffix);
  for (size_t i = 0; labels != NULL && labels[i] != NULL && labels[i + 1] != NULL; i += 2) {
    put(p, n++ ? "," : "{", 1);
    puts_(p, labels[i]);
    put(p, "=\"", 2);
    escaped(p, labels[i + 1], 1);
    put(p, "\"", 1);
  }
  if (extra_k != NULL) {
    put(p, n++ ? "," : "{", 1);
    puts_(p, extra_k);
    put(p, "=\"", 2);
    escaped(p, extra_v, 1);
    put(p, "\"", 1);
  }
  if (n)
    put(p, "}", 1);
  put(p, " ", 1);
  value(p, v);
  put(p, "\n", 1);
}

void kvp__prom_sample(kvp__prom_t *p, const char *name, const char *const *labels, double v) {
  line(p, name, "", labels, NULL, NULL, v);
}

void kvp__prom_hist_init(kvp__prom_hist_t *h, const double *bounds, size_t n) {
  memset(h, 0, sizeof *h);
  if (n > KVP__PROM_MAX_BUCKETS)
    n = KVP__PROM_MAX_BUCKETS;
  memcpy(h->bounds, bounds, n * sizeof *bounds);
  h->nbounds = n;
}

void kvp__prom_hist_observe(kvp__prom_hist_t *h, double v) {
  size_t i = 0;
  while (i < h->nbounds && v > h->bounds[i])
    i++;
  h->counts[i]++;
  h->sum += v;
  h->count++;
}

void kvp__prom_histogram(kvp__prom_t *p, const char *name, const char *help,
                         const char *const *labels, const kvp__prom_hist_t *h) {
  uint64_t cum = 0;
  char le[40];
  kvp__prom_family(p, name, "histogram", help);
  for (size_t i = 0; i < h->nbounds; i++) {
    cum += h->counts[i];
    snprintf(le, sizeof le, "%g", h->bounds[i]);
    line(p, name, "_bucket", labels, "le", le, (double)cum);
  }
  line(p, name, "_bucket", labels, "le", "+Inf", (double)h->count);
  line(p, name, "_sum", labels, NULL, NULL, h->sum);
  line(p, name, "_count", labels, NULL, NULL, (double)h->count);
}
