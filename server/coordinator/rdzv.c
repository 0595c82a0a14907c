/* rdzv: the request side of the rendezvous state machine - object life, join,
 * leave, finish, heartbeat, failure reports, disconnects, step boundaries,
 * regroups the daemon asks for and the timer tick. Each entry point checks its arguments,
 * identifies the worker (id and incarnation), records what the request says, and leaves every
 * consequence (evictions, generations, announcements) to tt_rdzv_settle() in
 * rdzv_group.c. Accessors and persistence are in rdzv_state.c, the guard rails
 * in rdzv_guard.c. No clock, no I/O: time is the caller's now_ms. A job that
 * ended (FAILED, FINISHED) answers every request with its end status and
 * changes no more. */
#include "rdzv_internal.h"

#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail_msg(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_msg(char *err, size_t errlen, int rc, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int check_id(const char *what, const char *id, char *err, size_t errlen) {
    if (id == NULL || id[0] == '\0')
        return fail_msg(err, errlen, TT_EINVAL, "%s is empty", what);
    if (strlen(id) >= TT_RDZV_ID_MAX)
        return fail_msg(err, errlen, TT_EINVAL, "%s is longer than 127 bytes: '%.40s...'", what,
                        id);
    return TT_OK;
}

/* TT_OK while the job runs (or waits); its end status once it ended. */
static int end_status(const tt_rdzv_t *r) {
    if (r->state == TT_RDZV_FAILED)
        return TT_EJOBFAILED;
    return r->state == TT_RDZV_FINISHED ? TT_EJOBDONE : TT_OK;
}

int tt_rdzv_create(tt_rdzv_t **out, const tt_rdzv_opts_t *opts, char *err, size_t errlen) {
    int rc;
    tt_rdzv_t *r = NULL;
    if (out == NULL || opts == NULL)
        return fail_msg(err, errlen, TT_EINVAL, "tt_rdzv_create: NULL argument");
    *out = NULL;
    TT_CHECK_GOTO(check_id("job_id", opts->job_id, err, errlen), rc, fail);
    TT_CHECK_GOTO(tt_rdzv_settings_validate(&opts->settings, err, errlen), rc, fail);
    rc = TT_ENOMEM;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto fail;
    TT_CHECK_GOTO(tt_rdzv_table_init(&r->table), rc, fail);
    (void)tt_rdzv_copy(r->job_id, sizeof(r->job_id), opts->job_id);
    r->settings = opts->settings;
    r->state = TT_RDZV_WAITING;
    r->generation = opts->after_generation;
    r->regroup_step = -1;
    r->max_member_step = -1;
    r->committed_step = -1;
    r->expiry_bound = UINT64_MAX;
    r->below_min_armed = 1;
    r->below_min_since = opts->now_ms;
    tt_rdzv_guard_t g = tt_rdzv_guard_default();
    TT_CHECK_GOTO(tt_rdzv_set_guard(r, &g, err, errlen), rc, fail);
    *out = r;
    return TT_OK;
fail:
    tt_rdzv_destroy(&r);
    return rc;
}

void tt_rdzv_destroy(tt_rdzv_t **pr) {
    if (pr == NULL || *pr == NULL)
        return;
    tt_rdzv_t *r = *pr;
    if (r->table.buckets)
        tt_rdzv_free_nodes(r);
    tt_rdzv_vec_free(&r->members);
    tt_rdzv_vec_free(&r->pending);
    tt_rdzv_table_free(&r->table);
    tt_rdzv_queue_free(&r->q);
    tt_rdzv_guard_free(r);
    free(r);
    *pr = NULL;
}

