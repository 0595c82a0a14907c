/* tt_mlp_cuda: the CUDA twin of tt_mlp. Same model, same flat layout (tensor
 * 2l is W_l, out_l x in_l row-major, tensor 2l+1 is b_l, back to back) and
 * the same semantics (train_batch ADDS gradient SUMS of the summed
 * cross-entropy; init draws the same numbers as tt_mlp_init), with the
 * parameters, gradients, optimizer state and activations in device memory:
 * cuBLAS cublasSgemm for the products, CUDA kernels for bias, ReLU, softmax
 * cross-entropy and the optimizer updates (the math of tt_optim). Inputs
 * are staged through pinned host buffers; everything runs on one compute
 * stream owned by the model. It does not own data, communication or the
 * training loop: a trainer moves gradients in and out through the host
 * copies below or hands the device pointers to a device collective.
 *
 * Builds without CUDA compile tt_mlp_cuda_stub.c: create returns TT_ENODEV
 * with a sentence saying so, so callers can refuse `--device cuda` cleanly.
 *
 * Threads: one model is used by one thread at a time. CUDA handles (stream,
 * events) are returned as void * so C callers need no CUDA headers. */
#ifndef TT_MLP_CUDA_H
#define TT_MLP_CUDA_H

#include "tt_mlp.h"
#include "tt_optim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tt_mlp_cuda tt_mlp_cuda_t;

/* 1 when this build has the CUDA model compiled in. */
int tt_mlp_cuda_compiled(void);

/* Opens cuBLAS (loaded on demand, see tt_mlp_cuda.cu) and resolves every
 * entry point the model calls, then closes it again: TT_OK, or TT_ENODEV
 * with the reason in `err` (no CUDA build, library or symbol missing).
 * Needs no GPU. */
int tt_mlp_cuda_blas_probe(char *err, size_t errlen);

/* Allocates the model on CUDA device `device` (parameters zero; call
 * tt_mlp_cuda_init or set_params). Returns 0, TT_EINVAL (opts as
 * tt_mlp_create), TT_ENODEV (no CUDA build, no device, cuBLAS not
 * loadable; `err` says which), TT_ECUDA (with
 * `err` naming the failing call), TT_ENOMEM. */
int tt_mlp_cuda_create(tt_mlp_cuda_t **out, const tt_mlp_opts_t *opts, int device, char *err,
                       size_t errlen);

/* Waits for the stream, frees everything. Accepts NULL; sets *m = NULL. */
void tt_mlp_cuda_destroy(tt_mlp_cuda_t **m);

/* Same numbers as tt_mlp_init(seed) (drawn on the host, copied up);
 * zeroes gradients and optimizer state. Returns 0 or TT_ECUDA/TT_ENOMEM. */
int tt_mlp_cuda_init(tt_mlp_cuda_t *m, uint64_t seed);

size_t tt_mlp_cuda_param_count(const tt_mlp_cuda_t *m);
int tt_mlp_cuda_tensor_count(const tt_mlp_cuda_t *m);
/* Offset/length of tensor `tensor` in the flat buffers; 0 or TT_EINVAL. */
int tt_mlp_cuda_tensor(const tt_mlp_cuda_t *m, int tensor, size_t *offset, size_t *len);

/* Host <-> device copies of the whole flat buffers (n must equal
 * param_count; host buffers borrowed, any memory). Synchronous with
 * respect to the compute stream. 0, TT_EINVAL or TT_ECUDA. */
int tt_mlp_cuda_set_params(tt_mlp_cuda_t *m, const float *host, size_t n);
int tt_mlp_cuda_get_params(tt_mlp_cuda_t *m, float *host, size_t n);
int tt_mlp_cuda_set_grads(tt_mlp_cuda_t *m, const float *host, size_t n);
int tt_mlp_cuda_get_grads(tt_mlp_cuda_t *m, float *host, size_t n);
/* Zeroes the gradient buffer (enqueued on the stream). 0 or TT_ECUDA. */
int tt_mlp_cuda_zero_grads(tt_mlp_cuda_t *m);

/* Optimizer state (momentum / Adam m and v) as flat host copies, for
 * checkpoints and failover. which 0: momentum or m, 1: v. */
int tt_mlp_cuda_get_opt_state(tt_mlp_cuda_t *m, int which, float *host, size_t n);
int tt_mlp_cuda_set_opt_state(tt_mlp_cuda_t *m, int which, const float *host, size_t n);

