#include "common/clock.h"

#include <time.h>

uint64_t kvp__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t kvp__unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct timespec kvp__realtime_in(uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t nsec = (uint64_t)ts.tv_nsec + ns % 1000000000u;
  ts.tv_sec += (time_t)(ns / 1000000000u + nsec / 1000000000u);
  ts.tv_nsec = (long)(nsec % 1000000000u);
  return ts;
}
