/* The hash table's groups: sizing, allocation and sharing (map.h has the
 * table itself). */
#include <stdlib.h>

#include "block/map.h"
#include "kvplane/status.h"

int kvp__map_create(kvp__map_t *m, uint64_t table_blocks, kvp__blk_t *blk) {
  memset(m, 0, sizeof *m);
  /* Block ids + 1 need 31 bits; the home-group multiply ngroups < 2^32. */
  if (table_blocks == 0 || table_blocks > KVP__MAP_MAX_BLOCKS)
    return KVP_EINVAL;
  m->ngroups = (table_blocks * 2 + KVP__GROUP_SLOTS - 1) / KVP__GROUP_SLOTS;
  m->blk = blk;
  if ((m->grp = kvp__resident_alloc(m->ngroups * sizeof *m->grp, 64)) == NULL)
    return KVP_ENOMEM;
  return 0;
}

void kvp__map_share(kvp__map_t *m, const kvp__map_t *owner, kvp__blk_t *blk) {
  m->grp = owner->grp;
  m->ngroups = owner->ngroups;
  m->blk = blk;
  m->tbit = KVP__SLOT_TBIT;
}

void kvp__map_free(kvp__map_t *m) {
  free(m->grp);
  m->grp = NULL;
}
