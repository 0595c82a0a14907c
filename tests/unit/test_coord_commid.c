/* Tests of the coordinator's held CommIdRequests (coord_commid.c, the long
 * poll of CommIdRequest.wait_ms) against a real tt_coord over TCP
 * (coord_testlib.h): a request made before rank 0 offers is held and
 * answered with the id as soon as it is offered, answered without it
 * (naming rank 0) when its wait is over, answered with the generation's
 * end when the generation ends, and replaced by the same member's next
 * request; status names rank 0 while members wait for it. A request that
 * does not ask to wait is answered at once (the restart test in
 * test_coord_job.c). The relay, holding included, from the worker's side:
 * test_client_live.c. */
#include "coord_testlib.h"

#include <inttypes.h>

/* Whether anything reaches w while the coordinator runs for `ms`. */
static int silent_for(fx_t *f, cli_t *w, uint64_t ms) {
    uint64_t end = tt_clock_mono_ms() + ms;
    while (tt_clock_mono_ms() < end) {
        fx_pump(f);
        tt_zmq_rx_t rx;
        char err[256];
        if (tt_zmq_recv(w->sock, 0, 1, NULL, &rx, err, sizeof(err)) == TT_OK) {
            printf("\n  unexpected %s (request %" PRIu64 ")\n",
                   tt_wire_body_name(rx.env->body_case), rx.env->request_id);
            tt_zmq_rx_close(&rx);
            return 0;
        }
        tt_clock_sleep_ms(2);
    }
    return 1;
}

/* A worker alone in `job`, and a second socket of the same worker for
 * its requests (as tt_commid opens one of its own). */
static uint64_t start(fx_t *f, cli_t *w, cli_t *asker, const char *job) {
    fx_start(f);
    cli_open(f, w, "worker", "w0");
    cli_open(f, asker, "commid", "w0");
    return join(f, w, job, 0, 0);
}

static void stop(fx_t *f, cli_t *w, cli_t *asker) {
    tt_zmq_close(&asker->sock);
    tt_zmq_close(&w->sock);
    fx_stop(f);
}

/* Held until the offer, then answered with the id under the request's
 * own id; a later request gets it at once. */
static void coord_commid_held_until_offered(void) {
    fx_t f;
    cli_t w, a;
    uint64_t gen = start(&f, &w, &a, "held");
    uint64_t req = send_ask(&f, &a, "held", gen, 5000);
    CU_ASSERT_TRUE(silent_for(&f, &a, 300));
    uint8_t id[128];
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (uint8_t)(i * 3 + 1);
    CU_ASSERT_EQUAL_FATAL(offer(&f, &w, "held", gen, id, sizeof(id)), 0);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(cli_wait(&f, &a, req, -1, &rx, NULL, 0), 0);
    CU_ASSERT_EQUAL(rx.env->request_id, req);
    CU_ASSERT_EQUAL_FATAL(rx.env->body_case, TETHER__ENVELOPE__BODY_COMM_ID_REPLY);
    const Tether__CommIdReply *r = rx.env->comm_id_reply;
    CU_ASSERT_TRUE(r->ready);
    CU_ASSERT_EQUAL(r->generation, gen);
    CU_ASSERT_EQUAL_FATAL(r->id.len, sizeof(id));
    CU_ASSERT_EQUAL(memcmp(r->id.data, id, sizeof(id)), 0);
    CU_ASSERT_STRING_EQUAL(r->rank0_worker, ""); /* named only while not ready */
    tt_zmq_rx_close(&rx);
    req = send_ask(&f, &a, "held", gen, 5000);
    uint64_t t0 = tt_clock_mono_ms();
    CU_ASSERT_EQUAL_FATAL(cli_wait(&f, &a, req, -1, &rx, NULL, 0), 0);
    CU_ASSERT_EQUAL(rx.env->body_case, TETHER__ENVELOPE__BODY_COMM_ID_REPLY);
    if (rx.env->body_case == TETHER__ENVELOPE__BODY_COMM_ID_REPLY)
        CU_ASSERT_TRUE(rx.env->comm_id_reply->ready);
    tt_zmq_rx_close(&rx);
    CU_ASSERT(tt_clock_mono_ms() - t0 < 2500); /* not held: well inside the 5 s asked */
    stop(&f, &w, &a);
}

