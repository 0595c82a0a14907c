/* Unit tests of tt_mlp: forward against a naive double-precision reference,
 * backward against central finite differences of that reference (on a tiny
 * net, every parameter), accumulation over calls, the hook order, the flat
 * layout and the deterministic init; and that the CUDA twin opens cuBLAS
 * only when asked (no GPU needed for that). */
#include "tt_cunit.h"
#include "tt_mlp.h"
#include "tt_mlp_cuda.h"
#include "tt_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 4
static const int DIMS[] = {6, 5, 4, 3}; /* 3 layers */

static tt_mlp_t *make(size_t max_batch) {
    tt_mlp_opts_t o = {.nlayers = 3, .max_batch = max_batch};
    memcpy(o.dims, DIMS, sizeof(DIMS));
    tt_mlp_t *m = NULL;
    CU_ASSERT_FATAL(tt_mlp_create(&m, &o) == TT_OK);
    tt_mlp_init(m, 1234);
    return m;
}

static void make_input(float *x, uint8_t *y) {
    for (int i = 0; i < ROWS * 6; i++)
        x[i] = (float)(0.5 + 0.5 * sin(1.7 * i));
    for (int r = 0; r < ROWS; r++)
        y[r] = (uint8_t)(r % 3);
}

/* Naive forward in double over params p (flat layout); returns summed loss
 * and writes logits of the last row set into out (ROWS x 3) if not NULL. */
static double ref_loss(const double *p, const float *x, const uint8_t *y, double *out) {
    double loss = 0.0;
    for (int r = 0; r < ROWS; r++) {
        double a[8] = {0}, b[8] = {0};
        for (int i = 0; i < 6; i++)
            a[i] = x[r * 6 + i];
        size_t off = 0;
        for (int l = 0; l < 3; l++) {
            int ni = DIMS[l], no = DIMS[l + 1];
            for (int j = 0; j < no; j++) {
                double s = p[off + (size_t)ni * no + j];
                for (int i = 0; i < ni; i++)
                    s += p[off + (size_t)j * ni + i] * a[i];
                b[j] = l < 2 && s < 0 ? 0 : s;
            }
            off += (size_t)ni * no + no;
            memcpy(a, b, sizeof(a));
        }
        double mx = a[0], se = 0;
        for (int j = 1; j < 3; j++)
            mx = a[j] > mx ? a[j] : mx;
        for (int j = 0; j < 3; j++)
            se += exp(a[j] - mx);
        loss += mx + log(se) - a[y[r]];
        if (out)
            memcpy(out + r * 3, a, 3 * sizeof(double));
    }
    return loss;
}

