/* Time helpers shared by the modules. */
#ifndef KVP_COMMON_CLOCK_H
#define KVP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic clock in nanoseconds. */
uint64_t kvp__now_ns(void);

/* Wall clock in Unix milliseconds (DESIGN.md: times are Unix ms). */
uint64_t kvp__unix_ms(void);

/* The CLOCK_REALTIME time ns nanoseconds from now: the deadline form
 * pthread_cond_timedwait takes for condition variables on the default
 * clock. */
struct timespec kvp__realtime_in(uint64_t ns);

#endif
