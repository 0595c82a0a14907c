/* Unit tests of the rendezvous regroup protocol (server/coordinator/rdzv.h):
 * late joiners admitted at an agreed step boundary, the boundary step
 * raised when a member is already past it, cancellation, deaths that admit
 * waiters, admission order, stale generations, re-joins with a new
 * incarnation, regroups the daemon asks for (tt_rdzv_regroup_now), drains,
 * and which generations are announced as a shrink of the previous one
 * (shrink_of). Time is injected as now_ms; nothing sleeps. */
#include "rdzv_testlib.h"

/* Brings members a, b (min 2, max 3) to steps 5 and 4, then c joins. */
static tt_rdzv_t *job_with_late_joiner(evlog_t *log) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 3, ids, 2);
    CU_ASSERT_EQUAL(hb(r, "a", 5, 2500), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 4, 2500), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(join(r, "c", 2600), TT_OK);
    drain(r, log);
    const tt_rdzv_event_t *a = find_ev(log, TT_RDZV_EV_REGROUP_ANNOUNCED, 0);
    CU_ASSERT_EQUAL(a->step, 6);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 6);
    return r;
}

static void rdzv_late_joiner_admitted_at_boundary(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = job_with_late_joiner(&log);
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 1, 5, 0, 2700, &rep), TT_OK);
    CU_ASSERT_EQUAL(rep.regroup_after_step, 6);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 6, 2800), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0); /* a waits; b has not arrived */
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 6, 2810), TT_OK); /* duplicate */
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 6, 2900), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 3, 7);
    CU_ASSERT_EQUAL(rank_of(f, "c"), 2);
    CU_ASSERT_EQUAL(f->members[2].last_step, -1); /* c must pull state */
    CU_ASSERT_EQUAL(f->members[0].last_step, 6);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 6); /* a and b both did 6 */
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_regroup_step_raised_sends_continue(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = job_with_late_joiner(&log); /* S = 6 */
    evlog_free(&log);
    /* A member stopping below S is told to go on at once. */
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 5, 2700), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *c = find_ev(&log, TT_RDZV_EV_CONTINUE, 0);
    CU_ASSERT_STRING_EQUAL(c->worker_id, "b");
    CU_ASSERT_EQUAL(c->step, 6);
    evlog_free(&log);
    /* b waits at 6; a had not seen S and reports step 7: S rises to 7. */
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 6, 2800), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "a", 7, 2850), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *ann = find_ev(&log, TT_RDZV_EV_REGROUP_ANNOUNCED, 0);
    CU_ASSERT_EQUAL(ann->step, 7);
    c = find_ev(&log, TT_RDZV_EV_CONTINUE, 0);
    CU_ASSERT_STRING_EQUAL(c->worker_id, "b");
    CU_ASSERT_EQUAL(c->step, 7);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_GENERATION_FORMED), 0);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 7);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 7, 2900), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 7, 2950), TT_OK);
    drain(r, &log);
    formed(&log, 2, 3, 8);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* A member that completed S without having heard of it is already inside
 * S + 1 (its heartbeat says it runs): S moves past it, or the member
 * waiting at S and the one in S + 1 would wait for each other. */
