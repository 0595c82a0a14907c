/* Unit tests of tt_wire: round trips, and rejection of every malformed
 * input class the decoder seam promises to catch. */
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stdlib.h>
#include <string.h>

static uint8_t *encode_heartbeat(uint32_t version, size_t *len, const uint64_t *sizes, size_t n) {
    tt_env_t env;
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.completed_step = 41;
    tt_wire_env_init(&env, "job-a", "worker-1.7", 3, 99);
    env.version = version;
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    env.n_payload_sizes = n;
    env.payload_sizes = (uint64_t *)sizes;
    uint8_t *buf = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, len), TT_OK);
    return buf;
}

static void wire_round_trip(void) {
    size_t len;
    uint64_t sizes[2] = {16, 0};
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION, &len, sizes, 2);
    size_t lens[2] = {16, 0};
    tt_env_t *e = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, lens, 2, NULL, &e, err, sizeof(err)), TT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_STRING_EQUAL(e->job_id, "job-a");
    CU_ASSERT_STRING_EQUAL(e->sender_id, "worker-1.7");
    CU_ASSERT_EQUAL(e->generation, 3);
    CU_ASSERT_EQUAL(e->request_id, 99);
    CU_ASSERT_EQUAL(e->body_case, TETHER__ENVELOPE__BODY_HEARTBEAT);
    CU_ASSERT_EQUAL(e->heartbeat->completed_step, 41);
    CU_ASSERT_STRING_EQUAL(tt_wire_body_name(e->body_case), "heartbeat");
    CU_ASSERT_EQUAL(tt_wire_check_scope(e, "job-a", 3, err, sizeof(err)), TT_OK);
    tt_wire_free(&e);
    CU_ASSERT_PTR_NULL(e);
    free(buf);
}

static void wire_rejects_version(void) {
    size_t len;
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION + 1, &len, NULL, 0);
    tt_env_t *e = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EVERSION);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "version 2"));
    free(buf);
}

static void wire_rejects_truncated_and_garbage(void) {
    size_t len;
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION, &len, NULL, 0);
    tt_env_t *e = NULL;
    char err[256];
    for (size_t cut = 0; cut < len; cut++) {
        int rc = tt_wire_decode(buf, cut, NULL, 0, NULL, &e, err, sizeof(err));
        CU_ASSERT(rc < 0);
        CU_ASSERT_PTR_NULL(e);
    }
    uint8_t garbage[64];
    for (size_t i = 0; i < sizeof(garbage); i++)
        garbage[i] = (uint8_t)(0xff - i);
    CU_ASSERT(tt_wire_decode(garbage, sizeof(garbage), NULL, 0, NULL, &e, err, sizeof(err)) < 0);
    CU_ASSERT_PTR_NULL(e);
    free(buf);
}

static void wire_rejects_oversized(void) {
    size_t len;
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION, &len, NULL, 0);
    tt_wire_limits_t lim;
    tt_wire_limits_default(&lim);
    lim.max_envelope = len - 1;
    tt_env_t *e = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, &lim, &e, err, sizeof(err)), TT_ETOOBIG);
    free(buf);
}

static void wire_rejects_payload_mismatch(void) {
    size_t len;
    uint64_t sizes[1] = {8};
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION, &len, sizes, 1);
    tt_env_t *e = NULL;
    char err[256];
    size_t wrong[1] = {7};
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, wrong, 1, NULL, &e, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "header says 8"));
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_ESIZE);
    size_t two[2] = {8, 8};
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, two, 2, NULL, &e, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT_PTR_NULL(e);
    free(buf);
}

static void wire_scope_checks(void) {
    size_t len;
    uint8_t *buf = encode_heartbeat(TT_WIRE_VERSION, &len, NULL, 0);
    tt_env_t *e = NULL;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_check_scope(e, "job-b", 0, err, sizeof(err)), TT_EJOB);
    CU_ASSERT_EQUAL(tt_wire_check_scope(e, NULL, 4, err, sizeof(err)), TT_ESTALE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "generation 3, current is 4"));
    CU_ASSERT_EQUAL(tt_wire_check_scope(e, NULL, 2, err, sizeof(err)), TT_OK);
    tt_wire_free(&e);
    free(buf);
}

