/* Unit tests of a shard chunk in optimizer mode (tt_accum with tt_optim):
 * over many steps with several ranks and unequal counts, the parameters it
 * returns follow a double-precision reference of SGD (momentum, Nesterov,
 * weight decay) and AdamW (bias correction, decoupled weight decay), and a
 * deterministic chunk is bitwise repeatable. */
#include "tt_accum.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <math.h>
#include <string.h>

#define N     257
#define RANKS 3
#define STEPS 20

/* Deterministic pseudo-random gradients, different per (step, rank, i). */
static float grad(int step, int rank, int i) {
    uint32_t x = (uint32_t)(step * 7919 + rank * 104729 + i * 31 + 17);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return (float)((double)(x % 20001) / 10000.0 - 1.0);
}

static const uint64_t counts[RANKS] = {5, 3, 8};

typedef struct {
    double p[N], m[N], v[N];
} ref_t;

static void ref_sgd(ref_t *r, const double *g, double lr, const tt_optim_sgd_hp_t *hp) {
    for (int i = 0; i < N; i++) {
        double gi = g[i] + hp->weight_decay * r->p[i];
        r->m[i] = hp->momentum * r->m[i] + gi;
        double d = hp->nesterov ? gi + hp->momentum * r->m[i] : r->m[i];
        r->p[i] -= lr * d;
    }
}

static void ref_adamw(ref_t *r, const double *g, double lr, int t, const tt_optim_adamw_hp_t *hp) {
    double bc1 = 1.0 - pow(hp->beta1, t), bc2 = 1.0 - pow(hp->beta2, t);
    for (int i = 0; i < N; i++) {
        r->p[i] *= 1.0 - lr * hp->weight_decay;
        r->m[i] = hp->beta1 * r->m[i] + (1.0 - hp->beta1) * g[i];
        r->v[i] = hp->beta2 * r->v[i] + (1.0 - hp->beta2) * g[i] * g[i];
        r->p[i] -= lr / bc1 * r->m[i] / (sqrt(r->v[i] / bc2) + hp->eps);
    }
}

/* One step through the accumulator; returns the max relative error of the
 * result against the reference parameters after the same step. */
static void step_chunk(tt_accum_t *a, int s, float lr, float *out) {
    tt_accum_ticket_t t;
    float g[N];
    for (int k = RANKS - 1; k >= 0; k--) { /* arrival order is not rank order */
        for (int i = 0; i < N; i++)
            g[i] = grad(s, k, i);
        tt_accum_push_t p = {.generation = 1,
                             .step = (uint64_t)s,
                             .rank = (uint32_t)k,
                             .world = RANKS,
                             .examples = counts[k],
                             .lr = lr,
                             .elems = N};
        CU_ASSERT_EQUAL_FATAL(tt_accum_admit(a, &p, 0, &t, NULL, 0), TT_OK);
        tt_accum_add(a, p.rank, g, t.first);
    }
    CU_ASSERT_FATAL(t.complete);
    CU_ASSERT_EQUAL(tt_accum_finish(a, out), 5 + 3 + 8);
    tt_accum_mark_done(a);
}

static void mean_grad(int s, double *g) {
    for (int i = 0; i < N; i++) {
        double sum = 0;
        for (int k = 0; k < RANKS; k++)
            sum += grad(s, k, i);
        g[i] = sum / 16.0;
    }
}

static double run(tt_accum_opts_t *o, ref_t *ref) {
    tt_accum_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(&a, o), TT_OK);
    float init[N], out[N];
    for (int i = 0; i < N; i++) {
        init[i] = (float)(0.5 - i * 0.003);
        ref->p[i] = init[i];
    }
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_PARAMS, 0, init, N, 0), TT_OK);
    double worst = 0, g[N];
    for (int s = 0; s < STEPS; s++) {
        float lr = 0.05f * (1.0f - (float)s / (2.0f * STEPS)); /* lr changes per step */
        step_chunk(a, s, lr, out);
        mean_grad(s, g);
        if (o->optim == TT_ACCUM_ADAMW)
            ref_adamw(ref, g, lr, s + 1, &o->adamw);
        else
            ref_sgd(ref, g, lr, &o->sgd);
        for (int i = 0; i < N; i++) {
            double e = fabs(out[i] - ref->p[i]) / (fabs(ref->p[i]) + 1e-3);
            worst = e > worst ? e : worst;
        }
    }
    tt_accum_destroy(&a);
    return worst;
}