static void rdzv_regroup_step_moves_past_running_member(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = job_with_late_joiner(&log); /* S = 6 */
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 6, 2700), TT_OK); /* b stops at 6 */
    CU_ASSERT_EQUAL(hb(r, "a", 6, 2750), TT_OK);                     /* a did 6 too... */
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(hb_running(r, "a", 6, 2750), TT_OK); /* ...and runs on */
    drain(r, &log);
    CU_ASSERT_EQUAL(find_ev(&log, TT_RDZV_EV_REGROUP_ANNOUNCED, 0)->step, 7);
    const tt_rdzv_event_t *c = find_ev(&log, TT_RDZV_EV_CONTINUE, 0);
    CU_ASSERT_STRING_EQUAL(c->worker_id, "b");
    CU_ASSERT_EQUAL(c->step, 7);
    evlog_free(&log);
    /* below S, or once stopped at the boundary, running changes nothing */
    CU_ASSERT_EQUAL(hb_running(r, "b", 6, 2760), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 7, 2800), TT_OK);
    CU_ASSERT_EQUAL(hb_running(r, "a", 7, 2810), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 7);
    CU_ASSERT_EQUAL(hb_running(r, "nobody", 7, 2810), TT_EFENCED); /* not a member */
    CU_ASSERT_EQUAL(hb_running(r, "c", 9, 2810), TT_OK); /* pending: its steps move nothing */
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 7);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 7, 2900), TT_OK);
    drain(r, &log);
    formed(&log, 2, 3, 8);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_regroup_cancelled_when_waiter_goes(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = job_with_late_joiner(&log);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 6, 2700), TT_OK);
    /* c never heartbeats: dropped after 5000 ms of silence (joined at 2600). */
    CU_ASSERT_EQUAL(hb(r, "a", 6, 7000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 5, 7000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 7599), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 7600), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *jr = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_STRING_EQUAL(jr->worker_id, "c");
    CU_ASSERT_EQUAL(jr->status, TT_ETIMEDOUT);
    const tt_rdzv_event_t *ann = find_ev(&log, TT_RDZV_EV_REGROUP_ANNOUNCED, 0);
    CU_ASSERT_EQUAL(ann->step, -1);
    const tt_rdzv_event_t *c = find_ev(&log, TT_RDZV_EV_CONTINUE, 0);
    CU_ASSERT_STRING_EQUAL(c->worker_id, "a");
    CU_ASSERT_EQUAL(c->step, -1);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    evlog_free(&log);
    /* With no regroup pending, a boundary report gets CONTINUE(-1). */
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 6, 7700), TT_OK);
    drain(r, &log);
    c = find_ev(&log, TT_RDZV_EV_CONTINUE, 0);
    CU_ASSERT_EQUAL(c->step, -1);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_death_admits_waiters_at_once(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = job_with_late_joiner(&log); /* S = 6 announced */
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 1, 6, 2700), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "b", 1, 2750), TT_OK);
    /* a alone is below min 2, so a and c become participants: last call. */
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 2);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 4750);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 4750), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 7); /* a completed 6 */
    evlog_free(&log);
    tt_rdzv_destroy(&r);

    /* Enough survivors: the death itself admits the waiter. */
    static const char *const ids[] = {"a", "b", "c"};
    r = running(2, 4, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 9, 1000), TT_OK);
    CU_ASSERT_EQUAL(join(r, "d", 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 10);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "c", 1, 1100), TT_OK);
    drain(r, &log);
    f = formed(&log, 2, 3, 10);
    CU_ASSERT_EQUAL(rank_of(f, "d"), 2);
    CU_ASSERT_EQUAL(rank_of(f, "c"), -1);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_survivors_first_when_slots_short(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 2, ids, 2);
    CU_ASSERT_EQUAL(join(r, "c", 100), TT_OK);
    CU_ASSERT_EQUAL(join(r, "d", 200), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 2);
    CU_ASSERT_EQUAL(hb(r, "b", 3, 300), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 1, 400), TT_OK);
    /* b (survivor) + c, d: more than max 2, formed at once, b first. */
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 4);
    CU_ASSERT_EQUAL(rank_of(f, "b"), 0);
    CU_ASSERT_EQUAL(rank_of(f, "c"), 1);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_stale_generation_heartbeat(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "c", 1, 500), TT_OK); /* generation 2 */
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 2);
    tt_rdzv_hb_reply_t rep;
    memset(&rep, 0xff, sizeof(rep));
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 1, 3, 0, 900, &rep), TT_ESTALE);
    CU_ASSERT_EQUAL(rep.generation, 2);
    CU_ASSERT_EQUAL(rep.rank, 1);
    CU_ASSERT_EQUAL(rep.world_size, 2);
    CU_ASSERT_EQUAL(rep.state, TT_RDZV_RUNNING);
    tt_rdzv_member_info_t info[2];
    size_t n = 0;
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 1000, info, 2, &n), TT_OK);
    CU_ASSERT_EQUAL(info[1].heartbeat_age_ms, 100); /* it still counted */
    CU_ASSERT_EQUAL(info[1].m.last_step, 3);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 2, 3, 0, 1000, &rep), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 3, 3, 0, 1000, &rep), TT_EPROTO);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "nobody", 1, 2, 3, 0, 1000, &rep), TT_EFENCED);
    CU_ASSERT_EQUAL(rep.rank, -1);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 1, 3, 1000), TT_ESTALE);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "c", 2, 3, 1000), TT_EFENCED);
    tt_rdzv_destroy(&r);
}

