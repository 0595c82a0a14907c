/* Unit tests of libtether's membership client state machine
 * (tt_client_sm), driven message by message with an injected clock: joins,
 * regroups at a boundary, fencing, the job failing or finishing, drains,
 * leaves and heartbeat silence. No sockets and no threads: tt_client.c
 * feeds the same machine from its I/O thread (test_client_live.c). */
#include "tt_client.h"
#include "tt_cunit.h"
#include "tt_status.h"

#include <string.h>

typedef struct {
    tt_env_t env;
    Tether__JoinReply jr;
    Tether__Generation gen;
    Tether__Member m[3];
    Tether__Member *mp[3];
    Tether__HeartbeatReply hr;
    Tether__Error err;
    Tether__Continue cont;
    Tether__RegroupNotice rn;
    Tether__Ack ack;
} msg_t;

static tt_env_t *join_reply(msg_t *m, uint64_t gen, uint32_t rank, uint32_t world, uint64_t rid) {
    tt_wire_env_init(&m->env, "job", "coordinator", gen, rid);
    tether__join_reply__init(&m->jr);
    tether__generation__init(&m->gen);
    for (uint32_t i = 0; i < world; i++) {
        tether__member__init(&m->m[i]);
        m->m[i].rank = i;
        m->m[i].worker_id = i == 0 ? "w0" : i == 1 ? "w1" : "w2";
        m->m[i].host = "h";
        m->m[i].endpoint = "tcp://h:7800";
        m->m[i].last_step = 10 + i;
        m->mp[i] = &m->m[i];
    }
    m->gen.generation = gen;
    m->gen.world_size = world;
    m->gen.n_members = world;
    m->gen.members = m->mp;
    m->gen.resume_step = 11;
    m->gen.ps_until_step = 19;
    m->gen.job_steps = 40;
    m->gen.job_nonce = 0x5eedf00dcafeull;
    m->jr.generation = &m->gen;
    m->jr.rank = rank;
    m->env.body_case = TETHER__ENVELOPE__BODY_JOIN_REPLY;
    m->env.join_reply = &m->jr;
    return &m->env;
}

static tt_env_t *hb_reply(msg_t *m, uint64_t gen, int64_t regroup, uint32_t state) {
    tt_wire_env_init(&m->env, "job", "coordinator", gen, 5);
    tether__heartbeat_reply__init(&m->hr);
    m->hr.generation = gen;
    m->hr.regroup_after_step = regroup;
    m->hr.job_state = state;
    m->env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY;
    m->env.heartbeat_reply = &m->hr;
    return &m->env;
}

static tt_env_t *error_msg(msg_t *m, int code, const char *text, uint64_t rid) {
    tt_wire_env_init(&m->env, "job", "coordinator", 0, rid);
    tether__error__init(&m->err);
    m->err.code = code;
    m->err.message = (char *)text;
    m->env.body_case = TETHER__ENVELOPE__BODY_ERROR;
    m->env.error = &m->err;
    return &m->env;
}

static tt_env_t *continue_msg(msg_t *m, int64_t until, uint64_t rid) {
    tt_wire_env_init(&m->env, "job", "coordinator", 1, rid);
    tether__continue__init(&m->cont);
    m->cont.until_step = until;
    m->env.body_case = TETHER__ENVELOPE__BODY_CONTINUE_;
    m->env.continue_ = &m->cont;
    return &m->env;
}

/* A state machine that joined generation `gen` as rank 1 of 3. */
static void joined(tt_client_sm_t *sm, uint64_t gen) {
    msg_t m;
    tt_client_sm_init(sm, 100);
    CU_ASSERT_EQUAL(tt_client_sm_begin(sm, TT_CLIENT_OP_JOIN, 7), TT_OK);
    CU_ASSERT_EQUAL(sm->state, TT_CLIENT_JOINING);
    CU_ASSERT(tt_client_sm_wants_heartbeat(sm));
    int ev = tt_client_sm_on_message(sm, join_reply(&m, gen, 1, 3, 7), 1000);
    CU_ASSERT_EQUAL(ev, TT_CLIENT_EV_GENERATION | TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(sm, 0), TT_OK);
}

/* Generation.shrink_of is the pushed generation's own: kept with it and
 * gone with the next one that has none (a rank never shrinks twice). */
