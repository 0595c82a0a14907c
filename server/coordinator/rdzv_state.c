/* rdzv_state: read-only views of a rendezvous (accessors, the member list for
 * `tetherctl members`) and its persistence as a plain record: export, and
 * restore after a coordinator restart with a grace period for members to come
 * back (a FAILED or FINISHED job comes back as it ended). It does not decide
 * membership (rdzv_group.c) nor write files (the daemon maps the record to its
 * protobuf state file). */
#include "rdzv_internal.h"

#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tt_rdzv_job_id(const tt_rdzv_t *r) {
    return r->job_id;
}
tt_rdzv_state_t tt_rdzv_state(const tt_rdzv_t *r) {
    return r->state;
}
uint64_t tt_rdzv_generation(const tt_rdzv_t *r) {
    return r->generation;
}
const tt_rdzv_settings_t *tt_rdzv_settings(const tt_rdzv_t *r) {
    return &r->settings;
}
uint32_t tt_rdzv_member_count(const tt_rdzv_t *r) {
    return r->members.n - r->n_evicted;
}
uint32_t tt_rdzv_waiter_count(const tt_rdzv_t *r) {
    return r->pending.n;
}
const char *tt_rdzv_failure_reason(const tt_rdzv_t *r) {
    return r->failure_reason;
}
const char *tt_rdzv_end_reason(const tt_rdzv_t *r) {
    if (r->state == TT_RDZV_FINISHED)
        return r->done_msg;
    return r->state == TT_RDZV_FAILED ? r->failure_reason : "";
}
int64_t tt_rdzv_regroup_after_step(const tt_rdzv_t *r) {
    return r->regroup_step;
}

const char *tt_rdzv_state_name(tt_rdzv_state_t s) {
    switch (s) {
    case TT_RDZV_WAITING:
        return "WAITING";
    case TT_RDZV_RUNNING:
        return "RUNNING";
    case TT_RDZV_FAILED:
        return "FAILED";
    case TT_RDZV_FINISHED:
        return "FINISHED";
    }
    return "UNKNOWN";
}

int64_t tt_rdzv_current_step(const tt_rdzv_t *r) {
    int64_t lo = INT64_MAX;
    for (uint32_t i = 0; r->state == TT_RDZV_RUNNING && i < r->members.n; i++) {
        int64_t s = r->members.v[i]->last_step;
        if (s >= 0 && s < lo)
            lo = s;
    }
    return lo != INT64_MAX ? lo : r->committed_step;
}

/* Members that reported no step (joiners) complete nothing yet, so they
 * are left out here as in tt_rdzv_current_step, which is then never above. */
int64_t tt_rdzv_last_committed_step(const tt_rdzv_t *r) {
    int64_t now = tt_rdzv_current_step(r);
    return now > r->committed_step ? now : r->committed_step;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1), sorting v. */
