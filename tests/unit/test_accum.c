/* Unit tests of tt_accum (server/shard): admission rules (duplicates, stale
 * generation, wrong size, desync), completion, count normalisation, rank
 * order in deterministic mode, deadline expiry with the missing ranks, and
 * parameter upload/download. Time is an argument; nothing sleeps. */
#include "tt_accum.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <string.h>

#define N 5

static tt_accum_t *make(int deterministic, uint32_t timeout_ms) {
    tt_accum_opts_t o = {.elems = N, .deterministic = deterministic, .timeout_ms = timeout_ms};
    tt_accum_t *a = NULL;
    CU_ASSERT_EQUAL(tt_accum_create(&a, &o), TT_OK);
    return a;
}

static tt_accum_push_t push(uint64_t gen, uint64_t step, uint32_t rank, uint32_t world,
                            uint64_t examples) {
    tt_accum_push_t p = {.generation = gen,
                         .step = step,
                         .rank = rank,
                         .world = world,
                         .examples = examples,
                         .elems = N};
    return p;
}

/* Admit + add, as the shard daemon does. */
static int contribute(tt_accum_t *a, tt_accum_push_t p, const float *data, tt_accum_ticket_t *t) {
    int rc = tt_accum_admit(a, &p, 1000, t, NULL, 0);
    if (rc == TT_OK)
        tt_accum_add(a, p.rank, data, t->first);
    return rc;
}

static void accum_completion_and_count_normalisation(void) {
    tt_accum_t *a = make(0, 0);
    float g0[N] = {1, 2, 3, 4, 5}, g1[N] = {10, 20, 30, 40, 50}, g2[N] = {-1, 0, 1, 0, 7};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 7, 0, 3, 2), g0, &t), TT_OK);
    CU_ASSERT(t.first && !t.complete);
    CU_ASSERT_EQUAL(contribute(a, push(1, 7, 2, 3, 5), g2, &t), TT_OK);
    CU_ASSERT(!t.first && !t.complete);
    CU_ASSERT_EQUAL(contribute(a, push(1, 7, 1, 3, 3), g1, &t), TT_OK);
    CU_ASSERT(t.complete);
    float out[N];
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 10);
    for (int i = 0; i < N; i++)
        CU_ASSERT_DOUBLE_EQUAL(out[i], (g0[i] + g1[i] + g2[i]) / 10.0, 1e-6);
    tt_accum_mark_done(a);
    uint64_t step = 0;
    CU_ASSERT(tt_accum_done_step(a, &step) && step == 7);
    CU_ASSERT_EQUAL(tt_accum_done_total(a), 10);
    CU_ASSERT(!tt_accum_active(a));
    tt_accum_destroy(&a);
    CU_ASSERT_PTR_NULL(a);
}

/* A restarted shard abandons an open round; the same step is then admitted
 * afresh (its first push again), with no trace of the dropped sums. */
static void accum_abandon_then_same_step_starts_over(void) {
    tt_accum_t *a = make(1, 0);
    float g0[N] = {1, 2, 3, 4, 5}, g1[N] = {10, 20, 30, 40, 50};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 3, 0, 2, 2), g0, &t), TT_OK);
    CU_ASSERT(tt_accum_active(a));
    CU_ASSERT_EQUAL(tt_accum_abandon(a), 1);
    CU_ASSERT(!tt_accum_active(a));
    CU_ASSERT_EQUAL(tt_accum_abandon(a), 0); /* nothing open any more */
    CU_ASSERT_EQUAL(contribute(a, push(1, 3, 1, 2, 3), g1, &t), TT_OK);
    CU_ASSERT(t.first && !t.complete);
    CU_ASSERT_EQUAL(contribute(a, push(1, 3, 0, 2, 2), g0, &t), TT_OK);
    CU_ASSERT(t.complete);
    float out[N];
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 5);
    for (int i = 0; i < N; i++)
        CU_ASSERT_DOUBLE_EQUAL(out[i], (g0[i] + g1[i]) / 5.0, 1e-6);
    tt_accum_destroy(&a);
}

static void accum_rejects_duplicate_contributor(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {1, 1, 1, 1, 1};
    tt_accum_ticket_t t;
    char err[128] = "";
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 1, 2, 4), g, &t), TT_OK);
    tt_accum_push_t dup = push(1, 0, 1, 2, 4);
    CU_ASSERT_EQUAL(tt_accum_admit(a, &dup, 1000, &t, err, sizeof(err)), TT_EEXIST);
    CU_ASSERT(strstr(err, "rank 1 already contributed") != NULL);
    /* the duplicate changed nothing: one more rank completes with count 8 */
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, 2, 4), g, &t), TT_OK);
    CU_ASSERT(t.complete);
    float out[N];
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 8);
    CU_ASSERT_DOUBLE_EQUAL(out[0], 0.25, 1e-7);
    tt_accum_destroy(&a);
}