/* Device pointers (float *) of the flat buffers and the compute stream
 * (cudaStream_t). Owned by the model, valid until destroy. */
void *tt_mlp_cuda_dev_params(tt_mlp_cuda_t *m);
void *tt_mlp_cuda_dev_grads(tt_mlp_cuda_t *m);
void *tt_mlp_cuda_stream(tt_mlp_cuda_t *m);

/* The cudaEvent_t recorded on the compute stream right after tensor
 * `tensor`'s gradient of the current micro-batch was enqueued; a
 * communication stream waits on it (cudaStreamWaitEvent) before reducing
 * that tensor. NULL for a bad index. Valid until destroy. */
void *tt_mlp_cuda_grad_event(tt_mlp_cuda_t *m, int tensor);

/* Forward of `rows` examples (x host, rows x dims[0], borrowed); the logits
 * are copied to `logits` (host, rows x classes). 0, TT_EINVAL (rows 0 or >
 * max_batch), TT_ECUDA. */
int tt_mlp_cuda_forward(tt_mlp_cuda_t *m, const float *x, size_t rows, float *logits);

/* As tt_mlp_train_batch: ADDS the gradient sums of one micro-batch, calls
 * `hook` (may be NULL) as each tensor's gradient is enqueued (its event,
 * tt_mlp_cuda_grad_event, is recorded before the call), and returns the
 * summed loss and correct count (the call waits for the stream to get
 * them). 0, TT_EINVAL (rows, label out of range), TT_ECUDA, or the hook's
 * negative status. */
int tt_mlp_cuda_train_batch(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels, size_t rows,
                            tt_mlp_grad_hook_fn hook, void *ctx, double *loss_sum, size_t *correct);

/* Forward only over `rows` examples in chunks of max_batch. */
int tt_mlp_cuda_evaluate(tt_mlp_cuda_t *m, const float *x, const uint8_t *labels, size_t rows,
                         double *loss_sum, size_t *correct);

/* One optimizer step over the whole flat buffer on the device, the math of
 * tt_optim_sgd_step / tt_optim_adamw_step (momentum/m/v owned by the
 * model). Enqueued on the stream; 0 or TT_ECUDA. */
int tt_mlp_cuda_sgd_step(tt_mlp_cuda_t *m, float lr, float grad_scale, const tt_optim_sgd_hp_t *hp);
int tt_mlp_cuda_adamw_step(tt_mlp_cuda_t *m, float lr, float grad_scale, uint64_t t,
                           const tt_optim_adamw_hp_t *hp);

/* How cuBLAS computes the products (the element-wise kernels are FP32
 * always). FP32, the default: full float32 inputs, what the CPU model
 * computes. TF32: tensor cores with the inputs rounded to 10 mantissa
 * bits (Ampere and later); faster for wide layers, and each product is
 * about 1e-3 (relative) from the CPU's, so runs drift apart from a CPU
 * run. STRICT: CUBLAS_PEDANTIC_MATH, no reduced precision in any phase,
 * for checking that FP32 really is FP32. */
typedef enum { TT_MLP_CUDA_FP32 = 0, TT_MLP_CUDA_TF32, TT_MLP_CUDA_STRICT } tt_mlp_cuda_math_t;

/* Products enqueued from now on use `math`. 0, TT_EINVAL (unknown mode),
 * TT_ECUDA (cuBLAS refused it) or TT_ENODEV (no CUDA build). */
int tt_mlp_cuda_set_math(tt_mlp_cuda_t *m, tt_mlp_cuda_math_t math);
/* "fp32", "tf32", "strict"; "?" for anything else. The same in every
 * build, so it lives here rather than in the model and its stub. */
static inline const char *tt_mlp_cuda_math_name(tt_mlp_cuda_math_t math) {
    static const char *const names[] = {"fp32", "tf32", "strict"};
    return (unsigned)math < sizeof(names) / sizeof(names[0]) ? names[math] : "?";
}

/* Waits for everything enqueued on the compute stream. 0 or TT_ECUDA. */
int tt_mlp_cuda_sync(tt_mlp_cuda_t *m);

/* The last failure's sentence ("" when none). Owned by the model. */
const char *tt_mlp_cuda_last_error(const tt_mlp_cuda_t *m);

#endif
