/* tt_trainer: the step loop. Every buffer a step touches (gathered rows,
 * labels, gradients, optimizer state) is allocated at create time, so the
 * loop never allocates. Time spent blocked in the collective's finish() is
 * measured separately from compute so that the exposed communication share
 * is visible. It does not print or parse options. */
#include "tt_trainer.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_sampler.h"
#include "tt_status.h"
#include "tt_train_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_trainer {
    tt_trainer_opts_t o;
    const tt_idx_set_t *train, *test;
    tt_train_coll_t coll;
    tt_mlp_t *mlp;
    tt_train_dev_t *dev; /* CUDA twin of mlp (--device cuda), else NULL */
    int resident;        /* dev's gradients are reduced where they are (NCCL); after a
                          * successful finish: this step's were */
    tt_sampler_t *sampler;
    size_t n_train, in_dim, micro;
    float *xbuf;    /* micro x in_dim gathered rows */
    uint8_t *ybuf;  /* micro labels */
    float *s1, *s2; /* optimizer state (momentum / Adam moments) */
    uint64_t epoch, step_in_epoch, global_step;
    int in_epoch; /* the epoch's sampler and accumulators are set up */
    /* per-epoch accumulators; `examples` is the accounting of global
     * examples consumed, checked against the dataset at the epoch's end */
    double loss_sum, count, compute_s, comm_s, examples;
    /* This process's clock on the epoch, kept across tt_trainer_run_epoch
     * calls: a failover returns from one mid-epoch and calls it again, and
     * a resumed or joining process starts mid-epoch. Rates count what was
     * trained since `clock_ns` (global examples), not the restored part,
     * and time spent regrouping stays in the epoch's wall time. */
    int clocked;
    uint64_t clock_ns, clock_step;
    double clock_examples;
};

static int local_membership(void *ctx, int *rank, int *world, uint64_t *gen) {
    *rank = 0;
    *world = 1;
    *gen = 0;
    return TT_OK;
}

static int local_finish(void *ctx, float *grads, size_t n, double local_count,
                        double *global_count) {
    *global_count = local_count;
    return TT_OK;
}

static int local_reduce(void *ctx, double *vals, size_t n) {
    return TT_OK;
}

void tt_train_coll_local(tt_train_coll_t *coll) {
    memset(coll, 0, sizeof(*coll));
    coll->name = "local";
    coll->membership = local_membership;
    coll->finish = local_finish;
    coll->reduce_sum = local_reduce;
}

static int trainer_check(const tt_trainer_opts_t *o, const tt_idx_set_t *train,
                         const tt_idx_set_t *test, char *err, size_t errlen) {
    size_t in = (size_t)train->rows * train->cols;
    if (o->nlayers < 1 || o->nlayers > TT_MLP_MAX_LAYERS) {
        snprintf(err, errlen, "need 1..%d layers, got %d", TT_MLP_MAX_LAYERS, o->nlayers);
        return TT_EINVAL;
    }
    if ((size_t)o->dims[0] != in || o->dims[o->nlayers] < 10) {
        snprintf(err, errlen,
                 "layers must start with %zu inputs (the image size) and end "
                 "with >= 10 classes, got %d and %d",
                 in, o->dims[0], o->dims[o->nlayers]);
        return TT_EINVAL;
    }
    if (o->batch == 0 || o->epochs == 0 || train->count == 0 ||
        (size_t)test->rows * test->cols != in) {
        snprintf(err, errlen,
                 "batch and epochs must be > 0 and the train and "
                 "test images the same size");
        return TT_EINVAL;
    }
    return TT_OK;
}

