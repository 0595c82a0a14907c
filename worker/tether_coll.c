/* tether_coll: the exported collective and data-parallel step functions of
 * include/tether/tether.h, a thin layer over tt_comm. It owns the wiring
 * between the communication layer and the membership client (the hooks
 * through which tt_comm reads the generation, the members' endpoints and
 * reports suspects, and through which the client tells it of a new
 * generation or of the end of this worker's membership), the conversion of
 * public options, and the answer to the coordinator's dump requests (run
 * on the client's background thread, from a snapshot of the flight
 * recorders). It holds no protocol logic. */
#include "tether_internal.h"

#include "tt_cuda.h"
#include "tt_log.h"
#include "tt_ps.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMP_MAX_TEXT ((size_t)60 << 10) /* under the wire's 64 KiB per section */

/* ---- hooks for tt_comm ---- */

_Static_assert(TT_COLL_SHRINK_MAX == TT_WIRE_MAX_SHRINK,
               "every shrink the wire carries fits in tt_coll_shrink_t");

static void hook_view(void *ctx, tt_comm_view_t *v) {
    tether_t *t = ctx;
    tt_client_view_t cv;
    tt_client_view(t->client, &cv);
    v->status = cv.status;
    v->generation = cv.generation;
    v->app_generation = cv.app_generation;
    v->rank = cv.rank;
    v->world = (int)cv.world_size;
    v->resume_step = cv.resume_step;
    v->ps_until_step = cv.ps_until_step;
    v->job_nonce = cv.job_nonce;
    v->shrink.of = cv.shrink_of;
    v->shrink.n = (int)cv.nshrink;
    for (uint32_t i = 0; i < cv.nshrink; i++)
        v->shrink.exclude[i] = (int)cv.shrink_exclude[i];
}

static int hook_endpoint(void *ctx, uint64_t gen, int rank, char *buf, size_t len) {
    tether_t *t = ctx;
    tether_member_t m;
    int rc = tt_client_member_of(t->client, gen, (uint32_t)rank, &m);
    if (rc == TT_OK)
        snprintf(buf, len, "%s", m.endpoint);
    return rc;
}

static int hook_report(void *ctx, int rank, const char *reason) {
    tether_t *t = ctx;
    uint32_t who = rank == TT_COLL_SUSPECT_ANY ? TETHER_SUSPECT_ANY : (uint32_t)rank;
    return tt_client_report_failure(t->client, who, reason);
}

/* Keeps the newest lines: the end of a flight record is what matters. */
static char *cap_text(char *text) {
    size_t n = strlen(text);
    if (n <= DUMP_MAX_TEXT)
        return text;
    const char *from = text + n - DUMP_MAX_TEXT + 64;
    const char *nl = strchr(from, '\n');
    from = nl != NULL ? nl + 1 : from;
    size_t keep = strlen(from);
    int head = snprintf(text, 64, "(older records cut)\n");
    memmove(text + head, from, keep + 1);
    return text;
}

/* Client thread: the text of a DumpReport (malloc'd, NULL: none). */
static char *answer_dump(void *ctx) {
    tether_t *t = ctx;
    tt_client_view_t cv;
    tt_client_view(t->client, &cv);
    char who[96];
    snprintf(who, sizeof(who), "rank %d gen %" PRIu64, (int)cv.rank, cv.generation);
    char *text = tt_comm_dump(t->comm, who);
    return text != NULL ? cap_text(text) : NULL;
}

/* ---- options ---- */

