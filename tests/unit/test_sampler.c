/* Unit tests of tt_sampler: the permutation is a permutation and depends on
 * (seed, epoch); slices of every step cover the global batch exactly, with
 * sizes differing by at most one, for several world sizes and for a world
 * that changes between steps; micro-batches tile a slice. */
#include "tt_cunit.h"
#include "tt_sampler.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

static void sampler_permutation_is_bijective_and_seeded(void) {
    enum { n = 1000 };
    uint32_t a[n], b[n], c[n];
    unsigned char seen[n];
    tt_sampler_permute(a, n, 42, 0);
    tt_sampler_permute(b, n, 42, 0);
    tt_sampler_permute(c, n, 42, 1);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < n; i++) {
        CU_ASSERT_FATAL(a[i] < n);
        seen[a[i]]++;
    }
    for (int i = 0; i < n; i++)
        CU_ASSERT(seen[i] == 1);
    CU_ASSERT(memcmp(a, b, sizeof(a)) == 0);
    CU_ASSERT(memcmp(a, c, sizeof(a)) != 0);
    int fixed = 0;
    for (int i = 0; i < n; i++)
        fixed += a[i] == (uint32_t)i;
    CU_ASSERT(fixed < 20); /* really shuffled (expected ~1 fixed point) */
}

static void sampler_permutation_golden_values(void) {
    /* Pins the documented algorithm (splitmix64 + Fisher-Yates): every rank
     * and every future build must produce exactly these. */
    static const uint32_t e0[10] = {1, 9, 0, 7, 4, 2, 5, 3, 8, 6};
    static const uint32_t e5[10] = {2, 7, 0, 4, 9, 8, 5, 3, 6, 1};
    uint32_t p[10];
    tt_sampler_permute(p, 10, 1, 0);
    CU_ASSERT(memcmp(p, e0, sizeof(p)) == 0);
    tt_sampler_permute(p, 10, 1, 5);
    CU_ASSERT(memcmp(p, e5, sizeof(p)) == 0);
}

static void sampler_permutation_reaches_all_orders(void) {
    /* All 3! orders of 3 items appear over many epochs (an off-by-one in
     * the shuffle, e.g. Sattolo's variant, reaches only the 2 cycles). */
    int seen[27] = {0}, distinct = 0;
    for (uint64_t e = 0; e < 300; e++) {
        uint32_t p[3];
        tt_sampler_permute(p, 3, 9, e);
        int key = (int)(p[0] * 9 + p[1] * 3 + p[2]);
        distinct += seen[key]++ == 0;
    }
    CU_ASSERT_EQUAL(distinct, 6);
}

static void sampler_steps_and_batches(void) {
    CU_ASSERT_EQUAL(tt_sampler_steps_per_epoch(60000, 256), 235);
    CU_ASSERT_EQUAL(tt_sampler_steps_per_epoch(512, 256), 2);
    CU_ASSERT_EQUAL(tt_sampler_steps_per_epoch(0, 256), 0);
    CU_ASSERT_EQUAL(tt_sampler_steps_per_epoch(10, 0), 0);
    tt_range_t last = tt_sampler_batch(60000, 256, 234);
    CU_ASSERT_EQUAL(last.begin, 59904);
    CU_ASSERT_EQUAL(last.end, 60000);
    tt_range_t past = tt_sampler_batch(60000, 256, 235);
    CU_ASSERT_EQUAL(past.begin, past.end);
}

/* Marks every example that the slices of all ranks of `step` cover. */
static void cover_step(tt_sampler_t *s, uint64_t n, uint64_t b, uint64_t step, int world,
                       unsigned *count) {
    tt_range_t g = tt_sampler_batch(n, b, step);
    uint64_t expect = g.begin, lo = UINT64_MAX, hi = 0;
    for (int r = 0; r < world; r++) {
        tt_range_t sl = tt_sampler_slice(n, b, step, r, world);
        CU_ASSERT_EQUAL(sl.begin, expect); /* contiguous, in rank order */
        expect = sl.end;
        uint64_t len = sl.end - sl.begin;
        lo = len < lo ? len : lo;
        hi = len > hi ? len : hi;
        for (uint64_t p = sl.begin; p < sl.end; p++)
            count[tt_sampler_index(s, p)]++;
    }
    CU_ASSERT_EQUAL(expect, g.end);
    CU_ASSERT(hi - lo <= 1);
}

static void sampler_every_example_once_per_world(void) {
    const uint64_t n = 1003, b = 64; /* B divides neither N nor by W */
    tt_sampler_t *s = NULL;
    tt_sampler_opts_t o = {n, b, 7};
    CU_ASSERT_FATAL(tt_sampler_create(&s, &o) == TT_OK);
    unsigned *count = calloc(n, sizeof(unsigned));
    for (int w = 1; w <= 5; w++) {
        tt_sampler_set_epoch(s, (uint64_t)w);
        memset(count, 0, n * sizeof(unsigned));
        for (uint64_t st = 0; st < tt_sampler_steps(s); st++)
            cover_step(s, n, b, st, w, count);
        for (uint64_t i = 0; i < n; i++)
            CU_ASSERT(count[i] == 1);
    }
    free(count);
    tt_sampler_destroy(&s);
    CU_ASSERT_PTR_NULL(s);
    tt_sampler_destroy(NULL);
}

