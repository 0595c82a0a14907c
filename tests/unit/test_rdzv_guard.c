/* Unit tests of the rendezvous guard rails against flapping
 * (server/coordinator/rdzv.h, rdzv_guard.c): the bound on regroups per
 * hour that fails the job with a reason naming it, and the per-worker
 * cool-down - none after one eviction within the hour, then doubling with
 * every further one - during which a join is refused with TT_EBUSY and a
 * sentence saying when to come back. Time is injected as now_ms; an hour
 * passes in one call. */
#include "rdzv_testlib.h"

#include "rdzv_internal.h" /* the eviction table's size, for the sweep test */

#include <stdint.h>
#include <string.h>

#define HOUR ((uint64_t)TT_RDZV_HOUR_MS)

static void set_guard(tt_rdzv_t *r, uint32_t regroups, uint32_t cool, uint32_t cool_max) {
    tt_rdzv_guard_t g = {regroups, cool, cool_max};
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_set_guard(r, &g, err, sizeof(err)), TT_OK);
}

/* One worker, min = max = 1: every leave + join of it is one regroup. */
static tt_rdzv_t *solo(uint32_t regroups, uint32_t cool, uint32_t cool_max) {
    tt_rdzv_t *r = mk(1, 1, 0);
    set_guard(r, regroups, cool, cool_max);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(drain_count(r), 1);
    return r;
}

/* Member a (incarnation inc) leaves at t, incarnation inc + 1 joins at
 * t + gap. Returns the join's status. */
static int flap(tt_rdzv_t *r, uint64_t inc, uint64_t t, uint64_t gap) {
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", inc, t), TT_OK);
    return join_step(r, "a", inc + 1, 5, t + gap);
}

static void rdzv_guard_defaults_and_validation(void) {
    tt_rdzv_guard_t g = tt_rdzv_guard_default();
    CU_ASSERT_EQUAL(g.max_regroups_per_hour, 60);
    CU_ASSERT_EQUAL(g.flap_cooldown_ms, 1000);
    CU_ASSERT_EQUAL(g.flap_cooldown_max_ms, 300000);
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_rdzv_guard_validate(&g, err, sizeof(err)), TT_OK);
    g.flap_cooldown_max_ms = 999;
    CU_ASSERT_EQUAL(tt_rdzv_guard_validate(&g, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_STRING_EQUAL(err, "flap_cooldown_max_ms: 999 is below flap_cooldown_ms 1000");
    g = tt_rdzv_guard_default();
    g.max_regroups_per_hour = TT_RDZV_REGROUPS_LIMIT + 1;
    CU_ASSERT_EQUAL(tt_rdzv_guard_validate(&g, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_regroups_per_hour"));
    /* A new rdzv starts with the defaults; an invalid guard changes nothing. */
    tt_rdzv_t *r = mk(1, 1, 0);
    CU_ASSERT_EQUAL(tt_rdzv_guard(r)->max_regroups_per_hour, 60);
    CU_ASSERT_EQUAL(tt_rdzv_set_guard(r, &g, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_rdzv_guard(r)->max_regroups_per_hour, 60);
    tt_rdzv_destroy(&r);
}

static void rdzv_regroups_per_hour_bound_fails_job(void) {
    tt_rdzv_t *r = solo(3, 0, 0); /* generation 1: not a regroup */
    uint64_t t = 1000;
    for (uint64_t inc = 1; inc <= 3; inc++, t += 1000)
        CU_ASSERT_EQUAL(flap(r, inc, t, 10), TT_OK); /* generations 2..4 */
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 4);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, t), 3);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    drain_count(r);
    /* The fourth within the hour is one too many. */
    CU_ASSERT_EQUAL(flap(r, 4, t, 10), TT_OK); /* the join itself is deferred */
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 4);
    const char *want = "4 regroups within the last hour exceed max_regroups_per_hour 3 (workers "
                       "keep dying or re-joining): job failed";
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r), want);
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *jr = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_STRING_EQUAL(jr->worker_id, "a");
    CU_ASSERT_EQUAL(jr->incarnation, 5);
    CU_ASSERT_EQUAL(jr->status, TT_EJOBFAILED);
    CU_ASSERT_STRING_EQUAL(find_ev(&log, TT_RDZV_EV_JOB_FAILED, 0)->message, want);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_GENERATION_FORMED), 0);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_regroups_older_than_an_hour_do_not_count(void) {
    tt_rdzv_t *r = solo(3, 0, 0);
    uint64_t m = 60000; /* a minute */
    CU_ASSERT_EQUAL(flap(r, 1, 20 * m, 0), TT_OK);
    CU_ASSERT_EQUAL(flap(r, 2, 40 * m, 0), TT_OK);
    CU_ASSERT_EQUAL(flap(r, 3, 60 * m, 0), TT_OK);
    /* At 80 min + 1 the regroup of minute 20 left the window. */
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, 80 * m + 1), 2);
    CU_ASSERT_EQUAL(flap(r, 4, 80 * m + 1, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 5);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, 80 * m + 2), 3);
    /* Minutes 40, 60 and 80 are still in it: one more fails. */
    CU_ASSERT_EQUAL(flap(r, 5, 80 * m + 2, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    tt_rdzv_destroy(&r);
}

static void rdzv_regroups_unbounded_with_zero(void) {
    tt_rdzv_t *r = solo(0, 0, 0);
    for (uint64_t inc = 1; inc <= 500; inc++)
        CU_ASSERT_EQUAL(flap(r, inc, inc * 10, 1), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 501);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, 5000), 0); /* nothing counted */
    tt_rdzv_destroy(&r);
}

