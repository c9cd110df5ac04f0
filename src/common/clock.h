/* Time helpers shared by the modules. */
#ifndef KVP_COMMON_CLOCK_H
#define KVP_COMMON_CLOCK_H

#include <stdint.h>

/* Monotonic clock in nanoseconds. */
uint64_t kvp__now_ns(void);

/* Wall clock in Unix milliseconds (DESIGN.md: times are Unix ms). */
uint64_t kvp__unix_ms(void);

#endif
