/* tt_commid: the worker's half of the bootstrap id relay (tt_commid.h).
 * A request for the id asks the coordinator to hold it until rank 0 offers
 * (a long poll of WAIT_MS), so members learn the id as soon as it is there
 * without asking over and over. Every exchange is bounded by ASK_MS beyond
 * that wait, then asked again: a coordinator that dies holding the request
 * never answers it, and its successor on the same endpoint never saw it
 * (an answer to an earlier ask is skipped). */
#include "tt_commid.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"
#include "tt_wire.h"
#include "tt_zreq.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ASK_MS       2000
#define WAIT_MS      2000 /* CommIdRequest.wait_ms */
#define MIN_WAIT_MS  10   /* not asked for shorter holds: pauses instead */
#define PAUSE_MAX_MS 200
#define NOTE_MS      10000 /* a wait this long is logged: it looks like a hang */

typedef struct call {
    tt_zreq_t *z;
    int timeout_ms; /* of the whole call */
    uint64_t start, end, rid;
    char rank0[320]; /* " (w0 on host-a)": whom a fetch waits for, once told */
} call_t;

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
}

/* Connects and addresses `env` (its body is the caller's). */
static int call_open(call_t *c, const tt_commid_opts_t *o, tt_env_t *env, char *err,
                     size_t errlen) {
    c->z = NULL;
    c->rid = 0;
    c->rank0[0] = '\0';
    if (o == NULL || o->coordinator == NULL || o->job_id == NULL || o->worker_id == NULL ||
        o->generation == 0) {
        set_err(err, errlen, "commid: a coordinator, job, worker and generation are needed");
        return TT_EINVAL;
    }
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    c->start = tt_clock_mono_ms();
    c->end = c->start + (uint64_t)c->timeout_ms;
    tt_wire_env_init(env, o->job_id, o->worker_id, o->generation, 0);
    return tt_zreq_open(&c->z, o->coordinator, o->key, "commid", o->worker_id, err, errlen);
}

/* Time left for another ask after a pause of `pause_ms`. */
static int more_time(const call_t *c, int pause_ms) {
    return tt_clock_mono_ms() + (uint64_t)pause_ms < c->end;
}

/* Milliseconds left of the call. */
static uint64_t left_ms(const call_t *c) {
    uint64_t now = tt_clock_mono_ms();
    return now < c->end ? c->end - now : 0;
}

/* One exchange, bounded by ASK_MS beyond the `held_ms` the coordinator
 * may hold it: TT_OK with rx holding a `want` body (tt_zmq_rx_close it),
 * the coordinator's refusal, TT_ETIMEDOUT or TT_EPROTO. */
static int ask(call_t *c, tt_env_t *env, int want, uint64_t held_ms, tt_zmq_rx_t *rx, char *err,
               size_t errlen) {
    uint64_t left = left_ms(c), bound = held_ms + ASK_MS;
    env->request_id = ++c->rid;
    return tt_zreq_call_want(c->z, env, NULL, 0, (uint32_t)(left < bound ? left : bound), want,
                             "commid", rx, err, errlen);
}

int tt_commid_offer(const tt_commid_opts_t *o, const void *id, size_t len, char *err,
                    size_t errlen) {
    if (id == NULL || len == 0 || len > TT_WIRE_MAX_COMM_ID) {
        set_err(err, errlen, "commid: an id of %zu bytes (1..%u)", len, TT_WIRE_MAX_COMM_ID);
        return TT_EINVAL;
    }
    call_t c;
    tt_env_t env;
    int rc = call_open(&c, o, &env, err, errlen);
    if (rc != TT_OK)
        return rc;
    Tether__CommIdOffer m = TETHER__COMM_ID_OFFER__INIT;
    m.generation = o->generation;
    m.id.data = (uint8_t *)id;
    m.id.len = len;
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_OFFER;
    env.comm_id_offer = &m;
    tt_zmq_rx_t rx;
    do /* offering the same id again is harmless: the coordinator accepts it */
        rc = ask(&c, &env, TETHER__ENVELOPE__BODY_ACK, 0, &rx, err, errlen);
    while (rc == TT_ETIMEDOUT && more_time(&c, 0));
    if (rc == TT_OK)
        tt_zmq_rx_close(&rx);
    tt_zreq_close(&c.z);
    return rc;
}