static void wire_rejects_missing_body_and_bad_join(void) {
    tt_env_t env;
    tt_wire_env_init(&env, "j", "s", 0, 1);
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    tt_env_t *e = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    free(buf);

    Tether__JoinRequest jr = TETHER__JOIN_REQUEST__INIT;
    jr.worker_id = "w0";
    env.body_case = TETHER__ENVELOPE__BODY_JOIN;
    env.join = &jr; /* no settings */
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "settings"));
    free(buf);
}

static void wire_rejects_inconsistent_generation(void) {
    Tether__Member m0 = TETHER__MEMBER__INIT, m1 = TETHER__MEMBER__INIT;
    m0.rank = 0;
    m1.rank = 0; /* duplicate rank */
    Tether__Member *ms[2] = {&m0, &m1};
    Tether__Generation g = TETHER__GENERATION__INIT;
    g.world_size = 2;
    g.n_members = 2;
    g.members = ms;
    Tether__JoinReply r = TETHER__JOIN_REPLY__INIT;
    r.generation = &g;
    tt_env_t env;
    tt_wire_env_init(&env, "j", "coordinator", 1, 1);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN_REPLY;
    env.join_reply = &r;
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    tt_env_t *e = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    free(buf);
    m1.rank = 1;
    g.world_size = 1; /* more members than the world */
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    free(buf);
    g.world_size = 2;
    r.rank = 2; /* rank outside world */
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    free(buf);
    r.rank = 1;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_OK);
    tt_wire_free(&e);
    free(buf);
}

static void wire_rejects_long_ids(void) {
    char longid[300];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    tt_env_t env;
    Tether__Ack ack = TETHER__ACK__INIT;
    tt_wire_env_init(&env, longid, "s", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_ACK;
    env.ack = &ack;
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(&env, &buf, &len), TT_OK);
    tt_env_t *e = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_decode(buf, len, NULL, 0, NULL, &e, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "job id"));
    free(buf);
}

static void wire_state_round_trip_and_corrupt(void) {
    Tether__JobSettings s = TETHER__JOB_SETTINGS__INIT;
    s.min_workers = 2;
    Tether__CoordJobRecord rec = TETHER__COORD_JOB_RECORD__INIT;
    rec.job_id = "job";
    rec.settings = &s;
    rec.generation = 7;
    Tether__CoordJobRecord *recs[1] = {&rec};
    Tether__CoordState st = TETHER__COORD_STATE__INIT;
    st.version = TT_WIRE_VERSION;
    st.n_jobs = 1;
    st.jobs = recs;
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    tt_coord_state_pb_t *out = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_EQUAL(out->jobs[0]->generation, 7);
    tt_wire_state_free(&out);
    CU_ASSERT(tt_wire_state_decode(buf, len / 2, &out, err, sizeof(err)) < 0);
    CU_ASSERT_PTR_NULL(out);
    free(buf);
    rec.settings = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_ECORRUPT);
    free(buf);
}

static const tt_cunit_test_t tests[] = {
    {"wire_round_trip", wire_round_trip},
    {"wire_rejects_version", wire_rejects_version},
    {"wire_rejects_truncated_and_garbage", wire_rejects_truncated_and_garbage},
    {"wire_rejects_oversized", wire_rejects_oversized},
    {"wire_rejects_payload_mismatch", wire_rejects_payload_mismatch},
    {"wire_scope_checks", wire_scope_checks},
    {"wire_rejects_missing_body_and_bad_join", wire_rejects_missing_body_and_bad_join},
    {"wire_rejects_inconsistent_generation", wire_rejects_inconsistent_generation},
    {"wire_rejects_long_ids", wire_rejects_long_ids},
    {"wire_state_round_trip_and_corrupt", wire_state_round_trip_and_corrupt},
    {NULL, NULL},
};

TT_CUNIT_MAIN("wire", tests)
