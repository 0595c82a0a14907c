/* GPU test of the CUDA model against the CPU one: the same seed gives the
 * same parameters; on random inputs the logits, the summed loss, every
 * gradient tensor (over two accumulated micro-batches) and the parameters
 * after SGD-Nesterov and AdamW steps agree with tt_mlp / tt_optim to a
 * relative error under 1e-4 in float32; the hook sees the tensors in the
 * same order; bad rows and labels are refused; cuBLAS multiplies in full
 * FP32 unless TF32 is asked for (and then visibly not). Exits 77 (skipped)
 * without CUDA support or a GPU, and says so. */
#include "tt_cuda.h"
#include "tt_mlp.h"
#include "tt_mlp_cuda.h"
#include "tt_optim.h"
#include "tt_rng.h"
#include "tt_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 96
#define TOL  1e-4

static int failures;

static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* ||a - b|| / ||b|| over n floats (0 when both are zero). */
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

typedef struct {
    int order[2 * TT_MLP_MAX_LAYERS];
    int n;
} hook_log_t;

static int log_hook(void *ctx, int tensor) {
    hook_log_t *h = ctx;
    h->order[h->n++] = tensor;
    return 0;
}

static void fill(float *x, uint8_t *y, size_t rows, int in, int k, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < rows * (size_t)in; i++)
        x[i] = tt_rng_unit_float(&s);
    for (size_t r = 0; r < rows; r++)
        y[r] = (uint8_t)(tt_rng_next(&s) % (uint64_t)k);
}

/* Per-tensor gradient comparison; returns the worst relative error. */
static double worst_grad(tt_mlp_t *cpu, const float *gpu_grads) {
    double worst = 0.0;
    for (int t = 0; t < tt_mlp_tensor_count(cpu); t++) {
        size_t off, len;
        tt_mlp_tensor(cpu, t, &off, &len);
        double e = rel_err(gpu_grads + off, tt_mlp_grads(cpu) + off, len);
        worst = e > worst ? e : worst;
    }
    return worst;
}

typedef struct {
    tt_mlp_t *cpu;
    tt_mlp_cuda_t *gpu;
    float *x, *buf, *host;
    uint8_t *y;
    size_t np;
    int k, in;
} pair_t;

static void compare_training(pair_t *p) {
    hook_log_t hc = {.n = 0}, hg = {.n = 0};
    double lc[2], lg[2];
    size_t cc[2], cg[2];
    for (int mb = 0; mb < 2; mb++) { /* two micro-batches accumulate */
        const float *x = p->x + (size_t)mb * ROWS * (size_t)p->in;
        const uint8_t *y = p->y + (size_t)mb * ROWS;
        check(tt_mlp_train_batch(p->cpu, x, y, ROWS, log_hook, &hc, &lc[mb], &cc[mb]) == 0,
              "cpu train_batch");
        int rc = tt_mlp_cuda_train_batch(p->gpu, x, y, ROWS, log_hook, &hg, &lg[mb], &cg[mb]);
        if (rc != 0)
            printf("  %s\n", tt_mlp_cuda_last_error(p->gpu));
        check(rc == 0, "cuda train_batch");
    }
    check(fabs(lc[0] - lg[0]) / lc[0] < TOL && fabs(lc[1] - lg[1]) / lc[1] < TOL,
          "summed losses agree");
    check(cc[0] == cg[0] && cc[1] == cg[1], "correct counts agree");
    check(hc.n == hg.n && memcmp(hc.order, hg.order, sizeof(int) * (size_t)hc.n) == 0,
          "hook order agrees (last layer first, weight then bias)");
    check(tt_mlp_cuda_get_grads(p->gpu, p->host, p->np) == 0, "get_grads");
    double e = worst_grad(p->cpu, p->host);
    printf("  worst gradient relative error %.3g\n", e);
    check(e < TOL, "every gradient tensor within 1e-4");
}

