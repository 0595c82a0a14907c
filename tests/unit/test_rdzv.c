/* Unit tests of the rendezvous state machine (server/coordinator/rdzv.h):
 * settings, rendezvous and last call, failure detection and confirmation,
 * below-min waiting and the join timeout, deadlines, persistence, and a
 * 1,000-worker rendezvous. The regroup protocol (late joiners, step
 * boundaries, re-joins) is in test_rdzv_regroup.c. Time is injected as
 * now_ms; the scale test reads the wall clock only to print timing. */
#include "rdzv_testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void rdzv_settings_validate_and_diff(void) {
    char err[256];
    tt_rdzv_settings_t s = tt_rdzv_settings_default();
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(s.last_call_ms, 2000);
    CU_ASSERT_EQUAL(s.heartbeat_timeout_ms, 5000);
    CU_ASSERT_EQUAL(s.join_timeout_ms, 60000);
    s.min_workers = 0;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "min_workers"));
    s = settings(3, 2);
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_workers: 2 is below min_workers 3"));
    s = settings(1, 2);
    s.heartbeat_timeout_ms = s.heartbeat_ms;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "heartbeat_timeout_ms"));
    s = settings(1, 2);
    s.last_call_ms = 0;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "last_call_ms"));
    s = settings(1, TT_RDZV_WORKERS_LIMIT + 1);
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    s = settings(1, 8);
    s.global_batch = 4;
    CU_ASSERT_EQUAL(tt_rdzv_settings_validate(&s, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "global_batch"));

    tt_rdzv_settings_t a = settings(2, 4), b = settings(2, 4);
    CU_ASSERT_TRUE(tt_rdzv_settings_equal(&a, &b));
    b.join_timeout_ms = 1;
    CU_ASSERT_FALSE(tt_rdzv_settings_equal(&a, &b));
    CU_ASSERT_EQUAL(tt_rdzv_settings_diff(&a, &b, err, sizeof(err)), 1);
    CU_ASSERT_STRING_EQUAL(err, "join_timeout_ms: job has 60000, join asked 1");
}

static void rdzv_join_conflict_refused(void) {
    tt_rdzv_t *r = mk(2, 4, 0);
    tt_rdzv_settings_t other = settings(3, 4);
    tt_rdzv_join_t q = {.worker_id = "a", .incarnation = 1, .last_step = -1, .settings = &other};
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 0, err, sizeof(err)), TT_ECONFLICT);
    CU_ASSERT_STRING_EQUAL(err, "min_workers: job has 2, join asked 3");
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);

    char longid[200];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    q.settings = NULL;
    q.worker_id = longid;
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 0, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "127"));
    q.worker_id = "";
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 0, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 0);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_destroy(&r);
    CU_ASSERT_PTR_NULL(r);
    tt_rdzv_destroy(&r); /* NULL is fine */
}

