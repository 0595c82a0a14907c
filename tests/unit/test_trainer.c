/* Unit tests of tt_trainer on a small synthetic data set (never the real
 * one): per-rank gradient sums of an uneven 3-way split add up to the
 * single-rank sum with the right counts; micro-batching does not change an
 * update; a learnable task is learned; the epoch ends with TT_ECLOSED; an
 * epoch's rate counts what this process trained, on one clock across a
 * failed step. */
#include "train_testlib.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEX 200
#define NIN 6

static float xs[NEX * NIN];
static uint8_t ys[NEX];

static tt_idx_set_t make_set(void) {
    return tt_test_argmax_set(xs, ys, NEX, NIN, 12345);
}

static tt_trainer_opts_t base_opts(uint64_t batch, uint64_t micro) {
    tt_trainer_opts_t o = {.nlayers = 2,
                           .dims = {NIN, 16, 10},
                           .epochs = 30,
                           .batch = batch,
                           .micro = micro,
                           .seed = 5};
    o.opt = TT_OPT_SGD;
    o.sgd = (tt_optim_sgd_hp_t){0.9f, 0.0f, 1};
    o.sched = (tt_lr_sched_t){TT_LR_CONST, 0.1, 0.0, 0, 0};
    return o;
}

/* A fake collective that plays one rank of `world` and records what
 * finish() was handed, then aborts the step (no update). */
typedef struct {
    int rank, world;
    double count;
    float sum[512];
} fake_t;

static int fake_membership(void *ctx, int *rank, int *world, uint64_t *gen) {
    fake_t *f = ctx;
    *rank = f->rank;
    *world = f->world;
    *gen = 7;
    return TT_OK;
}

static int fake_finish(void *ctx, float *g, size_t n, double local, double *global) {
    fake_t *f = ctx;
    for (size_t i = 0; i < n && i < 512; i++)
        f->sum[i] += g[i];
    f->count += local;
    return TT_EAGAIN;
}

static int fake_reduce(void *ctx, double *v, size_t n) {
    return TT_OK;
}

static void trainer_uneven_slices_sum_to_one_rank(void) {
    tt_idx_set_t set = make_set();
    tt_trainer_opts_t o = base_opts(37, 0);
    fake_t *one = calloc(1, sizeof(*one)), *three = calloc(1, sizeof(*three));
    one->world = 1;
    three->world = 3;
    for (int r = -1; r < 3; r++) {
        fake_t *f = r < 0 ? one : three;
        f->rank = r < 0 ? 0 : r;
        tt_train_coll_t c = {.ctx = f,
                             .name = "fake",
                             .membership = fake_membership,
                             .finish = fake_finish,
                             .reduce_sum = fake_reduce};
        tt_trainer_t *t = NULL;
        CU_ASSERT_FATAL(tt_trainer_create(&t, &o, &set, &set, &c, NULL, 0) == 0);
        double before = f->count;
        CU_ASSERT_EQUAL(tt_trainer_step(t, NULL), TT_EAGAIN);
        if (r >= 0) /* 37 over 3 ranks: 13, 12, 12 */
            CU_ASSERT_DOUBLE_EQUAL(f->count - before, r == 0 ? 13 : 12, 0);
        tt_trainer_destroy(&t);
        CU_ASSERT_PTR_NULL(t);
    }
    CU_ASSERT_DOUBLE_EQUAL(one->count, 37, 0);
    CU_ASSERT_DOUBLE_EQUAL(three->count, 37, 0);
    double mx = 0;
    for (int i = 0; i < 16 * NIN + 16 + 160 + 10; i++) {
        CU_ASSERT_DOUBLE_EQUAL(three->sum[i], one->sum[i], 1e-4);
        mx = fabs(one->sum[i]) > mx ? fabs(one->sum[i]) : mx;
    }
    CU_ASSERT(mx > 1e-2);
    free(one);
    free(three);
}

