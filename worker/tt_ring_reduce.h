/* tt_ring_reduce: element-wise reduction kernels for the ring collectives:
 * dst[i] = op(dst[i], src[i]) for sum, min and max over float32, float64 and
 * int64 (int64 sums wrap, never undefined behaviour). It owns no memory and
 * does no I/O; tt_ring applies it to received segments. Thread safety: every
 * function is pure and reentrant. */
#ifndef TT_RING_REDUCE_H
#define TT_RING_REDUCE_H

#include <stddef.h>

/* dst[i] = op(dst[i], src[i]) for i < n; dst and src do not overlap and are
 * aligned to the element size. */
typedef void (*tt_ring_red_fn)(void *restrict dst, const void *restrict src, size_t n);

/* The kernel for a tt_dtype_t and tt_redop_t (tt_collseq.h); NULL when the
 * pair is not supported (e.g. TT_RED_NONE). */
tt_ring_red_fn tt_ring_reduce_fn(int dtype, int op);

/* fn over n elements of esize bytes; src may be misaligned (a tiny
 * received frame can be), in which case it goes through an aligned copy. */
void tt_ring_reduce_into(tt_ring_red_fn fn, void *dst, const void *src, size_t n, size_t esize);

#endif
