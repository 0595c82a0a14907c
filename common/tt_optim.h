/* tt_optim: optimizer updates and learning-rate schedules as plain math over
 * float arrays. It owns the update rules (SGD with momentum / Nesterov and L2
 * weight decay; AdamW with decoupled weight decay and bias correction, both
 * with PyTorch's semantics) and the schedule (linear warmup, then constant or
 * cosine decay to a floor) as pure functions of the step. It knows nothing of
 * models, trainers or the network: the trainer calls it on its flat parameter
 * buffer, and a shard server in optimizer mode calls it on its key range.
 *
 * Gradients come in as SUMS over examples together with `grad_scale`
 * (normally 1 / global example count), so the division costs no extra pass.
 * Thread safety: every function is reentrant; callers may update disjoint
 * ranges of one buffer from different threads. */
#ifndef TT_OPTIM_H
#define TT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float momentum;     /* 0 disables the momentum buffer */
    float weight_decay; /* L2: g += wd * p, before momentum (PyTorch SGD) */
    int nesterov;       /* 1: step along g + momentum * buf */
} tt_optim_sgd_hp_t;

typedef struct {
    float beta1, beta2; /* PyTorch defaults 0.9, 0.999 */
    float eps;          /* 1e-8, added after the bias-corrected sqrt */
    float weight_decay; /* decoupled: p *= 1 - lr * wd (PyTorch default 0.01) */
} tt_optim_adamw_hp_t;

/* One SGD step over n elements: with g' = grad_scale * g + wd * p,
 *   buf = momentum * buf + g'        (dampening 0; buf starts at zero,
 *                                     which equals PyTorch's buf = g' on step 1)
 *   d   = nesterov ? g' + momentum * buf : buf   (d = g' when momentum == 0)
 *   p  -= lr * d
 * `buf` (n floats, caller-owned, zeroed before the first step) may be NULL
 * only when momentum == 0. Arrays must not overlap. */
void tt_optim_sgd_step(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                       float lr, float grad_scale, const tt_optim_sgd_hp_t *hp);

/* One AdamW step over n elements; `t` is the 1-based step count used for
 * bias correction (the same t for every element of a step). m and v are
 * caller-owned n-float moment buffers, zeroed before step 1.
 *   p *= 1 - lr * wd;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * where g' = grad_scale * g. Arrays must not overlap. */
void tt_optim_adamw_step(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, float lr, float grad_scale, uint64_t t,
                         const tt_optim_adamw_hp_t *hp);

typedef enum {
    TT_LR_CONST = 0,  /* warmup, then base_lr */
    TT_LR_COSINE = 1, /* warmup, then cosine from base_lr to min_lr */
} tt_lr_kind_t;

typedef struct {
    tt_lr_kind_t kind;
    double base_lr;
    double min_lr;         /* floor of the cosine (ignored for const) */
    uint64_t warmup_steps; /* 0: no warmup */
    uint64_t total_steps;  /* steps of the whole run, warmup included */
} tt_lr_sched_t;

/* Learning rate of the 0-based step `step`: base_lr * (step + 1) / warmup
 * during warmup (so step 0 is not a wasted zero-lr step), then constant or
 * min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2 with
 * p = (step - warmup) / (total - warmup) clamped to [0, 1]. Steps past
 * total_steps stay at the floor. Pure; never fails. */
double tt_lr_at(const tt_lr_sched_t *s, uint64_t step);

/* Linear scaling rule (Goyal et al. 2017): lr for global batch `batch` given
 * the lr tuned at batch 256. */
double tt_lr_scale_for_batch(double lr_at_256, uint64_t batch);

#endif
