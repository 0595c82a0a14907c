/* Unit tests of libtether's membership client: the public status codes
 * against tt_status, options from an injected environment and their
 * validation, routing ids and incarnations, and the state machine driven
 * message by message with an injected clock. The socket/thread part is
 * covered by the integration tests and test_client_live.c; here only
 * create/destroy, a join that cannot connect to anyone and one that a
 * peer never answers. */
#include "tt_client.h"
#include "net_testlib.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- status codes ---- */

static void client_status_codes_match_internal(void) {
    CU_ASSERT_EQUAL(TETHER_OK, TT_OK);
    CU_ASSERT_EQUAL(TETHER_EINVAL, TT_EINVAL);
    CU_ASSERT_EQUAL(TETHER_ECONFLICT, TT_ECONFLICT);
    CU_ASSERT_EQUAL(TETHER_ECLOSED, TT_ECLOSED);
    CU_ASSERT_EQUAL(TETHER_EBUSY, TT_EBUSY);
    CU_ASSERT_EQUAL(TETHER_ENOMEM, TT_ENOMEM);
    CU_ASSERT_EQUAL(TETHER_ESYS, TT_ESYS);
    CU_ASSERT_EQUAL(TETHER_ESTALE, TT_ESTALE);
    CU_ASSERT_EQUAL(TETHER_ETIMEDOUT, TT_ETIMEDOUT);
    CU_ASSERT_EQUAL(TETHER_EMEMBERSHIP, TT_EMEMBERSHIP);
    CU_ASSERT_EQUAL(TETHER_EFENCED, TT_EFENCED);
    CU_ASSERT_EQUAL(TETHER_EJOBFAILED, TT_EJOBFAILED);
    CU_ASSERT_EQUAL(TETHER_EAGAIN, TT_EAGAIN);
    CU_ASSERT_EQUAL(TETHER_EJOBDONE, TT_EJOBDONE);
    CU_ASSERT_EQUAL(TETHER_EJOBDONE, -55);
    CU_ASSERT_STRING_EQUAL(tether_strerror(TETHER_EJOBDONE), "job already finished");
    CU_ASSERT_EQUAL(TETHER_ENCCL, TT_ENCCL);
    CU_ASSERT_EQUAL(TETHER_EINTERNAL, TT_EINTERNAL);
    /* Every internal code has a public twin with the same name. */
#define X(name, val, msg) CU_ASSERT_STRING_EQUAL(tether_status_name(val), #name);
    TT_STATUS_MAP(X)
#undef X
    CU_ASSERT_STRING_EQUAL(tether_status_name(TETHER_REGROUPED), "REGROUPED");
    CU_ASSERT_STRING_EQUAL(tether_strerror(TETHER_EFENCED), tt_strerror(TT_EFENCED));
}

/* The full public list, checked against the internal map by value and name. */
static void client_public_list_complete(void) {
    static const struct {
        int code;
        const char *name;
    } pub[] = {
        {TETHER_EINVAL, "EINVAL"},
        {TETHER_ENOTFOUND, "ENOTFOUND"},
        {TETHER_EEXIST, "EEXIST"},
        {TETHER_EIO, "EIO"},
        {TETHER_ECORRUPT, "ECORRUPT"},
        {TETHER_EPROTO, "EPROTO"},
        {TETHER_EVERSION, "EVERSION"},
        {TETHER_EJOB, "EJOB"},
        {TETHER_ETOOBIG, "ETOOBIG"},
        {TETHER_ESIZE, "ESIZE"},
        {TETHER_EREMOTE, "EREMOTE"},
        {TETHER_EDESYNC, "EDESYNC"},
        {TETHER_EUNREACHABLE, "EUNREACHABLE"},
        {TETHER_EDIVERGED, "EDIVERGED"},
        {TETHER_ECUDA, "ECUDA"},
        {TETHER_ENODEV, "ENODEV"},
    };
    for (size_t i = 0; i < sizeof(pub) / sizeof(pub[0]); i++)
        CU_ASSERT_STRING_EQUAL(tt_status_name(pub[i].code), pub[i].name);
}