static void rdzv_rejoin_new_incarnation(void) {
    tt_rdzv_t *r = mk(2, 3, 0);
    CU_ASSERT_EQUAL(join_step(r, "a", 1, -1, 0), TT_OK);
    CU_ASSERT_EQUAL(join_step(r, "a", 1, -1, 10), TT_OK); /* duplicate */
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(join_step(r, "a", 2, -1, 20), TT_OK); /* restarted */
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *jr = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_EQUAL(jr->incarnation, 1);
    CU_ASSERT_EQUAL(jr->status, TT_EFENCED);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 1, 0, -1, 0, 30, NULL), TT_EFENCED);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 2, 0, -1, 0, 30, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 1, 40), TT_ENOTFOUND);
    tt_rdzv_destroy(&r);

    /* A member that re-joins is dead as a member; the regroup admits the
     * new process at once. */
    static const char *const ids[] = {"a", "b", "c"};
    r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 4, 500), TT_OK);
    CU_ASSERT_EQUAL(join_step(r, "c", 2, -1, 600), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *e = find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 0);
    CU_ASSERT_STRING_EQUAL(e->worker_id, "c");
    CU_ASSERT_EQUAL(e->incarnation, 1);
    CU_ASSERT_EQUAL(formed(&log, 2, 3, 5)->members[2].incarnation, 2);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "c", 1, 1, 4, 0, 700, NULL), TT_EFENCED);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "c", 2, 2, -1, 0, 700, NULL), TT_OK);
    tt_rdzv_destroy(&r);
}

/* Checkpoint commits (tt_rdzv_may_commit): only at the current generation,
 * only from a member while the job runs; after the end, the last
 * generation's commit still lands (rank 0 may commit after another rank
 * finished the job). */
static void rdzv_commit_only_from_current_members(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "a", 1), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "c", 1), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "c", 1, 500), TT_OK); /* generation 2 */
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "a", 1), TT_ESTALE);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "c", 1), TT_ESTALE);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "c", 2), TT_EFENCED);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "nobody", 2), TT_EFENCED);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "b", 2), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "b", 3), TT_ESTALE);
    /* a waiter is not a member yet */
    CU_ASSERT_EQUAL(join(r, "d", 600), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "d", 2), TT_EFENCED);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 700), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "b", 2), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, "b", 1), TT_ESTALE);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(NULL, "b", 2), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_rdzv_may_commit(r, NULL, 2), TT_EINVAL);
    tt_rdzv_destroy(&r);
}

/* A regroup the daemon asks for (a shard server is gone): same members,
 * same ranks, the next generation, resuming after the highest step. */
static void rdzv_regroup_now_keeps_members(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 5, 500), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 5, 500), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "c", 4, 500), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(r, "shard s1 lost", 600), TT_OK);
    evlog_t log = {0};
    drain(r, &log);
    CU_ASSERT_EQUAL(log.n, 1);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 0);
    const tt_rdzv_event_t *f = formed(&log, 2, 3, 6);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(rank_of(f, ids[i]), i);
    CU_ASSERT_EQUAL(f->members[2].last_step, 4); /* c catches up from the others */
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 2);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    evlog_free(&log);
    /* The members go on in the new generation; the old one is stale. */
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 1, 2, 6, 0, 700, &rep), TT_OK);
    CU_ASSERT_EQUAL(rep.rank, 0);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 1, 6, 0, 700, &rep), TT_ESTALE);
    tt_rdzv_destroy(&r);
}

