/* Tests of the coordinator's job records against a real tt_coord over TCP
 * (coord_testlib.h): the per-job nonce that tags a job's ring messages
 * (Generation.job_nonce) is random per job record, the same in every
 * generation of the job, and kept across a coordinator restart; so are what
 * the last formed generation told its members (its resume step, and that
 * a drain made it a shrink of the one before, how many steps the job had
 * completed) and the collective bootstrap id its rank 0 offered. */
#include "coord_testlib.h"

/* What a JoinReply's generation said, copied out of the message. */
typedef struct {
    uint64_t generation, nonce, shrink_of;
    int64_t resume, job_steps;
    uint32_t world, rank;
    size_t n_exclude;
    uint32_t exclude[4];
} seen_t;

static void seen_from(const Tether__JoinReply *r, seen_t *out) {
    const Tether__Generation *g = r->generation;
    *out = (seen_t){.generation = g->generation,
                    .nonce = g->job_nonce,
                    .shrink_of = g->shrink_of,
                    .resume = g->resume_step,
                    .job_steps = g->job_steps,
                    .world = g->world_size,
                    .rank = r->rank,
                    .n_exclude = g->n_shrink_exclude};
    for (size_t i = 0; i < g->n_shrink_exclude && i < 4; i++)
        out->exclude[i] = g->shrink_exclude[i];
}

/* Sends a heartbeat of incarnation `inc` of the generation before `gen`,
 * which makes the coordinator send generation `gen` again; what it said
 * goes to *seen. */
static void resent_generation_as(fx_t *f, cli_t *w, const char *job, uint64_t gen, uint64_t inc,
                                 seen_t *seen) {
    Tether__Heartbeat hb = TETHER__HEARTBEAT__INIT;
    hb.incarnation = inc;
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
        seen_from(rx.env->join_reply, seen);
    }
    tt_zmq_rx_close(&rx);
}

static void resent_generation(fx_t *f, cli_t *w, const char *job, uint64_t gen, seen_t *seen) {
    resent_generation_as(f, w, job, gen, 1, seen);
}

/* Every job record gets its own random nonce (the ring tags its messages
 * with it and the job id), the same in every generation of the job, also
 * after a coordinator restart. */
