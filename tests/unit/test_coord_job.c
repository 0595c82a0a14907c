/* Tests of the coordinator's job records against a real tt_coord over TCP
 * (coord_testlib.h): the per-job nonce that tags a job's ring messages
 * (Generation.job_nonce) is random per job record, the same in every
 * generation of the job, and kept across a coordinator restart. */
#include "coord_testlib.h"

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
    /* A heartbeat of an older generation: the restored coordinator sends
     * the generation again, with the nonce it kept. */
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.incarnation = 1;
    tt_env_t env;
    tt_wire_env_init(&env, "na", w.sender, gen - 1, 0);
    env.body_case = TETHER__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    tt_zmq_rx_t rx;
    uint64_t id = cli_send(&f, &w, &env, NULL, 0);
    if (cli_wait(&f, &w, id, -1, &rx, NULL, 0) == 0)
        tt_zmq_rx_close(&rx); /* the HeartbeatReply */
    if (cli_wait(&f, &w, UINT64_MAX, TETHER__ENVELOPE__BODY_JOIN_REPLY, &rx, NULL, 0) == 0) {
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY)
            again = rx.env->join_reply->generation->job_nonce;
        tt_zmq_rx_close(&rx);
    }
    CU_ASSERT_EQUAL(again, na);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

static const tt_cunit_test_t tests[] = {
    {"coord_job_nonce_is_per_job_and_survives_restart",
     coord_job_nonce_is_per_job_and_survives_restart},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coord_job", tests)
