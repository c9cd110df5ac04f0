/* The s3 plugin's listing of a prefix (s3.h): ListObjectsV2 pages, their
 * XML read for <Key>, <Size> and the continuation token. Used by iterate
 * and, at open, to rebuild the usage. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "plugin_util.h"
#include "s3.h"

int kvp__s3_list(s3_t *s, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  char url[4096], query[1024], token[1024] = "", what[512];
  int rc = 0;

  snprintf(what, sizeof what, "bucket %s: list", s->bucket);
  for (;;) {
    req_t r = {0};
    char *esc = curl_easy_escape(NULL, s->prefix, 0), *etok = curl_easy_escape(NULL, token, 0);
    snprintf(query, sizeof query, "list-type=2&max-keys=1000%s%s%s%s",
             s->prefix[0] ? "&prefix=" : "", s->prefix[0] ? esc : "",
             token[0] ? "&continuation-token=" : "", token[0] ? etok : "");
    curl_free(esc);
    curl_free(etok);
    kvp__s3_url_of(s, NULL, query, url, sizeof url);
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
      if (ke == NULL || ke - k >= (long)sizeof key)
        break;
      snprintf(key, sizeof key, "%.*s", (int)(ke - k), k);
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
    if (trunc && nt) {
      nt += strlen("<NextContinuationToken>");
      const char *ne = strstr(nt, "</NextContinuationToken>");
      if (ne && ne - nt < (long)sizeof token)
        snprintf(token, sizeof token, "%.*s", (int)(ne - nt), nt);
    }
    free(r.text);
    if (rc != 0 || token[0] == '\0')
      return rc;
  }
}
