/* tt_mlp_cuda_stub: the CUDA model in a build without CUDA. create says
 * why it cannot run; nothing else is reachable without a model, so the
 * other entry points only keep the link whole and report TT_ENODEV. */
#include "tt_mlp_cuda.h"
#include "tt_status.h"

#include <stdio.h>

int tt_mlp_cuda_compiled(void) {
    return 0;
}

int tt_mlp_cuda_blas_probe(char *err, size_t errlen) {
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "this build of tether has no CUDA support");
    return TT_ENODEV;
}

int tt_mlp_cuda_create(tt_mlp_cuda_t **out, const tt_mlp_opts_t *opts, int device, char *err,
                       size_t errlen) {
    (void)out, (void)opts, (void)device;
    if (err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "this build of tether has no CUDA support (TETHER_WITH_CUDA=OFF or nvcc/NCCL "
                 "not found): use --device cpu");
    return TT_ENODEV;
}

void tt_mlp_cuda_destroy(tt_mlp_cuda_t **m) {
    if (m != NULL)
        *m = NULL;
}
int tt_mlp_cuda_init(tt_mlp_cuda_t *m, uint64_t seed) {
    (void)m, (void)seed;
    return TT_ENODEV;
}
size_t tt_mlp_cuda_param_count(const tt_mlp_cuda_t *m) {
    (void)m;
    return 0;
}
int tt_mlp_cuda_tensor_count(const tt_mlp_cuda_t *m) {
    (void)m;
    return 0;
}
int tt_mlp_cuda_tensor(const tt_mlp_cuda_t *m, int tensor, size_t *offset, size_t *len) {
    (void)m, (void)tensor, (void)offset, (void)len;
    return TT_ENODEV;
}
static int no_copy(void) {
    return TT_ENODEV;
}
int tt_mlp_cuda_set_params(tt_mlp_cuda_t *m, const float *host, size_t n) {
    (void)m, (void)host, (void)n;
    return no_copy();
}
int tt_mlp_cuda_get_params(tt_mlp_cuda_t *m, float *host, size_t n) {
    (void)m, (void)host, (void)n;
    return no_copy();
}
int tt_mlp_cuda_set_grads(tt_mlp_cuda_t *m, const float *host, size_t n) {
    (void)m, (void)host, (void)n;
    return no_copy();
}
int tt_mlp_cuda_get_grads(tt_mlp_cuda_t *m, float *host, size_t n) {
    (void)m, (void)host, (void)n;
    return no_copy();
}
int tt_mlp_cuda_zero_grads(tt_mlp_cuda_t *m) {
    (void)m;
    return no_copy();
}
int tt_mlp_cuda_get_opt_state(tt_mlp_cuda_t *m, int which, float *host, size_t n) {
    (void)m, (void)which, (void)host, (void)n;
    return no_copy();
}
int tt_mlp_cuda_set_opt_state(tt_mlp_cuda_t *m, int which, const float *host, size_t n) {
    (void)m, (void)which, (void)host, (void)n;
    return no_copy();
}
void *tt_mlp_cuda_dev_params(tt_mlp_cuda_t *m) {
    (void)m;
    return NULL;
}
void *tt_mlp_cuda_dev_grads(tt_mlp_cuda_t *m) {
    (void)m;
    return NULL;
}
void *tt_mlp_cuda_stream(tt_mlp_cuda_t *m) {
    (void)m;
    return NULL;
}
void *tt_mlp_cuda_grad_event(tt_mlp_cuda_t *m, int tensor) {
    (void)m, (void)tensor;
    return NULL;
}
int tt_mlp_cuda_forward(tt_mlp_cuda_t *m, const float *x, size_t rows, float *logits) {
    (void)m, (void)x, (void)rows, (void)logits;
    return TT_ENODEV;
}
int tt_mlp_cuda_train_batch(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels, size_t rows,
                            tt_mlp_grad_hook_fn hook, void *ctx, double *loss_sum,
                            size_t *correct) {
    (void)m, (void)x, (void)labels, (void)rows, (void)hook, (void)ctx, (void)loss_sum,
        (void)correct;
    return TT_ENODEV;
}
int tt_mlp_cuda_evaluate(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels, size_t rows,
                         double *loss_sum, size_t *correct) {
    (void)m, (void)x, (void)labels, (void)rows, (void)loss_sum, (void)correct;
    return TT_ENODEV;
}
int tt_mlp_cuda_sgd_step(tt_mlp_cuda_t *m, float lr, float grad_scale,
                         const tt_optim_sgd_hp_t *hp) {
    (void)m, (void)lr, (void)grad_scale, (void)hp;
    return TT_ENODEV;
}
int tt_mlp_cuda_adamw_step(tt_mlp_cuda_t *m, float lr, float grad_scale, uint64_t t,
                           const tt_optim_adamw_hp_t *hp) {
    (void)m, (void)lr, (void)grad_scale, (void)t, (void)hp;
    return TT_ENODEV;
}
int tt_mlp_cuda_set_math(tt_mlp_cuda_t *m, tt_mlp_cuda_math_t math) {
    (void)m, (void)math;
    return TT_ENODEV;
}
int tt_mlp_cuda_sync(tt_mlp_cuda_t *m) {
    (void)m;
    return TT_ENODEV;
}
const char *tt_mlp_cuda_last_error(const tt_mlp_cuda_t *m) {
    (void)m;
    return "no CUDA support in this build";
}
