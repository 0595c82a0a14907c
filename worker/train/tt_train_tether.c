/* tt_train_tether: tt_train_coll_t over libtether. Steps completed are
 * reported lazily, at the start of the next step (membership call), so the
 * report costs nothing on the critical path. A failed collective or a new
 * generation aborts the step (the trainer then applies nothing) and is
 * returned to the caller; surviving it is the job of tt_train_ft, which
 * reads the flag left here when tether_step_done already acknowledged the
 * new generation. A completed run leaves with reason "finished", which ends
 * the job for everyone (TT_EJOBDONE). It does not decide what to do about
 * failures. */
#include "tt_train_tether.h"
#include "tt_log.h"
#include "tt_status.h"

#include <tether/tether.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_train_tether {
    tether_t *t;
    int64_t steps_done;     /* global steps whose update was applied */
    int64_t steps_reported; /* steps told to the coordinator */
    int64_t first_step;     /* resume step of the generation we joined */
    int regrouped;          /* step_done returned REGROUPED, not yet taken */
    int on_shards, parts;   /* the update runs on the shards; state parts there */
    int stepped;            /* a step completed in this process */
};

static int backend_of(const char *name, int *out) {
    static const struct {
        const char *name;
        int id;
    } map[] = {{"auto", TETHER_BACKEND_AUTO},
               {"ring", TETHER_BACKEND_RING},
               {"ps", TETHER_BACKEND_PS},
               {"nccl", TETHER_BACKEND_NCCL}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcmp(name, map[i].name) == 0) {
            *out = map[i].id;
            return TT_OK;
        }
    }
    return TT_EINVAL;
}

/* The trainer's optimizer, run by the shards. */
static void shard_update(tt_train_tether_t *tt, const tt_trainer_opts_t *o,
                         tether_coll_opts_t *co) {
    int adam = o->opt == TT_OPT_ADAMW;
    co->update = TETHER_UPDATE_SHARDS;
    co->optimizer =
        (tether_optimizer_t){.kind = adam ? TETHER_OPTIM_ADAMW : TETHER_OPTIM_SGD,
                             .momentum = o->sgd.momentum,
                             .nesterov = o->sgd.nesterov,
                             .weight_decay = adam ? o->adamw.weight_decay : o->sgd.weight_decay,
                             .beta1 = o->adamw.beta1,
                             .beta2 = o->adamw.beta2,
                             .eps = o->adamw.eps};
    tt->on_shards = 1;
    tt->parts = adam ? 3 : o->sgd.momentum > 0.0f ? 2 : 1;
}

static int configure(tt_train_tether_t *tt, const char *backend, const tt_train_tether_update_t *up,
                     char *err, size_t errlen) {
    tether_coll_opts_t co;
    tether_coll_opts_default(&co);
    int rc = tether_coll_opts_from_env(&co, err, errlen);
    if (rc != TETHER_OK)
        return rc;
    if (backend_of(backend, &co.backend) != TT_OK) {
        snprintf(err, errlen, "unknown backend '%s' (ring, ps, nccl or auto)", backend);
        return TT_EINVAL;
    }
    co.average = 0; /* the optimizer divides by the global count itself */
    if (up != NULL && up->on_shards)
        shard_update(tt, up->topts, &co);
    /* The communicator goes where the model is, whatever thread builds it. */
    if (up != NULL && up->topts != NULL && up->topts->device)
        co.cuda_device = up->topts->cuda_device;
    return tether_coll_configure(tt->t, &co, err, errlen);
}

int tt_train_tether_create(tt_train_tether_t **out, const char *backend,
                           const tt_train_tether_ckpt_t *ck, const tt_train_tether_update_t *up,
                           char *err, size_t errlen) {
    *out = NULL;
    tt_train_tether_t *tt = calloc(1, sizeof(*tt));
    if (tt == NULL)
        return TT_ENOMEM;
    tether_opts_t o;
    tether_opts_default(&o);
    int rc = tether_opts_from_env(&o, err, errlen);
    o.job.checkpoint_every_steps = ck->every_steps;
    o.job.checkpoint_every_ms = ck->every_ms;
    o.job.checkpoint_keep = ck->keep;
    if (rc == TETHER_OK)
        rc = tether_create(&tt->t, &o, err, errlen);
    if (rc == TETHER_OK)
        rc = configure(tt, backend, up, err, errlen);
    if (rc == TETHER_OK && (rc = tether_join(tt->t, 0)) != TETHER_OK)
        snprintf(err, errlen, "cannot join job '%s' at %s: %s", o.job_id, o.coordinator,
                 tether_last_error(tt->t)[0] ? tether_last_error(tt->t) : tether_strerror(rc));
    if (rc != TETHER_OK) {
        tt_train_tether_destroy(&tt);
        return rc;
    }
    tt->first_step = tether_resume_step(tt->t) > 0 ? tether_resume_step(tt->t) : 0;
    tt->steps_reported = tt->steps_done = tt->first_step;
    *out = tt;
    return TT_OK;
}

