/* tt_mlp: MLP forward/backward. All matrix products go through cblas_sgemm
 * with transpose flags (never an explicit transpose or a hand-written
 * product); bias, ReLU, softmax and column sums are plain loops the compiler
 * vectorises. Scratch for activations and back-propagated deltas is sized
 * for max_batch at create time, so training steps never allocate. It does
 * not own optimizer state or know how gradients are communicated. */
#include "tt_mlp.h"

#include "tt_rng.h"
#include "tt_status.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tt_mlp {
    int nl;
    int dims[TT_MLP_MAX_LAYERS + 1];
    size_t max_batch, nparams;
    size_t w_off[TT_MLP_MAX_LAYERS], b_off[TT_MLP_MAX_LAYERS];
    float *params, *grads;
    float *acts[TT_MLP_MAX_LAYERS + 1]; /* acts[l] = output of layer l-1 */
    float *delta[2];                    /* ping-pong back-prop buffers */
};

static int mlp_opts_ok(const tt_mlp_opts_t *o) {
    if (o == NULL || o->nlayers < 1 || o->nlayers > TT_MLP_MAX_LAYERS || o->max_batch == 0 ||
        o->max_batch > (1u << 24))
        return 0;
    for (int l = 0; l <= o->nlayers; l++) {
        if (o->dims[l] < 1 || o->dims[l] > (1 << 20))
            return 0;
    }
    return 1;
}

static int mlp_alloc(tt_mlp_t *m) {
    size_t max_dim = 0;
    m->nparams = 0;
    for (int l = 0; l < m->nl; l++) {
        m->w_off[l] = m->nparams;
        m->nparams += (size_t)m->dims[l] * (size_t)m->dims[l + 1];
        m->b_off[l] = m->nparams;
        m->nparams += (size_t)m->dims[l + 1];
    }
    for (int l = 1; l <= m->nl; l++) {
        size_t d = (size_t)m->dims[l];
        max_dim = d > max_dim ? d : max_dim;
        m->acts[l] = malloc(m->max_batch * d * sizeof(float));
        if (m->acts[l] == NULL)
            return TT_ENOMEM;
    }
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->delta[0] = malloc(m->max_batch * max_dim * sizeof(float));
    m->delta[1] = malloc(m->max_batch * max_dim * sizeof(float));
    if (!m->params || !m->grads || !m->delta[0] || !m->delta[1])
        return TT_ENOMEM;
    return TT_OK;
}

int tt_mlp_create(tt_mlp_t **out, const tt_mlp_opts_t *opts) {
    if (out == NULL || !mlp_opts_ok(opts))
        return TT_EINVAL;
    tt_mlp_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return TT_ENOMEM;
    m->nl = opts->nlayers;
    memcpy(m->dims, opts->dims, sizeof(m->dims));
    m->max_batch = opts->max_batch;
    int rc = mlp_alloc(m);
    if (rc < 0) {
        tt_mlp_destroy(&m);
        return rc;
    }
    *out = m;
    return TT_OK;
}

void tt_mlp_destroy(tt_mlp_t **mp) {
    if (mp == NULL || *mp == NULL)
        return;
    tt_mlp_t *m = *mp;
    for (int l = 1; l <= m->nl; l++)
        free(m->acts[l]);
    free(m->params);
    free(m->grads);
    free(m->delta[0]);
    free(m->delta[1]);
    free(m);
    *mp = NULL;
}

void tt_mlp_init(tt_mlp_t *m, uint64_t seed) {
    uint64_t state = seed;
    for (int l = 0; l < m->nl; l++) {
        float bound = 1.0f / sqrtf((float)m->dims[l]);
        size_t end = m->b_off[l] + (size_t)m->dims[l + 1];
        for (size_t i = m->w_off[l]; i < end; i++)
            m->params[i] = (2.0f * tt_rng_unit_float(&state) - 1.0f) * bound;
    }
    memset(m->grads, 0, m->nparams * sizeof(float));
}

float *tt_mlp_params(tt_mlp_t *m) {
    return m->params;
}
float *tt_mlp_grads(tt_mlp_t *m) {
    return m->grads;
}
size_t tt_mlp_param_count(const tt_mlp_t *m) {
    return m->nparams;
}
int tt_mlp_tensor_count(const tt_mlp_t *m) {
    return 2 * m->nl;
}

int tt_mlp_tensor(const tt_mlp_t *m, int tensor, size_t *offset, size_t *len) {
    if (tensor < 0 || tensor >= 2 * m->nl)
        return TT_EINVAL;
    int l = tensor / 2;
    size_t out_l = (size_t)m->dims[l + 1];
    *offset = tensor % 2 ? m->b_off[l] : m->w_off[l];
    *len = tensor % 2 ? out_l : out_l * (size_t)m->dims[l];
    return TT_OK;
}

