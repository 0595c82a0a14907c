/* tt_comm_step: the data-parallel step on top of the communication thread:
 * gradient registration, the flat buffer and its buckets, bucket launch as
 * gradients become ready, the exact example count, averaging, copy-back,
 * statistics and the divergence audit. All of it runs on the thread that
 * drives the step; the communication thread only sees queued jobs.
 *
 * Zero copy: when the registered tensors already lie back to back in one
 * array (the reference trainer's gradients do), that array IS the flat
 * buffer and nothing is copied. Otherwise the library owns a flat buffer,
 * copies a tensor in when it is marked ready (or at step_finish), and
 * copies the result back at the end; tensors registered with a NULL
 * pointer live only in the flat buffer (tether_grad_buffer).
 *
 * The example count is an int64 (float32 cannot count past 2^24 exactly).
 * It travels with the gradients: the last bucket is held until step_finish
 * gives the count, and on backends that can (the ring) the count rides in
 * that bucket's all-reduce; elsewhere the count job queued after it
 * reduces it on its own. A collective of its own cost a whole ring's
 * latency per step (2(W-1) hops), 5 % of a W=2 and 19 % of a W=4 step of
 * the reference MLP on 2 cores. */
#include "tt_comm_internal.h"

#include "tt_checksum.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS    "coll"
#define MAX_NAMED 8 /* ranks named in a divergence message */

void tt_comm_step_release(tt_comm_t *c) {
    if (!c->zero_copy)
        free(c->flat);
    c->flat = NULL;
    free(c->tcounts);
    free(c->tensors);
    free(c->bjobs);
    free(c->launched);
    free(c->scratch_done);
    free(c->scratch_launch);
    tt_comm_plan_release(&c->plan);
    tt_buckets_destroy(&c->buckets);
}

static int make_buckets(tt_comm_t *c) {
    if (c->buckets != NULL)
        return TT_OK;
    tt_buckets_opts_t bo = {.elem_size = sizeof(float),
                            .bucket_bytes = c->opts.bucket_bytes,
                            .first_bucket_bytes = c->opts.first_bucket_bytes};
    int rc = tt_buckets_create(&c->buckets, &bo);
    if (rc != TT_OK)
        tt_comm_set_error(c, "bad bucket sizes (%zu, first %zu bytes): %s", c->opts.bucket_bytes,
                          c->opts.first_bucket_bytes, tt_strerror(rc));
    return rc;
}

int tt_comm_grad_register(tt_comm_t *c, float *ptr, size_t count, size_t *id) {
    if (c == NULL || count == 0 || id == NULL)
        return TT_EINVAL;
    if (c->finalized) {
        tt_comm_set_error(c, "gradients must all be registered before the first step");
        return TT_EBUSY;
    }
    int rc = make_buckets(c);
    if (rc != TT_OK)
        return rc;
    if (c->ntensors == c->tcap) {
        size_t cap = c->tcap ? c->tcap * 2 : 16;
        void *p = realloc(c->tensors, cap * sizeof(*c->tensors));
        if (p == NULL)
            return TT_ENOMEM;
        c->tensors = p;
        c->tcap = cap;
    }
    size_t idx;
    TT_CHECK_GOTO(tt_buckets_add(c->buckets, count, &idx), rc, out);
    c->tensors[c->ntensors++] = (tt_comm_tensor_t){ptr, count, 0};
    *id = idx;
out:
    return rc;
}

/* Zero copy when tensor i+1 starts where tensor i ends, all registered. */
static int contiguous(const tt_comm_t *c) {
    for (size_t i = 0; i < c->ntensors; i++) {
        if (c->tensors[i].user == NULL)
            return 0;
        if (i > 0 && c->tensors[i].user != c->tensors[i - 1].user + c->tensors[i - 1].count)
            return 0;
    }
    return c->ntensors > 0;
}

