/* tt_clock: thin wrappers over clock_gettime and nanosleep. */
#include "tt_clock.h"

#include <time.h>

uint64_t tt_clock_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tt_clock_mono_ms(void) {
    return tt_clock_mono_ns() / 1000000ull;
}

void tt_clock_sleep_us(uint64_t us) {
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0) {
        /* EINTR: sleep the rest */
    }
}

void tt_clock_sleep_ms(uint64_t ms) {
    tt_clock_sleep_us(ms * 1000u);
}

uint64_t tt_clock_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}