/* y = relu?(y + b) over rows x n; `relu` is hoisted out of the loops. */
static void bias_act(float *restrict y, const float *restrict b, size_t rows, size_t n, int relu) {
    for (size_t r = 0; r < rows; r++) {
        float *restrict row = y + r * n;
        if (relu) {
            for (size_t j = 0; j < n; j++) {
                float v = row[j] + b[j];
                row[j] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (size_t j = 0; j < n; j++)
                row[j] += b[j];
        }
    }
}

const float *tt_mlp_forward(tt_mlp_t *m, const float *x, size_t rows) {
    if (rows == 0 || rows > m->max_batch)
        return NULL;
    const float *in = x;
    for (int l = 0; l < m->nl; l++) {
        int ni = m->dims[l], no = m->dims[l + 1];
        float *y = m->acts[l + 1];
        /* Y = X W^T: W is out x in row-major, so ask sgemm to transpose it. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, no, ni, 1.0f, in, ni,
                    m->params + m->w_off[l], ni, 0.0f, y, no);
        bias_act(y, m->params + m->b_off[l], rows, (size_t)no, l + 1 < m->nl);
        in = y;
    }
    return m->acts[m->nl];
}

double tt_mlp_xent_row(const float *z, int k, int label, float *dz) {
    if (k <= 0)
        return 0.0;
    float mx = z[0];
    for (int j = 1; j < k; j++)
        mx = z[j] > mx ? z[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < k; j++)
        sum += exp((double)(z[j] - mx));
    /* sum >= 1: the largest logit contributes exp(0). */
    // cppcheck-suppress invalidFunctionArg
    double lse = (double)mx + log(sum);
    if (dz != NULL) {
        for (int j = 0; j < k; j++)
            dz[j] = (float)(exp((double)z[j] - lse));
        dz[label] -= 1.0f;
    }
    return lse - (double)z[label];
}

static int argmax_row(const float *z, int k) {
    int best = 0;
    for (int j = 1; j < k; j++)
        best = z[j] > z[best] ? j : best;
    return best;
}

/* Loss, accuracy and dL/dlogits (into delta) for a batch of logits. */
static int mlp_loss(const tt_mlp_t *m, const float *logits, const uint8_t *lab, size_t rows,
                    float *delta, double *loss, size_t *correct) {
    int k = m->dims[m->nl];
    double ls = 0.0;
    size_t ok = 0;
    for (size_t r = 0; r < rows; r++) {
        if (lab[r] >= k)
            return TT_EINVAL;
        const float *z = logits + r * (size_t)k;
        ls += tt_mlp_xent_row(z, k, lab[r], delta ? delta + r * (size_t)k : NULL);
        ok += argmax_row(z, k) == lab[r];
    }
    if (loss)
        *loss += ls;
    if (correct)
        *correct += ok;
    return TT_OK;
}

/* db += column sums of delta (rows x n). */
static void col_sum_add(float *restrict db, const float *restrict d, size_t rows, size_t n) {
    for (size_t r = 0; r < rows; r++) {
        const float *restrict row = d + r * n;
        for (size_t j = 0; j < n; j++)
            db[j] += row[j];
    }
}

/* d *= (a > 0): back-propagates through the ReLU that produced a. */
static void relu_mask(float *restrict d, const float *restrict a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

static int mlp_backward(tt_mlp_t *m, const float *x, size_t rows, tt_mlp_grad_hook_fn hook,
                        void *ctx) {
    int cur = 0;
    for (int l = m->nl - 1; l >= 0; l--) {
        int ni = m->dims[l], no = m->dims[l + 1];
        const float *in = l == 0 ? x : m->acts[l];
        const float *d = m->delta[cur];
        /* dW += delta^T X (sum over rows, accumulating: beta = 1). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, no, ni, (int)rows, 1.0f, d, no, in, ni,
                    1.0f, m->grads + m->w_off[l], ni);
        col_sum_add(m->grads + m->b_off[l], d, rows, (size_t)no);
        if (hook != NULL) {
            int rc = hook(ctx, 2 * l);
            if (rc >= 0)
                rc = hook(ctx, 2 * l + 1);
            if (rc < 0)
                return rc;
        }
        if (l == 0)
            break;
        /* delta_prev = delta W, then through the ReLU of layer l-1. */
        float *nd = m->delta[1 - cur];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, ni, no, 1.0f, d, no,
                    m->params + m->w_off[l], ni, 0.0f, nd, ni);
        relu_mask(nd, m->acts[l], rows * (size_t)ni);
        cur = 1 - cur;
    }
    return TT_OK;
}

int tt_mlp_train_batch(tt_mlp_t *m, const float *x, const uint8_t *labels, size_t rows,
                       tt_mlp_grad_hook_fn hook, void *ctx, double *loss_sum, size_t *correct) {
    const float *logits = tt_mlp_forward(m, x, rows);
    if (logits == NULL)
        return TT_EINVAL;
    double ls = 0.0;
    size_t ok = 0;
    int rc = mlp_loss(m, logits, labels, rows, m->delta[0], &ls, &ok);
    if (rc < 0)
        return rc;
    rc = mlp_backward(m, x, rows, hook, ctx);
    if (rc < 0)
        return rc;
    if (loss_sum)
        *loss_sum = ls;
    if (correct)
        *correct = ok;
    return TT_OK;
}

int tt_mlp_evaluate(tt_mlp_t *m, const float *x, const uint8_t *labels, size_t rows,
                    double *loss_sum, size_t *correct) {
    double ls = 0.0;
    size_t ok = 0;
    size_t in = (size_t)m->dims[0];
    for (size_t r = 0; r < rows; r += m->max_batch) {
        size_t n = rows - r < m->max_batch ? rows - r : m->max_batch;
        const float *logits = tt_mlp_forward(m, x + r * in, n);
        int rc = mlp_loss(m, logits, labels + r, n, NULL, &ls, &ok);
        if (rc < 0)
            return rc;
    }
    *loss_sum = ls;
    *correct = ok;
    return TT_OK;
}
