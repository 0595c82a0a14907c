/* tt_mlp_cuda: the MLP on one CUDA device. Products go through cublasSgemm
 * on row-major buffers by computing the transposed (column-major) product,
 * bias column sums through cublasSgemv with a ones vector, and the
 * element-wise parts through the small kernels below. Scratch is sized for
 * max_batch at create time so steps never allocate. Per-row losses are
 * computed in double like tt_mlp_xent_row so both models agree to float
 * rounding. It does not own optimizer schedules, data or communication.
 *
 * cuBLAS is opened (dlopen) when a model is created, not linked: its
 * libraries' initialisers cost every process that links them about 0.35 s
 * and 210 MB of resident memory at start, which each CPU-only tether-train
 * (and each worker restarted after a failure) paid for nothing, and a node
 * without the CUDA libraries could not start the binary at all. The entry
 * points live in the model (no process-wide table); the library is opened
 * with RTLD_NODELETE because its teardown is not meant to run twice. */
#define restrict __restrict__
extern "C" {
#include "tt_mlp_cuda.h"
#include "tt_rng.h"
#include "tt_status.h"
}
#undef restrict

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB 256

#define TT_STR_(x)    #x
#define TT_STR(x)     TT_STR_(x)
#define CUBLAS_SONAME "libcublas.so." TT_STR(CUBLAS_VER_MAJOR)

/* The cuBLAS entry points the model calls, resolved from the library
 * opened at create time (the _v2 names are what cublas_v2.h maps to). */
typedef struct blas_api {
    void *lib;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemv_v2) sgemv;
    decltype(&cublasGetStatusString) status_string;
} blas_api_t;

struct tt_mlp_cuda {
    int nl, device;
    int dims[TT_MLP_MAX_LAYERS + 1];
    size_t max_batch, nparams, max_dim;
    size_t w_off[TT_MLP_MAX_LAYERS], b_off[TT_MLP_MAX_LAYERS];
    float *p, *g, *s0, *s1;             /* device: params, grads, optimizer state */
    float *acts[TT_MLP_MAX_LAYERS + 1]; /* device; acts[0] is the staged input */
    float *delta[2], *ones;
    uint8_t *labels;  /* device */
    double *row_loss; /* device, max_batch */
    int *row_ok;      /* device, max_batch */
    float *hx;        /* pinned input staging */
    uint8_t *hl;      /* pinned labels */
    double *hloss;    /* pinned */
    int *hok;         /* pinned */
    cudaStream_t stream;
    cublasHandle_t blas;
    blas_api_t api;
    cudaEvent_t ev[2 * TT_MLP_MAX_LAYERS];
    char err[256];
};

/* ---- kernels ---- */

__global__ static void k_bias_act(float *y, const float *b, size_t rows, size_t n, int relu) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n)
        return;
    float v = y[i] + b[i % n];
    y[i] = relu && v <= 0.0f ? 0.0f : v;
}

__global__ static void k_relu_mask(float *d, const float *a, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(a[i] > 0.0f))
        d[i] = 0.0f;
}

/* One thread per row: classes are few (10 for Fashion-MNIST), and double
 * accumulation matches the host's tt_mlp_xent_row. dz may be NULL. */
__global__ static void k_xent(const float *z, const uint8_t *lab, size_t rows, int k, float *dz,
                              double *loss, int *ok) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *zr = z + r * (size_t)k;
    float mx = zr[0];
    int best = 0;
    for (int j = 1; j < k; j++) {
        mx = zr[j] > mx ? zr[j] : mx;
        best = zr[j] > zr[best] ? j : best;
    }
    double sum = 0.0;
    for (int j = 0; j < k; j++)
        sum += exp((double)(zr[j] - mx));
    double lse = (double)mx + log(sum);
    if (dz != NULL) {
        float *dr = dz + r * (size_t)k;
        for (int j = 0; j < k; j++)
            dr[j] = (float)exp((double)zr[j] - lse);
        dr[lab[r]] -= 1.0f;
    }
    loss[r] = lse - (double)zr[lab[r]];
    ok[r] = best == lab[r];
}

__global__ static void k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float gs,
                             float wd, float mu, float a, float c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = gs * g[i] + wd * p[i];
    if (buf == NULL) {
        p[i] -= lr * gi;
        return;
    }
    float b = mu * buf[i] + gi;
    buf[i] = b;
    p[i] -= lr * (a * gi + c * b);
}

