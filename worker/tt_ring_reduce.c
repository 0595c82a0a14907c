/* tt_ring_reduce: the element-wise reduction kernels of the ring collectives
 * (sum, min, max over float32, float64, int64), split from tt_ring.c, which
 * owns the transport. No I/O, no state. */
#include "tt_ring_reduce.h"

#include "tt_collseq.h"

#include <stdint.h>
#include <string.h>

/* Plain loops over restrict pointers, blocked by 16 so that even GCC's -O2
 * "very cheap" vectoriser (no epilogue allowed) turns the inner loop into
 * SSE/AVX adds and min/max; the tail runs scalar. They outrun the TCP path
 * by an order of magnitude. */
#define RED_BLOCK 16
#define DEF_RED(name, T, F)                                                                        \
    static void name(void *restrict dv, const void *restrict sv, size_t n) {                       \
        T *restrict d = dv;                                                                        \
        const T *restrict s = sv;                                                                  \
        size_t i = 0;                                                                              \
        for (; i + RED_BLOCK <= n; i += RED_BLOCK)                                                 \
            for (size_t k = 0; k < RED_BLOCK; k++)                                                 \
                d[i + k] = F(d[i + k], s[i + k]);                                                  \
        for (; i < n; i++)                                                                         \
            d[i] = F(d[i], s[i]);                                                                  \
    }

#define F_SUM(a, b)  ((a) + (b))
#define F_MIN(a, b)  ((b) < (a) ? (b) : (a))
#define F_MAX(a, b)  ((b) > (a) ? (b) : (a))
#define F_ISUM(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b))) /* wraps, no UB */

DEF_RED(sum_f32, float, F_SUM)
DEF_RED(min_f32, float, F_MIN)
DEF_RED(max_f32, float, F_MAX)
DEF_RED(sum_f64, double, F_SUM)
DEF_RED(min_f64, double, F_MIN)
DEF_RED(max_f64, double, F_MAX)
DEF_RED(sum_i64, int64_t, F_ISUM)
DEF_RED(min_i64, int64_t, F_MIN)
DEF_RED(max_i64, int64_t, F_MAX)

tt_ring_red_fn tt_ring_reduce_fn(int dtype, int op) {
    static const tt_ring_red_fn table[3][3] = {
        {sum_f32, min_f32, max_f32}, {sum_f64, min_f64, max_f64}, {sum_i64, min_i64, max_i64}};
    if (dtype < TT_DT_FLOAT32 || dtype > TT_DT_INT64 || op < TT_RED_SUM || op > TT_RED_MAX)
        return NULL;
    return table[dtype - 1][op - 1];
}

/* Received frames are normally 8-byte aligned; a tiny one stored inside the
 * message struct may not be, so it goes through an aligned copy. */
void tt_ring_reduce_into(tt_ring_red_fn fn, void *dst, const void *src, size_t n, size_t esize) {
    if (((uintptr_t)src % esize) == 0) {
        fn(dst, src, n);
        return;
    }
    uint64_t tmp[64];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof(tmp) / esize ? n - done : sizeof(tmp) / esize;
        memcpy(tmp, (const char *)src + done * esize, k * esize);
        fn((char *)dst + done * esize, tmp, k);
        done += k;
    }
}