static int alloc_flat(tt_comm_t *c, size_t total) {
    c->zero_copy = contiguous(c);
    if (c->zero_copy) {
        c->flat = c->tensors[0].user;
        return TT_OK;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, (total ? total : 1) * sizeof(float)) != 0)
        return TT_ENOMEM;
    memset(p, 0, (total ? total : 1) * sizeof(float));
    c->flat = p;
    for (size_t i = 0; i < c->ntensors; i++) /* start from the user's values */
        if (c->tensors[i].user != NULL) {
            size_t off, n;
            tt_buckets_tensor_span(c->buckets, i, &off, &n);
            memcpy(c->flat + off, c->tensors[i].user, n * sizeof(float));
        }
    return TT_OK;
}

/* The tensor table, for backends that declare it (ps); read by the
 * communication thread under mu. */
static int publish_counts(tt_comm_t *c) {
    size_t *counts = malloc((c->ntensors ? c->ntensors : 1) * sizeof(*counts));
    if (counts == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < c->ntensors; i++)
        counts[i] = c->tensors[i].count;
    pthread_mutex_lock(&c->mu);
    c->tcounts = counts;
    c->ntcounts = c->ntensors;
    pthread_mutex_unlock(&c->mu);
    return TT_OK;
}

static int finalize(tt_comm_t *c) {
    if (c->finalized)
        return TT_OK;
    int rc;
    TT_CHECK_GOTO(make_buckets(c), rc, out);
    TT_CHECK_GOTO(tt_buckets_finalize(c->buckets), rc, out);
    size_t nb = tt_buckets_count(c->buckets), slots = nb ? nb : 1;
    TT_CHECK_GOTO(alloc_flat(c, tt_buckets_total(c->buckets)), rc, out);
    c->bjobs = calloc(slots, sizeof(*c->bjobs));
    c->launched = calloc(slots, 1);
    c->scratch_done = calloc(slots, sizeof(size_t));
    c->scratch_launch = calloc(slots, sizeof(size_t));
    if (!c->bjobs || !c->launched || !c->scratch_done || !c->scratch_launch) {
        rc = TT_ENOMEM;
        goto out;
    }
    TT_CHECK_GOTO(tt_comm_plan_init(&c->plan, nb), rc, out);
    TT_CHECK_GOTO(publish_counts(c), rc, out);
    c->stats.buckets = nb;
    c->stats.bytes_per_step = (uint64_t)tt_buckets_total(c->buckets) * sizeof(float);
    c->finalized = 1;
    TT_INFO(SUBSYS, "%zu gradient tensors, %zu elements in %zu buckets%s", c->ntensors,
            tt_buckets_total(c->buckets), nb, c->zero_copy ? " (zero copy)" : "");
out:
    return rc;
}

float *tt_comm_grad_buffer(tt_comm_t *c, size_t id) {
    size_t off, n;
    if (c == NULL || finalize(c) != TT_OK || id >= c->ntensors ||
        tt_buckets_tensor_span(c->buckets, id, &off, &n) != TT_OK)
        return NULL;
    return c->flat + off;
}

/* A step starts with its first grad_ready (or step_finish): it is bound to
 * the generation current then, and counts steps from the resume step. */
static int open_step(tt_comm_t *c) {
    if (c->step_open)
        return TT_OK;
    tt_comm_view_t v;
    int rc = tt_comm_view_gated(c, &v);
    if (rc != TT_OK)
        return rc;
    if (v.generation != c->step_gen || c->step_index < 0) {
        c->step_gen = v.generation;
        c->step_index = v.resume_step >= 0 ? v.resume_step : 0;
    }
    c->step_open = 1;
    c->step_open_ns = tt_clock_mono_ns();
    return TT_OK;
}

int tt_comm_resume_at(tt_comm_t *c, int64_t step) {
    if (c == NULL || step < 0)
        return TT_EINVAL;
    if (c->step_open) {
        tt_comm_set_error(c, "resume_at(%" PRId64 ") while step %" PRId64 " is open", step,
                          c->step_index);
        return TT_EBUSY;
    }
    tt_comm_view_t v;
    c->hooks.view(c->hooks.ctx, &v);
    if (v.generation == 0) {
        tt_comm_set_error(c, "resume_at(%" PRId64 ") before the first generation", step);
        return TT_EINVAL;
    }
    c->step_gen = v.generation;
    c->step_index = step;
    return TT_OK;
}

