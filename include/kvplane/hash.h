/* Block and sequence hashing (DESIGN.md, "Hashing").
 *
 * Dynamo-compatible XXH3-64 with seed 1337, so routers and advisors that
 * never link kvplane agree on block identities:
 *   local[i] = XXH3_64bits_withSeed(tokens of block i as le u32, seed)
 *   seq[0]   = local[0]
 *   seq[i]   = XXH3_64bits_withSeed(le64(seq[i-1]) || le64(local[i]), seed)
 * where seed = 1337, or 1337 + XXH3_64bits_withSeed(lora_name, 0) (wrapping)
 * when a LoRA adapter or cache namespace name is set. The salted seed is used
 * for both the local and the chained hash.
 */
#ifndef KVPLANE_HASH_H
#define KVPLANE_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_HASH_SEED UINT64_C(1337)

/* Seed for a LoRA adapter or cache namespace name. NULL or "" gives
 * KVP_HASH_SEED. */
uint64_t kvp_hash_seed(const char *lora_name);

/* Local hash of one block's tokens (any count, including 0). */
uint64_t kvp_hash_block(const uint32_t *tokens, size_t ntokens, uint64_t seed);

/* Local hash of a block that holds multimodal objects (Dynamo's rule,
 * lib/kv-router compute_block_hash_for_seq): XXH3-64 with seed over the
 * block's tokens as le u32 followed by the objects' 64-bit multimodal
 * hashes as le u64, in ascending order. mm[0..nmm) may come in any order
 * (it is sorted in place); nmm 0 is kvp_hash_block. */
uint64_t kvp_hash_block_mm(const uint32_t *tokens, size_t ntokens, uint64_t *mm, size_t nmm,
                           uint64_t seed);

/* The 64-bit multimodal hash of an identifier as vLLM's extra_keys carry it
 * (Dynamo's hash_mm_identifier): a 64-character hex digest gives the value
 * of its first 16 hex digits; any other non-empty string XXH3-64 of its
 * bytes with seed 0. Returns 0 with *out set, or KVP_EINVAL for "". */
int kvp_hash_mm_identifier(const char *id, size_t len, uint64_t *out);

/* 1 when id is a 64-character hex digest (vLLM's multimodal identifiers). */
int kvp_hash_is_digest(const char *id, size_t len);

/* Chained hash of a block whose parent's sequence hash is parent_seq. */
uint64_t kvp_hash_chain(uint64_t parent_seq, uint64_t local, uint64_t seed);

/* Sequence hashes of the full blocks of a token sequence: writes
 * min(ntokens / block_tokens, cap) hashes to out and returns how many full
 * blocks there are (which may exceed cap). A trailing partial block is not
 * hashed. Returns 0 when block_tokens is 0. */
size_t kvp_hash_sequence(const uint32_t *tokens, size_t ntokens, size_t block_tokens, uint64_t seed,
                         uint64_t *out, size_t cap);

/* Reinterpret a hash as the signed 64-bit integer that SQLite and JSON see,
 * and back. Same bits, two's complement. */
static inline int64_t kvp_hash_to_i64(uint64_t h) {
  int64_t v;
  __builtin_memcpy(&v, &h, sizeof v);
  return v;
}
static inline uint64_t kvp_hash_from_i64(int64_t v) {
  uint64_t h;
  __builtin_memcpy(&h, &v, sizeof h);
  return h;
}

/* Reads a block hash as people meet it:
 *   "0x1f..."           hex after 0x (1..16 digits);
 *   "00ab12cd34ef5678"  exactly 16 hex digits, as logs print hashes (even
 *                       when all 16 are decimal digits);
 *   "-1234", "+1234",   decimal otherwise, signed as sqlite3 shows hashes
 *   "1234"              (two's complement: -1 is 0xffffffffffffffff) or
 *                       unsigned up to 18446744073709551615.
 * Returns 0 with *out set, or KVP_EINVAL for anything else (empty, other
 * characters, out of range). */
int kvp_hash_parse(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_HASH_H */
