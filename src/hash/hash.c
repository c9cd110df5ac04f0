/* Dynamo-compatible block and sequence hashes over libxxhash's XXH3-64.
 *
 * XXH_INLINE_ALL compiles Debian's xxhash.h implementation into this file:
 * the same algorithm as libxxhash.so, but the short inputs of every block
 * (a 16-byte chain input, 64 bytes for a 16-token block) are hashed without
 * a call into the shared library and its dispatch, which measured ~2x the
 * cost of the hash itself for 16-token blocks (kvp-bench hash, blockmgr). */
#include "kvplane/hash.h"
#include "kvplane/status.h"

#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

static inline void put_le64(unsigned char *p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(p, &v, sizeof v);
#else
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
#endif
}

uint64_t kvp_hash_seed(const char *lora_name) {
  if (lora_name == NULL || lora_name[0] == '\0')
    return KVP_HASH_SEED;
  return KVP_HASH_SEED + XXH3_64bits_withSeed(lora_name, strlen(lora_name), 0);
}

uint64_t kvp_hash_block(const uint32_t *tokens, size_t ntokens, uint64_t seed) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* Host order is the wire order: hash the array in place. */
  return XXH3_64bits_withSeed(tokens, ntokens * sizeof(uint32_t), seed);
#else
  XXH3_state_t st;
  unsigned char buf[256];
  size_t fill = 0;

  XXH3_64bits_reset_withSeed(&st, seed);
  for (size_t i = 0; i < ntokens; i++) {
    uint32_t t = tokens[i];
    buf[fill++] = (unsigned char)t;
    buf[fill++] = (unsigned char)(t >> 8);
    buf[fill++] = (unsigned char)(t >> 16);
    buf[fill++] = (unsigned char)(t >> 24);
    if (fill == sizeof buf) {
      XXH3_64bits_update(&st, buf, fill);
      fill = 0;
    }
  }
  XXH3_64bits_update(&st, buf, fill);
  return XXH3_64bits_digest(&st);
#endif
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

uint64_t kvp_hash_block_mm(const uint32_t *tokens, size_t ntokens, uint64_t *mm, size_t nmm,
                           uint64_t seed) {
  XXH3_state_t st;
  unsigned char buf[256];
  size_t fill = 0;

  if (nmm == 0)
    return kvp_hash_block(tokens, ntokens, seed);
  qsort(mm, nmm, sizeof *mm, cmp_u64);
  XXH3_64bits_reset_withSeed(&st, seed);
  for (size_t i = 0; i < ntokens; i++) {
    uint32_t t = tokens[i];
    buf[fill++] = (unsigned char)t;
    buf[fill++] = (unsigned char)(t >> 8);
    buf[fill++] = (unsigned char)(t >> 16);
    buf[fill++] = (unsigned char)(t >> 24);
    if (fill == sizeof buf) {
      XXH3_64bits_update(&st, buf, fill);
      fill = 0;
    }
  }
  for (size_t i = 0; i < nmm; i++) {
    if (fill + 8 > sizeof buf) {
      XXH3_64bits_update(&st, buf, fill);
      fill = 0;
    }
    put_le64(buf + fill, mm[i]);
    fill += 8;
  }
  XXH3_64bits_update(&st, buf, fill);
  return XXH3_64bits_digest(&st);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int kvp_hash_is_digest(const char *id, size_t len) {
  if (len != 64)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (hexval(id[i]) < 0)
      return 0;
  return 1;
}

int kvp_hash_mm_identifier(const char *id, size_t len, uint64_t *out) {
  if (len == 0)
    return KVP_EINVAL;
  if (kvp_hash_is_digest(id, len)) {
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++)
      v = (v << 4) | (uint64_t)hexval(id[i]);
    *out = v;
    return 0;
  }
  *out = XXH3_64bits_withSeed(id, len, 0);
  return 0;
}

uint64_t kvp_hash_chain(uint64_t parent_seq, uint64_t local, uint64_t seed) {
  unsigned char buf[16];

  put_le64(buf, parent_seq);
  put_le64(buf + 8, local);
  return XXH3_64bits_withSeed(buf, sizeof buf, seed);
}

size_t kvp_hash_sequence(const uint32_t *tokens, size_t ntokens, size_t block_tokens, uint64_t seed,
                         uint64_t *out, size_t cap) {
  size_t nblocks, n;
  uint64_t prev = 0;

  if (block_tokens == 0)
    return 0;
  nblocks = ntokens / block_tokens;
  n = nblocks < cap ? nblocks : cap;
  for (size_t i = 0; i < n; i++) {
    uint64_t local = kvp_hash_block(tokens + i * block_tokens, block_tokens, seed);
    prev = i == 0 ? local : kvp_hash_chain(prev, local, seed);
    out[i] = prev;
  }
  return nblocks;
}

static int parse_hex(const char *s, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (n == 0 || n > 16)
    return KVP_EINVAL;
  for (size_t i = 0; i < n; i++) {
    int d = hexval(s[i]);
    if (d < 0)
      return KVP_EINVAL;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

int kvp_hash_parse(const char *s, uint64_t *out) {
  uint64_t v = 0;
  size_t n;
  int neg = 0;

  if (s == NULL)
    return KVP_EINVAL;
  n = strlen(s);
  if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return parse_hex(s + 2, n - 2, out);
  if (n == 16 && parse_hex(s, n, out) == 0)
    return 0;
  if (*s == '-' || *s == '+')
    neg = *s++ == '-';
  if (*s == '\0')
    return KVP_EINVAL;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return KVP_EINVAL;
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (UINT64_MAX - d) / 10)
      return KVP_EINVAL;
    v = v * 10 + d;
  }
  if (neg) {
    if (v > (uint64_t)INT64_MAX + 1)
      return KVP_EINVAL;
    v = (uint64_t)0 - v;
  }
  *out = v;
  return 0;
}