static int trainer_alloc(tt_trainer_t *t) {
    tt_mlp_opts_t mo = {.nlayers = t->o.nlayers, .max_batch = t->micro};
    memcpy(mo.dims, t->o.dims, sizeof(mo.dims));
    int rc = tt_mlp_create(&t->mlp, &mo);
    if (rc < 0)
        return rc;
    tt_mlp_init(t->mlp, t->o.seed);
    tt_sampler_opts_t so = {.n = t->n_train, .batch = t->o.batch, .seed = t->o.seed};
    rc = tt_sampler_create(&t->sampler, &so);
    if (rc < 0)
        return rc;
    size_t np = tt_mlp_param_count(t->mlp);
    t->xbuf = malloc(t->micro * t->in_dim * sizeof(float));
    t->ybuf = malloc(t->micro);
    t->s1 = calloc(np, sizeof(float));
    if (t->o.opt == TT_OPT_ADAMW)
        t->s2 = calloc(np, sizeof(float));
    if (!t->xbuf || !t->ybuf || !t->s1 || (t->o.opt == TT_OPT_ADAMW && !t->s2))
        return TT_ENOMEM;
    return TT_OK;
}

int tt_trainer_create(tt_trainer_t **out, const tt_trainer_opts_t *opts, const tt_idx_set_t *train,
                      const tt_idx_set_t *test, const tt_train_coll_t *coll, char *err,
                      size_t errlen) {
    char local[256];
    if (err == NULL || errlen == 0) {
        err = local;
        errlen = sizeof(local);
    }
    int rc = trainer_check(opts, train, test, err, errlen);
    if (rc < 0)
        return rc;
    if (coll->updates_params && (opts->device || coll->set_lr == NULL)) {
        snprintf(err, errlen, "the update on the shard servers runs with CPU workers only");
        return TT_EINVAL;
    }
    tt_trainer_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return TT_ENOMEM;
    t->o = *opts;
    t->train = train;
    t->test = test;
    t->coll = *coll;
    t->in_dim = (size_t)train->rows * train->cols;
    t->n_train =
        opts->train_limit && opts->train_limit < train->count ? opts->train_limit : train->count;
    t->micro = opts->micro && opts->micro < opts->batch ? opts->micro : opts->batch;
    t->o.sched.total_steps = opts->epochs * tt_sampler_steps_per_epoch(t->n_train, opts->batch);
    rc = trainer_alloc(t);
    if (rc < 0) {
        snprintf(err, errlen, "cannot allocate the trainer: %s", tt_strerror(rc));
        tt_trainer_destroy(&t);
        return rc;
    }
    if (opts->device) {
        tt_mlp_opts_t mo = {.nlayers = t->o.nlayers, .max_batch = t->micro};
        memcpy(mo.dims, t->o.dims, sizeof(mo.dims));
        if ((rc = tt_train_dev_create(&t->dev, t->mlp, &mo, opts->cuda_device, opts->cuda_math, err,
                                      errlen)) < 0) {
            tt_trainer_destroy(&t);
            return rc;
        }
        t->resident = coll->finish_device != NULL;
    }
    *out = t;
    return TT_OK;
}

void tt_trainer_destroy(tt_trainer_t **tp) {
    if (tp == NULL || *tp == NULL)
        return;
    tt_trainer_t *t = *tp;
    tt_train_dev_destroy(&t->dev);
    tt_mlp_destroy(&t->mlp);
    tt_sampler_destroy(&t->sampler);
    free(t->xbuf);
    free(t->ybuf);
    free(t->s1);
    free(t->s2);
    free(t);
    *tp = NULL;
}

/* Copies the rows of positions [r.begin, r.end) into the contiguous batch
 * buffer, so sgemm sees one dense matrix. */
static void trainer_gather(tt_trainer_t *t, tt_range_t r) {
    size_t k = 0;
    for (uint64_t pos = r.begin; pos < r.end; pos++, k++) {
        uint32_t id = tt_sampler_index(t->sampler, pos);
        tt_idx_rows(t->train, id, 1, t->xbuf + k * t->in_dim);
        t->ybuf[k] = t->train->labels[id];
    }
}