static void trainer_micro_batching_keeps_update(void) {
    tt_idx_set_t set = make_set();
    tt_train_coll_t c;
    tt_train_coll_local(&c);
    tt_trainer_opts_t oa = base_opts(40, 0), ob = base_opts(40, 7);
    tt_trainer_t *a = NULL, *b = NULL;
    CU_ASSERT_FATAL(tt_trainer_create(&a, &oa, &set, &set, &c, NULL, 0) == 0);
    CU_ASSERT_FATAL(tt_trainer_create(&b, &ob, &set, &set, &c, NULL, 0) == 0);
    for (int s = 0; s < 3; s++) {
        CU_ASSERT(tt_trainer_step(a, NULL) == 0);
        CU_ASSERT(tt_trainer_step(b, NULL) == 0);
    }
    tt_mlp_t *ma = tt_trainer_model(a), *mb = tt_trainer_model(b);
    float *pa = tt_mlp_params(ma), *pb = tt_mlp_params(mb);
    for (size_t i = 0; i < tt_mlp_param_count(ma); i++)
        CU_ASSERT_DOUBLE_EQUAL(pa[i], pb[i], 1e-5);
    CU_ASSERT_EQUAL(tt_trainer_global_step(a), 3);
    tt_trainer_destroy(&a);
    tt_trainer_destroy(&b);
}

/* A fake shard server: it keeps the parameters and the momentum and
 * applies the optimizer to the gradient sums it is handed, as the shards
 * do with the update on the shards. */
typedef struct {
    float p[512], mom[512], lr;
    int lr_calls;
    tt_optim_sgd_hp_t hp;
} fake_shard_t;

static int shard_membership(void *ctx, int *rank, int *world, uint64_t *gen) {
    (void)ctx;
    *rank = 0;
    *world = 1;
    *gen = 1;
    return TT_OK;
}

static int shard_set_lr(void *ctx, float lr) {
    fake_shard_t *s = ctx;
    s->lr = lr;
    s->lr_calls++;
    return TT_OK;
}

static int shard_finish(void *ctx, float *g, size_t n, double local, double *global) {
    fake_shard_t *s = ctx;
    tt_optim_sgd_step(s->p, g, s->mom, n, s->lr, (float)(1.0 / local), &s->hp);
    memcpy(g, s->p, n * sizeof(float));
    *global = local;
    return TT_OK;
}

/* The update on the shards: the trainer sends each step's learning rate
 * (the schedule's), applies nothing itself and takes the parameters the
 * shards computed: bitwise the parameters of a local update. */
static void trainer_update_on_shards_matches_local(void) {
    tt_idx_set_t set = make_set();
    tt_train_coll_t lc;
    tt_train_coll_local(&lc);
    tt_trainer_opts_t o = base_opts(40, 0);
    o.sched = (tt_lr_sched_t){TT_LR_COSINE, 0.1, 0.01, 2, 0};
    fake_shard_t *s = calloc(1, sizeof(*s));
    s->hp = o.sgd;
    tt_train_coll_t sc = {.ctx = s,
                          .name = "shards",
                          .membership = shard_membership,
                          .finish = shard_finish,
                          .reduce_sum = fake_reduce,
                          .updates_params = 1,
                          .set_lr = shard_set_lr};
    tt_trainer_t *a = NULL, *b = NULL;
    CU_ASSERT_FATAL(tt_trainer_create(&a, &o, &set, &set, &lc, NULL, 0) == 0);
    CU_ASSERT_FATAL(tt_trainer_create(&b, &o, &set, &set, &sc, NULL, 0) == 0);
    tt_mlp_t *ma = tt_trainer_model(a), *mb = tt_trainer_model(b);
    size_t n = tt_mlp_param_count(mb);
    CU_ASSERT_FATAL(n <= 512);
    memcpy(s->p, tt_mlp_params(mb), n * sizeof(float)); /* the state put before step 0 */
    tt_lr_sched_t ref = o.sched;
    ref.total_steps = o.epochs * 5; /* 200 examples, batch 40 */
    for (int k = 0; k < 5; k++) {
        CU_ASSERT(tt_trainer_step(a, NULL) == 0);
        CU_ASSERT(tt_trainer_step(b, NULL) == 0);
        CU_ASSERT_EQUAL(s->lr, (float)tt_lr_at(&ref, (uint64_t)k));
    }
    CU_ASSERT_EQUAL(s->lr_calls, 5);
    CU_ASSERT(s->lr > 0.0f && s->lr < 0.1f); /* past the warmup, on the cosine */
    CU_ASSERT(memcmp(tt_mlp_params(ma), tt_mlp_params(mb), n * sizeof(float)) == 0);
    tt_trainer_destroy(&a);
    tt_trainer_destroy(&b);
    free(s);
}

