/* Unit tests of tt_coll: backend names, the candidate order of `auto`, the
 * ring's endpoint requirement, the stubs' errors and the ring adapter on a
 * one-rank world (no sockets). */
#include "tt_coll.h"
#include "tt_coll_nccl.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

static void coll_parse_kinds(void) {
    tt_coll_kind_t k = TT_COLL_RING;
    CU_ASSERT_EQUAL(tt_coll_parse_kind("auto", &k), TT_OK);
    CU_ASSERT_EQUAL(k, TT_COLL_AUTO);
    CU_ASSERT_EQUAL(tt_coll_parse_kind("ps", &k), TT_OK);
    CU_ASSERT_EQUAL(k, TT_COLL_PS);
    CU_ASSERT_EQUAL(tt_coll_parse_kind("nccl", &k), TT_OK);
    CU_ASSERT_EQUAL(k, TT_COLL_NCCL);
    CU_ASSERT_EQUAL(tt_coll_parse_kind("ring", &k), TT_OK);
    CU_ASSERT_EQUAL(k, TT_COLL_RING);
    CU_ASSERT_EQUAL(tt_coll_parse_kind("Ring", &k), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_coll_parse_kind("", &k), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_coll_parse_kind(NULL, &k), TT_EINVAL);
    CU_ASSERT_STRING_EQUAL(tt_coll_kind_name(TT_COLL_PS), "ps");
    CU_ASSERT_STRING_EQUAL(tt_coll_ops(TT_COLL_RING)->name, "ring");
    CU_ASSERT_PTR_NULL(tt_coll_ops(TT_COLL_AUTO));
}

static void coll_auto_prefers_ring_then_ps(void) {
    tt_coll_kind_t out[3];
    size_t n = 0;
    tt_coll_candidates(TT_COLL_AUTO, 4, 1, out, &n);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(out[0], TT_COLL_RING);
    CU_ASSERT_EQUAL(out[1], TT_COLL_PS);
    tt_coll_candidates(TT_COLL_AUTO, 4, 0, out, &n); /* no endpoints: skip the ring */
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(out[0], TT_COLL_PS);
    tt_coll_candidates(TT_COLL_AUTO, 1, 0, out, &n); /* a single rank needs none */
    CU_ASSERT_EQUAL(out[0], TT_COLL_RING);
    tt_coll_candidates(TT_COLL_NCCL, 4, 1, out, &n); /* explicit: only that one */
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(out[0], TT_COLL_NCCL);
}

/* Every rank decides from the whole list, so ranks 2 and 3, whose own
 * neighbourhood is complete, skip the ring as ranks 0 and 1 must. */
static void coll_ring_needs_every_endpoint(void) {
    const char *eps[4] = {"tcp://a:1", "", "tcp://c:3", "tcp://d:4"};
    CU_ASSERT_EQUAL(tt_coll_ring_endpoint_missing(eps, 4), 1);
    const char *all[4] = {"tcp://a:1", "tcp://b:2", "tcp://c:3", "tcp://d:4"};
    CU_ASSERT_EQUAL(tt_coll_ring_endpoint_missing(all, 4), -1);
    const char *last[3] = {"tcp://a:1", "tcp://b:2", NULL};
    CU_ASSERT_EQUAL(tt_coll_ring_endpoint_missing(last, 3), 2);
    CU_ASSERT_EQUAL(tt_coll_ring_endpoint_missing(NULL, 1), -1);
    CU_ASSERT_EQUAL(tt_coll_ring_endpoint_missing(NULL, 2), 0);
    for (int rank = 0; rank < 4; rank++) {
        tt_coll_cfg_t cfg = {.rank = rank, .world = 4, .generation = 2, .endpoints = eps};
        const tt_coll_ops_t *ops = NULL;
        void *inst = NULL;
        char err[512];
        CU_ASSERT_EQUAL(tt_coll_open(TT_COLL_RING, &cfg, &ops, &inst, err, sizeof(err)), TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 1 advertised no endpoint"));
        CU_ASSERT_EQUAL(tt_coll_open(TT_COLL_AUTO, &cfg, &ops, &inst, err, sizeof(err)), TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "ring skipped: rank 1"));
    }
}

