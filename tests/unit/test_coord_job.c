/* Tests of the coordinator's job records against a real tt_coord over TCP
 * (coord_testlib.h): the per-job nonce that tags a job's ring messages
 * (Generation.job_nonce) is random per job record, the same in every
 * generation of the job, and kept across a coordinator restart; so are what
 * the last formed generation told its members (its resume step) and the
 * collective bootstrap id its rank 0 offered. */
#include "coord_testlib.h"

/* Sends a heartbeat of the generation before `gen`, which makes the
 * coordinator send generation `gen` again; returns its nonce and resume
 * step (either pointer may be NULL). */
static void resent_generation(fx_t *f, cli_t *w, const char *job, uint64_t gen, uint64_t *nonce,
                              int64_t *resume) {
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.incarnation = 1;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen - 1, 0);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    tt_zmq_rx_t rx;
    uint64_t id = cli_send(f, w, &env, NULL, 0);
    if (cli_wait(f, w, id, -1, &rx, NULL, 0) == 0)
        tt_zmq_rx_close(&rx); /* the HeartbeatReply */
    if (cli_wait(f, w, UINT64_MAX, TETHER__ENVELOPE__BODY_JOIN_REPLY, &rx, NULL, 0) != 0)
        return;
    if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY) {
        CU_ASSERT_EQUAL(rx.env->join_reply->generation->generation, gen);
        if (nonce != NULL)
            *nonce = rx.env->join_reply->generation->job_nonce;
        if (resume != NULL)
            *resume = rx.env->join_reply->generation->resume_step;
    }
    tt_zmq_rx_close(&rx);
}

/* Every job record gets its own random nonce (the ring tags its messages
 * with it and the job id), the same in every generation of the job, also
 * after a coordinator restart. */
static void coord_job_nonce_is_per_job_and_survives_restart(void) {
    fx_t f;
    cli_t w, v;
    uint64_t na = 0, nb = 0, again = 0;
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    cli_open(&f, &v, "worker", "w1");
    uint64_t gen = join_as(&f, &w, "na", 0, 0, 1, &na);
    join_as(&f, &v, "nb", 0, 0, 1, &nb);
    CU_ASSERT(na != 0 && nb != 0 && na != nb);
    tt_zmq_close(&w.sock);
    tt_zmq_close(&v.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &w, "worker", "w0");
    /* The restored coordinator sends the generation again, with the nonce
     * it kept. */
    resent_generation(&f, &w, "na", gen, &again, NULL);
    CU_ASSERT_EQUAL(again, na);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

/* A member that missed its JoinReply (the coordinator restarted before
 * sending it) gets the generation the coordinator formed, resume step
 * included; it used to get -1 (unknown) from a restarted coordinator. */
static void coord_job_formed_generation_survives_restart(void) {
    fx_t f;
    cli_t w;
    int64_t resume = -7, again = -7;
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    uint64_t gen = join_at(&f, &w, "fg", 0, 0, 1, 41, NULL, &resume);
    CU_ASSERT(resume > 0); /* after the member's completed step 41 */
    tt_zmq_close(&w.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &w, "worker", "w0");
    resent_generation(&f, &w, "fg", gen, NULL, &again);
    CU_ASSERT_EQUAL(again, resume);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

/* w's CommIdRequest for `gen`: 0 with the reply in *rx, or the Error. */
static int ask_comm_id(fx_t *f, cli_t *w, const char *job, uint64_t gen, tt_zmq_rx_t *rx) {
    Tether__CommIdRequest q = TETHER__COMM_ID_REQUEST__INIT;
    q.generation = gen;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REQUEST;
    env.comm_id_request = &q;
    return cli_call(f, w, &env, NULL, 0, TETHER__ENVELOPE__BODY_COMM_ID_REPLY, rx, NULL, 0);
}

/* The id rank 0 offered is in the state file: a member that asks the
 * restarted coordinator gets it rather than waiting out its deadline. */
static void coord_job_comm_id_survives_restart(void) {
    fx_t f;
    cli_t w;
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    uint64_t gen = join(&f, &w, "cid", 0, 0);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(ask_comm_id(&f, &w, "cid", gen, &rx), 0);
    CU_ASSERT_FALSE(rx.env->comm_id_reply->ready); /* not offered yet */
    tt_zmq_rx_close(&rx);
    uint8_t id[128];
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (uint8_t)(255 - i);
    Tether__CommIdOffer o = TETHER__COMM_ID_OFFER__INIT;
    o.generation = gen;
    o.id.data = id;
    o.id.len = sizeof(id);
    tt_env_t env;
    tt_wire_env_init(&env, "cid", w.sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_OFFER;
    env.comm_id_offer = &o;
    CU_ASSERT_EQUAL_FATAL(cli_call(&f, &w, &env, NULL, 0, TETHER__ENVELOPE__BODY_ACK, &rx, NULL, 0),
                          0);
    tt_zmq_rx_close(&rx);
    tt_zmq_close(&w.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &w, "worker", "w0");
    CU_ASSERT_EQUAL_FATAL(ask_comm_id(&f, &w, "cid", gen, &rx), 0);
    CU_ASSERT_TRUE(rx.env->comm_id_reply->ready);
    CU_ASSERT_EQUAL(rx.env->comm_id_reply->generation, gen);
    CU_ASSERT_EQUAL(rx.env->comm_id_reply->id.len, sizeof(id));
    if (rx.env->comm_id_reply->id.len == sizeof(id))
        CU_ASSERT_EQUAL(memcmp(rx.env->comm_id_reply->id.data, id, sizeof(id)), 0);
    tt_zmq_rx_close(&rx);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

static const tt_cunit_test_t tests[] = {
    {"coord_job_nonce_is_per_job_and_survives_restart",
     coord_job_nonce_is_per_job_and_survives_restart},
    {"coord_job_formed_generation_survives_restart", coord_job_formed_generation_survives_restart},
    {"coord_job_comm_id_survives_restart", coord_job_comm_id_survives_restart},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coord_job", tests)
