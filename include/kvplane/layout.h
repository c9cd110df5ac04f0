/* The layout of a KV block (DESIGN.md, "Block manager"): how many layers,
 * tokens and elements it holds and how its bytes are laid out. Used by the
 * block manager, the volume frame and engines sizing their caches. */
#ifndef KVPLANE_LAYOUT_H
#define KVPLANE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Layout ------------------------------------------------------------ */

/* A block is num_layers layers of page_size x inner_dim elements of
 * elem_size bytes, fully contiguous:
 *   layer_stride = page_size * inner_dim * elem_size
 *   block_stride = align_up(num_layers * layer_stride, alignment) */
typedef struct kvp_layout_s {
  uint32_t num_layers; /* >= 1 */
  uint32_t page_size;  /* tokens per block, >= 1 */
  uint32_t inner_dim;  /* elements per token and layer (2 * kv_heads * head_dim), >= 1 */
  uint32_t elem_size;  /* bytes per element: 1, 2, 4 or 8 */
  uint32_t alignment;  /* bytes, a power of two; 0 means 64 */
} kvp_layout_t;

/* Returns 0, KVP_EINVAL for a zero or bad field (a non-power-of-two
 * alignment, an elem_size other than 1/2/4/8), or KVP_ETOOBIG when a block
 * would be larger than 1 GiB. */
int kvp_layout_check(const kvp_layout_t *l);

/* Bytes of one layer of one block. The layout must pass kvp_layout_check. */
size_t kvp_layout_layer_stride(const kvp_layout_t *l);

/* Bytes from one block to the next. The layout must pass kvp_layout_check. */
size_t kvp_layout_block_stride(const kvp_layout_t *l);

/* ---- Storage ----------------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_LAYOUT_H */