__global__ static void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float gs,
                               float b1, float b2, float eps, float step, float decay,
                               float inv_sqrt_bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = gs * g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

__global__ static void k_fill(float *x, size_t n, float val) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = val;
}

static unsigned blocks(size_t n) {
    return (unsigned)((n + TB - 1) / TB);
}

/* ---- error plumbing ---- */

static int fail(tt_mlp_cuda_t *m, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof(m->err), fmt, ap);
    va_end(ap);
    return rc;
}

static int cu(tt_mlp_cuda_t *m, cudaError_t e, const char *what) {
    if (e == cudaSuccess)
        return TT_OK;
    return fail(m, e == cudaErrorMemoryAllocation ? TT_ENOMEM : TT_ECUDA, "cuda: %s: %s (%s)", what,
                cudaGetErrorString(e), cudaGetErrorName(e));
}

static int cb(tt_mlp_cuda_t *m, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS)
        return TT_OK;
    return fail(m, s == CUBLAS_STATUS_ALLOC_FAILED ? TT_ENOMEM : TT_ECUDA, "cublas: %s: %s", what,
                m->api.status_string(s));
}

/* A launch's configuration errors surface here, its faults at the next sync. */
static int launched(tt_mlp_cuda_t *m, const char *what) {
    return cu(m, cudaGetLastError(), what);
}

#define CK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- cuBLAS, opened on demand ---- */

/* Resolves one entry point; 1 (and *missing = name) when absent, so the
 * calls below stop at the first gap. */
template <typename F>
static int blas_sym(void *lib, const char *name, F *out, const char **missing) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out == NULL)
        *missing = name;
    return *out == NULL;
}

static void blas_close(blas_api_t *a) {
    if (a->lib != NULL)
        dlclose(a->lib);
    memset(a, 0, sizeof(*a));
}

/* TT_ENODEV, with the loader's reason in err, when the library or one of
 * its entry points is missing. */
static int blas_open(blas_api_t *a, char *err, size_t errlen) {
    memset(a, 0, sizeof(*a));
    a->lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (a->lib == NULL) {
        snprintf(err, errlen, "cannot load cuBLAS: %s", dlerror());
        return TT_ENODEV;
    }
    const char *missing = NULL;
    void *l = a->lib;
    if (!(blas_sym(l, "cublasCreate_v2", &a->create, &missing) ||
          blas_sym(l, "cublasDestroy_v2", &a->destroy, &missing) ||
          blas_sym(l, "cublasSetStream_v2", &a->set_stream, &missing) ||
          blas_sym(l, "cublasSetMathMode", &a->set_math_mode, &missing) ||
          blas_sym(l, "cublasSgemm_v2", &a->sgemm, &missing) ||
          blas_sym(l, "cublasSgemv_v2", &a->sgemv, &missing) ||
          blas_sym(l, "cublasGetStatusString", &a->status_string, &missing)))
        return TT_OK;
    snprintf(err, errlen, "cannot load cuBLAS: %s has no %s", CUBLAS_SONAME, missing);
    blas_close(a);
    return TT_ENODEV;
}

extern "C" int tt_mlp_cuda_blas_probe(char *err, size_t errlen) {
    char local[256];
    blas_api_t a;
    int rc = blas_open(&a, err != NULL && errlen > 0 ? err : local,
                       err != NULL && errlen > 0 ? errlen : sizeof(local));
    if (rc == TT_OK)
        blas_close(&a);
    return rc;
}

/* ---- lifetime ---- */

static int opts_ok(const tt_mlp_opts_t *o) {
    if (o == NULL || o->nlayers < 1 || o->nlayers > TT_MLP_MAX_LAYERS || o->max_batch == 0 ||
        o->max_batch > (1u << 24))
        return 0;
    for (int l = 0; l <= o->nlayers; l++) {
        if (o->dims[l] < 1 || o->dims[l] > (1 << 20))
            return 0;
    }
    return 1;
}

static void layout(tt_mlp_cuda_t *m) {
    m->nparams = 0;
    m->max_dim = 0;
    for (int l = 0; l < m->nl; l++) {
        m->w_off[l] = m->nparams;
        m->nparams += (size_t)m->dims[l] * (size_t)m->dims[l + 1];
        m->b_off[l] = m->nparams;
        m->nparams += (size_t)m->dims[l + 1];
    }
    for (int l = 0; l <= m->nl; l++)
        m->max_dim = (size_t)m->dims[l] > m->max_dim ? (size_t)m->dims[l] : m->max_dim;
}

