/* Unit tests of tt_ring_sched: chunks and segments tile the buffer exactly
 * once for every size 0..50 and world 1..8, and the step schedule makes
 * every rank end with every chunk reduced over all ranks. */
#include "tt_cunit.h"
#include "tt_ring_sched.h"

#include <string.h>

/* Each element covered by exactly one segment of one chunk, in order. */
static void ring_sched_segments_tile_buffer(void) {
    for (size_t count = 0; count <= 50; count++) {
        for (int w = 1; w <= 8; w++) {
            for (size_t seg = 4; seg <= 64; seg *= 4) {
                size_t nseg = tt_ring_sched_nseg(count, w, 4, seg);
                CU_ASSERT_FATAL(nseg >= 1);
                size_t next = 0;
                for (int c = 0; c < w; c++) {
                    tt_ring_span_t ch = tt_ring_sched_chunk(count, w, c);
                    CU_ASSERT(ch.off == next);
                    for (size_t j = 0; j < nseg; j++) {
                        tt_ring_span_t s = tt_ring_sched_segment(ch, nseg, j);
                        CU_ASSERT(s.off == next);
                        CU_ASSERT(s.count * 4 <= seg || s.count == 1);
                        next += s.count;
                    }
                }
                CU_ASSERT(next == count);
            }
        }
    }
}

static void ring_sched_chunks_balanced(void) {
    tt_ring_span_t a = tt_ring_sched_chunk(10, 4, 0);
    tt_ring_span_t d = tt_ring_sched_chunk(10, 4, 3);
    CU_ASSERT(a.off == 0 && a.count == 3);
    CU_ASSERT(d.off == 8 && d.count == 2);
    tt_ring_span_t e = tt_ring_sched_chunk(2, 5, 4); /* fewer elements than ranks */
    CU_ASSERT(e.off == 2 && e.count == 0);
    tt_ring_span_t one = tt_ring_sched_chunk(7, 1, 0);
    CU_ASSERT(one.off == 0 && one.count == 7);
}

static void ring_sched_nseg_limits(void) {
    CU_ASSERT(tt_ring_sched_nseg(0, 4, 4, 0) == 1);
    /* 64 MiB float32 over 2 ranks: 32 MiB chunks in 1 MiB segments. */
    CU_ASSERT(tt_ring_sched_nseg((size_t)16 << 20, 2, 4, 0) == 32);
    /* 256 KiB chunk: pipelined in 2 even though it fits one segment. */
    CU_ASSERT(tt_ring_sched_nseg(65536, 1, 4, 0) == 2);
    CU_ASSERT(tt_ring_sched_nseg(1000, 1, 4, 0) == 1);
    CU_ASSERT(tt_ring_sched_bcast_nseg(3 << 18, 4, 0) == 3);
    /* a segment smaller than one element still makes progress */
    CU_ASSERT(tt_ring_sched_nseg(5, 1, 8, 3) == 5);
}

/* Simulate the schedule: each rank holds a bitmask of contributions per
 * chunk; after all steps every chunk on every rank has all ranks' bits. */
static void ring_sched_steps_reduce_everything(void) {
    for (int w = 1; w <= 8; w++) {
        unsigned have[8][8], inbox[8];
        memset(have, 0, sizeof(have));
        for (int r = 0; r < w; r++)
            for (int c = 0; c < w; c++)
                have[r][c] = 1u << r;
        CU_ASSERT(tt_ring_sched_nsteps(w) == (w == 1 ? 0 : 2 * (w - 1)));
        for (int g = 0; g < tt_ring_sched_nsteps(w); g++) {
            for (int r = 0; r < w; r++)
                inbox[(r + 1) % w] = have[r][tt_ring_sched_send_chunk(r, w, g)];
            for (int r = 0; r < w; r++) {
                int c = tt_ring_sched_recv_chunk(r, w, g);
                /* the left neighbour sent exactly the chunk we expect */
                CU_ASSERT(tt_ring_sched_send_chunk((r + w - 1) % w, w, g) == c);
                if (g + 1 < tt_ring_sched_nsteps(w))
                    CU_ASSERT(tt_ring_sched_send_chunk(r, w, g + 1) == c);
                if (tt_ring_sched_is_reduce(w, g)) {
                    CU_ASSERT((have[r][c] & inbox[r]) == 0); /* never reduced twice */
                    have[r][c] |= inbox[r];
                } else {
                    have[r][c] = inbox[r];
                }
            }
        }
        for (int r = 0; r < w; r++)
            for (int c = 0; c < w; c++)
                CU_ASSERT(have[r][c] == (1u << w) - 1);
    }
}

static void ring_sched_segment_out_of_range(void) {
    tt_ring_span_t whole = {5, 10};
    tt_ring_span_t s = tt_ring_sched_segment(whole, 3, 3);
    CU_ASSERT(s.count == 0);
    s = tt_ring_sched_segment(whole, 3, 0);
    CU_ASSERT(s.off == 5 && s.count == 4);
    s = tt_ring_sched_segment(whole, 3, 2);
    CU_ASSERT(s.off == 12 && s.count == 3);
}

static const tt_cunit_test_t tests[] = {
    {"ring_sched_segments_tile_buffer", ring_sched_segments_tile_buffer},
    {"ring_sched_chunks_balanced", ring_sched_chunks_balanced},
    {"ring_sched_nseg_limits", ring_sched_nseg_limits},
    {"ring_sched_steps_reduce_everything", ring_sched_steps_reduce_everything},
    {"ring_sched_segment_out_of_range", ring_sched_segment_out_of_range},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ring_sched", tests)