/* Nobody offers: the request is answered without the id once its wait
 * is over, not before. */
static void coord_commid_wait_over_answers_not_ready(void) {
    fx_t f;
    cli_t w, a;
    uint64_t gen = start(&f, &w, &a, "over");
    uint64_t t0 = tt_clock_mono_ms();
    uint64_t req = send_ask(&f, &a, "over", gen, 400);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(cli_wait(&f, &a, req, -1, &rx, NULL, 0), 0);
    uint64_t waited = tt_clock_mono_ms() - t0;
    printf("\n  answered after %llu ms of the 400 ms asked\n", (unsigned long long)waited);
    CU_ASSERT(waited >= 400);
    CU_ASSERT_EQUAL_FATAL(rx.env->body_case, TETHER__ENVELOPE__BODY_COMM_ID_REPLY);
    CU_ASSERT_FALSE(rx.env->comm_id_reply->ready);
    CU_ASSERT_EQUAL(rx.env->comm_id_reply->id.len, 0);
    /* who the member waits for, for its own log and error */
    CU_ASSERT_STRING_EQUAL(rx.env->comm_id_reply->rank0_worker, "w0");
    CU_ASSERT_STRING_EQUAL(rx.env->comm_id_reply->rank0_host, "localhost");
    tt_zmq_rx_close(&rx);
    stop(&f, &w, &a);
}

/* The member leaves: its generation is over, and the held request is
 * answered with that at once, as a new request would be. */
static void coord_commid_generation_end_answers_held(void) {
    fx_t f;
    cli_t w, a;
    uint64_t gen = start(&f, &w, &a, "end");
    uint64_t req = send_ask(&f, &a, "end", gen, 10000);
    CU_ASSERT_TRUE(silent_for(&f, &a, 200));
    Tether__Leave lv = TETHER__LEAVE__INIT;
    lv.reason = "shutdown";
    tt_env_t env;
    tt_wire_env_init(&env, "end", w.sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_LEAVE;
    env.leave = &lv;
    cli_send(&f, &w, &env, NULL, 0);
    uint64_t t0 = tt_clock_mono_ms();
    char msg[512] = "";
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL(cli_wait(&f, &a, req, -1, &rx, msg, sizeof(msg)), TT_ESTALE);
    printf("\n  held request answered %llu ms after the leave: %s\n",
           (unsigned long long)(tt_clock_mono_ms() - t0), msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "is not running"));
    stop(&f, &w, &a);
}

/* A member asking again replaces its held request: only the newer one is
 * answered. */
static void coord_commid_asking_again_replaces(void) {
    fx_t f;
    cli_t w, a;
    uint64_t gen = start(&f, &w, &a, "again");
    uint64_t first = send_ask(&f, &a, "again", gen, 5000);
    CU_ASSERT_TRUE(silent_for(&f, &a, 100));
    uint64_t second = send_ask(&f, &a, "again", gen, 5000);
    CU_ASSERT_TRUE(silent_for(&f, &a, 100));
    CU_ASSERT_NOT_EQUAL(first, second);
    uint8_t id[16] = {1, 2, 3};
    CU_ASSERT_EQUAL_FATAL(offer(&f, &w, "again", gen, id, sizeof(id)), 0);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(cli_wait(&f, &a, second, -1, &rx, NULL, 0), 0);
    CU_ASSERT_EQUAL(rx.env->request_id, second);
    CU_ASSERT_EQUAL(rx.env->body_case, TETHER__ENVELOPE__BODY_COMM_ID_REPLY);
    tt_zmq_rx_close(&rx);
    CU_ASSERT_TRUE(silent_for(&f, &a, 300)); /* nothing for the first */
    stop(&f, &w, &a);
}

/* What status says of `job`'s members waiting for the collective id. */
typedef struct {
    uint32_t n;
    uint64_t ms;
    char from[64];
} waiting_t;