static int dalloc(tt_mlp_cuda_t *m, void *pp, size_t bytes, const char *what) {
    CK(cu(m, cudaMalloc((void **)pp, bytes), what));
    return cu(m, cudaMemsetAsync(*(void **)pp, 0, bytes, m->stream), what);
}

static int alloc_device(tt_mlp_cuda_t *m) {
    size_t fb = sizeof(float), mb = m->max_batch;
    CK(dalloc(m, &m->p, m->nparams * fb, "cudaMalloc(parameters)"));
    CK(dalloc(m, &m->g, m->nparams * fb, "cudaMalloc(gradients)"));
    CK(dalloc(m, &m->s0, m->nparams * fb, "cudaMalloc(optimizer state 0)"));
    CK(dalloc(m, &m->s1, m->nparams * fb, "cudaMalloc(optimizer state 1)"));
    for (int l = 0; l <= m->nl; l++)
        CK(dalloc(m, &m->acts[l], mb * (size_t)m->dims[l] * fb, "cudaMalloc(activations)"));
    CK(dalloc(m, &m->delta[0], mb * m->max_dim * fb, "cudaMalloc(delta)"));
    CK(dalloc(m, &m->delta[1], mb * m->max_dim * fb, "cudaMalloc(delta)"));
    CK(dalloc(m, &m->ones, mb * fb, "cudaMalloc(ones)"));
    CK(dalloc(m, &m->labels, mb, "cudaMalloc(labels)"));
    CK(dalloc(m, &m->row_loss, mb * sizeof(double), "cudaMalloc(losses)"));
    CK(dalloc(m, &m->row_ok, mb * sizeof(int), "cudaMalloc(correct)"));
    k_fill<<<blocks(mb), TB, 0, m->stream>>>(m->ones, mb, 1.0f);
    return launched(m, "fill ones");
}

static int alloc_host(tt_mlp_cuda_t *m) {
    size_t mb = m->max_batch;
    CK(cu(m, cudaMallocHost((void **)&m->hx, mb * (size_t)m->dims[0] * sizeof(float)),
          "cudaMallocHost(inputs)"));
    CK(cu(m, cudaMallocHost((void **)&m->hl, mb), "cudaMallocHost(labels)"));
    CK(cu(m, cudaMallocHost((void **)&m->hloss, mb * sizeof(double)), "cudaMallocHost(losses)"));
    return cu(m, cudaMallocHost((void **)&m->hok, mb * sizeof(int)), "cudaMallocHost(correct)");
}

static int setup(tt_mlp_cuda_t *m) {
    CK(cu(m, cudaSetDevice(m->device), "cudaSetDevice"));
    CK(cu(m, cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    CK(cb(m, m->api.create(&m->blas), "cublasCreate"));
    CK(cb(m, m->api.set_stream(m->blas, m->stream), "cublasSetStream"));
    /* Plain FP32 (no TF32 tensor cores) until told otherwise: the CPU
     * model is the reference. */
    CK(tt_mlp_cuda_set_math(m, TT_MLP_CUDA_FP32));
    for (int i = 0; i < 2 * m->nl; i++)
        CK(cu(m, cudaEventCreateWithFlags(&m->ev[i], cudaEventDisableTiming), "cudaEventCreate"));
    CK(alloc_device(m));
    CK(alloc_host(m));
    return cu(m, cudaStreamSynchronize(m->stream), "cudaStreamSynchronize(setup)");
}

extern "C" int tt_mlp_cuda_set_math(tt_mlp_cuda_t *m, tt_mlp_cuda_math_t math) {
    static const cublasMath_t modes[] = {CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH,
                                         CUBLAS_PEDANTIC_MATH};
    if (m == NULL || (unsigned)math >= sizeof(modes) / sizeof(modes[0]))
        return TT_EINVAL;
    return cb(m, m->api.set_math_mode(m->blas, modes[math]), "cublasSetMathMode");
}

extern "C" int tt_mlp_cuda_compiled(void) {
    return 1;
}

extern "C" int tt_mlp_cuda_create(tt_mlp_cuda_t **out, const tt_mlp_opts_t *opts, int device,
                                  char *err, size_t errlen) {
    int n = 0;
    if (out == NULL || !opts_ok(opts) || device < 0)
        return TT_EINVAL;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device >= n) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error */
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "no CUDA device %d (this machine has %d)", device, n);
        return TT_ENODEV;
    }
    tt_mlp_cuda_t *m = (tt_mlp_cuda_t *)calloc(1, sizeof(*m));
    if (m == NULL)
        return TT_ENOMEM;
    m->nl = opts->nlayers;
    m->device = device;
    memcpy(m->dims, opts->dims, sizeof(m->dims));
    m->max_batch = opts->max_batch;
    layout(m);
    int rc = blas_open(&m->api, m->err, sizeof(m->err));
    if (rc == TT_OK)
        rc = setup(m);
    if (rc < 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s", m->err);
        tt_mlp_cuda_destroy(&m);
        return rc;
    }
    *out = m;
    return TT_OK;
}