static void trainer_learns_and_closes_epoch(void) {
    tt_idx_set_t set = make_set();
    tt_train_coll_t c;
    tt_train_coll_local(&c);
    tt_trainer_opts_t o = base_opts(20, 0);
    tt_trainer_t *t = NULL;
    CU_ASSERT_FATAL(tt_trainer_create(&t, &o, &set, &set, &c, NULL, 0) == 0);
    CU_ASSERT_EQUAL(tt_trainer_steps_per_epoch(t), 10);
    double loss0, acc0;
    CU_ASSERT(tt_trainer_evaluate(t, &loss0, &acc0) == 0);
    tt_epoch_stats_t st;
    for (int e = 0; e < 30; e++)
        CU_ASSERT_FATAL(tt_trainer_run_epoch(t, NULL, NULL, &st) == 0);
    CU_ASSERT_EQUAL(st.epoch, 30);
    CU_ASSERT_EQUAL(st.step, 300);
    CU_ASSERT_EQUAL(st.world_size, 1);
    CU_ASSERT(st.test_loss < 0.5 * loss0);
    CU_ASSERT(st.test_accuracy > 0.8);
    CU_ASSERT(tt_trainer_step(t, NULL) == TT_ECLOSED);
    tt_trainer_destroy(&t);
}

/* What the step callback saw: the last report's figures. */
typedef struct {
    int n;
    double elapsed, rate_examples; /* elapsed_s, examples_per_s * elapsed_s */
    uint64_t examples, step;
} seen_t;

static void on_report(void *ctx, const tt_step_report_t *r) {
    seen_t *s = ctx;
    CU_ASSERT(r->elapsed_s >= s->elapsed); /* one clock, never restarted */
    s->n++;
    s->elapsed = r->elapsed_s;
    s->rate_examples = r->examples_per_s * r->elapsed_s;
    s->examples = r->examples;
    s->step = r->step;
}

/* A run resumed mid-epoch (a checkpoint, a joiner) reports the rate of
 * what it trained, not of the restored part: it once divided the whole
 * epoch's examples by the time since the resume. */