static void to_comm(const tether_coll_opts_t *o, tt_comm_opts_t *c) {
    c->backend = (tt_coll_kind_t)o->backend;
    c->deadline_ms = (int)o->deadline_ms;
    c->bucket_bytes = o->bucket_bytes;
    c->first_bucket_bytes = o->first_bucket_bytes;
    c->segment_bytes = o->segment_bytes;
    c->audit_every = o->audit_every;
    c->average = o->average;
    c->min_shards = o->min_shards;
    c->shard_wait_ms = o->shard_wait_ms;
    c->shard_update = o->update == TETHER_UPDATE_SHARDS  ? 1
                      : o->update == TETHER_UPDATE_LOCAL ? 0
                                                         : -1;
    c->optim = o->optimizer.kind;
    c->sgd = (tt_optim_sgd_hp_t){.momentum = o->optimizer.momentum,
                                 .weight_decay = o->optimizer.weight_decay,
                                 .nesterov = o->optimizer.nesterov};
    c->adamw = (tt_optim_adamw_hp_t){.beta1 = o->optimizer.beta1,
                                     .beta2 = o->optimizer.beta2,
                                     .eps = o->optimizer.eps,
                                     .weight_decay = o->optimizer.weight_decay};
    snprintf(c->bind_endpoint, sizeof(c->bind_endpoint), "%s", o->ring_bind);
    c->ring_tcp_only = !o->ring_shm;
    c->cuda_device = o->cuda_device;
}

static void from_comm(const tt_comm_opts_t *c, tether_coll_opts_t *o) {
    o->backend = (int)c->backend;
    o->deadline_ms = (uint32_t)c->deadline_ms;
    o->bucket_bytes = c->bucket_bytes;
    o->first_bucket_bytes = c->first_bucket_bytes;
    o->segment_bytes = c->segment_bytes;
    o->audit_every = c->audit_every;
    o->average = c->average;
    o->min_shards = c->min_shards;
    o->shard_wait_ms = c->shard_wait_ms;
    o->update = c->shard_update ? TETHER_UPDATE_SHARDS : TETHER_UPDATE_LOCAL;
    o->optimizer = (tether_optimizer_t){.kind = c->optim,
                                        .momentum = c->sgd.momentum,
                                        .nesterov = c->sgd.nesterov,
                                        .weight_decay = c->optim == 1 ? c->adamw.weight_decay
                                                                      : c->sgd.weight_decay,
                                        .beta1 = c->adamw.beta1,
                                        .beta2 = c->adamw.beta2,
                                        .eps = c->adamw.eps};
    snprintf(o->ring_bind, sizeof(o->ring_bind), "%s", c->bind_endpoint);
    o->ring_shm = !c->ring_tcp_only;
    o->cuda_device = c->cuda_device;
}

/* Why here: the communicator is built on the communication thread, whose
 * current device is not the application's. Other backends never touch
 * CUDA, so only an nccl job asks. */
static void take_current_device(tt_comm_opts_t *c) {
    if (c->backend == TT_COLL_NCCL && c->cuda_device < 0)
        c->cuda_device = tt_cuda_current_device();
}

TETHER_API void tether_coll_opts_default(tether_coll_opts_t *o) {
    if (o == NULL)
        return;
    tt_comm_opts_t c;
    tt_comm_opts_default(&c);
    memset(o, 0, sizeof(*o));
    from_comm(&c, o);
}