/* A step begun on the device ends there: its parts are in flight. */
static int host_step_ok(tt_comm_t *c) {
    if (c->ndev_parts == 0)
        return TT_OK;
    tt_comm_set_error(c, "this step started on the device (step_ready_device): end it with "
                         "step_finish_device");
    return TT_EBUSY;
}

static void launch_bucket(tt_comm_t *c, size_t b) {
    size_t off, n;
    tt_buckets_bucket_span(c->buckets, b, &off, &n);
    tt_comm_job_t *j = &c->bjobs[b];
    *j = (tt_comm_job_t){.kind = TT_COLL_ALLREDUCE,
                         .role = TT_COMM_JOB_BUCKET,
                         /* only launch_rest launches the last one */
                         .fuse = b + 1 == c->plan.nbuckets ? &c->count_job : NULL,
                         .buf = c->flat + off,
                         .count = n,
                         .dt = TT_DT_FLOAT32,
                         .op = TT_RED_SUM,
                         .root = -1,
                         .gen = c->step_gen,
                         .step = c->step_index};
    c->launched[b] = 1;
    tt_comm_enqueue(c, j);
}

static void copy_in(tt_comm_t *c, size_t id) {
    tt_comm_tensor_t *t = &c->tensors[id];
    size_t off, n;
    t->ready = 1;
    if (c->zero_copy || t->user == NULL)
        return;
    tt_buckets_tensor_span(c->buckets, id, &off, &n);
    memcpy(c->flat + off, t->user, n * sizeof(float));
}

int tt_comm_grad_ready(tt_comm_t *c, size_t id) {
    if (c == NULL)
        return TT_EINVAL;
    int rc = finalize(c);
    if (rc == TT_OK && id >= c->ntensors)
        rc = TT_ENOTFOUND;
    if (rc == TT_OK)
        rc = host_step_ok(c);
    if (rc == TT_OK)
        rc = open_step(c);
    if (rc != TT_OK)
        return rc;
    if (c->tensors[id].ready) {
        tt_comm_set_error(c, "grad_ready(%zu) called twice in one step", id);
        return TT_EEXIST;
    }
    copy_in(c, id);
    size_t ndone = 0, nl = 0;
    rc = tt_buckets_grad_ready(c->buckets, id, c->scratch_done, &ndone);
    if (rc != TT_OK)
        return rc;
    tt_comm_plan_complete(&c->plan, c->scratch_done, ndone, c->scratch_launch, &nl);
    for (size_t i = 0; i < nl; i++)
        launch_bucket(c, c->scratch_launch[i]);
    return TT_OK;
}

/* Waits for every job of the step; the first failure (in issue order)
 * decides the status. Sums the thread's time in them. */
static int wait_step(tt_comm_t *c, uint64_t *comm_ns) {
    int first = TT_OK;
    *comm_ns = 0;
    for (size_t b = 0; b < c->plan.nbuckets; b++) {
        if (!c->launched[b])
            continue;
        int rc = tt_comm_wait(c, &c->bjobs[b]);
        *comm_ns += c->bjobs[b].run_ns;
        first = first == TT_OK ? rc : first;
    }
    int rc = tt_comm_wait(c, &c->count_job);
    *comm_ns += c->count_job.run_ns;
    return first == TT_OK ? rc : first;
}

static void reset_step(tt_comm_t *c) {
    tt_comm_plan_reset(&c->plan);
    tt_buckets_reset(c->buckets);
    memset(c->launched, 0, c->plan.nbuckets ? c->plan.nbuckets : 1);
    for (size_t i = 0; i < c->ntensors; i++)
        c->tensors[i].ready = 0;
    c->step_open = 0;
}

/* Sum -> mean over the global count (a whole-step backend already left
 * means: undo only when sums were asked for; with the update on the shards
 * it left parameters), then back into separate tensors. */