static void mlp_layout_and_counts(void) {
    tt_mlp_t *m = make(ROWS);
    CU_ASSERT_EQUAL(tt_mlp_param_count(m), 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
    CU_ASSERT_EQUAL(tt_mlp_tensor_count(m), 6);
    size_t off, len;
    CU_ASSERT(tt_mlp_tensor(m, 2, &off, &len) == TT_OK);
    CU_ASSERT(off == 35 && len == 20);
    CU_ASSERT(tt_mlp_tensor(m, 5, &off, &len) == TT_OK);
    CU_ASSERT(off == 71 && len == 3);
    CU_ASSERT(tt_mlp_tensor(m, 6, &off, &len) == TT_EINVAL);
    tt_mlp_destroy(&m);
    CU_ASSERT_PTR_NULL(m);
    tt_mlp_destroy(NULL);
}

static void mlp_forward_matches_naive_reference(void) {
    tt_mlp_t *m = make(ROWS);
    float x[ROWS * 6];
    uint8_t y[ROWS];
    make_input(x, y);
    size_t n = tt_mlp_param_count(m);
    double *p = calloc(n, sizeof(double)), want[ROWS * 3];
    for (size_t i = 0; i < n; i++)
        p[i] = tt_mlp_params(m)[i];
    double ref = ref_loss(p, x, y, want);
    const float *z = tt_mlp_forward(m, x, ROWS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z);
    for (int i = 0; i < ROWS * 3; i++)
        CU_ASSERT_DOUBLE_EQUAL(z[i], want[i], 1e-5);
    double ls = 0;
    size_t ok = 0;
    CU_ASSERT(tt_mlp_evaluate(m, x, y, ROWS, &ls, &ok) == TT_OK);
    CU_ASSERT_DOUBLE_EQUAL(ls, ref, 1e-5);
    CU_ASSERT(tt_mlp_forward(m, x, ROWS + 1) == NULL);
    CU_ASSERT(tt_mlp_forward(m, x, 0) == NULL);
    free(p);
    tt_mlp_destroy(&m);
}

static void mlp_gradients_match_finite_differences(void) {
    tt_mlp_t *m = make(ROWS);
    float x[ROWS * 6];
    uint8_t y[ROWS];
    make_input(x, y);
    size_t n = tt_mlp_param_count(m);
    double *p = calloc(n, sizeof(double)), ls = 0;
    for (size_t i = 0; i < n; i++)
        p[i] = tt_mlp_params(m)[i];
    CU_ASSERT(tt_mlp_train_batch(m, x, y, ROWS, NULL, NULL, &ls, NULL) == TT_OK);
    CU_ASSERT_DOUBLE_EQUAL(ls, ref_loss(p, x, y, NULL), 1e-5);
    const float *g = tt_mlp_grads(m);
    double maxg = 0;
    for (size_t i = 0; i < n; i++) {
        const double h = 1e-6, keep = p[i];
        p[i] = keep + h;
        double up = ref_loss(p, x, y, NULL);
        p[i] = keep - h;
        double dn = ref_loss(p, x, y, NULL);
        p[i] = keep;
        double fd = (up - dn) / (2 * h);
        CU_ASSERT_DOUBLE_EQUAL(g[i], fd, 1e-4 + 1e-3 * fabs(fd));
        maxg = fabs(fd) > maxg ? fabs(fd) : maxg;
    }
    CU_ASSERT(maxg > 1e-2); /* the check compared real gradients */
    free(p);
    tt_mlp_destroy(&m);
}

typedef struct {
    int order[16], n;
} hook_log_t;

static int log_hook(void *ctx, int tensor) {
    hook_log_t *h = ctx;
    if (h->n < 16)
        h->order[h->n++] = tensor;
    return TT_OK;
}

static int failing_hook(void *ctx, int tensor) {
    return TT_ETIMEDOUT;
}

static void mlp_backward_accumulates_and_hooks_last_first(void) {
    tt_mlp_t *m = make(ROWS);
    float x[ROWS * 6], once[200];
    uint8_t y[ROWS];
    make_input(x, y);
    size_t n = tt_mlp_param_count(m);
    hook_log_t h = {.n = 0};
    CU_ASSERT(tt_mlp_train_batch(m, x, y, ROWS, log_hook, &h, NULL, NULL) == 0);
    memcpy(once, tt_mlp_grads(m), n * sizeof(float));
    static const int want[] = {4, 5, 2, 3, 0, 1};
    CU_ASSERT_EQUAL_FATAL(h.n, 6);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(h.order[i], want[i]);
    CU_ASSERT(tt_mlp_train_batch(m, x, y, ROWS, NULL, NULL, NULL, NULL) == 0);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_DOUBLE_EQUAL(tt_mlp_grads(m)[i], 2 * once[i], 1e-5);
    CU_ASSERT_EQUAL(tt_mlp_train_batch(m, x, y, ROWS, failing_hook, NULL, NULL, NULL),
                    TT_ETIMEDOUT);
    uint8_t bad[ROWS] = {0, 1, 9, 2};
    CU_ASSERT_EQUAL(tt_mlp_train_batch(m, x, bad, ROWS, NULL, NULL, NULL, NULL), TT_EINVAL);
    tt_mlp_destroy(&m);
}

static void mlp_micro_batches_sum_to_full_batch(void) {
    tt_mlp_t *full = make(ROWS), *part = make(2);
    float x[ROWS * 6];
    uint8_t y[ROWS];
    make_input(x, y);
    CU_ASSERT(tt_mlp_train_batch(full, x, y, ROWS, NULL, NULL, NULL, NULL) == 0);
    CU_ASSERT(tt_mlp_train_batch(part, x, y, 2, NULL, NULL, NULL, NULL) == 0);
    CU_ASSERT(tt_mlp_train_batch(part, x + 12, y + 2, 2, NULL, NULL, NULL, NULL) == 0);
    for (size_t i = 0; i < tt_mlp_param_count(full); i++)
        CU_ASSERT_DOUBLE_EQUAL(tt_mlp_grads(part)[i], tt_mlp_grads(full)[i], 1e-5);
    tt_mlp_destroy(&full);
    tt_mlp_destroy(&part);
}

static void mlp_init_deterministic_and_bounded(void) {
    tt_mlp_t *a = make(1), *b = make(1);
    size_t n = tt_mlp_param_count(a);
    CU_ASSERT(memcmp(tt_mlp_params(a), tt_mlp_params(b), n * sizeof(float)) == 0);
    size_t off, len;
    tt_mlp_tensor(a, 1, &off, &len); /* layer 0 bias: bound 1/sqrt(6) */
    for (size_t i = off; i < off + len; i++)
        CU_ASSERT(fabsf(tt_mlp_params(a)[i]) <= 1.0f / sqrtf(6.0f));
    tt_mlp_tensor(a, 4, &off, &len); /* layer 2 weight: bound 1/2 */
    float mx = 0;
    for (size_t i = off; i < off + len; i++)
        mx = fabsf(tt_mlp_params(a)[i]) > mx ? fabsf(tt_mlp_params(a)[i]) : mx;
    CU_ASSERT(mx <= 0.5f && mx > 0.2f);
    tt_mlp_init(b, 99);
    CU_ASSERT(memcmp(tt_mlp_params(a), tt_mlp_params(b), n * sizeof(float)) != 0);
    tt_mlp_destroy(&a);
    tt_mlp_destroy(&b);
}

static void mlp_xent_row_stable_for_large_logits(void) {
    float z[3] = {1000.0f, 0.0f, -1000.0f}, dz[3];
    double l = tt_mlp_xent_row(z, 3, 0, dz);
    CU_ASSERT(isfinite(l) && l < 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(tt_mlp_xent_row(z, 3, 1, dz), 1000.0, 1e-3);
    CU_ASSERT_DOUBLE_EQUAL(dz[0], 1.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(dz[1], -1.0, 1e-6);
}

static void mlp_create_rejects_bad_options(void) {
    tt_mlp_t *m = NULL;
    tt_mlp_opts_t o = {.nlayers = 0, .max_batch = 4};
    CU_ASSERT_EQUAL(tt_mlp_create(&m, &o), TT_EINVAL);
    o.nlayers = 1;
    o.dims[0] = 4;
    o.dims[1] = 0;
    CU_ASSERT_EQUAL(tt_mlp_create(&m, &o), TT_EINVAL);
    CU_ASSERT_PTR_NULL(m);
}

/* 1 when a file whose path contains `name` is mapped into this process. */
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, name) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* A CPU-only process must not pay for cuBLAS (0.35 s and 210 MB at start):
 * this program links the CUDA model, yet cuBLAS is mapped only once the
 * probe (or a model) opens it, and then every entry point resolves. */
static void mlp_cuda_opens_cublas_on_demand(void) {
    char err[256] = "";
    CU_ASSERT_FALSE(mapped("libcublas"));
    int rc = tt_mlp_cuda_blas_probe(err, sizeof(err));
    if (!tt_mlp_cuda_compiled()) {
        CU_ASSERT_EQUAL(rc, TT_ENODEV);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "no CUDA support"));
        return;
    }
    if (rc != TT_OK)
        printf("\n  probe: %s\n", err);
    CU_ASSERT_EQUAL(rc, TT_OK);
    CU_ASSERT_TRUE(mapped("libcublas"));
}

