/* tt_ring_sched: chunk/segment arithmetic of the ring (see the header). The
 * one subtle choice is the step -> chunk mapping: reduce-scatter step g sends
 * chunk r-g and receives r-g-1, all-gather step t sends r+1-t and receives
 * r-t, so that the chunk received at step g is the chunk sent at step g+1
 * and rank r ends reduce-scatter owning chunk r+1. */
#include "tt_ring_sched.h"

static int mod_world(long v, int world) {
    long m = v % world;
    return (int)(m < 0 ? m + world : m);
}

tt_ring_span_t tt_ring_sched_segment(tt_ring_span_t whole, size_t nseg, size_t j) {
    tt_ring_span_t s = {whole.off, 0};
    if (nseg == 0 || j >= nseg)
        return s;
    size_t base = whole.count / nseg;
    size_t extra = whole.count % nseg;
    s.off = whole.off + j * base + (j < extra ? j : extra);
    s.count = base + (j < extra ? 1 : 0);
    return s;
}

tt_ring_span_t tt_ring_sched_chunk(size_t count, int world, int c) {
    tt_ring_span_t whole = {0, count};
    if (world < 1 || c < 0 || c >= world)
        return (tt_ring_span_t){count, 0};
    return tt_ring_sched_segment(whole, (size_t)world, (size_t)c);
}

static size_t div_up(size_t a, size_t b) {
    return a / b + (a % b != 0);
}

size_t tt_ring_sched_nseg(size_t count, int world, size_t elem_size, size_t seg_bytes) {
    if (world < 1)
        world = 1;
    if (elem_size == 0)
        elem_size = 1;
    if (seg_bytes == 0)
        seg_bytes = TT_RING_SEG_BYTES_DEFAULT;
    if (seg_bytes < elem_size)
        seg_bytes = elem_size;
    size_t chunk_bytes = div_up(count, (size_t)world) * elem_size;
    size_t seg_elems = seg_bytes / elem_size;
    size_t nseg = div_up(chunk_bytes / elem_size, seg_elems);
    if (nseg < 2 && chunk_bytes >= 2 * TT_RING_PIPE_MIN_BYTES)
        nseg = 2;
    return nseg == 0 ? 1 : nseg;
}

size_t tt_ring_sched_bcast_nseg(size_t count, size_t elem_size, size_t seg_bytes) {
    return tt_ring_sched_nseg(count, 1, elem_size, seg_bytes);
}

int tt_ring_sched_nsteps(int world) {
    return world <= 1 ? 0 : 2 * (world - 1);
}

int tt_ring_sched_is_reduce(int world, int g) {
    return g < world - 1;
}

int tt_ring_sched_send_chunk(int rank, int world, int g) {
    if (g < world - 1)
        return mod_world((long)rank - g, world);
    return mod_world((long)rank + 1 - (g - (world - 1)), world);
}

int tt_ring_sched_recv_chunk(int rank, int world, int g) {
    if (g < world - 1)
        return mod_world((long)rank - g - 1, world);
    return mod_world((long)rank - (g - (world - 1)), world);
}