static void coll_stubs_say_why(void) {
    tt_coll_cfg_t cfg = {.rank = 0, .world = 1, .generation = 1};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    char err[512];
    int rc = tt_coll_open(TT_COLL_NCCL, &cfg, &ops, &inst, err, sizeof(err));
    if (!tt_coll_nccl_compiled()) {
        CU_ASSERT_EQUAL(rc, TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "built without NCCL"));
        CU_ASSERT_PTR_NULL(inst);
    } else if (rc != TT_OK) { /* NCCL built, no GPU here: it says so */
        CU_ASSERT_EQUAL(rc, TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "no CUDA device"));
        CU_ASSERT_PTR_NULL(inst);
    } else { /* a GPU: tests/gpu/gpu_nccl_one_rank covers the backend */
        ops->destroy(&inst);
    }
    CU_ASSERT_EQUAL(tt_coll_open(TT_COLL_PS, &cfg, &ops, &inst, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ps:"));
}

static void coll_auto_without_endpoints_explains_both(void) {
    const char *eps[2] = {"", ""};
    tt_coll_cfg_t cfg = {.rank = 0, .world = 2, .generation = 3, .endpoints = eps};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    char err[512];
    CU_ASSERT_EQUAL(tt_coll_open(TT_COLL_AUTO, &cfg, &ops, &inst, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ring skipped"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ps:"));
    /* asking for the ring explicitly names the missing endpoint */
    CU_ASSERT_EQUAL(tt_coll_open(TT_COLL_RING, &cfg, &ops, &inst, err, sizeof(err)), TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "TETHER_ENDPOINT"));
}

static void coll_ring_single_rank_and_abort(void) {
    tt_coll_cfg_t cfg = {.rank = 0, .world = 1, .generation = 7};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_coll_open(TT_COLL_AUTO, &cfg, &ops, &inst, NULL, 0), TT_OK);
    CU_ASSERT_STRING_EQUAL(ops->name, "ring");
    double v[3] = {1.5, -2.0, 3.25};
    CU_ASSERT_EQUAL(ops->allreduce(inst, v, 3, TT_DT_FLOAT64, TT_RED_SUM), TT_OK);
    CU_ASSERT_DOUBLE_EQUAL(v[1], -2.0, 0.0);
    CU_ASSERT_EQUAL(ops->broadcast(inst, v, 3, TT_DT_FLOAT64, 0), TT_OK);
    CU_ASSERT_EQUAL(ops->barrier(inst), TT_OK);
    CU_ASSERT_EQUAL(ops->broadcast(inst, v, 3, TT_DT_FLOAT64, 1), TT_EINVAL); /* no rank 1 */
    ops->abort(inst);
    CU_ASSERT_EQUAL(ops->barrier(inst), TT_ECLOSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ops->last_error(inst), "aborted"));
    char *dump = ops->dump(inst);
    CU_ASSERT_PTR_NOT_NULL(dump);
    CU_ASSERT_PTR_NOT_NULL(dump ? strstr(dump, "allreduce") : NULL);
    free(dump);
    ops->destroy(&inst);
    CU_ASSERT_PTR_NULL(inst);
    ops->destroy(&inst); /* accepts NULL */
}

/* A generation announced with a shard-server start (ps_until_step) takes
 * the "nccl+ps" row when NCCL is asked for and built; without a GPU that
 * row says so before asking any shard server. The row's run is covered
 * only on a GPU (docs/gpu.md says what has run). */