static int trainer_update(tt_trainer_t *t, double global_count) {
    float *p = tt_mlp_params(t->mlp);
    const float *g = tt_mlp_grads(t->mlp);
    size_t n = tt_mlp_param_count(t->mlp);
    float lr = (float)tt_lr_at(&t->o.sched, t->global_step);
    float scale = (float)(1.0 / global_count);
    if (t->dev != NULL)
        return tt_train_dev_update(t->dev, t->resident, t->o.opt == TT_OPT_ADAMW, lr, scale,
                                   t->global_step + 1, &t->o.sgd, &t->o.adamw);
    if (t->o.opt == TT_OPT_ADAMW)
        tt_optim_adamw_step(p, g, t->s1, t->s2, n, lr, scale, t->global_step + 1, &t->o.adamw);
    else
        tt_optim_sgd_step(p, g, t->s1, n, lr, scale, &t->o.sgd);
    return TT_OK;
}

/* The collective cannot read device memory (the first TT_ENODEV says so,
 * with nothing issued): gradients go through the host for good. */
static void leave_device(tt_trainer_t *t) {
    t->resident = 0;
    TT_INFO("train", "the %s collective cannot read device memory: gradients go through the host",
            t->coll.name);
}

/* A layer's device sums are final behind `event`: their reduction starts
 * while backward computes the layers below. */
static int trainer_part(void *ctx, float *dpart, size_t n, void *event) {
    tt_trainer_t *t = ctx;
    if (!t->resident)
        return TT_OK;
    int rc = t->coll.ready_device(t->coll.ctx, dpart, n, event);
    if (rc == TT_ENODEV) {
        leave_device(t);
        return TT_OK;
    }
    return rc;
}

/* Forward+backward over this rank's slice, micro-batch by micro-batch. */
static int trainer_compute(tt_trainer_t *t, tt_range_t slice, double *loss) {
    uint64_t nm = tt_sampler_micro_count(slice, t->micro);
    memset(tt_mlp_grads(t->mlp), 0, tt_mlp_param_count(t->mlp) * sizeof(float));
    *loss = 0.0;
    int rc = t->dev != NULL ? tt_train_dev_begin(t->dev, t->s1, t->s2) : TT_OK;
    for (uint64_t i = 0; rc == TT_OK && i < nm; i++) {
        tt_range_t mb = tt_sampler_micro(slice, t->micro, i);
        trainer_gather(t, mb);
        double ls = 0.0;
        /* Gradients accumulate over micro-batches: they are final, and may
         * leave the rank, only during the last one's backward pass. */
        int last = i + 1 == nm;
        if (t->dev != NULL)
            rc = tt_train_dev_batch(
                t->dev, t->xbuf, t->ybuf, mb.end - mb.begin,
                last && t->resident && t->coll.ready_device ? trainer_part : NULL, t, &ls);
        else
            rc = tt_mlp_train_batch(t->mlp, t->xbuf, t->ybuf, mb.end - mb.begin,
                                    last ? t->coll.grad_ready : NULL, t->coll.ctx, &ls, NULL);
        *loss += ls;
    }
    /* Unless the collective reads device memory, the device's sums leave
     * through the host buffer (device staging). */
    if (rc == TT_OK && t->dev != NULL && !t->resident)
        rc = tt_train_dev_grads_out(t->dev, t->coll.grad_ready, t->coll.ctx);
    return rc;
}

/* The step's reduction: on the device where the collective can (the
 * first TT_ENODEV turns that off for good, and this step stages through
 * the host like every later one), else through the host buffer. */