static void rdzv_last_call_forms_at_deadline(void) {
    tt_rdzv_t *r = mk(2, 4, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(join(r, "b", 100), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 2100);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 2099), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 2100), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    evlog_t log = {0};
    drain(r, &log);
    CU_ASSERT_EQUAL(log.n, 1);
    const tt_rdzv_event_t *f = formed(&log, 1, 2, 0);
    CU_ASSERT_STRING_EQUAL(f->members[1].endpoint, "tcp://b:7800");
    CU_ASSERT_STRING_EQUAL(f->members[1].host, "host-b");
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 2);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_max_forms_at_once(void) {
    tt_rdzv_t *r = mk(2, 3, 0);
    CU_ASSERT_EQUAL(join(r, "a", 0), TT_OK);
    CU_ASSERT_EQUAL(join(r, "b", 10), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(join(r, "c", 20), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    evlog_t log = {0};
    drain(r, &log);
    formed(&log, 1, 3, 0);
    /* A fourth worker waits; with no free slot nothing is announced. */
    CU_ASSERT_EQUAL(join(r, "d", 30), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_regroup_after_step(r), -1);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_ranks_sorted_by_worker_id(void) {
    static const char *const ids[] = {"charlie", "alpha", "bravo"};
    tt_rdzv_t *r = mk(3, 3, 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(join(r, ids[i], 0), TT_OK);
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *f = find_ev(&log, TT_RDZV_EV_GENERATION_FORMED, 0);
    CU_ASSERT_STRING_EQUAL(f->members[0].worker_id, "alpha");
    CU_ASSERT_STRING_EQUAL(f->members[1].worker_id, "bravo");
    CU_ASSERT_STRING_EQUAL(f->members[2].worker_id, "charlie");
    CU_ASSERT_EQUAL(f->members[2].rank, 2);
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "charlie", 1, 1, -1, 0, 10, &rep), TT_OK);
    CU_ASSERT_EQUAL(rep.rank, 2);
    CU_ASSERT_EQUAL(rep.world_size, 3);
    CU_ASSERT_EQUAL(rep.state, TT_RDZV_RUNNING);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

/* The coordinator stood still from 4500 to 12500 (8000 ms): a stops at
 * 4000 only because nothing was read, b really went silent at 1000. The
 * stall does not count: a stays, b keeps the 3500 ms of silence it had
 * before the stall and is evicted 1500 ms after it. */
static void rdzv_stall_of_the_coordinator_does_not_count(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 2, ids, 2);
    CU_ASSERT_EQUAL(hb(r, "b", 0, 1000), TT_OK);
    for (uint64_t t = 1000; t <= 4000; t += 1000)
        CU_ASSERT_EQUAL(hb(r, "a", (int64_t)t / 1000, t), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 4500), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_forgive(r, 8000, 12500);
    CU_ASSERT(tt_rdzv_next_deadline(r) <= 12500); /* re-scanned at once */
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 12500), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 14000); /* b: 1000 + 8000 + 5000 */
    CU_ASSERT_EQUAL(hb(r, "a", 5, 12600), TT_OK);     /* a's queued heartbeats */
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 13999), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 14000), TT_OK);
    evlog_t log = {0};
    evicted(r, &log, "b");
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 1);
    evlog_free(&log);
    /* a waits below min_workers from 14000 for the join timeout; a stall of
     * 5000 ms in that wait moves its end from 74000 to 79000. */
    uint32_t join_to = tt_rdzv_settings(r)->join_timeout_ms;
    for (uint64_t t = 15000; t < 14000 + join_to + 5000; t += 1000) {
        CU_ASSERT_EQUAL(hb(r, "a", 5, t), TT_OK);
        if (t == 20000)
            tt_rdzv_forgive(r, 5000, t);
        CU_ASSERT_EQUAL(tt_rdzv_tick(r, t), TT_OK);
    }
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(hb(r, "a", 5, 14000 + join_to + 5000), TT_OK);
    tt_rdzv_tick(r, 14000 + join_to + 5000);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    /* Without the forgiveness the same stall evicts both at once. */
    tt_rdzv_t *r2 = running(2, 2, ids, 2);
    CU_ASSERT_EQUAL(hb(r2, "b", 0, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r2, "a", 4, 4000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r2, 12500), TT_OK);
    drain(r2, &log);
    CU_ASSERT(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED) >= 1);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_GENERATION_FORMED), 0); /* below min: waits */
    evlog_free(&log);
    tt_rdzv_forgive(NULL, 1, 1); /* accepted */
    tt_rdzv_destroy(&r2);
    tt_rdzv_destroy(&r);
}