static void coll_nccl_generation_after_regroup_starts_on_shards(void) {
    const char *eps[2] = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"};
    const size_t counts[1] = {100};
    tt_coll_cfg_t cfg = {.rank = 0,
                         .world = 2,
                         .generation = 5,
                         .endpoints = eps,
                         .ps_until_step = 40,
                         .tensor_counts = counts,
                         .ntensors = 1};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    char err[512] = "";
    int rc = tt_coll_open(TT_COLL_NCCL, &cfg, &ops, &inst, err, sizeof(err));
    if (!tt_coll_nccl_compiled()) {
        CU_ASSERT_PTR_NULL(tt_coll_nccl_ps_ops());
        CU_ASSERT_EQUAL(rc, TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "built without NCCL"));
        return;
    }
    const tt_coll_ops_t *fb = tt_coll_nccl_ps_ops();
    CU_ASSERT_PTR_NOT_NULL_FATAL(fb);
    CU_ASSERT_STRING_EQUAL(fb->name, "nccl+ps");
    CU_ASSERT_PTR_EQUAL(tt_coll_row(TT_COLL_NCCL, &cfg), fb);
    /* no gradients: nothing for the shards to take over */
    tt_coll_cfg_t bare = cfg;
    bare.ntensors = 0;
    CU_ASSERT_PTR_EQUAL(tt_coll_row(TT_COLL_NCCL, &bare), tt_coll_nccl_ops());
    /* a first generation, or one rank: the plain row */
    bare = cfg;
    bare.ps_until_step = 0;
    CU_ASSERT_PTR_EQUAL(tt_coll_row(TT_COLL_NCCL, &bare), tt_coll_nccl_ops());
    bare = cfg;
    bare.world = 1;
    CU_ASSERT_PTR_EQUAL(tt_coll_row(TT_COLL_NCCL, &bare), tt_coll_nccl_ops());
    CU_ASSERT_STRING_EQUAL(tt_coll_row(TT_COLL_RING, &cfg)->name, "ring+ps");
    CU_ASSERT_PTR_EQUAL(tt_coll_row(TT_COLL_PS, &cfg), tt_coll_ops(TT_COLL_PS));
    /* both halves of the row: whole steps on the shards until step 40,
     * device steps staged or on NCCL */
    CU_ASSERT_PTR_NOT_NULL(fb->reduce_step);
    CU_ASSERT_PTR_NOT_NULL(fb->whole_step);
    CU_ASSERT_PTR_NOT_NULL(fb->reduce_step_device);
    CU_ASSERT_PTR_NOT_NULL(fb->reduce_part_device);
    CU_ASSERT_PTR_NOT_NULL(fb->state_io);
    CU_ASSERT_PTR_NOT_NULL(tt_coll_nccl_ops()->reduce_step_device);
    CU_ASSERT_PTR_NOT_NULL(tt_coll_nccl_ops()->reduce_part_device);
    CU_ASSERT_PTR_NULL(tt_coll_ops(TT_COLL_RING)->reduce_step_device);
    CU_ASSERT_PTR_NULL(tt_coll_ops(TT_COLL_PS)->reduce_step_device);
    CU_ASSERT_PTR_NULL(tt_coll_ops(TT_COLL_RING)->reduce_part_device);
    CU_ASSERT_PTR_NULL(tt_coll_ops(TT_COLL_PS)->reduce_part_device);
    /* No GPU: the row's first check. A GPU: its ps half has no
     * coordinator to ask (the plain nccl row would name the id relay). */
    CU_ASSERT_EQUAL(rc, TT_ENODEV);
    CU_ASSERT(strstr(err, "no CUDA device") != NULL || strstr(err, "ps: no coordinator") != NULL);
    CU_ASSERT_PTR_NULL(inst);
}

/* A generation announced as a shrink: only an NCCL row keeps a
 * communicator for it (a ring instance handed over is closed, nothing
 * comes back), and an NCCL rank that has none to shrink builds a fresh
 * one (here it gets as far as finding no device). Without NCCL the row is
 * the build's stub. */
static void coll_shrink_without_a_parent_builds_afresh(void) {
    const tt_coll_ops_t *ring = tt_coll_ops(TT_COLL_RING);
    tt_coll_cfg_t one = {.rank = 0, .world = 1, .generation = 3};
    void *inst = NULL;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(ring->create(&inst, &one, err, sizeof(err)), TT_OK);
    CU_ASSERT_FALSE(tt_coll_nccl_row(ring));
    CU_ASSERT_PTR_NULL(tt_coll_nccl_take_parent(ring, &inst));
    CU_ASSERT_PTR_NULL(inst);
    tt_coll_nccl_parent_free(NULL);
    tt_coll_shrink_t s = {.of = 3, .n = 1, .exclude = {1}};
    tt_coll_cfg_t next = {.rank = 0, .world = 1, .generation = 4, .shrink = &s};
    const tt_coll_ops_t *ops = NULL;
    int rc = tt_coll_open(TT_COLL_NCCL, &next, &ops, &inst, err, sizeof(err));
    CU_ASSERT_PTR_NULL(inst);
    if (!tt_coll_nccl_compiled()) {
        CU_ASSERT_EQUAL(rc, TT_ENODEV);
        return;
    }
    CU_ASSERT_TRUE(tt_coll_nccl_row(tt_coll_nccl_ops()));
    CU_ASSERT_TRUE(tt_coll_nccl_row(tt_coll_nccl_ps_ops()));
    CU_ASSERT_EQUAL(rc, TT_ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no CUDA device"));
}

static const tt_cunit_test_t tests[] = {
    {"coll_parse_kinds", coll_parse_kinds},
    {"coll_auto_prefers_ring_then_ps", coll_auto_prefers_ring_then_ps},
    {"coll_ring_needs_every_endpoint", coll_ring_needs_every_endpoint},
    {"coll_stubs_say_why", coll_stubs_say_why},
    {"coll_auto_without_endpoints_explains_both", coll_auto_without_endpoints_explains_both},
    {"coll_ring_single_rank_and_abort", coll_ring_single_rank_and_abort},
    {"coll_nccl_generation_after_regroup_starts_on_shards",
     coll_nccl_generation_after_regroup_starts_on_shards},
    {"coll_shrink_without_a_parent_builds_afresh", coll_shrink_without_a_parent_builds_afresh},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coll", tests)
