/* The s3 plugin's listing of a prefix (s3.h): ListObjectsV2 pages, their
 * XML read for <Key>, <Size> and the continuation token (XML-unescaped).
 * Used by iterate and, at open, to rebuild the usage. The query's
 * parameters are URI-encoded and in sorted order, as SigV4 canonicalises
 * them (request.c says why). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "plugin_util.h"
#include "s3.h"

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

int kvp__s3_list(s3_t *s, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  char url[8192], query[4096], token[1024] = "", what[512];
  int rc = 0;

  snprintf(what, sizeof what, "bucket %s: list", s->bucket);
  for (;;) {
    req_t r = {0};
    char esc[3 * sizeof s->prefix + 1], etok[3 * sizeof token + 1];
    if (kvp__s3_uri_encode(s->prefix, 0, esc, sizeof esc) != 0 ||
        kvp__s3_uri_encode(token, 0, etok, sizeof etok) != 0)
      return KVP_ENOMEM; /* cannot happen: the buffers are 3 times the input's */
    /* Sorted: continuation-token < list-type < max-keys < prefix. */
    snprintf(query, sizeof query, "%s%s%slist-type=2&max-keys=1000%s%s",
             token[0] ? "continuation-token=" : "", token[0] ? etok : "", token[0] ? "&" : "",
             s->prefix[0] ? "&prefix=" : "", s->prefix[0] ? esc : "");
    if (kvp__s3_url_of(s, NULL, query, url, sizeof url) != 0) {
      snprintf(err, errlen, "%s: the listing's URL is longer than %zu bytes", what, sizeof url);
      return KVP_EINVAL;
    }
    if ((rc = kvp__s3_perform(s, "GET", url, &r, what, err, errlen)) != 0) {
      free(r.text);
      return rc;
    }
    if (r.status != 200) {
      rc = kvp__s3_http_error(&r, what, err, errlen);
      if (rc == KVP_ENOENT)
        snprintf(err + strlen(err), errlen - strlen(err), " (does bucket %s exist?)", s->bucket);
      free(r.text);
      return rc;
    }
    const char *p = r.text ? r.text : "";
    while ((p = strstr(p, "<Contents>")) != NULL && rc == 0) {
      const char *end = strstr(p, "</Contents>"), *k = strstr(p, "<Key>"), *z = strstr(p, "<Size>");
      if (end == NULL || k == NULL || z == NULL || k > end || z > end)
        break;
      k += 5;
      const char *ke = strstr(k, "</Key>");
      char key[1024];
      if (ke == NULL || ke > end || xml_text(k, ke, key, sizeof key) != 0) {
        p = end;
        continue; /* not one of ours: too long, or an entity we do not know */
      }
      uint64_t size = strtoull(z + 6, NULL, 10);
      /* <prefix><ns>/<16 hex> */
      const char *rest = key + strlen(s->prefix), *slash = strrchr(rest, '/');
      if (strncmp(key, s->prefix, strlen(s->prefix)) == 0 && slash && strlen(slash + 1) == 16) {
        char ns[80];
        char *hend;
        uint64_t hash = strtoull(slash + 1, &hend, 16);
        if (*hend == '\0' && slash - rest > 0 && slash - rest < (long)sizeof ns) {
          snprintf(ns, sizeof ns, "%.*s", (int)(slash - rest), rest);
          if (kvp_plugin_ns_ok(ns))
            rc = fn(ctx, ns, hash, size);
        }
      }
      p = end;
    }
    const char *trunc = strstr(r.text ? r.text : "", "<IsTruncated>true</IsTruncated>");
    const char *nt = r.text ? strstr(r.text, "<NextContinuationToken>") : NULL;
    token[0] = '\0';
    if (trunc && rc == 0) {
      nt = nt ? nt + strlen("<NextContinuationToken>") : NULL;
      const char *ne = nt ? strstr(nt, "</NextContinuationToken>") : NULL;
      if (ne == NULL || xml_text(nt, ne, token, sizeof token) != 0) {
        snprintf(err, errlen, "%s: a truncated listing without a usable continuation token", what);
        free(r.text);
        return KVP_EIO;
      }
    }
    free(r.text);
    if (rc != 0 || token[0] == '\0')
      return rc;
  }
}