/* A failed collective: log the library's sentence once, return its code.
 * Failures the recovery loop survives are warnings, not errors; the end of
 * a finished job and an operator's drain are no failure at all (main says
 * so in a sentence of its own). The status is named once: the library's
 * sentence may end with it already. */
static int failed(tt_train_tether_t *tt, const char *what, int rc) {
    const char *msg = tether_last_error(tt->t);
    char name[48];
    snprintf(name, sizeof(name), "(%s)", tether_status_name(rc));
    size_t n = strlen(msg), k = strlen(name);
    const char *tail = n >= k && strcmp(msg + n - k, name) == 0 ? "" : name;
    int level =
        rc == TT_EJOBDONE || rc == TT_EDRAINED ? TT_LOG_INFO
        : rc == TT_EMEMBERSHIP || rc == TT_ETIMEDOUT || rc == TT_EUNREACHABLE || rc == TT_EFENCED
            ? TT_LOG_WARN
            : TT_LOG_ERROR;
    TT_LOG(level, "train", "%s failed: %s%s%s", what, msg, *tail ? " " : "", tail);
    return rc;
}

/* A regroup acknowledged by tether_step_done and not yet taken by
 * tt_train_ft: libtether would run the next collective in the new
 * generation, where the others begin with the state agreement. So what
 * can start a collective outside a step - a membership call, a metric
 * all-reduce - stops here instead (a step's own calls follow its
 * membership call). The checkpoint hook runs after a step and its
 * failure is not the step's, so the acknowledgement it received must
 * still stop the epoch's metric all-reduce that follows: that was a
 * desync, "rank 0 sent allreduce #1 (int64 x 7, max) but rank 1 expected
 * allreduce #1 (float64 x 2)". */
static int held(const tt_train_tether_t *tt) {
    if (!tt->regrouped)
        return 0;
    TT_DEBUG("train", "generation %" PRIu64 " acknowledged: no collective before the agreement",
             tether_generation(tt->t));
    return 1;
}

static int coll_membership(void *ctx, int *rank, int *world, uint64_t *generation) {
    tt_train_tether_t *tt = ctx;
    if (held(tt))
        return TT_EMEMBERSHIP;
    if (tt->steps_done > tt->steps_reported) {
        int rc = tether_step_done(tt->t, tt->steps_done - 1);
        if (rc == TETHER_REGROUPED) {
            tt->steps_reported = tt->steps_done;
            tt->regrouped = 1;
            TT_INFO("train", "generation %" PRIu64 " formed at the step boundary",
                    tether_generation(tt->t));
            return TT_EMEMBERSHIP;
        }
        if (rc != TETHER_OK)
            return failed(tt, "reporting the step", rc);
        tt->steps_reported = tt->steps_done;
    }
    *rank = tether_rank(tt->t);
    *world = (int)tether_world_size(tt->t);
    *generation = tether_generation(tt->t);
    return TT_OK;
}

static int coll_grad_ready(void *ctx, int tensor) {
    tt_train_tether_t *tt = ctx;
    int rc = tether_grad_ready(tt->t, (size_t)tensor);
    return rc == TETHER_OK ? TT_OK : failed(tt, "gradient all-reduce", rc);
}

static int coll_finish(void *ctx, float *grads, size_t n, double local_count,
                       double *global_count) {
    tt_train_tether_t *tt = ctx;
    (void)grads;
    (void)n;
    int64_t total = 0;
    int rc = tether_step_finish(tt->t, (int64_t)local_count, &total);
    if (rc != TETHER_OK && rc != TETHER_EDIVERGED)
        return failed(tt, "step", rc);
    if (rc == TETHER_EDIVERGED)
        return failed(tt, "divergence audit", rc);
    *global_count = (double)total;
    tt->steps_done++;
    tt->stepped = 1;
    return TT_OK;
}

static int coll_finish_device(void *ctx, float *dgrads, size_t n, double local_count,
                              double *global_count, void *event) {
    tt_train_tether_t *tt = ctx;
    int64_t total = 0;
    int rc = tether_step_finish_device(tt->t, dgrads, n, (int64_t)local_count, &total, event);
    if (rc == TETHER_ENODEV)
        return TT_ENODEV; /* not this backend; nothing was issued */
    if (rc != TETHER_OK)
        return failed(tt, rc == TETHER_EDIVERGED ? "divergence audit" : "step", rc);
    *global_count = (double)total;
    tt->steps_done++;
    tt->stepped = 1;
    return TT_OK;
}

static int coll_ready_device(void *ctx, float *dpart, size_t n, void *event) {
    tt_train_tether_t *tt = ctx;
    int rc = tether_step_ready_device(tt->t, dpart, n, event);
    if (rc == TETHER_ENODEV)
        return TT_ENODEV; /* not this backend; nothing was issued */
    return rc == TETHER_OK ? TT_OK : failed(tt, "gradient all-reduce (device)", rc);
}

static int coll_set_lr(void *ctx, float lr) {
    tt_train_tether_t *tt = ctx;
    int rc = tether_set_lr(tt->t, lr);
    return rc == TETHER_OK ? TT_OK : failed(tt, "setting the learning rate", rc);
}

