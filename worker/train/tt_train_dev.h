/* tt_train_dev: the trainer's CUDA path (tether-train --device cuda). It
 * pairs the trainer's host model (tt_mlp, which stays the source of truth
 * that checkpoints, failover broadcasts and audits read and write) with a
 * tt_mlp_cuda twin that does the work: forward/backward and the optimizer
 * update run on the GPU; the step's gradient sums are staged to the host
 * buffer for whatever collective the job uses (local, ring, ps: device
 * staging), and the updated parameters come back into the host model after
 * every step. Anything that may have written the host copies marks the
 * twin dirty and the next step uploads them first. It does not own the
 * host model, the optimizer buffers or the step loop (tt_trainer).
 * Threads: the trainer's thread only. */
#ifndef TT_TRAIN_DEV_H
#define TT_TRAIN_DEV_H

#include "tt_mlp.h"
#include "tt_optim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tt_train_dev tt_train_dev_t;

/* The CUDA device a worker trains on, from `want`: a device number, or
 * "auto" (NULL or "" too): `tether_dev` (TETHER_CUDA_DEVICE, the library's
 * choice for its communicator) when set, else `local_rank` (TETHER_LOCAL_RANK,
 * which tether-launch sets) modulo the `ndev` devices this process sees,
 * else 0. NCCL refuses two ranks on one device, so workers that share a
 * host need one each; with more workers than devices the modulo puts
 * several on one (the ring and ps backends allow it); `exclusive` (the
 * nccl backend) refuses that instead: a local rank at or above a known
 * `ndev` is TT_EBUSY. A number at or above a known `ndev` (> 0) is
 * TT_ENODEV, anything that is not a number TT_EINVAL, with a sentence in
 * err; ndev 0 leaves saying why there is no device to
 * tt_train_dev_create. Pure. */
int tt_train_pick_device(const char *want, const char *tether_dev, const char *local_rank, int ndev,
                         int exclusive, int *out, char *err, size_t errlen);

/* Builds the twin of `host` (borrowed, must outlive it) on CUDA device
 * `device` with the same dims and max_batch, its products computed as
 * `math` says (tt_mlp_cuda_math_t), and marks both dirty. Returns 0,
 * TT_ENODEV (no CUDA build or device), TT_EINVAL (unknown math) or
 * TT_ECUDA/TT_ENOMEM with a sentence in err. */
int tt_train_dev_create(tt_train_dev_t **out, tt_mlp_t *host, const tt_mlp_opts_t *mo, int device,
                        int math, char *err, size_t errlen);

/* Accepts NULL; sets *d = NULL. */
void tt_train_dev_destroy(tt_train_dev_t **d);

/* The host parameters (which 0) or the host optimizer state (which 1) may
 * have been written. Mark the state only after pulling it (below): the
 * device's copy is the current one between steps. */
void tt_train_dev_mark_dirty(tt_train_dev_t *d, int which);

/* Step start: uploads the host parameters and optimizer state (s1, s2:
 * host buffers of param_count floats, either may be NULL) where marked
 * dirty, and zeroes the device gradients. 0 or TT_ECUDA. */
int tt_train_dev_begin(tt_train_dev_t *d, const float *s1, const float *s2);

/* A step in which this rank has no rows: as begin, and the compute stream
 * is idle on return, so a collective on another stream that reads the
 * (zeroed) device gradients with no event to wait on sees zeros. */
int tt_train_dev_begin_idle(tt_train_dev_t *d, const float *s1, const float *s2);

/* Receives layer by layer, as backward enqueues them, the device slice
 * of a layer's gradients (weights and bias) and the CUDA event after
 * which it is final. */
typedef int (*tt_train_dev_part_fn)(void *ctx, float *dpart, size_t n, void *event);

/* One micro-batch on the device (accumulating gradient sums); *loss gets
 * its summed loss. `part` (may be NULL) is told of each layer's gradients
 * during backward, last layer first. 0, TT_EINVAL, TT_ECUDA, or part's
 * negative status. */
int tt_train_dev_batch(tt_train_dev_t *d, const float *x, const uint8_t *y, size_t rows,
                       tt_train_dev_part_fn part, void *ctx, double *loss);

/* Copies the gradient sums into the host model's gradient buffer, then
 * calls `ready` (may be NULL) for every tensor in backward order, as the
 * CPU model's hook would. 0, TT_ECUDA or ready's negative status. */
int tt_train_dev_grads_out(tt_train_dev_t *d, int (*ready)(void *ctx, int tensor), void *ctx);

/* The device gradient buffer (tt_mlp layout): where a collective that
 * reads device memory reduces the step's sums in place. */
float *tt_train_dev_grads(tt_train_dev_t *d);

/* Runs the optimizer on the device and copies the parameters back into the
 * host model. The reduced gradients are the host model's (uploaded first)
 * unless `on_device` (a collective reduced them in tt_train_dev_grads).
 * adamw selects the rule; t is AdamW's 1-based step. 0 or TT_ECUDA. */
int tt_train_dev_update(tt_train_dev_t *d, int on_device, int adamw, float lr, float scale,
                        uint64_t t, const tt_optim_sgd_hp_t *sgd, const tt_optim_adamw_hp_t *aw);

/* Copies the device optimizer state into s1 / s2 (may be NULL) when the
 * device's is the newer one; when the host's is marked dirty (handed out
 * since the last step, and perhaps written: a failover transfer, a
 * checkpoint load) it is left alone, as a pull would overwrite it. */
int tt_train_dev_pull_opt_state(tt_train_dev_t *d, float *s1, float *s2);

/* Forward-only evaluation on the device (uploads first when dirty). */
int tt_train_dev_evaluate(tt_train_dev_t *d, const float *x, const uint8_t *y, size_t rows,
                          double *loss, size_t *correct);

/* The last CUDA failure's sentence. */
const char *tt_train_dev_last_error(const tt_train_dev_t *d);

#endif
