/* Block layout arithmetic and the system (host heap) storage. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvplane/blockmgr.h"
#include "kvplane/status.h"
#include "block/pool.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define LAYOUT_MAX_BLOCK ((size_t)1 << 30)

static uint32_t alignment_of(const kvp_layout_t *l) {
  return l->alignment ? l->alignment : 64;
}

int kvp_layout_check(const kvp_layout_t *l) {
  uint32_t a;
  uint64_t layer;

  if (l == NULL || l->num_layers == 0 || l->page_size == 0 || l->inner_dim == 0)
    return KVP_EINVAL;
  if (l->elem_size != 1 && l->elem_size != 2 && l->elem_size != 4 && l->elem_size != 8)
    return KVP_EINVAL;
  a = alignment_of(l);
  if ((a & (a - 1)) != 0)
    return KVP_EINVAL;
  /* Each factor is below 2^32, so checking after every product keeps the
   * 64-bit arithmetic exact. */
  layer = (uint64_t)l->page_size * l->inner_dim;
  if (layer > LAYOUT_MAX_BLOCK)
    return KVP_ETOOBIG;
  layer *= l->elem_size;
  if (layer > LAYOUT_MAX_BLOCK || layer * l->num_layers > LAYOUT_MAX_BLOCK)
    return KVP_ETOOBIG;
  if (a > LAYOUT_MAX_BLOCK)
    return KVP_ETOOBIG;
  return 0;
}

size_t kvp_layout_layer_stride(const kvp_layout_t *l) {
  return (size_t)l->page_size * l->inner_dim * l->elem_size;
}

size_t kvp_layout_block_stride(const kvp_layout_t *l) {
  size_t a = alignment_of(l);
  size_t raw = (size_t)l->num_layers * kvp_layout_layer_stride(l);
  return (raw + a - 1) & ~(a - 1);
}

/* ---- system storage ---- */

void *kvp__resident_alloc(size_t bytes, size_t alignment) {
  void *p = NULL;

  if (alignment < sizeof(void *))
    alignment = sizeof(void *);
  if (bytes == 0)
    bytes = alignment;
  if (bytes >= HUGE_PAGE && alignment < HUGE_PAGE)
    alignment = HUGE_PAGE;
  if (posix_memalign(&p, alignment, bytes) != 0)
    return NULL;
  /* Tables are probed and blocks copied at random: with 4 KiB pages nearly
   * every access would also be a TLB miss (a two-level walk under
   * virtualisation). */
  if (bytes >= HUGE_PAGE)
    madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
  /* Resident, as pinned or device memory is: the page faults are taken
   * now rather than on a hot path (an offload copy, a table probe). */
  memset(p, 0, bytes);
  return p;
}

static int sys_alloc(void *ctx, size_t size, size_t alignment, void **base) {
  (void)ctx;
  *base = kvp__resident_alloc(size, alignment);
  return *base ? 0 : KVP_ENOMEM;
}

static void sys_free(void *ctx, void *base, size_t size) {
  (void)ctx;
  (void)size;
  free(base);
}

static const kvp_storage_ops_t system_ops;

static int sys_copy(void *ctx, void *dst, const kvp_storage_t *src_storage, const void *src,
                    size_t n) {
  const kvp_storage_ops_t *ops = src_storage ? src_storage->ops : NULL;
  const char *kind = ops ? ops->kind : "system";

  (void)ctx;
  /* Only memory the CPU can address: a device source needs its own copy. */
  if (ops != NULL && ops != &system_ops &&
      (kind == NULL || (strcmp(kind, "system") != 0 && strcmp(kind, "pinned") != 0)))
    return KVP_ENOTSUP;
  memcpy(dst, src, n);
  return 0;
}

static const kvp_storage_ops_t system_ops = {
    .kind = "system",
    .alloc = sys_alloc,
    .free = sys_free,
    .copy = sys_copy,
};

int kvp__storage_is_system(const kvp_storage_t *s) {
  return s->ops == &system_ops;
}

kvp_storage_t kvp_storage_system(void) {
  return (kvp_storage_t){.ops = &system_ops, .ctx = NULL};
}

const char *kvp_block_state_name(int state) {
  switch (state) {
  case KVP_BLOCK_RESET:
    return "reset";
  case KVP_BLOCK_PARTIAL:
    return "partial";
  case KVP_BLOCK_COMPLETE:
    return "complete";
  case KVP_BLOCK_REGISTERED:
    return "registered";
  default:
    return "?";
  }
}