static void average_and_copy_out(tt_comm_t *c, int64_t global, int averaged) {
    size_t total = tt_buckets_total(c->buckets);
    float n = (float)global;
    if (c->opts.shard_update) {
        /* parameters: nothing to scale */
    } else if (c->opts.average && global > 0 && !averaged) {
        for (size_t i = 0; i < total; i++)
            c->flat[i] /= n;
    } else if (!c->opts.average && averaged) {
        for (size_t i = 0; i < total; i++)
            c->flat[i] *= n;
    }
    for (size_t i = 0; !c->zero_copy && i < c->ntensors; i++) {
        size_t off, cnt;
        if (c->tensors[i].user == NULL)
            continue;
        tt_buckets_tensor_span(c->buckets, i, &off, &cnt);
        memcpy(c->tensors[i].user, c->flat + off, cnt * sizeof(float));
    }
}

static void note_stats(tt_comm_t *c, uint64_t t0, uint64_t comm_ns) {
    uint64_t now = tt_clock_mono_ns();
    tt_comm_stats_t *s = &c->stats;
    s->steps++;
    s->last_wait_s = (double)(now - t0) / 1e9;
    s->total_wait_s += s->last_wait_s;
    s->last_comm_s = (double)comm_ns / 1e9;
    /* A step lasts from the previous step_finish (the first one: from its
     * first grad_ready) to this one, so the wait is always inside it. */
    uint64_t from = c->last_finish_ns != 0 ? c->last_finish_ns : c->step_open_ns;
    s->last_step_s = (double)(now - from) / 1e9;
    s->total_step_s += s->last_step_s;
    c->last_finish_ns = now;
}

/* Queues the rest of the step: buckets nobody marked and the last one
 * (with the count riding along where the backend can), then the count. */
static void launch_rest(tt_comm_t *c, int64_t local_count) {
    size_t nl = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        if (!c->tensors[i].ready)
            copy_in(c, i);
    c->count_val = local_count;
    c->count_job = (tt_comm_job_t){.kind = TT_COLL_ALLREDUCE,
                                   .role = TT_COMM_JOB_COUNT,
                                   .buf = &c->count_val,
                                   .count = 1,
                                   .dt = TT_DT_INT64,
                                   .op = TT_RED_SUM,
                                   .root = -1,
                                   .gen = c->step_gen,
                                   .step = c->step_index,
                                   .flat = c->flat,
                                   .flat_count = tt_buckets_total(c->buckets),
                                   .lr = c->lr};
    tt_comm_plan_rest(&c->plan, c->scratch_launch, &nl);
    for (size_t i = 0; i < nl; i++)
        launch_bucket(c, c->scratch_launch[i]);
    tt_comm_enqueue(c, &c->count_job);
}

static int audit_if_due(tt_comm_t *c, int64_t step) {
    if (c->audit_params == NULL || !tt_comm_audit_due(c->opts.audit_every, step))
        return TT_OK;
    int rc = tt_comm_audit(c, c->audit_params, c->audit_count, step);
    if (rc == TT_ENODEV) { /* a backend without plain collectives (ps) */
        TT_DEBUG(SUBSYS, "audit of step %lld skipped: backend has no all-reduce", (long long)step);
        rc = TT_OK;
    }
    return rc;
}

int tt_comm_step_finish(tt_comm_t *c, int64_t local_count, int64_t *global_count) {
    if (c == NULL || local_count < 0)
        return TT_EINVAL;
    uint64_t t0 = tt_clock_mono_ns(), comm_ns = 0;
    int rc = finalize(c);
    if (rc == TT_OK)
        rc = host_step_ok(c);
    if (rc == TT_OK)
        rc = open_step(c);
    if (rc != TT_OK)
        return rc;
    launch_rest(c, local_count);
    rc = wait_step(c, &comm_ns);
    int64_t step = c->step_index;
    if (rc == TT_OK) {
        average_and_copy_out(c, c->count_val, c->count_job.averaged);
        if (global_count != NULL)
            *global_count = c->count_val;
        c->step_index++;
        note_stats(c, t0, comm_ns);
    }
    reset_step(c);
    return rc == TT_OK ? audit_if_due(c, step) : rc;
}

/* Device steps: gradients reduced in device memory, no buckets, no host
 * copy. They are offered only where the configured backend reads device
 * memory (NCCL); elsewhere TT_ENODEV before anything is issued, and the
 * caller stages through the host as before. No averaging: the caller
 * scales by the global count in its optimizer. */