static void coord_job_nonce_is_per_job_and_survives_restart(void) {
    fx_t f;
    cli_t w, v;
    uint64_t na = 0, nb = 0;
    seen_t again = {0};
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
    resent_generation(&f, &w, "na", gen, &again);
    CU_ASSERT_EQUAL(again.nonce, na);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

/* A member that missed its JoinReply (the coordinator restarted before
 * sending it) gets the generation the coordinator formed, resume step
 * included; it used to get -1 (unknown) from a restarted coordinator. */
static void coord_job_formed_generation_survives_restart(void) {
    fx_t f;
    cli_t w;
    int64_t resume = -7;
    seen_t again = {.resume = -7};
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    uint64_t gen = join_at(&f, &w, "fg", 0, 0, 1, 41, NULL, &resume);
    CU_ASSERT(resume > 0); /* after the member's completed step 41 */
    tt_zmq_close(&w.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &w, "worker", "w0");
    resent_generation(&f, &w, "fg", gen, &again);
    CU_ASSERT_EQUAL(again.resume, resume);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

/* w's CommIdRequest for `gen`, answered at once: 0 with the reply in
 * *rx, or the Error. */
static int ask_comm_id(fx_t *f, cli_t *w, const char *job, uint64_t gen, tt_zmq_rx_t *rx) {
    return cli_wait(f, w, send_ask(f, w, job, gen, 0), TETHER__ENVELOPE__BODY_COMM_ID_REPLY, rx,
                    NULL, 0);
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
    CU_ASSERT_EQUAL_FATAL(offer(&f, &w, "cid", gen, id, sizeof(id)), 0);
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

/* Waits for w's next JoinReply (id 0: pushed) into *out; 0 or an error. */
static int wait_generation(fx_t *f, cli_t *w, uint64_t id, seen_t *out) {
    tt_zmq_rx_t rx;
    int rc = cli_wait(f, w, id, TETHER__ENVELOPE__BODY_JOIN_REPLY, &rx, NULL, 0);
    if (rc != 0)
        return rc;
    if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY)
        seen_from(rx.env->join_reply, out);
    else
        rc = TT_EPROTO;
    tt_zmq_rx_close(&rx);
    return rc;
}

static void send_boundary(fx_t *f, cli_t *w, const char *job, uint64_t gen, int64_t step) {
    Tether__Boundary b = TETHER__BOUNDARY__INIT;
    b.completed_step = step;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_BOUNDARY;
    env.boundary = &b;
    cli_send(f, w, &env, NULL, 0);
}

/* tetherctl drain JOB WORKER (at the next boundary): 0 on its Ack. */
static int ask_drain(fx_t *f, cli_t *ctl, const char *job, const char *worker) {
    Tether__DrainWorker d = TETHER__DRAIN_WORKER__INIT;
    d.worker_id = (char *)worker;
    tt_env_t env;
    tt_wire_env_init(&env, job, ctl->sender, 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_DRAIN;
    env.drain = &d;
    return cli_call_ack(f, ctl, &env);
}

/* w0 (rank 0) drained at a step boundary of {w0, w1}: w1 is told
 * generation 2 is generation 1 minus old rank 0, and a restarted
 * coordinator sends it the same relation from its state file. */
static void coord_job_shrink_survives_restart(void) {
    fx_t f;
    cli_t w0, w1, ctl;
    seen_t g1 = {0}, g1b = {0}, g2 = {0}, again = {0};
    fx_start(&f);
    cli_open(&f, &w0, "worker", "w0");
    cli_open(&f, &w1, "worker", "w1");
    cli_open(&f, &ctl, "tetherctl", "ctl");
    /* both joins arrive before the last call: max forms at once */
    join_job_t two = {.min = 1, .max = 2, .last_call_ms = 3000};
    uint64_t j0 = send_join(&f, &w0, "sk", &two, 1, -1), j1 = send_join(&f, &w1, "sk", &two, 1, -1);
    CU_ASSERT_EQUAL_FATAL(wait_generation(&f, &w0, j0, &g1), 0);
    CU_ASSERT_EQUAL_FATAL(wait_generation(&f, &w1, j1, &g1b), 0);
    CU_ASSERT_EQUAL(g1.world, 2);
    CU_ASSERT_EQUAL(g1.rank, 0);
    CU_ASSERT_EQUAL(g1b.rank, 1);
    CU_ASSERT_EQUAL(g1.shrink_of, 0); /* a first generation shrinks nothing */
    CU_ASSERT_EQUAL(ask_drain(&f, &ctl, "sk", "w0"), 0);
    send_boundary(&f, &w0, "sk", g1.generation, 0); /* nobody reported a step: S = 0 */
    send_boundary(&f, &w1, "sk", g1.generation, 0);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL(cli_wait(&f, &w0, UINT64_MAX, TETHER__ENVELOPE__BODY_ERROR, &rx, NULL, 0),
                    TT_EDRAINED);
    CU_ASSERT_EQUAL_FATAL(wait_generation(&f, &w1, UINT64_MAX, &g2), 0);
    CU_ASSERT_EQUAL(g2.generation, g1.generation + 1);
    CU_ASSERT_EQUAL(g2.world, 1);
    CU_ASSERT_EQUAL(g2.rank, 0); /* old rank 1, the gap below it closed */
    CU_ASSERT_EQUAL(g2.shrink_of, g1.generation);
    CU_ASSERT_EQUAL_FATAL(g2.n_exclude, 1);
    CU_ASSERT_EQUAL(g2.exclude[0], 0);
    tt_zmq_close(&w0.sock);
    tt_zmq_close(&w1.sock);
    tt_zmq_close(&ctl.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open(&f, &w1, "worker", "w1");
    resent_generation(&f, &w1, "sk", g2.generation, &again);
    CU_ASSERT_EQUAL(again.generation, g2.generation);
    CU_ASSERT_EQUAL(again.resume, g2.resume);
    CU_ASSERT_EQUAL(again.shrink_of, g1.generation);
    CU_ASSERT_EQUAL_FATAL(again.n_exclude, 1);
    CU_ASSERT_EQUAL(again.exclude[0], 0);
    tt_zmq_close(&w1.sock);
    fx_stop(&f);
}

/* A generation tells its members how far the job had got, even when
 * none of them holds that state (every worker restarted): rank 0 then
 * says how many steps are trained again. A restarted coordinator resends
 * the same figure. */
static void coord_job_steps_outlive_the_members(void) {
    fx_t f;
    cli_t w;
    seen_t g1 = {0}, g2 = {0}, again = {0};
    join_job_t one = {.min = 1, .max = 1, .last_call_ms = 10};
    fx_start(&f);
    cli_open(&f, &w, "worker", "w0");
    CU_ASSERT_EQUAL_FATAL(wait_generation(&f, &w, send_join(&f, &w, "js", &one, 1, 41), &g1), 0);
    CU_ASSERT_EQUAL(g1.job_steps, 42); /* its member completed step 41 */
    /* the worker restarted with nothing: a new process and incarnation */
    tt_zmq_close(&w.sock);
    cli_open_as(&f, &w, "worker", "w0", 2);
    CU_ASSERT_EQUAL_FATAL(wait_generation(&f, &w, send_join(&f, &w, "js", &one, 2, -1), &g2), 0);
    CU_ASSERT(g2.generation > g1.generation);
    CU_ASSERT_EQUAL(g2.resume, 0);
    CU_ASSERT_EQUAL(g2.job_steps, 42);
    tt_zmq_close(&w.sock);
    fx_down(&f);
    fx_up(&f);
    cli_open_as(&f, &w, "worker", "w0", 2);
    resent_generation_as(&f, &w, "js", g2.generation, 2, &again);
    CU_ASSERT_EQUAL(again.generation, g2.generation);
    CU_ASSERT_EQUAL(again.job_steps, 42);
    tt_zmq_close(&w.sock);
    fx_stop(&f);
}

static const tt_cunit_test_t tests[] = {
    {"coord_job_nonce_is_per_job_and_survives_restart",
     coord_job_nonce_is_per_job_and_survives_restart},
    {"coord_job_formed_generation_survives_restart", coord_job_formed_generation_survives_restart},
    {"coord_job_comm_id_survives_restart", coord_job_comm_id_survives_restart},
    {"coord_job_shrink_survives_restart", coord_job_shrink_survives_restart},
    {"coord_job_steps_outlive_the_members", coord_job_steps_outlive_the_members},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coord_job", tests)