static int check_join(const tt_rdzv_t *r, const tt_rdzv_join_t *q, char *err, size_t errlen) {
    int rc = check_id("worker_id", q->worker_id, err, errlen);
    if (rc != TT_OK)
        return rc;
    if (q->host && strlen(q->host) >= TT_RDZV_HOST_MAX)
        return fail_msg(err, errlen, TT_EINVAL, "host of %s is longer than 255 bytes",
                        q->worker_id);
    if (q->endpoint && strlen(q->endpoint) >= TT_RDZV_ENDPOINT_MAX)
        return fail_msg(err, errlen, TT_EINVAL, "endpoint of %s is longer than 255 bytes",
                        q->worker_id);
    if (r->state == TT_RDZV_FAILED)
        return fail_msg(err, errlen, TT_EJOBFAILED, "job %s failed: %s", r->job_id,
                        r->failure_reason);
    if (r->state == TT_RDZV_FINISHED)
        return fail_msg(err, errlen, TT_EJOBDONE, "%s", r->done_msg);
    if (q->settings && tt_rdzv_settings_diff(&r->settings, q->settings, err, errlen))
        return TT_ECONFLICT;
    return TT_OK;
}

static void fill_node(tt_rdzv_t *r, tt_rdzv_node_t *n, const tt_rdzv_join_t *q, uint64_t now_ms) {
    (void)tt_rdzv_copy(n->host, sizeof(n->host), q->host);
    (void)tt_rdzv_copy(n->endpoint, sizeof(n->endpoint), q->endpoint);
    n->incarnation = q->incarnation;
    n->last_step = q->last_step < -1 ? -1 : q->last_step;
    n->last_seen_ms = now_ms;
    n->prio = 1;
    n->disconnected = 0;
    n->suspected = 0;
    n->boundary_step = -1;
    tt_rdzv_lower_bound(r, now_ms + r->settings.heartbeat_timeout_ms);
}

/* A pending worker joins again: a duplicate, or its process restarted. */
static void rejoin_pending(tt_rdzv_t *r, tt_rdzv_node_t *n, const tt_rdzv_join_t *q,
                           uint64_t now_ms) {
    if (n->incarnation == q->incarnation) {
        n->last_seen_ms = now_ms;
        return;
    }
    char msg[TT_RDZV_REASON_MAX];
    snprintf(msg, sizeof(msg), "superseded by incarnation %" PRIu64, q->incarnation);
    tt_rdzv_event_node(r, TT_RDZV_EV_JOIN_REFUSED, n, TT_EFENCED, -1, msg);
    fill_node(r, n, q, now_ms);
}

static int add_pending(tt_rdzv_t *r, const tt_rdzv_join_t *q, uint64_t now_ms) {
    tt_rdzv_node_t *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return TT_ENOMEM;
    (void)tt_rdzv_copy(n->worker_id, sizeof(n->worker_id), q->worker_id);
    fill_node(r, n, q, now_ms);
    n->seq = r->next_seq++;
    if (tt_rdzv_pending_add(r, n) != TT_OK) {
        free(n);
        return TT_ENOMEM;
    }
    return tt_rdzv_table_insert(&r->table, n);
}

int tt_rdzv_join(tt_rdzv_t *r, const tt_rdzv_join_t *q, uint64_t now_ms, char *err, size_t errlen) {
    if (r == NULL || q == NULL)
        return fail_msg(err, errlen, TT_EINVAL, "tt_rdzv_join: NULL argument");
    int rc = check_join(r, q, err, errlen);
    if (rc != TT_OK)
        return rc;
    r->call_rc = TT_OK;
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, q->worker_id);
    /* A waiting worker was admitted already; anyone else may be flapping. */
    if ((n == NULL || n->role != TT_RDZV_ROLE_PENDING) &&
        (rc = tt_rdzv_flap_check(r, q->worker_id, now_ms, err, errlen)) != TT_OK)
        return rc;
    if (n && n->role == TT_RDZV_ROLE_PENDING) {
        rejoin_pending(r, n, q, now_ms);
        tt_rdzv_settle(r, now_ms);
        return r->call_rc;
    }
    if (r->pending.n >= TT_RDZV_WORKERS_LIMIT) {
        if (err && errlen)
            snprintf(err, errlen, "job %s: wait list is full (%u workers)", r->job_id,
                     TT_RDZV_WORKERS_LIMIT);
        return TT_EBUSY;
    }
    if (n) {
        char why[TT_RDZV_REASON_MAX];
        snprintf(why, sizeof(why),
                 "re-joined as incarnation %" PRIu64 " (member was %" PRIu64
                 "): previous process presumed dead",
                 q->incarnation, n->incarnation);
        tt_rdzv_evict(r, n, why, now_ms);
    }
    rc = add_pending(r, q, now_ms);
    if (rc != TT_OK)
        r->call_rc = rc;
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

