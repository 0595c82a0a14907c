/* tt_ring_sched: the pure arithmetic of the ring algorithms: how a buffer of
 * `count` elements is cut into one chunk per rank and each chunk into
 * segments (the pipelining unit), and which chunk a rank sends and receives
 * at each step of reduce-scatter followed by all-gather. It owns no memory,
 * does no I/O and knows nothing of dtypes beyond an element size; the
 * transport (tt_ring) drives it.
 *
 * Ring convention: rank r sends to r+1 and receives from r-1 (mod world).
 * Steps g = 0 .. 2(world-1)-1: the first world-1 are reduce-scatter, the rest
 * all-gather. What a rank receives at step g is exactly what it sends at step
 * g+1, which is what lets segments stream through a rank one at a time.
 * Thread safety: every function is pure and reentrant. */
#ifndef TT_RING_SCHED_H
#define TT_RING_SCHED_H

#include <stddef.h>

/* Element range [off, off + count) of the flat buffer. */
typedef struct tt_ring_span {
    size_t off;
    size_t count;
} tt_ring_span_t;

/* Default segment size: Gloo's kMaxSegmentSize. */
#define TT_RING_SEG_BYTES_DEFAULT ((size_t)1 << 20)
/* A chunk at least twice this big is cut into >= 2 segments so that sending
 * one segment overlaps with reducing the other. */
#define TT_RING_PIPE_MIN_BYTES ((size_t)64 << 10)

/* Chunk `c` (0 <= c < world) of a buffer of `count` elements: balanced, the
 * first count % world chunks one element longer. Chunks may be empty when
 * count < world. Requires world >= 1. */
tt_ring_span_t tt_ring_sched_chunk(size_t count, int world, int c);

/* Segments per chunk (the same for every chunk, so units line up across
 * ranks): enough that no segment exceeds seg_bytes (0: default), at least 2
 * when the largest chunk is >= 2 * TT_RING_PIPE_MIN_BYTES, and at least 1
 * even for an empty buffer (empty units still carry the header, so a
 * zero-length collective is checked like any other). elem_size >= 1. */
size_t tt_ring_sched_nseg(size_t count, int world, size_t elem_size, size_t seg_bytes);

/* Segment j (0 <= j < nseg) of span `whole`: balanced split, may be empty. */
tt_ring_span_t tt_ring_sched_segment(tt_ring_span_t whole, size_t nseg, size_t j);

/* Number of ring steps of an all-reduce: 2(world-1). */
int tt_ring_sched_nsteps(int world);

/* Chunk that `rank` sends at step g (0 <= g < nsteps) of an all-reduce. */
int tt_ring_sched_send_chunk(int rank, int world, int g);

/* Chunk that `rank` receives at step g; reduced into place when
 * g < world-1, copied into place otherwise. */
int tt_ring_sched_recv_chunk(int rank, int world, int g);

/* 1 when step g is a reduce-scatter step, 0 for all-gather. */
int tt_ring_sched_is_reduce(int world, int g);

/* Segments for a broadcast of `count` elements (no per-rank chunks): at
 * least 1, none above seg_bytes (0: default). */
size_t tt_ring_sched_bcast_nseg(size_t count, size_t elem_size, size_t seg_bytes);

#endif
