/* The s3 plugin's listing of a prefix (s3.h): ListObjectsV2 pages, their
 * XML read for <Key>, <Size> and the continuation token (XML-unescaped).
 * Used by iterate and, at open, to rebuild the usage. The page's XML is
 * read by s3_list.c. The query's
 * parameters are URI-encoded and in sorted order, as SigV4 canonicalises
 * them (request.c says why). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "s3_list.h"
#include "s3.h"

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
    int truncated = 0;
    rc = kvp__s3_list_page(r.text ? r.text : "", s->prefix, fn, ctx, token, sizeof token,
                           &truncated);
    if (rc == KVP_EPROTO && truncated) {
      snprintf(err, errlen, "%s: a truncated listing without a usable continuation token", what);
      free(r.text);
      return KVP_EIO;
    }
    free(r.text);
    if (rc != 0 || token[0] == '\0')
      return rc;
  }
}
