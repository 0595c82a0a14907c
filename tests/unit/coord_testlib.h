/* coord_testlib: the fixture of the coordinator tests that talk to a real
 * tt_coord over TCP on 127.0.0.1 (test_coord_ckpt.c, test_coord_job.c): the
 * coordinator on a loop this thread pumps between socket reads, with a
 * state directory so it can be stopped and started again, and raw DEALER
 * clients that send an envelope and wait for its reply. */
#ifndef COORD_TESTLIB_H
#define COORD_TESTLIB_H

#include "coord.h"
#include "tt_clock.h"
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CALL_MS 5000 /* every reply comes well within this */

typedef struct fx {
    uv_loop_t loop;
    tt_coord_t *coord;
    void *zctx;
    char tmp[64];    /* removed at the end */
    char state[128]; /* coordinator state dir */
    char root[128];  /* checkpoint root */
} fx_t;

static inline void fx_up(fx_t *f) {
    char err[512] = "";
    uv_loop_init(&f->loop);
    tt_coord_opts_t o = {.listen = "tcp://127.0.0.1:*",
                         .state_dir = f->state,
                         .id = "coord-test",
                         .max_msg_bytes = 1 << 20};
    int rc = tt_coord_create(&f->coord, &f->loop, &o, err, sizeof(err));
    if (rc != TT_OK)
        printf("\n  coordinator: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, TT_OK);
}

/* Closing waits for work in the pool, as the daemon's loop does. */
static inline void fx_down(fx_t *f) {
    tt_coord_close(f->coord);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    tt_coord_destroy(&f->coord);
    uv_loop_close(&f->loop);
}

static inline void fx_start(fx_t *f) {
    memset(f, 0, sizeof(*f));
    strcpy(f->tmp, "/tmp/tt_coord_test_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(f->tmp));
    snprintf(f->state, sizeof(f->state), "%s/state", f->tmp);
    snprintf(f->root, sizeof(f->root), "%s/ckpt", f->tmp);
    f->zctx = zmq_ctx_new();
    fx_up(f);
}

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void fx_stop(fx_t *f) {
    fx_down(f);
    zmq_ctx_term(f->zctx);
    nftw(f->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* children first */
}

static inline void fx_pump(fx_t *f) {
    uv_run(&f->loop, UV_RUN_NOWAIT);
}

/* Pumps the coordinator for `ms` (its timer included). */
static inline void fx_pump_for(fx_t *f, uint64_t ms) {
    uint64_t end = tt_clock_mono_ms() + ms;
    while (tt_clock_mono_ms() < end) {
        fx_pump(f);
        tt_clock_sleep_ms(2);
    }
}

/* ---- raw clients ---- */

typedef struct cli {
    void *sock;
    uint64_t next_id;
    char sender[32];
} cli_t;

/* A DEALER with routing id "<role>-<id>.1" ("worker-w0.1" is what the
 * coordinator insists on for worker w0). */
/* A client of `role` and `id` as process incarnation `inc`. */
static inline void cli_open_as(fx_t *f, cli_t *c, const char *role, const char *id, uint64_t inc) {
    char rid[128], err[256] = "";
    tt_zmq_routing_id(rid, sizeof(rid), role, id, inc);
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.routing_id = rid;
    c->next_id = 1;
    snprintf(c->sender, sizeof(c->sender), "%s", id);
    CU_ASSERT_EQUAL_FATAL(
        tt_zmq_dealer(f->zctx, tt_coord_endpoint(f->coord), &zo, &c->sock, err, sizeof(err)),
        TT_OK);
}

static inline void cli_open(fx_t *f, cli_t *c, const char *role, const char *id) {
    cli_open_as(f, c, role, id, 1);
}

/* Sends env (request id set here and returned, one payload frame when
 * `frame`) without waiting for the reply. */
static inline uint64_t cli_send(fx_t *f, cli_t *c, tt_env_t *env, const void *frame, size_t flen) {
    uint64_t end = tt_clock_mono_ms() + CALL_MS;
    env->request_id = c->next_id++;
    tt_zmq_payload_t pl = {.data = frame, .len = flen};
    int rc = TT_EAGAIN;
    while (rc == TT_EAGAIN && tt_clock_mono_ms() < end) {
        fx_pump(f); /* ZMQ_IMMEDIATE: queued only once connected */
        rc = tt_zmq_send(c->sock, NULL, 0, env, frame ? &pl : NULL, frame ? 1 : 0, 1);
    }
    CU_ASSERT_EQUAL(rc, TT_OK);
    return env->request_id;
}

/* Pumps the coordinator until the reply to request `id`, or a message of
 * body `body` (pushed ones carry id 0), arrives. An Error is released and
 * its code returned (its message into msg when given); anything else stays
 * in *rx (release it) with 0. TT_ETIMEDOUT after CALL_MS. */
static inline int cli_wait(fx_t *f, cli_t *c, uint64_t id, int body, tt_zmq_rx_t *rx, char *msg,
                           size_t cap) {
    uint64_t end = tt_clock_mono_ms() + CALL_MS;
    while (tt_clock_mono_ms() < end) {
        fx_pump(f);
        char err[256];
        if (tt_zmq_recv(c->sock, 0, 1, NULL, rx, err, sizeof(err)) != TT_OK) {
            zmq_pollitem_t it = {.socket = c->sock, .events = ZMQ_POLLIN};
            zmq_poll(&it, 1, 2);
            continue;
        }
        if (rx->env->request_id != id && (int)rx->env->body_case != body) {
            tt_zmq_rx_close(rx);
            continue;
        }
        if (rx->env->body_case != TETHER__ENVELOPE__BODY_ERROR)
            return 0;
        int code = rx->env->error->code;
        if (msg != NULL)
            snprintf(msg, cap, "%s", rx->env->error->message ? rx->env->error->message : "");
        tt_zmq_rx_close(rx);
        return code;
    }
    CU_FAIL("no reply from the coordinator");
    return TT_ETIMEDOUT;
}

static inline int cli_call(fx_t *f, cli_t *c, tt_env_t *env, const void *frame, size_t flen,
                           int body, tt_zmq_rx_t *rx, char *msg, size_t cap) {
    return cli_wait(f, c, cli_send(f, c, env, frame, flen), body, rx, msg, cap);
}

/* A request answered by an Ack: 0 once it came, or the Error's code. */
static inline int cli_call_ack(fx_t *f, cli_t *c, tt_env_t *env) {
    tt_zmq_rx_t rx;
    int rc = cli_call(f, c, env, NULL, 0, TETHER__ENVELOPE__BODY_ACK, &rx, NULL, 0);
    if (rc == 0)
        tt_zmq_rx_close(&rx);
    return rc;
}

/* What a test's job asks for: its size, the last call for joiners, the
 * checkpoints kept and the time between them (0: none). */
typedef struct {
    uint32_t min, max, last_call_ms, keep, every_ms;
} join_job_t;

/* Worker w asks to join `job` as incarnation `inc` having completed
 * `last_step` (-1: none), without waiting; the request id. */
static inline uint64_t send_join(fx_t *f, cli_t *w, const char *job, const join_job_t *jj,
                                 uint64_t inc, int64_t last_step) {
    Tether__JobSettings s = TETHER__JOB_SETTINGS__INIT;
    s.min_workers = jj->min;
    s.max_workers = jj->max;
    s.last_call_ms = jj->last_call_ms;
    s.heartbeat_ms = 100;
    s.heartbeat_timeout_ms = 600000; /* no eviction while the test talks */
    s.global_batch = 8;
    s.join_timeout_ms = 60000;
    s.checkpoint_keep = jj->keep;
    s.checkpoint_every_ms = jj->every_ms;
    Tether__JoinRequest jr = TETHER__JOIN_REQUEST__INIT;
    jr.settings = &s;
    jr.worker_id = w->sender;
    jr.host = "localhost";
    jr.endpoint = "tcp://127.0.0.1:9";
    jr.incarnation = inc;
    jr.last_step = last_step;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_JOIN;
    env.join = &jr;
    return cli_send(f, w, &env, NULL, 0);
}

/* Worker w joins `job` alone (min = max = 1) as incarnation `inc` having
 * completed `last_step` (-1: none); returns the generation, its job nonce
 * in *nonce and its resume step in *resume (either may be NULL). */
static inline uint64_t join_at(fx_t *f, cli_t *w, const char *job, uint32_t keep, uint32_t every_ms,
                               uint64_t inc, int64_t last_step, uint64_t *nonce, int64_t *resume) {
    join_job_t jj = {.min = 1, .max = 1, .last_call_ms = 10, .keep = keep, .every_ms = every_ms};
    uint64_t id = send_join(f, w, job, &jj, inc, last_step);
    tt_zmq_rx_t rx;
    uint64_t gen = 0;
    if (cli_wait(f, w, id, TETHER__ENVELOPE__BODY_JOIN_REPLY, &rx, NULL, 0) == 0) {
        CU_ASSERT_EQUAL(rx.env->body_case, TETHER__ENVELOPE__BODY_JOIN_REPLY);
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY)
            gen = rx.env->join_reply->generation->generation;
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY && nonce != NULL)
            *nonce = rx.env->join_reply->generation->job_nonce;
        if (rx.env->body_case == TETHER__ENVELOPE__BODY_JOIN_REPLY && resume != NULL)
            *resume = rx.env->join_reply->generation->resume_step;
        tt_zmq_rx_close(&rx);
    }
    CU_ASSERT(gen > 0);
    return gen;
}

static inline uint64_t join_as(fx_t *f, cli_t *w, const char *job, uint32_t keep, uint32_t every_ms,
                               uint64_t inc, uint64_t *nonce) {
    return join_at(f, w, job, keep, every_ms, inc, -1, nonce, NULL);
}

static inline uint64_t join(fx_t *f, cli_t *w, const char *job, uint32_t keep, uint32_t every_ms) {
    return join_as(f, w, job, keep, every_ms, 1, NULL);
}

/* w asks for generation `gen`'s collective id (CommIdRequest), letting
 * the coordinator hold the request for `wait_ms` (0: answer at once); the
 * request id. */
static inline uint64_t send_ask(fx_t *f, cli_t *w, const char *job, uint64_t gen,
                                uint32_t wait_ms) {
    Tether__CommIdRequest q = TETHER__COMM_ID_REQUEST__INIT;
    q.generation = gen;
    q.wait_ms = wait_ms;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REQUEST;
    env.comm_id_request = &q;
    return cli_send(f, w, &env, NULL, 0);
}

/* Rank 0 (w) offers `id` for `gen`: 0 once acknowledged. */
static inline int offer(fx_t *f, cli_t *w, const char *job, uint64_t gen, const uint8_t *id,
                        size_t len) {
    Tether__CommIdOffer o = TETHER__COMM_ID_OFFER__INIT;
    o.generation = gen;
    o.id.data = (uint8_t *)id;
    o.id.len = len;
    tt_env_t env;
    tt_wire_env_init(&env, job, w->sender, gen, 0);
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_OFFER;
    env.comm_id_offer = &o;
    return cli_call_ack(f, w, &env);
}

#endif
