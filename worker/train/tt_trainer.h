/* tt_trainer: the synchronous data-parallel training loop of tether-train.
 * It owns the model, the optimizer state, the sampler position and the step
 * scratch (gathered batch rows), and drives one global step at a time:
 * zero gradients, forward+backward over this rank's micro-batches (gradient
 * SUMS), hand sums and the example count to the collective, then update with
 * sum / global count. It does not own the datasets (borrowed), the
 * collective (an interface the caller supplies) or any output: progress goes
 * to a caller callback, so the library never prints.
 *
 * Threads: a trainer is driven by one thread. */
#ifndef TT_TRAINER_H
#define TT_TRAINER_H

#include "tt_idx.h"
#include "tt_mlp.h"
#include "tt_optim.h"

#include <stddef.h>
#include <stdint.h>

/* The narrow interface through which gradients leave the rank. Any function
 * may return a negative tt_status to abort the step (the trainer returns it
 * unchanged and has not updated the parameters). */
typedef struct {
    void *ctx;
    const char *name; /* for messages ("local", "ring", ...) */
    /* Called at the start of every step: the membership the step runs in.
     * World may change between steps; slicing follows it. */
    int (*membership)(void *ctx, int *rank, int *world, uint64_t *generation);
    /* May be NULL. Tensor `tensor` of the flat gradient buffer (tt_mlp
     * layout) is final for the step: called during the backward pass of the
     * step's last micro-batch only, last layer first. */
    int (*grad_ready)(void *ctx, int tensor);
    /* Replace grads[0..n) by the sum over ranks and set *global_count to
     * the summed example count. Blocking. */
    int (*finish)(void *ctx, float *grads, size_t n, double local_count, double *global_count);
    /* Sum n doubles over ranks in place (loss sums, correct counts). */
    int (*reduce_sum)(void *ctx, double *vals, size_t n);
    /* Non-zero: the optimizer runs on the shard servers. finish() then
     * leaves the parameters after the step's update in grads[0..n), the
     * trainer applies no update of its own, and set_lr (called before
     * finish() with the step's learning rate) must be set. */
    int updates_params;
    int (*set_lr)(void *ctx, float lr);
    /* May be NULL. GPU workers: the step's gradient sums stay in device
     * memory (dgrads, n floats, complete when `event` has fired; NULL: now)
     * and are summed over ranks there, with the count, instead of
     * grad_ready + finish. TT_ENODEV, with nothing issued, where the
     * collective cannot read device memory: the trainer then stages the
     * gradients through the host for the rest of the run. */
    int (*finish_device)(void *ctx, float *dgrads, size_t n, double local_count,
                         double *global_count, void *event);
    /* May be NULL (then finish_device reduces everything at the end).
     * With finish_device: dpart[0..n) of the device sums is final once
     * `event` fires; its reduction may start now, behind the event, while
     * backward goes on (bucket overlap). Called during the last
     * micro-batch's backward, last layer first; finish_device ends the
     * step. TT_ENODEV, with nothing issued, as finish_device's. */
    int (*ready_device)(void *ctx, float *dpart, size_t n, void *event);
} tt_train_coll_t;

/* Fills *coll with the single-process backend (rank 0 of 1, generation 0,
 * sums are the local values). ctx is unused (NULL). */
void tt_train_coll_local(tt_train_coll_t *coll);

typedef enum { TT_OPT_SGD = 0, TT_OPT_ADAMW = 1 } tt_opt_kind_t;

typedef struct {
    int nlayers;
    int dims[TT_MLP_MAX_LAYERS + 1];
    uint64_t epochs;
    uint64_t batch;       /* global batch */
    uint64_t micro;       /* max rows per forward/backward; 0 = batch */
    uint64_t seed;        /* init and sampler */
    uint64_t train_limit; /* 0 = all training examples */
    uint64_t max_steps;   /* stop after this many global steps; 0 = no limit */
    tt_opt_kind_t opt;
    tt_optim_sgd_hp_t sgd;
    tt_optim_adamw_hp_t adamw;
    tt_lr_sched_t sched; /* total_steps is filled in by the trainer */
    int device;          /* 0: CPU (BLAS); 1: CUDA (tt_train_dev) */
    int cuda_device;     /* device 1: which one (tt_train_pick_device) */
    int cuda_math;       /* device 1: tt_mlp_cuda_math_t of the products (0: FP32) */
} tt_trainer_opts_t;