static int coll_reduce_sum(void *ctx, double *vals, size_t n) {
    tt_train_tether_t *tt = ctx;
    if (held(tt))
        return TT_EMEMBERSHIP;
    int rc = tether_allreduce(tt->t, vals, n, TETHER_FLOAT64, TETHER_SUM);
    return rc == TETHER_OK ? TT_OK : failed(tt, "metric all-reduce", rc);
}

void tt_train_tether_coll(tt_train_tether_t *tt, tt_train_coll_t *coll) {
    memset(coll, 0, sizeof(*coll));
    coll->ctx = tt;
    coll->name = "tether";
    coll->membership = coll_membership;
    coll->grad_ready = coll_grad_ready;
    coll->finish = coll_finish;
    coll->finish_device = tt->on_shards ? NULL : coll_finish_device;
    coll->ready_device = tt->on_shards ? NULL : coll_ready_device;
    coll->reduce_sum = coll_reduce_sum;
    coll->updates_params = tt->on_shards;
    coll->set_lr = tt->on_shards ? coll_set_lr : NULL;
}

int tt_train_tether_on_shards(const tt_train_tether_t *tt, int *parts) {
    if (parts != NULL)
        *parts = tt->on_shards ? tt->parts : 0;
    return tt->on_shards;
}

int tt_train_tether_stepped(const tt_train_tether_t *tt) {
    return tt->stepped;
}

int tt_train_tether_register(tt_train_tether_t *tt, tt_mlp_t *mlp, char *err, size_t errlen) {
    float *grads = tt_mlp_grads(mlp);
    for (int i = 0; i < tt_mlp_tensor_count(mlp); i++) {
        size_t off, len, id;
        tt_mlp_tensor(mlp, i, &off, &len);
        int rc = tether_grad_register(tt->t, grads + off, len, &id);
        if (rc != TETHER_OK || id != (size_t)i) {
            snprintf(err, errlen, "registering gradient tensor %d: %s", i,
                     tether_last_error(tt->t));
            return rc != TETHER_OK ? rc : TT_EINTERNAL;
        }
    }
    /* Fix the layout now: the failover agreement runs collectives before
     * the first step, and the PS backend is built from the tensor table. */
    if (tether_grad_buffer(tt->t, 0) == NULL) {
        snprintf(err, errlen, "fixing the gradient layout: %s", tether_last_error(tt->t));
        return TT_ENOMEM;
    }
    tether_audit_params(tt->t, tt_mlp_params(mlp), tt_mlp_param_count(mlp));
    return TT_OK;
}

struct tether *tt_train_tether_handle(tt_train_tether_t *tt) {
    return tt->t;
}

int tt_train_tether_take_regrouped(tt_train_tether_t *tt) {
    int r = tt->regrouped;
    tt->regrouped = 0;
    return r;
}

int64_t tt_train_tether_steps_done(const tt_train_tether_t *tt) {
    return tt->steps_done;
}

int tt_train_tether_resync(tt_train_tether_t *tt, int64_t steps_done) {
    tt->steps_done = tt->steps_reported = steps_done;
    tt->regrouped = 0;
    int rc = tether_resume_at(tt->t, steps_done);
    return rc == TETHER_OK ? TT_OK : failed(tt, "setting the resume step", rc);
}

int tt_train_tether_rank(tt_train_tether_t *tt) {
    return tether_rank(tt->t);
}

double tt_train_tether_comm_share(tt_train_tether_t *tt) {
    tether_step_stats_t st;
    if (tether_step_stats(tt->t, &st) != TETHER_OK || st.total_step_s <= 0)
        return 0.0;
    return st.total_wait_s / st.total_step_s;
}

/* Why a barrier first: the first rank to say "finished" ends the job for
 * everyone, and a rank still inside the run's last collective (the last
 * epoch's metrics: a ring rank can finish it while its neighbour still
 * receives) or writing its results would have that call abandoned with
 * EJOBDONE and skip the rest. Past the barrier every rank has done all of
 * that. A barrier that fails (EJOBDONE: another rank passed it first; or a
 * regroup at the very end) changes nothing below. */
int tt_train_tether_finish(tt_train_tether_t *tt) {
    tt->steps_reported = tt->steps_done; /* nothing left for destroy to report */
    int rc = tether_barrier(tt->t);
    if (rc != TETHER_OK && rc != TETHER_EJOBDONE)
        TT_WARN("train", "barrier before telling the coordinator the run is complete: %s (%s)",
                tether_last_error(tt->t), tether_status_name(rc));
    rc = tether_leave(tt->t, "finished");
    if (rc != TETHER_OK && rc != TETHER_EJOBDONE)
        TT_WARN("train", "telling the coordinator that the run is complete: %s (%s)",
                tether_last_error(tt->t), tether_status_name(rc));
    return rc;
}

void tt_train_tether_destroy(tt_train_tether_t **ttp) {
    if (ttp == NULL || *ttp == NULL)
        return;
    tt_train_tether_t *tt = *ttp;
    *ttp = NULL;
    if (tt->t != NULL && tt->steps_done > tt->steps_reported)
        tether_step_done(tt->t, tt->steps_done - 1);
    tether_destroy(&tt->t);
    free(tt);
}