/* Expects a join of a (incarnation inc) at t to be refused for `left` ms
 * more after k evictions, with a sentence that says so. */
static void expect_cooling(tt_rdzv_t *r, uint64_t inc, uint64_t t, unsigned k, uint64_t cool,
                           uint64_t left) {
    tt_rdzv_join_t q = {.worker_id = "a", .incarnation = inc, .last_step = 5};
    char err[256] = "", want[160];
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, t, err, sizeof(err)), TT_EBUSY);
    snprintf(want, sizeof(want), "evicted %u times within the last hour", k);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    snprintf(want, sizeof(want), "flap cool-down of %llu ms, it may re-join in %llu ms",
             (unsigned long long)cool, (unsigned long long)left);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    if (strstr(err, want) == NULL)
        fprintf(stderr, "\n  got: %s\n  want: ...%s\n", err, want);
}

static void rdzv_flap_cooldown_doubles_up_to_cap(void) {
    tt_rdzv_t *r = solo(0, 1000, 5000);
    /* One eviction is not flapping: back at once. */
    CU_ASSERT_EQUAL(flap(r, 1, 100, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    uint64_t evicted[] = {200, 1300, 3400, 7500};
    uint64_t cool[] = {1000, 2000, 4000, 5000}; /* 8000 capped */
    for (int i = 0; i < 4; i++) {
        uint64_t inc = (uint64_t)i + 2, t = evicted[i];
        unsigned k = (unsigned)i + 2;
        CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", inc, t), TT_OK);
        drain_count(r);
        expect_cooling(r, inc + 1, t + 1, k, cool[i], cool[i] - 1);
        expect_cooling(r, inc + 1, t + cool[i] - 1, k, cool[i], 1);
        /* A refused join changes nothing. */
        CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
        CU_ASSERT_EQUAL(drain_count(r), 0);
        CU_ASSERT_EQUAL(join_step(r, "a", inc + 1, 5, t + cool[i]), TT_OK);
        CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    }
    /* An hour after those, evictions count from one again. */
    uint64_t t = 7500 + HOUR + 1;
    CU_ASSERT_EQUAL(flap(r, 6, t, 1), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 7, t + 10), TT_OK);
    expect_cooling(r, 8, t + 11, 2, 1000, 999);
    CU_ASSERT_EQUAL(join_step(r, "a", 8, 5, t + 1010), TT_OK);
    tt_rdzv_destroy(&r);
}

static void rdzv_flap_other_workers_unaffected(void) {
    tt_rdzv_t *r = solo(0, 1000, 300000);
    CU_ASSERT_EQUAL(flap(r, 1, 100, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 2, 200), TT_OK); /* twice: cooling */
    CU_ASSERT_EQUAL(join(r, "c", 250), TT_OK);             /* never evicted */
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 1);
    CU_ASSERT_EQUAL(join_step(r, "a", 3, 5, 300), TT_EBUSY);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    tt_rdzv_destroy(&r);
}

/* A restarted member re-joins with a new incarnation: outside a cool-down
 * it replaces the member at once (and that eviction counts); inside one
 * it is refused and the member stays until its own timeout. */