static void status_of(fx_t *f, cli_t *ctl, const char *job, waiting_t *out) {
    memset(out, 0, sizeof(*out));
    Tether__StatusRequest sr = TETHER__STATUS_REQUEST__INIT;
    tt_env_t env;
    tt_wire_env_init(&env, "", ctl->sender, 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_STATUS;
    env.status = &sr;
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(
        cli_call(f, ctl, &env, NULL, 0, TETHER__ENVELOPE__BODY_STATUS_REPLY, &rx, NULL, 0), 0);
    const Tether__StatusReply *r = rx.env->status_reply;
    for (size_t i = 0; r != NULL && i < r->n_jobs; i++) {
        if (strcmp(r->jobs[i]->job_id, job) == 0) {
            out->n = r->jobs[i]->comm_id_waiting;
            out->ms = r->jobs[i]->comm_id_wait_ms;
            snprintf(out->from, sizeof(out->from), "%s", r->jobs[i]->comm_id_from);
        }
    }
    tt_zmq_rx_close(&rx);
}

/* The rank a JoinReply to request `id` of w gives it. */
static uint32_t rank_of(fx_t *f, cli_t *w, uint64_t id) {
    tt_zmq_rx_t rx;
    uint32_t rank = UINT32_MAX;
    if (cli_wait(f, w, id, TETHER__ENVELOPE__BODY_JOIN_REPLY, &rx, NULL, 0) == 0) {
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY)
            rank = rx.env->join_reply->rank;
        tt_zmq_rx_close(&rx);
    }
    return rank;
}

/* Two members, one waiting for the id: status counts it, says for how
 * long, and names rank 0, not the member that asks; once rank 0 offered,
 * nobody waits. */
static void coord_commid_status_names_rank0(void) {
    fx_t f;
    cli_t w[2], ctl;
    fx_start(&f);
    cli_open(&f, &w[0], "worker", "w0");
    cli_open(&f, &w[1], "worker", "w1");
    cli_open(&f, &ctl, "ctl", "tetherctl");
    join_job_t jj = {.min = 2, .max = 2, .last_call_ms = 10};
    uint64_t id0 = send_join(&f, &w[0], "st", &jj, 1, -1);
    uint64_t id1 = send_join(&f, &w[1], "st", &jj, 1, -1);
    uint32_t r0 = rank_of(&f, &w[0], id0), r1 = rank_of(&f, &w[1], id1);
    CU_ASSERT_FATAL(r0 + r1 == 1);
    cli_t *rank0 = r0 == 0 ? &w[0] : &w[1], *other = r0 == 0 ? &w[1] : &w[0];
    waiting_t st;
    status_of(&f, &ctl, "st", &st);
    CU_ASSERT_EQUAL(st.n, 0);
    CU_ASSERT_STRING_EQUAL(st.from, "");
    uint64_t gen = 1;
    uint64_t req = send_ask(&f, other, "st", gen, 5000);
    CU_ASSERT_TRUE(silent_for(&f, other, 150));
    status_of(&f, &ctl, "st", &st);
    printf("\n  status: %u waiting %llu ms for rank 0 (%s)\n", st.n, (unsigned long long)st.ms,
           st.from);
    CU_ASSERT_EQUAL(st.n, 1);
    CU_ASSERT(st.ms >= 100 && st.ms < 5000);
    CU_ASSERT_STRING_EQUAL(st.from, rank0->sender);
    uint8_t id[8] = {9, 9};
    CU_ASSERT_EQUAL_FATAL(offer(&f, rank0, "st", gen, id, sizeof(id)), 0);
    tt_zmq_rx_t rx;
    CU_ASSERT_EQUAL_FATAL(cli_wait(&f, other, req, -1, &rx, NULL, 0), 0);
    tt_zmq_rx_close(&rx);
    status_of(&f, &ctl, "st", &st);
    CU_ASSERT_EQUAL(st.n, 0);
    CU_ASSERT_EQUAL(st.ms, 0);
    tt_zmq_close(&ctl.sock);
    tt_zmq_close(&w[1].sock);
    tt_zmq_close(&w[0].sock);
    fx_stop(&f);
}

static const tt_cunit_test_t tests[] = {
    {"coord_commid_held_until_offered", coord_commid_held_until_offered},
    {"coord_commid_wait_over_answers_not_ready", coord_commid_wait_over_answers_not_ready},
    {"coord_commid_generation_end_answers_held", coord_commid_generation_end_answers_held},
    {"coord_commid_asking_again_replaces", coord_commid_asking_again_replaces},
    {"coord_commid_status_names_rank0", coord_commid_status_names_rank0},
    {NULL, NULL},
};

TT_CUNIT_MAIN("coord_commid", tests)