static void client_sm_keeps_the_announced_shrink(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(sm.shrink_of, 0);
    CU_ASSERT_EQUAL(sm.nshrink, 0);
    uint32_t ex[1] = {0};
    tt_env_t *env = join_reply(&m, 5, 0, 2, 0);
    m.gen.shrink_of = 4;
    m.gen.n_shrink_exclude = 1;
    m.gen.shrink_exclude = ex;
    CU_ASSERT(tt_client_sm_on_message(&sm, env, 1100) & TT_CLIENT_EV_GENERATION);
    CU_ASSERT_EQUAL(sm.generation, 5);
    CU_ASSERT_EQUAL(sm.shrink_of, 4);
    CU_ASSERT(sm.nshrink == 1 && sm.shrink_exclude[0] == 0);
    CU_ASSERT(tt_client_sm_on_message(&sm, join_reply(&m, 6, 0, 2, 0), 1200) &
              TT_CLIENT_EV_GENERATION);
    CU_ASSERT_EQUAL(sm.shrink_of, 0);
    CU_ASSERT_EQUAL(sm.nshrink, 0);
    tt_client_sm_release(&sm);
}

static void client_sm_join_installs_generation(void) {
    tt_client_sm_t sm;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    CU_ASSERT_EQUAL(sm.generation, 4);
    CU_ASSERT_EQUAL(sm.rank, 1);
    CU_ASSERT_EQUAL(sm.world_size, 3);
    CU_ASSERT_EQUAL(sm.resume_step, 11);
    CU_ASSERT_EQUAL(sm.ps_until_step, 19); /* the announced PS fallback */
    CU_ASSERT_EQUAL(sm.job_steps, 40);     /* where the job had got to */
    CU_ASSERT_EQUAL(sm.job_nonce, 0x5eedf00dcafeull);
    CU_ASSERT_STRING_EQUAL(sm.members[2].worker_id, "w2");
    CU_ASSERT_EQUAL(sm.members[2].last_step, 12);
    CU_ASSERT_EQUAL(sm.op, TT_CLIENT_OP_NONE);
    /* The generation the join returned is not a regroup for the app. */
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 11), TT_OK);
    /* A repeat of the same generation changes nothing. */
    msg_t m;
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 4, 0, 2, 0), 1100), 0);
    CU_ASSERT_EQUAL(sm.rank, 1);
    tt_client_sm_release(&sm);
}

static void client_sm_join_refused_with_message(void) {
    tt_client_sm_t sm;
    msg_t m;
    tt_client_sm_init(&sm, 100);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_JOIN, 3);
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_LEAVE, 4), TT_EBUSY);
    int ev = tt_client_sm_on_message(
        &sm, error_msg(&m, TT_ECONFLICT, "min_workers: job has 2, join asked 3", 3), 10);
    CU_ASSERT_EQUAL(ev, TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_ECONFLICT);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_IDLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "job has 2, join asked 3"));
    CU_ASSERT_FALSE(tt_client_sm_wants_heartbeat(&sm));
    /* A heartbeat sent while the join was in flight is answered "not a
     * member" after the refusal: neither a fence nor the last error. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EFENCED, "not a member", 2), 20),
                    0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_IDLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "job has 2, join asked 3"));
    tt_client_sm_release(&sm);
}

static void client_sm_join_timeout_returns_to_idle(void) {
    tt_client_sm_t sm;
    msg_t m;
    tt_client_sm_init(&sm, 100);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_JOIN, 3);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 1), TT_ETIMEDOUT);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_IDLE);
    /* A late generation for the abandoned join is not taken silently. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 2, 0, 1, 3), 10), 0);
    CU_ASSERT_EQUAL(sm.generation, 0);
    tt_client_sm_release(&sm);
}

static void client_sm_regroup_at_boundary(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, hb_reply(&m, 4, 20, 1), 1100), 0);
    CU_ASSERT_EQUAL(sm.regroup_after_step, 20);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 19), TT_OK);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 20), TT_CLIENT_STEP_BOUNDARY);
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_BOUNDARY, 9), TT_OK);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_BOUNDARY);
    int ev = tt_client_sm_on_message(&sm, join_reply(&m, 5, 2, 3, 9), 1200);
    CU_ASSERT_EQUAL(ev, TT_CLIENT_EV_GENERATION | TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TETHER_REGROUPED);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    CU_ASSERT_EQUAL(sm.generation, 5);
    CU_ASSERT_EQUAL(sm.rank, 2);
    CU_ASSERT_EQUAL(sm.regroup_after_step, -1);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 21), TT_OK); /* already acknowledged */
    tt_client_sm_release(&sm);
}