static void rdzv_flap_refused_rejoin_keeps_member(void) {
    tt_rdzv_t *r = solo(0, 1000, 300000);
    CU_ASSERT_EQUAL(join_step(r, "a", 2, 5, 500), TT_OK); /* no eviction yet */
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 1);
    evlog_t log = {0};
    drain(r, &log);
    formed(&log, 2, 1, 6);
    CU_ASSERT_EQUAL(find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 0)->incarnation, 1);
    evlog_free(&log);
    CU_ASSERT_EQUAL(join_step(r, "a", 3, 5, 800), TT_OK); /* one eviction: free */
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 3);
    drain_count(r);
    /* Incarnation 3 crashes too; its successor comes 100 ms after. */
    expect_cooling(r, 4, 900, 2, 1000, 900);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 1);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 3, 3, 5, 0, 900, &rep), TT_OK); /* still a member */
    CU_ASSERT_EQUAL(rep.rank, 0);
    CU_ASSERT_EQUAL(join_step(r, "a", 4, 5, 1800), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 4);
    /* Three evictions now: the next replacement waits 2000 ms. */
    expect_cooling(r, 5, 1900, 3, 2000, 1900);
    tt_rdzv_destroy(&r);
}

/* Eviction records of ids that never come back are dropped after an hour
 * (e.g. the default "<host>-<pid>" ids), when the table has doubled. */
static void rdzv_flap_records_swept_after_an_hour(void) {
    enum { N = 256 };
    tt_rdzv_t *r = mk(1, N, 0);
    char id[32];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "w%03d", i);
        CU_ASSERT_EQUAL(join(r, id, 0), TT_OK);
    }
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), N);
    drain_count(r);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 5000), TT_OK); /* all silent: all evicted */
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 0);
    CU_ASSERT_EQUAL(r->flaps.count, N);
    drain_count(r);
    /* Two hours later one more worker comes and goes. */
    uint64_t t = 2 * HOUR;
    CU_ASSERT_EQUAL(join(r, "late", t), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, t + 2000), TT_OK); /* last call */
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "late", 1, t + 2100), TT_OK);
    CU_ASSERT_EQUAL(r->flaps.count, 1);
    CU_ASSERT_EQUAL(join(r, "w000", t + 2200), TT_OK); /* long forgotten */
    tt_rdzv_destroy(&r);
}

/* A job's own guard rails replace the coordinator's field by field; 0
 * keeps the coordinator's; the cap follows a longer job cool-down. The
 * settings compare like any other: a joiner asking other rails conflicts. */
/* A coordinator restart keeps both memories: the regroups and evictions
 * of one rdzv, exported as ages at one clock's now, counted by another
 * rdzv on a clock that started elsewhere. */
static void rdzv_guard_history_survives_restore(void) {
    tt_rdzv_t *r1 = solo(3, 1000, 300000);
    CU_ASSERT_EQUAL(flap(r1, 1, 1000, 0), TT_OK); /* regroup 1, eviction 1 */
    CU_ASSERT_EQUAL(tt_rdzv_leave(r1, "a", 2, 2000), TT_OK);
    CU_ASSERT_EQUAL(join_step(r1, "a", 3, 5, 3000), TT_OK);  /* after 1000 ms: regroup 2 */
    CU_ASSERT_EQUAL(tt_rdzv_leave(r1, "a", 3, 4000), TT_OK); /* eviction 3: 2000 ms */
    tt_rdzv_history_t h;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_history_export(r1, 4100, &h), TT_OK);
    CU_ASSERT_EQUAL(h.n_regroups, 2);
    CU_ASSERT_EQUAL(h.regroup_age_ms[0], 3100);
    CU_ASSERT_EQUAL(h.regroup_age_ms[1], 1100);
    CU_ASSERT_EQUAL_FATAL(h.n_flaps, 1);
    CU_ASSERT_STRING_EQUAL(h.flaps[0].worker_id, "a");
    CU_ASSERT_EQUAL(h.flaps[0].n, 3);
    CU_ASSERT_EQUAL(h.flaps[0].age_ms[2], 100);
    tt_rdzv_destroy(&r1);

    tt_rdzv_t *r2 = solo(3, 1000, 300000); /* "a" is a member again */
    uint64_t now = 50 * HOUR;
    tt_rdzv_history_import(r2, &h, now);
    tt_rdzv_history_free(&h);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r2, now), 2);
    expect_cooling(r2, 10, now + 1, 3, 2000, 1899);
    CU_ASSERT_EQUAL(join_step(r2, "a", 10, 5, now + 1900), TT_OK); /* regroup 3 */
    CU_ASSERT_EQUAL(tt_rdzv_state(r2), TT_RDZV_RUNNING);
    drain_count(r2);
    /* five evictions now (the replacement counts): 8000 ms of cool-down */
    CU_ASSERT_EQUAL(flap(r2, 10, now + 400000, 8000), TT_OK); /* regroup 4: over the bound */
    CU_ASSERT_EQUAL(tt_rdzv_state(r2), TT_RDZV_FAILED);
    tt_rdzv_destroy(&r2);
}

/* What the import keeps: the last hour, the newest regroups the bound can
 * count, and an event older than the new clock at that clock's zero. */
