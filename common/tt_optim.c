/* tt_optim: update rules and schedules. The inner loops are written without
 * branches (the momentum/Nesterov choice is folded into coefficients outside
 * the loop) and with restrict pointers so the compiler vectorises them; they
 * are memory-bound, one pass over each buffer per step. It does not own any
 * buffer: callers pass parameters, gradients and optimizer state. */
#include "tt_optim.h"

#include <math.h>

void tt_optim_sgd_step(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                       float lr, float grad_scale, const tt_optim_sgd_hp_t *hp) {
    const float wd = hp->weight_decay;
    const float mu = hp->momentum;
    if (mu == 0.0f || buf == NULL) {
        for (size_t i = 0; i < n; i++)
            p[i] -= lr * (grad_scale * g[i] + wd * p[i]);
        return;
    }
    /* d = g' + c * buf_new: c = mu for Nesterov, and plain momentum is
     * d = buf_new, i.e. a = 0, c = 1. */
    const float a = hp->nesterov ? 1.0f : 0.0f;
    const float c = hp->nesterov ? mu : 1.0f;
    for (size_t i = 0; i < n; i++) {
        float gi = grad_scale * g[i] + wd * p[i];
        float b = mu * buf[i] + gi;
        buf[i] = b;
        p[i] -= lr * (a * gi + c * b);
    }
}

void tt_optim_adamw_step(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, float lr, float grad_scale, uint64_t t,
                         const tt_optim_adamw_hp_t *hp) {
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    double tt = (double)(t == 0 ? 1 : t);
    const float bc1 = (float)(1.0 - pow((double)b1, tt));
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow((double)b2, tt)));
    const float step = lr / bc1;
    const float decay = 1.0f - lr * hp->weight_decay;
    const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
    for (size_t i = 0; i < n; i++) {
        float gi = grad_scale * g[i];
        float mi = b1 * m[i] + one_b1 * gi;
        float vi = b2 * v[i] + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

double tt_lr_at(const tt_lr_sched_t *s, uint64_t step) {
    if (s->warmup_steps > 0 && step < s->warmup_steps)
        return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == TT_LR_CONST)
        return s->base_lr;
    double span =
        s->total_steps > s->warmup_steps ? (double)(s->total_steps - s->warmup_steps) : 1.0;
    double prog = (double)(step - s->warmup_steps) / span;
    if (prog > 1.0)
        prog = 1.0;
    const double pi = 3.14159265358979323846;
    return s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1.0 + cos(pi * prog));
}

double tt_lr_scale_for_batch(double lr_at_256, uint64_t batch) {
    return lr_at_256 * (double)batch / 256.0;
}