static void client_sm_continue_moves_regroup_step(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    tt_wire_env_init(&m.env, "job", "coordinator", 4, 0);
    tether__regroup_notice__init(&m.rn);
    m.rn.regroup_after_step = 15;
    m.env.body_case = TETHER__ENVELOPE__BODY_REGROUP_NOTICE;
    m.env.regroup_notice = &m.rn;
    tt_client_sm_on_message(&sm, &m.env, 1100);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 15), TT_CLIENT_STEP_BOUNDARY);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_BOUNDARY, 9);
    /* A stale answer is not an outcome: keep waiting. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_ESTALE, "stale", 9), 1150), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_BOUNDARY);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, continue_msg(&m, 17, 9), 1200),
                    TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 16), TT_OK);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 17), TT_CLIENT_STEP_BOUNDARY);
    /* until_step -1: the regroup was cancelled. */
    tt_client_sm_begin(&sm, TT_CLIENT_OP_BOUNDARY, 10);
    tt_client_sm_on_message(&sm, continue_msg(&m, -1, 10), 1300);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 30), TT_OK);
    tt_client_sm_release(&sm);
}

static void client_sm_pushed_generation_reported_once(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    /* A survivor learns of generation 5 (a member died): pushed, rid 0. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 5, 0, 2, 0), 1100),
                    TT_CLIENT_EV_GENERATION);
    CU_ASSERT_EQUAL(sm.rank, 0);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 12), TETHER_REGROUPED);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 13), TT_OK);
    /* Older generations never come back. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 3, 1, 3, 0), 1200), 0);
    CU_ASSERT_EQUAL(sm.generation, 5);
    tt_client_sm_release(&sm);
}

static void client_sm_fenced_until_rejoin(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    tt_client_sm_on_message(&sm, error_msg(&m, TT_EFENCED, "declared dead", 12), 1100);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_FENCED);
    CU_ASSERT_FALSE(tt_client_sm_wants_heartbeat(&sm));
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 12), TT_EFENCED);
    /* A newer generation pushed to a fenced worker does not readmit it. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 6, 1, 3, 0), 1200), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_FENCED);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 13), TT_EFENCED);
    /* Only an explicit join does. */
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_JOIN, 20), TT_OK);
    CU_ASSERT_EQUAL(sm.generation, 0);
    /* The fence answer to a heartbeat sent before the join is not the
     * join's answer. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EFENCED, "dead", 13), 1250), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_JOINING);
    tt_client_sm_on_message(&sm, join_reply(&m, 6, 1, 3, 20), 1300);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    tt_client_sm_release(&sm);
}

static void client_sm_fenced_while_waiting_at_boundary(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_BOUNDARY, 9);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EFENCED, "dead", 0), 1100),
                    TT_CLIENT_EV_OP_DONE | TT_CLIENT_EV_ENDED);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_EFENCED);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_FENCED);
    tt_client_sm_release(&sm);
}

static void client_sm_job_failed(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    tt_client_sm_on_message(&sm, hb_reply(&m, 4, -1, TETHER__JOB_STATE__JOB_FAILED), 1100);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_FAILED);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 12), TT_EJOBFAILED);
    tt_client_sm_release(&sm);
}

static void client_sm_job_done_error_closes(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    /* The coordinator's answer to a heartbeat (request id 5). */
    int ev = tt_client_sm_on_message(
        &sm, error_msg(&m, TT_EJOBDONE, "job job has already finished (last committed step 57)", 5),
        1100);
    CU_ASSERT_EQUAL(ev, TT_CLIENT_EV_ENDED); /* no op in flight */
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EJOBDONE);
    CU_ASSERT_EQUAL(tt_client_state_status(sm.state), TT_ECLOSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "already finished"));
    CU_ASSERT_FALSE(tt_client_sm_wants_heartbeat(&sm));
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 58), TT_EJOBDONE);
    /* Nothing brings it back: no generation, no fence, no second end. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 5, 0, 2, 0), 1200), 0);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EJOBDONE, "again", 6), 1300), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EJOBDONE);
    tt_client_sm_release(&sm);
}

/* tetherctl drain: the member's answer is EDRAINED; the client closes for
 * good with that status (so the application ends instead of joining
 * again), and a later "fenced" answer does not reopen it. */
