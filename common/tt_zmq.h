/* tt_zmq: the one factory for ZeroMQ sockets and the one place that moves
 * envelopes on and off them. Every socket tether opens is made here, so
 * limits (ZMQ_MAXMSGSIZE, high-water marks), ZMTP heartbeats, routing ids,
 * ROUTER_MANDATORY/HANDOVER, ZMQ_IMMEDIATE and linger are set in one spot
 * and the cluster key's mechanism (tt_zauth). Receiving always drains every frame of a
 * multipart message, also when the envelope is rejected, so a bad message
 * can never desynchronise the frame stream.
 * Thread safety: a ZeroMQ socket belongs to one thread at a time; these
 * functions add no locking. */
#ifndef TT_ZMQ_H
#define TT_ZMQ_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "tt_wire.h"
#include "tt_zauth.h"

#define TT_ZMQ_MAX_PAYLOADS 64
#define TT_ZMQ_MAX_PEER     256

typedef struct tt_zmq_opts {
    int64_t max_msg;           /* ZMQ_MAXMSGSIZE per frame; default 16 MiB */
    int sndhwm;                /* default 1000 messages */
    int rcvhwm;                /* default 1000 messages */
    int heartbeat_ivl_ms;      /* ZMTP PING interval; default 1000 */
    int heartbeat_timeout_ms;  /* ZMTP: close after this silence; default 5000 */
    const char *routing_id;    /* DEALER only; "<role>-<id>.<incarnation>" */
    int immediate;             /* DEALER: queue only to completed connections; default 1 */
    const tt_zauth_key_t *key; /* the cluster key (borrowed, read at creation); NULL: none */
    int key_kind;              /* TT_ZAUTH_CONTROL (default) or TT_ZAUTH_BULK */
} tt_zmq_opts_t;

void tt_zmq_opts_default(tt_zmq_opts_t *o);

/* Format a stable DEALER routing id: "<role>-<id>.<incarnation>". */
int tt_zmq_routing_id(char *out, size_t n, const char *role, const char *id, uint64_t incarnation);

/* A ROUTER peer's routing id for a log line, into out (n bytes): as is
 * when it is printable (ids set with tt_zmq_routing_id), else in hex
 * ("0x0080000041"; ZeroMQ's generated ids begin with a zero byte, which
 * "%.*s" printed as nothing). Returns out. */
#define TT_ZMQ_PEER_NAME_MAX 516 /* "0x" and 255 bytes in hex, or the id itself */
const char *tt_zmq_peer_name(const void *peer, size_t len, char *out, size_t n);

/* A ROUTER bound to `endpoint` (e.g. "tcp://127.0.0.1:0" picks a free port)
 * with ROUTER_MANDATORY and ROUTER_HANDOVER. The endpoint actually bound is
 * written to `bound` when not NULL. *out owns the socket (tt_zmq_close). */
int tt_zmq_router(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, void **out, char *bound,
                  size_t boundlen, char *err, size_t errlen);

/* A DEALER connected to `endpoint`. */
int tt_zmq_dealer(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, void **out, char *err,
                  size_t errlen);

/* tt_zmq_dealer with a monitor of `events` (as tt_zmq_monitor_open, *mon)
 * that starts before the connection does, so that none of the
 * connection's events (a quick handshake's among them) are missed. */
int tt_zmq_dealer_watched(void *zctx, const char *endpoint, const tt_zmq_opts_t *o, int events,
                          void **out, void **mon, char *err, size_t errlen);

/* Linger 0, close, set *sock = NULL. Accepts NULL. */
void tt_zmq_close(void **sock);

/* One received message. For ROUTER sockets `peer` holds the routing id. */
typedef struct tt_zmq_rx {
    uint8_t peer[TT_ZMQ_MAX_PEER];
    size_t peer_len;
    tt_env_t *env;
    zmq_msg_t payload[TT_ZMQ_MAX_PAYLOADS];
    size_t npayload;
    int src_fd; /* ZMQ_SRCFD of the envelope frame, -1 if unknown */
} tt_zmq_rx_t;

/* Receive one whole message without blocking when `dontwait`. Returns 0
 * with rx->env set, TT_EAGAIN when nothing is queued, or a decode error
 * (TT_EPROTO, TT_EVERSION, TT_ETOOBIG, TT_ESIZE) with rx->peer filled so
 * the caller can answer the sender; in every case all frames were read.
 * Release with tt_zmq_rx_close. */
int tt_zmq_recv(void *sock, int is_router, int dontwait, const tt_wire_limits_t *lim,
                tt_zmq_rx_t *rx, char *err, size_t errlen);
void tt_zmq_rx_close(tt_zmq_rx_t *rx);