/* The worker a leave or finish names: TT_OK with *out, or why not. */
static int leaving_node(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation,
                        tt_rdzv_node_t **out) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    if (end_status(r) != TT_OK)
        return end_status(r);
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n == NULL || n->incarnation != incarnation)
        return TT_ENOTFOUND;
    r->call_rc = TT_OK;
    *out = n;
    return TT_OK;
}

int tt_rdzv_leave(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t now_ms) {
    tt_rdzv_node_t *n = NULL;
    int rc = leaving_node(r, worker_id, incarnation, &n);
    if (rc != TT_OK)
        return rc;
    if (n->role == TT_RDZV_ROLE_MEMBER)
        tt_rdzv_evict(r, n, "left", now_ms);
    else
        tt_rdzv_drop_pending(r, n, TT_OK, NULL);
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

int tt_rdzv_drain(tt_rdzv_t *r, const char *worker_id, int now, uint64_t now_ms, char *err,
                  size_t errlen) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    if (end_status(r) != TT_OK)
        return fail_msg(err, errlen, end_status(r), "job %s has ended: %s", r->job_id,
                        tt_rdzv_end_reason(r));
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n != NULL && n->role == TT_RDZV_ROLE_PENDING) { /* waiting to be admitted */
        r->call_rc = TT_OK;
        tt_rdzv_drain_out(r, n, "drained by the operator before it was admitted");
        tt_rdzv_settle(r, now_ms);
        return r->call_rc;
    }
    if (r->state != TT_RDZV_RUNNING)
        return fail_msg(err, errlen, TT_EBUSY,
                        "job %s is waiting for workers, not running: no member to drain",
                        r->job_id);
    if (n == NULL || n->role != TT_RDZV_ROLE_MEMBER || n->evicted)
        return fail_msg(err, errlen, TT_ENOTFOUND,
                        "%s is neither a member of job %s's generation %" PRIu64
                        " nor waiting to join it (see tetherctl members)",
                        worker_id, r->job_id, r->generation);
    uint32_t left = r->members.n - r->n_evicted - r->n_draining - (n->draining ? 0 : 1);
    if (left < r->settings.min_workers)
        return fail_msg(err, errlen, TT_EINVAL,
                        "draining %s would leave %u member(s) in job %s, below its min_workers %u",
                        worker_id, left, r->job_id, r->settings.min_workers);
    r->call_rc = TT_OK;
    if (now) {
        tt_rdzv_drain_out(r, n, "evicted at once by the operator");
    } else if (!n->draining) {
        n->draining = 1;
        r->n_draining++;
        TT_INFO(TT_RDZV_SUBSYS, "job %s: %s (rank %u) is drained at the next step boundary",
                r->job_id, worker_id, n->index);
    }
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

int tt_rdzv_finish(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t now_ms) {
    (void)now_ms;
    tt_rdzv_node_t *n = NULL;
    int rc = leaving_node(r, worker_id, incarnation, &n);
    if (rc != TT_OK)
        return rc;
    /* It completed every step it reported, and in a synchronous job so
     * does every member: its last step is the job's last committed one. */
    if (n->role == TT_RDZV_ROLE_MEMBER && n->last_step > r->committed_step)
        r->committed_step = n->last_step;
    char who[TT_RDZV_ID_MAX];
    memcpy(who, n->worker_id, sizeof(who)); /* the node is freed on the way */
    tt_rdzv_end_finished(r, who);
    return r->call_rc;
}

static void fill_reply(const tt_rdzv_t *r, const tt_rdzv_node_t *n, tt_rdzv_hb_reply_t *reply) {
    if (reply == NULL)
        return;
    reply->generation = r->generation;
    reply->state = r->state;
    reply->regroup_after_step = r->regroup_step;
    reply->world_size = r->members.n;
    reply->rank = (n && n->role == TT_RDZV_ROLE_MEMBER) ? (int32_t)n->index : -1;
}

