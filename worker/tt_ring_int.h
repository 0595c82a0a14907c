/* tt_ring_int: what tt_ring.c and tt_ring_net.c share: the ring's state
 * and the socket helpers. Private to worker/; users see tt_ring.h. */
#ifndef TT_RING_INT_H
#define TT_RING_INT_H

#include "tt_flight.h"
#include "tt_ring.h"
#include "tt_shmpool.h"
#include "tt_wake.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TT_RING_ERRLEN 512

struct tt_ring {
    int rank, world, left, right;
    uint64_t gen, seq_counter;
    int deadline_ms, wait_ivl_ms, io_threads;
    size_t seg_bytes;
    int64_t step;
    void *zctx, *pull, *push, *mon_pull, *mon_push;
    int evfd;               /* zero-copy releases */
    tt_wake_t wake;         /* tt_ring_interrupt */
    int ready;              /* handshake done: every link ends in this generation */
    atomic_long zc_pending; /* zero-copy frames ZeroMQ still references */
    uint64_t left_gone_ms, right_gone_ms;
    int left_conns; /* connections accepted on the PULL and still open */
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
    char err[TT_RING_ERRLEN];
};

/* Creates the context, the PULL and PUSH with their monitors, and the
 * eventfds. TT_OK, TT_ENOMEM or TT_ESYS (err names the endpoint). */
int tt_ring_net_open(tt_ring_t *r, const tt_ring_opts_t *o, char *err, size_t errlen);

/* zmq_setsockopt of an int; 0 on success. */
int tt_ring_net_set_int(void *s, int opt, int v);

/* Reads every pending monitor event of `mon` into *gone_ms (when the peer
 * went away, 0 while connected); `conns` counts a PULL's connections
 * (NULL for the PUSH). */
void tt_ring_net_drain(void *mon, uint64_t *gone_ms, int *conns);

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