static void trainer_rate_counts_what_this_process_trained(void) {
    tt_idx_set_t set = make_set();
    tt_train_coll_t c;
    tt_train_coll_local(&c);
    tt_trainer_opts_t o = base_opts(20, 0);
    o.max_steps = 4;
    tt_trainer_t *a = NULL, *b = NULL;
    CU_ASSERT_FATAL(tt_trainer_create(&a, &o, &set, &set, &c, NULL, 0) == 0);
    tt_epoch_stats_t st;
    CU_ASSERT_FATAL(tt_trainer_run_epoch(a, NULL, NULL, &st) == 0);
    CU_ASSERT_DOUBLE_EQUAL(st.examples, 80, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.examples_per_s * st.wall_s, 80, 1e-6);
    tt_trainer_state_t s;
    tt_trainer_get_state(a, &s);
    o.max_steps = 0;
    CU_ASSERT_FATAL(tt_trainer_create(&b, &o, &set, &set, &c, NULL, 0) == 0);
    CU_ASSERT_FATAL(tt_trainer_set_state(b, &s) == 0);
    seen_t seen = {0};
    CU_ASSERT_FATAL(tt_trainer_run_epoch(b, on_report, &seen, &st) == 0);
    CU_ASSERT_EQUAL(seen.n, 6);
    CU_ASSERT_EQUAL(seen.examples, 200);
    CU_ASSERT_DOUBLE_EQUAL(seen.rate_examples, 120, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(st.examples, 200, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.examples_per_s * st.wall_s, 120, 1e-6);
    CU_ASSERT(st.wall_s >= seen.elapsed);
    /* The next epoch starts its own clock and counts all of it. */
    CU_ASSERT_FATAL(tt_trainer_run_epoch(b, NULL, NULL, &st) == 0);
    CU_ASSERT_DOUBLE_EQUAL(st.examples_per_s * st.wall_s, 200, 1e-6);
    tt_trainer_destroy(&a);
    tt_trainer_destroy(&b);
}

/* The local collective, failing the step whose finish() is call `fail_at`
 * (a membership change, as a dead peer makes it). */
typedef struct {
    int calls, fail_at;
} flaky_t;

static int flaky_finish(void *ctx, float *g, size_t n, double local, double *global) {
    flaky_t *f = ctx;
    (void)g, (void)n;
    if (++f->calls == f->fail_at)
        return TT_EMEMBERSHIP;
    *global = local;
    return TT_OK;
}

/* A failover returns from tt_trainer_run_epoch mid-epoch and calls it
 * again: the epoch's clock runs on through the regroup (its time is the
 * epoch's), and the rate covers the whole epoch. It once restarted, so
 * the epoch looked as long as its part after the regroup. */
static void trainer_clock_runs_through_a_failed_step(void) {
    tt_idx_set_t set = make_set();
    flaky_t f = {.fail_at = 4};
    tt_train_coll_t c;
    tt_train_coll_local(&c);
    c.ctx = &f;
    c.finish = flaky_finish;
    tt_trainer_opts_t o = base_opts(20, 0);
    tt_trainer_t *t = NULL;
    CU_ASSERT_FATAL(tt_trainer_create(&t, &o, &set, &set, &c, NULL, 0) == 0);
    seen_t seen = {0};
    tt_epoch_stats_t st;
    CU_ASSERT_EQUAL(tt_trainer_run_epoch(t, on_report, &seen, &st), TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(seen.n, 3);
    tt_trainer_state_t s; /* the agreement hands the state back */
    tt_trainer_get_state(t, &s);
    CU_ASSERT_FATAL(tt_trainer_set_state(t, &s) == 0);
    double before = seen.elapsed;
    CU_ASSERT_FATAL(tt_trainer_run_epoch(t, on_report, &seen, &st) == 0);
    CU_ASSERT_EQUAL(seen.n, 10);
    CU_ASSERT(seen.elapsed >= before);
    CU_ASSERT(st.wall_s >= seen.elapsed);
    CU_ASSERT_DOUBLE_EQUAL(st.examples, 200, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.examples_per_s * st.wall_s, 200, 1e-6);
    tt_trainer_destroy(&t);
}

static void trainer_rejects_mismatched_layers(void) {
    tt_idx_set_t set = make_set();
    tt_train_coll_t c;
    tt_train_coll_local(&c);
    tt_trainer_opts_t o = base_opts(20, 0);
    o.dims[0] = 784;
    tt_trainer_t *t = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_trainer_create(&t, &o, &set, &set, &c, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT(strstr(err, "6 inputs") != NULL);
    CU_ASSERT_PTR_NULL(t);
}

static const tt_cunit_test_t tests[] = {
    {"trainer_uneven_slices_sum_to_one_rank", trainer_uneven_slices_sum_to_one_rank},
    {"trainer_micro_batching_keeps_update", trainer_micro_batching_keeps_update},
    {"trainer_update_on_shards_matches_local", trainer_update_on_shards_matches_local},
    {"trainer_learns_and_closes_epoch", trainer_learns_and_closes_epoch},
    {"trainer_rate_counts_what_this_process_trained",
     trainer_rate_counts_what_this_process_trained},
    {"trainer_clock_runs_through_a_failed_step", trainer_clock_runs_through_a_failed_step},
    {"trainer_rejects_mismatched_layers", trainer_rejects_mismatched_layers},
    {NULL, NULL},
};

TT_CUNIT_MAIN("trainer", tests)
