/* tt_rng: the one documented 64-bit PRNG that every replica must agree on
 * (sampler permutations, parameter init). It is splitmix64 (Steele, Lea,
 * Flood 2014; the seeder of xoshiro): state += 0x9E3779B97F4A7C15, then an
 * invertible mix. It is tiny, has a full 2^64 period, and its output is a
 * pure function of (seed, draw number), so every rank reproduces the same
 * stream without communicating. Not for cryptography. Header-only and free
 * of global state: the caller owns the state word. */
#ifndef TT_RNG_H
#define TT_RNG_H

#include <stdint.h>

/* Next 64-bit output; advances *state. Thread safe per state word. */
static inline uint64_t tt_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Derives the state of an independent stream from (seed, stream id), e.g.
 * (job seed, epoch): one mixing round of each, so nearby ids give unrelated
 * streams. */
static inline uint64_t tt_rng_derive(uint64_t seed, uint64_t stream) {
    uint64_t s = seed;
    uint64_t a = tt_rng_next(&s);
    s = a ^ (stream * 0xD1B54A32D192ED03ULL);
    return tt_rng_next(&s);
}

/* Uniform integer in [0, bound) for bound >= 1, without modulo bias
 * (Lemire's multiply-shift with rejection). */
static inline uint64_t tt_rng_below(uint64_t *state, uint64_t bound) {
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t x = tt_rng_next(state);
        __uint128_t m = (__uint128_t)x * bound;
        if ((uint64_t)m >= threshold)
            return (uint64_t)(m >> 64);
    }
}

/* Uniform float in [0, 1) from the top 24 bits (exactly representable). */
static inline float tt_rng_unit_float(uint64_t *state) {
    return (float)(tt_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

#endif
