/* Unit tests of a shard chunk in optimizer mode (tt_accum with tt_optim):
 * over many steps with several ranks and unequal counts, the parameters it
 * returns follow a double-precision reference of SGD (momentum, Nesterov,
 * weight decay) and AdamW (bias correction, decoupled weight decay), a
 * deterministic chunk is bitwise repeatable, and a step that a newer
 * generation redoes after a regroup is replayed, not applied twice. */
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

/* One step of `world` ranks of generation `gen` through the accumulator;
 * the new parameters go to out. Returns the round's total count. */
static uint64_t push_round(tt_accum_t *a, uint64_t gen, int s, int world, float lr, float *out) {
    tt_accum_ticket_t t;
    float g[N];
    for (int k = world - 1; k >= 0; k--) { /* arrival order is not rank order */
        for (int i = 0; i < N; i++)
            g[i] = grad(s, k, i);
        tt_accum_push_t p = {.generation = gen,
                             .step = (uint64_t)s,
                             .rank = (uint32_t)k,
                             .world = (uint32_t)world,
                             .examples = counts[k],
                             .lr = lr,
                             .elems = N};
        CU_ASSERT_EQUAL_FATAL(tt_accum_admit(a, &p, 0, &t, NULL, 0), TT_OK);
        CU_ASSERT_FATAL(!t.replay);
        tt_accum_add(a, p.rank, g, t.first);
    }
    CU_ASSERT_FATAL(t.complete);
    uint64_t total = tt_accum_finish(a, out);
    tt_accum_mark_done(a);
    return total;
}

static void step_chunk(tt_accum_t *a, int s, float lr, float *out) {
    CU_ASSERT_EQUAL(push_round(a, 1, s, RANKS, lr, out), 5 + 3 + 8);
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

/* Two identical deterministic AdamW chunks. */
static void adamw_pair(tt_accum_t **a, tt_accum_t **b) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_ADAMW};
    o.adamw = (tt_optim_adamw_hp_t){.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    o.deterministic = 1;
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(a, &o), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(b, &o), TT_OK);
    float zero[N] = {0};
    CU_ASSERT_EQUAL(tt_accum_set(*a, TT_ACCUM_PARAMS, 0, zero, N, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_accum_set(*b, TT_ACCUM_PARAMS, 0, zero, N, 0), TT_OK);
}

