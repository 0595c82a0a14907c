/* tt_ring_net: the life cycle and sockets of one ring generation. It owns
 * creating and destroying the tt_ring_t (with the one process-wide effect,
 * pin_malloc_thresholds, documented at tt_ring_create), its accessors, the
 * sockets' set-up (a PULL bound to this rank's endpoint and a PUSH to the
 * right neighbour, each with a socket monitor started before bind/connect,
 * the two eventfds) and the reading of connection events, which tells
 * tt_ring when a neighbour is gone. The collectives are tt_ring.c's. */
#include "tt_ring_int.h"

#include "tt_clock.h"
#include "tt_flight.h"
#include "tt_log.h"
#include "tt_ring_sched.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#define SUBSYS "ring"

int tt_ring_net_set_int(void *s, int opt, int v) {
    return zmq_setsockopt(s, opt, &v, sizeof(v));
}

/* Connection events a ring socket's monitor PAIR reports. */
#define RING_MON_EVENTS (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED | TT_ZMQ_REACH_EVENTS)

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
        zmq_setsockopt(s, ZMQ_AFFINITY, &affinity, sizeof(affinity)) ||
        tt_zauth_apply(s, &r->key, bind, TT_ZAUTH_BULK) != TT_OK)
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

/* Slots of a ring's pool. A link has up to a whole ring step's units in
 * flight when the reader is off the CPU (4 ranks on 2 cores: 64 MiB at
 * W=4 sent half its units over TCP with 8 slots, a sixth with 32); a unit
 * that finds no free slot goes over TCP, so this bounds memory, not
 * correctness. The memory is touched only as slots are first used (the
 * writer takes the lowest free one), so it is what the link needed. */
#define SHM_SLOTS 32

/* A pool that cannot be made is not an error: the ring runs over TCP. */
static void open_pool(tt_ring_t *r, int nslots) {
    char why[256] = "";
    size_t slot = (r->seg_bytes + 63) / 64 * 64;
    if (tt_shmpool_create(&r->tx, nslots > 0 ? (uint32_t)nslots : SHM_SLOTS, slot, why,
                          sizeof(why)) != TT_OK)
        TT_INFO(SUBSYS, "gen=%llu rank %d: no shared memory for the ring (%s): TCP only",
                (unsigned long long)r->gen, r->rank, why);
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
    if (o->key != NULL)
        r->key = *o->key;
    char who[64];
    snprintf(who, sizeof(who), "ring rank %d (gen=%llu)", r->rank, (unsigned long long)r->gen);
    TT_CHECK_GOTO(tt_zauth_zap_start(r->zctx, &r->key, who, &r->zap, err, errlen), rc, out);
    TT_CHECK_GOTO(ring_socket(r, ZMQ_PULL, bind_ep, 1, maxmsg, &r->pull, &r->mon_pull, err, errlen),
                  rc, out);
    tt_zmq_reach_init(&r->right_reach, tt_clock_mono_ms());
    snprintf(r->right_ep, sizeof(r->right_ep), "%s", o->endpoints[r->right]);
    TT_CHECK_GOTO(ring_socket(r, ZMQ_PUSH, o->endpoints[r->right], 0, maxmsg, &r->push,
                              &r->mon_push, err, errlen),
                  rc, out);
    r->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rc = r->evfd < 0 || tt_wake_open(&r->wake) != TT_OK ? TT_ESYS : TT_OK;
    r->links = calloc(((size_t)r->world + 7) / 8, 1);
    if (r->links == NULL)
        rc = TT_ENOMEM;
    r->tcp_only = o->tcp_only;
    if (rc == TT_OK && !o->tcp_only)
        open_pool(r, o->shm_slots);
out:
    return rc;
}

/* Socket monitor events: a TCP reset from a killed peer arrives as
 * DISCONNECTED; a (re)connection clears it. Why a count on the PULL: any
 * process may connect to it, e.g. a fenced rank's previous ring reaching
 * its old neighbour's endpoint, and that stale connection's close must not
 * be taken for the left neighbour's. The left counts as gone only when no
 * accepted connection is left (*conns; NULL for the PUSH, which has one). */
void tt_ring_net_drain(void *mon, uint64_t *gone_ms, int *conns, tt_zmq_reach_t *reach) {
    uint16_t id;
    int32_t fd;
    int rc;
    while ((rc = tt_zmq_monitor_read(mon, &id, &fd)) != TT_EAGAIN) {
        if (rc != TT_OK)
            continue;
        if (reach != NULL)
            tt_zmq_reach_event(reach, id, fd);
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
        tt_ring_net_drain(r->mon_pull, &r->left_gone_ms, &r->left_conns, NULL);
    if (it[2].revents)
        tt_ring_net_drain(r->mon_push, &r->right_gone_ms, NULL, &r->right_reach);
}

/* ---- life cycle and accessors ---- */

static int check_opts(const tt_ring_opts_t *o, char *err, size_t errlen) {
    const char *why = NULL;
    if (o == NULL || o->world < 1 || o->rank < 0 || o->rank >= o->world)
        why = "rank/world out of range";
    else if (o->world > 1 && o->endpoints == NULL)
        why = "endpoints missing";
    else if (o->deadline_ms < 0)
        why = "negative deadline";
    else if (o->shm_slots < 0 || o->shm_slots > TT_SHMPOOL_MAX_SLOTS)
        why = "shm_slots out of range";
    for (int i = 0; why == NULL && o->world > 1 && i < o->world; i++)
        if (o->endpoints[i] == NULL)
            why = "an endpoint is NULL";
    if (why != NULL && err != NULL)
        snprintf(err, errlen, "tt_ring_create: %s", why);
    return why == NULL ? TT_OK : TT_EINVAL;
}

/* Why: tt_ring_create in the header. Idempotent, so every ring may do it. */
static void pin_malloc_thresholds(const tt_ring_opts_t *o) {
#ifdef __GLIBC__
    if (!o->keep_malloc_settings && o->world > 1 &&
        (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, 64 << 20)))
        TT_DEBUG(SUBSYS, "mallopt refused the ring's malloc thresholds");
#endif
    (void)o;
}