/* Nothing to renew unless a generation runs. */
static void rdzv_regroup_now_noop_unless_running(void) {
    tt_rdzv_t *r = mk(2, 3, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(r, "shard s1 lost", 100), TT_EAGAIN);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    /* Below min for longer than the join timeout: FAILED. */
    tt_rdzv_tick(r, 100 + tt_rdzv_settings(r)->join_timeout_ms);
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    drain_count(r);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(r, "shard s1 lost", 200000000), TT_EJOBFAILED);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 0);
    tt_rdzv_destroy(&r);

    static const char *const ids[] = {"a", "b"};
    r = running(2, 2, ids, 2);
    CU_ASSERT_EQUAL(tt_rdzv_finish(r, "a", 1, 3000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FINISHED);
    drain_count(r);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(r, "shard s1 lost", 3100), TT_EJOBDONE);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(NULL, "x", 0), TT_EINVAL);
    tt_rdzv_destroy(&r);
}

/* tetherctl drain: at the next boundary by default (a regroup after step
 * S, the drained member told EDRAINED, no flap), at once with `now`, and
 * never below min_workers. */
static void rdzv_drain_at_boundary_and_now(void) {
    static const char *const ids[] = {"a", "b", "c", "d"};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 4, ids, 4);
    CU_ASSERT_EQUAL(hb(r, "a", 4, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "x", 0, 1000, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "x is neither a member"));
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "c", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 5);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "c", 0, 1001, err, sizeof(err)), TT_OK); /* set already */
    tt_rdzv_member_info_t info[4];
    size_t nm = 0;
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 1001, info, 4, &nm), TT_OK);
    CU_ASSERT_EQUAL(nm, 4);
    for (size_t i = 0; i < nm; i++) /* tetherctl members shows it */
        CU_ASSERT_EQUAL(info[i].draining, strcmp(info[i].m.worker_id, "c") == 0);
    drain(r, &log);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_REGROUP_ANNOUNCED), 1);
    evlog_free(&log);
    for (int i = 0; i < 4; i++) /* every member, c too, stops at S */
        CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, ids[i], 1, 5, 1100 + (uint64_t)i), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 3, 6);
    CU_ASSERT_EQUAL(rank_of(f, "c"), -1);
    CU_ASSERT_EQUAL(rank_of(f, "d"), 2);
    const tt_rdzv_event_t *ev = find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 0);
    CU_ASSERT_STRING_EQUAL(ev->worker_id, "c");
    CU_ASSERT_EQUAL(ev->status, TT_EDRAINED);
    evlog_free(&log);
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "c", 1, 1, 5, 0, 1200, &rep), TT_EDRAINED);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "c", 2, 1, 5, 0, 1200, &rep), TT_EFENCED); /* another */
    /* now: d goes at once, as after a death, without waiting for a boundary */
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "d", 1, 1300, err, sizeof(err)), TT_OK);
    drain(r, &log);
    formed(&log, 3, 2, 6); /* a and b completed step 5 */
    ev = find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 0);
    CU_ASSERT_STRING_EQUAL(ev->worker_id, "d");
    CU_ASSERT_EQUAL(ev->status, TT_EDRAINED);
    evlog_free(&log);
    /* two left, min 2: no more */
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "b", 0, 1400, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "below its min_workers 2"));
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_destroy(&r);
}

/* A drain set, then a death that leaves too few for it: the drain is
 * cancelled, the drained-to-be member stays. */
static void rdzv_drain_cancelled_below_min(void) {
    static const char *const ids[] = {"a", "b", "c"};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "c", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT(tt_rdzv_regroup_after_step(r) >= 0);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "b", 1, 1100), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 0);
    CU_ASSERT(rank_of(f, "c") >= 0 && rank_of(f, "a") >= 0);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1); /* nothing left to drain */
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_destroy(&r);
}

/* A worker waiting to be admitted is drained at once: its join is
 * refused with EDRAINED, and the regroup announced for it is cancelled. */
static void rdzv_drain_waiting_worker(void) {
    static const char *const ids[] = {"a", "b"};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 3, ids, 2);
    CU_ASSERT_EQUAL(join(r, "c", 1000), TT_OK);
    CU_ASSERT(tt_rdzv_regroup_after_step(r) >= 0);
    CU_ASSERT_EQUAL(drain_count(r), 1); /* REGROUP_ANNOUNCED */
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "c", 0, 1100, err, sizeof(err)), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *ev = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_STRING_EQUAL(ev->worker_id, "c");
    CU_ASSERT_EQUAL(ev->status, TT_EDRAINED);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1); /* nobody left to admit */
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "c", 1, 0, -1, 0, 1200, &rep), TT_EDRAINED);
    tt_rdzv_destroy(&r);
}

