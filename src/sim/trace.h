/* Reader for Mooncake-format request traces (data/README.md): one JSON object
 * per line, {"timestamp": ms, "input_length": n, "output_length": n,
 * "hash_ids": [id, ...]}, plain or gzip'd (zlib reads both). */
#ifndef KVP_SIM_TRACE_H
#define KVP_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvp_trace_req_s {
  uint64_t timestamp_ms;
  uint64_t input_length, output_length;
  uint64_t *hash_ids; /* owned by the reader; valid until the next call */
  size_t nhash_ids;
} kvp_trace_req_t;

typedef struct kvp_trace_s kvp_trace_t;

/* Returns 0 or KVP_EIO (err names the path and the cause). */
int kvp_trace_open(const char *path, kvp_trace_t **out, char *err, size_t errlen);

/* Reads the next request. Returns 1 with *req filled, 0 at the end, or
 * KVP_EPROTO for a malformed line (err names the line number and the cause;
 * the reader moves on to the next line if called again), KVP_ETOOBIG for a
 * line over 16 MiB, KVP_EIO, KVP_ENOMEM. */
int kvp_trace_next(kvp_trace_t *t, kvp_trace_req_t *req, char *err, size_t errlen);

void kvp_trace_close(kvp_trace_t *t);

/* Parses one line (len bytes, no NUL needed) into req, using *ids and *cap as a
 * growable array. Returns 0, KVP_EPROTO (err says why) or KVP_ENOMEM. */
int kvp_trace_parse_line(const char *line, size_t len, kvp_trace_req_t *req, uint64_t **ids,
                         size_t *cap, char *err, size_t errlen);

/* The deterministic tokens behind a trace hash id: token i of block id is a
 * mix of (id, i) reduced to a 151,936-token vocabulary. Two requests that
 * share leading ids get the same chained sequence hashes. */
void kvp_trace_block_tokens(uint64_t id, uint32_t *tokens, size_t n);

#endif