/* The product math's names are what tether-train and the GPU tests print;
 * a mode outside the enum is refused in every build, without a model. */
static void mlp_cuda_math_modes(void) {
    CU_ASSERT_STRING_EQUAL(tt_mlp_cuda_math_name(TT_MLP_CUDA_FP32), "fp32");
    CU_ASSERT_STRING_EQUAL(tt_mlp_cuda_math_name(TT_MLP_CUDA_TF32), "tf32");
    CU_ASSERT_STRING_EQUAL(tt_mlp_cuda_math_name(TT_MLP_CUDA_STRICT), "strict");
    CU_ASSERT_STRING_EQUAL(tt_mlp_cuda_math_name((tt_mlp_cuda_math_t)3), "?");
    int rc = tt_mlp_cuda_set_math(NULL, TT_MLP_CUDA_FP32);
    CU_ASSERT_EQUAL(rc, tt_mlp_cuda_compiled() ? TT_EINVAL : TT_ENODEV);
}

static const tt_cunit_test_t tests[] = {
    {"mlp_layout_and_counts", mlp_layout_and_counts},
    {"mlp_forward_matches_naive_reference", mlp_forward_matches_naive_reference},
    {"mlp_gradients_match_finite_differences", mlp_gradients_match_finite_differences},
    {"mlp_backward_accumulates_and_hooks_last_first",
     mlp_backward_accumulates_and_hooks_last_first},
    {"mlp_micro_batches_sum_to_full_batch", mlp_micro_batches_sum_to_full_batch},
    {"mlp_init_deterministic_and_bounded", mlp_init_deterministic_and_bounded},
    {"mlp_xent_row_stable_for_large_logits", mlp_xent_row_stable_for_large_logits},
    {"mlp_create_rejects_bad_options", mlp_create_rejects_bad_options},
    {"mlp_cuda_opens_cublas_on_demand", mlp_cuda_opens_cublas_on_demand},
    {"mlp_cuda_math_modes", mlp_cuda_math_modes},
    {NULL, NULL},
};

TT_CUNIT_MAIN("mlp", tests)
