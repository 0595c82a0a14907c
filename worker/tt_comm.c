/* tt_comm: the communication thread, its queue and the backend it drives
 * (the step API is in tt_comm_step.c, the shards' checkpoint in
 * tt_comm_ckpt.c, the pure rules in tt_comm_plan.c).
 *
 * One FIFO carries every collective of the process: synchronous calls put
 * a job on their own stack and wait for it, gradient buckets put theirs in
 * the step's job array and are waited for in step_finish. Because every
 * rank issues the same program-order sequence, the backend sees the same
 * sequence everywhere; mismatches are the backend's to detect (tt_collseq).
 *
 * The thread builds the backend lazily for the generation a job was issued
 * in, and rebuilds it when a job of a newer generation arrives. A job whose
 * generation is no longer the client's current one fails with
 * TT_EMEMBERSHIP without touching the network, and the old backend is
 * destroyed at once: closing its sockets makes ranks still blocked in the
 * old ring fail fast (peer disconnected) instead of waiting for the
 * deadline. When this worker stops being a member (fenced, job failed or
 * finished), the backend in use is aborted, which ends a collective in
 * flight at once. A failure that names a suspect (timeout, disconnect) is
 * reported to the coordinator once per generation, after the job is
 * released, and only while the generation is still current.
 *
 * Locking: `mu` guards the queue, the backend pointer (so dump can read
 * the backend while the thread may destroy it) and the error string. The
 * thread runs collectives without it. Flight records are begun under `mu`
 * at enqueue (so queued work shows in a dump) and finished by the thread;
 * tt_flight locks internally, and `mu` keeps the writes in order. */
#include "tt_comm_internal.h"

#include "tt_clock.h"
#include "tt_coll_nccl.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUBSYS "coll"

void tt_comm_set_error(tt_comm_t *c, const char *fmt, ...) {
    va_list ap;
    char buf[sizeof(c->err)];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->mu);
    memcpy(c->err, buf, sizeof(buf));
    pthread_mutex_unlock(&c->mu);
}

void tt_comm_last_error(tt_comm_t *c, char *out, size_t n) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, n, "%s", c->err);
    pthread_mutex_unlock(&c->mu);
}

/* ---- queue ---- */

/* `wake`: 0 leaves the thread asleep; the job runs ahead of the next one
 * queued (or at tt_comm_kick). */
