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
    Tether__CheckpointRecord c = TETHER__CHECKPOINT_RECORD__INIT;
    c.checkpoint_id = "step-10";
    c.dir = "/ckpt/step-10";
    Tether__CheckpointRecord *cs[1] = {&c};
    Tether__CoordJobRecord rec = TETHER__COORD_JOB_RECORD__INIT;
    rec.job_id = "job";
    rec.settings = &s;
    rec.generation = 7;
    rec.checkpoint_requested = 2;
    rec.checkpoint_served = 1;
    rec.n_checkpoints = 1;
    rec.checkpoints = cs;
    uint64_t regroups[2] = {1000, 2000}, evicted[2] = {1500, 2500};
    Tether__FlapRecord f = TETHER__FLAP_RECORD__INIT;
    f.worker_id = "w1";
    f.n_evicted_unix_ms = 2;
    f.evicted_unix_ms = evicted;
    Tether__FlapRecord *fs[1] = {&f};
    rec.n_regroup_unix_ms = 2;
    rec.regroup_unix_ms = regroups;
    rec.n_flaps = 1;
    rec.flaps = fs;
    Tether__CoordJobRecord *recs[1] = {&rec};
    Tether__ForgottenJob fg = TETHER__FORGOTTEN_JOB__INIT;
    fg.job_id = "old";
    fg.generation = 12;
    Tether__ForgottenJob *fgs[1] = {&fg};
    Tether__CoordState st = TETHER__COORD_STATE__INIT;
    st.version = TT_WIRE_VERSION;
    st.n_jobs = 1;
    st.jobs = recs;
    st.n_forgotten = 1;
    st.forgotten = fgs;
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    tt_coord_state_pb_t *out = NULL;
    char err[256];
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_EQUAL(out->jobs[0]->generation, 7);
    CU_ASSERT_EQUAL(out->jobs[0]->checkpoint_requested, 2);
    CU_ASSERT_STRING_EQUAL(out->jobs[0]->checkpoints[0]->dir, "/ckpt/step-10");
    CU_ASSERT_EQUAL(out->jobs[0]->n_regroup_unix_ms, 2);
    CU_ASSERT_EQUAL(out->jobs[0]->regroup_unix_ms[1], 2000);
    CU_ASSERT_EQUAL_FATAL(out->jobs[0]->n_flaps, 1);
    CU_ASSERT_STRING_EQUAL(out->jobs[0]->flaps[0]->worker_id, "w1");
    CU_ASSERT_EQUAL(out->jobs[0]->flaps[0]->evicted_unix_ms[0], 1500);
    CU_ASSERT_EQUAL_FATAL(out->n_forgotten, 1);
    CU_ASSERT_EQUAL(out->forgotten[0]->generation, 12);
    tt_wire_state_free(&out);
    CU_ASSERT(tt_wire_state_decode(buf, len / 2, &out, err, sizeof(err)) < 0);
    CU_ASSERT_PTR_NULL(out);
    free(buf);
    c.checkpoint_id = NULL; /* a checkpoint record without its id */
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "checkpoint 0 is malformed"));
    free(buf);
    c.checkpoint_id = "step-10";
    f.worker_id = ""; /* an eviction record of nobody */
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_ECORRUPT);
    free(buf);
    f.worker_id = "w1";
    fg.job_id = ""; /* a forgotten job without an id */
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_ECORRUPT);
    free(buf);
    fg.job_id = "old";
    rec.settings = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    CU_ASSERT_EQUAL(tt_wire_state_decode(buf, len, &out, err, sizeof(err)), TT_ECORRUPT);
    free(buf);
}

/* Encodes env and decodes it back with frames of `lens`: the decoder's
 * code, and *e on TT_OK (release with tt_wire_free). */
static int round_trip(const tt_env_t *env, const size_t *lens, size_t n, tt_env_t **e, char *err,
                      size_t errlen) {
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(env, &buf, &len), TT_OK);
    int rc = tt_wire_decode(buf, len, lens, n, NULL, e, err, errlen);
    free(buf);
    return rc;
}

/* Encodes a CheckpointCommit with `n` payload sizes of 16 bytes and
 * decodes it with matching frames. */
