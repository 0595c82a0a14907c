/* Unit tests of a job's end by completion (server/coordinator/rdzv.h,
 * tt_rdzv_finish): a worker that completed the run makes the job
 * FINISHED; waiting and later joiners, heartbeats, boundaries and leaves
 * are answered TT_EJOBDONE; no timeout, regroup or failure happens after
 * it; the state survives export/restore. Time is injected as now_ms. */
#include "rdzv_testlib.h"

#include <stdint.h>
#include <string.h>

/* a and b run (min 2, max 3) and c waits at the announced regroup. */
static tt_rdzv_t *running_with_waiter(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 3, ids, 2); /* formed by last call at 2000 */
    CU_ASSERT_EQUAL(hb(r, "a", 40, 2500), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 41, 2500), TT_OK);
    CU_ASSERT_EQUAL(join(r, "c", 2600), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 42);
    CU_ASSERT_EQUAL(drain_count(r), 1); /* REGROUP_ANNOUNCED */
    return r;
}

static void rdzv_finish_refuses_waiting_and_new_joins(void) {
    tt_rdzv_t *r = running_with_waiter();
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 3000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_state_name(TT_RDZV_FINISHED), "FINISHED");
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r), ""); /* it did not fail */
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 40);
    const char *why = tt_rdzv_end_reason(r);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "job job1 has already finished"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "step 40"));

    evlog_t log = {0};
    drain(r, &log);
    CU_ASSERT_EQUAL(log.n, 2);
    const tt_rdzv_event_t *jr = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_STRING_EQUAL(jr->worker_id, "c");
    CU_ASSERT_EQUAL(jr->status, TT_EJOBDONE);
    CU_ASSERT_STRING_EQUAL(jr->message, why);
    const tt_rdzv_event_t *fin = find_ev(&log, TT_RDZV_EV_JOB_FINISHED, 0);
    CU_ASSERT_STRING_EQUAL(fin->message, why);
    CU_ASSERT(jr < fin); /* refusals first, like JOB_FAILED */
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 0);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_GENERATION_FORMED), 0);
    evlog_free(&log);

    /* A newcomer, a restarted member and the waiter again: all refused,
     * nothing changes and no event is made. */
    tt_rdzv_join_t q = {.worker_id = "d", .incarnation = 1, .last_step = -1};
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 3100, err, sizeof(err)), TT_EJOBDONE);
    CU_ASSERT_STRING_EQUAL(err, why);
    CU_ASSERT_EQUAL(join_step(r, "b", 2, 41, 3100), TT_EJOBDONE);
    CU_ASSERT_EQUAL(join(r, "c", 3100), TT_EJOBDONE);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_destroy(&r);
}

static void rdzv_finish_answers_members_with_jobdone(void) {
    tt_rdzv_t *r = running_with_waiter();
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "b", 1, 3000), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 2);
    /* b completed step 41, so every member will: a's lagging 40 is not it. */
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 41);
    /* a, still running its last step, learns it from its next heartbeat. */
    tt_rdzv_hb_reply_t rep;
    memset(&rep, 0xff, sizeof(rep));
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 1, 1, 42, 0, 3200, &rep), TT_EJOBDONE);
    CU_ASSERT_EQUAL(rep.state, TT_RDZV_FINISHED);
    CU_ASSERT_EQUAL(rep.rank, -1);
    CU_ASSERT_EQUAL(rep.generation, 1);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 42, 3200), TT_EJOBDONE);
    tt_rdzv_report_t rp = {.reporter_id = "a", .generation = 1, .suspect_rank = 1};
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rp, 3200, NULL), TT_EJOBDONE);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 1, 3300), TT_EJOBDONE);
    /* A second finisher finds the job finished already. */
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 3300), TT_EJOBDONE);
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "a", 1, 3300), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    tt_rdzv_destroy(&r);
}

/* The bug this fixes: workers that "shutdown" one by one took the job
 * below min_workers and the join timeout then failed it. */
static void rdzv_finish_no_failure_after_deadlines(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 2, ids, 2); /* formed at once at t=0 */
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 1000), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 1); /* JOB_FINISHED */
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), UINT64_MAX);
    const tt_rdzv_settings_t *s = tt_rdzv_settings(r);
    uint64_t late = 1000 + (uint64_t)s->join_timeout_ms + 10ull * s->heartbeat_timeout_ms;
    for (uint64_t t = 1000; t <= late; t += 1000)
        CU_ASSERT_EQUAL(tt_rdzv_tick(r, t), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r), "");
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1); /* no regroup either */
    tt_rdzv_destroy(&r);
}

static void rdzv_finish_needs_a_known_worker(void) {
    tt_rdzv_t *r = mk(2, 2, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(join(r, "b", 0), TT_OK);
    evlog_t log = {0};
    drain(r, &log);
    formed(&log, 1, 2, 0);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "zz", 1, 100), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 2, 100), TT_ENOTFOUND); /* other incarnation */
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, NULL, 1, 100), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 2);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    /* A failed job stays failed: finishing it is refused. */
    tt_rdzv_destroy(&r);
    r = mk(2, 2, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 60000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 60001), TT_EJOBFAILED);
    tt_rdzv_destroy(&r);
}

static void rdzv_finish_persisted_and_restored(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 57, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 57, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "c", 56, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "c", 1, 1100), TT_OK);
    char why[TT_RDZV_REASON_MAX];
    snprintf(why, sizeof(why), "%s", tt_rdzv_end_reason(r));
    tt_rdzv_record_t rec;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_export(r, &rec), TT_OK);
    CU_ASSERT_EQUAL(rec.state, TT_RDZV_FINISHED);
    CU_ASSERT_EQUAL(rec.n_members, 0);
    CU_ASSERT_EQUAL(rec.generation, 1);
    CU_ASSERT_EQUAL(rec.last_committed_step, 56);
    CU_ASSERT_STRING_EQUAL(rec.failure_reason, "");
    tt_rdzv_destroy(&r);

    /* A restarted coordinator remembers: the job does not start over. */
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_restore(&r, &rec, 500000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 56);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_end_reason(r), why);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), UINT64_MAX);
    tt_rdzv_join_t q = {.worker_id = "a", .incarnation = 9, .last_step = 57};
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 500100, err, sizeof(err)), TT_EJOBDONE);
    CU_ASSERT_STRING_EQUAL(err, why);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 500000 + 3600000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_destroy(&r);

    /* FINISHED with members recorded is inconsistent. */
    tt_rdzv_member_t m = {.rank = 0, .worker_id = "a", .last_step = 1};
    rec.n_members = 1;
    rec.members = &m;
    CU_ASSERT_EQUAL(tt_rdzv_restore(&r, &rec, 0, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NULL(r);
    rec.members = NULL;
    rec.n_members = 0;
    tt_rdzv_record_free(&rec);
}

static const tt_cunit_test_t tests[] = {
    {"rdzv_finish_refuses_waiting_and_new_joins", rdzv_finish_refuses_waiting_and_new_joins},
    {"rdzv_finish_answers_members_with_jobdone", rdzv_finish_answers_members_with_jobdone},
    {"rdzv_finish_no_failure_after_deadlines", rdzv_finish_no_failure_after_deadlines},
    {"rdzv_finish_needs_a_known_worker", rdzv_finish_needs_a_known_worker},
    {"rdzv_finish_persisted_and_restored", rdzv_finish_persisted_and_restored},
    {NULL, NULL},
};

TT_CUNIT_MAIN("rdzv_finish", tests)