static void shard_optim_state_moves_with_set_get(void) {
    tt_accum_t *a = NULL, *b = NULL;
    adamw_pair(&a, &b);
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

/* What a push of (gen, step) by `rank` of `world` is told. */
static int push_one(tt_accum_t *a, uint64_t gen, uint64_t step, uint32_t rank, uint32_t world,
                    tt_accum_ticket_t *t) {
    tt_accum_push_t p = {.generation = gen,
                         .step = step,
                         .rank = rank,
                         .world = world,
                         .examples = 1,
                         .lr = 0.01f,
                         .elems = N};
    return tt_accum_admit(a, &p, 0, t, NULL, 0);
}

/* A regroup after this chunk finished step 2 and another chunk did not:
 * the survivors (generation 2, world 2) redo step 2 everywhere. Here it is
 * a replay (the parameters after step 2, the same total, AdamW's counter
 * unmoved); step 3 then continues exactly like a chunk that saw no
 * regroup. Before, the new generation applied step 2 a second time. */
static void shard_optim_redone_step_replays_not_reapplies(void) {
    tt_accum_t *a = NULL, *b = NULL;
    adamw_pair(&a, &b);
    float out_a[N], out_b[N], now[N];
    for (int s = 0; s < 3; s++) {
        step_chunk(a, s, 0.01f, out_a);
        step_chunk(b, s, 0.01f, out_b);
    }
    tt_accum_ticket_t t;
    uint64_t opt_t = 0;
    for (uint32_t r = 0; r < 2; r++) { /* each survivor redoes step 2 */
        CU_ASSERT_EQUAL(push_one(a, 2, 2, r, 2, &t), TT_OK);
        CU_ASSERT(t.replay && !t.first && !t.complete);
        CU_ASSERT_EQUAL(tt_accum_get(a, TT_ACCUM_PARAMS, 0, now, N, &opt_t), TT_OK);
        CU_ASSERT(memcmp(now, out_a, sizeof(now)) == 0);
        CU_ASSERT_EQUAL(opt_t, 3);
        CU_ASSERT_EQUAL(tt_accum_done_total(a), 5 + 3 + 8);
        CU_ASSERT(!tt_accum_active(a));
    }
    CU_ASSERT_EQUAL(push_one(a, 2, 1, 0, 2, &t), TT_ESTALE); /* would roll back */
    CU_ASSERT_EQUAL(push_one(a, 1, 2, 0, 2, &t), TT_ESTALE); /* the old generation */
    /* the generation that finished step 2 may not push it again */
    CU_ASSERT_EQUAL(push_one(b, 1, 2, 0, RANKS, &t), TT_ESTALE);
    /* nor may a rank skip a step: its numbering is not the chunk's */
    CU_ASSERT_EQUAL(push_one(a, 2, 4, 0, 2, &t), TT_ESTALE);
    CU_ASSERT_EQUAL(push_one(b, 1, 4, 0, RANKS, &t), TT_ESTALE);
    CU_ASSERT(!tt_accum_active(a) && !tt_accum_active(b));
    push_round(a, 2, 3, 2, 0.01f, out_a);
    push_round(b, 1, 3, 2, 0.01f, out_b); /* b: the same step, no regroup */
    CU_ASSERT(memcmp(out_a, out_b, sizeof(out_a)) == 0);
    /* uploaded state does not follow from step 3: any step may come next */
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_PARAMS, 0, out_b, N, 3), TT_OK);
    CU_ASSERT_EQUAL(push_one(a, 3, 1, 0, 1, &t), TT_OK);
    CU_ASSERT(!t.replay && t.complete);
    tt_accum_destroy(&a);
    tt_accum_destroy(&b);
}

/* A chunk whose state was never put (a fresh job, or a shard server that
 * restarted and lost it) would train zeros: its pushes are refused until
 * the parameters are set. */
static void shard_optim_push_before_state_is_refused(void) {
    tt_accum_opts_t o = {.elems = N, .mode = TT_ACCUM_OPTIMIZER, .optim = TT_ACCUM_SGD};
    tt_accum_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_accum_create(&a, &o), TT_OK);
    tt_accum_ticket_t t;
    CU_ASSERT_EQUAL(push_one(a, 1, 0, 0, 1, &t), TT_ESTALE);
    CU_ASSERT(!tt_accum_active(a));
    float zero[N] = {0};
    CU_ASSERT_EQUAL(tt_accum_set(a, TT_ACCUM_PARAMS, 0, zero, N, 0), TT_OK);
    CU_ASSERT_EQUAL(push_one(a, 1, 0, 0, 1, &t), TT_OK);
    CU_ASSERT(t.complete);
    tt_accum_destroy(&a);
}

static const tt_cunit_test_t tests[] = {
    {"shard_optim_sgd_nesterov_matches_reference", shard_optim_sgd_nesterov_matches_reference},
    {"shard_optim_sgd_plain_momentum_matches_reference",
     shard_optim_sgd_plain_momentum_matches_reference},
    {"shard_optim_adamw_matches_reference", shard_optim_adamw_matches_reference},
    {"shard_optim_state_moves_with_set_get", shard_optim_state_moves_with_set_get},
    {"shard_optim_planes_follow_the_optimizer", shard_optim_planes_follow_the_optimizer},
    {"shard_optim_redone_step_replays_not_reapplies",
     shard_optim_redone_step_replays_not_reapplies},
    {"shard_optim_push_before_state_is_refused", shard_optim_push_before_state_is_refused},
    {NULL, NULL},
};

TT_CUNIT_MAIN("shard_optim", tests)
