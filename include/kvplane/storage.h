/* Where a pool's bytes live: the system heap, or an engine's pinned or
 * device memory behind the same table of operations. */
#ifndef KVPLANE_STORAGE_H
#define KVPLANE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_storage_s kvp_storage_t;

/* What a kind of memory can do. A pool calls alloc once at creation (one
 * region for all its blocks), free once at destruction, and copy to move a
 * block's bytes into its region from another pool's region (offload and
 * onboarding). A CUDA storage implements copy with cudaMemcpy* on the kinds
 * it knows and rejects others with KVP_ENOTSUP; pool code never changes. */
typedef struct kvp_storage_ops_s {
  const char *kind; /* "system", "pinned", "device", ... */
  /* Allocates size bytes aligned to alignment into *base. Returns 0 or
   * KVP_ENOMEM. */
  int (*alloc)(void *ctx, size_t size, size_t alignment, void **base);
  /* Releases what alloc returned. */
  void (*free)(void *ctx, void *base, size_t size);
  /* Copies n bytes from src, memory of storage src_storage, to dst, memory
   * of this storage. Returns 0, KVP_ENOTSUP for a source kind it cannot
   * read, or KVP_EIO. */
  int (*copy)(void *ctx, void *dst, const kvp_storage_t *src_storage, const void *src, size_t n);
} kvp_storage_ops_t;

struct kvp_storage_s {
  const kvp_storage_ops_t *ops; /* NULL means kvp_storage_system() */
  void *ctx;
};

/* Host heap memory (aligned_alloc, memcpy); copies from any host-addressable
 * kind ("system", "pinned"), KVP_ENOTSUP from others. */
kvp_storage_t kvp_storage_system(void);

/* ---- Blocks and pools -------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_STORAGE_H */