static double median(double *v, size_t n) {
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* tt_rdzv_members' straggler rule over the members with timing. */
static void mark_straggler(tt_rdzv_member_info_t *m, size_t n) {
    double *waits = calloc(n + 1, sizeof(double)), *steps = calloc(n + 1, sizeof(double));
    size_t k = 0, low = n;
    for (size_t i = 0; waits != NULL && steps != NULL && i < n; i++) {
        if (m[i].step_ms <= 0.0)
            continue;
        if (low == n || m[i].wait_ms < m[low].wait_ms)
            low = i;
        steps[k++] = m[i].step_ms;
    }
    if (k >= 2) {
        double step = median(steps, k);
        size_t j = 0;
        for (size_t i = 0; i < n; i++)
            if (m[i].step_ms > 0.0 && i != low)
                waits[j++] = m[i].wait_ms;
        double gap = median(waits, j) - m[low].wait_ms;
        m[low].straggler = gap >= 0.5 && gap >= 0.1 * step;
    }
    free(waits);
    free(steps);
}

int tt_rdzv_members(const tt_rdzv_t *r, uint64_t now_ms, tt_rdzv_member_info_t *out, size_t cap,
                    size_t *n_total) {
    if (r == NULL || (out == NULL && cap > 0))
        return TT_EINVAL;
    size_t n = r->members.n;
    for (size_t i = 0; i < n && i < cap; i++) {
        const tt_rdzv_node_t *m = r->members.v[i];
        tt_rdzv_node_to_member(m, &out[i].m);
        out[i].heartbeat_age_ms = now_ms > m->last_seen_ms ? now_ms - m->last_seen_ms : 0;
        out[i].suspected = m->suspected;
        memcpy(out[i].suspect_reason, m->suspect_reason, sizeof(out[i].suspect_reason));
        out[i].step_ms = m->step_ms;
        out[i].wait_ms = m->wait_ms;
        out[i].straggler = 0;
        out[i].draining = m->draining;
    }
    if (n <= cap && out != NULL)
        mark_straggler(out, n);
    if (n_total)
        *n_total = n;
    return TT_OK;
}

int tt_rdzv_export(const tt_rdzv_t *r, tt_rdzv_record_t *out) {
    if (r == NULL || out == NULL)
        return TT_EINVAL;
    memset(out, 0, sizeof(*out));
    uint32_t n = r->state == TT_RDZV_RUNNING ? r->members.n : 0;
    if (n > 0) {
        out->members = calloc(n, sizeof(*out->members));
        if (out->members == NULL)
            return TT_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        tt_rdzv_node_to_member(r->members.v[i], &out->members[i]);
    out->n_members = n;
    memcpy(out->job_id, r->job_id, sizeof(out->job_id));
    out->settings = r->settings;
    out->state = r->state;
    out->generation = r->generation;
    out->last_committed_step = tt_rdzv_last_committed_step(r);
    memcpy(out->failure_reason, r->failure_reason, sizeof(out->failure_reason));
    return TT_OK;
}

void tt_rdzv_record_free(tt_rdzv_record_t *rec) {
    if (rec == NULL)
        return;
    free(rec->members);
    memset(rec, 0, sizeof(*rec));
}

static int corrupt(char *err, size_t errlen, const char *what, uint64_t a, uint64_t b) {
    if (err && errlen)
        snprintf(err, errlen, "state record: %s (%" PRIu64 ", %" PRIu64 ")", what, a, b);
    return TT_ECORRUPT;
}

static int bounded(const char *s, size_t cap) {
    return memchr(s, '\0', cap) != NULL;
}

static int check_record_members(const tt_rdzv_record_t *rec, char *err, size_t errlen) {
    for (uint32_t i = 0; i < rec->n_members; i++) {
        const tt_rdzv_member_t *m = &rec->members[i];
        if (m->rank != i)
            return corrupt(err, errlen, "member rank differs from its position", m->rank, i);
        if (!bounded(m->worker_id, sizeof(m->worker_id)) || m->worker_id[0] == '\0' ||
            !bounded(m->host, sizeof(m->host)) || !bounded(m->endpoint, sizeof(m->endpoint)))
            return corrupt(err, errlen, "member has an empty or unterminated string", i, 0);
        if (i > 0 && strcmp(rec->members[i - 1].worker_id, m->worker_id) >= 0)
            return corrupt(err, errlen, "members not strictly sorted by worker_id at rank", i,
                           i - 1);
    }
    return TT_OK;
}

static int check_record(const tt_rdzv_record_t *rec, char *err, size_t errlen) {
    char why[TT_RDZV_REASON_MAX];
    if (!bounded(rec->job_id, sizeof(rec->job_id)) || rec->job_id[0] == '\0' ||
        !bounded(rec->failure_reason, sizeof(rec->failure_reason)))
        return corrupt(err, errlen, "empty or unterminated job id or reason", 0, 0);
    if (tt_rdzv_settings_validate(&rec->settings, why, sizeof(why)) != TT_OK) {
        if (err && errlen)
            snprintf(err, errlen, "state record: invalid settings: %s", why);
        return TT_ECORRUPT;
    }
    uint32_t n = rec->n_members;
    if (rec->state == TT_RDZV_RUNNING &&
        (rec->generation == 0 || n < rec->settings.min_workers || n > rec->settings.max_workers))
        return corrupt(err, errlen, "RUNNING with a member count outside min..max", n,
                       rec->generation);
    if (rec->state != TT_RDZV_RUNNING && rec->state != TT_RDZV_WAITING &&
        rec->state != TT_RDZV_FAILED && rec->state != TT_RDZV_FINISHED)
        return corrupt(err, errlen, "unknown state", (uint64_t)rec->state, 0);
    if (rec->state != TT_RDZV_RUNNING && n != 0)
        return corrupt(err, errlen, "members recorded outside RUNNING", n, 0);
    if (n > 0 && rec->members == NULL)
        return corrupt(err, errlen, "member array missing", n, 0);
    return check_record_members(rec, err, errlen);
}

static int restore_member(tt_rdzv_t *r, const tt_rdzv_member_t *m, uint64_t now_ms) {
    tt_rdzv_node_t *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return TT_ENOMEM;
    memcpy(n->worker_id, m->worker_id, sizeof(n->worker_id));
    memcpy(n->host, m->host, sizeof(n->host));
    memcpy(n->endpoint, m->endpoint, sizeof(n->endpoint));
    n->incarnation = m->incarnation;
    n->last_step = m->last_step;
    n->last_seen_ms = now_ms; /* grace: one heartbeat timeout to come back */
    n->role = TT_RDZV_ROLE_MEMBER;
    n->index = m->rank;
    n->prio = 1;
    n->boundary_step = -1;
    if (tt_rdzv_vec_push(&r->members, n) != TT_OK) {
        free(n);
        return TT_ENOMEM;
    }
    if (n->last_step > r->max_member_step)
        r->max_member_step = n->last_step;
    return tt_rdzv_table_insert(&r->table, n);
}

static void restore_scalars(tt_rdzv_t *r, const tt_rdzv_record_t *rec, uint64_t now_ms) {
    r->state = rec->state;
    r->generation = rec->generation;
    r->committed_step = rec->last_committed_step < -1 ? -1 : rec->last_committed_step;
    memcpy(r->failure_reason, rec->failure_reason, sizeof(r->failure_reason));
    if (rec->state == TT_RDZV_RUNNING) {
        r->below_min_armed = 0;
        r->expiry_bound = now_ms + rec->settings.heartbeat_timeout_ms;
    } else if (rec->state == TT_RDZV_FAILED || rec->state == TT_RDZV_FINISHED) {
        r->below_min_armed = 0;
        if (rec->state == TT_RDZV_FINISHED)
            tt_rdzv_set_done_msg(r);
    }
}

int tt_rdzv_restore(tt_rdzv_t **out, const tt_rdzv_record_t *rec, uint64_t now_ms, char *err,
                    size_t errlen) {
    int rc;
    tt_rdzv_t *r = NULL;
    if (out == NULL || rec == NULL)
        return TT_EINVAL;
    *out = NULL;
    TT_CHECK_GOTO(check_record(rec, err, errlen), rc, fail);
    tt_rdzv_opts_t opts = {.job_id = rec->job_id, .settings = rec->settings, .now_ms = now_ms};
    TT_CHECK_GOTO(tt_rdzv_create(&r, &opts, err, errlen), rc, fail);
    restore_scalars(r, rec, now_ms);
    for (uint32_t i = 0; i < rec->n_members; i++)
        TT_CHECK_GOTO(restore_member(r, &rec->members[i], now_ms), rc, fail);
    TT_INFO(TT_RDZV_SUBSYS, "job %s restored: %s, generation %" PRIu64 ", %u members", r->job_id,
            tt_rdzv_state_name(r->state), r->generation, r->members.n);
    *out = r;
    return TT_OK;
fail:
    tt_rdzv_destroy(&r);
    return rc;
}