static int trainer_finish(tt_trainer_t *t, double local, double *global) {
    size_t n = tt_mlp_param_count(t->mlp);
    if (t->resident) {
        int rc = t->coll.finish_device(t->coll.ctx, tt_train_dev_grads(t->dev), n, local, global,
                                       NULL); /* train_batch returns with the stream idle */
        if (rc != TT_ENODEV)
            return rc;
        leave_device(t);
        if ((rc = tt_train_dev_grads_out(t->dev, t->coll.grad_ready, t->coll.ctx)) < 0)
            return rc;
    }
    return t->coll.finish(t->coll.ctx, tt_mlp_grads(t->mlp), n, local, global);
}

int tt_trainer_step(tt_trainer_t *t, double *loss) {
    uint64_t steps = tt_sampler_steps(t->sampler);
    if (t->step_in_epoch >= steps)
        return TT_ECLOSED;
    int rank, world;
    uint64_t gen;
    int rc = t->coll.membership(t->coll.ctx, &rank, &world, &gen);
    if (rc < 0)
        return rc;
    tt_range_t slice = tt_sampler_slice(t->n_train, t->o.batch, t->step_in_epoch, rank, world);
    double local = (double)(slice.end - slice.begin), global = 0.0, ls = 0.0;
    uint64_t t0 = tt_clock_mono_ns();
    if (local > 0 && (rc = trainer_compute(t, slice, &ls)) < 0)
        return rc;
    if (local == 0) { /* no rows this step: contribute zeros */
        memset(tt_mlp_grads(t->mlp), 0, tt_mlp_param_count(t->mlp) * sizeof(float));
        /* The device steps its own copy of the parameters and state in the
         * update, so what the host holds newer goes up even without rows;
         * and a device reduction (no event to wait on) must find the
         * zeroed gradients already there. */
        if (t->dev != NULL && (rc = tt_train_dev_begin_idle(t->dev, t->s1, t->s2)) < 0)
            return rc;
    }
    uint64_t t1 = tt_clock_mono_ns();
    if (t->coll.updates_params &&
        (rc = t->coll.set_lr(t->coll.ctx, (float)tt_lr_at(&t->o.sched, t->global_step))) < 0)
        return rc;
    rc = trainer_finish(t, local, &global);
    uint64_t t2 = tt_clock_mono_ns();
    if (rc < 0)
        return rc;
    if (global <= 0.0) {
        TT_ERROR("train", "step %llu: global example count %.0f",
                 (unsigned long long)t->global_step, global);
        return TT_EINTERNAL;
    }
    if (t->coll.updates_params) /* the shards' update came back in the gradient buffer */
        memcpy(tt_mlp_params(t->mlp), tt_mlp_grads(t->mlp),
               tt_mlp_param_count(t->mlp) * sizeof(float));
    else if ((rc = trainer_update(t, global)) < 0)
        return rc;
    t->compute_s += (double)(t1 - t0 + tt_clock_mono_ns() - t2) * 1e-9;
    t->comm_s += (double)(t2 - t1) * 1e-9;
    t->loss_sum += ls;
    t->count += local;
    t->examples += global;
    t->step_in_epoch++;
    t->global_step++;
    if (loss)
        *loss = local > 0 ? ls / local : 0.0;
    return TT_OK;
}

int tt_trainer_evaluate(tt_trainer_t *t, double *loss, double *accuracy) {
    int rank, world;
    uint64_t gen;
    int rc = t->coll.membership(t->coll.ctx, &rank, &world, &gen);
    if (rc < 0)
        return rc;
    size_t n = t->test->count;
    size_t lo = n * (size_t)rank / (size_t)world;
    size_t hi = n * (size_t)(rank + 1) / (size_t)world;
    double v[3] = {0.0, 0.0, (double)(hi - lo)};
    for (size_t r = lo; r < hi; r += t->micro) {
        size_t rows = hi - r < t->micro ? hi - r : t->micro, correct = 0;
        double ls = 0.0;
        tt_idx_rows(t->test, r, rows, t->xbuf);
        const uint8_t *y = t->test->labels + r;
        rc = t->dev != NULL ? tt_train_dev_evaluate(t->dev, t->xbuf, y, rows, &ls, &correct)
                            : tt_mlp_evaluate(t->mlp, t->xbuf, y, rows, &ls, &correct);
        if (rc < 0)
            return rc;
        v[0] += ls;
        v[1] += (double)correct;
    }
    if ((rc = t->coll.reduce_sum(t->coll.ctx, v, 3)) < 0)
        return rc;
    *loss = v[2] > 0 ? v[0] / v[2] : 0.0;
    *accuracy = v[2] > 0 ? v[1] / v[2] : 0.0;
    return TT_OK;
}

