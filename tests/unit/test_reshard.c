/* Unit tests of tt_reshard: every overlap case between a wanted range and
 * a saved layout, each checked against a brute-force byte map (which part
 * byte every logical byte comes from), and real resharding: a layout saved
 * by tt_placement over 2 shards loaded into 3 and back, by executing the
 * planned reads on simulated part contents. */
#include "tt_cunit.h"
#include "tt_placement.h"
#include "tt_reshard.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

#define SPACE 4096u

typedef struct {
    int32_t part; /* -1: byte in no segment */
    uint64_t off;
} src_t;

static void byte_map(const tt_reshard_seg_t *s, size_t n, src_t *map) {
    for (size_t i = 0; i < SPACE; i++)
        map[i].part = -1;
    for (size_t i = 0; i < n; i++)
        for (uint64_t b = 0; b < s[i].length; b++)
            map[s[i].logical_offset + b] = (src_t){(int32_t)s[i].part, s[i].part_offset + b};
}

/* Plans [off, off+len) and checks, byte by byte, that every destination
 * byte is written exactly once from the part byte the map names. Returns
 * the number of reads, or -1 after a failed assertion. */
static long check_plan(const tt_reshard_seg_t *s, size_t n, uint64_t off, uint64_t len) {
    static src_t map[SPACE];
    byte_map(s, n, map);
    tt_reshard_read_t *rd = NULL;
    size_t nrd = 0;
    char err[256] = "";
    int rc = tt_reshard_plan(s, n, off, len, &rd, &nrd, err, sizeof(err));
    CU_ASSERT_EQUAL_FATAL(rc, TT_OK);
    unsigned char *seen = calloc(len + 1, 1);
    int bad = 0;
    for (size_t i = 0; i < nrd; i++) {
        for (uint64_t b = 0; b < rd[i].length; b++) {
            uint64_t d = rd[i].dest_offset + b;
            if (d >= len || seen[d]++ || map[off + d].part != (int32_t)rd[i].part ||
                map[off + d].off != rd[i].part_offset + b)
                bad++;
        }
    }
    for (uint64_t d = 0; d < len; d++)
        bad += seen[d] != 1;
    CU_ASSERT_EQUAL(bad, 0);
    free(seen);
    free(rd);
    return bad ? -1 : (long)nrd;
}

/* Three parts, interleaved: [0,100) p0, [100,250) p1, [250,300) p0,
 * [300,512) p2. */
static const tt_reshard_seg_t three[] = {
    {0, 100, 0, 0}, {100, 150, 1, 0}, {250, 50, 0, 100}, {300, 212, 2, 0}};

static void reshard_exact_segment(void) {
    CU_ASSERT_EQUAL(check_plan(three, 4, 100, 150), 1);
    CU_ASSERT_EQUAL(check_plan(three, 4, 0, 512), 4);
}

static void reshard_inside_one_segment(void) {
    CU_ASSERT_EQUAL(check_plan(three, 4, 120, 30), 1);
    CU_ASSERT_EQUAL(check_plan(three, 4, 511, 1), 1);
}

static void reshard_spanning_several_parts(void) {
    CU_ASSERT_EQUAL(check_plan(three, 4, 50, 400), 4);
    CU_ASSERT_EQUAL(check_plan(three, 4, 99, 2), 2);
}

static void reshard_touching_edges(void) {
    CU_ASSERT_EQUAL(check_plan(three, 4, 0, 100), 1);   /* ends on a boundary */
    CU_ASSERT_EQUAL(check_plan(three, 4, 250, 50), 1);  /* starts and ends on one */
    CU_ASSERT_EQUAL(check_plan(three, 4, 249, 2), 2);   /* one byte each side */
    CU_ASSERT_EQUAL(check_plan(three, 4, 300, 212), 1); /* last segment to the end */
}

static void reshard_empty_range(void) {
    tt_reshard_read_t *rd = (tt_reshard_read_t *)1;
    size_t n = 7;
    CU_ASSERT_EQUAL(tt_reshard_plan(three, 4, 200, 0, &rd, &n, NULL, 0), TT_OK);
    CU_ASSERT_PTR_NULL(rd);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(tt_reshard_plan(three, 4, 9999, 0, &rd, &n, NULL, 0), TT_OK);
}

static void reshard_merges_contiguous_reads(void) {
    /* Two segments that continue each other in the same part: one read. */
    const tt_reshard_seg_t s[] = {{0, 10, 3, 40}, {10, 10, 3, 50}, {20, 5, 3, 70}};
    CU_ASSERT_EQUAL(check_plan(s, 3, 0, 25), 2);
}

