/* tether_api: the exported tether_* membership functions, a thin layer
 * over tt_client. It owns argument checks at the API boundary, the
 * process-wide log routing a tether_t sets up (the host's callback, or
 * stderr at the TETHER_LOG level) and the per-object copy of the last error
 * that tether_last_error hands out. It does not own any protocol logic; the
 * collectives (tether_coll.c) share the struct through tether_internal.h.
 * Public status codes are the tt_status values; test_client checks that the
 * two lists agree. */
#include "tether/tether.h"
#include "tether_internal.h"
#include "tt_client.h"
#include "tt_log.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TETHER_API const char *tether_strerror(int status) {
    if (status == TETHER_REGROUPED)
        return "a new generation formed: rebuild collectives";
    return tt_strerror(status);
}

TETHER_API const char *tether_status_name(int status) {
    if (status == TETHER_REGROUPED)
        return "REGROUPED";
    return tt_status_name(status);
}

TETHER_API void tether_opts_default(tether_opts_t *o) {
    if (o != NULL)
        tt_client_opts_default(o);
}

static const char *env_lookup(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

TETHER_API int tether_opts_from_env(tether_opts_t *o, char *err, size_t errlen) {
    if (o == NULL)
        return TETHER_EINVAL;
    return tt_client_opts_from_lookup(o, env_lookup, NULL, err, errlen);
}

TETHER_API int tether_opts_validate(const tether_opts_t *o, char *err, size_t errlen) {
    return tt_client_opts_validate(o, err, errlen);
}

TETHER_API int tether_create(tether_t **out, const tether_opts_t *opts, char *err, size_t errlen) {
    if (out == NULL)
        return TETHER_EINVAL;
    *out = NULL;
    tether_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return TETHER_ENOMEM;
    if (tt_log_init_from_env() != TT_OK)
        TT_WARN("client", "TETHER_LOG='%s' is not error|warn|info|debug; using warn",
                getenv("TETHER_LOG"));
    if (opts != NULL && opts->log_fn != NULL) {
        tt_log_set_sink(opts->log_fn, opts->log_ctx);
        t->owns_sink = 1;
    }
    if (opts != NULL)
        tt_log_set_identity("worker", opts->worker_id);
    tether_opts_t copy; /* the client's generation_fn is the library's hook */
    if (opts != NULL)
        copy = *opts;
    int rc = opts != NULL ? tt_tether_coll_prepare(t, &copy) : TT_OK;
    if (rc == TT_OK)
        rc = tt_client_create(&t->client, opts != NULL ? &copy : NULL, err, errlen);
    if (rc == TT_OK && (rc = tt_tether_coll_init(t, opts, err, errlen)) != TT_OK)
        tt_client_destroy(&t->client);
    if (rc != TT_OK) {
        if (t->owns_sink)
            tt_log_set_sink(NULL, NULL);
        free(t);
        return rc;
    }
    *out = t;
    return TETHER_OK;
}

TETHER_API void tether_destroy(tether_t **pt) {
    if (pt == NULL || *pt == NULL)
        return;
    tether_t *t = *pt;
    *pt = NULL;
    tt_tether_coll_fini(t); /* before the client its hooks call into */
    tt_client_destroy(&t->client);
    pthread_mutex_destroy(&t->gen_mu); /* the client thread is gone now */
    if (t->owns_sink)
        tt_log_set_sink(NULL, NULL);
    free(t);
}

TETHER_API const char *tether_last_error(tether_t *t) {
    if (t == NULL)
        return "no tether object";
    if (atomic_load(&t->err_from_coll))
        tt_comm_last_error(t->comm, t->err, sizeof(t->err));
    else
        tt_client_last_error(t->client, t->err, sizeof(t->err));
    return t->err;
}

/* A membership call's outcome becomes the last error again. */
static tt_client_t *membership(tether_t *t) {
    atomic_store(&t->err_from_coll, 0);
    return t->client;
}

TETHER_API int tether_join(tether_t *t, uint32_t timeout_ms) {
    return t ? tt_client_join(membership(t), timeout_ms) : TETHER_EINVAL;
}

/* The membership view: 1 once a generation is installed, 0 before (or
 * without a handle, *v then untouched). */
static int view_of(tether_t *t, tt_client_view_t *v) {
    if (t == NULL)
        return 0;
    tt_client_view(t->client, v);
    return v->generation != 0;
}

TETHER_API int tether_rank(tether_t *t) {
    tt_client_view_t v;
    return view_of(t, &v) ? v.rank : -1;
}

TETHER_API uint32_t tether_world_size(tether_t *t) {
    tt_client_view_t v;
    return view_of(t, &v) ? v.world_size : 0;
}

TETHER_API uint64_t tether_generation(tether_t *t) {
    tt_client_view_t v;
    return view_of(t, &v) ? v.generation : 0;
}

TETHER_API int64_t tether_resume_step(tether_t *t) {
    tt_client_view_t v;
    return view_of(t, &v) ? v.resume_step : -1;
}

TETHER_API int64_t tether_job_steps(tether_t *t) {
    tt_client_view_t v;
    return view_of(t, &v) ? v.job_steps : 0;
}

TETHER_API int tether_member(tether_t *t, uint32_t rank, tether_member_t *info) {
    if (t == NULL || info == NULL)
        return TETHER_EINVAL;
    return tt_client_member(t->client, rank, info);
}

TETHER_API int tether_poll_generation(tether_t *t, uint64_t *gen) {
    return t ? tt_client_poll_generation(t->client, gen) : 0;
}

TETHER_API int tether_step_done(tether_t *t, int64_t step) {
    return t ? tt_client_step_done(membership(t), step) : TETHER_EINVAL;
}

TETHER_API int tether_progress(tether_t *t, uint64_t epoch, uint64_t epoch_examples,
                               uint64_t epoch_size) {
    if (t == NULL || epoch == 0 || (epoch_size > 0 && epoch_examples > epoch_size))
        return TETHER_EINVAL;
    tt_client_progress(membership(t), epoch, epoch_examples, epoch_size);
    return TETHER_OK;
}

TETHER_API int tether_report_failure(tether_t *t, uint32_t suspect_rank, const char *reason) {
    return t ? tt_client_report_failure(membership(t), suspect_rank, reason) : TETHER_EINVAL;
}

TETHER_API int tether_leave(tether_t *t, const char *reason) {
    return t ? tt_client_leave(membership(t), reason) : TETHER_EINVAL;
}

TETHER_API int tether_drain(tether_t *t) {
    return t ? tt_client_drain(membership(t)) : TETHER_EINVAL;
}

TETHER_API int tether_check(tether_t *t) {
    if (t == NULL)
        return TETHER_EINVAL;
    tt_client_view_t v;
    tt_client_view(t->client, &v);
    return v.status;
}

TETHER_API int64_t tether_regroup_step(tether_t *t) {
    if (t == NULL)
        return -1;
    tt_client_view_t v;
    tt_client_view(t->client, &v);
    return v.state == TT_CLIENT_MEMBER ? v.regroup_after_step : -1;
}