static int device_step_ok(tt_comm_t *c) {
    if (c->opts.backend != TT_COLL_NCCL || c->opts.shard_update)
        return TT_ENODEV;
    if (c->step_open && c->ndev_parts == 0) {
        tt_comm_set_error(c, "this step already started with grad_ready: finish it on the host");
        return TT_EBUSY;
    }
    return TT_OK;
}

/* Waits for the open device step's parts (their jobs are free again);
 * the first failure in issue order is the answer. */
static int settle_parts(tt_comm_t *c, uint64_t *ns) {
    int first = TT_OK;
    for (int i = 0; i < c->ndev_parts; i++) {
        int rc = tt_comm_wait(c, &c->dev_parts[i]);
        *ns += c->dev_parts[i].run_ns;
        first = first == TT_OK ? rc : first;
    }
    c->ndev_parts = 0;
    return first;
}

static int overlaps_a_part(const tt_comm_t *c, const float *d, size_t count) {
    for (int i = 0; i < c->ndev_parts; i++) {
        const float *p = c->dev_parts[i].buf;
        if ((uintptr_t)d < (uintptr_t)(p + c->dev_parts[i].count) &&
            (uintptr_t)p < (uintptr_t)(d + count))
            return 1;
    }
    return 0;
}

/* A device step's job, bound to the open step. */
static tt_comm_job_t device_job(const tt_comm_t *c, int role, float *buf, size_t count,
                                void *after) {
    return (tt_comm_job_t){.kind = TT_COLL_ALLREDUCE,
                           .role = role,
                           .buf = buf,
                           .count = count,
                           .dt = TT_DT_FLOAT32,
                           .op = TT_RED_SUM,
                           .root = -1,
                           .after = after,
                           .gen = c->step_gen,
                           .step = c->step_index};
}

/* The parts as slices of dgrads, for the backend that knows which it
 * started; one outside the buffer gets an offset the backend refuses. */
static int early_spans(tt_comm_t *c, const float *dgrads) {
    uintptr_t base = (uintptr_t)dgrads;
    for (int i = 0; i < c->ndev_parts; i++) {
        uintptr_t at = (uintptr_t)c->dev_parts[i].buf;
        int inside = at >= base && (at - base) % sizeof(float) == 0;
        c->dev_spans[i] = (tt_coll_span_t){inside ? (at - base) / sizeof(float) : SIZE_MAX,
                                           c->dev_parts[i].count};
    }
    return c->ndev_parts;
}

int tt_comm_step_part_device(tt_comm_t *c, float *dpart, size_t count, void *after) {
    if (c == NULL || dpart == NULL || count == 0)
        return TT_EINVAL;
    int rc = device_step_ok(c);
    if (rc != TT_OK)
        return rc;
    if (overlaps_a_part(c, dpart, count)) {
        /* The same gradients again: the attempt before was given up before
         * its end (a failed backward). Its parts' jobs finish and the step
         * restarts. Their collectives may still run on the GPU while the
         * redo's backward, enqueued already, writes the same buffer: a
         * known gap, left because only a CUDA error fails a backward half
         * way, and most of those end the process. */
        uint64_t ns = 0;
        int was = settle_parts(c, &ns); /* not inside the log macro: it must run */
        TT_DEBUG(SUBSYS, "device step %" PRId64 " restarted: a part came again (%s)", c->step_index,
                 tt_strerror(was));
        c->step_open = 0;
    }
    if ((rc = open_step(c)) != TT_OK)
        return rc; /* only when no step was open: no part is in flight */
    if (c->ndev_parts == TT_COLL_EARLY_MAX)
        return TT_OK; /* the step's end reduces it with the rest */
    tt_comm_job_t *j = &c->dev_parts[c->ndev_parts++];
    *j = device_job(c, TT_COMM_JOB_DEVICE_PART, dpart, count, after);
    tt_comm_enqueue(c, j);
    return TT_OK;
}

