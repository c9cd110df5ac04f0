/* libFuzzer target: the index snapshot's decoder (kvp__snap_header_parse,
 * kvp__snap_chunk_load, src/store/store_snapshot_read.c): BLOBs of the
 * advisor's database, which anyone with write access to the file can put
 * there. Input: header length (u32 LE), the header chunk, then one data
 * chunk, both without their checksums: the target appends valid XXH3-64
 * sums so that the fuzzer reaches the structure behind them (a wrong sum
 * is refused before anything is read, which the unit tests check).
 * Properties: it never crashes or leaks, and a chunk it accepts loaded
 * exactly the blocks and locations it counted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "index/index.h"
#include "kvplane/status.h"
#include "store/store_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* p[0..n) with its XXH3-64 appended, in a fresh allocation. */
static uint8_t *summed(const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n + 8);
  if (q == NULL)
    abort();
  if (n)
    memcpy(q, p, n);
  uint64_t s = XXH3_64bits(q, n);
  for (int i = 0; i < 8; i++)
    q[n + (size_t)i] = (uint8_t)(s >> (8 * i));
  return q;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp__index_t *ix = NULL;
  kvp__snap_header_t h;
  if (size < 4)
    return 0;
  size_t hl =
      (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
  if (hl > size - 4)
    return 0;
  uint8_t *hd = summed(data + 4, hl), *ch = summed(data + 4 + hl, size - 4 - hl);
  if (kvp__index_create(16, 3600, &ix) != 0)
    abort();
  if (kvp__snap_header_parse(hd, hl + 8, ix, &h) == 0) {
    /* A header that claims more blocks than a fuzz run may hold. */
    if (h.blocks <= (1u << 16) && kvp__index_reserve(ix, (size_t)h.blocks) == 0) {
      uint64_t blocks = 0, locations = 0;
      if (kvp__snap_chunk_load(&h, ch, size - 4 - hl + 8, ix, &blocks, &locations) == 0) {
        kvp__index_stats_t st;
        kvp__index_stats(ix, &st);
        /* Blocks listed twice are one block: at most as many. */
        if (st.blocks > blocks || st.locations > locations)
          abort();
      }
    }
    kvp__snap_header_free(&h);
  }
  kvp__index_destroy(ix);
  free(hd);
  free(ch);
  return 0;
}