static void compare_optim(pair_t *p) {
    tt_optim_sgd_hp_t sgd = {.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1};
    tt_optim_adamw_hp_t aw = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    float *cp = tt_mlp_params(p->cpu), *g = tt_mlp_grads(p->cpu);
    float *m = calloc(p->np, sizeof(float)), *v = calloc(p->np, sizeof(float));
    memset(p->buf, 0, p->np * sizeof(float));
    /* The device starts from the CPU's gradients so only the update differs. */
    check(tt_mlp_cuda_set_grads(p->gpu, g, p->np) == 0, "set_grads");
    for (int s = 0; s < 2; s++) {
        tt_optim_sgd_step(cp, g, p->buf, p->np, 0.05f, 1.0f / 192, &sgd);
        check(tt_mlp_cuda_sgd_step(p->gpu, 0.05f, 1.0f / 192, &sgd) == 0, "cuda sgd step");
    }
    check(tt_mlp_cuda_get_params(p->gpu, p->host, p->np) == 0, "get_params");
    check(rel_err(p->host, cp, p->np) < TOL, "SGD-Nesterov parameters within 1e-4");
    /* AdamW starts from zero moments on both sides; the device's first
     * buffer still holds the SGD momentum. */
    check(tt_mlp_cuda_set_opt_state(p->gpu, 0, m, p->np) == 0 &&
              tt_mlp_cuda_set_opt_state(p->gpu, 1, v, p->np) == 0,
          "optimizer state reset");
    for (uint64_t t = 1; t <= 2; t++) {
        tt_optim_adamw_step(cp, g, m, v, p->np, 1e-3f, 1.0f / 192, t, &aw);
        check(tt_mlp_cuda_adamw_step(p->gpu, 1e-3f, 1.0f / 192, t, &aw) == 0, "cuda adamw step");
    }
    check(tt_mlp_cuda_get_params(p->gpu, p->host, p->np) == 0, "get_params");
    double e = rel_err(p->host, cp, p->np);
    printf("  AdamW parameter relative error %.3g\n", e);
    check(e < TOL, "AdamW parameters within 1e-4");
    check(tt_mlp_cuda_get_opt_state(p->gpu, 1, p->host, p->np) == 0 &&
              rel_err(p->host, v, p->np) < TOL,
          "AdamW second moments within 1e-4");
    free(m);
    free(v);
}

static void compare_forward_and_errors(pair_t *p) {
    float *lg = malloc(ROWS * (size_t)p->k * sizeof(float));
    const float *lc = tt_mlp_forward(p->cpu, p->x, ROWS);
    check(tt_mlp_cuda_forward(p->gpu, p->x, ROWS, lg) == 0, "cuda forward");
    check(lc != NULL && rel_err(lg, lc, ROWS * (size_t)p->k) < TOL, "logits within 1e-4");
    check(tt_mlp_cuda_train_batch(p->gpu, p->x, p->y, ROWS * 3, NULL, NULL, NULL, NULL) ==
              TT_EINVAL,
          "rows above max_batch refused");
    uint8_t saved = p->y[5];
    p->y[5] = (uint8_t)p->k;
    check(tt_mlp_cuda_train_batch(p->gpu, p->x, p->y, ROWS, NULL, NULL, NULL, NULL) == TT_EINVAL,
          "label out of range refused");
    p->y[5] = saved;
    free(lg);
}

/* cuBLAS must multiply in full FP32, as the CPU model does: 784 products
 * of 1 + 2^-12 sum to 784.19140625 exactly in FP32 (every partial sum is
 * representable), but to 784 where the inputs are rounded to TF32's 10
 * mantissa bits. Shapes of tether-train's first layer, so the library's
 * choice of kernel is the trainer's. The default and the strict mode must
 * give the FP32 sum everywhere; TF32 (tether-train --tf32) must not, which
 * shows the probe can see TF32 on this GPU. */
