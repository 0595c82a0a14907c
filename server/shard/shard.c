/* shard: life cycle of the shard daemon, its sockets, the coordinator link
 * (heartbeats that double as registration, stall reports) and the periodic
 * timer that drives heartbeats and deadlines. Sends on the data ROUTER never
 * block: ROUTER_MANDATORY turns a vanished peer into an error we log, and
 * the PS backend's credits keep every peer far below the high-water mark. */
#include "shard_internal.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

#define TICK_MS       50
#define COORD_WARN_MS 5000 /* a coordinator unreached this long is named */

void shard_send(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const tt_env_t *env,
                const tt_zmq_payload_t *pl, size_t npl) {
    int rc = tt_zmq_send(s->router, peer, peer_len, env, pl, npl, 1);
    char who[TT_ZMQ_PEER_NAME_MAX];
    if (rc != TT_OK)
        TT_WARN("shard", "reply %s (job %s, generation %" PRIu64 ") to %s dropped: %s",
                tt_wire_body_name(env->body_case), env->job_id, env->generation,
                tt_zmq_peer_name(peer, peer_len, who, sizeof(who)), tt_strerror(rc));
    tt_uvzmq_kick(s->router_w);
}

void shard_send_error(tt_shard_t *s, const uint8_t *peer, size_t peer_len, const char *job,
                      uint64_t gen, uint64_t req, int code, const char *msg) {
    Tether__Error e = TETHER__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    tt_env_t env;
    tt_wire_env_init(&env, job, s->id, gen, req);
    env.body_case = TETHER__ENVELOPE__BODY_ERROR;
    env.error = &e;
    shard_send(s, peer, peer_len, &env, NULL, 0);
}

uint64_t shard_bytes_held(const tt_shard_t *s, uint32_t *chunks) {
    uint64_t bytes = 0;
    uint32_t n = 0;
    for (size_t j = 0; j < s->njobs; j++) {
        for (size_t c = 0; c < s->jobs[j]->nchunks; c++) {
            const shard_chunk_t *ch = s->jobs[j]->chunks[c];
            bytes += tt_accum_bytes(ch->acc) + (ch->result ? ch->result->n * sizeof(float) : 0) +
                     (ch->spare ? ch->spare->n * sizeof(float) : 0);
            n++;
        }
    }
    if (chunks != NULL)
        *chunks = n;
    return bytes;
}

static void to_coordinator(tt_shard_t *s, const tt_env_t *env) {
    if (s->dealer == NULL)
        return;
    /* DONTWAIT: with ZMQ_IMMEDIATE a missing coordinator queues nothing,
     * and a heartbeat lost that way is replaced by the next one. */
    int rc = tt_zmq_send(s->dealer, NULL, 0, env, NULL, 0, 1);
    if (rc != TT_OK && rc != TT_EAGAIN)
        TT_WARN("shard", "%s to the coordinator failed: %s", tt_wire_body_name(env->body_case),
                tt_strerror(rc));
    tt_uvzmq_kick(s->dealer_w);
}

static void send_heartbeat(tt_shard_t *s) {
    Tether__ShardHeartbeat hb = TETHER__SHARD_HEARTBEAT__INIT;
    hb.shard_id = s->id;
    hb.endpoint = s->advertise;
    hb.incarnation = s->incarnation;
    hb.bytes_held = shard_bytes_held(s, &hb.chunks);
    tt_env_t env;
    tt_wire_env_init(&env, "", s->id, 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_SHARD_HEARTBEAT;
    env.shard_heartbeat = &hb;
    to_coordinator(s, &env);
}

void shard_report_stall(tt_shard_t *s, shard_job_t *job, shard_chunk_t *ch) {
    uint32_t miss[256];
    size_t n = tt_accum_missing(ch->acc, miss, 256);
    size_t listed = n < 256 ? n : 256;
    Tether__ShardStall st = TETHER__SHARD_STALL__INIT;
    st.step = tt_accum_round_step(ch->acc);
    st.chunk = ch->id;
    st.missing_ranks = miss;
    st.n_missing_ranks = listed;
    st.world = tt_accum_round_world(ch->acc);
    TT_WARN("shard",
            "job %s gen %" PRIu64 " step %" PRIu64 " chunk %u: %zu rank(s) missing "
            "after the deadline (first: %u); reported to the coordinator",
            job->id, tt_accum_generation(ch->acc), st.step, ch->id, n, listed ? miss[0] : 0);
    tt_env_t env;
    tt_wire_env_init(&env, job->id, s->id, tt_accum_generation(ch->acc), 0);
    env.body_case = TETHER__ENVELOPE__BODY_SHARD_STALL;
    env.shard_stall = &st;
    to_coordinator(s, &env);
}

static void on_dealer(void *sock, void *arg) {
    tt_shard_t *s = arg;
    tt_zmq_rx_t rx;
    char err[256] = "";
    int rc = tt_zmq_recv(sock, 0, 1, &s->lim, &rx, err, sizeof(err));
    if (rc == TT_EAGAIN || rc == TT_ESYS)
        return;
    if (rc != TT_OK)
        TT_WARN("shard", "bad message from the coordinator: %s", err);
    else if (rx.env->body_case == TETHER__ENVELOPE__BODY_ERROR)
        TT_WARN("shard", "coordinator: %s (%s)", rx.env->error->message,
                tt_status_name(rx.env->error->code));
    tt_zmq_rx_close(&rx);
}

/* Reads the dealer's connection events; says once when the coordinator
 * has not been reached for COORD_WARN_MS (never, or since its connection
 * dropped), and when it is reached again after that. */
static void watch_coordinator(tt_shard_t *s, uint64_t now) {
    uint16_t ev;
    int32_t val;
    while (s->dealer_mon != NULL && tt_zmq_monitor_read(s->dealer_mon, &ev, &val) == TT_OK) {
        tt_zmq_reach_event(&s->coord_reach, ev, val);
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            if (s->coord_warned)
                TT_WARN("shard", "connected to the coordinator at %s: heartbeats reach it again",
                        s->coordinator);
            s->coord_down_ms = 0;
            s->coord_warned = 0;
        } else if (ev == ZMQ_EVENT_DISCONNECTED && s->coord_reach.met && s->coord_down_ms == 0) {
            s->coord_down_ms = now;
        }
    }
    uint64_t since = s->coord_reach.met ? s->coord_down_ms : s->coord_reach.since_ms;
    if (s->dealer_mon == NULL || s->coord_warned || since == 0 || now < since + COORD_WARN_MS)
        return;
    s->coord_warned = 1;
    char why[512];
    if (s->coord_reach.met)
        snprintf(why, sizeof(why), "the connection to the coordinator at %s dropped %llu ms ago.",
                 s->coordinator, (unsigned long long)(now - since));
    else
        tt_zmq_reach_why(&s->coord_reach, "the coordinator", s->coordinator, "--coordinator", now,
                         why, sizeof(why));
    TT_WARN("shard",
            "%s Heartbeats go on trying; until it registers this shard, no job is placed here, "
            "and a job with chunks here regroups without them.",
            why);
}