static void rdzv_guard_history_import_edges(void) {
    uint64_t ages[] = {HOUR + 5, HOUR, HOUR - 1, 5000, 4000, 3000, 2000};
    tt_rdzv_flap_saved_t f = {.worker_id = "b", .n = 2, .age_ms = {HOUR, 1000}};
    tt_rdzv_history_t h = {.n_regroups = 7, .regroup_age_ms = ages, .n_flaps = 1, .flaps = &f};
    tt_rdzv_t *r = solo(3, 1000, 300000);
    tt_rdzv_history_import(r, &h, 10 * HOUR);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, 10 * HOUR), 3); /* 4000, 3000, 2000 */
    tt_rdzv_history_t back;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_history_export(r, 10 * HOUR, &back), TT_OK);
    CU_ASSERT_EQUAL(back.n_regroups, 3);
    CU_ASSERT_EQUAL(back.regroup_age_ms[0], 4000);
    CU_ASSERT_EQUAL_FATAL(back.n_flaps, 1);
    CU_ASSERT_EQUAL(back.flaps[0].n, 1); /* the hour-old eviction was dropped */
    tt_rdzv_history_free(&back);
    tt_rdzv_destroy(&r);

    /* A clock 500 ms old: ages up to an hour land at its zero. */
    r = solo(100, 1000, 300000);
    tt_rdzv_history_import(r, &h, 500);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, 500), 5);
    CU_ASSERT_EQUAL(tt_rdzv_regroups_last_hour(r, HOUR), 0);
    tt_rdzv_destroy(&r);
}

static void rdzv_guard_job_settings_override(void) {
    tt_rdzv_guard_t d = tt_rdzv_guard_default();
    tt_rdzv_settings_t s = tt_rdzv_settings_default();
    tt_rdzv_guard_t g = tt_rdzv_guard_for_job(&d, &s);
    CU_ASSERT_EQUAL(g.max_regroups_per_hour, d.max_regroups_per_hour);
    CU_ASSERT_EQUAL(g.flap_cooldown_ms, d.flap_cooldown_ms);
    s.max_regroups_per_hour = 4;
    g = tt_rdzv_guard_for_job(&d, &s);
    CU_ASSERT_EQUAL(g.max_regroups_per_hour, 4);
    CU_ASSERT_EQUAL(g.flap_cooldown_ms, d.flap_cooldown_ms);
    s.flap_cooldown_ms = 600000;
    g = tt_rdzv_guard_for_job(&d, &s);
    CU_ASSERT_EQUAL(g.flap_cooldown_ms, 600000);
    CU_ASSERT_EQUAL(g.flap_cooldown_max_ms, 600000);
    CU_ASSERT_EQUAL(tt_rdzv_guard_validate(&g, NULL, 0), TT_OK);
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_OK);
    tt_rdzv_settings_t j = s;
    j.max_regroups_per_hour = 5;
    CU_ASSERT_EQUAL(tt_rdzv_settings_diff(&s, &j, err, sizeof(err)), 1);
    CU_ASSERT_STRING_EQUAL(err, "max_regroups_per_hour: job has 4, join asked 5");
    s.max_regroups_per_hour = TT_RDZV_REGROUPS_LIMIT + 1;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    s.max_regroups_per_hour = 4;
    s.flap_cooldown_ms = TT_RDZV_MS_LIMIT + 1;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
}

static const tt_cunit_test_t tests[] = {
    {"rdzv_guard_job_settings_override", rdzv_guard_job_settings_override},
    {"rdzv_guard_history_survives_restore", rdzv_guard_history_survives_restore},
    {"rdzv_guard_history_import_edges", rdzv_guard_history_import_edges},
    {"rdzv_guard_defaults_and_validation", rdzv_guard_defaults_and_validation},
    {"rdzv_regroups_per_hour_bound_fails_job", rdzv_regroups_per_hour_bound_fails_job},
    {"rdzv_regroups_older_than_an_hour_do_not_count",
     rdzv_regroups_older_than_an_hour_do_not_count},
    {"rdzv_regroups_unbounded_with_zero", rdzv_regroups_unbounded_with_zero},
    {"rdzv_flap_cooldown_doubles_up_to_cap", rdzv_flap_cooldown_doubles_up_to_cap},
    {"rdzv_flap_other_workers_unaffected", rdzv_flap_other_workers_unaffected},
    {"rdzv_flap_refused_rejoin_keeps_member", rdzv_flap_refused_rejoin_keeps_member},
    {"rdzv_flap_records_swept_after_an_hour", rdzv_flap_records_swept_after_an_hour},
    {NULL, NULL},
};

TT_CUNIT_MAIN("rdzv_guard", tests)
