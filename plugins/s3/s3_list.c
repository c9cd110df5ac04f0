/* A ListObjectsV2 page read from its XML (s3_list.h). */
#include "s3_list.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "plugin_util.h"

/* The text between a and b (XML character data) with its entities
 * (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;) decoded into out. Returns 0,
 * or -1 when it does not fit or an entity is unknown. */
static int xml_text(const char *a, const char *b, char *out, size_t len) {
  size_t o = 0;
  while (a < b) {
    unsigned long cp = (unsigned char)*a;
    if (*a != '&') {
      a++;
      if (o + 1 >= len)
        return -1;
      out[o++] = (char)cp;
      continue;
    }
    const char *semi = memchr(a, ';', (size_t)(b - a));
    if (semi == NULL)
      return -1;
    size_t n = (size_t)(semi - a - 1);
    const char *e = a + 1;
    if (n == 3 && memcmp(e, "amp", 3) == 0)
      cp = '&';
    else if (n == 2 && memcmp(e, "lt", 2) == 0)
      cp = '<';
    else if (n == 2 && memcmp(e, "gt", 2) == 0)
      cp = '>';
    else if (n == 4 && memcmp(e, "quot", 4) == 0)
      cp = '"';
    else if (n == 4 && memcmp(e, "apos", 4) == 0)
      cp = '\'';
    else if (n >= 2 && e[0] == '#') {
      char *end;
      cp = e[1] == 'x' ? strtoul(e + 2, &end, 16) : strtoul(e + 1, &end, 10);
      if (end != semi || cp == 0 || cp > 0x10ffff)
        return -1;
    } else
      return -1;
    a = semi + 1;
    /* UTF-8 of the code point. */
    unsigned char u[4];
    int k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (k == 1)
      u[0] = (unsigned char)cp;
    else {
      for (int i = k - 1; i > 0; i--, cp >>= 6)
        u[i] = (unsigned char)(0x80 | (cp & 0x3f));
      u[0] = (unsigned char)((0xf00u >> k) | cp);
    }
    if (o + (size_t)k >= len)
      return -1;
    memcpy(out + o, u, (size_t)k);
    o += (size_t)k;
  }
  out[o] = '\0';
  return 0;
}

int kvp__s3_list_page(const char *xml, const char *prefix, kvp_volume_key_fn fn, void *ctx,
                      char *token, size_t tokcap, int *truncated) {
  size_t plen = strlen(prefix);
  const char *p = xml;
  int rc = 0;

  token[0] = '\0';
  *truncated = 0;
  while (rc == 0 && (p = strstr(p, "<Contents>")) != NULL) {
    const char *end = strstr(p, "</Contents>"), *k = strstr(p, "<Key>"), *z = strstr(p, "<Size>");
    if (end == NULL || k == NULL || z == NULL || k > end || z > end)
      break;
    k += 5;
    const char *ke = strstr(k, "</Key>");
    char key[1024];
    p = end;
    if (ke == NULL || ke > end || xml_text(k, ke, key, sizeof key) != 0)
      continue; /* not one of ours: too long, or an entity we do not know */
    /* <prefix><ns>/<16 hex> */
    if (strncmp(key, prefix, plen) != 0)
      continue;
    const char *rest = key + plen, *slash = strrchr(rest, '/');
    if (slash == NULL || strlen(slash + 1) != 16 || slash == rest || slash - rest >= 80)
      continue;
    /* Exactly the 16 lowercase hex digits kvp__s3_key_of writes: strtoull
     * alone takes "0x", a sign, spaces and uppercase, keys that are not the
     * plugin's (a get of the hash would name another object). */
    char ns[80];
    uint64_t hash = 0;
    int hex = 1;
    for (const char *h = slash + 1; *h && hex; h++) {
      int d = *h >= '0' && *h <= '9' ? *h - '0' : *h >= 'a' && *h <= 'f' ? *h - 'a' + 10 : -1;
      hex = d >= 0;
      hash = hash << 4 | (uint64_t)(d & 15);
    }
    snprintf(ns, sizeof ns, "%.*s", (int)(slash - rest), rest);
    if (hex && kvp_plugin_ns_ok(ns))
      rc = fn(ctx, ns, hash, strtoull(z + 6, NULL, 10));
  }
  if (rc != 0 || strstr(xml, "<IsTruncated>true</IsTruncated>") == NULL)
    return rc;
  *truncated = 1;
  const char *nt = strstr(xml, "<NextContinuationToken>");
  nt = nt ? nt + strlen("<NextContinuationToken>") : NULL;
  const char *ne = nt ? strstr(nt, "</NextContinuationToken>") : NULL;
  if (ne == NULL || xml_text(nt, ne, token, tokcap) != 0 || token[0] == '\0') {
    token[0] = '\0';
    return KVP_EPROTO;
  }
  return 0;
}