static int heartbeat_node(tt_rdzv_t *r, tt_rdzv_node_t *n, uint64_t generation, int64_t step,
                          int running, uint64_t now_ms) {
    int is_member = n->role == TT_RDZV_ROLE_MEMBER;
    if (is_member && generation > r->generation) {
        TT_WARN(TT_RDZV_SUBSYS,
                "job %s: %s heartbeats generation %" PRIu64 " but the newest is %" PRIu64
                " (coordinator state lost?)",
                r->job_id, n->worker_id, generation, r->generation);
        return TT_EPROTO;
    }
    n->last_seen_ms = now_ms;
    n->disconnected = 0;
    if (n->suspected) {
        TT_INFO(TT_RDZV_SUBSYS, "job %s: suspicion of %s cleared by its heartbeat (%s)", r->job_id,
                n->worker_id, n->suspect_reason);
        n->suspected = 0;
        n->suspect_reason[0] = '\0';
    }
    /* A member behind on generations runs steps of an older one. */
    tt_rdzv_note_step(r, n, step, running && generation == r->generation);
    return (is_member && generation < r->generation) ? TT_ESTALE : TT_OK;
}

int tt_rdzv_heartbeat(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation,
                      uint64_t generation, int64_t completed_step, int running, uint64_t now_ms,
                      tt_rdzv_hb_reply_t *reply) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n && n->incarnation != incarnation)
        n = NULL;
    int rc = n == NULL && tt_rdzv_was_drained(r, worker_id, incarnation) ? TT_EDRAINED : TT_EFENCED;
    r->call_rc = TT_OK;
    if (end_status(r) != TT_OK) {
        rc = end_status(r);
    } else if (n) {
        rc = heartbeat_node(r, n, generation, completed_step, running, now_ms);
        tt_rdzv_settle(r, now_ms);
        n = tt_rdzv_table_find(&r->table, worker_id);
    }
    fill_reply(r, n, reply);
    return r->call_rc != TT_OK ? r->call_rc : rc;
}

static void confirm_suspect(tt_rdzv_t *r, tt_rdzv_node_t *s, const char *how, uint64_t now_ms) {
    /* Room for both parts; the event keeps the first TT_RDZV_REASON_MAX-1. */
    char why[TT_RDZV_REASON_MAX + 128];
    snprintf(why, sizeof(why), "%s; confirmed by %.96s", s->suspect_reason, how);
    tt_rdzv_evict(r, s, why, now_ms);
}

/* Confirms a standing suspicion if the evidence is there; 1 if evicted. */
static int try_confirm(tt_rdzv_t *r, tt_rdzv_node_t *s, uint64_t now_ms) {
    if (s->disconnected) {
        confirm_suspect(r, s, "disconnect", now_ms);
        return 1;
    }
    if (now_ms >= tt_rdzv_suspect_deadline(r, s)) {
        char how[96];
        snprintf(how, sizeof(how), "overdue heartbeat (silent %" PRIu64 " ms)",
                 now_ms - s->last_seen_ms);
        confirm_suspect(r, s, how, now_ms);
        return 1;
    }
    tt_rdzv_lower_bound(r, tt_rdzv_suspect_deadline(r, s));
    return 0;
}

static int check_report(const tt_rdzv_t *r, const tt_rdzv_report_t *rep) {
    if (end_status(r) != TT_OK)
        return end_status(r);
    const tt_rdzv_node_t *me = tt_rdzv_table_find(&r->table, rep->reporter_id);
    if (me == NULL || me->role != TT_RDZV_ROLE_MEMBER)
        return TT_EFENCED;
    if (rep->generation != r->generation)
        return TT_ESTALE;
    if (rep->suspect_rank == TT_RDZV_SUSPECT_ANY)
        return TT_OK;
    if (rep->suspect_rank >= r->members.n || rep->suspect_rank == me->index)
        return TT_EINVAL;
    return TT_OK;
}