static void rdzv_heartbeat_timeout_evicts_and_regroups(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3); /* formed at t=0 (max reached) */
    for (uint64_t t = 1000; t <= 4000; t += 1000) {
        CU_ASSERT_EQUAL(hb(r, "a", (int64_t)t / 1000 + 3, t), TT_OK); /* a ends at 7 */
        CU_ASSERT_EQUAL(hb(r, "c", (int64_t)t / 1000 + 2, t), TT_OK); /* c ends at 6 */
        CU_ASSERT_EQUAL(tt_rdzv_tick(r, t), TT_OK);
    }
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 4999), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 5000), TT_OK); /* b silent for 5000 ms */
    evlog_t log = {0};
    const tt_rdzv_event_t *e = evicted(r, &log, "b");
    CU_ASSERT_EQUAL(e->generation, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->message, "heartbeat timeout 5000 ms"));
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 8); /* after the highest survivor step */
    CU_ASSERT_STRING_EQUAL(f->members[0].worker_id, "a");
    CU_ASSERT_STRING_EQUAL(f->members[1].worker_id, "c");
    CU_ASSERT_EQUAL(f->members[1].rank, 1);
    CU_ASSERT_EQUAL(f->members[0].last_step, 7);
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 1, 5, 0, 5001, &rep), TT_EFENCED);
    CU_ASSERT_EQUAL(rep.rank, -1);
    CU_ASSERT_EQUAL(rep.generation, 2);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 6);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_report_against_live_worker_not_acted_on(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(hb(r, ids[i], 0, 1000), TT_OK);
    tt_rdzv_report_t rep = {
        .reporter_id = "a", .generation = 1, .suspect_rank = 1, .reason = "peer disconnected"};
    int confirmed = -1;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 1200, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    tt_rdzv_member_info_t info[3];
    size_t n = 0;
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 1200, info, 3, &n), TT_OK);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_TRUE(info[1].suspected);
    CU_ASSERT_STRING_EQUAL(info[1].suspect_reason, "reported by rank 0: peer disconnected");
    CU_ASSERT_EQUAL(info[1].heartbeat_age_ms, 200);
    /* The suspect's next heartbeat clears it; nothing happens later. */
    CU_ASSERT_EQUAL(hb(r, "b", 1, 1400), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 1400, info, 3, &n), TT_OK);
    CU_ASSERT_FALSE(info[1].suspected);
    CU_ASSERT_EQUAL(hb(r, "a", 1, 2000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "c", 1, 2000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 2500), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    /* Refusals. */
    rep.reporter_id = "zed";
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2500, NULL), TT_EFENCED);
    rep.reporter_id = "a";
    rep.suspect_rank = 0;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2500, NULL), TT_EINVAL);
    rep.suspect_rank = 3;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2500, NULL), TT_EINVAL);
    rep.suspect_rank = 1;
    rep.generation = 0;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2500, NULL), TT_ESTALE);
    tt_rdzv_destroy(&r);
}

static void rdzv_report_confirmed_by_overdue_heartbeat(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3); /* everyone last seen at 0 */
    CU_ASSERT_EQUAL(hb(r, "a", 0, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "c", 0, 1000), TT_OK);
    tt_rdzv_report_t rep = {
        .reporter_id = "a", .generation = 1, .suspect_rank = 1, .reason = "allreduce timed out"};
    int confirmed = -1;
    /* b silent 1000 ms < 1.5 x 1000: suspected, confirmed by tick at 1500. */
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 1000, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 0);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 1500);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 1499), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 1500), TT_OK);
    evlog_t log = {0};
    const tt_rdzv_event_t *e = evicted(r, &log, "b");
    CU_ASSERT_STRING_EQUAL(e->message, "reported by rank 0: allreduce timed out; confirmed by "
                                       "overdue heartbeat (silent 1500 ms)");
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 2);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 2);
    evlog_free(&log);

    /* Already overdue when reported: confirmed by the report itself. */
    rep.generation = 2;
    rep.suspect_rank = 1; /* c, silent since 1000 */
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2600, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 1);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 0); /* a alone is below min 2 */
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    tt_rdzv_destroy(&r);
}