/* ---- shrink relation (tt_rdzv_event_t.shrink_of) ---- */

/* Checks that ids[i] holds rank i of the running generation, so that the
 * tests below know every member's old rank. */
static void ranked_as(tt_rdzv_t *r, const char *const *ids, uint32_t n) {
    tt_rdzv_member_info_t *info = calloc(n, sizeof(*info));
    size_t got = 0;
    CU_ASSERT_PTR_NOT_NULL_FATAL(info);
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 0, info, n, &got), TT_OK);
    CU_ASSERT_EQUAL_FATAL(got, n);
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(info[i].m.rank, i);
        CU_ASSERT_STRING_EQUAL(info[i].m.worker_id, ids[i]);
    }
    free(info);
}

/* Every one of ids (generation `gen`) stops at the boundary `step`. */
static void all_at_boundary(tt_rdzv_t *r, const char *const *ids, uint32_t n, uint64_t gen,
                            int64_t step, uint64_t now) {
    for (uint32_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, ids[i], gen, step, now), TT_OK);
}

/* f says it is generation `of` minus old ranks `gone` (n of them), and
 * every survivor's new rank is its old one with the gaps closed: old[] are
 * the ids by old rank, n_old of them. */
static void check_shrink(const tt_rdzv_event_t *f, uint64_t of, const uint32_t *gone, uint32_t n,
                         const char *const *old, uint32_t n_old) {
    CU_ASSERT_EQUAL(f->shrink_of, of);
    CU_ASSERT_EQUAL_FATAL(f->n_shrink_exclude, n);
    for (uint32_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(f->shrink_exclude[i], gone[i]);
    CU_ASSERT_EQUAL(f->world_size, n_old - n);
    uint32_t below = 0; /* excluded ranks below the current one */
    for (uint32_t k = 0; k < n_old; k++) {
        if (below < n && gone[below] == k) {
            CU_ASSERT_EQUAL(rank_of(f, old[k]), -1);
            below++;
        } else {
            CU_ASSERT_EQUAL(rank_of(f, old[k]), (int)(k - below));
        }
    }
}

static void no_shrink(const tt_rdzv_event_t *f) {
    CU_ASSERT_EQUAL(f->shrink_of, 0);
    CU_ASSERT_EQUAL(f->n_shrink_exclude, 0);
}

/* Draining the middle one of three at a boundary: generation 2 is 1 minus
 * old rank 1, and c moves from rank 2 to 1. */
static void rdzv_drain_at_boundary_is_shrink(void) {
    static const char *const ids[] = {"a", "b", "c"};
    static const uint32_t gone[] = {1};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 3, ids, 3);
    ranked_as(r, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 4, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "b", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), 5);
    all_at_boundary(r, ids, 3, 1, 5, 1100);
    drain(r, &log);
    check_shrink(formed(&log, 2, 2, 6), 1, gone, 1, ids, 3);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* Two of four, drained in reverse order: both old ranks, ascending; then
 * a second drain shrinks generation 2 in turn. */
static void rdzv_drain_two_lists_ranks_ascending(void) {
    static const char *const ids[] = {"a", "b", "c", "d"};
    static const char *const left[] = {"a", "c"};
    static const uint32_t gone[] = {1, 3}, gone2[] = {0};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(1, 4, ids, 4);
    ranked_as(r, ids, 4);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "d", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "b", 0, 1000, err, sizeof(err)), TT_OK);
    all_at_boundary(r, ids, 4, 1, 0, 1100);
    drain(r, &log);
    check_shrink(formed(&log, 2, 2, 1), 1, gone, 2, ids, 4);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 2);
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "a", 0, 1200, err, sizeof(err)), TT_OK);
    all_at_boundary(r, left, 2, 2, 1, 1300);
    drain(r, &log);
    check_shrink(formed(&log, 3, 1, 2), 2, gone2, 1, left, 2);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* The same boundary also admits a joiner: not a shrink (the new member
 * needs a communicator the old one cannot give). */
