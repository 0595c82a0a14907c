/* tt_ring_net: the sockets of one ring generation. It owns their set-up
 * (a PULL bound to this rank's endpoint and a PUSH to the right neighbour,
 * each with a socket monitor started before bind/connect, the two
 * eventfds) and the reading of connection events, which tells tt_ring
 * when a neighbour is gone. The collectives are tt_ring.c's. */
#include "tt_ring_int.h"

#include "tt_clock.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <errno.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <zmq.h>

int tt_ring_net_set_int(void *s, int opt, int v) {
    return zmq_setsockopt(s, opt, &v, sizeof(v));
}

/* Connection events a ring socket's monitor PAIR reports. */
#define RING_MON_EVENTS (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED)

/* The ring port was advertised with the generation, so it cannot change
 * now; a port held for a moment (another process probing for a free one,
 * this process's previous ring still closing) is waited out for up to 2 s
 * before the bind counts as failed. */
static int bind_patiently(void *s, const char *ep) {
    for (int i = 0;; i++) {
        if (zmq_bind(s, ep) == 0)
            return 0;
        if (zmq_errno() != EADDRINUSE || i == 40)
            return -1;
        tt_clock_sleep_ms(50);
    }
}

/* The monitor starts before bind/connect so that no connection's events
 * are missed (tt_ring_net_drain counts the PULL's connections). */
static int ring_socket(tt_ring_t *r, int type, const char *ep, int bind, int64_t maxmsg, void **out,
                       void **mon, char *err, size_t errlen) {
    void *s = zmq_socket(r->zctx, type);
    if (s == NULL)
        goto fail;
    /* Two I/O threads: PULL on thread 0, PUSH on 1, so a step's two kernel
     * copies overlap (ZeroMQ alone may put both on one thread). */
    uint64_t affinity = r->io_threads < 2 ? 0 : type == ZMQ_PULL ? 1 : 2;
    /* A new generation's ring connects to neighbours that may not have
     * bound yet; ZeroMQ retries after ZMQ_RECONNECT_IVL (100 ms by
     * default), which a regroup then waits out. 10 ms, backing off to
     * 200 ms for a neighbour that stays away. */
    if (tt_ring_net_set_int(s, ZMQ_RECONNECT_IVL, 10) ||
        tt_ring_net_set_int(s, ZMQ_RECONNECT_IVL_MAX, 200) ||
        tt_ring_net_set_int(s, ZMQ_LINGER, 0) || tt_ring_net_set_int(s, ZMQ_SNDHWM, 0) ||
        tt_ring_net_set_int(s, ZMQ_RCVHWM, 0) ||
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
        zmq_setsockopt(s, ZMQ_AFFINITY, &affinity, sizeof(affinity)))
        goto fail;
    if (tt_zmq_monitor_open(r->zctx, s, RING_MON_EVENTS, mon, err, errlen) != TT_OK) {
        zmq_close(s);
        return TT_ESYS;
    }
    if ((bind ? bind_patiently(s, ep) : zmq_connect(s, ep)) != 0)
        goto fail;
    *out = s;
    return TT_OK;
fail:
    if (err != NULL)
        snprintf(err, errlen, "rank %d: cannot %s ring socket %s: %s", r->rank,
                 bind ? "bind" : "connect", ep, zmq_strerror(zmq_errno()));
    if (s != NULL)
        zmq_close(s);
    return TT_ESYS;
}

int tt_ring_net_open(tt_ring_t *r, const tt_ring_opts_t *o, char *err, size_t errlen) {
    int rc;
    int64_t maxmsg = (int64_t)r->seg_bytes + 8192;
    const char *bind_ep = o->bind_endpoint ? o->bind_endpoint : o->endpoints[r->rank];
    r->zctx = zmq_ctx_new();
    if (r->zctx == NULL)
        return TT_ENOMEM;
    r->io_threads = o->io_threads > 0 ? o->io_threads : TT_RING_IO_THREADS_DEFAULT;
    zmq_ctx_set(r->zctx, ZMQ_IO_THREADS, r->io_threads);
    zmq_ctx_set(r->zctx, ZMQ_BLOCKY, 0);
    TT_CHECK_GOTO(ring_socket(r, ZMQ_PULL, bind_ep, 1, maxmsg, &r->pull, &r->mon_pull, err, errlen),
                  rc, out);
    TT_CHECK_GOTO(ring_socket(r, ZMQ_PUSH, o->endpoints[r->right], 0, maxmsg, &r->push,
                              &r->mon_push, err, errlen),
                  rc, out);
    r->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rc = r->evfd < 0 || tt_wake_open(&r->wake) != TT_OK ? TT_ESYS : TT_OK;
out:
    return rc;
}

/* Socket monitor events: a TCP reset from a killed peer arrives as
 * DISCONNECTED; a (re)connection clears it. Why a count on the PULL: any
 * process may connect to it, e.g. a fenced rank's previous ring reaching
 * its old neighbour's endpoint, and that stale connection's close must not
 * be taken for the left neighbour's. The left counts as gone only when no
 * accepted connection is left (*conns; NULL for the PUSH, which has one). */
void tt_ring_net_drain(void *mon, uint64_t *gone_ms, int *conns) {
    uint16_t id;
    int32_t fd;
    int rc;
    while ((rc = tt_zmq_monitor_read(mon, &id, &fd)) != TT_EAGAIN) {
        if (rc != TT_OK)
            continue;
        if (id == ZMQ_EVENT_CONNECTED || id == ZMQ_EVENT_ACCEPTED) {
            *gone_ms = 0;
            if (conns != NULL)
                (*conns)++;
        } else if (id == ZMQ_EVENT_DISCONNECTED) {
            if (conns != NULL && *conns > 0)
                (*conns)--;
            if ((conns == NULL || *conns == 0) && *gone_ms == 0)
                *gone_ms = tt_clock_mono_ms();
        }
    }
}

int tt_ring_net_gone(const tt_ring_t *r, uint64_t now, int which) {
    if ((which & TT_RING_LEFT) && r->left_gone_ms != 0 &&
        now - r->left_gone_ms > TT_RING_GONE_GRACE_MS)
        return r->left;
    if ((which & TT_RING_RIGHT) && r->right_gone_ms != 0 &&
        now - r->right_gone_ms > TT_RING_GONE_GRACE_MS)
        return r->right;
    return -1;
}

int tt_ring_neighbour_gone(tt_ring_t *r) {
    if (r->world < 2)
        return -1;
    tt_ring_net_poll(r, 0);
    return tt_ring_net_gone(r, tt_clock_mono_ms(), TT_RING_LEFT | TT_RING_RIGHT);
}

/* Sleeps until input, a monitor event, an interrupt or `tmo` ms; notes
 * disconnects and re-connections. */
void tt_ring_net_poll(tt_ring_t *r, int64_t tmo) {
    zmq_pollitem_t it[4] = {{r->pull, 0, ZMQ_POLLIN, 0},
                            {r->mon_pull, 0, ZMQ_POLLIN, 0},
                            {r->mon_push, 0, ZMQ_POLLIN, 0},
                            {NULL, tt_wake_fd(&r->wake), ZMQ_POLLIN, 0}};
    if (zmq_poll(it, 4, (long)tmo) < 0)
        return; /* EINTR: the caller just tries again */
    if (it[1].revents)
        tt_ring_net_drain(r->mon_pull, &r->left_gone_ms, &r->left_conns);
    if (it[2].revents)
        tt_ring_net_drain(r->mon_push, &r->right_gone_ms, NULL);
}
