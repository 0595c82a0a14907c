/* tt_checksum: the 64-bit checksum of the divergence audit. Replicas that
 * are bitwise identical give the same value on every rank; a single flipped
 * bit (one ulp) changes it. It reads the buffer as little-endian bytes, so
 * the result does not depend on the buffer's alignment or on the platform's
 * float handling (no arithmetic on the floats themselves: -0.0 and 0.0 or
 * two NaN payloads count as different, which is what "identical replicas"
 * means). It is not cryptographic and owns no state.
 * The algorithm is xxHash64-shaped (four independent multiply-rotate lanes
 * over 32-byte stripes, then a tail and an avalanche), fast enough to run
 * over all parameters every audit at memory bandwidth.
 * Thread safety: pure and reentrant. */
#ifndef TT_CHECKSUM_H
#define TT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* Checksum of `len` bytes at `data` (data may be NULL when len is 0). */
uint64_t tt_checksum64(const void *data, size_t len);

/* Checksum of `count` float32 values. */
uint64_t tt_checksum_f32(const float *data, size_t count);

#endif