/* ---- options ---- */

typedef struct {
    const char *kv[16][2];
} fake_env_t;

static const char *fake_lookup(void *ctx, const char *name) {
    fake_env_t *e = ctx;
    for (int i = 0; i < 16 && e->kv[i][0] != NULL; i++) {
        if (strcmp(e->kv[i][0], name) == 0)
            return e->kv[i][1];
    }
    return NULL;
}

static void client_env_sets_every_field(void) {
    fake_env_t env = {{{"TETHER_COORDINATOR", "tcp://10.0.0.1:7601"},
                       {"TETHER_JOB", "mnist"},
                       {"TETHER_WORKER_ID", "w7"},
                       {"TETHER_HOST", "node7"},
                       {"TETHER_ENDPOINT", "tcp://10.0.0.7:7800"},
                       {"TETHER_MIN_WORKERS", "2"},
                       {"TETHER_MAX_WORKERS", "4"},
                       {"TETHER_LAST_CALL_MS", "300"},
                       {"TETHER_HEARTBEAT_MS", "100"},
                       {"TETHER_HEARTBEAT_TIMEOUT_MS", "500"},
                       {"TETHER_GLOBAL_BATCH", "64"},
                       {"TETHER_JOIN_TIMEOUT_MS", "9000"}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, err, sizeof(err)),
                          TT_OK);
    CU_ASSERT_STRING_EQUAL(o.coordinator, "tcp://10.0.0.1:7601");
    CU_ASSERT_STRING_EQUAL(o.job_id, "mnist");
    CU_ASSERT_STRING_EQUAL(o.worker_id, "w7");
    CU_ASSERT_STRING_EQUAL(o.host, "node7");
    CU_ASSERT_STRING_EQUAL(o.endpoint, "tcp://10.0.0.7:7800");
    CU_ASSERT_EQUAL(o.job.min_workers, 2);
    CU_ASSERT_EQUAL(o.job.max_workers, 4);
    CU_ASSERT_EQUAL(o.job.last_call_ms, 300);
    CU_ASSERT_EQUAL(o.job.heartbeat_ms, 100);
    CU_ASSERT_EQUAL(o.job.heartbeat_timeout_ms, 500);
    CU_ASSERT_EQUAL(o.job.global_batch, 64);
    CU_ASSERT_EQUAL(o.job.join_timeout_ms, 9000);
}

static void client_env_defaults_when_unset(void) {
    fake_env_t env = {{{NULL, NULL}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    CU_ASSERT_EQUAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, NULL, 0), TT_OK);
    CU_ASSERT_STRING_EQUAL(o.coordinator, "tcp://127.0.0.1:7600");
    CU_ASSERT_EQUAL(o.job.heartbeat_ms, 1000);
    char want[64];
    snprintf(want, sizeof(want), "-%ld", (long)getpid());
    size_t n = strlen(o.worker_id), w = strlen(want);
    CU_ASSERT_FATAL(n > w);
    CU_ASSERT_STRING_EQUAL(o.worker_id + n - w, want); /* "<hostname>-<pid>" */
}

static void expect_env_error(const char *var, const char *val) {
    fake_env_t env = {{{var, val}}};
    tether_opts_t o;
    tt_client_opts_default(&o);
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_client_opts_from_lookup(&o, fake_lookup, &env, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, var));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, val));
}

static void client_env_rejects_bad_values(void) {
    expect_env_error("TETHER_MIN_WORKERS", "two");
    expect_env_error("TETHER_MAX_WORKERS", "-3");
    expect_env_error("TETHER_HEARTBEAT_MS", "0");
    expect_env_error("TETHER_GLOBAL_BATCH", "99999999999");
    expect_env_error("TETHER_JOIN_TIMEOUT_MS", "12x");
    expect_env_error("TETHER_LAST_CALL_MS", "");
}