/* A worker whose data link failed its handshake (no cluster key, or
 * another one; the ZAP handler logs a wrong password itself). */
static void watch_handshakes(tt_shard_t *s, uint64_t now) {
    uint16_t ev;
    int32_t val;
    while (s->router_mon != NULL && tt_zmq_monitor_read(s->router_mon, &ev, &val) == TT_OK)
        tt_zauth_watch(&s->handshakes, &s->key, TT_ZAUTH_BULK, s->endpoint, ev, val, now);
}

static void on_timer(uv_timer_t *t) {
    tt_shard_t *s = t->data;
    uint64_t now = tt_clock_mono_ms();
    watch_coordinator(s, now);
    watch_handshakes(s, now);
    if (now - s->last_hb_ms >= s->hb_ms) {
        s->last_hb_ms = now;
        send_heartbeat(s);
    }
    for (size_t j = 0; j < s->njobs; j++) {
        for (size_t c = 0; c < s->jobs[j]->nchunks; c++)
            shard_chunk_tick(s->jobs[j]->chunks[c], now);
    }
}

static int open_sockets(tt_shard_t *s, const tt_shard_opts_t *o, char *err, size_t errlen) {
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.max_msg = (int64_t)s->max_chunk + (1 << 20);
    /* Credits bound what each worker has in flight; these only need to
     * exceed workers x credits so the ROUTER never drops a reply. */
    zo.sndhwm = 100000;
    zo.rcvhwm = 100000;
    zo.key = &s->key;
    zo.key_kind = TT_ZAUTH_BULK;
    char who[96];
    snprintf(who, sizeof(who), "shard %s", s->id);
    int rc = tt_zauth_zap_start(s->zctx, &s->key, who, &s->zap, err, errlen);
    if (rc == TT_OK)
        rc = tt_zmq_router(s->zctx, o->listen, &zo, &s->router, s->endpoint, sizeof(s->endpoint),
                           err, errlen);
    if (rc == TT_OK)
        rc = tt_zmq_monitor_open(s->zctx, s->router, TT_ZAUTH_FAILURE_EVENTS, &s->router_mon, err,
                                 errlen);
    if (rc != TT_OK || o->coordinator == NULL || o->coordinator[0] == '\0')
        return rc;
    char rid[TT_WIRE_MAX_ID + 1];
    TT_CHECK_GOTO(tt_zmq_routing_id(rid, sizeof(rid), "shard", s->id, s->incarnation), rc, out);
    tt_zmq_opts_t co;
    tt_zmq_opts_default(&co);
    co.routing_id = rid;
    co.max_msg = 1 << 20;
    co.key = &s->key;
    co.key_kind = TT_ZAUTH_CONTROL;
    snprintf(s->coordinator, sizeof(s->coordinator), "%s", o->coordinator);
    tt_zmq_reach_init(&s->coord_reach, tt_clock_mono_ms());
    rc = tt_zmq_dealer_watched(s->zctx, o->coordinator, &co,
                               TT_ZMQ_REACH_EVENTS | ZMQ_EVENT_DISCONNECTED, &s->dealer,
                               &s->dealer_mon, err, errlen);
out:
    if (rc == TT_EINVAL)
        SSET_ERR(err, errlen, "shard id '%s' is too long for a routing id", s->id);
    return rc;
}

