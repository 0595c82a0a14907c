/* tt_ring_int: what tt_ring.c, tt_ring_msg.c and tt_ring_net.c share: the
 * ring's state, a received message, the message I/O and the socket
 * helpers. Private to worker/; users see tt_ring.h. */
#ifndef TT_RING_INT_H
#define TT_RING_INT_H

#include "tt_collseq.h"
#include "tt_flight.h"
#include "tt_ring.h"
#include "tt_shmpool.h"
#include "tt_wake.h"
#include "tt_zmq.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define TT_RING_ERRLEN 512

/* A received message. DATA: its payload is at data/len, in the body frame
 * or (slot >= 0) in the left neighbour's shared-memory slot, which stays
 * the left's until tt_ring_msg_done releases it. */
typedef struct tt_ring_rx {
    tt_collseq_hdr_t h;
    zmq_msg_t body;
    const char *data;
    size_t len;
    int slot;
    int has_side; /* TT_COLLSEQ_F_SIDE: the sender's running sum */
    int64_t side;
} tt_ring_rx_t;

struct tt_ring {
    int rank, world, left, right;
    uint64_t gen, seq_counter;
    int deadline_ms, wait_ivl_ms, io_threads;
    size_t seg_bytes;
    int64_t step;
    void *zctx, *pull, *push, *mon_pull, *mon_push;
    tt_zauth_key_t key;     /* the cluster key; off: none */
    tt_zauth_zap_t *zap;    /* admits holders of `key` to the PULL */
    int evfd;               /* zero-copy releases */
    tt_wake_t wake;         /* tt_ring_interrupt */
    int ready;              /* handshake done: every link ends in this generation */
    atomic_long zc_pending; /* zero-copy frames ZeroMQ still references */
    uint64_t left_gone_ms, right_gone_ms;
    int left_conns; /* connections accepted on the PULL and still open */
    /* The PUSH's way to the right: a neighbour whose advertised address
     * does not reach it is named in the handshake (warned once). */
    tt_zmq_reach_t right_reach;
    int right_warned;
    char right_ep[256];
    tt_flight_t *flight;
    void (*idle)(void *ctx); /* tt_ring_opts_t.idle */
    void *idle_ctx;
    int failed, suspect;
    uint64_t dropped_stale, dropped_foreign;
    uint64_t job; /* tt_ring_opts_t.job_tag */
    /* Shared memory to the right (tx, ours) and from the left (rx, the
     * left's, mapped in the handshake); links: one bit per rank, "it
     * mapped its left's pool", from the handshake; shm_tx/shm_rx: this
     * rank's two links use them (its right's bit, its own). */
    tt_shmpool_t *tx, *rx;
    uint8_t *links;
    int shm_tx, shm_rx, tcp_only;
    uint64_t shm_units, tcp_units; /* DATA units sent each way */
    /* A payload read from the socket while notes of earlier units were
     * still ahead of its own (tt_ring_msg_next). */
    tt_ring_rx_t stash;
    int stashed;
    char err[TT_RING_ERRLEN];
};

/* ---- message I/O (tt_ring_msg.c) ---- */

/* Sends one message to the right: DATA from data/len or, with fwd, a
 * received unit passed on (borrowed); side: the int64 it carries. On a
 * shared-memory link a DATA unit goes as a note. Never blocks on the
 * socket; waits for queue room only behind a stopped reader. TT_OK,
 * TT_ENOMEM or TT_EUNREACHABLE. */
int tt_ring_msg_send(tt_ring_t *r, const tt_collseq_hdr_t *h, const void *data, size_t len,
                     tt_ring_rx_t *fwd, const int64_t *side);

/* Reads one whole message from the socket without blocking: 1 (m->body
 * then the caller's), 0 when none is queued, <0 with the reason in why. */
int tt_ring_msg_read(tt_ring_t *r, tt_ring_rx_t *m, char *why, size_t whylen);

/* On a shared-memory link: the next message in the link's order (a
 * noted DATA unit, or whatever the socket has), 1/0/<0 as above. */
int tt_ring_msg_next(tt_ring_t *r, tt_ring_rx_t *m, char *why, size_t whylen);

/* Points data/len at a socket message's body. TT_OK or TT_EPROTO. */
int tt_ring_msg_payload(tt_ring_rx_t *m, char *why, size_t whylen);

/* Sleeps until input may be there (the socket, or the doorbell on a
 * shared-memory link), a monitor event, an interrupt or `tmo` ms. */
void tt_ring_msg_wait(tt_ring_t *r, int64_t tmo);

/* Gives a received message back (its frame, its slot). */
void tt_ring_msg_done(tt_ring_t *r, tt_ring_rx_t *m);

/* *dst takes *src's message; *src is left empty. */
void tt_ring_msg_move(tt_ring_rx_t *dst, tt_ring_rx_t *src);

/* After a failure: closes the PUSH and waits (bounded) until ZeroMQ
 * holds no frame of the caller's buffer. */
void tt_ring_msg_release_all(tt_ring_t *r);

/* Creates the context, the PULL and PUSH with their monitors, and the
 * eventfds. TT_OK, TT_ENOMEM or TT_ESYS (err names the endpoint). */
int tt_ring_net_open(tt_ring_t *r, const tt_ring_opts_t *o, char *err, size_t errlen);

/* zmq_setsockopt of an int; 0 on success. */
int tt_ring_net_set_int(void *s, int opt, int v);

/* Reads every pending monitor event of `mon` into *gone_ms (when the peer
 * went away, 0 while connected) and `reach` (the PUSH's; NULL for the
 * PULL); `conns` counts a PULL's connections
 * (NULL for the PUSH). */
void tt_ring_net_drain(void *mon, uint64_t *gone_ms, int *conns, tt_zmq_reach_t *reach);

/* Sleeps until input, a monitor event, an interrupt or `tmo` ms. */
void tt_ring_net_poll(tt_ring_t *r, int64_t tmo);

/* A neighbour's disconnect counts only after this long, so that an ABORT
 * already in the socket (which names the rank that really failed) is read
 * first: a failing rank queues it before it closes anything. */
#define TT_RING_GONE_GRACE_MS 100
#define TT_RING_LEFT          1
#define TT_RING_RIGHT         2

/* The rank of a neighbour among `which` (TT_RING_LEFT | TT_RING_RIGHT)
 * whose connection has been gone for longer than the grace at `now`, the
 * left one first; -1 when none. */
int tt_ring_net_gone(const tt_ring_t *r, uint64_t now, int which);

#endif
