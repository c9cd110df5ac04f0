/* Small helpers shared by the in-tree volume plugins (posix, s3). Header
 * only, so that a plugin still links no kvplane library: the ABI is
 * include/kvplane/volume_plugin.h alone. */
#ifndef KVP_PLUGIN_UTIL_H
#define KVP_PLUGIN_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A size parameter: bytes, with an optional K/M/G/T or KiB..TiB suffix.
 * Returns 0, or -1 for anything else (negative, overflowing, junk). */
static inline int kvp_plugin_parse_size(const char *s, uint64_t *out) {
  static const struct {
    const char *sfx;
    uint64_t mul;
  } u[] = {{"", 1},           {"B", 1},
           {"K", 1ull << 10}, {"KiB", 1ull << 10},
           {"M", 1ull << 20}, {"MiB", 1ull << 20},
           {"G", 1ull << 30}, {"GiB", 1ull << 30},
           {"T", 1ull << 40}, {"TiB", 1ull << 40}};
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-')
    return -1;
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
    if (strcmp(end, u[i].sfx) == 0) {
      if (v > UINT64_MAX / u[i].mul)
        return -1;
      *out = v * u[i].mul;
      return 0;
    }
  return -1;
}

/* A namespace is a key or path component: 1..64 of [A-Za-z0-9_-]. */
static inline int kvp_plugin_ns_ok(const char *ns) {
  size_t n = 0;
  if (ns == NULL)
    return 0;
  for (; ns[n]; n++)
    if (!((ns[n] >= 'a' && ns[n] <= 'z') || (ns[n] >= 'A' && ns[n] <= 'Z') ||
          (ns[n] >= '0' && ns[n] <= '9') || ns[n] == '_' || ns[n] == '-') ||
        n >= 64)
      return 0;
  return n > 0;
}

/* Reads an identity marker's text (outside bytes: a file or an object;
 * "kvplane volume\nid=<32 hex>\n...namespace=<ns>\n..."): its id into id
 * (33 bytes) and its namespace into ns (65 bytes; "" when it names none or
 * names one that is not a namespace). Returns 0, or -1 when text is not a
 * marker. */
static inline int kvp_plugin_parse_marker(const char *text, char *id, char *ns) {
  const char *at = strstr(text, "\nid="), *n = strstr(text, "\nnamespace=");
  ns[0] = '\0';
  if (strncmp(text, "kvplane volume\n", 15) != 0 || at == NULL ||
      strspn(at + 4, "0123456789abcdef") < 32)
    return -1;
  memcpy(id, at + 4, 32);
  id[32] = '\0';
  if (n != NULL) {
    size_t len = strcspn(n + 11, "\n");
    if (len <= 64) {
      memcpy(ns, n + 11, len);
      ns[len] = '\0';
      if (!kvp_plugin_ns_ok(ns))
        ns[0] = '\0';
    }
  }
  return 0;
}

/* Doubles the capacity of the array a (to 16 elements at first): 0, or -1
 * when out of memory, a and cap unchanged. */
#define KVP_PLUGIN_GROW(a, cap) kvp_plugin_grow((void **)&(a), &(cap), sizeof *(a))
static inline int kvp_plugin_grow(void **a, size_t *cap, size_t elem) {
  size_t n = *cap ? *cap * 2 : 16;
  void *p = realloc(*a, n * elem);
  if (p == NULL)
    return -1;
  *a = p;
  *cap = n;
  return 0;
}

#endif