static void set_advertise(tt_shard_t *s, const tt_shard_opts_t *o) {
    if (o->advertise != NULL && o->advertise[0] != '\0') {
        snprintf(s->advertise, sizeof(s->advertise), "%s", o->advertise);
        return;
    }
    /* A wildcard bind is not an address anyone can connect to. */
    const char *star = strstr(s->endpoint, "0.0.0.0");
    if (star != NULL)
        snprintf(s->advertise, sizeof(s->advertise), "%.*s127.0.0.1%s", (int)(star - s->endpoint),
                 s->endpoint, star + 7);
    else
        snprintf(s->advertise, sizeof(s->advertise), "%s", s->endpoint);
}

static int setup(tt_shard_t *s, const tt_shard_opts_t *o, char *err, size_t errlen) {
    int rc;
    s->zctx = zmq_ctx_new();
    if (s->zctx == NULL) {
        SSET_ERR(err, errlen, "cannot create a ZeroMQ context");
        return TT_ESYS;
    }
    /* One I/O thread moves every worker's pushes and results in turn; a
     * second lets the kernel copies of two connections run at once (a
     * socket's connections are spread over the threads). */
    zmq_ctx_set(s->zctx, ZMQ_IO_THREADS, o->io_threads ? (int)o->io_threads : 2);
    if (o->key != NULL)
        s->key = *o->key;
    TT_CHECK_GOTO(open_sockets(s, o, err, errlen), rc, out);
    set_advertise(s, o);
    uv_timer_init(s->loop, &s->timer);
    s->timer.data = s;
    TT_CHECK_GOTO(tt_uvzmq_start(s->loop, s->router, shard_on_data, s, &s->router_w), rc, out);
    if (s->dealer != NULL)
        TT_CHECK_GOTO(tt_uvzmq_start(s->loop, s->dealer, on_dealer, s, &s->dealer_w), rc, out);
    send_heartbeat(s);
    s->last_hb_ms = tt_clock_mono_ms();
    uv_timer_start(&s->timer, on_timer, TICK_MS, TICK_MS);
out:
    return rc;
}

static int check_opts(const tt_shard_opts_t *o, char *err, size_t errlen) {
    if (o == NULL || o->listen == NULL || o->id == NULL || o->id[0] == '\0' || strlen(o->id) > 64) {
        SSET_ERR(err, errlen, "a shard needs a listen endpoint and an id of 1..64 characters");
        return TT_EINVAL;
    }
    return TT_OK;
}

int tt_shard_create(tt_shard_t **out, uv_loop_t *loop, const tt_shard_opts_t *o, char *err,
                    size_t errlen) {
    *out = NULL;
    int rc = check_opts(o, err, errlen);
    if (rc != TT_OK)
        return rc;
    tt_shard_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return TT_ENOMEM;
    s->loop = loop;
    snprintf(s->id, sizeof(s->id), "%s", o->id);
    s->incarnation = o->incarnation ? o->incarnation : tt_clock_wall_ms();
    s->hb_ms = o->heartbeat_ms ? o->heartbeat_ms : 1000;
    s->park_ms = o->park_timeout_ms ? o->park_timeout_ms : 30000;
    s->max_chunk = o->max_chunk_bytes ? o->max_chunk_bytes : ((uint64_t)64 << 20);
    s->die_step = o->die_once != NULL ? o->die_step : 0;
    snprintf(s->die_once, sizeof(s->die_once), "%s", o->die_once ? o->die_once : "");
    tt_wire_limits_default(&s->lim);
    rc = setup(s, o, err, errlen);
    if (rc != TT_OK) {
        tt_shard_close(s);
        uv_run(loop, UV_RUN_DEFAULT);
        tt_shard_destroy(&s);
        return rc;
    }
    *out = s;
    return TT_OK;
}

const char *tt_shard_endpoint(const tt_shard_t *s) {
    return s->endpoint;
}

void tt_shard_close(tt_shard_t *s) {
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    tt_uvzmq_stop(&s->router_w);
    tt_uvzmq_stop(&s->dealer_w);
    if (s->timer.loop != NULL)
        uv_close((uv_handle_t *)&s->timer, NULL);
}

void tt_shard_destroy(tt_shard_t **sp) {
    if (sp == NULL || *sp == NULL)
        return;
    tt_shard_t *s = *sp;
    *sp = NULL;
    for (size_t j = 0; j < s->njobs; j++)
        shard_job_free(&s->jobs[j]);
    free(s->jobs);
    tt_zmq_monitor_close(s->dealer, &s->dealer_mon);
    tt_zmq_close(&s->dealer);
    tt_zmq_monitor_close(s->router, &s->router_mon);
    tt_zmq_close(&s->router);
    tt_zauth_zap_stop(&s->zap);
    if (s->zctx != NULL)
        zmq_ctx_term(s->zctx);
    memset(&s->key, 0, sizeof(s->key));
    free(s);
}
