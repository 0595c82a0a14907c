/* tt_zmq: socket construction and envelope framing. */
#include "tt_zmq.h"
#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

void tt_zmq_opts_default(tt_zmq_opts_t *o) {
    memset(o, 0, sizeof(*o));
    o->max_msg = 16 << 20;
    o->sndhwm = 1000;
    o->rcvhwm = 1000;
    o->heartbeat_ivl_ms = 1000;
    o->heartbeat_timeout_ms = 5000;
    o->immediate = 1;
}

int tt_zmq_routing_id(char *out, size_t n, const char *role, const char *id, uint64_t incarnation) {
    int w = snprintf(out, n, "%s-%s.%" PRIu64, role, id, incarnation);
    return (w < 0 || (size_t)w >= n || (size_t)w > TT_WIRE_MAX_ID) ? TT_EINVAL : TT_OK;
}

const char *tt_zmq_peer_name(const void *peer, size_t len, char *out, size_t n) {
    const unsigned char *b = peer;
    size_t printable = len > 0;
    for (size_t i = 0; i < len && printable; i++)
        printable = b[i] >= 0x20 && b[i] < 0x7f;
    if (printable) {
        snprintf(out, n, "%.*s", (int)len, (const char *)b);
        return out;
    }
    size_t at = (size_t)snprintf(out, n, len ? "0x" : "(no id)");
    for (size_t i = 0; i < len && at + 2 < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%02x", b[i]);
    return out;
}

static int set_int(void *s, int opt, int v) {
    return zmq_setsockopt(s, opt, &v, sizeof(v));
}

static int apply_common(void *s, const tt_zmq_opts_t *o) {
    int64_t maxmsg = o->max_msg;
    int rc = zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    rc |= set_int(s, ZMQ_SNDHWM, o->sndhwm);
    rc |= set_int(s, ZMQ_RCVHWM, o->rcvhwm);
    rc |= set_int(s, ZMQ_LINGER, 0);
    if (o->heartbeat_ivl_ms > 0) {
        rc |= set_int(s, ZMQ_HEARTBEAT_IVL, o->heartbeat_ivl_ms);
        rc |= set_int(s, ZMQ_HEARTBEAT_TIMEOUT, o->heartbeat_timeout_ms);
        rc |= set_int(s, ZMQ_HEARTBEAT_TTL, o->heartbeat_timeout_ms);
    }
    return rc == 0 ? TT_OK : TT_ESYS;
}

int tt_zmq_router(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, void **out, char *bound,
                  size_t boundlen, char *err, size_t errlen) {
    tt_zmq_opts_t def;
    if (o == NULL) {
        tt_zmq_opts_default(&def);
        o = &def;
    }
    *out = NULL;
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    if (s == NULL) {
        ZSET_ERR(err, errlen, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
        return TT_ESYS;
    }
    /* ZeroMQ's listen backlog defaults to 100: thousands of workers
     * connecting at once then see dropped SYNs and seconds of retries. */
    if (apply_common(s, o) != TT_OK || set_int(s, ZMQ_ROUTER_MANDATORY, 1) != 0 ||
        set_int(s, ZMQ_ROUTER_HANDOVER, 1) != 0 || set_int(s, ZMQ_BACKLOG, 4096) != 0 ||
        tt_zauth_apply(s, o->key, 1, o->key_kind) != TT_OK) {
        ZSET_ERR(err, errlen, "setting ROUTER options: %s", zmq_strerror(errno));
        zmq_close(s);
        return TT_ESYS;
    }
    if (zmq_bind(s, endpoint) != 0) {
        ZSET_ERR(err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror(errno));
        zmq_close(s);
        return TT_ESYS;
    }
    if (bound != NULL && boundlen > 0) {
        size_t len = boundlen;
        if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len) != 0)
            snprintf(bound, boundlen, "%s", endpoint);
    }
    *out = s;
    return TT_OK;
}