static void check_products(tt_mlp_cuda_math_t math) {
    tt_mlp_opts_t o = {.nlayers = 1, .dims = {784, 256}, .max_batch = 256};
    tt_mlp_cuda_t *m = NULL;
    char err[256] = "";
    if (tt_mlp_cuda_create(&m, &o, 0, err, sizeof(err)) != 0) {
        check(0, err);
        return;
    }
    size_t np = tt_mlp_cuda_param_count(m), nx = 256 * 784, nz = 256 * 256;
    float *w = malloc(np * sizeof(float)), *x = malloc(nx * sizeof(float));
    float *z = malloc(nz * sizeof(float));
    const float want = 784.19140625f;
    size_t exact = 0, ran = 0;
    if (w != NULL && x != NULL && z != NULL) {
        for (size_t i = 0; i < np; i++)
            w[i] = i < 784 * 256 ? 1.0f + 0x1p-12f : 0.0f; /* weights, then zero biases */
        for (size_t i = 0; i < nx; i++)
            x[i] = 1.0f;
        ran = tt_mlp_cuda_set_math(m, math) == 0 && tt_mlp_cuda_set_params(m, w, np) == 0 &&
              tt_mlp_cuda_forward(m, x, 256, z) == 0;
        for (size_t i = 0; ran && i < nz; i++)
            exact += z[i] == want;
    }
    const char *env = getenv("NVIDIA_TF32_OVERRIDE"), *name = tt_mlp_cuda_math_name(math);
    printf("  %s products: %zu of %zu logits are the FP32 sum %.8f (TF32 gives 784), logit 0 "
           "is %.8f; NVIDIA_TF32_OVERRIDE=%s\n",
           name, exact, nz, want, ran ? z[0] : 0.0f, env ? env : "(unset)");
    char what[96];
    if (math == TT_MLP_CUDA_TF32)
        snprintf(what, sizeof(what), "tf32 products round (the probe sees TF32)");
    else
        snprintf(what, sizeof(what), "%s products are full FP32 (no TF32)", name);
    check(ran && (math == TT_MLP_CUDA_TF32 ? exact < nz : exact == nz), what);
    free(w), free(x), free(z);
    tt_mlp_cuda_destroy(&m);
}

int main(void) {
    char err[256] = "";
    int n = 0;
    if (!tt_mlp_cuda_compiled() || tt_cuda_device_count(&n, err, sizeof(err)) != TT_OK) {
        printf("SKIPPED: %s\n", tt_mlp_cuda_compiled() ? err : "built without CUDA");
        return 77;
    }
    tt_mlp_opts_t o = {.nlayers = 3, .dims = {784, 256, 128, 10}, .max_batch = 2 * ROWS};
    pair_t p = {.k = 10, .in = 784};
    if (tt_mlp_create(&p.cpu, &o) != 0 ||
        tt_mlp_cuda_create(&p.gpu, &o, 0, err, sizeof(err)) != 0) {
        printf("FAILED: cannot create the models: %s\n", err);
        return 1;
    }
    p.np = tt_mlp_param_count(p.cpu);
    p.x = malloc(2 * ROWS * 784 * sizeof(float));
    p.y = malloc(2 * ROWS);
    p.buf = malloc(p.np * sizeof(float));
    p.host = malloc(p.np * sizeof(float));
    fill(p.x, p.y, 2 * ROWS, 784, 10, 42);
    tt_mlp_init(p.cpu, 7);
    check(tt_mlp_cuda_init(p.gpu, 7) == 0, "cuda init");
    check(tt_mlp_cuda_param_count(p.gpu) == p.np, "same parameter count");
    check(tt_mlp_cuda_get_params(p.gpu, p.host, p.np) == 0 &&
              memcmp(p.host, tt_mlp_params(p.cpu), p.np * sizeof(float)) == 0,
          "same seed, bit-identical initial parameters");
    compare_forward_and_errors(&p);
    compare_training(&p);
    compare_optim(&p);
    check_products(TT_MLP_CUDA_FP32);
    check_products(TT_MLP_CUDA_STRICT);
    check_products(TT_MLP_CUDA_TF32);
    check(tt_mlp_cuda_set_math(p.gpu, (tt_mlp_cuda_math_t)7) == TT_EINVAL, "unknown math refused");
    tt_mlp_cuda_destroy(&p.gpu);
    check(p.gpu == NULL, "destroy clears the pointer");
    tt_mlp_destroy(&p.cpu);
    free(p.x), free(p.y), free(p.buf), free(p.host);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
