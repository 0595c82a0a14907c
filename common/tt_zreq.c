/* tt_zreq: a private DEALER for one request and its reply at a time (see
 * the header). The context is per object because callers are short-lived
 * (a command line, a checkpoint commit every few minutes) and must not
 * share sockets across threads. */
#include "tt_zreq.h"

#include "tt_clock.h"
#include "tt_rng.h"
#include "tt_status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tt_zreq {
    void *zctx;
    void *sock;
    void *mon; /* the DEALER's monitor: a peer that is no coordinator is told apart */
    tt_zmq_reach_t reach;
    uint32_t give_up; /* tries refused before a call ends; 0: never */
    char endpoint[256];
};

int tt_zreq_open(tt_zreq_t **out, const char *endpoint, const tt_zauth_key_t *key, const char *role,
                 const char *id, char *err, size_t errlen) {
    *out = NULL;
    tt_zreq_t *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return TT_ENOMEM;
    snprintf(z->endpoint, sizeof(z->endpoint), "%s", endpoint);
    uint64_t seed = tt_clock_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)z;
    char rid[TT_WIRE_MAX_ID + 1];
    int rc = tt_zmq_routing_id(rid, sizeof(rid), role, id, tt_rng_next(&seed) & 0xffffffffu);
    if (rc != TT_OK) {
        snprintf(err, errlen, "routing id for '%s' does not fit", id);
        free(z);
        return rc;
    }
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.routing_id = rid;
    zo.key = key;
    zo.key_kind = TT_ZAUTH_CONTROL;
    z->zctx = zmq_ctx_new();
    tt_zmq_reach_init(&z->reach, tt_clock_mono_ms());
    rc = z->zctx == NULL ? TT_ESYS
                         : tt_zmq_dealer_watched(z->zctx, endpoint, &zo, TT_ZMQ_REACH_EVENTS,
                                                 &z->sock, &z->mon, err, errlen);
    if (rc != TT_OK) {
        if (z->zctx == NULL)
            snprintf(err, errlen, "cannot create a ZeroMQ context: %s", zmq_strerror(errno));
        tt_zreq_close(&z);
        return rc;
    }
    *out = z;
    return TT_OK;
}

void tt_zreq_give_up_after(tt_zreq_t *z, uint32_t tries) {
    z->give_up = tries;
}

/* Whether connecting is hopeless for a caller that asked to give up. */
static int refused_enough(tt_zreq_t *z) {
    tt_zmq_reach_drain(&z->reach, z->mon);
    return z->give_up > 0 && !z->reach.met && z->reach.tcp_ups == 0 && z->reach.tries >= z->give_up;
}

/* Waits for `events` until the deadline; 1 when ready. */
static int wait_for(void *sock, short events, uint64_t deadline) {
    for (;;) {
        zmq_pollitem_t it = {.socket = sock, .fd = -1, .events = events};
        uint64_t now = tt_clock_mono_ms();
        long left = now >= deadline ? 0 : (long)(deadline - now);
        int rc = zmq_poll(&it, 1, left);
        if (rc > 0)
            return 1;
        if (left == 0 || (rc < 0 && zmq_errno() != EINTR))
            return 0;
    }
}

