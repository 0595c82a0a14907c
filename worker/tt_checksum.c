/* tt_checksum: xxHash64-style checksum (see the header). Loads go through
 * memcpy so unaligned buffers are legal and the compiler still emits plain
 * 8-byte loads; the four lanes keep the multiplies independent so the loop
 * runs near memory speed. Byte order is fixed to little-endian: on a
 * big-endian host the words are swapped so every rank agrees. */
#include "tt_checksum.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static uint64_t round64(uint64_t acc, uint64_t in) {
    return rotl(acc + in * P2, 31) * P1;
}

static uint64_t merge(uint64_t h, uint64_t v) {
    return (h ^ round64(0, v)) * P1 + P4;
}

static uint64_t stripes(const unsigned char **pp, size_t *len) {
    uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
    const unsigned char *p = *pp;
    for (; *len >= 32; *len -= 32, p += 32) {
        v1 = round64(v1, load64(p));
        v2 = round64(v2, load64(p + 8));
        v3 = round64(v3, load64(p + 16));
        v4 = round64(v4, load64(p + 24));
    }
    *pp = p;
    uint64_t h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    return merge(h, v4);
}

uint64_t tt_checksum64(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t total = len;
    uint64_t h = len >= 32 ? stripes(&p, &len) : P5;
    h += total;
    for (; len >= 8; len -= 8, p += 8)
        h = rotl(h ^ round64(0, load64(p)), 27) * P1 + P4;
    for (; len > 0; len--, p++)
        h = rotl(h ^ ((uint64_t)*p * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

uint64_t tt_checksum_f32(const float *data, size_t count) {
    return tt_checksum64(data, count * sizeof(float));
}