static void accum_rejects_stale_generation(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {0};
    tt_accum_ticket_t t;
    char err[128] = "";
    CU_ASSERT_EQUAL(contribute(a, push(5, 0, 0, 2, 1), g, &t), TT_OK);
    tt_accum_push_t old = push(4, 0, 1, 2, 1);
    CU_ASSERT_EQUAL(tt_accum_admit(a, &old, 1000, &t, err, sizeof(err)), TT_ESTALE);
    CU_ASSERT(strstr(err, "generation 4 is stale") != NULL);
    CU_ASSERT_EQUAL(tt_accum_missing(a, NULL, 0), 1); /* rank 1 still missing */
    tt_accum_destroy(&a);
}

static void accum_new_generation_drops_partial(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {9, 9, 9, 9, 9}, h[N] = {1, 2, 3, 4, 5};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 3, 0, 3, 1), g, &t), TT_OK);
    CU_ASSERT_EQUAL(contribute(a, push(1, 3, 1, 3, 1), g, &t), TT_OK);
    /* rank 2 died; generation 2 has world 2 and restarts step 3 */
    CU_ASSERT_EQUAL(contribute(a, push(2, 3, 0, 2, 1), h, &t), TT_OK);
    CU_ASSERT(t.dropped_gen && t.first);
    CU_ASSERT_EQUAL(contribute(a, push(2, 3, 1, 2, 1), h, &t), TT_OK);
    CU_ASSERT(t.complete);
    float out[N];
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 2);
    for (int i = 0; i < N; i++)
        CU_ASSERT_DOUBLE_EQUAL(out[i], h[i], 1e-7); /* no trace of the 9s */
    tt_accum_destroy(&a);
}

static void accum_rejects_wrong_size_and_desync(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {0};
    tt_accum_ticket_t t;
    char err[128] = "";
    tt_accum_push_t p = push(1, 0, 0, 2, 1);
    p.elems = N + 1;
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT(!tt_accum_active(a));
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, 2, 1), g, &t), TT_OK);
    p = push(1, 1, 1, 2, 1); /* another step while step 0 is open */
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, err, sizeof(err)), TT_EDESYNC);
    p = push(1, 0, 1, 3, 1); /* another world */
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, err, sizeof(err)), TT_EDESYNC);
    p = push(1, 0, 3, 2, 1); /* rank outside world */
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_accum_missing(a, NULL, 0), 1);
    tt_accum_destroy(&a);
}

static void accum_final_step_is_stale(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {1, 1, 1, 1, 1}, out[N];
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 4, 0, 1, 1), g, &t), TT_OK);
    CU_ASSERT(t.complete);
    tt_accum_finish(a, out);
    tt_accum_mark_done(a);
    tt_accum_push_t p = push(1, 4, 0, 1, 1);
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, NULL, 0), TT_ESTALE);
    p = push(1, 5, 0, 1, 1);
    CU_ASSERT_EQUAL(tt_accum_admit(a, &p, 1000, &t, NULL, 0), TT_OK);
    tt_accum_destroy(&a);
}

static void accum_deterministic_sums_in_rank_order(void) {
    /* 1e8 + 1 - 1e8 in float depends on the order: rank order gives
     * ((r0 + r1) + r2) = (1e8 + 1) - 1e8 = 0 in float32. */
    tt_accum_t *a = make(1, 0);
    float r0[N] = {1e8f, 1, 1, 1, 1}, r1[N] = {1, 1, 1, 1, 1}, r2[N] = {-1e8f, 1, 1, 1, 1};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 2, 3, 1), r2, &t), TT_OK);
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, 3, 1), r0, &t), TT_OK);
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 1, 3, 1), r1, &t), TT_OK);
    CU_ASSERT(t.complete);
    float out[N];
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 3);
    float expect = ((r0[0] + r1[0]) + r2[0]) / 3.0f;
    CU_ASSERT(memcmp(&out[0], &expect, sizeof(float)) == 0);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 1.0, 1e-7);
    CU_ASSERT(tt_accum_bytes(a) >= 3 * N * sizeof(float));
    tt_accum_mark_done(a);
    CU_ASSERT_EQUAL(tt_accum_bytes(a), 0);
    tt_accum_destroy(&a);
}

static void accum_zero_total_gives_zeros(void) {
    tt_accum_t *a = make(0, 0);
    float g[N] = {3, 3, 3, 3, 3}, out[N] = {7, 7, 7, 7, 7};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, 1, 0), g, &t), TT_OK);
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 0);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_EQUAL(out[4], 0.0f);
    tt_accum_destroy(&a);
}

