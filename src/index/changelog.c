/* The persistence change log of the advisor's index; see changelog.h. */
#include "index/changelog.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "kvplane/status.h"

void kvp__index_changes_free(kvp__index_changes_t *ch) {
  free(ch->blocks);
  free(ch->gone);
  memset(ch, 0, sizeof *ch);
}

void kvp__index_changelog_free(kvp__index_changelog_t *cl) {
  free(cl->dirty);
  free(cl->gone);
  memset(cl, 0, sizeof *cl);
}

/* 1.5x growth: the lists' slack is part of the index's memory figure. */
int kvp__index_changelog_grow(kvp__index_changelog_t *cl) {
  return KVP_ARRAY_RESERVE_HALF(cl->dirty, cl->dirty_cap, cl->ndirty + 1, 16) == 0 ? 0 : KVP_ENOMEM;
}

int kvp__index_changelog_gone(kvp__index_changelog_t *cl, const kvp__index_gone_t *g) {
  if (cl->ngone == cl->gone_cap &&
      KVP_ARRAY_RESERVE_HALF(cl->gone, cl->gone_cap, cl->ngone + 1, 16) != 0)
    return KVP_ENOMEM;
  cl->gone[cl->ngone++] = *g;
  return 0;
}

int kvp__index_changelog_take(kvp__index_changelog_t *cl, kvp__index_settle_fn settle, void *ctx,
                              kvp__index_changes_t *ch) {
  size_t k = 0;

  memset(ch, 0, sizeof *ch);
  if (cl->ndirty && (ch->blocks = malloc(cl->ndirty * sizeof *ch->blocks)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < cl->ndirty; i++) {
    uint32_t what = settle(ctx, cl->dirty[i]);
    if (what == KVP__INDEX_CH_SKIP)
      continue;
    ch->blocks[k++] = (kvp__index_change_t){.hash = cl->dirty[i], .what = what};
  }
  ch->nblocks = k;
  /* The gone list moves over whole; the dirty list's memory is reused. */
  ch->gone = cl->gone;
  ch->ngone = cl->ngone;
  cl->gone = NULL;
  cl->ngone = cl->gone_cap = 0;
  cl->ndirty = 0;
  return 0;
}

size_t kvp__index_changelog_count(const kvp__index_changelog_t *cl) {
  return cl->ndirty;
}

size_t kvp__index_changelog_memory(const kvp__index_changelog_t *cl) {
  return cl->dirty_cap * sizeof *cl->dirty + cl->gone_cap * sizeof *cl->gone;
}
