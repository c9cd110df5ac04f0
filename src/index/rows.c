/* The index's changes as plain rows (rows.h). Loop thread. */
#include "index/rows.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "kvplane/status.h"

/* Signed order, as SQLite stores the hashes. */
static int by_change_hash(const void *a, const void *b) {
  int64_t x = (int64_t)((const kvp__index_change_t *)a)->hash;
  int64_t y = (int64_t)((const kvp__index_change_t *)b)->hash;
  return x < y ? -1 : x > y;
}

static int by_gone_hash(const void *a, const void *b) {
  int64_t x = (int64_t)((const kvp__index_gone_t *)a)->hash;
  int64_t y = (int64_t)((const kvp__index_gone_t *)b)->hash;
  return x < y ? -1 : x > y;
}

static void loc_fill(kvp__index_loc_row_t *f, const kvp__index_t *ix, uint64_t h, uint16_t worker,
                     int tier, uint16_t volume) {
  f->hash = h;
  f->worker = kvp__index_worker_name(ix, worker, &f->dp_rank);
  f->volume = kvp__index_volume_name(ix, volume);
  f->tier = tier;
}

void kvp__index_rows_free(kvp__index_rows_t *r) {
  kvp__index_changes_free(&r->ch);
  free(r->rows);
  free(r->locs);
  free(r->gone);
  free(r->volumes);
  memset(r, 0, sizeof *r);
}

void kvp__index_rows_restore(kvp__index_t *ix, kvp__index_rows_t *r) {
  kvp__index_changes_restore(ix, &r->ch);
  kvp__index_rows_free(r);
}

/* Copies the changed blocks and, where they changed, all their locations
 * (however many workers hold a block). */
static int copy_rows(kvp__index_rows_t *r, const kvp__index_t *ix) {
  kvp__index_loc_t *locs = NULL;
  size_t locs_cap = 0, cap = 0;
  int rc = KVP_ENOMEM;

  if (r->ch.nblocks && (r->rows = malloc(r->ch.nblocks * sizeof *r->rows)) == NULL)
    goto out;
  if (r->ch.ngone && (r->gone = malloc(r->ch.ngone * sizeof *r->gone)) == NULL)
    goto out;
  for (size_t i = 0; i < r->ch.ngone; i++) {
    const kvp__index_gone_t *g = &r->ch.gone[i];
    loc_fill(&r->gone[i], ix, g->hash, g->worker, g->tier, g->volume);
  }
  r->ngone = r->ch.ngone;
  for (size_t i = 0; i < r->ch.nblocks; i++) {
    const kvp__index_change_t *c = &r->ch.blocks[i];
    kvp__index_row_t *w = &r->rows[r->nrows++];
    kvp__index_block_t b;
    size_t n = 0;
    memset(w, 0, sizeof *w);
    w->hash = c->hash;
    w->deleted = 1;
    if (c->what == 0 || kvp__index_get(ix, c->hash, &b, locs, locs_cap, &n) != 0)
      continue;
    w->deleted = 0;
    w->parent = b.parent;
    w->tokens = b.tokens;
    w->bytes = b.bytes;
    w->last_access_ms = b.last_access_ms;
    w->hits = b.hits;
    w->freq = b.freq;
    if (!(c->what & KVP__INDEX_CH_LOCS))
      continue;
    if (n > locs_cap) {
      if ((rc = KVP_ARRAY_RESERVE(locs, locs_cap, n, 64)) != 0 ||
          (rc = kvp__index_get(ix, c->hash, NULL, locs, locs_cap, &n)) != 0)
        goto out;
    }
    if ((rc = KVP_ARRAY_RESERVE(r->locs, cap, r->nlocs + n, 1024)) != 0)
      goto out;
    w->loc_off = (uint32_t)r->nlocs;
    w->nlocs = (uint32_t)n;
    for (size_t k = 0; k < n; k++)
      loc_fill(&r->locs[r->nlocs++], ix, c->hash, locs[k].worker, locs[k].tier, locs[k].volume);
  }
  rc = 0;
out:
  free(locs);
  return rc;
}

int kvp__index_rows_take(kvp__index_t *ix, size_t volumes_from, kvp__index_rows_t *r) {
  int rc;

  memset(r, 0, sizeof *r);
  if (volumes_from < 1)
    volumes_from = 1;
  if (kvp__index_changes_take(ix, &r->ch) != 0)
    return KVP_ENOMEM;
  if (r->ch.ngone > 1)
    qsort(r->ch.gone, r->ch.ngone, sizeof *r->ch.gone, by_gone_hash);
  if (r->ch.nblocks > 1)
    qsort(r->ch.blocks, r->ch.nblocks, sizeof *r->ch.blocks, by_change_hash);
  r->volumes_total = kvp__index_volume_count(ix);
  if ((rc = copy_rows(r, ix)) != 0)
    goto fail;
  if (r->volumes_total > volumes_from) {
    rc = KVP_ENOMEM;
    if ((r->volumes = malloc((r->volumes_total - volumes_from) * sizeof *r->volumes)) == NULL)
      goto fail;
    for (size_t v = volumes_from; v < r->volumes_total; v++)
      r->volumes[r->nvolumes++] = kvp__index_volume_name(ix, (uint16_t)v);
  }
  return 0;
fail:
  kvp__index_rows_restore(ix, r);
  return rc;
}