static void enqueue(tt_comm_t *c, tt_comm_job_t *j, int wake) {
    j->done = 0;
    j->status = TT_OK;
    j->run_ns = 0;
    j->next = NULL;
    pthread_mutex_lock(&c->mu);
    if (j->gen != c->seq_gen) {
        c->seq_gen = j->gen;
        c->seq = 0;
    }
    j->seq = ++c->seq;
    tt_flight_rec_t rec = {.generation = j->gen,
                           .seq = j->seq,
                           .op = (uint8_t)j->kind,
                           .dtype = (uint8_t)(j->kind == TT_COLL_BARRIER ? 0 : j->dt),
                           .redop = (uint8_t)j->op,
                           .bytes = j->count * tt_collseq_dtype_size((int)j->dt),
                           .peer = -1,
                           .t_queued_ns = tt_clock_mono_ns()};
    j->flight_id = tt_flight_begin(c->flight, &rec);
    if (c->stop) {
        j->status = TT_ECLOSED;
        j->done = 1;
    } else if (c->tail != NULL) {
        c->tail->next = j;
        c->tail = j;
    } else {
        c->head = c->tail = j;
    }
    if (wake)
        pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void tt_comm_enqueue(tt_comm_t *c, tt_comm_job_t *j) {
    enqueue(c, j, 1);
}

void tt_comm_enqueue_quiet(tt_comm_t *c, tt_comm_job_t *j) {
    enqueue(c, j, 0);
}

void tt_comm_kick(tt_comm_t *c) {
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int tt_comm_wait(tt_comm_t *c, tt_comm_job_t *j) {
    pthread_mutex_lock(&c->mu);
    while (!j->done)
        pthread_cond_wait(&c->done_cv, &c->mu);
    int rc = j->status;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- backend life cycle (communication thread) ---- */

/* Swaps the backend out under mu (dump may be reading it). */
static const tt_coll_ops_t *detach_backend(tt_comm_t *c, void **inst) {
    pthread_mutex_lock(&c->mu);
    const tt_coll_ops_t *ops = c->ops;
    *inst = c->inst;
    c->ops = NULL;
    c->inst = NULL;
    pthread_mutex_unlock(&c->mu);
    return ops;
}

static void drop_backend(tt_comm_t *c) {
    void *inst;
    const tt_coll_ops_t *ops = detach_backend(c, &inst);
    if (ops != NULL) {
        TT_INFO(SUBSYS, "closing the %s backend of generation %" PRIu64, ops->name, c->inst_gen);
        ops->destroy(&inst);
    }
}

/* The backend leaves c, but its NCCL communicator is kept for the next
 * generation to shrink (NULL when it is not fit: then it is closed like
 * any other). */
static void *take_parent(tt_comm_t *c) {
    void *inst;
    const tt_coll_ops_t *ops = detach_backend(c, &inst);
    TT_INFO(SUBSYS, "keeping the %s communicator of generation %" PRIu64 " to shrink it", ops->name,
            c->inst_gen);
    return tt_coll_nccl_take_parent(ops, &inst);
}

/* Every member's endpoint of this generation ("" where one advertised
 * none): whether a ring can be built is decided on the whole list, which
 * every member sees alike (tt_coll_ring_endpoint_missing). */
static int gather_endpoints(tt_comm_t *c, const tt_comm_view_t *v, char (*eps)[TT_COMM_EP_MAX],
                            const char **ptrs) {
    for (int k = 0; k < v->world; k++) {
        eps[k][0] = '\0';
        int rc = c->hooks.endpoint(c->hooks.ctx, v->generation, k, eps[k], TT_COMM_EP_MAX);
        if (rc == TT_ESTALE)
            return TT_EMEMBERSHIP;
        ptrs[k] = eps[k];
    }
    return TT_OK;
}

/* tt_coll_cfg_t.gone: a backend being built for `gen` will never serve
 * it (a newer generation, or no longer a member). */
static int generation_gone(void *ctx, uint64_t gen) {
    tt_comm_t *c = ctx;
    pthread_mutex_lock(&c->mu);
    uint64_t notified = c->notified_gen;
    pthread_mutex_unlock(&c->mu);
    tt_comm_view_t v;
    c->hooks.view(c->hooks.ctx, &v);
    return tt_comm_plan_gone(notified, &v, gen);
}

/* `parent`: the previous generation's NCCL communicator that this one, as
 * announced, shrinks (tt_coll_cfg_t.parent; NULL: none); always consumed. */
static int open_backend(tt_comm_t *c, const tt_comm_view_t *v, void *parent) {
    char err[512] = "";
    char(*eps)[TT_COMM_EP_MAX] = calloc((size_t)v->world, sizeof(*eps));
    const char **ptrs = calloc((size_t)v->world, sizeof(*ptrs));
    int rc = ptrs != NULL && eps != NULL ? gather_endpoints(c, v, eps, ptrs) : TT_ENOMEM;
    pthread_mutex_lock(&c->mu);
    const size_t *tcounts = c->tcounts; /* set once, freed only at destroy */
    size_t ntcounts = c->ntcounts;
    pthread_mutex_unlock(&c->mu);
    tt_coll_cfg_t cfg = {.rank = v->rank,
                         .world = v->world,
                         .generation = v->generation,
                         .endpoints = ptrs,
                         .bind_endpoint = c->opts.bind_endpoint[0] ? c->opts.bind_endpoint : NULL,
                         .ring_tcp_only = c->opts.ring_tcp_only,
                         .device = c->opts.cuda_device,
                         .deadline_ms = c->opts.deadline_ms,
                         .segment_bytes = c->opts.segment_bytes,
                         .coordinator = c->opts.coordinator,
                         .key = &c->opts.key,
                         .job_id = c->opts.job_id,
                         .worker_id = c->opts.worker_id,
                         .min_shards = c->opts.min_shards,
                         .shard_wait_ms = c->opts.shard_wait_ms,
                         .tensor_counts = tcounts,
                         .ntensors = ntcounts,
                         .shard_update = c->opts.shard_update,
                         .optim = c->opts.optim,
                         .sgd = c->opts.sgd,
                         .adamw = c->opts.adamw,
                         .ps_until_step = v->ps_until_step,
                         .job_nonce = v->job_nonce,
                         .shrink = v->shrink.of != 0 ? &v->shrink : NULL,
                         .parent = parent,
                         .gone = generation_gone,
                         .gone_ctx = c};
    const tt_coll_ops_t *ops = NULL;
    void *inst = NULL;
    if (rc == TT_OK) {
        rc = tt_coll_open(c->opts.backend, &cfg, &ops, &inst, err, sizeof(err));
    } else {
        snprintf(err, sizeof(err), "%s", tt_strerror(rc));
        tt_coll_nccl_parent_free(parent);
    }
    free(ptrs);
    free(eps);
    pthread_mutex_lock(&c->mu); /* tt_comm_generation_changed reads it */
    c->inst_gen = v->generation;
    pthread_mutex_unlock(&c->mu);
    c->open_rc = rc;
    if (rc != TT_OK) {
        snprintf(c->open_err, sizeof(c->open_err),
                 "no collective backend for generation %" PRIu64 " (%s): %s", v->generation,
                 tt_coll_kind_name(c->opts.backend), err);
        TT_WARN(SUBSYS, "%s", c->open_err);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    c->ops = ops;
    c->inst = inst;
    if (c->notified_gen > c->inst_gen)
        ops->abort(inst); /* outdated while it was being built */
    pthread_mutex_unlock(&c->mu);
    /* Membership may have ended while it was built, before ops was set for
     * tt_comm_membership_ended to see: the state changes before the hook
     * runs, so one of the two catches it. */
    tt_comm_view_t now;
    c->hooks.view(c->hooks.ctx, &now);
    if (now.status != TT_OK)
        tt_comm_membership_ended(c);
    return TT_OK;
}

/* Makes the backend serve `gen`: TT_OK, TT_EMEMBERSHIP (gen is gone), or
 * the sticky error of a failed open for this generation. */
static int ensure_backend(tt_comm_t *c, uint64_t gen, tt_comm_view_t *v) {
    c->hooks.view(c->hooks.ctx, v);
    if (v->status != TT_OK)
        return v->status; /* fenced, failed, closed: nothing to build */
    int keep = tt_comm_plan_keeps_parent(c->inst_gen, tt_coll_nccl_row(c->ops), v->shrink.of);
    if (v->generation != gen) {
        if (c->inst_gen != v->generation && !keep)
            drop_backend(c);
        return TT_EMEMBERSHIP;
    }
    if (c->inst_gen == gen && (c->ops != NULL || c->open_rc != TT_OK))
        return c->ops != NULL ? TT_OK : c->open_rc;
    void *parent = keep ? take_parent(c) : NULL;
    if (!keep)
        drop_backend(c);
    return open_backend(c, v, parent);
}

/* ---- running one job ---- */

/* A whole-step backend: buckets wait for the count job, which reduces the
 * whole buffer and the count in one call and leaves means. */
static int run_step_reduce(tt_comm_t *c, tt_comm_job_t *j) {
    if (j->role == TT_COMM_JOB_BUCKET)
        return TT_OK;
    int64_t *count = j->buf, global = 0;
    if (c->ops->set_lr != NULL)
        c->ops->set_lr(c->inst, j->lr);
    int rc = c->ops->reduce_step(c->inst, j->flat, j->flat_count, *count, &global, j->step);
    if (rc == TT_OK) {
        *count = global;
        j->averaged = 1;
    }
    return rc;
}

/* A state transfer through the shards: root is 1 for put, 0 for get. */
static int run_state_io(tt_comm_t *c, tt_comm_job_t *j) {
    if (c->ops->state_io == NULL)
        return TT_ENODEV;
    return c->ops->state_io(c->inst, j->root, (int)j->op, j->buf, j->count, j->optim_step);
}

/* Gradients and count reduced where they are; only the NCCL rows read
 * device memory (the "nccl+ps" row stages its shard-server steps itself). */
static int run_device_step(tt_comm_t *c, tt_comm_job_t *j) {
    if (c->ops == NULL || c->ops->reduce_step_device == NULL)
        return TT_ENODEV;
    double global = 0.0;
    int rc = c->ops->reduce_step_device(c->inst, j->buf, j->count, j->early, j->nearly,
                                        (double)*j->io_count, &global, j->after, j->step);
    if (rc == TT_OK)
        *j->io_count = (int64_t)(global + 0.5);
    return rc;
}

static int run_device_part(tt_comm_t *c, tt_comm_job_t *j) {
    if (c->ops == NULL || c->ops->reduce_part_device == NULL)
        return TT_ENODEV;
    return c->ops->reduce_part_device(c->inst, j->buf, j->count, j->after, j->step);
}

/* The step's last bucket with the example count in the same collective
 * (the count job then has nothing left to do). */
static int run_fused(tt_comm_t *c, tt_comm_job_t *j) {
    int rc = c->ops->allreduce_side(c->inst, j->buf, j->count, j->dt, j->op, j->fuse->buf);
    if (rc == TT_OK)
        j->fuse->fused = 1;
    return rc;
}

static int run_op(tt_comm_t *c, tt_comm_job_t *j) {
    if (j->role == TT_COMM_JOB_COUNT && j->fused)
        return TT_OK;
    c->ops->set_step(c->inst, j->step);
    if (j->role == TT_COMM_JOB_STATE)
        return run_state_io(c, j);
    /* j->step is this rank's next step (-1: none yet): the shards' state
     * must follow the one before, the last step this rank completed. */
    if (j->role == TT_COMM_JOB_CKPT)
        return c->ops->write_ckpt != NULL ? c->ops->write_ckpt(c->inst, j->buf, j->phase,
                                                               j->step - 1, j->written, j->nwritten)
                                          : TT_ENODEV;
    if (j->role == TT_COMM_JOB_DEVICE)
        return run_device_step(c, j);
    if (j->role == TT_COMM_JOB_DEVICE_PART)
        return run_device_part(c, j);
    if (c->ops->reduce_step != NULL && j->role != TT_COMM_JOB_PLAIN &&
        (c->ops->whole_step == NULL || c->ops->whole_step(c->inst, j->step)))
        return run_step_reduce(c, j);
    switch (j->kind) {
    case TT_COLL_ALLREDUCE:
        if (j->fuse != NULL && c->ops->allreduce_side != NULL)
            return run_fused(c, j);
        return c->ops->allreduce(c->inst, j->buf, j->count, j->dt, j->op);
    case TT_COLL_BROADCAST:
        return c->ops->broadcast(c->inst, j->buf, j->count, j->dt, j->root);
    default:
        return c->ops->barrier(c->inst);
    }
}

static void describe_job(const tt_comm_job_t *j, char *buf, size_t n) {
    if (j->role == TT_COMM_JOB_STATE) {
        snprintf(buf, n, "state %s #%" PRIu64 " (part %d, float32 x %zu, through the shards)",
                 j->root ? "upload" : "download", j->seq, (int)j->op, j->count);
        return;
    }
    if (j->role == TT_COMM_JOB_CKPT) {
        snprintf(buf, n, "checkpoint #%" PRIu64 " (the shard servers write their parts)", j->seq);
        return;
    }
    if (j->role == TT_COMM_JOB_DEVICE) {
        snprintf(buf, n, "step #%" PRIu64 " (float32 x %zu and the count, on the device)", j->seq,
                 j->count);
        return;
    }
    if (j->role == TT_COMM_JOB_DEVICE_PART) {
        snprintf(buf, n, "step part #%" PRIu64 " (float32 x %zu, on the device)", j->seq, j->count);
        return;
    }
    tt_coll_fp_t fp = {(uint8_t)j->kind, (uint8_t)(j->kind == TT_COLL_BARRIER ? 0 : j->dt),
                       (uint8_t)j->op, j->kind == TT_COLL_BROADCAST ? j->root : -1, j->count};
    tt_collseq_describe(&fp, j->seq, buf, n);
}

/* Turns a failed job into the caller's status and sentence. A failure in
 * a generation that has ended since is a membership change, whatever the
 * backend saw (a peer that moved on closes its sockets). */
static int explain_failure(tt_comm_t *c, tt_comm_job_t *j, int rc, int *suspect) {
    char what[160];
    tt_comm_view_t v;
    describe_job(j, what, sizeof(what));
    c->hooks.view(c->hooks.ctx, &v);
    *suspect = -1;
    if (v.status != TT_OK) {
        tt_comm_set_error(c, "%s abandoned: this worker is no longer a member (%s)", what,
                          tt_status_name(v.status));
        return v.status;
    }
    if (rc == TT_EMEMBERSHIP || v.generation != j->gen) {
        tt_comm_set_error(c,
                          "generation %" PRIu64 " ended during %s (now generation %" PRIu64
                          "): call tether_step_done, then resume at tether_resume_step",
                          j->gen, what, v.generation);
        return TT_EMEMBERSHIP;
    }
    if (c->ops == NULL) {
        tt_comm_set_error(c, "%s", c->open_err);
        return rc;
    }
    if ((j->role == TT_COMM_JOB_STATE && c->ops->state_io == NULL) ||
        (j->role == TT_COMM_JOB_CKPT && c->ops->write_ckpt == NULL)) {
        tt_comm_set_error(c, "%s: the %s backend has no shard servers", what, c->ops->name);
        return rc;
    }
    *suspect = c->ops->suspect(c->inst);
    tt_comm_set_error(c, "%s failed on the %s backend: %s", what, c->ops->name,
                      c->ops->last_error(c->inst));
    return rc;
}

static void report_suspect(tt_comm_t *c, uint64_t gen, int rc, int suspect) {
    tt_comm_view_t v;
    if (rc == TT_OK || c->hooks.report == NULL)
        return;
    c->hooks.view(c->hooks.ctx, &v);
    suspect = tt_comm_plan_report(rc, suspect, v.rank);
    if (suspect == -1 || v.generation != gen ||
        (c->reported_gen == gen && c->reported_rank == suspect))
        return;
    c->reported_gen = gen;
    c->reported_rank = suspect;
    char reason[sizeof(c->err)], who[64] = "every other rank (the backend names none)";
    tt_comm_last_error(c, reason, sizeof(reason));
    int r = c->hooks.report(c->hooks.ctx, suspect, reason);
    if (suspect >= 0)
        snprintf(who, sizeof(who), "rank %d", suspect);
    TT_WARN(SUBSYS, "reported %s of generation %" PRIu64 " to the coordinator (%s)", who, gen,
            tt_status_name(r));
}

static void log_failure(tt_comm_t *c, int rc) {
    char msg[sizeof(c->err)];
    tt_comm_last_error(c, msg, sizeof(msg));
    TT_WARN(SUBSYS, "%s (%s)", msg, tt_status_name(rc));
    if (rc == TT_EINVAL)
        return;
    char *dump =
        tt_flight_dump(c->flight, "this process (API)", tt_clock_mono_ns(), TT_FLIGHT_LOG_RECORDS);
    if (dump != NULL)
        TT_WARN(SUBSYS, "%s", dump);
    free(dump);
}

static void run_job(tt_comm_t *c, tt_comm_job_t *j) {
    uint64_t t0 = tt_clock_mono_ns();
    tt_flight_started(c->flight, j->flight_id, t0);
    tt_comm_view_t v;
    int rc = ensure_backend(c, j->gen, &v), suspect = -1, unsupported = 0;
    if (rc == TT_OK) {
        rc = run_op(c, j);
        unsupported = rc == TT_ENODEV;
    }
    /* A checkpoint's parts still being written is an answer, not a failure. */
    int asked_again = j->role == TT_COMM_JOB_CKPT && rc == TT_EAGAIN;
    if (rc != TT_OK && !asked_again)
        rc = explain_failure(c, j, rc, &suspect);
    /* Nor is an op this backend does not have (a state upload on the
     * ring): nothing was issued, and its caller falls back. */
    int quiet = asked_again || (unsupported && rc == TT_ENODEV);
    uint64_t t1 = tt_clock_mono_ns();
    tt_flight_finish(c->flight, j->flight_id, t1, rc);
    if (rc != TT_OK && !quiet && !c->logged_failure) {
        c->logged_failure = 1; /* one dump per failure, not one per queued job */
        log_failure(c, rc);
    } else if (rc == TT_OK) {
        c->logged_failure = 0;
    }
    uint64_t gen = j->gen;
    pthread_mutex_lock(&c->mu);
    j->status = rc;
    j->run_ns = t1 - t0;
    j->done = 1;
    pthread_cond_broadcast(&c->done_cv);
    pthread_mutex_unlock(&c->mu);
    report_suspect(c, gen, rc, suspect); /* j belongs to its waiter again */
}

/* Idle and told of a newer generation: close the old backend now rather
 * than at the next collective. Holds mu on entry and exit. */
static int drop_if_stale(tt_comm_t *c) {
    if (c->ops == NULL || c->notified_gen <= c->inst_gen)
        return 0;
    pthread_mutex_unlock(&c->mu);
    drop_backend(c);
    pthread_mutex_lock(&c->mu);
    return 1;
}

static void *comm_main(void *arg) {
    tt_comm_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->head == NULL && !c->stop)
            if (!drop_if_stale(c))
                pthread_cond_wait(&c->cv, &c->mu);
        if (c->head == NULL)
            break;
        tt_comm_job_t *j = c->head;
        c->head = j->next;
        if (c->head == NULL)
            c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        run_job(c, j);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    drop_backend(c);
    return NULL;
}

/* ---- life cycle ---- */

static int init_sync(tt_comm_t *c) {
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        return TT_ESYS;
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        return TT_ESYS;
    }
    if (pthread_cond_init(&c->done_cv, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return TT_ESYS;
    }
    c->sync_ok = 1;
    return TT_OK;
}

static void free_comm(tt_comm_t *c) {
    tt_comm_step_release(c);
    tt_comm_ckpt_release(c);
    tt_flight_destroy(&c->flight);
    if (c->sync_ok) {
        pthread_cond_destroy(&c->done_cv);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    free(c);
}

int tt_comm_create(tt_comm_t **out, const tt_comm_opts_t *opts, const tt_comm_hooks_t *hooks) {
    if (out == NULL || opts == NULL || hooks == NULL || hooks->view == NULL ||
        hooks->endpoint == NULL)
        return TT_EINVAL;
    *out = NULL;
    tt_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TT_ENOMEM;
    c->opts = *opts;
    c->hooks = *hooks;
    c->reported_rank = -1;
    c->step_index = -1;
    int rc;
    TT_CHECK_GOTO(tt_flight_create(&c->flight, opts->flight_capacity), rc, fail);
    TT_CHECK_GOTO(init_sync(c), rc, fail);
    TT_CHECK_GOTO(pthread_create(&c->thread, NULL, comm_main, c) == 0 ? TT_OK : TT_ESYS, rc, fail);
    *out = c;
    return TT_OK;
fail:
    free_comm(c);
    return rc;
}

void tt_comm_generation_changed(tt_comm_t *c, uint64_t gen, uint64_t shrink_of) {
    pthread_mutex_lock(&c->mu);
    if (gen > c->notified_gen) {
        c->notified_gen = gen;
        /* A collective of an older generation can no longer complete as
         * such: end it now rather than at its deadline (DESIGN §4); an
         * NCCL communicator the new generation shrinks is revoked, which
         * keeps it for the shrink. */
        int keeps = tt_comm_plan_keeps_parent(c->inst_gen, tt_coll_nccl_row(c->ops), shrink_of);
        if (c->ops != NULL && c->inst_gen < gen &&
            tt_comm_plan_cuts_short(keeps, tt_coll_nccl_revokes()))
            c->ops->abort(c->inst);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

void tt_comm_membership_ended(tt_comm_t *c) {
    pthread_mutex_lock(&c->mu);
    if (c->ops != NULL)
        c->ops->abort(c->inst);
    pthread_mutex_unlock(&c->mu);
}

int tt_comm_configure(tt_comm_t *c, const tt_comm_opts_t *opts) {
    int rc = TT_OK;
    pthread_mutex_lock(&c->mu);
    if (c->seq_gen != 0 || c->ntensors > 0) {
        rc = TT_EBUSY;
    } else { /* the job's identity stays what the library was created with */
        tt_comm_opts_t o = *opts;
        memcpy(o.coordinator, c->opts.coordinator, sizeof(o.coordinator));
        memcpy(o.job_id, c->opts.job_id, sizeof(o.job_id));
        memcpy(o.worker_id, c->opts.worker_id, sizeof(o.worker_id));
        o.key = c->opts.key;
        c->opts = o;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tt_comm_destroy(tt_comm_t **pc) {
    if (pc == NULL || *pc == NULL)
        return;
    tt_comm_t *c = *pc;
    *pc = NULL;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    for (tt_comm_job_t *j = c->head; j != NULL; j = j->next) {
        j->status = TT_ECLOSED;
        j->done = 1;
    }
    c->head = c->tail = NULL;
    if (c->ops != NULL)
        c->ops->abort(c->inst);
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->done_cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    free_comm(c);
}

/* ---- synchronous collectives ---- */

int tt_comm_view_gated(tt_comm_t *c, tt_comm_view_t *v) {
    char err[sizeof(c->err)];
    c->hooks.view(c->hooks.ctx, v);
    int rc = tt_comm_gate(v, err, sizeof(err));
    if (rc != TT_OK)
        tt_comm_set_error(c, "%s", err);
    return rc;
}

/* Gate, queue, wait. The job lives on the caller's stack. */
int tt_comm_run_sync(tt_comm_t *c, tt_comm_job_t *j) {
    tt_comm_view_t v;
    int rc = tt_comm_view_gated(c, &v);
    if (rc != TT_OK)
        return rc;
    if (j->kind == TT_COLL_BROADCAST && j->role != TT_COMM_JOB_STATE && j->root >= v.world) {
        tt_comm_set_error(c, "broadcast root %d is not a rank of this world of %d", j->root,
                          v.world);
        return TT_EINVAL;
    }
    j->gen = v.generation;
    j->step = c->step_index;
    tt_comm_enqueue(c, j);
    return tt_comm_wait(c, j);
}

static int check_buf(tt_comm_t *c, const void *buf, size_t count, tt_dtype_t dt) {
    size_t es = tt_collseq_dtype_size((int)dt);
    if (c == NULL)
        return TT_EINVAL;
    if (es == 0 || (buf == NULL && count > 0) || ((uintptr_t)buf % es) != 0) {
        tt_comm_set_error(c,
                          "bad collective arguments: dtype %d, buffer %p, count %zu (the "
                          "buffer must be aligned to its element size)",
                          (int)dt, buf, count);
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_comm_allreduce(tt_comm_t *c, void *buf, size_t count, tt_dtype_t dt, tt_redop_t op) {
    if (check_buf(c, buf, count, dt) != TT_OK)
        return TT_EINVAL;
    if (op < TT_RED_SUM || op > TT_RED_MAX) {
        tt_comm_set_error(c, "reduction %d is not sum, min or max", (int)op);
        return TT_EINVAL;
    }
    tt_comm_job_t j = {
        .kind = TT_COLL_ALLREDUCE, .buf = buf, .count = count, .dt = dt, .op = op, .root = -1};
    return tt_comm_run_sync(c, &j);
}

/* A broadcast-shaped job: a broadcast, or a state transfer (role STATE,
 * `op` the part, `root` 1 for put), which flight records show so. */
static int run_buffer_job(tt_comm_t *c, int role, void *buf, size_t count, tt_dtype_t dt, int op,
                          int root, uint64_t optim_step) {
    tt_comm_job_t j = {.kind = TT_COLL_BROADCAST,
                       .role = role,
                       .buf = buf,
                       .count = count,
                       .dt = dt,
                       .op = (tt_redop_t)op,
                       .root = root,
                       .optim_step = optim_step};
    return tt_comm_run_sync(c, &j);
}

int tt_comm_broadcast(tt_comm_t *c, void *buf, size_t count, tt_dtype_t dt, int root) {
    if (check_buf(c, buf, count, dt) != TT_OK)
        return TT_EINVAL;
    if (root < 0) {
        tt_comm_set_error(c, "broadcast root %d is negative", root);
        return TT_EINVAL;
    }
    return run_buffer_job(c, TT_COMM_JOB_PLAIN, buf, count, dt, TT_RED_NONE, root, 0);
}

int tt_comm_barrier(tt_comm_t *c) {
    if (c == NULL)
        return TT_EINVAL;
    tt_comm_job_t j = {.kind = TT_COLL_BARRIER, .dt = TT_DT_FLOAT32, .op = TT_RED_NONE, .root = -1};
    return tt_comm_run_sync(c, &j);
}

int tt_comm_state_io(tt_comm_t *c, int put, int part, float *buf, size_t count,
                     uint64_t optim_step) {
    if (check_buf(c, buf, count, TT_DT_FLOAT32) != TT_OK)
        return TT_EINVAL;
    if (part < 0 || part > 2) {
        tt_comm_set_error(c, "state part %d is not 0 (parameters), 1 or 2 (optimizer)", part);
        return TT_EINVAL;
    }
    return run_buffer_job(c, TT_COMM_JOB_STATE, buf, count, TT_DT_FLOAT32, part, put ? 1 : 0,
                          optim_step);
}

int tt_comm_set_lr(tt_comm_t *c, float lr) {
    if (c == NULL)
        return TT_EINVAL;
    if (!c->opts.shard_update) {
        tt_comm_set_error(c, "the learning rate is the application's: the update is local "
                             "(it goes to the shards only with the update on the shards)");
        return TT_EINVAL;
    }
    if (!(lr >= 0.0f && lr <= 1e30f)) {
        tt_comm_set_error(c, "learning rate %g is not a finite value >= 0", (double)lr);
        return TT_EINVAL;
    }
    c->lr = lr;
    return TT_OK;
}

/* ---- dump ---- */

char *tt_comm_dump(tt_comm_t *c, const char *who) {
    char *api = tt_flight_dump(c->flight, who, tt_clock_mono_ns(), 0);
    pthread_mutex_lock(&c->mu);
    char *be = c->ops != NULL ? c->ops->dump(c->inst) : NULL;
    const char *name = c->ops != NULL ? c->ops->name : "none built";
    const char *tail = be != NULL ? be : c->ops != NULL ? "no records of its own\n" : "\n";
    size_t n = (api ? strlen(api) : 0) + strlen(tail) + 128;
    char *out = api != NULL ? malloc(n) : NULL;
    if (out != NULL)
        snprintf(out, n, "%sbackend %s: %s", api, name, tail);
    pthread_mutex_unlock(&c->mu);
    free(api);
    free(be);
    return out;
}