/* Marks `s` suspected for `why`; 1 if the evidence confirmed it at once. */
static int suspect(tt_rdzv_t *r, tt_rdzv_node_t *s, const char *why, uint64_t now_ms) {
    s->suspected = 1;
    snprintf(s->suspect_reason, sizeof(s->suspect_reason), "%s", why);
    return try_confirm(r, s, now_ms);
}

/* Every member but the reporter is suspected. Eviction only marks a node
 * (the group is re-formed by tt_rdzv_settle), so the members array stays
 * as it is while this walks it. */
static int suspect_all(tt_rdzv_t *r, const tt_rdzv_node_t *me, const char *why, uint64_t now_ms) {
    int done = 0, open = 0;
    for (uint32_t i = 0; i < r->members.n; i++) {
        tt_rdzv_node_t *s = r->members.v[i];
        if (s == me || s->evicted)
            continue;
        if (suspect(r, s, why, now_ms))
            done++;
        else
            open++;
    }
    TT_INFO(TT_RDZV_SUBSYS, "job %s: %s; %d confirmed, %d awaiting a heartbeat", r->job_id, why,
            done, open);
    return done;
}

int tt_rdzv_report_failure(tt_rdzv_t *r, const tt_rdzv_report_t *rep, uint64_t now_ms,
                           int *confirmed) {
    if (confirmed)
        *confirmed = 0;
    if (r == NULL || rep == NULL || rep->reporter_id == NULL)
        return TT_EINVAL;
    int rc = check_report(r, rep);
    if (rc != TT_OK)
        return rc;
    r->call_rc = TT_OK;
    const tt_rdzv_node_t *me = tt_rdzv_table_find(&r->table, rep->reporter_id);
    char why[TT_RDZV_REASON_MAX];
    const char *text = rep->reason ? rep->reason : "no reason given";
    int done;
    if (rep->suspect_rank == TT_RDZV_SUSPECT_ANY) {
        snprintf(why, sizeof(why), "reported by rank %u, naming no peer: %s", me->index, text);
        done = suspect_all(r, me, why, now_ms);
    } else {
        tt_rdzv_node_t *s = r->members.v[rep->suspect_rank];
        snprintf(why, sizeof(why), "reported by rank %u: %s", me->index, text);
        done = suspect(r, s, why, now_ms);
        if (!done)
            TT_INFO(TT_RDZV_SUBSYS,
                    "job %s: %s %s; not confirmed yet (heartbeat %" PRIu64 " ms ago)", r->job_id,
                    s->worker_id, s->suspect_reason, now_ms - s->last_seen_ms);
    }
    if (confirmed)
        *confirmed = done;
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

int tt_rdzv_peer_disconnected(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation,
                              uint64_t now_ms) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n == NULL || n->incarnation != incarnation)
        return TT_ENOTFOUND;
    r->call_rc = TT_OK;
    n->disconnected = 1;
    if (n->role == TT_RDZV_ROLE_MEMBER && n->suspected) {
        confirm_suspect(r, n, "disconnect", now_ms);
        tt_rdzv_settle(r, now_ms);
    }
    return r->call_rc;
}

int tt_rdzv_at_boundary(tt_rdzv_t *r, const char *worker_id, uint64_t generation,
                        int64_t completed_step, uint64_t now_ms) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    if (end_status(r) != TT_OK)
        return end_status(r);
    tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n == NULL || n->role != TT_RDZV_ROLE_MEMBER)
        return TT_EFENCED;
    if (generation != r->generation)
        return TT_ESTALE;
    r->call_rc = TT_OK;
    tt_rdzv_note_step(r, n, completed_step, 0); /* may raise S */
    if (r->regroup_step < 0 || completed_step < r->regroup_step) {
        tt_rdzv_event_node(r, TT_RDZV_EV_CONTINUE, n, TT_OK, r->regroup_step, NULL);
    } else if (n->boundary_step != completed_step) {
        n->boundary_step = completed_step;
        r->n_at_boundary++;
    }
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