static void rdzv_report_confirmed_by_disconnect(void) {
    static const char *const ids[] = {"a", "b", "c", "d"};
    tt_rdzv_t *r = running(2, 4, ids, 4);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(hb(r, ids[i], 0, 1000), TT_OK);
    /* Disconnect first, then the report: confirmed at once. */
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "c", 1, 1100), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1); /* a disconnect alone evicts nobody */
    tt_rdzv_report_t rep = {
        .reporter_id = "b", .generation = 1, .suspect_rank = 2, .reason = "peer disconnected"};
    int confirmed = 0;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 1200, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 1);
    evlog_t log = {0};
    const tt_rdzv_event_t *e = evicted(r, &log, NULL);
    CU_ASSERT_STRING_EQUAL(e->message,
                           "reported by rank 1: peer disconnected; confirmed by disconnect");
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 2);
    evlog_free(&log);
    /* Report first, then the disconnect: confirmed when it arrives. */
    rep.generation = 2;
    rep.suspect_rank = 2; /* d in {a, b, d} */
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 1300, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 0);
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "d", 7, 1350),
                    TT_ENOTFOUND); /* other incarnation */
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 2);
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "d", 1, 1400), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 2);
    tt_rdzv_destroy(&r);
}

/* Whether tt_rdzv_members lists `n` members with exactly those suspected. */
static void suspected_are(tt_rdzv_t *r, uint64_t now, size_t n, const int *want) {
    tt_rdzv_member_info_t info[8];
    size_t got = 0;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_members(r, now, info, 8, &got), TT_OK);
    CU_ASSERT_EQUAL_FATAL(got, n);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(info[i].suspected, want[i]);
}

/* A report naming no peer (NCCL's) suspects every member but the reporter:
 * the disconnected and the overdue are evicted by the report itself, a
 * later disconnect confirms a standing suspicion, and the living are
 * cleared by their heartbeats. */
static void rdzv_report_naming_no_peer(void) {
    static const char *const ids[] = {"a", "b", "c", "d", "e"};
    tt_rdzv_t *r = running(2, 5, ids, 5);
    for (int i = 0; i < 5; i++)
        if (i != 3) /* d stays silent since 0 */
            CU_ASSERT_EQUAL(hb(r, ids[i], 0, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "c", 1, 1100), TT_OK);
    tt_rdzv_report_t rep = {.reporter_id = "a",
                            .generation = 1,
                            .suspect_rank = TT_RDZV_SUSPECT_ANY,
                            .reason = "remote process exited"};
    int confirmed = -1;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 1600, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 2);
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *e = find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 0);
    CU_ASSERT_STRING_EQUAL(e->worker_id, "c");
    CU_ASSERT_STRING_EQUAL(e->message, "reported by rank 0, naming no peer: remote process "
                                       "exited; confirmed by disconnect");
    e = find_ev(&log, TT_RDZV_EV_MEMBER_EVICTED, 1);
    CU_ASSERT_STRING_EQUAL(e->worker_id, "d");
    CU_ASSERT_STRING_EQUAL(e->message, "reported by rank 0, naming no peer: remote process "
                                       "exited; confirmed by overdue heartbeat (silent 1600 ms)");
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 2); /* not b, e, nor a */
    formed(&log, 2, 3, 1);                                         /* after the survivors' step 0 */
    evlog_free(&log);

    /* Generation 2 is {a, b, e}, all alive: suspected, then cleared. */
    CU_ASSERT_EQUAL(hb(r, "a", 0, 2000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 0, 2000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "e", 0, 2000), TT_OK);
    rep.generation = 2;
    rep.reporter_id = "b";
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2100, &confirmed), TT_OK);
    CU_ASSERT_EQUAL(confirmed, 0);
    suspected_are(r, 2100, 3, (const int[]){1, 0, 1});
    CU_ASSERT_EQUAL(hb(r, "a", 0, 2500), TT_OK);
    suspected_are(r, 2500, 3, (const int[]){0, 0, 1});
    /* e's connection drops while its suspicion stands: evicted at once. */
    CU_ASSERT_EQUAL(tt_rdzv_peer_disconnected(r, "e", 1, 2600), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 2);
    /* The same refusals as a named report. */
    rep.generation = 3;
    rep.reporter_id = "zed";
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2700, NULL), TT_EFENCED);
    rep.reporter_id = "a";
    rep.generation = 2;
    CU_ASSERT_EQUAL(tt_rdzv_report_failure(r, &rep, 2700, NULL), TT_ESTALE);
    tt_rdzv_destroy(&r);
}