static void trainer_report(tt_trainer_t *t, double loss, tt_trainer_step_fn cb, void *cbctx) {
    tt_step_report_t r = {.epoch = t->epoch,
                          .epochs = t->o.epochs,
                          .step = t->step_in_epoch,
                          .steps = tt_sampler_steps(t->sampler),
                          .global_step = t->global_step,
                          .loss = loss,
                          .examples = (uint64_t)t->examples,
                          .epoch_size = t->n_train};
    r.lr = tt_lr_at(&t->o.sched, t->global_step ? t->global_step - 1 : 0);
    r.elapsed_s = (double)(tt_clock_mono_ns() - t->clock_ns) * 1e-9;
    r.examples_per_s = r.elapsed_s > 0 ? (t->examples - t->clock_examples) / r.elapsed_s : 0.0;
    double busy = t->compute_s + t->comm_s;
    r.comm_share = busy > 0 ? t->comm_s / busy : 0.0;
    uint64_t done = r.step > t->clock_step ? r.step - t->clock_step : 0;
    r.eta_s = done > 0 ? r.elapsed_s / (double)done * (double)(r.steps - r.step) : 0.0;
    cb(cbctx, &r);
}

static int trainer_epoch_end(tt_trainer_t *t, double wall_s, tt_epoch_stats_t *st) {
    double v[2] = {t->loss_sum, t->count};
    int rc = t->coll.reduce_sum(t->coll.ctx, v, 2);
    if (rc < 0)
        return rc;
    int rank;
    rc = t->coll.membership(t->coll.ctx, &rank, &st->world_size, &st->generation);
    if (rc < 0)
        return rc;
    st->epoch = t->epoch + 1;
    st->step = t->global_step;
    st->train_loss = v[1] > 0 ? v[0] / v[1] : 0.0;
    st->wall_s = wall_s;
    st->examples_per_s = wall_s > 0 ? (t->examples - t->clock_examples) / wall_s : 0.0;
    st->compute_s = t->compute_s;
    st->comm_exposed_s = t->comm_s;
    uint64_t e0 = tt_clock_mono_ns();
    rc = tt_trainer_evaluate(t, &st->test_loss, &st->test_accuracy);
    st->eval_s = (double)(tt_clock_mono_ns() - e0) * 1e-9;
    return rc;
}

/* Starts the epoch unless a restored state is in the middle of it. */
static void epoch_begin(tt_trainer_t *t) {
    if (t->in_epoch)
        return;
    tt_sampler_set_epoch(t->sampler, t->epoch);
    t->step_in_epoch = 0;
    t->loss_sum = t->count = t->examples = 0.0;
    t->in_epoch = 1;
}

/* Every example of the epoch must have been used exactly once, whatever
 * joined or failed: a mismatch is an error, not a log line. */
static int epoch_accounting(const tt_trainer_t *t) {
    if (t->examples == (double)t->n_train)
        return TT_OK;
    TT_ERROR("train", "epoch %llu consumed %.0f examples but the dataset has %zu",
             (unsigned long long)t->epoch + 1, t->examples, t->n_train);
    return TT_ECORRUPT;
}

/* Starts this process's clock on the epoch unless it runs already. */
static void epoch_clock(tt_trainer_t *t) {
    if (t->clocked)
        return;
    t->clocked = 1;
    t->clock_ns = tt_clock_mono_ns();
    t->clock_step = t->step_in_epoch;
    t->clock_examples = t->examples;
    t->compute_s = t->comm_s = 0.0;
}