static void accum_deadline_expiry_reports_missing_once(void) {
    tt_accum_t *a = make(0, 500);
    float g[N] = {0};
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(tt_accum_deadline(a), UINT64_MAX);
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 1, 4, 1), g, &t), TT_OK); /* at t=1000 */
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 3, 4, 1), g, &t), TT_OK);
    CU_ASSERT_EQUAL(tt_accum_deadline(a), 1500);
    CU_ASSERT_FALSE(tt_accum_take_expiry(a, 1499));
    CU_ASSERT_TRUE(tt_accum_take_expiry(a, 1500));
    CU_ASSERT_FALSE(tt_accum_take_expiry(a, 2000)); /* reported once */
    uint32_t miss[4];
    CU_ASSERT_EQUAL(tt_accum_missing(a, miss, 4), 2);
    CU_ASSERT_EQUAL(miss[0], 0);
    CU_ASSERT_EQUAL(miss[1], 2);
    /* it keeps waiting: a late rank still completes the round */
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, 4, 1), g, &t), TT_OK);
    CU_ASSERT_EQUAL(contribute(a, push(1, 0, 2, 4, 1), g, &t), TT_OK);
    CU_ASSERT(t.complete);
    CU_ASSERT_EQUAL(tt_accum_deadline(a), UINT64_MAX);
    tt_accum_destroy(&a);
}

static void accum_params_round_trip(void) {
    tt_accum_t *a = make(0, 0);
    float p[3] = {1, 2, 3}, out[N];
    uint64_t t = 0;
    /* aggregate mode holds no parameters until someone uploads them */
    CU_ASSERT_EQUAL(tt_accum_get(a, TT_ACCUM_PARAMS, 0, out, N, &t), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_PARAMS, 2, p, 3, 9), TT_OK);
    CU_ASSERT_EQUAL(tt_accum_get(a, TT_ACCUM_PARAMS, 0, out, N, &t), TT_OK);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_EQUAL(out[2], 1.0f);
    CU_ASSERT_EQUAL(out[4], 3.0f);
    CU_ASSERT_EQUAL(t, 9);
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_PARAMS, 3, p, 3, 0), TT_EINVAL); /* past the end */
    /* ...and the optimizer buffers a regroup moves through the shards */
    CU_ASSERT_EQUAL(tt_accum_get(a, TT_ACCUM_STATE1, 0, out, N, &t), TT_EINVAL); /* never set */
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_STATE2, 0, p, 3, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_accum_get(a, TT_ACCUM_STATE2, 0, out, N, &t), TT_OK);
    CU_ASSERT_EQUAL(out[1], 2.0f);
    CU_ASSERT_EQUAL(out[3], 0.0f);
    tt_accum_destroy(&a);
}

/* The fused last add + normalisation gives bitwise what two passes give,
 * also when the last contribution is the only one. */
static void accum_add_finish_matches_two_passes(void) {
    float g0[N] = {0.1f, -3.3f, 1e7f, 2.5f, 7.25f}, g1[N] = {0.7f, 1.1f, -1e7f, 1e-3f, 3.0f};
    float two[N], one[N];
    tt_accum_ticket_t t;
    for (int single = 0; single < 2; single++) {
        tt_accum_t *a = make(0, 0), *b = make(0, 0);
        uint32_t world = single ? 1 : 2;
        CU_ASSERT_EQUAL(contribute(a, push(1, 0, 0, world, 3), g0, &t), TT_OK);
        if (!single)
            CU_ASSERT_EQUAL(contribute(a, push(1, 0, 1, world, 4), g1, &t), TT_OK);
        CU_ASSERT_EQUAL(tt_accum_finish(a, two), single ? 3 : 7);
        tt_accum_push_t p0 = push(1, 0, 0, world, 3), p1 = push(1, 0, 1, world, 4);
        CU_ASSERT_EQUAL(tt_accum_admit(b, &p0, 0, &t, NULL, 0), TT_OK);
        if (!single) {
            tt_accum_add(b, 0, g0, t.first);
            CU_ASSERT_EQUAL(tt_accum_admit(b, &p1, 0, &t, NULL, 0), TT_OK);
        }
        CU_ASSERT(t.complete);
        CU_ASSERT_EQUAL(tt_accum_add_finish(b, single ? 0 : 1, single ? g0 : g1, t.first, one),
                        single ? 3 : 7);
        CU_ASSERT(memcmp(one, two, sizeof(one)) == 0);
        tt_accum_destroy(&a);
        tt_accum_destroy(&b);
    }
}

static const tt_cunit_test_t tests[] = {
    {"accum_completion_and_count_normalisation", accum_completion_and_count_normalisation},
    {"accum_abandon_then_same_step_starts_over", accum_abandon_then_same_step_starts_over},
    {"accum_rejects_duplicate_contributor", accum_rejects_duplicate_contributor},
    {"accum_rejects_stale_generation", accum_rejects_stale_generation},
    {"accum_new_generation_drops_partial", accum_new_generation_drops_partial},
    {"accum_rejects_wrong_size_and_desync", accum_rejects_wrong_size_and_desync},
    {"accum_final_step_is_stale", accum_final_step_is_stale},
    {"accum_deterministic_sums_in_rank_order", accum_deterministic_sums_in_rank_order},
    {"accum_zero_total_gives_zeros", accum_zero_total_gives_zeros},
    {"accum_deadline_expiry_reports_missing_once", accum_deadline_expiry_reports_missing_once},
    {"accum_params_round_trip", accum_params_round_trip},
    {"accum_add_finish_matches_two_passes", accum_add_finish_matches_two_passes},
    {NULL, NULL},
};

TT_CUNIT_MAIN("accum", tests)
