/* tt_mlp: a multilayer perceptron (Linear-ReLU-...-Linear) with softmax
 * cross-entropy, forward and backward on the CPU through cblas_sgemm. It owns
 * the flat parameter and gradient buffers and the activation scratch; it
 * does not own optimizer state, data or communication.
 *
 * Flat layout (the collective registers these tensors as buckets): for layer
 * l = 0..L-1 with fan-in in_l and fan-out out_l, tensor 2l is the weight
 * matrix W_l, out_l x in_l row-major (PyTorch's nn.Linear layout), and tensor
 * 2l+1 is the bias b_l (out_l floats), stored back to back in that order.
 * The gradient buffer has the same layout.
 *
 * Threads: one model is used by one thread at a time; BLAS may use its own
 * threads inside a call. */
#ifndef TT_MLP_H
#define TT_MLP_H

#include <stddef.h>
#include <stdint.h>

#define TT_MLP_MAX_LAYERS 16

typedef struct {
    int nlayers;                     /* number of Linear layers, >= 1 */
    int dims[TT_MLP_MAX_LAYERS + 1]; /* dims[0] inputs .. dims[nlayers] classes */
    size_t max_batch;                /* most rows one forward/backward sees */
} tt_mlp_opts_t;

typedef struct tt_mlp tt_mlp_t;

/* Called by backward once tensor `tensor`'s gradient is final for this
 * micro-batch: layers last to first, the weight then the bias of each.
 * A negative return stops backward and is returned by it. */
typedef int (*tt_mlp_grad_hook_fn)(void *ctx, int tensor);

/* Allocates the model (parameters zero; call tt_mlp_init). Returns 0,
 * TT_EINVAL (bad dims, nlayers, max_batch), TT_ENOMEM. */
int tt_mlp_create(tt_mlp_t **out, const tt_mlp_opts_t *opts);

/* Accepts NULL; sets *m = NULL. */
void tt_mlp_destroy(tt_mlp_t **m);

/* Deterministic init like PyTorch's nn.Linear default: every weight and bias
 * of layer l is U(-1/sqrt(in_l), 1/sqrt(in_l)), drawn from tt_rng
 * (splitmix64) seeded with `seed`, in flat-buffer order. Same seed, same
 * parameters, on every rank. Zeroes the gradients. */
void tt_mlp_init(tt_mlp_t *m, uint64_t seed);

/* Flat buffers, owned by the model, valid until destroy. */
float *tt_mlp_params(tt_mlp_t *m);
float *tt_mlp_grads(tt_mlp_t *m);
size_t tt_mlp_param_count(const tt_mlp_t *m);

/* Number of tensors (2 * nlayers) and the offset/length of one of them in
 * the flat buffers. Returns 0 or TT_EINVAL for a bad index. */
int tt_mlp_tensor_count(const tt_mlp_t *m);
int tt_mlp_tensor(const tt_mlp_t *m, int tensor, size_t *offset, size_t *len);

/* Forward of `rows` examples (x: rows x dims[0], row-major, borrowed).
 * Returns a pointer to the logits (rows x classes, owned by the model, valid
 * until the next call), or NULL when rows is 0 or > max_batch. */
const float *tt_mlp_forward(tt_mlp_t *m, const float *x, size_t rows);

/* Forward + backward of one micro-batch: ADDS the gradient of the SUM of the
 * per-example cross-entropy losses into the gradient buffer (the caller
 * zeroes it at step start, so micro-batches accumulate), calling `hook`
 * (may be NULL) as each tensor's gradient completes. *loss_sum (may be NULL)
 * receives the summed loss and *correct (may be NULL) the number of
 * examples whose argmax is right. Labels must be < classes.
 * Returns 0, TT_EINVAL (rows 0 or > max_batch, label out of range) or the
 * hook's negative status. */
int tt_mlp_train_batch(tt_mlp_t *m, const float *x, const uint8_t *labels, size_t rows,
                       tt_mlp_grad_hook_fn hook, void *ctx, double *loss_sum, size_t *correct);

/* Forward only: summed loss and correct count over `rows` examples, in
 * chunks of max_batch. Returns 0 or TT_EINVAL. */
int tt_mlp_evaluate(tt_mlp_t *m, const float *x, const uint8_t *labels, size_t rows,
                    double *loss_sum, size_t *correct);

/* Softmax cross-entropy of one row of `k` logits: returns the loss and, when
 * dz is not NULL, writes softmax - onehot(label) into dz. Exposed for tests. */
double tt_mlp_xent_row(const float *z, int k, int label, float *dz);

#endif