static const char *env_lookup(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

TETHER_API int tether_coll_opts_from_env(tether_coll_opts_t *o, char *err, size_t errlen) {
    if (o == NULL)
        return TETHER_EINVAL;
    tt_comm_opts_t c;
    tt_comm_opts_default(&c);
    to_comm(o, &c);
    int rc = tt_comm_opts_from_lookup(&c, env_lookup, NULL, err, errlen);
    if (rc == TT_OK)
        rc = tt_comm_opts_validate(&c, err, errlen);
    if (rc == TT_OK)
        from_comm(&c, o);
    return rc;
}

/* The options the library starts with: defaults, the environment, and the
 * identity of the job (for backends that talk to servers). */
static int initial_opts(const tether_opts_t *opts, tt_comm_opts_t *c, char *err, size_t errlen) {
    tt_comm_opts_default(c);
    int rc = tt_comm_opts_from_lookup(c, env_lookup, NULL, err, errlen);
    if (rc == TT_OK)
        rc = tt_comm_opts_validate(c, err, errlen);
    take_current_device(c);
    snprintf(c->coordinator, sizeof(c->coordinator), "%s", opts->coordinator);
    snprintf(c->job_id, sizeof(c->job_id), "%s", opts->job_id);
    snprintf(c->worker_id, sizeof(c->worker_id), "%s", opts->worker_id);
    return rc;
}

/* Client thread, on every new generation: the communication layer closes
 * the old backend at once (its sockets free the endpoint the next ring
 * binds), then the application hears of it. The client is read only
 * under gen_mu while notify is set: tt_client_destroy clears t->client
 * before it joins this thread. */
static void on_generation(void *ctx, uint64_t gen, uint32_t rank, uint32_t world) {
    tether_t *t = ctx;
    pthread_mutex_lock(&t->gen_mu);
    if (t->notify != NULL) { /* set only while the client exists */
        tt_client_view_t cv;
        tt_client_view(t->client, &cv);
        tt_comm_generation_changed(t->notify, gen, cv.generation == gen ? cv.shrink_of : 0);
    }
    pthread_mutex_unlock(&t->gen_mu);
    if (t->user_gen_fn != NULL)
        t->user_gen_fn(t->user_gen_ctx, gen, rank, world);
}

/* Client thread: the worker is no longer a member (fenced, job failed or
 * finished). A collective in flight can never complete: end it now, not at
 * its deadline; it then returns `status` through the view. */
static void on_ended(void *ctx, int status) {
    tether_t *t = ctx;
    TT_DEBUG("coll", "no longer a member (%s): ending any collective in flight",
             tt_status_name(status));
    pthread_mutex_lock(&t->gen_mu);
    if (t->notify != NULL)
        tt_comm_membership_ended(t->notify);
    pthread_mutex_unlock(&t->gen_mu);
}

int tt_tether_coll_prepare(tether_t *t, tether_opts_t *copy) {
    if (pthread_mutex_init(&t->gen_mu, NULL) != 0)
        return TT_ESYS;
    t->user_gen_fn = copy->generation_fn;
    t->user_gen_ctx = copy->generation_ctx;
    copy->generation_fn = on_generation;
    copy->generation_ctx = t;
    return TT_OK;
}

int tt_tether_coll_init(tether_t *t, const tether_opts_t *opts, char *err, size_t errlen) {
    tt_comm_opts_t co;
    int rc = initial_opts(opts, &co, err, errlen);
    if (rc != TT_OK)
        return rc;
    co.key = *tt_client_key(t->client);
    tt_comm_hooks_t hooks = {
        .ctx = t, .view = hook_view, .endpoint = hook_endpoint, .report = hook_report};
    atomic_init(&t->err_from_coll, 0);
    rc = tt_comm_create(&t->comm, &co, &hooks);
    if (rc == TT_OK) {
        tt_client_set_dump_fn(t->client, answer_dump, t);
        tt_client_set_ended_fn(t->client, on_ended, t);
        pthread_mutex_lock(&t->gen_mu);
        t->notify = t->comm;
        pthread_mutex_unlock(&t->gen_mu);
    } else if (err != NULL && errlen > 0)
        snprintf(err, errlen, "cannot start the communication thread: %s", tt_strerror(rc));
    return rc;
}

void tt_tether_coll_fini(tether_t *t) {
    if (t->client != NULL)
        tt_client_set_dump_fn(t->client, NULL, NULL);
    pthread_mutex_lock(&t->gen_mu);
    t->notify = NULL; /* no notification reaches a destroyed layer */
    pthread_mutex_unlock(&t->gen_mu);
    tt_comm_destroy(&t->comm);
    /* gen_mu outlives this: the client thread may still call on_generation
     * until tt_client_destroy joins it (tether_destroy destroys the mutex). */
}

/* Every failing call leaves its sentence for tether_last_error. */
static int noted(tether_t *t, int rc) {
    if (rc < 0)
        atomic_store(&t->err_from_coll, 1);
    return rc;
}

TETHER_API int tether_coll_configure(tether_t *t, const tether_coll_opts_t *o, char *err,
                                     size_t errlen) {
    if (t == NULL || o == NULL)
        return TETHER_EINVAL;
    tt_comm_opts_t c;
    char why[256] = "";
    tt_comm_opts_default(&c);
    to_comm(o, &c);
    int rc = tt_comm_opts_validate(&c, why, sizeof(why));
    take_current_device(&c);
    if (rc == TT_OK)
        rc = tt_comm_configure(t->comm, &c);
    if (rc == TT_EBUSY)
        snprintf(why, sizeof(why),
                 "collective options are fixed once a collective ran or a "
                 "gradient was registered");
    if (rc != TT_OK && err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", why);
    return rc;
}

/* ---- collectives ---- */

TETHER_API int tether_allreduce(tether_t *t, void *buf, size_t count, int dtype, int op) {
    if (t == NULL)
        return TETHER_EINVAL;
    return noted(t, tt_comm_allreduce(t->comm, buf, count, (tt_dtype_t)dtype, (tt_redop_t)op));
}

TETHER_API int tether_broadcast(tether_t *t, void *buf, size_t count, int dtype, int root) {
    if (t == NULL)
        return TETHER_EINVAL;
    return noted(t, tt_comm_broadcast(t->comm, buf, count, (tt_dtype_t)dtype, root));
}

TETHER_API int tether_barrier(tether_t *t) {
    return t ? noted(t, tt_comm_barrier(t->comm)) : TETHER_EINVAL;
}

TETHER_API int tether_state_put(tether_t *t, int part, const float *buf, size_t count) {
    return tether_state_put_at(t, part, buf, count, 0);
}

TETHER_API int tether_state_put_at(tether_t *t, int part, const float *buf, size_t count,
                                   uint64_t steps_done) {
    /* the shards only read it */
    return t ? noted(t, tt_comm_state_io(t->comm, 1, part, (float *)buf, count, steps_done))
             : TETHER_EINVAL;
}

TETHER_API int tether_state_get(tether_t *t, int part, float *buf, size_t count) {
    return t ? noted(t, tt_comm_state_io(t->comm, 0, part, buf, count, 0)) : TETHER_EINVAL;
}

/* tt_ps's description of a part, copied out into the public one. */
static int copy_parts(const tt_ps_written_t *w, size_t n, tether_shard_part_t **out) {
    tether_shard_part_t *p = calloc(n ? n : 1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        snprintf(p[k].file, sizeof(p[k].file), "%s", w[k].file);
        p[k].size = w[k].size;
        p[k].crc32c = w[k].crc32c;
        p[k].planes = w[k].planes;
        p[k].nranges = w[k].nranges;
        p[k].ranges = calloc(2 * (size_t)w[k].nranges + 1, sizeof(uint64_t));
        if (p[k].ranges == NULL) {
            tether_shard_parts_free(p, n);
            return TT_ENOMEM;
        }
        for (uint32_t r = 0; r < w[k].nranges; r++) {
            p[k].ranges[2 * r] = w[k].ranges[r].offset;
            p[k].ranges[2 * r + 1] = w[k].ranges[r].length;
        }
    }
    *out = p;
    return TT_OK;
}

TETHER_API int tether_checkpoint_shards_begin(tether_t *t, const char *dir) {
    return t ? noted(t, tt_comm_write_ckpt(t->comm, dir, 1, NULL, NULL)) : TETHER_EINVAL;
}

TETHER_API int tether_checkpoint_shards_result(tether_t *t, const char *dir,
                                               tether_shard_part_t **parts, size_t *nparts) {
    if (t == NULL || parts == NULL || nparts == NULL)
        return TETHER_EINVAL;
    *parts = NULL;
    *nparts = 0;
    tt_ps_written_t *w = NULL;
    size_t n = 0;
    int rc = tt_comm_write_ckpt(t->comm, dir, 2, &w, &n);
    if (rc == TT_OK && (rc = copy_parts(w, n, parts)) == TT_OK)
        *nparts = n;
    tt_ps_written_free(w, n);
    free(w);
    return rc == TT_EAGAIN ? rc : noted(t, rc); /* still written: not a failure */
}

TETHER_API void tether_shard_parts_free(tether_shard_part_t *parts, size_t nparts) {
    for (size_t k = 0; parts != NULL && k < nparts; k++)
        free(parts[k].ranges);
    free(parts);
}

TETHER_API int tether_set_lr(tether_t *t, float lr) {
    return t ? noted(t, tt_comm_set_lr(t->comm, lr)) : TETHER_EINVAL;
}

TETHER_API int tether_resume_at(tether_t *t, int64_t step) {
    return t ? noted(t, tt_comm_resume_at(t->comm, step)) : TETHER_EINVAL;
}

TETHER_API long tether_flight_dump(tether_t *t, char *buf, size_t len) {
    if (t == NULL || (buf == NULL && len > 0))
        return TETHER_EINVAL;
    char *text = answer_dump(t);
    if (text == NULL)
        return TETHER_ENOMEM;
    long n = (long)strlen(text);
    if (len > 0)
        snprintf(buf, len, "%s", text);
    free(text);
    return n;
}

/* ---- step API ---- */

TETHER_API int tether_grad_register(tether_t *t, float *grad, size_t count, size_t *id) {
    return t ? noted(t, tt_comm_grad_register(t->comm, grad, count, id)) : TETHER_EINVAL;
}

TETHER_API float *tether_grad_buffer(tether_t *t, size_t id) {
    return t ? tt_comm_grad_buffer(t->comm, id) : NULL;
}

TETHER_API int tether_grad_ready(tether_t *t, size_t id) {
    return t ? noted(t, tt_comm_grad_ready(t->comm, id)) : TETHER_EINVAL;
}

/* The coordinator shows who the others wait for. */
static void note_step_times(tether_t *t) {
    tt_comm_stats_t s;
    tt_comm_step_stats(t->comm, &s);
    tt_client_step_times(t->client, s.steps, (uint64_t)(s.total_step_s * 1e6),
                         (uint64_t)(s.total_wait_s * 1e6));
}

TETHER_API int tether_step_finish(tether_t *t, int64_t local_count, int64_t *global_count) {
    if (t == NULL)
        return TETHER_EINVAL;
    int rc = tt_comm_step_finish(t->comm, local_count, global_count);
    if (rc == TT_OK)
        note_step_times(t);
    return noted(t, rc);
}

TETHER_API int tether_step_finish_device(tether_t *t, float *dgrads, size_t count,
                                         int64_t local_count, int64_t *global_count,
                                         void *cuda_event) {
    if (t == NULL)
        return TETHER_EINVAL;
    int rc =
        tt_comm_step_finish_device(t->comm, dgrads, count, local_count, global_count, cuda_event);
    if (rc == TT_ENODEV)
        return rc; /* nothing was issued: not a failure of the step */
    if (rc == TT_OK)
        note_step_times(t);
    return noted(t, rc);
}

TETHER_API int tether_step_ready_device(tether_t *t, float *dpart, size_t count, void *cuda_event) {
    if (t == NULL)
        return TETHER_EINVAL;
    int rc = tt_comm_step_part_device(t->comm, dpart, count, cuda_event);
    return rc == TT_ENODEV ? rc : noted(t, rc); /* nothing was issued */
}

TETHER_API int tether_step_stats(tether_t *t, tether_step_stats_t *s) {
    if (t == NULL || s == NULL)
        return TETHER_EINVAL;
    tt_comm_stats_t c;
    tt_comm_step_stats(t->comm, &c);
    memset(s, 0, sizeof(*s));
    s->steps = c.steps;
    s->last_wait_s = c.last_wait_s;
    s->total_wait_s = c.total_wait_s;
    s->last_step_s = c.last_step_s;
    s->total_step_s = c.total_step_s;
    s->last_comm_s = c.last_comm_s;
    s->buckets = c.buckets;
    s->bytes_per_step = c.bytes_per_step;
    s->audits = c.audits;
    snprintf(s->backend, sizeof(s->backend), "%s", c.backend ? c.backend : "");
    return TETHER_OK;
}

TETHER_API int tether_audit(tether_t *t, const float *params, size_t count, int64_t step) {
    return t ? noted(t, tt_comm_audit(t->comm, params, count, step)) : TETHER_EINVAL;
}

TETHER_API int tether_audit_params(tether_t *t, const float *params, size_t count) {
    return t ? noted(t, tt_comm_audit_params(t->comm, params, count)) : TETHER_EINVAL;
}