static void rdzv_below_min_waits_then_reforms(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 3, ids, 2); /* formed by last call at 2000 */
    CU_ASSERT_EQUAL(hb(r, "b", 41, 2500), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "a", 1, 3000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_waiter_count(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    evlog_t log = {0};
    const tt_rdzv_event_t *e = evicted(r, &log, NULL);
    CU_ASSERT_STRING_EQUAL(e->message, "left");
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_GENERATION_FORMED), 0);
    evlog_free(&log);
    /* The survivor keeps heartbeating its old generation while it waits. */
    tt_rdzv_hb_reply_t rep;
    CU_ASSERT_EQUAL(tt_rdzv_heartbeat(r, "b", 1, 1, 41, 0, 3500, &rep), TT_OK);
    CU_ASSERT_EQUAL(rep.state, TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(rep.rank, -1);
    CU_ASSERT_EQUAL(join(r, "c", 4000), TT_OK);
    /* First due: the expiry bound of b's join-time heartbeat (stale: b
     * heartbeated at 3500); the tick finds nothing and exposes last call. */
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 5000);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 5000), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 6000); /* last call */
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 5999), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 6000), TT_OK);
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 2, 2, 42);
    CU_ASSERT_EQUAL(rank_of(f, "b"), 0);
    CU_ASSERT_EQUAL(rank_of(f, "c"), 1);
    evlog_free(&log);
    tt_rdzv_destroy(&r);
}

static void rdzv_below_min_join_timeout_fails(void) {
    static const char *const ids[] = {"a", "b"};
    tt_rdzv_t *r = running(2, 2, ids, 2); /* formed at once at t=0 */
    CU_ASSERT_EQUAL(tt_rdzv_leave(r, "b", 1, 1000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 5000); /* a's heartbeat expiry */
    CU_ASSERT_EQUAL(drain_count(r), 1);
    for (uint64_t t = 1000; t < 61000; t += 1000) {
        CU_ASSERT_EQUAL(hb(r, "a", 3, t), TT_OK);
        CU_ASSERT_EQUAL(tt_rdzv_tick(r, t), TT_OK);
    }
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 61000);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 60999), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_WAITING);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 61000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r),
                           "1 of min 2 workers after 60000 ms: job failed");
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *jr = find_ev(&log, TT_RDZV_EV_JOIN_REFUSED, 0);
    CU_ASSERT_STRING_EQUAL(jr->worker_id, "a");
    CU_ASSERT_EQUAL(jr->status, TT_EJOBFAILED);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_JOB_FAILED), 1);
    evlog_free(&log);
    tt_rdzv_join_t q = {.worker_id = "z", .incarnation = 1, .last_step = -1};
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_rdzv_join(r, &q, 62000, err, sizeof(err)), TT_EJOBFAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "1 of min 2 workers after 60000 ms"));
    CU_ASSERT_EQUAL(hb(r, "a", 3, 62000), TT_EJOBFAILED);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), UINT64_MAX);
    tt_rdzv_destroy(&r);
}

static void rdzv_initial_join_timeout_fails(void) {
    tt_rdzv_t *r = mk(3, 3, 100);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 60100);
    CU_ASSERT_EQUAL(join(r, "a", 59000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 60100), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r),
                           "1 of min 3 workers after 60000 ms: job failed");
    tt_rdzv_destroy(&r);
}

