/* INI configuration; see config.h. */
#include "config/config.h"
#include "common/log.h"

#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvplane/status.h"

/* KVP_ETOOBIG for digits past the int64 range (strtoll's ERANGE), so that
 * the message says out of range, not "not an integer". */
static int parse_i64(const char *s, int64_t *out, char **end) {
  errno = 0;
  long long v = strtoll(s, end, 10);
  if (*end == s)
    return KVP_ECONFIG;
  if (errno == ERANGE)
    return KVP_ETOOBIG;
  if (errno != 0)
    return KVP_ECONFIG;
  *out = v;
  return 0;
}

typedef struct unit_s {
  const char *suffix;
  int64_t mul;
} unit_t;

/* A non-negative integer followed by exactly one of the units' suffixes. */
static int parse_units(const char *s, const unit_t *units, size_t nunits, int64_t *out) {
  char *end;
  int64_t v;
  int rc = parse_i64(s, &v, &end);

  if (rc == KVP_ETOOBIG && strspn(end, "0123456789") == 0) {
    for (size_t i = 0; i < nunits; i++)
      if (strcmp(end, units[i].suffix) == 0)
        return s[0] == '-' ? KVP_ECONFIG : KVP_ETOOBIG;
  }
  if (rc != 0 || v < 0)
    return KVP_ECONFIG;
  for (size_t i = 0; i < nunits; i++) {
    if (strcmp(end, units[i].suffix) == 0) {
      if (v > INT64_MAX / units[i].mul)
        return KVP_ETOOBIG;
      *out = v * units[i].mul;
      return 0;
    }
  }
  return KVP_ECONFIG;
}

int kvp__parse_duration_ms(const char *s, int64_t *out) {
  static const unit_t units[] = {{"", 1},      {"ms", 1},      {"s", 1000},
                                 {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  return parse_units(s, units, sizeof units / sizeof units[0], out);
}

int kvp__parse_size(const char *s, int64_t *out) {
  static const unit_t units[] = {{"", 1},          {"B", 1},         {"KiB", 1 << 10},
                                 {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", (int64_t)1 << 40},
                                 {"K", 1 << 10},   {"M", 1 << 20},   {"G", 1 << 30}};
  return parse_units(s, units, sizeof units / sizeof units[0], out);
}

int kvp__parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"};
  static const char *const no[] = {"false", "no", "off", "0"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return KVP_ECONFIG;
}

static const kvp_conf_key_t *find_key(const kvp_conf_key_t *keys, size_t n, const char *section,
                                      const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
      return &keys[i];
  return NULL;
}

static int section_known(const kvp_conf_key_t *keys, size_t n, const char *section) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].section, section) == 0)
      return 1;
  return 0;
}