void tt_rdzv_step_times(tt_rdzv_t *r, const char *worker_id, uint64_t incarnation, uint64_t steps,
                        uint64_t step_us, uint64_t wait_us) {
    tt_rdzv_node_t *n =
        r != NULL && worker_id != NULL ? tt_rdzv_table_find(&r->table, worker_id) : NULL;
    if (n == NULL || n->role != TT_RDZV_ROLE_MEMBER || n->incarnation != incarnation)
        return;
    if (steps < n->tm_steps || step_us < n->tm_step_us || wait_us < n->tm_wait_us) {
        n->tm_steps = n->tm_step_us = n->tm_wait_us = 0; /* a new count */
        n->step_ms = n->wait_ms = 0.0;
    }
    /* Heartbeats may come every few steps: means over so short a window
     * flicker, so a window grows to TT_RDZV_TIMING_STEPS steps or
     * TT_RDZV_TIMING_US of them (the first one is taken as it comes). */
    if (steps == n->tm_steps || (n->step_ms > 0.0 && steps - n->tm_steps < TT_RDZV_TIMING_STEPS &&
                                 step_us - n->tm_step_us < TT_RDZV_TIMING_US))
        return;
    double d = (double)(steps - n->tm_steps) * 1000.0;
    n->step_ms = (double)(step_us - n->tm_step_us) / d;
    n->wait_ms = (double)(wait_us - n->tm_wait_us) / d;
    n->tm_steps = steps;
    n->tm_step_us = step_us;
    n->tm_wait_us = wait_us;
}

int tt_rdzv_may_commit(const tt_rdzv_t *r, const char *worker_id, uint64_t generation) {
    if (r == NULL || worker_id == NULL)
        return TT_EINVAL;
    if (generation != r->generation)
        return TT_ESTALE;
    if (end_status(r) != TT_OK)
        return TT_OK;
    const tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    return n != NULL && n->role == TT_RDZV_ROLE_MEMBER ? TT_OK : TT_EFENCED;
}

int tt_rdzv_member_rank(const tt_rdzv_t *r, const char *worker_id, uint64_t generation,
                        uint32_t *rank) {
    if (r == NULL || worker_id == NULL || rank == NULL)
        return TT_EINVAL;
    if (generation != r->generation || r->state != TT_RDZV_RUNNING)
        return TT_ESTALE;
    const tt_rdzv_node_t *n = tt_rdzv_table_find(&r->table, worker_id);
    if (n == NULL || n->role != TT_RDZV_ROLE_MEMBER)
        return TT_EFENCED;
    *rank = n->index;
    return TT_OK;
}

static uint64_t age_ms(const tt_rdzv_node_t *n, uint64_t now_ms) {
    return now_ms > n->last_seen_ms ? now_ms - n->last_seen_ms : 0;
}

/* Checks one member; returns its next deadline (UINT64_MAX once evicted). */
static uint64_t expire_member(tt_rdzv_t *r, tt_rdzv_node_t *n, uint64_t now_ms) {
    uint32_t to = r->settings.heartbeat_timeout_ms;
    if (age_ms(n, now_ms) >= to) {
        char why[TT_RDZV_REASON_MAX];
        snprintf(why, sizeof(why), "heartbeat timeout %u ms (silent %" PRIu64 " ms)", to,
                 age_ms(n, now_ms));
        tt_rdzv_evict(r, n, why, now_ms);
        return UINT64_MAX;
    }
    if (n->suspected && try_confirm(r, n, now_ms))
        return UINT64_MAX;
    uint64_t d = n->last_seen_ms + to;
    if (n->suspected && tt_rdzv_suspect_deadline(r, n) < d)
        d = tt_rdzv_suspect_deadline(r, n);
    return d;
}

/* The O(n) pass, run only when now_ms reached the cached lower bound; it
 * recomputes the exact bound. With everyone heartbeating every interval the
 * bound lands about (timeout - interval) ahead, so the pass runs a few times
 * per timeout, not on every tick. */