static void expect_invalid(const tether_opts_t *o, const char *needle) {
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_client_opts_validate(o, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void client_opts_validation(void) {
    tether_opts_t o;
    tt_client_opts_default(&o);
    CU_ASSERT_EQUAL(tt_client_opts_validate(&o, NULL, 0), TT_OK);
    o.job.min_workers = 3;
    o.job.max_workers = 2;
    expect_invalid(&o, "min_workers=3");
    tt_client_opts_default(&o);
    o.job.heartbeat_timeout_ms = o.job.heartbeat_ms;
    expect_invalid(&o, "heartbeat_timeout_ms");
    tt_client_opts_default(&o);
    o.job.max_workers = 8;
    o.job.global_batch = 4;
    expect_invalid(&o, "global_batch=4");
    tt_client_opts_default(&o);
    snprintf(o.worker_id, sizeof(o.worker_id), "has space");
    expect_invalid(&o, "worker id");
    tt_client_opts_default(&o);
    snprintf(o.coordinator, sizeof(o.coordinator), "localhost:7600");
    expect_invalid(&o, "localhost:7600");
    tt_client_opts_default(&o);
    memset(o.worker_id, 'w', 120);
    o.worker_id[120] = '\0';
    expect_invalid(&o, "routing id");
    CU_ASSERT_EQUAL(tt_client_opts_validate(NULL, NULL, 0), TT_EINVAL);
}

static void client_routing_id_format(void) {
    char buf[160];
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, sizeof(buf), "w1", 42), TT_OK);
    CU_ASSERT_STRING_EQUAL(buf, "worker-w1.42");
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, 8, "w1", 42), TT_EINVAL);
    char id[128];
    memset(id, 'a', 125);
    id[125] = '\0';
    CU_ASSERT_EQUAL(tt_client_routing_id(buf, sizeof(buf), id, 1), TT_EINVAL);
}

static void client_incarnation_always_changes(void) {
    uint64_t a = tt_client_next_incarnation(0, 1000, 77);
    CU_ASSERT_EQUAL(a, (1000ull << 16) | 77);
    /* Same millisecond and pid (a fast re-join): still a new value. */
    uint64_t b = tt_client_next_incarnation(a, 1000, 77);
    CU_ASSERT(b > a);
    /* Wall clock stepped back: never reuse an older value. */
    uint64_t c = tt_client_next_incarnation(b, 5, 77);
    CU_ASSERT(c > b);
    /* Two processes in the same millisecond differ by pid. */
    CU_ASSERT_NOT_EQUAL(tt_client_next_incarnation(0, 1000, 78), a);
}

/* ---- state machine ---- */

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

/* ---- public API without a coordinator ---- */

static void client_api_create_destroy(void) {
    tether_opts_t o;
    tether_opts_default(&o);
    o.job.max_workers = 0;
    tether_t *t = (tether_t *)&o;
    char err[256] = "";
    CU_ASSERT_EQUAL(tether_create(&t, &o, err, sizeof(err)), TETHER_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_workers=0"));
    tether_opts_default(&o);
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, err, sizeof(err)), TETHER_OK);
    CU_ASSERT_EQUAL(tether_rank(t), -1);
    CU_ASSERT_EQUAL(tether_world_size(t), 0);
    CU_ASSERT_EQUAL(tether_generation(t), 0);
    CU_ASSERT_EQUAL(tether_poll_generation(t, NULL), 0);
    tether_member_t info;
    CU_ASSERT_EQUAL(tether_member(t, 0, &info), TETHER_ENOTFOUND);
    CU_ASSERT_EQUAL(tether_step_done(t, 0), TETHER_EINVAL);
    CU_ASSERT_EQUAL(tether_leave(t, "x"), TETHER_EINVAL);
    tether_destroy(&t);
    CU_ASSERT_PTR_NULL(t);
    tether_destroy(&t);
    tether_destroy(NULL);
}