/* Progress of one finished step, for display. */
typedef struct {
    uint64_t epoch, epochs; /* 0-based epoch, total */
    uint64_t step, steps;   /* 1-based step within the epoch, total */
    uint64_t global_step;   /* steps done since the start */
    double loss;            /* this rank's mean loss of the step */
    double lr;
    double elapsed_s;      /* since this process started the epoch (or joined it) */
    double examples_per_s; /* global examples trained in elapsed / elapsed */
    double comm_share;     /* share of step time waiting in finish() */
    double eta_s;          /* rest of the epoch at the current rate */
    uint64_t examples;     /* global examples consumed this epoch so far */
    uint64_t epoch_size;   /* examples per epoch (the training set) */
} tt_step_report_t;

typedef struct {
    uint64_t epoch;    /* 1-based */
    uint64_t step;     /* global steps done */
    double train_loss; /* mean over the epoch's examples, all ranks */
    double test_loss, test_accuracy;
    double examples_per_s; /* global examples trained in wall_s / wall_s: a
                            * resumed epoch's restored part is not counted */
    double compute_s;      /* forward, backward, gather, update */
    double comm_exposed_s; /* time blocked in finish() */
    double wall_s;         /* training part of the epoch in this process, from its
                            * start (or this process's first step in it) to
                            * its end, a failover's regroup included */
    double eval_s;
    int world_size;
    uint64_t generation;
    double examples; /* global examples consumed in the epoch (accounting) */
} tt_epoch_stats_t;

typedef void (*tt_trainer_step_fn)(void *ctx, const tt_step_report_t *r);

typedef struct tt_trainer tt_trainer_t;

/* Builds the model (initialised from opts->seed), optimizer state and
 * sampler. train/test and coll are borrowed and must outlive the trainer.
 * Returns 0, TT_EINVAL (message in err: layer sizes that do not fit the
 * data, zero batch, ...), TT_ENOMEM. */
int tt_trainer_create(tt_trainer_t **out, const tt_trainer_opts_t *opts, const tt_idx_set_t *train,
                      const tt_idx_set_t *test, const tt_train_coll_t *coll, char *err,
                      size_t errlen);

/* Accepts NULL; sets *t = NULL. */
void tt_trainer_destroy(tt_trainer_t **t);

/* Runs the next epoch (all its steps, then the evaluation) and fills
 * *stats. `cb` (may be NULL) is called after each step. Returns 0, or the
 * collective's / model's negative status (the failed step is not applied). */
int tt_trainer_run_epoch(tt_trainer_t *t, tt_trainer_step_fn cb, void *cbctx,
                         tt_epoch_stats_t *stats);

/* Runs one global step of the current epoch; *loss (may be NULL) is this
 * rank's mean loss. Returns 0, a negative status, or TT_ECLOSED when the
 * epoch has no steps left. */
int tt_trainer_step(tt_trainer_t *t, double *loss);

/* Evaluates this rank's shard of the test set and reduces over ranks. */
int tt_trainer_evaluate(tt_trainer_t *t, double *loss, double *accuracy);

/* The scalar state a replica needs, besides parameters and optimizer
 * buffers, to continue exactly where another left off (failover, resume).
 * The sampler permutation and the learning rate are pure functions of
 * (seed, epoch) and global_step, so they need no state of their own. */
typedef struct {
    uint64_t epoch;         /* 0-based epoch in progress (or next) */
    uint64_t step_in_epoch; /* its steps already applied */
    uint64_t global_step;   /* = epoch * steps_per_epoch + step_in_epoch */
    int in_epoch;           /* the epoch has started */
    double loss_sum, count; /* this rank's epoch loss accumulators */
    double examples;        /* global examples consumed this epoch */
} tt_trainer_state_t;

void tt_trainer_get_state(const tt_trainer_t *t, tt_trainer_state_t *s);

/* Restores a state taken by tt_trainer_get_state (possibly on another
 * rank or world size). TT_EINVAL when it does not fit this trainer. */
int tt_trainer_set_state(tt_trainer_t *t, const tt_trainer_state_t *s);

/* Optimizer buffer `which` (0: momentum or Adam m, 1: Adam v; NULL when
 * the optimizer has none) and its length in *n. Borrowed. Ask again before
 * each read or write: with --device cuda the state lives on the device
 * between steps, and asking is what brings the host copy up to date (and
 * marks it as the one the next step uploads). */
float *tt_trainer_opt_state(tt_trainer_t *t, int which, size_t *n);

/* Borrowed views for callers and tests. */
tt_mlp_t *tt_trainer_model(tt_trainer_t *t);
uint64_t tt_trainer_steps_per_epoch(const tt_trainer_t *t);
uint64_t tt_trainer_global_step(const tt_trainer_t *t);

#endif