static void shard_optim_sgd_nesterov_matches_reference(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_SGD};
    o.sgd.momentum = 0.9f;
    o.sgd.weight_decay = 1e-3f;
    o.sgd.nesterov = 1;
    ref_t ref;
    memset(&ref, 0, sizeof(ref));
    double worst = run(&o, &ref);
    CU_ASSERT(worst < 1e-4);
}

static void shard_optim_sgd_plain_momentum_matches_reference(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_SGD};
    o.sgd.momentum = 0.5f;
    ref_t ref;
    memset(&ref, 0, sizeof(ref));
    CU_ASSERT(run(&o, &ref) < 1e-4);
}

static void shard_optim_adamw_matches_reference(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_ADAMW};
    o.adamw =
        (tt_optim_adamw_hp_t){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    o.deterministic = 1;
    ref_t ref;
    memset(&ref, 0, sizeof(ref));
    CU_ASSERT(run(&o, &ref) < 1e-3);
}

/* What a checkpoint of a chunk stores: the planes its optimizer keeps. */
static void shard_optim_planes_follow_the_optimizer(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_SGD};
    const struct {
        tt_accum_mode_t mode;
        tt_accum_optim_t optim;
        float momentum;
        uint32_t planes;
    } cases[] = {{TT_ACCUM_OPTIMIZER, TT_ACCUM_SGD, 0.0f, 1},
                 {TT_ACCUM_OPTIMIZER, TT_ACCUM_SGD, 0.9f, 2},
                 {TT_ACCUM_OPTIMIZER, TT_ACCUM_ADAMW, 0.0f, 3},
                 {TT_ACCUM_AGGREGATE, TT_ACCUM_SGD, 0.9f, 0}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        tt_accum_t *a = NULL;
        o.mode = cases[k].mode;
        o.optim = cases[k].optim;
        o.sgd.momentum = cases[k].momentum;
        o.adamw = (tt_optim_adamw_hp_t){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
        CU_ASSERT_EQUAL_FATAL(tt_accum_create(&a, &o), TT_OK);
        CU_ASSERT_EQUAL(tt_accum_planes(a), cases[k].planes);
        tt_accum_destroy(&a);
    }
}

static void shard_optim_state_moves_with_set_get(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_ADAMW};
    o.adamw = (tt_optim_adamw_hp_t){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    o.deterministic = 1;
    tt_accum_t *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(&a, &o), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(&b, &o), TT_OK);
    float out_a[N], out_b[N], buf[N];
    for (int s = 0; s < 3; s++)
        step_chunk(a, s, 0.01f, out_a);
    /* move params, m, v and the step counter from a to b, as at a regroup */
    uint64_t t = 0;
    for (int part = TT_ACCUM_PARAMS; part <= TT_ACCUM_STATE2; part++) {
        CU_ASSERT_EQUAL(tt_accum_get(a, (tt_accum_part_t)part, 0, buf, N, &t), TT_OK);
        CU_ASSERT_EQUAL(tt_accum_set(b, (tt_accum_part_t)part, 0, buf, N, t), TT_OK);
    }
    CU_ASSERT_EQUAL(t, 3);
    /* the STATE parts do not reset the step counter */
    CU_ASSERT_EQUAL(tt_accum_get(b, TT_ACCUM_PARAMS, 0, buf, 1, &t), TT_OK);
    CU_ASSERT_EQUAL(t, 3);
    step_chunk(a, 3, 0.01f, out_a);
    step_chunk(b, 3, 0.01f, out_b);
    CU_ASSERT(memcmp(out_a, out_b, sizeof(out_a)) == 0);
    tt_accum_destroy(&a);
    tt_accum_destroy(&b);
}

static const tt_cunit_test_t tests[] = {
    {"shard_optim_sgd_nesterov_matches_reference", shard_optim_sgd_nesterov_matches_reference},
    {"shard_optim_sgd_plain_momentum_matches_reference",
     shard_optim_sgd_plain_momentum_matches_reference},
    {"shard_optim_adamw_matches_reference", shard_optim_adamw_matches_reference},
    {"shard_optim_state_moves_with_set_get", shard_optim_state_moves_with_set_get},
    {"shard_optim_planes_follow_the_optimizer", shard_optim_planes_follow_the_optimizer},
    {NULL, NULL},
};

TT_CUNIT_MAIN("shard_optim", tests)