int kvp__conf_set(const kvp_conf_key_t *keys, size_t nkeys, void *obj, const char *section,
                  const char *name, const char *value, char *err, size_t errlen) {
  const kvp_conf_key_t *k;
  char *p = (char *)obj;
  int64_t v = 0;
  char *end;
  int rc = 0;

  if (!section_known(keys, nkeys, section)) {
    snprintf(err, errlen, "unknown section [%s]", section);
    return KVP_ECONFIG;
  }
  k = find_key(keys, nkeys, section, name);
  if (k == NULL) {
    snprintf(err, errlen, "[%s] %s: unknown key", section, name);
    return KVP_ECONFIG;
  }
  if (k->alias_of != NULL)
    kvp_log_warn("config: [%s] %s is the old name of [%s] %s; please rename it", section, name,
                 section, k->alias_of);
  p += k->offset;
  switch (k->type) {
  case KVP_CONF_STR:
    if (strlen(value) >= (size_t)k->max) {
      snprintf(err, errlen, "[%s] %s: value longer than %" PRId64 " characters", section, name,
               k->max - 1);
      return KVP_ECONFIG;
    }
    memcpy(p, value, strlen(value) + 1);
    return 0;
  case KVP_CONF_BOOL:
    if (kvp__parse_bool(value, (int *)(void *)p) != 0) {
      snprintf(err, errlen, "[%s] %s: '%s' is not a boolean (true/false)", section, name, value);
      return KVP_ECONFIG;
    }
    return 0;
  case KVP_CONF_DOUBLE: {
    errno = 0;
    double d = strtod(value, &end);
    if (errno != 0 || end == value || *end != '\0' || !isfinite(d) || d < (double)k->min ||
        d > (double)k->max) {
      snprintf(err, errlen, "[%s] %s: '%s' is not a number in [%" PRId64 ", %" PRId64 "]", section,
               name, value, k->min, k->max);
      return KVP_ECONFIG;
    }
    *(double *)(void *)p = d;
    return 0;
  }
  case KVP_CONF_ENUM:
    for (int i = 0; k->choices[i] != NULL; i++) {
      if (strcmp(k->choices[i], value) == 0) {
        *(int *)(void *)p = i;
        return 0;
      }
    }
    {
      size_t off =
          (size_t)snprintf(err, errlen, "[%s] %s: '%s' is not one of", section, name, value);
      for (int i = 0; k->choices[i] != NULL && off < errlen; i++)
        off += (size_t)snprintf(err + off, errlen - off, " %s", k->choices[i]);
    }
    return KVP_ECONFIG;
  case KVP_CONF_INT:
    rc = parse_i64(value, &v, &end);
    if (rc == 0 && *end != '\0')
      rc = KVP_ECONFIG;
    if (rc == KVP_ETOOBIG && *end != '\0')
      rc = KVP_ECONFIG;
    break;
  case KVP_CONF_DURATION:
    rc = kvp__parse_duration_ms(value, &v);
    break;
  case KVP_CONF_SIZE:
    rc = kvp__parse_size(value, &v);
    break;
  }
  if (rc == KVP_ETOOBIG) {
    snprintf(err, errlen, "[%s] %s: %s is out of range [%" PRId64 ", %" PRId64 "]", section, name,
             value, k->min, k->max);
    return KVP_ECONFIG;
  }
  if (rc != 0) {
    static const char *const what[] = {[KVP_CONF_INT] = "an integer",
                                       [KVP_CONF_DURATION] = "a duration (e.g. 250ms, 5s, 2m, 7d)",
                                       [KVP_CONF_SIZE] = "a size (e.g. 4096, 64KiB, 16MiB)"};
    snprintf(err, errlen, "[%s] %s: '%s' is not %s", section, name, value, what[k->type]);
    return KVP_ECONFIG;
  }
  if (v < k->min || v > k->max) {
    snprintf(err, errlen, "[%s] %s: %s is out of range [%" PRId64 ", %" PRId64 "]", section, name,
             value, k->min, k->max);
    return KVP_ECONFIG;
  }
  *(int64_t *)(void *)p = v;
  return 0;
}

struct load_ctx {
  const kvp_conf_key_t *keys;
  size_t nkeys;
  void *obj;
  const char *path;
  char *err;
  size_t errlen;
  int failed;
  FILE *f;
  int lineno;     /* line most recently started by the reader */
  int at_start;   /* the next chunk starts a new line */
  int read_errno; /* set when reading failed (a directory: EISDIR) */
  const char *dyn_prefix;
  kvp__conf_dyn_fn dyn;
  void *dyn_ctx;
  struct seen_s { /* every key read, to warn of one given twice */
    char id[200]; /* "section\nkey" */
    int line;
  } * seen;
  size_t nseen, capseen;
};

/* Warns when [section] name was already given in this file, naming both
 * lines (the later value is used, as before); then remembers it. */
static void note_key(struct load_ctx *c, const char *section, const char *name, int line) {
  char id[200];
  snprintf(id, sizeof id, "%s\n%s", section, name);
  for (size_t i = 0; i < c->nseen; i++)
    if (strcmp(c->seen[i].id, id) == 0) {
      kvp_log_warn("config: %s:%d: [%s] %s repeats line %d; the value of line %d is used", c->path,
                   line, section, name, c->seen[i].line, line);
      c->seen[i].line = line;
      return;
    }
  if (c->nseen == c->capseen) {
    size_t cap = c->capseen ? c->capseen * 2 : 64;
    struct seen_s *s = realloc(c->seen, cap * sizeof *s);
    if (s == NULL)
      return; /* only a warning is lost */
    c->seen = s;
    c->capseen = cap;
  }
  snprintf(c->seen[c->nseen].id, sizeof c->seen[0].id, "%s", id);
  c->seen[c->nseen++].line = line;
}

/* Debian's libinih is built without INI_HANDLER_LINENO, so the handler does
 * not get line numbers; this reader counts them instead. */
/* libinih hands a buffer of its INI_MAX_LINE (200) bytes: a longer line
 * came back in pieces, the rest read as lines of their own (a long help
 * comment of --print-config's output as an unknown key). A longer comment
 * is cut (its rest skipped); a longer key line is an error naming it. */
