/* tt_clock: monotonic and wall time in milliseconds, and sleeping. Pure
 * logic never calls these directly: it takes `now_ms` as an argument, so
 * tests inject time. */
#ifndef TT_CLOCK_H
#define TT_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. Thread safe. */
uint64_t tt_clock_mono_ms(void);

/* CLOCK_MONOTONIC in nanoseconds, for benchmarks and flight records. */
uint64_t tt_clock_mono_ns(void);

/* Sleeps the whole time, across signals. Thread safe. */
void tt_clock_sleep_us(uint64_t us);
void tt_clock_sleep_ms(uint64_t ms);

/* Unix wall time in milliseconds (for records shown to people). */
uint64_t tt_clock_wall_ms(void);

#endif
