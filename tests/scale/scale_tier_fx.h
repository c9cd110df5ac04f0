/* What the tiering-across-partitions tests share (test_scale_tier.c,
 * test_scale_tier_legacy.c): an advisor run in-process on a thread of its
 * own, its volumes, and the clocks the waits use. */
#ifndef KVP_TESTS_SCALE_TIER_FX_H
#define KVP_TESTS_SCALE_TIER_FX_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "advisor/advisor.h"

typedef struct adv_s {
  kvp_advisor_config_t cfg;
  kvp_advisor_t *adv;
  pthread_t thread;
  int running;
  char db[320];
  pid_t pid;    /* a kvplane-advisor process (test_scale_tier.c's adv_spawn), or 0 */
  int mport;    /* [metrics] listen port, where a test gives one */
  int no_scrub; /* [tiering] scrub_interval = 0 (test_scale_tier_legacy.c) */
} adv_t;

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void *run_main(void *arg) {
  adv_t *a = arg;
  kvp_advisor_run(a->adv);
  return NULL;
}

static inline void adv_stop(adv_t *a) {
  if (!a->running)
    return;
  kvp_advisor_stop(a->adv);
  pthread_join(a->thread, NULL);
  kvp_advisor_close(a->adv);
  a->running = 0;
}

static inline void add_volume(kvp_advisor_config_t *cfg, const char *name, int tier,
                              const char *path, int64_t capacity) {
  kvp_advisor_volume_t *v = &cfg->volumes[cfg->nvolumes++];
  snprintf(v->name, sizeof v->name, "%s", name);
  v->tier = tier;
  snprintf(v->plugin, sizeof v->plugin, "posix");
  v->capacity = capacity;
  snprintf(v->params, sizeof v->params, "path=%s\nfsync=off\n", path);
}

#endif