static void rdzv_drain_with_joiner_is_not_shrink(void) {
    static const char *const ids[] = {"a", "b", "c"};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 4, ids, 3);
    CU_ASSERT_EQUAL(join(r, "d", 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "c", 0, 1000, err, sizeof(err)), TT_OK);
    all_at_boundary(r, ids, 3, 1, 0, 1100);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 3, 1);
    CU_ASSERT_EQUAL(rank_of(f, "c"), -1);
    CU_ASSERT(rank_of(f, "d") >= 0);
    no_shrink(f);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* A death is no shrink (a survivor's communicator may have seen the peer
 * fail mid-collective, which NCCL cannot shrink; rdzv_group.c): not of
 * the dead rank, nor of the drained ones carried out with it; nor is a
 * drain --now (an eviction), nor a regroup the daemon asks for. The
 * survivors still keep their order. */
static void rdzv_death_and_drain_now_are_not_shrinks(void) {
    static const char *const ids[] = {"a", "b", "c", "d"};
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(2, 4, ids, 4);
    ranked_as(r, ids, 4);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "d", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "c", 1, 1100), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 0);
    CU_ASSERT_EQUAL(rank_of(f, "d"), -1); /* dropped with the death */
    CU_ASSERT_EQUAL(rank_of(f, "a"), 0);
    CU_ASSERT_EQUAL(rank_of(f, "b"), 1);
    no_shrink(f);
    evlog_free(&log);
    tt_rdzv_destroy(&r);

    r = running(2, 4, ids, 4);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "d", 1, 1000, err, sizeof(err)), TT_OK);
    drain(r, &log);
    no_shrink(formed(&log, 2, 3, 0));
    evlog_free(&log);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_now(r, "shard s1 lost", 1100), TT_OK);
    drain(r, &log);
    no_shrink(formed(&log, 3, 3, 0));
    evlog_free(&log);
    tt_rdzv_destroy(&r);

    /* min 3: the drain of d cannot be carried out with b's death, so d
     * stays (its drain is cancelled). */
    r = running(3, 4, ids, 4);
    CU_ASSERT_EQUAL(tt_rdzv_drain(r, "d", 0, 1000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "b", 1, 1100), TT_OK);
    drain(r, &log);
    f = formed(&log, 2, 3, 0);
    no_shrink(f);
    CU_ASSERT_EQUAL(rank_of(f, "d"), 2);
    evlog_free(&log);
    tt_rdzv_destroy(&r);

    /* A joiner admitted with a death gets a rank; still no shrink. */
    r = running(2, 4, ids, 3);
    CU_ASSERT_EQUAL(join(r, "d", 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "b", 1, 1100), TT_OK);
    drain(r, &log);
    f = formed(&log, 2, 3, 0);
    CU_ASSERT(rank_of(f, "d") >= 0);
    no_shrink(f);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_first_generation_is_not_shrink(void) {
    evlog_t log = {0};
    tt_rdzv_t *r = mk(2, 2, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(join(r, "b", 10), TT_OK);
    drain(r, &log);
    no_shrink(formed(&log, 1, 2, 0));
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* Drains k of 70 members at one boundary: a shrink up to the 64 ranks a
 * Generation can carry, a plain new generation beyond. */
static void drain_many(uint32_t k, int shrink) {
    enum { N = 70 };
    char names[N][8];
    const char *ids[N];
    uint32_t gone[N];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "w%02u", i);
        ids[i] = names[i];
        gone[i] = i;
    }
    evlog_t log = {0};
    char err[256] = "";
    tt_rdzv_t *r = running(1, N, ids, N);
    for (uint32_t i = 0; i < k; i++)
        CU_ASSERT_EQUAL(tt_rdzv_drain(r, ids[i], 0, 1000, err, sizeof(err)), TT_OK);
    all_at_boundary(r, ids, N, 1, 0, 1100);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, N - k, 1);
    if (shrink)
        check_shrink(f, 1, gone, k, ids, N);
    else
        no_shrink(f);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_shrink_at_most_64_ranks(void) {
    drain_many(TT_RDZV_SHRINK_MAX, 1);
    drain_many(TT_RDZV_SHRINK_MAX + 1, 0);
}