extern "C" void tt_mlp_cuda_destroy(tt_mlp_cuda_t **mp) {
    if (mp == NULL || *mp == NULL)
        return;
    tt_mlp_cuda_t *m = *mp;
    if (m->stream != NULL)
        (void)cudaStreamSynchronize(m->stream); /* nothing in flight may see freed memory */
    void *dev[] = {m->p,        m->g,    m->s0,     m->s1,       m->delta[0],
                   m->delta[1], m->ones, m->labels, m->row_loss, m->row_ok};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        (void)cudaFree(dev[i]);
    for (int l = 0; l <= m->nl; l++)
        (void)cudaFree(m->acts[l]);
    void *pinned[] = {m->hx, m->hl, m->hloss, m->hok};
    for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++)
        (void)cudaFreeHost(pinned[i]);
    for (int i = 0; i < 2 * m->nl; i++) {
        if (m->ev[i] != NULL)
            (void)cudaEventDestroy(m->ev[i]);
    }
    if (m->blas != NULL)
        (void)m->api.destroy(m->blas);
    blas_close(&m->api);
    if (m->stream != NULL)
        (void)cudaStreamDestroy(m->stream);
    free(m);
    *mp = NULL;
}

/* ---- buffers ---- */

extern "C" size_t tt_mlp_cuda_param_count(const tt_mlp_cuda_t *m) {
    return m->nparams;
}
extern "C" int tt_mlp_cuda_tensor_count(const tt_mlp_cuda_t *m) {
    return 2 * m->nl;
}
extern "C" int tt_mlp_cuda_tensor(const tt_mlp_cuda_t *m, int tensor, size_t *offset, size_t *len) {
    if (tensor < 0 || tensor >= 2 * m->nl)
        return TT_EINVAL;
    int l = tensor / 2;
    size_t out_l = (size_t)m->dims[l + 1];
    *offset = tensor % 2 ? m->b_off[l] : m->w_off[l];
    *len = tensor % 2 ? out_l : out_l * (size_t)m->dims[l];
    return TT_OK;
}
extern "C" void *tt_mlp_cuda_dev_params(tt_mlp_cuda_t *m) {
    return m->p;
}
extern "C" void *tt_mlp_cuda_dev_grads(tt_mlp_cuda_t *m) {
    return m->g;
}
extern "C" void *tt_mlp_cuda_stream(tt_mlp_cuda_t *m) {
    return m->stream;
}
extern "C" void *tt_mlp_cuda_grad_event(tt_mlp_cuda_t *m, int tensor) {
    return tensor < 0 || tensor >= 2 * m->nl ? NULL : m->ev[tensor];
}
extern "C" const char *tt_mlp_cuda_last_error(const tt_mlp_cuda_t *m) {
    return m->err;
}

