/* libFuzzer target: the relay's restart state files (outside bytes: a file
 * on disk that a crash, a full disk or an operator may have left torn or
 * wrong), <worker>.state and <worker>.map, through their readers. Errors are
 * expected; crashes, overruns and large allocations from a bad count are
 * not. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "relay/map.h"
#include "relay/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_relay_map_t *m = NULL;
  kvp__relay_saved_t saved;
  char path[64];
  int64_t seq = -1;
  int fd = memfd_create("kvp-fuzz-relay-state", 0);

  if (fd < 0)
    return 0;
  if (write(fd, data, size) == (ssize_t)size && kvp__relay_map_create(1024, &m) == 0) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = kvp__relay_state_read(path, "tcp://127.0.0.1:5557", &saved);
    if (rc == 0 && (saved.seq < 0 || saved.epoch == 0))
      abort(); /* accepted a state the reader says it refuses */
    if (kvp__relay_map_read(path, &seq, m) == 0 && seq < 0)
      abort();
    if (kvp__relay_map_size(m) > 1024)
      abort(); /* the cap holds whatever the file says */
  }
  kvp__relay_map_destroy(m);
  close(fd);
  return 0;
}
