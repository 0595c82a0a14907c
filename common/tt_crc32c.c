/* tt_crc32c: slicing-by-8 and SSE4.2 CRC-32C (three interleaved streams
 * for long inputs). The dispatch asks the CPU
 * on every call instead of caching a function pointer: the check is one
 * load and a bit test (__builtin_cpu_supports reads data filled in by a
 * libgcc constructor), and it keeps the module free of mutable state. */
#include "tt_crc32c.h"
#include "tt_crc32c_table.h"

#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TT_CRC32C_X86 1
#include <nmmintrin.h>
#endif

/* Little-endian 32-bit load from bytes: independent of host byte order and
 * alignment; compilers turn it into one load on x86 and arm64. */
static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t sw_bytes(uint32_t c, const uint8_t *p, size_t n) {
    while (n-- > 0)
        c = (c >> 8) ^ tt_crc32c_tab[0][(c ^ *p++) & 0xffu];
    return c;
}

uint32_t tt_crc32c_sw(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = data;
    uint32_t c = ~crc;
    if (len == 0)
        return crc;
    /* Align to 8 so the main loop's loads stay inside cache lines. */
    size_t head = (size_t)(-(uintptr_t)p & 7u);
    if (head > len)
        head = len;
    c = sw_bytes(c, p, head);
    p += head;
    len -= head;
    for (; len >= 8; p += 8, len -= 8) {
        uint32_t lo = c ^ load_le32(p), hi = load_le32(p + 4);
        c = tt_crc32c_tab[7][lo & 0xffu] ^ tt_crc32c_tab[6][(lo >> 8) & 0xffu] ^
            tt_crc32c_tab[5][(lo >> 16) & 0xffu] ^ tt_crc32c_tab[4][lo >> 24] ^
            tt_crc32c_tab[3][hi & 0xffu] ^ tt_crc32c_tab[2][(hi >> 8) & 0xffu] ^
            tt_crc32c_tab[1][(hi >> 16) & 0xffu] ^ tt_crc32c_tab[0][hi >> 24];
    }
    return ~sw_bytes(c, p, len);
}

#ifdef TT_CRC32C_X86
int tt_crc32c_hw_available(void) {
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

/* The register r followed by as many zero bytes as the operator stands for. */
static inline uint32_t shift(const uint32_t op[32], uint32_t r) {
    uint32_t out = 0;
    for (int i = 0; i < 32; i++)
        out ^= op[i] & (0u - ((r >> i) & 1u));
    return out;
}

#if defined(__x86_64__)
/* Why three streams: crc32q has a latency of 3 cycles but a throughput of
 * one per cycle, so one dependency chain runs at a third of the unit's
 * speed. Three blocks are summed independently and joined with the shift
 * operators: crc(A|B|C) = shift2(crc(A)) ^ shift1(crc0(B)) ^ crc0(C). */
__attribute__((target("sse4.2"))) static uint32_t hw_crc3(uint32_t c, const uint8_t **pp,
                                                          size_t *lenp) {
    const uint8_t *p = *pp;
    size_t len = *lenp;
    const size_t blk = TT_CRC32C_BLK;
    for (; len >= 3 * blk; p += 3 * blk, len -= 3 * blk) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < blk; i += 8) {
            uint64_t wa, wb, wd;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, p + blk + i, 8);
            memcpy(&wd, p + 2 * blk + i, 8);
            a = _mm_crc32_u64(a, wa);
            b = _mm_crc32_u64(b, wb);
            d = _mm_crc32_u64(d, wd);
        }
        c = shift(tt_crc32c_shift2, (uint32_t)a) ^ shift(tt_crc32c_shift1, (uint32_t)b) ^
            (uint32_t)d;
    }
    *pp = p;
    *lenp = len;
    return c;
}
#endif

__attribute__((target("sse4.2"))) static uint32_t hw_crc(uint32_t crc, const uint8_t *p,
                                                         size_t len) {
    uint32_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        c = _mm_crc32_u8(c, *p++);
        len--;
    }
#if defined(__x86_64__)
    c = hw_crc3(c, &p, &len);
    uint64_t c64 = c;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, sizeof(w)); /* x86 is little-endian, as the CRC wants */
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
#endif
    for (; len >= 4; p += 4, len -= 4) {
        uint32_t w;
        memcpy(&w, p, sizeof(w));
        c = _mm_crc32_u32(c, w);
    }
    while (len-- > 0)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}

uint32_t tt_crc32c_hw(uint32_t crc, const void *data, size_t len) {
    if (len == 0)
        return crc;
    if (!tt_crc32c_hw_available())
        return tt_crc32c_sw(crc, data, len);
    return hw_crc(crc, data, len);
}
#else
int tt_crc32c_hw_available(void) {
    return 0;
}

uint32_t tt_crc32c_hw(uint32_t crc, const void *data, size_t len) {
    return tt_crc32c_sw(crc, data, len);
}
#endif

uint32_t tt_crc32c(uint32_t crc, const void *data, size_t len) {
    return tt_crc32c_hw_available() ? tt_crc32c_hw(crc, data, len) : tt_crc32c_sw(crc, data, len);
}

const char *tt_crc32c_impl_name(void) {
    return tt_crc32c_hw_available() ? "sse4.2" : "slicing-by-8";
}