int tt_ring_create(tt_ring_t **out, const tt_ring_opts_t *o, char *err, size_t errlen) {
    int rc = check_opts(o, err, errlen);
    if (out == NULL || rc != TT_OK)
        return TT_EINVAL;
    *out = NULL;
    tt_ring_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return TT_ENOMEM;
    r->rank = o->rank;
    r->world = o->world;
    r->left = (o->rank + o->world - 1) % o->world;
    r->right = (o->rank + 1) % o->world;
    r->gen = o->generation;
    r->job = o->job_tag;
    r->deadline_ms = o->deadline_ms > 0 ? o->deadline_ms : TT_RING_DEADLINE_DEFAULT_MS;
    r->wait_ivl_ms = r->deadline_ms / 10 < 10 ? 10 : r->deadline_ms / 10;
    if (r->wait_ivl_ms > 1000)
        r->wait_ivl_ms = 1000;
    r->seg_bytes = o->segment_bytes ? o->segment_bytes : TT_RING_SEG_BYTES_DEFAULT;
    r->step = -1;
    r->idle = o->idle;
    r->idle_ctx = o->idle_ctx;
    r->suspect = -1;
    r->evfd = -1;
    atomic_init(&r->zc_pending, 0);
    tt_wake_init(&r->wake);
    TT_CHECK_GOTO(tt_flight_create(&r->flight, o->flight_capacity), rc, fail);
    pin_malloc_thresholds(o);
    if (r->world > 1)
        TT_CHECK_GOTO(tt_ring_net_open(r, o, err, errlen), rc, fail);
    TT_INFO(SUBSYS, "ring gen=%llu rank %d/%d up (left %d, right %d)", (unsigned long long)r->gen,
            r->rank, r->world, r->left, r->right);
    *out = r;
    return TT_OK;
fail:
    tt_ring_destroy(&r);
    return rc;
}

void tt_ring_destroy(tt_ring_t **rp) {
    if (rp == NULL || *rp == NULL)
        return;
    tt_ring_t *r = *rp;
    if (r->shm_units + r->tcp_units > 0)
        TT_DEBUG(SUBSYS,
                 "gen=%llu rank %d: %llu data unit(s) sent through shared memory, %llu over TCP",
                 (unsigned long long)r->gen, r->rank, (unsigned long long)r->shm_units,
                 (unsigned long long)r->tcp_units);
    tt_zmq_monitor_close(r->push, &r->mon_push);
    tt_zmq_monitor_close(r->pull, &r->mon_pull);
    if (r->push != NULL) { /* bounded linger: flush our last frames or ABORT */
        tt_ring_net_set_int(r->push, ZMQ_LINGER, r->failed ? 500 : 2000);
        zmq_close(r->push); /* not tt_zmq_close, which sets linger 0 */
    }
    if (r->stashed)
        zmq_msg_close(&r->stash.body);
    tt_zmq_close(&r->pull);
    tt_zauth_zap_stop(&r->zap);
    if (r->zctx != NULL)
        zmq_ctx_term(r->zctx); /* returns once every zero-copy frame is freed */
    memset(&r->key, 0, sizeof(r->key));
    if (r->evfd >= 0)
        close(r->evfd);
    tt_wake_close(&r->wake);
    tt_flight_destroy(&r->flight);
    tt_shmpool_destroy(&r->tx);
    tt_shmpool_destroy(&r->rx);
    free(r->links);
    free(r);
    *rp = NULL;
}

void tt_ring_interrupt(tt_ring_t *r) {
    if (r == NULL)
        return;
    tt_wake_raise(&r->wake);
}

void tt_ring_set_step(tt_ring_t *r, int64_t step) {
    r->step = step;
}

int tt_ring_status(const tt_ring_t *r) {
    return r->failed;
}
const char *tt_ring_last_error(const tt_ring_t *r) {
    return r->err;
}
int tt_ring_uses_shm(const tt_ring_t *r) {
    return r->shm_tx;
}

void tt_ring_units(const tt_ring_t *r, uint64_t *shm, uint64_t *tcp) {
    *shm = r->shm_units;
    *tcp = r->tcp_units;
}

int tt_ring_suspect(const tt_ring_t *r) {
    return r->suspect;
}

uint64_t tt_ring_dropped_stale(const tt_ring_t *r) {
    return r->dropped_stale;
}

uint64_t tt_ring_dropped_foreign(const tt_ring_t *r) {
    return r->dropped_foreign;
}

char *tt_ring_dump(tt_ring_t *r, size_t max) {
    char who[64];
    snprintf(who, sizeof(who), "rank %d gen %llu", r->rank, (unsigned long long)r->gen);
    return tt_flight_dump(r->flight, who, tt_clock_mono_ns(), max);
}
