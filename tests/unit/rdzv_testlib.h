/* rdzv_testlib: helpers shared by the rendezvous unit tests
 * (test_rdzv.c, test_rdzv_regroup.c): an event log that copies events out
 * of the rdzv (members included) so a test can inspect them after later
 * calls, lookups that record a failure instead of returning NULL, and
 * shorthands for joining, heartbeating and building a running job. Time is
 * always injected; nothing here sleeps. */
#ifndef RDZV_TESTLIB_H
#define RDZV_TESTLIB_H

#include "tt_cunit.h"

#include "rdzv.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tt_rdzv_event_t ev;        /* ev.members points into `members` */
    tt_rdzv_member_t *members; /* owned copy */
} logged_t;

typedef struct {
    logged_t *v;
    size_t n;
} evlog_t;

static inline void drain(tt_rdzv_t *r, evlog_t *log) {
    tt_rdzv_event_t ev;
    while (tt_rdzv_next_event(r, &ev)) {
        log->v = realloc(log->v, (log->n + 1) * sizeof(*log->v));
        logged_t *l = &log->v[log->n++];
        l->ev = ev;
        l->members = NULL;
        if (ev.members) {
            l->members = malloc(ev.world_size * sizeof(*l->members));
            memcpy(l->members, ev.members, ev.world_size * sizeof(*l->members));
            l->ev.members = l->members;
        }
    }
}

static inline void evlog_free(evlog_t *log) {
    for (size_t i = 0; i < log->n; i++)
        free(log->v[i].members);
    free(log->v);
    log->v = NULL;
    log->n = 0;
}

/* Stand-in returned when an expected event is missing: the failure is
 * recorded and the test reads zeros instead of crashing. */
static const tt_rdzv_member_t no_members[8];
static const tt_rdzv_event_t no_event = {.members = no_members, .step = -2};

/* The nth (0-based) event of `kind`; records a failure when absent. */
static const tt_rdzv_event_t *find_ev(const evlog_t *log, tt_rdzv_event_kind_t kind, int nth) {
    for (size_t i = 0; i < log->n; i++) {
        if (log->v[i].ev.kind == kind && nth-- == 0)
            return &log->v[i].ev;
    }
    CU_FAIL("expected event missing");
    return &no_event;
}

/* Drains r into log and returns its first MEMBER_EVICTED event, checking
 * whom it evicted unless `who` is NULL. */
static inline const tt_rdzv_event_t *evicted(tt_rdzv_t *r, evlog_t *log, const char *who) {
    drain(r, log);
    const tt_rdzv_event_t *e = find_ev(log, TT_RDZV_EV_MEMBER_EVICTED, 0);
    if (who != NULL)
        CU_ASSERT_STRING_EQUAL(e->worker_id, who);
    return e;
}

/* The first GENERATION_FORMED event, checked against what is expected. */
static const tt_rdzv_event_t *formed(const evlog_t *log, uint64_t gen, uint32_t world,
                                     int64_t resume) {
    const tt_rdzv_event_t *f = find_ev(log, TT_RDZV_EV_GENERATION_FORMED, 0);
    CU_ASSERT_EQUAL(f->generation, gen);
    CU_ASSERT_EQUAL(f->world_size, world);
    CU_ASSERT_EQUAL(f->step, resume);
    return f;
}

static inline int count_ev(const evlog_t *log, tt_rdzv_event_kind_t kind) {
    int c = 0;
    for (size_t i = 0; i < log->n; i++)
        c += log->v[i].ev.kind == kind;
    return c;
}

/* Drains the queue and returns how many events were pending. */
static inline int drain_count(tt_rdzv_t *r) {
    evlog_t log = {0};
    drain(r, &log);
    int n = (int)log.n;
    evlog_free(&log);
    return n;
}

static inline tt_rdzv_settings_t settings(uint32_t min, uint32_t max) {
    tt_rdzv_settings_t s = tt_rdzv_settings_default();
    s.min_workers = min;
    s.max_workers = max;
    if (s.global_batch < max)
        s.global_batch = max;
    return s;
}

static inline tt_rdzv_t *mk(uint32_t min, uint32_t max, uint64_t now) {
    tt_rdzv_t *r = NULL;
    tt_rdzv_opts_t o = {.job_id = "job1", .settings = settings(min, max), .now_ms = now};
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_create(&r, &o, err, sizeof(err)), TT_OK);
    return r;
}

static inline int join_step(tt_rdzv_t *r, const char *id, uint64_t inc, int64_t step,
                            uint64_t now) {
    char host[64], ep[96];
    snprintf(host, sizeof(host), "host-%s", id);
    snprintf(ep, sizeof(ep), "tcp://%s:7800", id);
    tt_rdzv_join_t q = {.worker_id = id,
                        .incarnation = inc,
                        .host = host,
                        .endpoint = ep,
                        .last_step = step,
                        .settings = tt_rdzv_settings(r)};
    char err[256];
    return tt_rdzv_join(r, &q, now, err, sizeof(err));
}

static inline int join(tt_rdzv_t *r, const char *id, uint64_t now) {
    return join_step(r, id, 1, -1, now);
}

static inline int hb(tt_rdzv_t *r, const char *id, int64_t step, uint64_t now) {
    tt_rdzv_hb_reply_t rep;
    return tt_rdzv_heartbeat(r, id, 1, tt_rdzv_generation(r), step, 0, now, &rep);
}

/* The same from a worker that says it runs (not stopped at a boundary). */
static inline int hb_running(tt_rdzv_t *r, const char *id, int64_t step, uint64_t now) {
    tt_rdzv_hb_reply_t rep;
    return tt_rdzv_heartbeat(r, id, 1, tt_rdzv_generation(r), step, 1, now, &rep);
}

/* A running job of `ids` (min = max = count unless given) formed at t=0. */
static inline tt_rdzv_t *running(uint32_t min, uint32_t max, const char *const *ids, int n) {
    tt_rdzv_t *r = mk(min, max, 0);
    for (int i = 0; i < n; i++)
        CU_ASSERT_EQUAL(join(r, ids[i], 0), TT_OK);
    if (tt_rdzv_state(r) != TT_RDZV_RUNNING)
        tt_rdzv_tick(r, tt_rdzv_settings(r)->last_call_ms);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(drain_count(r), 1); /* GENERATION_FORMED */
    return r;
}

static inline int rank_of(const tt_rdzv_event_t *ev, const char *id) {
    for (uint32_t i = 0; i < ev->world_size; i++) {
        if (strcmp(ev->members[i].worker_id, id) == 0)
            return (int)ev->members[i].rank;
    }
    return -1;
}

#endif