int tt_comm_step_finish_device(tt_comm_t *c, float *dgrads, size_t count, int64_t local_count,
                               int64_t *global_count, void *after) {
    if (c == NULL || dgrads == NULL || count == 0 || local_count < 0)
        return TT_EINVAL;
    int rc = device_step_ok(c);
    if (rc != TT_OK)
        return rc;
    uint64_t t0 = tt_clock_mono_ns(), part_ns = 0; /* the wait is the time blocked here */
    if ((rc = open_step(c)) != TT_OK)
        return rc; /* only when no step was open: no part is in flight */
    int64_t n = local_count, step = c->step_index;
    tt_comm_job_t j = device_job(c, TT_COMM_JOB_DEVICE, dgrads, count, after);
    j.io_count = &n;
    j.early = c->dev_spans;
    j.nearly = early_spans(c, dgrads);
    tt_comm_enqueue(c, &j);
    int prc = settle_parts(c, &part_ns);
    rc = tt_comm_wait(c, &j);
    rc = prc != TT_OK ? prc : rc;
    if (rc == TT_OK) {
        if (global_count != NULL)
            *global_count = n;
        c->step_index++;
        note_stats(c, t0, j.run_ns + part_ns);
        if (c->device_steps++ == 0)
            TT_INFO(SUBSYS,
                    "step %lld: gradients reduced in device memory (NCCL), no host copy; %d "
                    "part(s) started during backward",
                    (long long)step, j.nearly);
    }
    c->step_open = 0;
    return rc == TT_OK ? audit_if_due(c, step) : rc;
}

void tt_comm_step_stats(tt_comm_t *c, tt_comm_stats_t *s) {
    *s = c->stats;
    pthread_mutex_lock(&c->mu);
    s->backend = c->ops != NULL ? c->ops->name : "";
    pthread_mutex_unlock(&c->mu);
}

int tt_comm_audit_params(tt_comm_t *c, const float *params, size_t count) {
    if (c == NULL || (params == NULL && count > 0))
        return TT_EINVAL;
    c->audit_params = params;
    c->audit_count = count;
    return TT_OK;
}

/* After a failed audit: every rank's checksum (max over a vector that is
 * INT64_MIN except at each rank's own slot), to name who differs from
 * rank 0. Every rank runs it, so the sequence stays aligned. */
static int name_divergent(tt_comm_t *c, uint64_t cs, int64_t step, const char *verdict) {
    tt_comm_view_t v;
    c->hooks.view(c->hooks.ctx, &v);
    if (v.rank < 0 || v.rank >= v.world)
        return TT_EMEMBERSHIP;
    int64_t *all = malloc((size_t)v.world * sizeof(*all));
    if (all == NULL)
        return TT_ENOMEM;
    for (int i = 0; i < v.world; i++)
        all[i] = INT64_MIN;
    all[v.rank] = (int64_t)cs;
    int rc = tt_comm_allreduce(c, all, (size_t)v.world, TT_DT_INT64, TT_RED_MAX);
    if (rc == TT_OK) {
        char names[256] = "";
        size_t used = 0, named = 0;
        for (int i = 1; i < v.world && named < MAX_NAMED && used < sizeof(names); i++)
            if (all[i] != all[0]) {
                used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%d",
                                         named++ ? ", " : "", i);
            }
        tt_comm_set_error(c, "%s; ranks differing from rank 0 at step %" PRId64 ": %s", verdict,
                          step, names);
        rc = TT_EDIVERGED;
    }
    free(all);
    return rc;
}

int tt_comm_audit(tt_comm_t *c, const float *params, size_t count, int64_t step) {
    if (c == NULL || (params == NULL && count > 0))
        return TT_EINVAL;
    uint64_t cs = tt_checksum_f32(params, count);
    int64_t m[2] = {(int64_t)cs, (int64_t)~cs};
    int rc = tt_comm_allreduce(c, m, 2, TT_DT_INT64, TT_RED_MAX);
    if (rc != TT_OK)
        return rc;
    char verdict[400];
    if (tt_comm_audit_verdict(m, step, verdict, sizeof(verdict)) == TT_OK) {
        c->stats.audits++;
        return TT_OK;
    }
    rc = name_divergent(c, cs, step, verdict);
    char msg[sizeof(c->err)];
    tt_comm_last_error(c, msg, sizeof(msg));
    TT_ERROR(SUBSYS, "%s", rc == TT_EDIVERGED ? msg : verdict);
    return TT_EDIVERGED;
}