/* tt_zmq_dealer, and tt_zmq_dealer_watched when mon is not NULL. */
static int dealer_open(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, int events,
                       void **out, void **mon, char *err, size_t errlen) {
    tt_zmq_opts_t def;
    if (o == NULL) {
        tt_zmq_opts_default(&def);
        o = &def;
    }
    *out = NULL;
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    if (s == NULL) {
        ZSET_ERR(err, errlen, "zmq_socket(DEALER): %s", zmq_strerror(errno));
        return TT_ESYS;
    }
    int rc = apply_common(s, o);
    if (rc == TT_OK)
        rc = tt_zauth_apply(s, o->key, 0, o->key_kind);
    if (rc == TT_OK && o->immediate)
        rc = set_int(s, ZMQ_IMMEDIATE, 1) == 0 ? TT_OK : TT_ESYS;
    if (rc == TT_OK && o->routing_id != NULL)
        rc = zmq_setsockopt(s, ZMQ_ROUTING_ID, o->routing_id, strlen(o->routing_id)) == 0 ? TT_OK
                                                                                          : TT_ESYS;
    if (rc == TT_OK && mon != NULL &&
        tt_zmq_monitor_open(zctx, s, events, mon, err, errlen) != TT_OK) {
        zmq_close(s);
        return TT_ESYS;
    }
    if (rc != TT_OK || zmq_connect(s, endpoint) != 0) {
        ZSET_ERR(err, errlen, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
        if (mon != NULL)
            tt_zmq_monitor_close(s, mon);
        zmq_close(s);
        return TT_ESYS;
    }
    *out = s;
    return TT_OK;
}

int tt_zmq_dealer(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, void **out, char *err,
                  size_t errlen) {
    return dealer_open(zctx, endpoint, o, 0, out, NULL, err, errlen);
}

int tt_zmq_dealer_watched(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, int events,
                          void **out, void **mon, char *err, size_t errlen) {
    *mon = NULL;
    return dealer_open(zctx, endpoint, o, events, out, mon, err, errlen);
}

void tt_zmq_close(void **sock) {
    if (sock == NULL || *sock == NULL)
        return;
    set_int(*sock, ZMQ_LINGER, 0);
    zmq_close(*sock);
    *sock = NULL;
}

int tt_zmq_readable(void *sock) {
    int events = 0;
    size_t len = sizeof(events);
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLIN) != 0;
}

static int more_frames(void *sock) {
    int more = 0;
    size_t len = sizeof(more);
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len);
    return more;
}

/* Read and drop whatever is left of the current multipart message. */
static void drain_rest(void *sock) {
    while (more_frames(sock)) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

static int recv_peer(void *sock, int dontwait, tt_zmq_rx_t *rx) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, dontwait ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&m);
        return errno == EAGAIN ? TT_EAGAIN : TT_ESYS;
    }
    size_t n = zmq_msg_size(&m);
    rx->peer_len = n < TT_ZMQ_MAX_PEER ? n : TT_ZMQ_MAX_PEER;
    memcpy(rx->peer, zmq_msg_data(&m), rx->peer_len);
    zmq_msg_close(&m);
    return TT_OK;
}

static int recv_payloads(void *sock, tt_zmq_rx_t *rx, size_t *lens) {
    while (more_frames(sock)) {
        if (rx->npayload == TT_ZMQ_MAX_PAYLOADS) {
            drain_rest(sock);
            return TT_ETOOBIG;
        }
        zmq_msg_t *p = &rx->payload[rx->npayload];
        zmq_msg_init(p);
        if (zmq_msg_recv(p, sock, 0) < 0) {
            zmq_msg_close(p);
            return TT_ESYS;
        }
        lens[rx->npayload++] = zmq_msg_size(p);
    }
    return TT_OK;
}

int tt_zmq_recv(void *sock, int is_router, int dontwait, const tt_wire_limits_t *lim,
                tt_zmq_rx_t *rx, char *err, size_t errlen) {
    memset(rx, 0, offsetof(tt_zmq_rx_t, payload));
    rx->npayload = 0;
    rx->src_fd = -1;
    int rc = is_router ? recv_peer(sock, dontwait, rx) : TT_OK;
    if (rc != TT_OK)
        return rc;
    if (is_router && !more_frames(sock)) {
        ZSET_ERR(err, errlen, "message without an envelope frame");
        return TT_EPROTO;
    }
    zmq_msg_t env;
    zmq_msg_init(&env);
    int flags = (!is_router && dontwait) ? ZMQ_DONTWAIT : 0;
    if (zmq_msg_recv(&env, sock, flags) < 0) {
        zmq_msg_close(&env);
        return errno == EAGAIN ? TT_EAGAIN : TT_ESYS;
    }
    rx->src_fd = zmq_msg_get(&env, ZMQ_SRCFD);
    size_t lens[TT_ZMQ_MAX_PAYLOADS];
    rc = recv_payloads(sock, rx, lens);
    if (rc == TT_ETOOBIG)
        ZSET_ERR(err, errlen, "more than %d payload frames", TT_ZMQ_MAX_PAYLOADS);
    if (rc == TT_OK)
        rc = tt_wire_decode(zmq_msg_data(&env), zmq_msg_size(&env), lens, rx->npayload, lim,
                            &rx->env, err, errlen);
    zmq_msg_close(&env);
    if (rc != TT_OK) {
        for (size_t i = 0; i < rx->npayload; i++)
            zmq_msg_close(&rx->payload[i]);
        rx->npayload = 0;
    }
    return rc;
}