/* A raw payload frame to send after the envelope. With `free_fn` set the
 * buffer is handed to ZeroMQ without a copy and `free_fn(data, hint)` runs
 * later, possibly on a ZeroMQ I/O thread; without it the bytes are copied.
 * tt_zmq_send owns every payload that has a free_fn, also when it fails. */
typedef struct tt_zmq_payload {
    const void *data;
    size_t len;
    void (*free_fn)(void *data, void *hint);
    void *hint;
} tt_zmq_payload_t;

/* Send envelope + payloads (to `peer` on a ROUTER; peer NULL on a DEALER).
 * The payload sizes are written into the envelope header here. Returns 0,
 * TT_EAGAIN (would block / high-water mark), TT_EUNREACHABLE (ROUTER: no
 * such peer), TT_ENOMEM or TT_ESYS. */
int tt_zmq_send(void *sock, const void *peer, size_t peer_len, const tt_env_t *env,
                const tt_zmq_payload_t *payloads, size_t npayloads, int dontwait);

/* Opens a monitor on `sock` for the ZMQ_EVENT_* bits in `events` and
 * returns the inproc PAIR that receives them (*pair, owned by the caller,
 * closed with tt_zmq_monitor_close before `sock`). ZeroMQ sends events
 * blocking, from its I/O thread: the PAIR's queue is unbounded so that
 * events nobody reads for a while (a peer retried every 100 ms between
 * two calls) cannot stall that thread. */
int tt_zmq_monitor_open(void *zctx, void *sock, int events, void **pair, char *err, size_t errlen);

/* Stops `sock`'s monitor, then closes its PAIR (*pair = NULL). In that
 * order: an event sent to a monitor whose PAIR is gone blocks ZeroMQ's I/O
 * thread for good, and with it every socket of the context. */
void tt_zmq_monitor_close(void *sock, void **pair);

/* Reads one monitor event without blocking: TT_OK with *event (ZMQ_EVENT_*)
 * and *value (the fd for connection events), or TT_EAGAIN. */
int tt_zmq_monitor_read(void *pair, uint16_t *event, int32_t *value);

/* What a connecting socket's monitor said of its peer until a ZeroMQ
 * handshake with it completed, so that a peer this process cannot reach
 * (a wrong advertised address, a firewall) or that is no ZeroMQ peer (a
 * port where something else listens) is named, not waited on in silence.
 * Open the monitor with TT_ZMQ_REACH_EVENTS among its events. */
typedef struct tt_zmq_reach {
    uint64_t since_ms; /* when the socket began to connect */
    uint32_t tries;    /* attempts refused or failed (CONNECT_RETRIED) */
    uint32_t tcp_ups;  /* TCP connections made before a handshake */
    uint32_t refused;  /* handshakes the peer refused: our key is not its (ZAP) */
    uint32_t mismatch; /* handshakes where one side has a cluster key, the other not */
    uint32_t failed;   /* other protocol errors in a handshake; a peer that just hangs
                          up (another cluster's key, or no ZeroMQ peer) counts in
                          tcp_ups alone: the two look the same from here */
    int met;           /* a handshake completed (or the peer answered) */
} tt_zmq_reach_t;

#define TT_ZMQ_REACH_EVENTS                                                                        \
    (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |             \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

void tt_zmq_reach_init(tt_zmq_reach_t *r, uint64_t now_ms);
/* When a caller waiting up to deadline_ms names a peer not reached yet:
 * at half the deadline, at most 5 s in (a peer that long unreached is
 * misconfigured or down, and the deadline may be a minute away). */
uint64_t tt_zmq_reach_warn_after(int deadline_ms);
/* One monitor event and its value (the protocol error of a failed handshake). */
void tt_zmq_reach_event(tt_zmq_reach_t *r, uint16_t event, int32_t value);
/* Every event pending on monitor PAIR `mon` into r (others ignored). */
void tt_zmq_reach_drain(tt_zmq_reach_t *r, void *mon);
/* 1 when TCP connections were made and none completed a handshake:
 * something listens at the address, and it is no ZeroMQ peer of ours, or
 * one that refuses our key (tt_zmq_reach_why says which). */
int tt_zmq_reach_wrong_peer(const tt_zmq_reach_t *r);
/* Why `who` (e.g. "shard s0") at `endpoint`, which `what` says where it
 * came from (e.g. "its advertised address"), is not reached: a sentence
 * into buf, or "" once met. */
void tt_zmq_reach_why(const tt_zmq_reach_t *r, const char *who, const char *endpoint,
                      const char *what, uint64_t now_ms, char *buf, size_t len);

/* Nonzero when the socket has a message ready (ZMQ_EVENTS & ZMQ_POLLIN). */
int tt_zmq_readable(void *sock);

#endif
