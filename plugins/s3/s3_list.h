/* One ListObjectsV2 page of the s3 plugin's listing, read from its XML
 * (the server's bytes: a fuzz target reads them too, tests/fuzz). No libcurl
 * here, so the reader builds alone. */
#ifndef KVP_PLUGIN_S3_LIST_H
#define KVP_PLUGIN_S3_LIST_H

#include <stddef.h>

#include "kvplane/volume_plugin.h"

/* Calls fn for every <Contents> whose XML-unescaped <Key> is
 * <prefix><ns>/<16 lowercase hex> with a valid namespace (other keys are not
 * the plugin's and are passed over), with its <Size>. When the page says
 * <IsTruncated>true</IsTruncated>, sets *truncated and copies the
 * unescaped <NextContinuationToken> into token (tokcap bytes); else token
 * is "". Returns 0, fn's non-zero return (the walk stops), or KVP_EPROTO
 * for a truncated page without a usable token. */
int kvp__s3_list_page(const char *xml, const char *prefix, kvp_volume_key_fn fn, void *ctx,
                      char *token, size_t tokcap, int *truncated);

#endif