/* tetherctl status shows where the running generation is: when every
 * member was restarted with nothing and the job trains its steps again,
 * the current step falls below the committed one (which never goes back),
 * and a joiner that has reported no step yet does not pull it down. */
static void rdzv_current_step_follows_a_generation_that_trains_again(void) {
    static const char *const ids[] = {"a", "b"}, *const ids3[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 2);
    CU_ASSERT_EQUAL(hb(r, "a", 9, 500), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 9, 500), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), 9);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 9);
    /* both processes restarted, holding no state */
    CU_ASSERT_EQUAL(join_step(r, "a", 2, -1, 600), TT_OK);
    CU_ASSERT_EQUAL(join_step(r, "b", 2, -1, 600), TT_OK);
    tt_rdzv_tick(r, 600 + tt_rdzv_settings(r)->last_call_ms);
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    uint64_t gen = tt_rdzv_generation(r);
    CU_ASSERT(gen > 1);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), 9); /* nobody reported yet */
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 2, gen, 3, 0, 1500, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 2, gen, 2, 0, 1500, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), 2);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 9);
    /* a joiner with no step yet is not where the generation is */
    CU_ASSERT_EQUAL(join(r, "c", 1600), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "a", 2, gen, 4, 0, 1700, NULL), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 2, gen, 4, 0, 1700, NULL), TT_OK);
    int64_t s = tt_rdzv_regroup_after_step(r);
    CU_ASSERT_FATAL(s >= 4);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "a", 2, s, 1800), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_at_boundary(r, "b", 2, s, 1800), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), s); /* c's -1 is not counted */
    /* past the old steps, both figures agree again */
    gen = tt_rdzv_generation(r);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, ids3[i], i == 2 ? 1 : 2, gen, 12, 0, 1900, NULL),
                        TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_current_step(r), 12);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 12);
    tt_rdzv_destroy(&r);
}

static const tt_cunit_test_t tests[] = {
    {"rdzv_current_step_follows_a_generation_that_trains_again",
     rdzv_current_step_follows_a_generation_that_trains_again},
    {"rdzv_late_joiner_admitted_at_boundary", rdzv_late_joiner_admitted_at_boundary},
    {"rdzv_regroup_step_moves_past_running_member", rdzv_regroup_step_moves_past_running_member},
    {"rdzv_regroup_step_raised_sends_continue", rdzv_regroup_step_raised_sends_continue},
    {"rdzv_regroup_cancelled_when_waiter_goes", rdzv_regroup_cancelled_when_waiter_goes},
    {"rdzv_death_admits_waiters_at_once", rdzv_death_admits_waiters_at_once},
    {"rdzv_survivors_first_when_slots_short", rdzv_survivors_first_when_slots_short},
    {"rdzv_stale_generation_heartbeat", rdzv_stale_generation_heartbeat},
    {"rdzv_rejoin_new_incarnation", rdzv_rejoin_new_incarnation},
    {"rdzv_commit_only_from_current_members", rdzv_commit_only_from_current_members},
    {"rdzv_regroup_now_keeps_members", rdzv_regroup_now_keeps_members},
    {"rdzv_regroup_now_noop_unless_running", rdzv_regroup_now_noop_unless_running},
    {"rdzv_drain_at_boundary_and_now", rdzv_drain_at_boundary_and_now},
    {"rdzv_drain_cancelled_below_min", rdzv_drain_cancelled_below_min},
    {"rdzv_drain_waiting_worker", rdzv_drain_waiting_worker},
    {"rdzv_drain_at_boundary_is_shrink", rdzv_drain_at_boundary_is_shrink},
    {"rdzv_drain_two_lists_ranks_ascending", rdzv_drain_two_lists_ranks_ascending},
    {"rdzv_drain_with_joiner_is_not_shrink", rdzv_drain_with_joiner_is_not_shrink},
    {"rdzv_death_and_drain_now_are_not_shrinks", rdzv_death_and_drain_now_are_not_shrinks},
    {"rdzv_first_generation_is_not_shrink", rdzv_first_generation_is_not_shrink},
    {"rdzv_shrink_at_most_64_ranks", rdzv_shrink_at_most_64_ranks},
    {NULL, NULL},
};

TT_CUNIT_MAIN("rdzv", tests)