static void client_sm_drained_closes(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    int ev = tt_client_sm_on_message(
        &sm, error_msg(&m, TT_EDRAINED, "drained by the operator at a step boundary", 5), 1100);
    CU_ASSERT_EQUAL(ev, TT_CLIENT_EV_ENDED);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EDRAINED);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "drained by the operator"));
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 9), TT_EDRAINED);
    tt_client_sm_on_message(&sm, error_msg(&m, TT_EFENCED, "not a member", 6), 1200);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EDRAINED);
    CU_ASSERT_STRING_EQUAL(tether_strerror(TETHER_EDRAINED),
                           "drained: removed from the job by the operator");
    tt_client_sm_release(&sm);
}

/* `env` (job done) reaches `sm` with an op in flight: the op ends with
 * EJOBDONE and the client is closed for good, saying `text`. */
static void expect_done_ends_op(tt_client_sm_t *sm, const tt_env_t *env, const char *text) {
    CU_ASSERT_EQUAL(tt_client_sm_on_message(sm, env, 1100),
                    TT_CLIENT_EV_OP_DONE | TT_CLIENT_EV_ENDED);
    CU_ASSERT_EQUAL(tt_client_sm_finish(sm, 0), TT_EJOBDONE);
    CU_ASSERT_EQUAL(sm->state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_status(sm), TT_EJOBDONE);
    CU_ASSERT_EQUAL(sm->regroup_after_step, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm->last_error, text));
    tt_client_sm_release(sm);
}

static void client_sm_job_done_ends_boundary_wait(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_BOUNDARY, 9), TT_OK);
    expect_done_ends_op(&sm, hb_reply(&m, 4, -1, TETHER__JOB_STATE__JOB_FINISHED), "job finished");
}

static void client_sm_join_refused_job_done(void) {
    tt_client_sm_t sm;
    msg_t m;
    tt_client_sm_init(&sm, 100);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EINVAL); /* idle */
    tt_client_sm_begin(&sm, TT_CLIENT_OP_JOIN, 3);
    expect_done_ends_op(&sm, error_msg(&m, TT_EJOBDONE, "job mnist has already finished", 3),
                        "job mnist has already finished");
}

/* A failed job stays failed even if a "finished" answer follows. */
static void client_sm_job_failed_then_done(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EJOBFAILED, "bound", 0), 1100),
                    TT_CLIENT_EV_ENDED);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EJOBDONE, "done", 0), 1200), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_FAILED);
    CU_ASSERT_EQUAL(tt_client_sm_status(&sm), TT_EJOBFAILED);
    tt_client_sm_release(&sm);
}

static void client_sm_join_busy_is_retried(void) {
    tt_client_sm_t sm;
    msg_t m;
    tt_client_sm_init(&sm, 100);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_JOIN, 3);
    const char *why = "worker w1 was evicted 2 times within the last hour (last 10 ms ago): flap "
                      "cool-down of 2000 ms, it may re-join in 1990 ms";
    /* Not an outcome: the join stays pending and is due again in 100 ms. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EBUSY, why, 3), 1000), 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_JOINING);
    CU_ASSERT_EQUAL(sm.op_done, 0);
    CU_ASSERT_EQUAL(sm.retry_at_ms, 1100);
    CU_ASSERT_EQUAL(sm.busy_refusals, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "may re-join in 1990 ms"));
    CU_ASSERT(tt_client_sm_wants_heartbeat(&sm));
    /* "Busy" for another request (an old heartbeat's id) is not the join's. */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EBUSY, "other", 2), 1050), 0);
    CU_ASSERT_EQUAL(sm.busy_refusals, 1);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EBUSY, why, 3), 1100), 0);
    CU_ASSERT_EQUAL(sm.retry_at_ms, 1200);
    CU_ASSERT_EQUAL(sm.busy_refusals, 2);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, join_reply(&m, 6, 1, 3, 0), 1150),
                    TT_CLIENT_EV_GENERATION | TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(sm.retry_at_ms, 0);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    /* A join that times out while refused stops retrying. */
    tt_client_sm_t s2;
    tt_client_sm_init(&s2, 100);
    tt_client_sm_begin(&s2, TT_CLIENT_OP_JOIN, 4);
    tt_client_sm_on_message(&s2, error_msg(&m, TT_EBUSY, why, 4), 1000);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&s2, 1), TT_ETIMEDOUT);
    CU_ASSERT_EQUAL(s2.retry_at_ms, 0);
    CU_ASSERT_EQUAL(s2.state, TT_CLIENT_IDLE);
    tt_client_sm_release(&s2);
    tt_client_sm_release(&sm);
}

