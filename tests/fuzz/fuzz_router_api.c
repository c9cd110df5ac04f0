/* libFuzzer target: the routers' indexer API request decoder
 * (kvp__rapi_parse, src/advisor/routerapi.c): HTTP bodies from whoever
 * reaches [http] listen. The first byte picks /query (even) or
 * /query_by_hash (odd) and whether a default block size is configured.
 * Properties: it never crashes or leaks; a decoded request has a block size
 * in range, at most KVP_MATCH_MAX hashes and a NUL-terminated tenant and
 * instance, and its answer from a small index is JSON; a refused one says
 * why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/routerapi.h"
#include "index/index.h"
#include "kvplane/client.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvp__index_t *small_index(void) {
  static kvp__index_t *ix;
  uint16_t w0, w1;
  if (ix != NULL)
    return ix;
  if (kvp__index_create(64, 3600, &ix) != 0 || kvp__index_worker(ix, "w0", 0, &w0) != 0 ||
      kvp__index_worker(ix, "w1", 2, &w1) != 0)
    abort();
  for (uint64_t h = 1; h <= 8; h++) {
    kvp__index_store(ix, h, h > 1, h - 1, w0, 1, 0, 16, 4096, 1);
    if (h <= 4)
      kvp__index_store(ix, h, h > 1, h - 1, w1, 2, 0, 16, 4096, 1);
  }
  return ix;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp__rapi_req_t req;
  char err[512] = "";
  char *json = NULL;

  if (size < 1)
    return 0;
  int by_hash = data[0] & 1;
  uint32_t def = (data[0] & 2) ? 16 : 0;
  int rc = kvp__rapi_parse(by_hash, data + 1, size - 1, def, &req, err, sizeof err);
  if (rc == 0) {
    if (req.block_size < 1 || req.block_size > KVP__RAPI_MAX_BLOCK_SIZE || req.n > KVP_MATCH_MAX ||
        (req.n > 0 && req.hashes == NULL) || memchr(req.tenant, 0, sizeof req.tenant) == NULL ||
        memchr(req.instance, 0, sizeof req.instance) == NULL)
      abort();
    if (kvp__rapi_answer(small_index(), "default", &req, &json) != 0 || json == NULL ||
        json[0] != '{')
      abort();
    free(json);
  } else if ((rc == KVP_EPROTO || rc == KVP_ETOOBIG) && err[0] == '\0') {
    abort();
  } else if (rc != KVP_EPROTO && rc != KVP_ETOOBIG && rc != KVP_ENOMEM) {
    abort();
  }
  kvp__rapi_req_free(&req);
  return 0;
}
