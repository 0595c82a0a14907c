/* Unit tests of tt_optim: SGD (plain, momentum, Nesterov, L2) and AdamW
 * against double-precision references written from PyTorch's documented
 * update rules, over several steps; the LR schedule at known points. */
#include "tt_cunit.h"
#include "tt_optim.h"

#include <math.h>
#include <string.h>

#define N     37 /* odd: exercises the vector loop's tail */
#define STEPS 6

static void fill(float *p, float *g, double *pd, uint64_t step) {
    for (int i = 0; i < N; i++) {
        if (p != NULL) {
            p[i] = (float)(0.5 * sin(i + 1.0));
            pd[i] = p[i];
        }
        /* gradient sums of "8 examples"; changes with the step */
        g[i] = (float)(8.0 * cos(0.3 * i + (double)step));
    }
}

static void ref_sgd(double *p, double *buf, const float *g, double lr, double scale, double mu,
                    double wd, int nesterov) {
    for (int i = 0; i < N; i++) {
        double gi = scale * g[i] + wd * p[i];
        buf[i] = mu * buf[i] + gi;
        double d = mu == 0 ? gi : nesterov ? gi + mu * buf[i] : buf[i];
        p[i] -= lr * d;
    }
}

static void check_sgd(float mu, float wd, int nesterov) {
    float p[N], g[N], buf[N];
    double pd[N], bd[N];
    memset(buf, 0, sizeof(buf));
    memset(bd, 0, sizeof(bd));
    fill(p, g, pd, 0);
    tt_optim_sgd_hp_t hp = {mu, wd, nesterov};
    for (uint64_t s = 0; s < STEPS; s++) {
        fill(NULL, g, NULL, s);
        tt_optim_sgd_step(p, g, mu == 0 ? NULL : buf, N, 0.05f, 0.125f, &hp);
        ref_sgd(pd, bd, g, 0.05, 0.125, mu, wd, nesterov);
    }
    for (int i = 0; i < N; i++)
        CU_ASSERT_DOUBLE_EQUAL(p[i], pd[i], 1e-5);
    /* the parameters really moved */
    CU_ASSERT(fabs(pd[0] - 0.5 * sin(1.0)) > 1e-2);
}

static void optim_sgd_plain_matches_reference(void) {
    check_sgd(0.0f, 0.0f, 0);
}
static void optim_sgd_momentum_matches_reference(void) {
    check_sgd(0.9f, 0.0f, 0);
}
static void optim_sgd_nesterov_wd_matches_reference(void) {
    check_sgd(0.9f, 5e-3f, 1);
}

static void optim_sgd_first_step_is_lr_times_grad(void) {
    /* PyTorch: on step 1 buf = g, so momentum and plain SGD agree. */
    float p[1] = {1.0f}, g[1] = {4.0f}, buf[1] = {0.0f};
    tt_optim_sgd_hp_t hp = {0.9f, 0.0f, 0};
    tt_optim_sgd_step(p, g, buf, 1, 0.1f, 0.5f, &hp);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 1.0 - 0.1 * 2.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(buf[0], 2.0, 1e-7);
}

static void ref_adamw(double *p, double *m, double *v, const float *g, double lr, double scale,
                      uint64_t t, double b1, double b2, double eps, double wd) {
    for (int i = 0; i < N; i++) {
        double gi = scale * g[i];
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / (1 - pow(b1, (double)t));
        double vh = v[i] / (1 - pow(b2, (double)t));
        p[i] -= lr * mh / (sqrt(vh) + eps);
    }
}

static void optim_adamw_matches_reference(void) {
    float p[N], g[N], m[N], v[N];
    double pd[N], md[N], vd[N];
    memset(m, 0, sizeof(m));
    memset(v, 0, sizeof(v));
    memset(md, 0, sizeof(md));
    memset(vd, 0, sizeof(vd));
    fill(p, g, pd, 0);
    tt_optim_adamw_hp_t hp = {0.9f, 0.999f, 1e-8f, 0.01f};
    for (uint64_t s = 1; s <= STEPS; s++) {
        fill(NULL, g, NULL, s);
        tt_optim_adamw_step(p, g, m, v, N, 1e-2f, 0.125f, s, &hp);
        ref_adamw(pd, md, vd, g, 1e-2, 0.125, s, 0.9, 0.999, 1e-8, 0.01);
    }
    for (int i = 0; i < N; i++) {
        CU_ASSERT_DOUBLE_EQUAL(p[i], pd[i], 2e-6);
        CU_ASSERT_DOUBLE_EQUAL(m[i], md[i], 1e-6);
    }
    /* Adam's first step moves every weight by about lr (sign of g). */
    CU_ASSERT(fabs(pd[3] - 0.5 * sin(4.0)) > 1e-2);
}

static void optim_lr_schedule_values(void) {
    tt_lr_sched_t s = {TT_LR_COSINE, 0.1, 0.001, 10, 110};
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 0), 0.01, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 4), 0.05, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 9), 0.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 10), 0.1, 1e-12);
    /* halfway through the decay: the midpoint of peak and floor */
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 60), 0.0505, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 35), 0.001 + 0.099 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 110), 0.001, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&s, 5000), 0.001, 1e-12);
    /* monotone non-increasing after warmup */
    for (uint64_t k = 10; k < 120; k++)
        CU_ASSERT(tt_lr_at(&s, k + 1) <= tt_lr_at(&s, k));
}

static void optim_lr_const_and_no_warmup(void) {
    tt_lr_sched_t c = {TT_LR_CONST, 0.2, 0.0, 4, 100};
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&c, 1), 0.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&c, 50), 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&c, 500), 0.2, 1e-12);
    tt_lr_sched_t z = {TT_LR_COSINE, 0.2, 0.0, 0, 100};
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&z, 0), 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_at(&z, 50), 0.1, 1e-12);
}

static void optim_linear_scaling_rule(void) {
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_scale_for_batch(0.1, 256), 0.1, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_scale_for_batch(0.1, 1024), 0.4, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(tt_lr_scale_for_batch(0.1, 64), 0.025, 1e-15);
}

static const tt_cunit_test_t tests[] = {
    {"optim_sgd_plain_matches_reference", optim_sgd_plain_matches_reference},
    {"optim_sgd_momentum_matches_reference", optim_sgd_momentum_matches_reference},
    {"optim_sgd_nesterov_wd_matches_reference", optim_sgd_nesterov_wd_matches_reference},
    {"optim_sgd_first_step_is_lr_times_grad", optim_sgd_first_step_is_lr_times_grad},
    {"optim_adamw_matches_reference", optim_adamw_matches_reference},
    {"optim_lr_schedule_values", optim_lr_schedule_values},
    {"optim_lr_const_and_no_warmup", optim_lr_const_and_no_warmup},
    {"optim_linear_scaling_rule", optim_linear_scaling_rule},
    {NULL, NULL},
};

TT_CUNIT_MAIN("optim", tests)