extern "C" int tt_mlp_cuda_sync(tt_mlp_cuda_t *m) {
    return cu(m, cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
}

/* Synchronous copy of a whole flat buffer in either direction. */
static int copy_flat(tt_mlp_cuda_t *m, void *dst, const void *src, size_t n, cudaMemcpyKind k,
                     const char *what) {
    if (n != m->nparams || dst == NULL || src == NULL)
        return fail(m, TT_EINVAL, "%s: %zu floats given, the model has %zu", what, n, m->nparams);
    CK(cu(m, cudaMemcpyAsync(dst, src, n * sizeof(float), k, m->stream), what));
    return tt_mlp_cuda_sync(m);
}

extern "C" int tt_mlp_cuda_set_params(tt_mlp_cuda_t *m, const float *host, size_t n) {
    return copy_flat(m, m->p, host, n, cudaMemcpyHostToDevice, "set_params");
}
extern "C" int tt_mlp_cuda_get_params(tt_mlp_cuda_t *m, float *host, size_t n) {
    return copy_flat(m, host, m->p, n, cudaMemcpyDeviceToHost, "get_params");
}
extern "C" int tt_mlp_cuda_set_grads(tt_mlp_cuda_t *m, const float *host, size_t n) {
    return copy_flat(m, m->g, host, n, cudaMemcpyHostToDevice, "set_grads");
}
extern "C" int tt_mlp_cuda_get_grads(tt_mlp_cuda_t *m, float *host, size_t n) {
    return copy_flat(m, host, m->g, n, cudaMemcpyDeviceToHost, "get_grads");
}
extern "C" int tt_mlp_cuda_get_opt_state(tt_mlp_cuda_t *m, int which, float *host, size_t n) {
    return copy_flat(m, host, which ? m->s1 : m->s0, n, cudaMemcpyDeviceToHost, "get_opt_state");
}
extern "C" int tt_mlp_cuda_set_opt_state(tt_mlp_cuda_t *m, int which, const float *host, size_t n) {
    return copy_flat(m, which ? m->s1 : m->s0, host, n, cudaMemcpyHostToDevice, "set_opt_state");
}

extern "C" int tt_mlp_cuda_zero_grads(tt_mlp_cuda_t *m) {
    return cu(m, cudaMemsetAsync(m->g, 0, m->nparams * sizeof(float), m->stream), "zero grads");
}

/* The numbers of tt_mlp_init: drawn on the host in flat order, copied up. */
extern "C" int tt_mlp_cuda_init(tt_mlp_cuda_t *m, uint64_t seed) {
    float *h = (float *)malloc(m->nparams * sizeof(float));
    if (h == NULL)
        return fail(m, TT_ENOMEM, "init: no memory for %zu floats", m->nparams);
    uint64_t state = seed;
    for (int l = 0; l < m->nl; l++) {
        float bound = 1.0f / sqrtf((float)m->dims[l]);
        size_t end = m->b_off[l] + (size_t)m->dims[l + 1];
        for (size_t i = m->w_off[l]; i < end; i++)
            h[i] = (2.0f * tt_rng_unit_float(&state) - 1.0f) * bound;
    }
    int rc = tt_mlp_cuda_set_params(m, h, m->nparams);
    free(h);
    size_t bytes = m->nparams * sizeof(float);
    if (rc == TT_OK)
        rc = cu(m, cudaMemsetAsync(m->s0, 0, bytes, m->stream), "init: zero state");
    if (rc == TT_OK)
        rc = cu(m, cudaMemsetAsync(m->s1, 0, bytes, m->stream), "init: zero state");
    if (rc == TT_OK)
        rc = tt_mlp_cuda_zero_grads(m);
    return rc == TT_OK ? tt_mlp_cuda_sync(m) : rc;
}

/* ---- forward / backward ---- */

/* Copies rows of x (and labels) through pinned memory to the device. The
 * previous batch's copies have completed: every batch ends with a sync. */
static int stage(tt_mlp_cuda_t *m, const float *x, const uint8_t *lab, size_t rows) {
    int k = m->dims[m->nl];
    for (size_t r = 0; lab != NULL && r < rows; r++) {
        if (lab[r] >= k)
            return fail(m, TT_EINVAL, "label %u of row %zu is not below %d classes",
                        (unsigned)lab[r], r, k);
    }
    size_t xb = rows * (size_t)m->dims[0] * sizeof(float);
    memcpy(m->hx, x, xb);
    CK(cu(m, cudaMemcpyAsync(m->acts[0], m->hx, xb, cudaMemcpyHostToDevice, m->stream),
          "stage inputs"));
    if (lab == NULL)
        return TT_OK;
    memcpy(m->hl, lab, rows);
    return cu(m, cudaMemcpyAsync(m->labels, m->hl, rows, cudaMemcpyHostToDevice, m->stream),
              "stage labels");
}

/* Row-major Y = X W^T is column-major Y^T = W X^T: op(W) = T (W's buffer
 * read column-major is W^T), op(X) = N. */
static int forward_dev(tt_mlp_cuda_t *m, size_t rows) {
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < m->nl; l++) {
        int ni = m->dims[l], no = m->dims[l + 1];
        CK(cb(m,
              m->api.sgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, no, (int)rows, ni, &one,
                           m->p + m->w_off[l], ni, m->acts[l], ni, &zero, m->acts[l + 1], no),
              "sgemm forward"));
        size_t n = rows * (size_t)no;
        k_bias_act<<<blocks(n), TB, 0, m->stream>>>(m->acts[l + 1], m->p + m->b_off[l], rows,
                                                    (size_t)no, l + 1 < m->nl);
        CK(launched(m, "bias/relu kernel"));
    }
    return TT_OK;
}

