/* bench_gpu_train: step time and examples/s of the CUDA model (tt_mlp_cuda)
 * for the trainer's two MLP sizes, 784-256-256-10 and 784-2048-2048-10, at
 * batch 256 (and any --batch given): one step = stage the batch through
 * pinned memory, forward, softmax cross-entropy, backward, SGD-Nesterov
 * update, as tether-train --device cuda --backend local runs it minus the
 * host copies of the parameters. Random inputs; timed after a warm-up.
 * Prints one table row per size and product math: FP32 (the default, the
 * CPU's arithmetic) and TF32 (tether-train --tf32); bench_gpu_train.py runs
 * PyTorch's eager step beside it with TF32 off and on. Exits 77 without
 * CUDA support or a GPU.
 * Usage: bench_gpu_train [--batch N] [--steps N] */
#include "tt_clock.h"
#include "tt_cuda.h"
#include "tt_mlp_cuda.h"
#include "tt_rng.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    tt_mlp_opts_t o;
} size_case_t;

static int bench_one(const size_case_t *c, tt_mlp_cuda_math_t math, size_t batch, int steps) {
    char err[256] = "";
    tt_mlp_cuda_t *m = NULL;
    tt_mlp_opts_t o = c->o;
    o.max_batch = batch;
    int rc = tt_mlp_cuda_create(&m, &o, 0, err, sizeof(err));
    if (rc != TT_OK) {
        fprintf(stderr, "bench_gpu_train: %s: %s\n", c->name, err);
        return rc;
    }
    float *x = malloc(batch * 784 * sizeof(float));
    uint8_t *y = malloc(batch);
    uint64_t s = 1;
    for (size_t i = 0; x != NULL && i < batch * 784; i++)
        x[i] = tt_rng_unit_float(&s);
    for (size_t i = 0; y != NULL && i < batch; i++)
        y[i] = (uint8_t)(tt_rng_next(&s) % 10);
    tt_optim_sgd_hp_t hp = {.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1};
    rc = x && y ? tt_mlp_cuda_init(m, 0) : TT_ENOMEM;
    if (rc == TT_OK)
        rc = tt_mlp_cuda_set_math(m, math);
    uint64_t t0 = 0;
    for (int i = -20; rc == TT_OK && i < steps; i++) {
        if (i == 0)
            t0 = tt_clock_mono_ns();
        double loss;
        rc = tt_mlp_cuda_zero_grads(m);
        if (rc == TT_OK)
            rc = tt_mlp_cuda_train_batch(m, x, y, batch, NULL, NULL, &loss, NULL);
        if (rc == TT_OK)
            rc = tt_mlp_cuda_sgd_step(m, 0.05f, 1.0f / (float)batch, &hp);
    }
    if (rc == TT_OK)
        rc = tt_mlp_cuda_sync(m);
    double ms = (double)(tt_clock_mono_ns() - t0) * 1e-6 / steps;
    if (rc == TT_OK)
        printf("| %-18s | %-4s | %5zu | %9.3f | %12.0f |\n", c->name, tt_mlp_cuda_math_name(math),
               batch, ms, (double)batch / ms * 1e3);
    else
        fprintf(stderr, "bench_gpu_train: %s: %s\n", c->name, tt_mlp_cuda_last_error(m));
    free(x);
    free(y);
    tt_mlp_cuda_destroy(&m);
    return rc;
}

int main(int argc, char **argv) {
    size_t batch = 256;
    int steps = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batch") == 0)
            batch = (size_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
    }
    char err[256] = "";
    int n = 0;
    if (!tt_mlp_cuda_compiled() || tt_cuda_device_count(&n, err, sizeof(err)) != TT_OK) {
        printf("SKIPPED: %s\n", tt_mlp_cuda_compiled() ? err : "built without CUDA");
        return 77;
    }
    if (batch == 0 || steps <= 0)
        return 2;
    static const size_case_t cases[] = {
        {"784-256-256-10", {.nlayers = 3, .dims = {784, 256, 256, 10}}},
        {"784-2048-2048-10", {.nlayers = 3, .dims = {784, 2048, 2048, 10}}},
    };
    static const tt_mlp_cuda_math_t maths[] = {TT_MLP_CUDA_FP32, TT_MLP_CUDA_TF32};
    printf("| model              | math | batch | ms / step | examples / s |\n"
           "|--------------------|------|-------|-----------|--------------|\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (size_t k = 0; k < sizeof(maths) / sizeof(maths[0]); k++)
            rc |= bench_one(&cases[i], maths[k], batch, steps) != TT_OK;
    return rc;
}