static char *read_line(char *str, int num, void *stream) {
  struct load_ctx *c = stream;
  char *r = fgets(str, num, c->f);
  size_t len;
  int ch;

  if (r == NULL) {
    if (ferror(c->f))
      c->read_errno = errno ? errno : EIO;
    return NULL;
  }
  if (c->at_start)
    c->lineno++;
  len = strlen(r);
  c->at_start = 1;
  if (len == 0 || r[len - 1] == '\n' || (ch = fgetc(c->f)) == EOF || ch == '\n')
    return r; /* whole (what follows a full buffer was its newline or the end) */
  while (ch != EOF && ch != '\n')
    ch = fgetc(c->f);
  const char *p = r + strspn(r, " \t");
  if (*p == '#' || *p == ';')
    return r;
  if (!c->failed) {
    snprintf(c->err, c->errlen, "%s:%d: the line is longer than %d bytes (a key line must fit)",
             c->path, c->lineno, num - 2);
    c->failed = 1;
  }
  r[0] = '\0';
  return r;
}

static int on_entry(void *user, const char *section, const char *name, const char *value) {
  struct load_ctx *c = user;
  int lineno = c->lineno;
  char why[512];

  if (c->failed)
    return 0;
  if (name == NULL) /* section header with INI_CALL_HANDLER_ON_NEW_SECTION */
    return 1;
  note_key(c, section, name, lineno);
  size_t pl = c->dyn_prefix ? strlen(c->dyn_prefix) : 0;
  if (c->dyn != NULL && strncmp(section, c->dyn_prefix, pl) == 0 && section[pl] == ' ') {
    const char *dname = section + pl + 1;
    while (*dname == ' ')
      dname++;
    if (c->dyn(c->dyn_ctx, dname, name, value, lineno, why, sizeof why) != 0) {
      snprintf(c->err, c->errlen, "%s:%d: [%s] %s", c->path, lineno, section, why);
      c->failed = 1;
      return 0;
    }
    return 1;
  }
  if (kvp__conf_set(c->keys, c->nkeys, c->obj, section, name, value, why, sizeof why) != 0) {
    snprintf(c->err, c->errlen, "%s:%d: %s", c->path, lineno, why);
    c->failed = 1;
    return 0;
  }
  return 1;
}

int kvp__conf_load(const char *path, const kvp_conf_key_t *keys, size_t nkeys, void *obj, char *err,
                   size_t errlen) {
  return kvp__conf_load_dyn(path, keys, nkeys, obj, NULL, NULL, NULL, err, errlen);
}

int kvp__conf_load_dyn(const char *path, const kvp_conf_key_t *keys, size_t nkeys, void *obj,
                       const char *dyn_prefix, kvp__conf_dyn_fn dyn, void *dyn_ctx, char *err,
                       size_t errlen) {
  struct load_ctx c = {.keys = keys,
                       .nkeys = nkeys,
                       .obj = obj,
                       .path = path,
                       .err = err,
                       .errlen = errlen,
                       .at_start = 1,
                       .dyn_prefix = dyn_prefix,
                       .dyn = dyn,
                       .dyn_ctx = dyn_ctx};
  FILE *f = fopen(path, "r");
  int rc;

  c.f = f;
  if (f == NULL) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return KVP_EIO;
  }
  rc = ini_parse_stream(read_line, &c, on_entry, &c);
  fclose(f);
  free(c.seen);
  /* fopen succeeds on a directory and only reading fails: without this
   * the file read as empty and the program ran on the defaults. */
  if (c.read_errno != 0) {
    snprintf(err, errlen, "%s: cannot read: %s", path, strerror(c.read_errno));
    return KVP_EIO;
  }
  if (c.failed)
    return KVP_ECONFIG;
  if (rc != 0) {
    snprintf(err, errlen, "%s:%d: syntax error (expected [section] or key = value)", path, rc);
    return KVP_ECONFIG;
  }
  return 0;
}

int kvp__conf_override(const char *assignment, const kvp_conf_key_t *keys, size_t nkeys, void *obj,
                       char *err, size_t errlen) {
  char buf[1024], *dot, *eq;

  if (strlen(assignment) >= sizeof buf) {
    snprintf(err, errlen, "override too long: %.40s...", assignment);
    return KVP_ECONFIG;
  }
  strcpy(buf, assignment);
  eq = strchr(buf, '=');
  dot = strchr(buf, '.');
  if (eq == NULL || dot == NULL || dot > eq) {
    snprintf(err, errlen, "'%s': expected section.key=value", assignment);
    return KVP_ECONFIG;
  }
  *dot = '\0';
  *eq = '\0';
  return kvp__conf_set(keys, nkeys, obj, buf, dot + 1, eq + 1, err, errlen);
}