void tt_zmq_rx_close(tt_zmq_rx_t *rx) {
    if (rx == NULL)
        return;
    tt_wire_free(&rx->env);
    for (size_t i = 0; i < rx->npayload; i++)
        zmq_msg_close(&rx->payload[i]);
    rx->npayload = 0;
}

static int send_errno(void) {
    if (errno == EAGAIN)
        return TT_EAGAIN;
    if (errno == EHOSTUNREACH)
        return TT_EUNREACHABLE;
    return TT_ESYS;
}

static int send_frame(void *sock, const void *data, size_t len, void (*free_fn)(void *, void *),
                      void *hint, int flags) {
    zmq_msg_t m;
    if (free_fn != NULL) {
        if (zmq_msg_init_data(&m, (void *)data, len, free_fn, hint) != 0)
            return TT_ENOMEM;
    } else {
        if (zmq_msg_init_size(&m, len) != 0)
            return TT_ENOMEM;
        if (len > 0)
            memcpy(zmq_msg_data(&m), data, len);
    }
    if (zmq_msg_send(&m, sock, flags) < 0) {
        int rc = send_errno();
        zmq_msg_close(&m);
        return rc;
    }
    return TT_OK;
}

int tt_zmq_send(void *sock, const void *peer, size_t peer_len, const tt_env_t *env,
                const tt_zmq_payload_t *payloads, size_t npayloads, int dontwait) {
    if (npayloads > TT_ZMQ_MAX_PAYLOADS)
        return TT_EINVAL;
    uint64_t sizes[TT_ZMQ_MAX_PAYLOADS];
    tt_env_t copy = *env;
    for (size_t i = 0; i < npayloads; i++)
        sizes[i] = payloads[i].len;
    copy.n_payload_sizes = npayloads;
    copy.payload_sizes = npayloads ? sizes : NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tt_wire_encode(&copy, &buf, &len);
    if (rc != TT_OK)
        return rc;
    int base = dontwait ? ZMQ_DONTWAIT : 0;
    if (peer != NULL)
        rc = send_frame(sock, peer, peer_len, NULL, NULL, base | ZMQ_SNDMORE);
    /* Envelopes are small: copying keeps ownership simple. */
    if (rc == TT_OK)
        rc = send_frame(sock, buf, len, NULL, NULL, base | (npayloads ? ZMQ_SNDMORE : 0));
    size_t i = 0;
    for (; rc == TT_OK && i < npayloads; i++) {
        const tt_zmq_payload_t *p = &payloads[i];
        int more = i + 1 < npayloads ? ZMQ_SNDMORE : 0;
        rc = send_frame(sock, p->data, p->len, p->free_fn, p->hint, base | more);
    }
    /* Payloads never handed to ZeroMQ are still ours to release. */
    for (; rc != TT_OK && i < npayloads; i++) {
        if (payloads[i].free_fn != NULL)
            payloads[i].free_fn((void *)payloads[i].data, payloads[i].hint);
    }
    free(buf);
    return rc;
}

int tt_zmq_monitor_open(void *zctx, void *sock, int events, void **pair, char *err, size_t errlen) {
    char ep[96];
    *pair = NULL;
    /* The time keeps a name from being used twice: a socket made after
     * another was closed may get its address, and the old monitor's
     * socket is closed (its name released) asynchronously. */
    snprintf(ep, sizeof(ep), "inproc://tt-monitor-%p-%llu", sock,
             (unsigned long long)tt_clock_mono_ns());
    if (zmq_socket_monitor(sock, ep, events) != 0) {
        ZSET_ERR(err, errlen, "zmq_socket_monitor: %s", zmq_strerror(errno));
        return TT_ESYS;
    }
    void *p = zmq_socket(zctx, ZMQ_PAIR);
    if (p == NULL || set_int(p, ZMQ_LINGER, 0) != 0 || set_int(p, ZMQ_RCVHWM, 0) != 0 ||
        zmq_connect(p, ep) != 0) {
        ZSET_ERR(err, errlen, "monitor connect %s: %s", ep, zmq_strerror(errno));
        if (p != NULL)
            zmq_close(p);
        zmq_socket_monitor(sock, NULL, 0);
        return TT_ESYS;
    }
    *pair = p;
    return TT_OK;
}