static void client_sm_leave_acked(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    tt_client_sm_begin(&sm, TT_CLIENT_OP_LEAVE, 30);
    tt_wire_env_init(&m.env, "job", "coordinator", 4, 29); /* not ours */
    tether__ack__init(&m.ack);
    m.env.body_case = TETHER__ENVELOPE__BODY_ACK;
    m.env.ack = &m.ack;
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, &m.env, 1100), 0);
    m.env.request_id = 30;
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, &m.env, 1101), TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_CLOSED);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 12), TT_ECLOSED);
    tt_client_sm_release(&sm);
}

/* tether_drain: the coordinator's Ack sets the drain (the worker stays a
 * member until the boundary); its refusal (below min_workers) ends the op
 * with that status and sentence, and the worker carries on as before. */
static void client_sm_drain_acked_or_refused(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4);
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_DRAIN, 30), TT_OK);
    tt_wire_env_init(&m.env, "job", "coordinator", 4, 30);
    tether__ack__init(&m.ack);
    m.env.body_case = TETHER__ENVELOPE__BODY_ACK;
    m.env.ack = &m.ack;
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, &m.env, 1100), TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_OK);
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 12), TT_OK);
    CU_ASSERT_EQUAL(tt_client_sm_begin(&sm, TT_CLIENT_OP_DRAIN, 31), TT_OK);
    const char *why = "draining w1 would leave 1 member(s) in job job, below its min_workers 2";
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, error_msg(&m, TT_EINVAL, why, 31), 1200),
                    TT_CLIENT_EV_OP_DONE);
    CU_ASSERT_EQUAL(tt_client_sm_finish(&sm, 0), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(sm.last_error, "below its min_workers 2"));
    CU_ASSERT_EQUAL(sm.state, TT_CLIENT_MEMBER);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 13), TT_OK);
    tt_client_sm_release(&sm);
}

static void client_sm_resumed_after_silence(void) {
    tt_client_sm_t sm;
    msg_t m;
    joined(&sm, 4); /* heartbeat_ms 100, last reply at 1000 */
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, hb_reply(&m, 4, -1, 1), 1150), 0);
    CU_ASSERT_EQUAL(tt_client_sm_on_message(&sm, hb_reply(&m, 4, -1, 1), 1400),
                    TT_CLIENT_EV_RESUMED);
    CU_ASSERT_EQUAL(sm.silence_ms, 250);
    tt_client_sm_release(&sm);
}

static void client_step_before_join_is_invalid(void) {
    tt_client_sm_t sm;
    tt_client_sm_init(&sm, 100);
    CU_ASSERT_EQUAL(tt_client_sm_step(&sm, 0), TT_EINVAL);
    CU_ASSERT_STRING_EQUAL(tt_client_state_name(TT_CLIENT_BOUNDARY), "boundary");
    tt_client_sm_release(&sm);
}

static const tt_cunit_test_t tests[] = {
    {"client_sm_join_installs_generation", client_sm_join_installs_generation},
    {"client_sm_keeps_the_announced_shrink", client_sm_keeps_the_announced_shrink},
    {"client_sm_join_refused_with_message", client_sm_join_refused_with_message},
    {"client_sm_join_timeout_returns_to_idle", client_sm_join_timeout_returns_to_idle},
    {"client_sm_regroup_at_boundary", client_sm_regroup_at_boundary},
    {"client_sm_continue_moves_regroup_step", client_sm_continue_moves_regroup_step},
    {"client_sm_pushed_generation_reported_once", client_sm_pushed_generation_reported_once},
    {"client_sm_fenced_until_rejoin", client_sm_fenced_until_rejoin},
    {"client_sm_fenced_while_waiting_at_boundary", client_sm_fenced_while_waiting_at_boundary},
    {"client_sm_job_failed", client_sm_job_failed},
    {"client_sm_job_done_error_closes", client_sm_job_done_error_closes},
    {"client_sm_drained_closes", client_sm_drained_closes},
    {"client_sm_job_done_ends_boundary_wait", client_sm_job_done_ends_boundary_wait},
    {"client_sm_join_refused_job_done", client_sm_join_refused_job_done},
    {"client_sm_job_failed_then_done", client_sm_job_failed_then_done},
    {"client_sm_join_busy_is_retried", client_sm_join_busy_is_retried},
    {"client_sm_leave_acked", client_sm_leave_acked},
    {"client_sm_drain_acked_or_refused", client_sm_drain_acked_or_refused},
    {"client_sm_resumed_after_silence", client_sm_resumed_after_silence},
    {"client_step_before_join_is_invalid", client_step_before_join_is_invalid},
    {NULL, NULL},
};

TT_CUNIT_MAIN("client_sm", tests)