static void rdzv_export_restore_round_trip(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(2, 3, ids, 3);
    CU_ASSERT_EQUAL(hb(r, "a", 11, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 10, 1000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "c", 11, 1000), TT_OK);
    tt_rdzv_record_t rec;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_export(r, &rec), TT_OK);
    CU_ASSERT_STRING_EQUAL(rec.job_id, "job1");
    CU_ASSERT_EQUAL(rec.state, TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(rec.generation, 1);
    CU_ASSERT_EQUAL(rec.n_members, 3);
    CU_ASSERT_EQUAL(rec.last_committed_step, 10);
    CU_ASSERT_STRING_EQUAL(rec.members[2].worker_id, "c");
    CU_ASSERT_STRING_EQUAL(rec.members[2].endpoint, "tcp://c:7800");
    CU_ASSERT_EQUAL(rec.members[2].last_step, 11);
    CU_ASSERT_TRUE(tt_rdzv_settings_equal(&rec.settings, tt_rdzv_settings(r)));
    tt_rdzv_destroy(&r);

    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_restore(&r, &rec, 100000, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_member_count(r), 3);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 10);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 105000); /* the grace period */
    /* a and b come back and just continue; c never does. */
    CU_ASSERT_EQUAL(hb(r, "a", 12, 101000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 12, 101000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 104999), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 105000), TT_OK);
    evlog_t log = {0};
    drain(r, &log);
    formed(&log, 2, 2, 13);
    CU_ASSERT_EQUAL(count_ev(&log, TT_RDZV_EV_MEMBER_EVICTED), 1);
    evlog_free(&log);
    tt_rdzv_destroy(&r);

    /* Inconsistent records are refused with a reason. */
    memcpy(rec.members[0].worker_id, "zzz", 4);
    CU_ASSERT_EQUAL(tt_rdzv_restore(&r, &rec, 0, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "sorted"));
    CU_ASSERT_PTR_NULL(r);
    memcpy(rec.members[0].worker_id, "a", 2);
    rec.members[1].rank = 7;
    CU_ASSERT_EQUAL(tt_rdzv_restore(&r, &rec, 0, err, sizeof(err)), TT_ECORRUPT);
    rec.members[1].rank = 1;
    rec.n_members = 1; /* below min 2 while RUNNING */
    CU_ASSERT_EQUAL(tt_rdzv_restore(&r, &rec, 0, err, sizeof(err)), TT_ECORRUPT);
    tt_rdzv_record_free(&rec);
    CU_ASSERT_PTR_NULL(rec.members);
}

static void rdzv_export_restore_failed_job(void) {
    tt_rdzv_t *r = mk(2, 2, 0);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 60000), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    tt_rdzv_record_t rec;
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_export(r, &rec), TT_OK);
    tt_rdzv_destroy(&r);
    char err[256];
    CU_ASSERT_EQUAL_FATAL(tt_rdzv_restore(&r, &rec, 5, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_FAILED);
    CU_ASSERT_STRING_EQUAL(tt_rdzv_failure_reason(r),
                           "0 of min 2 workers after 60000 ms: job failed");
    CU_ASSERT_EQUAL(join(r, "a", 10), TT_EJOBFAILED);
    tt_rdzv_record_free(&rec);
    tt_rdzv_destroy(&r);
}

static void rdzv_next_deadline_values(void) {
    tt_rdzv_t *r = mk(2, 3, 0);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 60000); /* join timeout */
    CU_ASSERT_EQUAL(join(r, "a", 10), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 5010); /* a's heartbeat expiry */
    CU_ASSERT_EQUAL(join(r, "b", 20), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 2020); /* last call */
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 2020), TT_OK);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 5010);
    CU_ASSERT_EQUAL(hb(r, "a", 0, 3000), TT_OK);
    CU_ASSERT_EQUAL(hb(r, "b", 0, 3500), TT_OK);
    /* The bound may be early (a heartbeat arrived); a tick makes it exact. */
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 5010);
    CU_ASSERT_EQUAL(tt_rdzv_tick(r, 5010), TT_OK);
    CU_ASSERT_EQUAL(drain_count(r), 1); /* only the formation, no eviction */
    CU_ASSERT_EQUAL(tt_rdzv_next_deadline(r), 8000);
    tt_rdzv_destroy(&r);
}