static void client_api_join_times_out_without_coordinator(void) {
    tether_opts_t o;
    tether_opts_default(&o);
    /* Port 1 on loopback: nobody listens, the connection is refused. */
    snprintf(o.coordinator, sizeof(o.coordinator), "tcp://127.0.0.1:1");
    tether_t *t = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL(tether_join(t, 150), TETHER_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), "could not connect to the coordinator at "
                                                        "tcp://127.0.0.1:1 within 150 ms"));
    CU_ASSERT_EQUAL(tether_rank(t), -1);
    tether_destroy(&t);
}

/* A worker that tries for 400 ms to join at `ep`, which answers nothing:
 * ETIMEDOUT is checked; the caller reads its sentence and destroys it. */
static tether_t *join_in_vain(const char *ep) {
    tether_opts_t o;
    tether_opts_default(&o);
    o.job.heartbeat_ms = 50;
    snprintf(o.coordinator, sizeof(o.coordinator), "%s", ep);
    tether_t *t = NULL;
    CU_ASSERT_EQUAL_FATAL(tether_create(&t, &o, NULL, 0), TETHER_OK);
    CU_ASSERT_EQUAL(tether_join(t, 400), TETHER_ETIMEDOUT);
    return t;
}

/* A peer that takes the connection and never answers (a coordinator whose
 * loop is stuck looks like this): the join says so, not "no generation". */
static void client_api_join_times_out_on_a_silent_peer(void) {
    void *zctx = zmq_ctx_new();
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    void *sock = NULL;
    char ep[256] = "", err[256] = "";
    CU_ASSERT_EQUAL_FATAL(
        tt_zmq_router(zctx, "tcp://127.0.0.1:*", &zo, &sock, ep, sizeof(ep), err, sizeof(err)),
        TT_OK);
    tether_t *t = join_in_vain(ep);
    char want[300];
    snprintf(want, sizeof(want), "the coordinator at %s is connected but answered nothing", ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), want));
    CU_ASSERT(tt_zmq_readable(sock)); /* the join did arrive */
    tether_destroy(&t);
    tt_zmq_close(&sock);
    zmq_ctx_term(zctx);
}

/* A join given an address where something else listens (the
 * coordinator's HTTP port, say) names that, not "could not connect". */
static void client_api_join_names_a_peer_that_is_no_coordinator(void) {
    char ep[64];
    int fd = net_mute_listener(ep, sizeof(ep));
    CU_ASSERT_FATAL(fd >= 0);
    tether_t *t = join_in_vain(ep);
    char want[300];
    snprintf(want, sizeof(want),
             "could not talk to the coordinator within 400 ms (job default): the coordinator at "
             "%s (TETHER_COORDINATOR) took 1 TCP connection(s)",
             ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(tether_last_error(t), want));
    tether_destroy(&t);
    close(fd);
}

static const tt_cunit_test_t tests[] = {
    {"client_status_codes_match_internal", client_status_codes_match_internal},
    {"client_public_list_complete", client_public_list_complete},
    {"client_env_sets_every_field", client_env_sets_every_field},
    {"client_env_defaults_when_unset", client_env_defaults_when_unset},
    {"client_env_rejects_bad_values", client_env_rejects_bad_values},
    {"client_opts_validation", client_opts_validation},
    {"client_routing_id_format", client_routing_id_format},
    {"client_incarnation_always_changes", client_incarnation_always_changes},
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
    {"client_api_create_destroy", client_api_create_destroy},
    {"client_api_join_times_out_without_coordinator",
     client_api_join_times_out_without_coordinator},
    {"client_api_join_times_out_on_a_silent_peer", client_api_join_times_out_on_a_silent_peer},
    {"client_api_join_names_a_peer_that_is_no_coordinator",
     client_api_join_names_a_peer_that_is_no_coordinator},
    {NULL, NULL},
};

TT_CUNIT_MAIN("client", tests)