static void reshard_missing_bytes_are_named(void) {
    const tt_reshard_seg_t gap[] = {{0, 10, 0, 0}, {20, 10, 1, 0}};
    tt_reshard_read_t *rd = NULL;
    size_t n = 0;
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_reshard_plan(gap, 2, 5, 20, &rd, &n, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "[10, 20)"));
    CU_ASSERT_PTR_NULL(rd);
    CU_ASSERT_EQUAL(tt_reshard_plan(gap, 2, 25, 10, &rd, &n, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "[30, 35)"));
    CU_ASSERT_EQUAL(tt_reshard_plan(gap, 2, 100, 1, &rd, &n, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_reshard_plan(gap, 2, 12, 3, &rd, &n, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(check_plan(gap, 2, 20, 10), 1); /* around the gap is fine */
}

static void reshard_rejects_bad_layouts(void) {
    const tt_reshard_seg_t unsorted[] = {{10, 10, 0, 0}, {0, 10, 0, 10}};
    const tt_reshard_seg_t overlap[] = {{0, 10, 0, 0}, {9, 10, 1, 0}};
    const tt_reshard_seg_t empty[] = {{0, 0, 0, 0}};
    const tt_reshard_seg_t wrap[] = {{UINT64_MAX - 1, 4, 0, 0}};
    tt_reshard_read_t *rd = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(tt_reshard_plan(unsorted, 2, 0, 5, &rd, &n, NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_reshard_plan(overlap, 2, 0, 5, &rd, &n, NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_reshard_plan(empty, 1, 0, 5, &rd, &n, NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_reshard_plan(wrap, 1, 0, 5, &rd, &n, NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_reshard_plan(three, 4, UINT64_MAX - 2, 5, &rd, &n, NULL, 0), TT_EINVAL);
    /* tt_reshard_check with a total: gaps and short layouts. */
    const tt_reshard_seg_t gap[] = {{0, 10, 0, 0}, {20, 10, 1, 0}};
    CU_ASSERT_EQUAL(tt_reshard_check(gap, 2, 0, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_reshard_check(gap, 2, 30, NULL, 0), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_reshard_check(three, 4, 512, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_reshard_check(three, 4, 600, NULL, 0), TT_EINVAL);
}

/* Layout a checkpoint written by `p` would have: each shard's part holds
 * its chunks back to back in chunk order. Byte units, float32 elements. */
static tt_reshard_seg_t *layout_of(const tt_placement_t *p, size_t *n) {
    tt_reshard_seg_t *s = calloc(p->nchunks, sizeof(*s));
    uint64_t fill[8] = {0};
    for (size_t c = 0; c < p->nchunks; c++) {
        uint32_t sh = p->chunks[c].shard;
        s[c] = (tt_reshard_seg_t){p->chunks[c].offset * 4, p->chunks[c].count * 4, sh, fill[sh]};
        fill[sh] += s[c].length;
    }
    *n = p->nchunks;
    return s;
}

static int place(tt_placement_t *p, size_t nshards, uint64_t elems, uint64_t chunk_bytes) {
    const char *ids[] = {"s-a", "s-b", "s-c", "s-d"};
    return tt_placement_compute(NULL, ids, nshards, elems, chunk_bytes, p, NULL, 0);
}

/* Saves with `from` shards, loads every chunk of a `to`-shard placement by
 * executing the planned reads on simulated part contents. */
static void save_and_load(size_t from, size_t to) {
    tt_placement_t a, b;
    const uint64_t elems = 1000, chunk = 4 * 37; /* uneven last chunk */
    CU_ASSERT_EQUAL_FATAL(place(&a, from, elems, chunk), TT_OK);
    CU_ASSERT_EQUAL_FATAL(place(&b, to, elems, chunk * 2 + 4), TT_OK); /* other chunking too */
    size_t n = 0;
    tt_reshard_seg_t *segs = layout_of(&a, &n);
    CU_ASSERT_EQUAL(tt_reshard_check(segs, n, elems * 4, NULL, 0), TT_OK);
    /* parts[s][k]: byte k of shard s's part; value = low byte of the logical offset * 7. */
    uint8_t parts[4][4000];
    for (size_t i = 0; i < n; i++)
        for (uint64_t k = 0; k < segs[i].length; k++)
            parts[segs[i].part][segs[i].part_offset + k] =
                (uint8_t)((segs[i].logical_offset + k) * 7);
    int bad = 0;
    for (size_t c = 0; c < b.nchunks; c++) {
        uint64_t off = b.chunks[c].offset * 4, len = b.chunks[c].count * 4;
        uint8_t dst[400];
        memset(dst, 0xee, sizeof(dst));
        tt_reshard_read_t *rd = NULL;
        size_t nrd = 0;
        CU_ASSERT_EQUAL_FATAL(tt_reshard_plan(segs, n, off, len, &rd, &nrd, NULL, 0), TT_OK);
        for (size_t r = 0; r < nrd; r++)
            memcpy(dst + rd[r].dest_offset, &parts[rd[r].part][rd[r].part_offset], rd[r].length);
        for (uint64_t k = 0; k < len; k++)
            bad += dst[k] != (uint8_t)((off + k) * 7);
        bad += check_plan(segs, n, off, len) < 0;
        free(rd);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(segs);
    tt_placement_free(&a);
    tt_placement_free(&b);
}

static void reshard_saved_2_shards_loaded_into_3(void) {
    save_and_load(2, 3);
}

static void reshard_saved_3_shards_loaded_into_2(void) {
    save_and_load(3, 2);
}

/* Every (offset, length) window of a small interleaved layout. */
static void reshard_all_windows_match_byte_map(void) {
    long bad = 0;
    for (uint64_t off = 0; off < 512; off += 7)
        for (uint64_t len = 1; off + len <= 512; len += 13)
            bad += check_plan(three, 4, off, len) < 0;
    CU_ASSERT_EQUAL(bad, 0);
}

static const tt_cunit_test_t tests[] = {
    {"reshard_exact_segment", reshard_exact_segment},
    {"reshard_inside_one_segment", reshard_inside_one_segment},
    {"reshard_spanning_several_parts", reshard_spanning_several_parts},
    {"reshard_touching_edges", reshard_touching_edges},
    {"reshard_empty_range", reshard_empty_range},
    {"reshard_merges_contiguous_reads", reshard_merges_contiguous_reads},
    {"reshard_missing_bytes_are_named", reshard_missing_bytes_are_named},
    {"reshard_rejects_bad_layouts", reshard_rejects_bad_layouts},
    {"reshard_saved_2_shards_loaded_into_3", reshard_saved_2_shards_loaded_into_3},
    {"reshard_saved_3_shards_loaded_into_2", reshard_saved_3_shards_loaded_into_2},
    {"reshard_all_windows_match_byte_map", reshard_all_windows_match_byte_map},
    {NULL, NULL},
};

TT_CUNIT_MAIN("reshard", tests)
