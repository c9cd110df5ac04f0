/* Tier occupancy samples (history.h). */
#include "advisor/history.h"

#include <string.h>

size_t kvp__adv_history_sample(const kvp__index_t *ix, const kvp__tier_engine_t *e, uint64_t now_ms,
                               kvp__store_hist_row_t *rows) {
  kvp__index_stats_t st;
  size_t n = 0;

  kvp__index_stats(ix, &st);
  for (int tier = 1; tier <= 4; tier++) {
    kvp__store_hist_row_t *r = &rows[n++];
    memset(r, 0, sizeof *r);
    r->t_ms = now_ms;
    r->tier = tier;
    r->blocks = st.tier_locations[tier];
    r->bytes = st.tier_bytes[tier];
  }
  if (e != NULL) {
    kvp__tier_vol_stats_t vs[KVP__TIER_MAX_VOLUMES];
    size_t nv = kvp__tier_engine_volumes(e, vs, KVP__TIER_MAX_VOLUMES);
    for (size_t v = 0; v < nv && v < KVP__TIER_MAX_VOLUMES; v++) {
      kvp__store_hist_row_t *r = &rows[n++];
      memset(r, 0, sizeof *r);
      r->t_ms = now_ms;
      r->tier = vs[v].tier;
      _Static_assert(sizeof r->volume == sizeof vs[v].name, "volume names fit");
      memcpy(r->volume, vs[v].name, sizeof r->volume);
      r->volume[sizeof r->volume - 1] = '\0';
      r->blocks = vs[v].blocks;
      r->bytes = vs[v].used;
      r->capacity = vs[v].capacity;
    }
  }
  return n;
}