/* Gradients of layer l from delta d: dW^T += X^T-view . d (col-major
 * dW^T = X^T D), db += D^T 1 (gemv over the row-major delta). */
static int layer_grads(tt_mlp_cuda_t *m, int l, const float *d, size_t rows) {
    const float one = 1.0f;
    int ni = m->dims[l], no = m->dims[l + 1];
    CK(cb(m,
          m->api.sgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, ni, no, (int)rows, &one, m->acts[l], ni,
                       d, no, &one, m->g + m->w_off[l], ni),
          "sgemm weight gradient"));
    CK(cu(m, cudaEventRecord(m->ev[2 * l], m->stream), "cudaEventRecord"));
    CK(cb(m,
          m->api.sgemv(m->blas, CUBLAS_OP_N, no, (int)rows, &one, d, no, m->ones, 1, &one,
                       m->g + m->b_off[l], 1),
          "sgemv bias gradient"));
    return cu(m, cudaEventRecord(m->ev[2 * l + 1], m->stream), "cudaEventRecord");
}

static int backward_dev(tt_mlp_cuda_t *m, size_t rows, tt_mlp_grad_hook_fn hook, void *ctx) {
    const float one = 1.0f, zero = 0.0f;
    int cur = 0;
    for (int l = m->nl - 1; l >= 0; l--) {
        int ni = m->dims[l], no = m->dims[l + 1];
        const float *d = m->delta[cur];
        CK(layer_grads(m, l, d, rows));
        if (hook != NULL) {
            CK(hook(ctx, 2 * l));
            CK(hook(ctx, 2 * l + 1));
        }
        if (l == 0)
            break;
        /* delta_prev = D W: column-major dp^T = W^T-view . D^T-view. */
        float *nd = m->delta[1 - cur];
        CK(cb(m,
              m->api.sgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, (int)rows, no, &one,
                           m->p + m->w_off[l], ni, d, no, &zero, nd, ni),
              "sgemm delta"));
        size_t n = rows * (size_t)ni;
        k_relu_mask<<<blocks(n), TB, 0, m->stream>>>(nd, m->acts[l], n);
        CK(launched(m, "relu mask kernel"));
        cur = 1 - cur;
    }
    return TT_OK;
}

/* Per-row losses and hits on the device, copied to the pinned buffers. */
static int loss_dev(tt_mlp_cuda_t *m, size_t rows, float *dz) {
    k_xent<<<blocks(rows), TB, 0, m->stream>>>(m->acts[m->nl], m->labels, rows, m->dims[m->nl], dz,
                                               m->row_loss, m->row_ok);
    CK(launched(m, "softmax cross-entropy kernel"));
    CK(cu(m,
          cudaMemcpyAsync(m->hloss, m->row_loss, rows * sizeof(double), cudaMemcpyDeviceToHost,
                          m->stream),
          "copy losses"));
    CK(cu(m,
          cudaMemcpyAsync(m->hok, m->row_ok, rows * sizeof(int), cudaMemcpyDeviceToHost, m->stream),
          "copy correct"));
    return TT_OK;
}

static void sum_rows(const tt_mlp_cuda_t *m, size_t rows, double *loss, size_t *ok) {
    for (size_t r = 0; r < rows; r++) {
        *loss += m->hloss[r];
        *ok += (size_t)m->hok[r];
    }
}