int tt_zreq_call(tt_zreq_t *z, const tt_env_t *env, const tt_zmq_payload_t *pl, size_t npl,
                 uint32_t timeout_ms, tt_zmq_rx_t *rx, char *err, size_t errlen) {
    uint64_t deadline = tt_clock_mono_ms() + timeout_ms;
    int rc = TT_EAGAIN;
    tt_zmq_reach_drain(&z->reach, z->mon); /* what queued since the last call */
    /* Slices of 50 ms when giving up is allowed: the monitor is read
     * between them. */
    for (int ready = 1; rc == TT_EAGAIN && ready && !refused_enough(z);) {
        uint64_t until = z->give_up > 0 ? tt_clock_mono_ms() + 50 : deadline;
        ready = wait_for(z->sock, ZMQ_POLLOUT, until < deadline ? until : deadline);
        if (ready)
            rc = tt_zmq_send(z->sock, NULL, 0, env, pl, npl, 1);
        else if (until < deadline)
            ready = 1; /* a slice ended, not the call */
    }
    if (rc == TT_EAGAIN && refused_enough(z)) {
        snprintf(err, errlen,
                 "nothing accepts connections at %s (%u attempt(s) refused or failed in %llu "
                 "ms): is the coordinator running there, and is the address right?",
                 z->endpoint, z->reach.tries,
                 (unsigned long long)(tt_clock_mono_ms() - z->reach.since_ms));
        return TT_EUNREACHABLE;
    }
    while (rc == TT_OK) {
        if (!wait_for(z->sock, ZMQ_POLLIN, deadline)) {
            rc = TT_ETIMEDOUT;
            break;
        }
        char why[256] = "";
        rc = tt_zmq_recv(z->sock, 0, 1, NULL, rx, why, sizeof(why));
        if (rc == TT_OK && rx->env->request_id == env->request_id)
            return TT_OK;
        if (rc == TT_OK)
            tt_zmq_rx_close(rx); /* an answer to an earlier request */
        rc = TT_OK;              /* a malformed reply is skipped too */
    }
    /* ZMQ_IMMEDIATE: a send waits for a peer that completed the ZeroMQ
     * handshake, so EAGAIN here means nothing there speaks it (not
     * running, a wrong address), which the operator fixes differently from
     * a coordinator that took the request and did not answer. */
    tt_zmq_reach_drain(&z->reach, z->mon);
    if (rc == TT_EAGAIN && tt_zmq_reach_wrong_peer(&z->reach)) {
        char why[384];
        tt_zmq_reach_why(&z->reach, "the coordinator", z->endpoint, "the address given",
                         tt_clock_mono_ms(), why, sizeof(why));
        snprintf(err, errlen, "could not talk to the coordinator within %u ms: %s", timeout_ms,
                 why);
        return TT_ETIMEDOUT;
    }
    if (rc == TT_EAGAIN) {
        snprintf(err, errlen,
                 "could not connect to the coordinator at %s within %u ms: is it running there, "
                 "and is the address right?",
                 z->endpoint, timeout_ms);
        return TT_ETIMEDOUT;
    }
    if (rc == TT_ETIMEDOUT) {
        snprintf(err, errlen, "no reply from the coordinator at %s within %u ms", z->endpoint,
                 timeout_ms);
        return TT_ETIMEDOUT;
    }
    snprintf(err, errlen, "cannot send to the coordinator at %s: %s", z->endpoint, tt_strerror(rc));
    return rc;
}

int tt_zreq_call_want(tt_zreq_t *z, const tt_env_t *env, const tt_zmq_payload_t *pl, size_t npl,
                      uint32_t timeout_ms, int want, const char *what, tt_zmq_rx_t *rx, char *err,
                      size_t errlen) {
    char why[384] = "";
    int rc = tt_zreq_call(z, env, pl, npl, timeout_ms, rx, why, sizeof(why));
    if (err == NULL)
        errlen = 0; /* the status alone */
    if (rc != TT_OK) {
        snprintf(err, errlen, "%s%s%s", what ? what : "", what ? ": " : "", why);
        return rc;
    }
    if (rx->env->body_case == TETHER__ENVELOPE__BODY_ERROR) {
        const Tether__Error *e = rx->env->error;
        snprintf(err, errlen, "coordinator: %s", e->message ? e->message : "");
        rc = e->code < 0 ? e->code : TT_EREMOTE;
    } else if ((int)rx->env->body_case != want) {
        snprintf(err, errlen, "coordinator answered with '%s'",
                 tt_wire_body_name(rx->env->body_case));
        rc = TT_EPROTO;
    }
    if (rc != TT_OK)
        tt_zmq_rx_close(rx);
    return rc;
}

void tt_zreq_close(tt_zreq_t **pz) {
    if (pz == NULL || *pz == NULL)
        return;
    tt_zreq_t *z = *pz;
    tt_zmq_monitor_close(z->sock, &z->mon);
    tt_zmq_close(&z->sock);
    if (z->zctx != NULL)
        zmq_ctx_term(z->zctx);
    free(z);
    *pz = NULL;
}