static double elapsed_ms(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static void rdzv_thousand_worker_rendezvous(void) {
    enum { N = 1000 };
    tt_rdzv_t *r = mk(N, N, 0);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char id[32];
    for (int i = N - 1; i >= 0; i--) { /* reverse order: ranks must still sort */
        snprintf(id, sizeof(id), "worker-%04d", (i * 7919) % N);
        CU_ASSERT_EQUAL(join(r, id, 0), TT_OK);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CU_ASSERT_EQUAL(tt_rdzv_state(r), TT_RDZV_RUNNING);
    evlog_t log = {0};
    drain(r, &log);
    const tt_rdzv_event_t *f = formed(&log, 1, N, 0);
    int sorted = 1;
    for (uint32_t i = 0; i < f->world_size; i++) {
        snprintf(id, sizeof(id), "worker-%04u", i);
        sorted &= f->members[i].rank == i && strcmp(f->members[i].worker_id, id) == 0;
    }
    CU_ASSERT_TRUE(sorted);
    evlog_free(&log);
    int ok = 1;
    for (uint64_t t = 1000; t <= 10000; t += 1000) {
        for (int i = 0; i < N; i++) {
            snprintf(id, sizeof(id), "worker-%04d", i);
            ok &= hb(r, id, (int64_t)t / 1000, t) == TT_OK;
        }
        ok &= tt_rdzv_tick(r, t) == TT_OK;
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    CU_ASSERT_TRUE(ok);
    CU_ASSERT_EQUAL(tt_rdzv_generation(r), 1);
    CU_ASSERT_EQUAL(tt_rdzv_last_committed_step(r), 10);
    printf("\n    %d joins + formation: %.2f ms; %d heartbeats + ticks: %.2f ms\n", N,
           elapsed_ms(&t0, &t1), 10 * N, elapsed_ms(&t1, &t2));
    tt_rdzv_destroy(&r);
}

/* Step timing from heartbeats (tt_rdzv_step_times) and the straggler
 * mark (tt_rdzv_members). Incarnation 1 is what join() uses. */
static void members(tt_rdzv_t *r, tt_rdzv_member_info_t *out, size_t n) {
    size_t total = 0;
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 5000, out, n, &total), TT_OK);
    CU_ASSERT_EQUAL(total, n);
}

static void rdzv_step_times_and_straggler(void) {
    static const char *const ids[] = {"a", "b", "c"};
    tt_rdzv_t *r = running(3, 3, ids, 3);
    tt_rdzv_member_info_t m[3];
    members(r, m, 3);
    CU_ASSERT(m[0].step_ms == 0.0 && !m[0].straggler); /* nothing reported yet */
    /* first reports: means since the process started */
    tt_rdzv_step_times(r, "a", 1, 10, 200000, 150000); /* 20 ms steps, 15 ms waiting */
    tt_rdzv_step_times(r, "b", 1, 10, 200000, 140000);
    members(r, m, 3);
    CU_ASSERT_DOUBLE_EQUAL(m[0].step_ms, 20.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m[0].wait_ms, 15.0, 1e-9);
    CU_ASSERT(!m[0].straggler && !m[1].straggler);    /* 1 ms apart: even */
    tt_rdzv_step_times(r, "c", 1, 10, 200000, 10000); /* c waits 1 ms: the others wait for c */
    members(r, m, 3);
    CU_ASSERT(m[2].straggler && !m[0].straggler && !m[1].straggler);
    /* later reports: the means of the new steps only, once the window holds
     * 8 steps or 1 s of them; no new step, no change */
    tt_rdzv_step_times(r, "c", 1, 14, 280000, 70000); /* 4 steps: too few, kept */
    members(r, m, 3);
    CU_ASSERT_DOUBLE_EQUAL(m[2].step_ms, 20.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m[2].wait_ms, 1.0, 1e-9);
    tt_rdzv_step_times(r, "c", 1, 20, 400000, 160000); /* 10 steps of 20 ms, 15 ms waiting */
    tt_rdzv_step_times(r, "c", 1, 20, 400000, 160000);
    members(r, m, 3);
    CU_ASSERT_DOUBLE_EQUAL(m[2].step_ms, 20.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m[2].wait_ms, 15.0, 1e-9);
    /* b waits least, 1 ms under the others: under a tenth of a step, even */
    CU_ASSERT(!m[0].straggler && !m[1].straggler && !m[2].straggler);
    /* a window of 2 steps that took over 1 s is enough */
    tt_rdzv_step_times(r, "a", 1, 12, 1400000, 150000); /* 2 steps of 600 ms, no wait */
    members(r, m, 3);
    CU_ASSERT_DOUBLE_EQUAL(m[0].step_ms, 600.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m[0].wait_ms, 0.0, 1e-9);
    tt_rdzv_step_times(r, "a", 1, 22, 1600000, 300000); /* back to 20 ms, 15 ms waiting */
    /* totals that go backwards (a new count) start over; others are ignored */
    tt_rdzv_step_times(r, "c", 1, 4, 40000, 2000);
    tt_rdzv_step_times(r, "c", 2, 40, 4000000, 0); /* another incarnation */
    tt_rdzv_step_times(r, "nobody", 1, 40, 4000000, 0);
    tt_rdzv_step_times(NULL, "c", 1, 40, 4000000, 0);
    members(r, m, 3);
    CU_ASSERT_DOUBLE_EQUAL(m[2].step_ms, 10.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(m[2].wait_ms, 0.5, 1e-9);
    CU_ASSERT(m[2].straggler);
    /* too few to compare */
    tt_rdzv_member_info_t one[1];
    size_t total = 0;
    CU_ASSERT_EQUAL(tt_rdzv_members(r, 5000, one, 1, &total), TT_OK);
    CU_ASSERT(total == 3 && !one[0].straggler);
    tt_rdzv_destroy(&r);
}

static const tt_cunit_test_t tests[] = {
    {"rdzv_step_times_and_straggler", rdzv_step_times_and_straggler},
    {"rdzv_settings_validate_and_diff", rdzv_settings_validate_and_diff},
    {"rdzv_join_conflict_refused", rdzv_join_conflict_refused},
    {"rdzv_last_call_forms_at_deadline", rdzv_last_call_forms_at_deadline},
    {"rdzv_max_forms_at_once", rdzv_max_forms_at_once},
    {"rdzv_ranks_sorted_by_worker_id", rdzv_ranks_sorted_by_worker_id},
    {"rdzv_heartbeat_timeout_evicts_and_regroups", rdzv_heartbeat_timeout_evicts_and_regroups},
    {"rdzv_stall_of_the_coordinator_does_not_count", rdzv_stall_of_the_coordinator_does_not_count},
    {"rdzv_report_against_live_worker_not_acted_on", rdzv_report_against_live_worker_not_acted_on},
    {"rdzv_report_confirmed_by_overdue_heartbeat", rdzv_report_confirmed_by_overdue_heartbeat},
    {"rdzv_report_confirmed_by_disconnect", rdzv_report_confirmed_by_disconnect},
    {"rdzv_report_naming_no_peer", rdzv_report_naming_no_peer},
    {"rdzv_below_min_waits_then_reforms", rdzv_below_min_waits_then_reforms},
    {"rdzv_below_min_join_timeout_fails", rdzv_below_min_join_timeout_fails},
    {"rdzv_initial_join_timeout_fails", rdzv_initial_join_timeout_fails},
    {"rdzv_export_restore_round_trip", rdzv_export_restore_round_trip},
    {"rdzv_export_restore_failed_job", rdzv_export_restore_failed_job},
    {"rdzv_next_deadline_values", rdzv_next_deadline_values},
    {"rdzv_thousand_worker_rendezvous", rdzv_thousand_worker_rendezvous},
    {NULL, NULL},
};

TT_CUNIT_MAIN("rdzv", tests)