static void sampler_world_change_between_steps(void) {
    const uint64_t n = 777, b = 50;
    tt_sampler_t *s = NULL;
    tt_sampler_opts_t o = {n, b, 3};
    CU_ASSERT_FATAL(tt_sampler_create(&s, &o) == TT_OK);
    unsigned *count = calloc(n, sizeof(unsigned));
    static const int worlds[] = {4, 4, 3, 1, 5, 2, 2, 7};
    for (uint64_t st = 0; st < tt_sampler_steps(s); st++)
        cover_step(s, n, b, st, worlds[st % 8], count);
    for (uint64_t i = 0; i < n; i++)
        CU_ASSERT(count[i] == 1);
    free(count);
    tt_sampler_destroy(&s);
}

static void sampler_slice_sizes_first_ranks_larger(void) {
    /* batch 10 over 4 ranks: 3,3,2,2 */
    static const uint64_t want[] = {3, 3, 2, 2};
    for (int r = 0; r < 4; r++) {
        tt_range_t sl = tt_sampler_slice(100, 10, 2, r, 4);
        CU_ASSERT_EQUAL(sl.end - sl.begin, want[r]);
    }
    tt_range_t bad = tt_sampler_slice(100, 10, 0, 4, 4);
    CU_ASSERT_EQUAL(bad.end - bad.begin, 0);
    bad = tt_sampler_slice(100, 10, 0, 0, 0);
    CU_ASSERT_EQUAL(bad.end - bad.begin, 0);
    /* more ranks than examples: some slices are empty, none negative */
    uint64_t total = 0;
    for (int r = 0; r < 8; r++) {
        tt_range_t sl = tt_sampler_slice(13, 5, 2, r, 8); /* 3 examples */
        total += sl.end - sl.begin;
    }
    CU_ASSERT_EQUAL(total, 3);
}

static void sampler_micro_batches_tile_slice(void) {
    tt_range_t sl = {100, 123};
    CU_ASSERT_EQUAL(tt_sampler_micro_count(sl, 8), 3);
    tt_range_t m0 = tt_sampler_micro(sl, 8, 0), m2 = tt_sampler_micro(sl, 8, 2);
    CU_ASSERT_EQUAL(m0.begin, 100);
    CU_ASSERT_EQUAL(m0.end, 108);
    CU_ASSERT_EQUAL(m2.begin, 116);
    CU_ASSERT_EQUAL(m2.end, 123);
    tt_range_t past = tt_sampler_micro(sl, 8, 3);
    CU_ASSERT_EQUAL(past.end - past.begin, 0);
    CU_ASSERT_EQUAL(tt_sampler_micro_count(sl, 0), 1);
    tt_range_t whole = tt_sampler_micro(sl, 0, 0);
    CU_ASSERT(whole.begin == 100 && whole.end == 123);
    tt_range_t empty = {5, 5};
    CU_ASSERT_EQUAL(tt_sampler_micro_count(empty, 4), 0);
    CU_ASSERT_EQUAL(tt_sampler_micro_count(sl, 23), 1);
    CU_ASSERT_EQUAL(tt_sampler_micro_count(sl, 1), 23);
}

static void sampler_create_rejects_bad_options(void) {
    tt_sampler_t *s = NULL;
    tt_sampler_opts_t zero_n = {0, 10, 1}, zero_b = {10, 0, 1};
    CU_ASSERT_EQUAL(tt_sampler_create(&s, &zero_n), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_sampler_create(&s, &zero_b), TT_EINVAL);
    CU_ASSERT_PTR_NULL(s);
}

static const tt_cunit_test_t tests[] = {
    {"sampler_permutation_is_bijective_and_seeded", sampler_permutation_is_bijective_and_seeded},
    {"sampler_permutation_golden_values", sampler_permutation_golden_values},
    {"sampler_permutation_reaches_all_orders", sampler_permutation_reaches_all_orders},
    {"sampler_steps_and_batches", sampler_steps_and_batches},
    {"sampler_every_example_once_per_world", sampler_every_example_once_per_world},
    {"sampler_world_change_between_steps", sampler_world_change_between_steps},
    {"sampler_slice_sizes_first_ranks_larger", sampler_slice_sizes_first_ranks_larger},
    {"sampler_micro_batches_tile_slice", sampler_micro_batches_tile_slice},
    {"sampler_create_rejects_bad_options", sampler_create_rejects_bad_options},
    {NULL, NULL},
};

TT_CUNIT_MAIN("sampler", tests)
