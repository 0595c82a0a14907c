/* Unit tests of tt_zreq, the one-request DEALER of tetherctl and of
 * libtether's checkpoint and id calls, against real sockets on 127.0.0.1:
 * the three outcomes an operator acts on differently (nobody to connect
 * to, a peer that never answers, an answer), and replies to abandoned
 * requests skipped by request id. */
#include "net_testlib.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zmq.h"
#include "tt_zreq.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* A StatusRequest with request id `rid`. */
static void status_env(tt_env_t *env, Tether__StatusRequest *req, uint64_t rid) {
    tether__status_request__init(req);
    tt_wire_env_init(env, "", "ctl-test", 0, rid);
    env->body_case = TETHER__ENVELOPE__BODY_STATUS;
    env->status = req;
}

static int call_status(tt_zreq_t *z, uint64_t rid, uint32_t ms, char *err, size_t n) {
    tt_env_t env;
    Tether__StatusRequest req;
    status_env(&env, &req, rid);
    tt_zmq_rx_t rx;
    int rc = tt_zreq_call(z, &env, NULL, 0, ms, &rx, err, n);
    if (rc == TT_OK) {
        CU_ASSERT_EQUAL(rx.env->request_id, rid);
        CU_ASSERT_EQUAL(rx.env->body_case, TETHER__ENVELOPE__BODY_ACK);
        tt_zmq_rx_close(&rx);
    }
    return rc;
}

static void zreq_nobody_there_cannot_connect(void) {
    tt_zreq_t *z = NULL;
    char err[512] = "";
    /* Port 1 on loopback: nobody listens, the connection is refused. */
    CU_ASSERT_EQUAL_FATAL(tt_zreq_open(&z, "tcp://127.0.0.1:1", NULL, "ctl", "t", err, sizeof(err)),
                          TT_OK);
    CU_ASSERT_EQUAL(call_status(z, 1, 200, err, sizeof(err)), TT_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "could not connect to the coordinator at tcp://127.0.0.1:1 within 200 ms"));
    tt_zreq_close(&z);
    CU_ASSERT_PTR_NULL(z);
}

/* An operator's command gives up on a refused port after three attempts
 * instead of at its deadline; the call's deadline still holds otherwise. */
static void zreq_refused_port_given_up_early(void) {
    tt_zreq_t *z = NULL;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(tt_zreq_open(&z, "tcp://127.0.0.1:1", NULL, "ctl", "t", err, sizeof(err)),
                          TT_OK);
    tt_zreq_give_up_after(z, 3);
    uint64_t t0 = tt_clock_mono_ms();
    CU_ASSERT_EQUAL(call_status(z, 1, 20000, err, sizeof(err)), TT_EUNREACHABLE);
    uint64_t took = tt_clock_mono_ms() - t0;
    CU_ASSERT(took < 10000); /* three retries at ZeroMQ's 100 ms, not the 20 s deadline */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nothing accepts connections at tcp://127.0.0.1:1 ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is the coordinator running there"));
    printf("\n    refused port given up after %llu ms: %s\n", (unsigned long long)took, err);
    tt_zreq_close(&z);
}

/* Something listens there, and it is no ZeroMQ peer (a coordinator's
 * HTTP port given instead of its control port): not "could not connect". */
static void zreq_wrong_peer_is_told_apart(void) {
    char ep[64], err[512] = "";
    int fd = net_mute_listener(ep, sizeof(ep));
    CU_ASSERT_FATAL(fd >= 0);
    tt_zreq_t *z = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_zreq_open(&z, ep, NULL, "ctl", "t", err, sizeof(err)), TT_OK);
    tt_zreq_give_up_after(z, 1); /* TCP connects: not a refused port, not given up */
    CU_ASSERT_EQUAL(call_status(z, 1, 300, err, sizeof(err)), TT_ETIMEDOUT);
    char want[200];
    snprintf(want, sizeof(want),
             "could not talk to the coordinator within 300 ms: the coordinator at %s (the "
             "address given) took 1 TCP connection(s)",
             ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "completed no ZeroMQ handshake"));
    tt_zreq_close(&z);
    close(fd);
}

/* A ROUTER on a free port; `bound` gets its endpoint. */
static void *router(void *zctx, char *bound, size_t n) {
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    void *sock = NULL;
    char err[256] = "";
    int rc = tt_zmq_router(zctx, "tcp://127.0.0.1:*", &zo, &sock, bound, n, err, sizeof(err));
    CU_ASSERT_EQUAL_FATAL(rc, TT_OK);
    return sock;
}

static void zreq_silent_peer_gives_no_reply(void) {
    void *zctx = zmq_ctx_new();
    char ep[256] = "", err[512] = "";
    void *sock = router(zctx, ep, sizeof(ep));
    tt_zreq_t *z = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_zreq_open(&z, ep, NULL, "ctl", "t", err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(call_status(z, 1, 300, err, sizeof(err)), TT_ETIMEDOUT);
    char want[300];
    snprintf(want, sizeof(want), "no reply from the coordinator at %s within 300 ms", ep);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    tt_zreq_close(&z);
    tt_zmq_close(&sock);
    zmq_ctx_term(zctx);
}

/* Answers one request twice: first under an older request id (the reply
 * to a request its client gave up on), then under its own. */
static void *answer_twice(void *sock) {
    tt_zmq_rx_t rx;
    char err[256] = "";
    if (tt_zmq_recv(sock, 1, 0, NULL, &rx, err, sizeof(err)) != TT_OK)
        return NULL;
    Tether__Ack ack = TETHER__ACK__INIT;
    tt_env_t env;
    uint64_t ids[2] = {rx.env->request_id - 1, rx.env->request_id};
    for (int i = 0; i < 2; i++) {
        tt_wire_env_init(&env, "", "coord-test", 0, ids[i]);
        env.body_case = TETHER__ENVELOPE__BODY_ACK;
        env.ack = &ack;
        tt_zmq_send(sock, rx.peer, rx.peer_len, &env, NULL, 0, 0);
    }
    tt_zmq_rx_close(&rx);
    return NULL;
}

static void zreq_reply_matched_by_request_id(void) {
    void *zctx = zmq_ctx_new();
    char ep[256] = "", err[512] = "";
    void *sock = router(zctx, ep, sizeof(ep));
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, answer_twice, sock), 0);
    tt_zreq_t *z = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_zreq_open(&z, ep, NULL, "ctl", "t", err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(call_status(z, 7, 5000, err, sizeof(err)), TT_OK);
    pthread_join(th, NULL);
    tt_zreq_close(&z);
    tt_zmq_close(&sock);
    zmq_ctx_term(zctx);
}

static const tt_cunit_test_t tests[] = {
    {"zreq_nobody_there_cannot_connect", zreq_nobody_there_cannot_connect},
    {"zreq_silent_peer_gives_no_reply", zreq_silent_peer_gives_no_reply},
    {"zreq_refused_port_given_up_early", zreq_refused_port_given_up_early},
    {"zreq_wrong_peer_is_told_apart", zreq_wrong_peer_is_told_apart},
    {"zreq_reply_matched_by_request_id", zreq_reply_matched_by_request_id},
    {NULL, NULL},
};

TT_CUNIT_MAIN("zreq", tests)