void tt_zmq_monitor_close(void *sock, void **pair) {
    if (pair == NULL || *pair == NULL)
        return;
    if (sock != NULL)
        zmq_socket_monitor(sock, NULL, 0);
    tt_zmq_close(pair);
}

int tt_zmq_monitor_read(void *pair, uint16_t *event, int32_t *value) {
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, pair, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return TT_EAGAIN;
    }
    int rc = TT_EPROTO;
    if (zmq_msg_size(&ev) >= 6) {
        const uint8_t *d = zmq_msg_data(&ev);
        memcpy(event, d, sizeof(*event));
        memcpy(value, d + 2, sizeof(*value));
        rc = TT_OK;
    }
    int more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    if (more)
        drain_rest(pair);
    return rc;
}

void tt_zmq_reach_init(tt_zmq_reach_t *r, uint64_t now_ms) {
    *r = (tt_zmq_reach_t){.since_ms = now_ms};
}

uint64_t tt_zmq_reach_warn_after(int deadline_ms) {
    uint64_t half = deadline_ms > 0 ? (uint64_t)deadline_ms / 2 : 0;
    return half < 5000 ? half : 5000;
}

void tt_zmq_reach_event(tt_zmq_reach_t *r, uint16_t event, int32_t value) {
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        r->met = 1;
    if (r->met)
        return;
    if (event == ZMQ_EVENT_CONNECT_RETRIED)
        r->tries++;
    else if (event == ZMQ_EVENT_CONNECTED)
        r->tcp_ups++;
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        r->refused++;
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
             value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        r->mismatch++;
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        r->failed++;
}

void tt_zmq_reach_drain(tt_zmq_reach_t *r, void *mon) {
    uint16_t ev;
    int32_t val;
    int rc;
    while (mon != NULL && (rc = tt_zmq_monitor_read(mon, &ev, &val)) != TT_EAGAIN) {
        if (rc == TT_OK)
            tt_zmq_reach_event(r, ev, val);
    }
}

int tt_zmq_reach_wrong_peer(const tt_zmq_reach_t *r) {
    return r->tcp_ups > 0 && !r->met;
}

void tt_zmq_reach_why(const tt_zmq_reach_t *r, const char *who, const char *endpoint,
                      const char *what, uint64_t now_ms, char *buf, size_t len) {
    unsigned long long ms = now_ms > r->since_ms ? (unsigned long long)(now_ms - r->since_ms) : 0;
    if (r->met)
        snprintf(buf, len, "%s", "");
    else if (r->refused > 0)
        snprintf(buf, len,
                 "%s at %s (%s) refused this process's key %u time(s) in %llu ms: give every "
                 "process of the cluster the same key file (TETHER_KEY_FILE)",
                 who, endpoint, what, r->refused, ms);
    else if (r->mismatch > 0)
        snprintf(buf, len,
                 "%s at %s (%s) and this process disagree on security (%u handshake(s) in %llu "
                 "ms): one of the two has a cluster key file and the other not; set "
                 "TETHER_KEY_FILE on every process of the cluster, or on none",
                 who, endpoint, what, r->mismatch, ms);
    else if (r->failed > 0)
        snprintf(buf, len,
                 "%s at %s (%s) failed %u ZeroMQ handshake(s) in %llu ms: the two do not hold the "
                 "same cluster key file (TETHER_KEY_FILE: one has none, or another cluster's)",
                 who, endpoint, what, r->failed, ms);
    else if (r->tcp_ups > 0) /* a peer with another key hangs up as an HTTP server does */
        snprintf(buf, len,
                 "%s at %s (%s) took %u TCP connection(s) in %llu ms and completed no ZeroMQ "
                 "handshake: is something else listening there, or a process with another "
                 "cluster key file (TETHER_KEY_FILE) than this one?",
                 who, endpoint, what, r->tcp_ups, ms);
    else
        snprintf(buf, len,
                 "cannot connect to %s at %s (%s; %u attempt(s) failed in %llu ms): is it "
                 "running, and reachable from this host?",
                 who, endpoint, what, r->tries, ms);
}