int tt_trainer_run_epoch(tt_trainer_t *t, tt_trainer_step_fn cb, void *cbctx,
                         tt_epoch_stats_t *stats) {
    epoch_begin(t);
    epoch_clock(t);
    uint64_t steps = tt_sampler_steps(t->sampler);
    while (t->step_in_epoch < steps && (t->o.max_steps == 0 || t->global_step < t->o.max_steps)) {
        double loss = 0.0;
        int rc = tt_trainer_step(t, &loss);
        if (rc < 0)
            return rc;
        if (cb != NULL)
            trainer_report(t, loss, cb, cbctx);
    }
    double wall = (double)(tt_clock_mono_ns() - t->clock_ns) * 1e-9;
    memset(stats, 0, sizeof(*stats));
    int complete = t->step_in_epoch == steps;
    int rc = complete ? epoch_accounting(t) : TT_OK;
    if (rc == TT_OK)
        rc = trainer_epoch_end(t, wall, stats);
    stats->examples = t->examples;
    if (rc == TT_OK && complete) {
        t->in_epoch = 0;
        t->clocked = 0;
        t->epoch++;
    }
    return rc;
}

void tt_trainer_get_state(const tt_trainer_t *t, tt_trainer_state_t *s) {
    memset(s, 0, sizeof(*s));
    s->epoch = t->epoch;
    s->step_in_epoch = t->step_in_epoch;
    s->global_step = t->global_step;
    s->in_epoch = t->in_epoch;
    s->loss_sum = t->loss_sum;
    s->count = t->count;
    s->examples = t->examples;
}

int tt_trainer_set_state(tt_trainer_t *t, const tt_trainer_state_t *s) {
    uint64_t steps = tt_sampler_steps_per_epoch(t->n_train, t->o.batch);
    if (s->epoch > t->o.epochs || s->step_in_epoch > steps ||
        s->global_step != s->epoch * steps + s->step_in_epoch)
        return TT_EINVAL;
    /* Another epoch (or none begun) restarts the clock; within the same
     * one it runs on, and the examples restored count as trained in it. */
    if (s->epoch != t->epoch || !s->in_epoch)
        t->clocked = 0;
    t->epoch = s->epoch;
    t->step_in_epoch = s->step_in_epoch;
    t->global_step = s->global_step;
    t->in_epoch = s->in_epoch;
    t->loss_sum = s->loss_sum;
    t->count = s->count;
    t->examples = s->examples;
    tt_sampler_set_epoch(t->sampler, t->epoch);
    return TT_OK;
}

float *tt_trainer_opt_state(tt_trainer_t *t, int which, size_t *n) {
    *n = tt_mlp_param_count(t->mlp);
    /* After a step the device holds the current state: the first ask
     * brings the host copy up to date, and until the next step the host's
     * (perhaps written since) is the newer, so later asks leave it. */
    if (t->dev != NULL) {
        if (tt_train_dev_pull_opt_state(t->dev, t->s1, t->s2) < 0)
            TT_ERROR("train", "optimizer state: %s", tt_train_dev_last_error(t->dev));
        tt_train_dev_mark_dirty(t->dev, 1);
    }
    return which == 0 ? t->s1 : which == 1 ? t->s2 : NULL;
}

tt_mlp_t *tt_trainer_model(tt_trainer_t *t) {
    if (t->dev != NULL) /* the caller may write the parameters */
        tt_train_dev_mark_dirty(t->dev, 0);
    return t->mlp;
}

uint64_t tt_trainer_steps_per_epoch(const tt_trainer_t *t) {
    return tt_sampler_steps(t->sampler);
}

uint64_t tt_trainer_global_step(const tt_trainer_t *t) {
    return t->global_step;
}