static void expire_scan(tt_rdzv_t *r, uint64_t now_ms) {
    uint64_t bound = UINT64_MAX;
    uint32_t to = r->settings.heartbeat_timeout_ms;
    for (uint32_t i = 0; i < r->members.n; i++) {
        uint64_t d = expire_member(r, r->members.v[i], now_ms);
        if (d < bound)
            bound = d;
    }
    for (uint32_t i = r->pending.n; i-- > 0;) {
        tt_rdzv_node_t *n = r->pending.v[i]; /* swap-remove keeps i..n valid */
        if (age_ms(n, now_ms) >= to) {
            char why[TT_RDZV_REASON_MAX];
            snprintf(why, sizeof(why),
                     "no heartbeat for %" PRIu64 " ms while waiting (timeout %u ms)",
                     age_ms(n, now_ms), to);
            tt_rdzv_drop_pending(r, n, TT_ETIMEDOUT, why);
        } else if (n->last_seen_ms + to < bound) {
            bound = n->last_seen_ms + to;
        }
    }
    r->expiry_bound = bound;
}

static void tick_waiting(tt_rdzv_t *r, uint64_t now_ms) {
    const tt_rdzv_settings_t *s = &r->settings;
    if (r->last_call_deadline && now_ms >= r->last_call_deadline &&
        r->pending.n >= s->min_workers) {
        tt_rdzv_form_waiting(r, now_ms);
    } else if (r->below_min_armed && now_ms >= r->below_min_since + s->join_timeout_ms) {
        char why[TT_RDZV_REASON_MAX];
        snprintf(why, sizeof(why), "%u of min %u workers after %u ms: job failed", r->pending.n,
                 s->min_workers, s->join_timeout_ms);
        tt_rdzv_fail(r, why);
    }
}

int tt_rdzv_tick(tt_rdzv_t *r, uint64_t now_ms) {
    if (r == NULL)
        return TT_EINVAL;
    if (end_status(r) != TT_OK)
        return TT_OK;
    r->call_rc = TT_OK;
    if (now_ms >= r->expiry_bound)
        expire_scan(r, now_ms);
    tt_rdzv_settle(r, now_ms);
    if (r->state == TT_RDZV_WAITING)
        tick_waiting(r, now_ms);
    return r->call_rc;
}

int tt_rdzv_regroup_now(tt_rdzv_t *r, const char *reason, uint64_t now_ms) {
    if (r == NULL)
        return TT_EINVAL;
    if (end_status(r) != TT_OK)
        return end_status(r);
    if (r->state != TT_RDZV_RUNNING)
        return TT_EAGAIN;
    r->call_rc = TT_OK;
    tt_rdzv_regroup_same(r, reason ? reason : "requested", now_ms);
    tt_rdzv_settle(r, now_ms);
    return r->call_rc;
}

static uint64_t later(uint64_t t, uint64_t gap_ms, uint64_t now_ms) {
    return t + gap_ms < now_ms ? t + gap_ms : now_ms;
}

void tt_rdzv_forgive(tt_rdzv_t *r, uint64_t gap_ms, uint64_t now_ms) {
    if (r == NULL || gap_ms == 0)
        return;
    for (uint32_t i = 0; i < r->members.n; i++)
        r->members.v[i]->last_seen_ms = later(r->members.v[i]->last_seen_ms, gap_ms, now_ms);
    for (uint32_t i = 0; i < r->pending.n; i++)
        r->pending.v[i]->last_seen_ms = later(r->pending.v[i]->last_seen_ms, gap_ms, now_ms);
    r->expiry_bound = 0; /* the next tick rescans with the new times */
    /* Joins may wait unread too: the job's own waits do not run out in it. */
    if (r->below_min_armed)
        r->below_min_since = later(r->below_min_since, gap_ms, now_ms);
    if (r->last_call_deadline != 0)
        r->last_call_deadline += gap_ms;
}

uint64_t tt_rdzv_next_deadline(const tt_rdzv_t *r) {
    if (r == NULL || end_status(r) != TT_OK)
        return UINT64_MAX;
    uint64_t d = r->expiry_bound;
    if (r->state == TT_RDZV_WAITING) {
        if (r->last_call_deadline && r->last_call_deadline < d)
            d = r->last_call_deadline;
        if (r->below_min_armed && r->below_min_since + r->settings.join_timeout_ms < d)
            d = r->below_min_since + r->settings.join_timeout_ms;
    }
    return d;
}