static int decode_commit(const char *root, size_t n, char *err, size_t errlen) {
    Tether__CheckpointCommit cc = TETHER__CHECKPOINT_COMMIT__INIT;
    cc.root = (char *)root;
    cc.request = 3;
    uint64_t sizes[2] = {16, 16};
    size_t lens[2] = {16, 16};
    tt_env_t env;
    tt_wire_env_init(&env, "job", "w0", 1, 7);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT;
    env.checkpoint_commit = &cc;
    env.n_payload_sizes = n;
    env.payload_sizes = sizes;
    tt_env_t *e = NULL;
    int rc = round_trip(&env, lens, n, &e, err, errlen);
    if (rc == TT_OK) {
        CU_ASSERT_STRING_EQUAL(e->checkpoint_commit->root, root);
        CU_ASSERT_EQUAL(e->checkpoint_commit->request, 3);
    } else {
        CU_ASSERT_PTR_NULL(e);
    }
    tt_wire_free(&e);
    return rc;
}

static void wire_checkpoint_commit_needs_one_frame_and_absolute_root(void) {
    char err[256] = "";
    CU_ASSERT_EQUAL(decode_commit("/ckpt/root", 1, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(decode_commit("/ckpt/root", 0, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "one manifest frame"));
    CU_ASSERT_EQUAL(decode_commit("/ckpt/root", 2, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT_EQUAL(decode_commit("ckpt/root", 1, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "absolute root"));
    CU_ASSERT_EQUAL(decode_commit("", 1, err, sizeof(err)), TT_EPROTO);
}

/* A CheckpointsReply listing `rec` (and a valid one before it). */
static int decode_checkpoints_reply(Tether__CheckpointRecord *rec, char *err, size_t errlen) {
    Tether__CheckpointRecord ok = TETHER__CHECKPOINT_RECORD__INIT;
    ok.checkpoint_id = "step-10";
    ok.dir = "/ckpt/step-10";
    ok.step = 10;
    Tether__CheckpointRecord *recs[2] = {&ok, rec};
    Tether__CheckpointsReply r = TETHER__CHECKPOINTS_REPLY__INIT;
    r.n_checkpoints = 2;
    r.checkpoints = recs;
    r.requested = 4;
    r.served = 3;
    tt_env_t env;
    tt_wire_env_init(&env, "job", "coordinator", 0, 9);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY;
    env.checkpoints_reply = &r;
    tt_env_t *e = NULL;
    int rc = round_trip(&env, NULL, 0, &e, err, errlen);
    if (rc == TT_OK) {
        CU_ASSERT_EQUAL(e->checkpoints_reply->n_checkpoints, 2);
        CU_ASSERT_STRING_EQUAL(e->checkpoints_reply->checkpoints[0]->checkpoint_id, "step-10");
        CU_ASSERT_EQUAL(e->checkpoints_reply->served, 3);
    }
    tt_wire_free(&e);
    return rc;
}

static int decode_failure(const char *id, const char *reason) {
    Tether__CheckpointFailure cf = TETHER__CHECKPOINT_FAILURE__INIT;
    cf.checkpoint_id = (char *)id;
    cf.reason = (char *)reason;
    tt_env_t env;
    tt_wire_env_init(&env, "job", "w0", 1, 3);
    env.body_case = TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE;
    env.checkpoint_failure = &cf;
    tt_env_t *e = NULL;
    char err[256] = "";
    int rc = round_trip(&env, NULL, 0, &e, err, sizeof(err));
    if (rc == TT_OK)
        CU_ASSERT_STRING_EQUAL(e->checkpoint_failure->checkpoint_id, id);
    tt_wire_free(&e);
    return rc;
}

static void wire_checkpoint_failure_names_its_checkpoint(void) {
    char longtext[1100];
    memset(longtext, 'r', sizeof(longtext) - 1);
    longtext[sizeof(longtext) - 1] = '\0';
    CU_ASSERT_EQUAL(decode_failure("step-40", "No space left on device"), TT_OK);
    CU_ASSERT_EQUAL(decode_failure("", "x"), TT_EPROTO);
    CU_ASSERT_EQUAL(decode_failure("step-40", longtext), TT_EPROTO);
}

static void wire_checkpoints_reply_rejects_malformed_records(void) {
    char err[256] = "", longdir[1100];
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[sizeof(longdir) - 1] = '\0';
    Tether__CheckpointRecord rec = TETHER__CHECKPOINT_RECORD__INIT;
    rec.checkpoint_id = "step-20";
    rec.dir = "/ckpt/step-20";
    CU_ASSERT_EQUAL(decode_checkpoints_reply(&rec, err, sizeof(err)), TT_OK);
    rec.checkpoint_id = ""; /* no id */
    CU_ASSERT_EQUAL(decode_checkpoints_reply(&rec, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "checkpoint 1 is malformed"));
    rec.checkpoint_id = "step-20";
    rec.dir = longdir; /* longer than any text field */
    CU_ASSERT_EQUAL(decode_checkpoints_reply(&rec, err, sizeof(err)), TT_EPROTO);
}

/* A CommIdOffer and a CommIdReply carrying `len` id bytes, decoded. */
static void wire_comm_id_is_bounded(void) {
    static uint8_t id[TT_WIRE_MAX_COMM_ID + 1];
    size_t lens[] = {TT_WIRE_MAX_COMM_ID, TT_WIRE_MAX_COMM_ID + 1, 128};
    int want[] = {TT_OK, TT_ESIZE, TT_OK};
    for (int k = 0; k < 3; k++) {
        Tether__CommIdOffer o = TETHER__COMM_ID_OFFER__INIT;
        Tether__CommIdReply r = TETHER__COMM_ID_REPLY__INIT;
        o.generation = r.generation = 4;
        o.id.data = r.id.data = id;
        o.id.len = r.id.len = lens[k];
        r.ready = 1;
        tt_env_t env;
        tt_wire_env_init(&env, "job", "w0", 4, 7);
        for (int reply = 0; reply < 2; reply++) {
            env.body_case =
                reply ? TETHER__ENVELOPE__BODY_COMM_ID_REPLY : TETHER__ENVELOPE__BODY_COMM_ID_OFFER;
            if (reply)
                env.comm_id_reply = &r;
            else
                env.comm_id_offer = &o;
            tt_env_t *e = NULL;
            char err[256] = "";
            CU_ASSERT_EQUAL(round_trip(&env, NULL, 0, &e, err, sizeof(err)), want[k]);
            if (want[k] != TT_OK)
                CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 512"));
            tt_wire_free(&e);
        }
    }
    /* A request carries no frames either. */
    Tether__CommIdRequest q = TETHER__COMM_ID_REQUEST__INIT;
    uint64_t sizes[1] = {8};
    size_t flen[1] = {8};
    tt_env_t env;
    tt_wire_env_init(&env, "job", "w1", 4, 8);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REQUEST;
    env.comm_id_request = &q;
    env.n_payload_sizes = 1;
    env.payload_sizes = sizes;
    tt_env_t *e = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(round_trip(&env, flen, 1, &e, err, sizeof(err)), TT_ESIZE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "carries no payload"));
    tt_wire_free(&e);
}

/* A CommIdReply that is not ready names the rank 0 its member waits for:
 * an id-sized worker id round-trips with its host, a longer one is
 * refused like any over-long id. */
static void wire_comm_id_reply_names_rank0(void) {
    char longid[TT_WIRE_MAX_ID + 2];
    memset(longid, 'w', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    Tether__CommIdReply r = TETHER__COMM_ID_REPLY__INIT;
    r.generation = 4;
    r.rank0_worker = longid;
    r.rank0_host = "host-a";
    tt_env_t env;
    tt_wire_env_init(&env, "job", "coord", 4, 9);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REPLY;
    env.comm_id_reply = &r;
    tt_env_t *e = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0, &e, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0's worker id"));
    tt_wire_free(&e);
    longid[TT_WIRE_MAX_ID] = '\0';
    CU_ASSERT_EQUAL_FATAL(round_trip(&env, NULL, 0, &e, err, sizeof(err)), TT_OK);
    CU_ASSERT_STRING_EQUAL(e->comm_id_reply->rank0_worker, longid);
    CU_ASSERT_STRING_EQUAL(e->comm_id_reply->rank0_host, "host-a");
    tt_wire_free(&e);
}

/* A StatusReply whose job names rank 0 as `from` (the member others wait
 * for, JobStatus.comm_id_from) and its newest failed checkpoint: an
 * id-sized name round-trips, a longer one is refused like any over-long
 * id, and so is a failure that names no checkpoint. */
static void wire_status_names_rank0_within_bounds(void) {
    char from[TT_WIRE_MAX_ID + 2];
    for (int k = 0; k < 3; k++) {
        size_t len = k == 1 ? TT_WIRE_MAX_ID + 1 : TT_WIRE_MAX_ID;
        memset(from, 'w', len);
        from[len] = '\0';
        Tether__CheckpointFailure cf = TETHER__CHECKPOINT_FAILURE__INIT;
        cf.checkpoint_id = k == 2 ? "" : "step-40";
        cf.reason = "No space left on device";
        Tether__JobStatus js = TETHER__JOB_STATUS__INIT;
        js.job_id = "job";
        js.comm_id_waiting = 3;
        js.comm_id_wait_ms = 12000;
        js.comm_id_from = from;
        js.checkpoint_failures = 2;
        js.checkpoint_failure = &cf;
        Tether__JobStatus *jobs[1] = {&js};
        Tether__StatusReply r = TETHER__STATUS_REPLY__INIT;
        r.n_jobs = 1;
        r.jobs = jobs;
        tt_env_t env;
        tt_wire_env_init(&env, "", "coord", 0, 1);
        env.body_case = TETHER__ENVELOPE__BODY_STATUS_REPLY;
        env.status_reply = &r;
        tt_env_t *e = NULL;
        char err[256] = "";
        int rc = round_trip(&env, NULL, 0, &e, err, sizeof(err));
        if (k == 0) {
            CU_ASSERT_EQUAL_FATAL(rc, TT_OK);
            const Tether__JobStatus *got = e->status_reply->jobs[0];
            CU_ASSERT_EQUAL(got->comm_id_waiting, 3);
            CU_ASSERT_EQUAL(got->comm_id_wait_ms, 12000);
            CU_ASSERT_STRING_EQUAL(got->comm_id_from, from);
            CU_ASSERT_EQUAL(got->checkpoint_failures, 2);
            CU_ASSERT_STRING_EQUAL(got->checkpoint_failure->checkpoint_id, "step-40");
        } else {
            CU_ASSERT_EQUAL(rc, TT_EPROTO);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "status reply job 0 is malformed"));
        }
        tt_wire_free(&e);
    }
}

/* A JoinReply for generation 5 (world 2) claiming to shrink generation
 * `of` by ranks `ex` (n of them), decoded: the code, and on TT_OK checks
 * that the relation came through unchanged. */
static int decode_shrink(uint64_t of, const uint32_t *ex, size_t n, char *err, size_t errlen) {
    Tether__Member m0 = TETHER__MEMBER__INIT, m1 = TETHER__MEMBER__INIT;
    m1.rank = 1;
    Tether__Member *ms[2] = {&m0, &m1};
    Tether__Generation g = TETHER__GENERATION__INIT;
    g.generation = 5;
    g.world_size = 2;
    g.n_members = 2;
    g.members = ms;
    g.shrink_of = of;
    g.n_shrink_exclude = n;
    g.shrink_exclude = (uint32_t *)ex;
    Tether__JoinReply r = TETHER__JOIN_REPLY__INIT;
    r.generation = &g;
    tt_env_t env;
    tt_wire_env_init(&env, "j", "coordinator", 5, 1);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN_REPLY;
    env.join_reply = &r;
    tt_env_t *e = NULL;
    int rc = round_trip(&env, NULL, 0, &e, err, errlen);
    if (rc == TT_OK) {
        const Tether__Generation *d = e->join_reply->generation;
        CU_ASSERT_EQUAL(d->shrink_of, of);
        CU_ASSERT_EQUAL_FATAL(d->n_shrink_exclude, n);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL(d->shrink_exclude[i], ex[i]);
    } else {
        CU_ASSERT_PTR_NULL(e);
    }
    tt_wire_free(&e);
    return rc;
}

/* Generation.shrink_of / shrink_exclude: none, or an older generation
 * with 1..64 strictly ascending old ranks. */
static void wire_generation_shrink_checked(void) {
    uint32_t many[TT_WIRE_MAX_SHRINK + 1], ok[2] = {1, 3}, down[2] = {3, 1}, dup[2] = {2, 2};
    for (uint32_t i = 0; i < TT_WIRE_MAX_SHRINK + 1; i++)
        many[i] = i;
    char err[256] = "";
    CU_ASSERT_EQUAL(decode_shrink(0, NULL, 0, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(decode_shrink(4, ok, 2, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(decode_shrink(1, many, TT_WIRE_MAX_SHRINK, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(decode_shrink(0, ok, 2, err, sizeof(err)), TT_EPROTO); /* ranks of nothing */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad shrink"));
    CU_ASSERT_EQUAL(decode_shrink(4, NULL, 0, err, sizeof(err)), TT_EPROTO); /* nobody left */
    CU_ASSERT_EQUAL(decode_shrink(5, ok, 2, err, sizeof(err)), TT_EPROTO);   /* itself */
    CU_ASSERT_EQUAL(decode_shrink(6, ok, 2, err, sizeof(err)), TT_EPROTO);   /* a newer one */
    CU_ASSERT_EQUAL(decode_shrink(1, many, TT_WIRE_MAX_SHRINK + 1, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_EQUAL(decode_shrink(4, down, 2, err, sizeof(err)), TT_EPROTO);
    CU_ASSERT_EQUAL(decode_shrink(4, dup, 2, err, sizeof(err)), TT_EPROTO);
}

/* A state file job record whose formed generation claims to shrink
 * generation `of` by `ex`: the decoder's code. */
static int decode_state_shrink(uint64_t of, const uint32_t *ex, size_t n) {
    Tether__JobSettings s = TETHER__JOB_SETTINGS__INIT;
    Tether__CoordJobRecord rec = TETHER__COORD_JOB_RECORD__INIT;
    rec.job_id = "job";
    rec.settings = &s;
    rec.generation = rec.formed_generation = 7;
    rec.shrink_of = of;
    rec.n_shrink_exclude = n;
    rec.shrink_exclude = (uint32_t *)ex;
    Tether__CoordJobRecord *recs[1] = {&rec};
    Tether__CoordState st = TETHER__COORD_STATE__INIT;
    st.version = TT_WIRE_VERSION;
    st.n_jobs = 1;
    st.jobs = recs;
    uint8_t *buf = NULL;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(tt_wire_state_encode(&st, &buf, &len), TT_OK);
    tt_coord_state_pb_t *out = NULL;
    char err[256] = "";
    int rc = tt_wire_state_decode(buf, len, &out, err, sizeof(err));
    if (rc == TT_OK) {
        CU_ASSERT_EQUAL(out->jobs[0]->shrink_of, of);
        CU_ASSERT_EQUAL_FATAL(out->jobs[0]->n_shrink_exclude, n);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL(out->jobs[0]->shrink_exclude[i], ex[i]);
    } else {
        CU_ASSERT_PTR_NULL(out);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "job record 0 is malformed"));
    }
    tt_wire_state_free(&out);
    free(buf);
    return rc;
}

static void wire_state_shrink_checked(void) {
    uint32_t many[TT_WIRE_MAX_SHRINK + 1], ok[2] = {0, 2}, down[2] = {2, 0};
    for (uint32_t i = 0; i < TT_WIRE_MAX_SHRINK + 1; i++)
        many[i] = i;
    CU_ASSERT_EQUAL(decode_state_shrink(0, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(decode_state_shrink(6, ok, 2), TT_OK);
    CU_ASSERT_EQUAL(decode_state_shrink(0, ok, 2), TT_ECORRUPT);
    CU_ASSERT_EQUAL(decode_state_shrink(7, ok, 2), TT_ECORRUPT);
    CU_ASSERT_EQUAL(decode_state_shrink(6, down, 2), TT_ECORRUPT);
    CU_ASSERT_EQUAL(decode_state_shrink(6, many, TT_WIRE_MAX_SHRINK + 1), TT_ECORRUPT);
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
    {"wire_checkpoint_commit_needs_one_frame_and_absolute_root",
     wire_checkpoint_commit_needs_one_frame_and_absolute_root},
    {"wire_checkpoints_reply_rejects_malformed_records",
     wire_checkpoints_reply_rejects_malformed_records},
    {"wire_checkpoint_failure_names_its_checkpoint", wire_checkpoint_failure_names_its_checkpoint},
    {"wire_comm_id_is_bounded", wire_comm_id_is_bounded},
    {"wire_comm_id_reply_names_rank0", wire_comm_id_reply_names_rank0},
    {"wire_status_names_rank0_within_bounds", wire_status_names_rank0_within_bounds},
    {"wire_generation_shrink_checked", wire_generation_shrink_checked},
    {"wire_state_shrink_checked", wire_state_shrink_checked},
    {NULL, NULL},
};

TT_CUNIT_MAIN("wire", tests)
