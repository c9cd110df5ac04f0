/* libFuzzer target: the text kvplane reads from outside as names and
 * numbers: a NATS subject (kvp_subject_parse_events; any client may publish
 * on kvplane.ev.>; kvp_subject_parse_any_events, the partitioned form
 * kvplane.pev.<ns>.<p>.<worker> too) and a block hash typed by an operator (kvp_hash_parse).
 * Properties: a parsed subject is rebuilt byte for byte by the builder; a
 * parsed hash printed as 0x-hex parses back to the same value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/hash.h"
#include "kvplane/subjects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char text[512], ns[KVP_SUBJECT_TOKEN_MAX + 1], worker[KVP_SUBJECT_TOKEN_MAX + 1];
  char again[KVP_SUBJECT_MAX];
  uint64_t h, h2;

  if (size >= sizeof text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  if (kvp_subject_parse_events(text, ns, worker) == 0) {
    if (!kvp_subject_token_valid(ns) || !kvp_subject_token_valid(worker))
      abort();
    if (kvp_subject_events(again, sizeof again, ns, worker) != 0 || strcmp(again, text) != 0)
      abort();
  }
  uint32_t p;
  if (kvp_subject_parse_any_events(text, ns, worker, &p) == 0) {
    if (!kvp_subject_token_valid(ns) || !kvp_subject_token_valid(worker))
      abort();
    if (p == UINT32_MAX)
      snprintf(again, sizeof again, "kvplane.ev.%s.%s", ns, worker);
    else if (p < KVP_PARTITIONS_MAX)
      snprintf(again, sizeof again, "kvplane.pev.%s.%u.%s", ns, (unsigned)p, worker);
    else
      abort();
    if (strcmp(again, text) != 0)
      abort();
  }
  if (kvp_hash_parse(text, &h) == 0) {
    snprintf(again, sizeof again, "0x%llx", (unsigned long long)h);
    if (kvp_hash_parse(again, &h2) != 0 || h2 != h)
      abort();
  }
  return 0;
}
