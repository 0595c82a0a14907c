/* Unit tests of tt_nccl_plan: the shrink plan sorts a private copy of the
 * exclude list (the caller's stays as given), maps survivors to their new
 * ranks, refuses an excluded caller and bad lists; the rest plan of a step
 * covers what its early parts left; the nccl+ps route keeps gradients on
 * the shards until the switch and sends plain collectives to NCCL when
 * there is no ring, whatever each rank's step. */
#include "tt_cunit.h"
#include "tt_nccl_plan.h"
#include "tt_status.h"

#include <stdint.h>

static void nccl_plan_sorts_a_copy_and_maps_ranks(void) {
    const int ex[3] = {5, 1, 3};
    int sorted[3], nr = -1, nw = -1;
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(4, 8, ex, 3, sorted, &nr, &nw), TT_OK);
    CU_ASSERT(sorted[0] == 1 && sorted[1] == 3 && sorted[2] == 5);
    CU_ASSERT(ex[0] == 5 && ex[1] == 1 && ex[2] == 3); /* untouched */
    CU_ASSERT_EQUAL(nr, 2);                            /* 1 and 3 were below */
    CU_ASSERT_EQUAL(nw, 5);
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 8, ex, 3, sorted, &nr, &nw), TT_OK);
    CU_ASSERT_EQUAL(nr, 0);
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(7, 8, ex, 3, sorted, &nr, &nw), TT_OK);
    CU_ASSERT_EQUAL(nr, 4);
}

static void nccl_plan_refuses_excluded_caller_and_bad_lists(void) {
    int sorted[4], nr, nw;
    const int ex[2] = {2, 0};
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(2, 4, ex, 2, sorted, &nr, &nw), TT_EMEMBERSHIP);
    const int dup[2] = {1, 1};
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 4, dup, 2, sorted, &nr, &nw), TT_EINVAL);
    const int out[1] = {4};
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 4, out, 1, sorted, &nr, &nw), TT_EINVAL);
    const int neg[1] = {-1};
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 4, neg, 1, sorted, &nr, &nw), TT_EINVAL);
    const int all[3] = {1, 2, 3};
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 3, all, 3, sorted, &nr, &nw), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_nccl_shrink_plan(0, 4, ex, 0, sorted, &nr, &nw), TT_EINVAL);
}

/* The trainer's layers in backward order: the rest is what lies between
 * and around the parts, in buffer order. */
static void nccl_plan_rest_covers_what_parts_left(void) {
    tt_coll_span_t parts[3] = {{90, 10}, {40, 20}, {0, 0}}, rest[4];
    int n = -1;
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(parts, 3, 100, rest, &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT(rest[0].off == 0 && rest[0].count == 40);
    CU_ASSERT(rest[1].off == 60 && rest[1].count == 30);
    tt_coll_span_t whole[3] = {{60, 40}, {0, 10}, {10, 50}};
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(whole, 3, 100, rest, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(NULL, 0, 7, rest, &n), 0); /* no parts: all of it */
    CU_ASSERT(n == 1 && rest[0].off == 0 && rest[0].count == 7);
    CU_ASSERT(parts[0].off == 90 && parts[1].off == 40); /* the caller's order is kept */
}

static void nccl_plan_rest_refuses_overlap_and_overrun(void) {
    tt_coll_span_t rest[3];
    int n = -1;
    tt_coll_span_t overlap[2] = {{0, 50}, {49, 10}};
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(overlap, 2, 100, rest, &n), TT_EINVAL);
    CU_ASSERT_EQUAL(n, 0);
    tt_coll_span_t twice[2] = {{10, 5}, {10, 5}};
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(twice, 2, 100, rest, &n), TT_EINVAL);
    tt_coll_span_t past[1] = {{95, 6}};
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(past, 1, 100, rest, &n), TT_EINVAL);
    tt_coll_span_t wrap[1] = {{10, SIZE_MAX}};
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(wrap, 1, 100, rest, &n), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(past, -1, 100, rest, &n), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_nccl_rest_plan(past, TT_COLL_EARLY_MAX + 1, 100, rest, &n), TT_EINVAL);
}

static void nccl_plan_route_with_a_ring(void) {
    CU_ASSERT_EQUAL(tt_nccl_ps_route(-1, 10, 1, 1), TT_NCCL_VIA_RING);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(3, 10, 0, 1), TT_NCCL_VIA_SHARDS);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(3, 10, 1, 1), TT_NCCL_VIA_RING);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(9, 10, 1, 1), TT_NCCL_VIA_RING);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(10, 10, 0, 1), TT_NCCL_VIA_NCCL);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(10, 10, 1, 1), TT_NCCL_VIA_NCCL);
}

/* Members at different steps (a joiner has none) route alike: without a
 * ring, plain collectives take NCCL at any step; gradients keep the
 * announced switch. */
static void nccl_plan_route_without_a_ring(void) {
    const int64_t steps[] = {-1, 0, 3, 9};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        CU_ASSERT_EQUAL(tt_nccl_ps_route(steps[i], 10, 1, 0), TT_NCCL_VIA_NCCL);
        CU_ASSERT_EQUAL(tt_nccl_ps_route(steps[i], 10, 0, 0), TT_NCCL_VIA_SHARDS);
    }
    CU_ASSERT_EQUAL(tt_nccl_ps_route(10, 10, 0, 0), TT_NCCL_VIA_NCCL);
    CU_ASSERT_EQUAL(tt_nccl_ps_route(11, 10, 1, 0), TT_NCCL_VIA_NCCL);
}

static const tt_cunit_test_t tests[] = {
    {"nccl_plan_route_with_a_ring", nccl_plan_route_with_a_ring},
    {"nccl_plan_route_without_a_ring", nccl_plan_route_without_a_ring},
    {"nccl_plan_rest_covers_what_parts_left", nccl_plan_rest_covers_what_parts_left},
    {"nccl_plan_rest_refuses_overlap_and_overrun", nccl_plan_rest_refuses_overlap_and_overrun},
    {"nccl_plan_sorts_a_copy_and_maps_ranks", nccl_plan_sorts_a_copy_and_maps_ranks},
    {"nccl_plan_refuses_excluded_caller_and_bad_lists",
     nccl_plan_refuses_excluded_caller_and_bad_lists},
    {NULL, NULL},
};

TT_CUNIT_MAIN("nccl_plan", tests)