static int take(const Tether__CommIdReply *r, const tt_commid_opts_t *o, void *out, size_t len,
                char *err, size_t errlen) {
    if (r->generation != o->generation || r->id.len != len) {
        set_err(err, errlen,
                "coordinator: an id of %zu bytes for generation %" PRIu64
                " (asked: %zu bytes, generation %" PRIu64 ")",
                r->id.len, r->generation, len, o->generation);
        return TT_EPROTO;
    }
    memcpy(out, r->id.data, len);
    return TT_OK;
}

/* One request, which the coordinator may hold for m->wait_ms: TT_OK with
 * the id in out, TT_EAGAIN while rank 0 has not offered, or what ask
 * returns. */
static int ask_ready(call_t *c, tt_env_t *env, const tt_commid_opts_t *o, void *out, size_t len,
                     char *err, size_t errlen) {
    tt_zmq_rx_t rx;
    int rc = ask(c, env, TETHER__ENVELOPE__BODY_COMM_ID_REPLY, env->comm_id_request->wait_ms, &rx,
                 err, errlen);
    if (rc != TT_OK)
        return rc;
    const Tether__CommIdReply *r = rx.env->comm_id_reply;
    rc = r->ready ? take(r, o, out, len, err, errlen) : TT_EAGAIN;
    if (!r->ready && r->rank0_worker != NULL && r->rank0_worker[0] != '\0')
        snprintf(c->rank0, sizeof(c->rank0), " (%.127s on %.160s)", r->rank0_worker,
                 r->rank0_host != NULL ? r->rank0_host : "?");
    tt_zmq_rx_close(&rx);
    return rc;
}

int tt_commid_fetch(const tt_commid_opts_t *o, void *out, size_t len, char *err, size_t errlen) {
    if (out == NULL || len == 0)
        return TT_EINVAL;
    call_t c;
    tt_env_t env;
    int rc = call_open(&c, o, &env, err, errlen);
    if (rc != TT_OK)
        return rc;
    Tether__CommIdRequest m = TETHER__COMM_ID_REQUEST__INIT;
    m.generation = o->generation;
    env.body_case = TETHER__ENVELOPE__BODY_COMM_ID_REQUEST;
    env.comm_id_request = &m;
    uint64_t note = c.start + NOTE_MS;
    for (int pause = 5;; pause = pause * 2 < PAUSE_MAX_MS ? pause * 2 : PAUSE_MAX_MS) {
        /* Held for at most half the time left, so that the answer at
         * the end of the wait arrives within the call. */
        uint64_t left = left_ms(&c), asked = tt_clock_mono_ms();
        m.wait_ms = (uint32_t)(left / 2 < WAIT_MS ? left / 2 : WAIT_MS);
        if (m.wait_ms < MIN_WAIT_MS)
            m.wait_ms = 0;
        rc = ask_ready(&c, &env, o, out, len, err, errlen);
        /* Held for most of its wait: ask again at once. Answered early
         * without the id: a coordinator that does not hold requests. */
        int held = rc == TT_EAGAIN && m.wait_ms > 0 && tt_clock_mono_ms() - asked >= m.wait_ms / 2;
        if ((rc != TT_EAGAIN && rc != TT_ETIMEDOUT) || !more_time(&c, held ? 0 : pause))
            break;
        if (tt_clock_mono_ms() >= note) {
            TT_WARN(
                "coll", "generation %" PRIu64 ": still no id from rank 0%s after %llu s of %d s%s",
                o->generation, c.rank0, (unsigned long long)((tt_clock_mono_ms() - c.start) / 1000),
                c.timeout_ms / 1000, rc == TT_EAGAIN ? "" : " (the coordinator does not answer)");
            note += NOTE_MS;
        }
        if (!held)
            tt_clock_sleep_ms((uint64_t)pause);
    }
    if (rc == TT_EAGAIN) {
        rc = TT_ETIMEDOUT;
        set_err(err, errlen,
                "commid: rank 0%s of generation %" PRIu64 " offered no id within %d ms", c.rank0,
                o->generation, c.timeout_ms);
    }
    tt_zreq_close(&c.z);
    return rc;
}