extern "C" int tt_mlp_cuda_train_batch(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels,
                                       size_t rows, tt_mlp_grad_hook_fn hook, void *ctx,
                                       double *loss_sum, size_t *correct) {
    if (rows == 0 || rows > m->max_batch)
        return fail(m, TT_EINVAL, "train_batch: %zu rows (max_batch %zu)", rows, m->max_batch);
    int rc = stage(m, x, labels, rows);
    if (rc == TT_OK)
        rc = forward_dev(m, rows);
    if (rc == TT_OK)
        rc = loss_dev(m, rows, m->delta[0]);
    if (rc == TT_OK)
        rc = backward_dev(m, rows, hook, ctx);
    /* Also on failure: the pinned staging buffers must be idle before the
     * next batch overwrites them. */
    int src = tt_mlp_cuda_sync(m);
    CK(rc < 0 ? rc : src);
    double ls = 0.0;
    size_t ok = 0;
    sum_rows(m, rows, &ls, &ok);
    if (loss_sum != NULL)
        *loss_sum = ls;
    if (correct != NULL)
        *correct = ok;
    return TT_OK;
}

extern "C" int tt_mlp_cuda_forward(tt_mlp_cuda_t *m, const float *x, size_t rows, float *logits) {
    if (rows == 0 || rows > m->max_batch)
        return fail(m, TT_EINVAL, "forward: %zu rows (max_batch %zu)", rows, m->max_batch);
    size_t bytes = rows * (size_t)m->dims[m->nl] * sizeof(float);
    int rc = stage(m, x, NULL, rows);
    if (rc == TT_OK)
        rc = forward_dev(m, rows);
    if (rc == TT_OK)
        rc =
            cu(m, cudaMemcpyAsync(logits, m->acts[m->nl], bytes, cudaMemcpyDeviceToHost, m->stream),
               "copy logits");
    int src = tt_mlp_cuda_sync(m); /* the staging buffer must be idle again */
    return rc < 0 ? rc : src;
}

extern "C" int tt_mlp_cuda_evaluate(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels,
                                    size_t rows, double *loss_sum, size_t *correct) {
    double ls = 0.0;
    size_t ok = 0, in = (size_t)m->dims[0];
    for (size_t r = 0; r < rows; r += m->max_batch) {
        size_t n = rows - r < m->max_batch ? rows - r : m->max_batch;
        int rc = stage(m, x + r * in, labels + r, n);
        if (rc == TT_OK)
            rc = forward_dev(m, n);
        if (rc == TT_OK)
            rc = loss_dev(m, n, NULL);
        int src = tt_mlp_cuda_sync(m);
        CK(rc < 0 ? rc : src);
        sum_rows(m, n, &ls, &ok);
    }
    *loss_sum = ls;
    *correct = ok;
    return TT_OK;
}

/* ---- optimizer ---- */

extern "C" int tt_mlp_cuda_sgd_step(tt_mlp_cuda_t *m, float lr, float grad_scale,
                                    const tt_optim_sgd_hp_t *hp) {
    /* The coefficients of tt_optim_sgd_step: d = a g' + c buf_new. */
    float mu = hp->momentum;
    float a = hp->nesterov ? 1.0f : 0.0f, c = hp->nesterov ? mu : 1.0f;
    float *buf = mu == 0.0f ? NULL : m->s0;
    k_sgd<<<blocks(m->nparams), TB, 0, m->stream>>>(m->p, m->g, buf, m->nparams, lr, grad_scale,
                                                    hp->weight_decay, mu, a, c);
    return launched(m, "sgd kernel");
}

extern "C" int tt_mlp_cuda_adamw_step(tt_mlp_cuda_t *m, float lr, float grad_scale, uint64_t t,
                                      const tt_optim_adamw_hp_t *hp) {
    /* Bias corrections computed on the host exactly as tt_optim does. */
    double tt = (double)(t == 0 ? 1 : t);
    float bc1 = (float)(1.0 - pow((double)hp->beta1, tt));
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow((double)hp->beta2, tt)));
    float step = lr / bc1, decay = 1.0f - lr * hp->weight_decay;
    k_adamw<<<blocks(m->nparams), TB, 0, m->stream>>>(m->p, m->g, m->s0, m->s1, m->nparams,
                                                      grad_scale, hp->beta1, hp->beta2, hp->eps,
                                                      step, decay, inv_sqrt_bc2);
    return launched(m, "adamw kernel");
}
