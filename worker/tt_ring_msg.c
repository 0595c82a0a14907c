/* tt_ring_msg: how one ring message leaves a rank and reaches its right
 * neighbour: [64-byte tt_collseq header][body][optional int64 frame] over
 * the ZeroMQ PUSH/PULL pair, and, on a link that uses shared memory, DATA
 * units as notes in the sender's pool (tt_shmpool): the payload in a slot,
 * the header in the note queue, the reader woken by the pool's futex
 * doorbell. ZeroMQ costs a unit three thread wake-ups (the sender's I/O
 * thread, the reader's I/O thread, the reader); a note costs one, and no
 * frame for the I/O threads to release. On such a link every DATA unit
 * gets a note, in order: one whose payload found no slot says so and the
 * payload follows over the socket, so the reader never has to merge two
 * orders. Control messages (HELLO, READY, WAIT, ABORT) always take the
 * socket. It also owns the zero-copy bookkeeping (a collective returns once
 * ZeroMQ has let go of every frame). What a message means is tt_ring.c's. */
#include "tt_ring_int.h"
#include "tt_tsan.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define ZC_MIN_BYTES ((size_t)32 << 10) /* below this a copy is cheaper */
/* A reader asleep on the doorbell still looks at its sockets (WAIT, ABORT,
 * a neighbour's disconnect, tt_ring_interrupt) this often. */
#define NOTE_POLL_MS 5
#define POST_NAP_NS  100000

/* ZeroMQ calls this from an I/O thread once it is done with a frame (large
 * frames: written to the socket; small ones: copied into its output batch);
 * the last release wakes a collective waiting in wait_released. Copied
 * frames are tracked too, so a collective returns only after the I/O thread
 * has taken everything it sent. */
static void zc_release(void *data, void *hint) {
    tt_ring_t *r = hint;
    (void)data;
    TT_TSAN_ACQUIRE(r);
    if (atomic_fetch_sub(&r->zc_pending, 1) == 1) {
        uint64_t one = 1;
        ssize_t n = write(r->evfd, &one, sizeof(one));
        (void)n; /* counter saturation cannot happen: we read it back */
    }
}

static void copy_release(void *data, void *hint) {
    TT_TSAN_ACQUIRE(data);
    free(data);
    zc_release(NULL, hint);
}

void tt_ring_msg_done(tt_ring_t *r, tt_ring_rx_t *m) {
    zmq_msg_close(&m->body);
    if (m->slot >= 0)
        tt_shmpool_release(r->rx, m->slot);
    m->slot = -1;
}

void tt_ring_msg_move(tt_ring_rx_t *dst, tt_ring_rx_t *src) {
    *dst = *src;
    zmq_msg_init(&dst->body);
    zmq_msg_move(&dst->body, &src->body);
    zmq_msg_close(&src->body);
    if (dst->slot < 0)
        dst->data = zmq_msg_data(&dst->body);
}

/* Payload: a received frame passed on (shared by reference count, never in
 * the caller's buffer, so untracked), the caller's bytes, or a copy (small
 * ones, and `copy` set: bytes that do not outlive this call). */
static int make_body(tt_ring_t *r, zmq_msg_t *m, const void *data, size_t len, zmq_msg_t *fwd,
                     int must_copy) {
    if (fwd != NULL) {
        zmq_msg_init(m);
        if (zmq_msg_copy(m, fwd) == 0)
            return TT_OK;
        zmq_msg_close(m);
        return TT_EUNREACHABLE;
    }
    int small = len < ZC_MIN_BYTES || must_copy;
    void *copy = small ? malloc(len > 0 ? len : 1) : NULL;
    if (small && copy == NULL)
        return TT_ENOMEM;
    if (copy != NULL && len > 0)
        memcpy(copy, data, len);
    atomic_fetch_add(&r->zc_pending, 1);
    /* ZeroMQ's hand-over to its I/O thread is invisible to TSan. */
    TT_TSAN_RELEASE(copy ? copy : (void *)data);
    TT_TSAN_RELEASE(r);
    zmq_msg_init_data(m, copy ? copy : (void *)data, len, copy ? copy_release : zc_release, r);
    return TT_OK;
}

static void put_le64(uint8_t *b, int64_t v) {
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static int64_t get_le64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return (int64_t)v;
}

/* Header frame, payload frame and, with `side`, an 8-byte int64 frame;
 * no send can block (no HWM). */
static int send_socket(tt_ring_t *r, const tt_collseq_hdr_t *h, const void *data, size_t len,
                       tt_ring_rx_t *fwd, const int64_t *side) {
    uint8_t hb[TT_COLLSEQ_HDR_SIZE], sb[8];
    zmq_msg_t m;
    zmq_msg_t *share = fwd != NULL && fwd->slot < 0 ? &fwd->body : NULL;
    int must_copy = fwd != NULL && fwd->slot >= 0; /* the slot goes back soon */
    r->tcp_units += h->kind == TT_COLLSEQ_DATA;
    tt_collseq_encode(h, hb);
    if (zmq_send(r->push, hb, sizeof(hb), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return TT_EUNREACHABLE;
    int rc = make_body(r, &m, data, len, share, must_copy);
    if (rc != TT_OK)
        return rc;
    if (zmq_msg_send(&m, r->push, ZMQ_DONTWAIT | (side != NULL ? ZMQ_SNDMORE : 0)) < 0) {
        zmq_msg_close(&m); /* runs zc_release for a zero-copy frame */
        return TT_EUNREACHABLE;
    }
    if (side != NULL) {
        put_le64(sb, *side);
        if (zmq_send(r->push, sb, sizeof(sb), ZMQ_DONTWAIT) < 0)
            return TT_EUNREACHABLE;
    }
    return TT_OK;
}

/* Copies a payload into the lowest free slot of our pool: its number, or
 * -1 when it goes over the socket (too large, or every slot still being
 * read: a slow reader costs speed, it never blocks the sender). */
static int to_slot(tt_ring_t *r, const void *data, size_t len) {
    if (len > tt_shmpool_slot_bytes(r->tx))
        return -1;
    int slot = tt_shmpool_acquire(r->tx);
    if (slot < 0)
        return -1;
    if (len > 0)
        memcpy(tt_shmpool_slot(r->tx, slot), data, len);
    tt_shmpool_publish(r->tx, slot);
    return slot;
}

/* The queue holds far more notes than a ring keeps in flight on a link, so
 * it is full only behind a reader that stopped; that is waited out like
 * any silence, up to the deadline. */
static int post(tt_ring_t *r, const tt_shmpool_note_t *n) {
    uint64_t end = 0;
    while (!tt_shmpool_post(r->tx, n)) {
        uint64_t now = tt_clock_mono_ms();
        if (end == 0)
            end = now + (uint64_t)r->deadline_ms;
        if (now >= end || tt_wake_raised(&r->wake))
            return TT_EUNREACHABLE;
        struct timespec nap = {0, POST_NAP_NS};
        nanosleep(&nap, NULL);
    }
    return TT_OK;
}

int tt_ring_msg_send(tt_ring_t *r, const tt_collseq_hdr_t *h0, const void *data, size_t len,
                     tt_ring_rx_t *fwd, const int64_t *side) {
    tt_collseq_hdr_t h = *h0;
    if (side != NULL)
        h.flags |= TT_COLLSEQ_F_SIDE;
    if (r->push == NULL)
        return TT_EUNREACHABLE;
    if (fwd != NULL) {
        data = fwd->data;
        len = fwd->len;
    }
    if (!r->shm_tx || h.kind != TT_COLLSEQ_DATA)
        return send_socket(r, &h, data, len, fwd, side);
    tt_shmpool_note_t n;
    memset(&n, 0, sizeof(n));
    n.slot = to_slot(r, data, len);
    h.aux = n.slot;
    tt_collseq_encode(&h, n.hdr);
    n.len = len;
    n.side = side != NULL ? *side : 0;
    int rc = post(r, &n);
    if (rc != TT_OK || n.slot >= 0) {
        r->shm_units += rc == TT_OK;
        return rc;
    }
    return send_socket(r, &h, data, len, fwd, side);
}

/* Waits (bounded) until ZeroMQ has dropped every reference to the caller's
 * buffer. The push socket is closed first so that frames stuck behind a
 * dead or stopped peer are discarded after a short linger (which still
 * lets a queued ABORT reach a live one). */
void tt_ring_msg_release_all(tt_ring_t *r) {
    if (atomic_load(&r->zc_pending) == 0)
        return;
    if (r->push != NULL) {
        /* The linger lets an ABORT just queued reach a live right
         * neighbour; towards a dead one nothing can leave, and 200 ms of
         * it only delayed this rank's failure and report. */
        tt_ring_net_set_int(r->push, ZMQ_LINGER, r->right_gone_ms != 0 ? 0 : 200);
        zmq_close(r->push);
        r->push = NULL;
    }
    uint64_t end = tt_clock_mono_ms() + 3000;
    while (atomic_load(&r->zc_pending) > 0 && tt_clock_mono_ms() < end) {
        zmq_pollitem_t it = {NULL, r->evfd, ZMQ_POLLIN, 0};
        uint64_t v;
        zmq_poll(&it, 1, 50);
        ssize_t n = read(r->evfd, &v, sizeof(v));
        (void)n;
    }
    if (atomic_load(&r->zc_pending) > 0)
        TT_ERROR("ring", "rank %d: %ld send(s) still reference the caller's buffer", r->rank,
                 (long)atomic_load(&r->zc_pending));
}

/* After the body: the int64 frame the header announced, and nothing more.
 * Returns rc, or TT_EPROTO with the reason in why. */
static int read_rest(tt_ring_t *r, tt_ring_rx_t *m, int rc, char *why, size_t whylen) {
    int more = zmq_msg_more(&m->body);
    int want = rc == TT_OK && (m->h.flags & TT_COLLSEQ_F_SIDE);
    zmq_msg_t x;
    zmq_msg_init(&x);
    int n = want && more ? zmq_msg_recv(&x, r->pull, 0) : -1;
    if (n >= 0)
        more = zmq_msg_more(&x);
    if (n == 8) {
        m->side = get_le64(zmq_msg_data(&x));
        m->has_side = 1;
    } else if (want) {
        rc = TT_EPROTO;
        snprintf(why, whylen, "no 8-byte frame after a body that announced one");
    }
    while (more) { /* parts of one message arrive together: never blocks */
        rc = TT_EPROTO;
        snprintf(why, whylen, "more frames than the header announced");
        more = zmq_msg_recv(&x, r->pull, 0) >= 0 && zmq_msg_more(&x);
    }
    zmq_msg_close(&x);
    return rc;
}

int tt_ring_msg_read(tt_ring_t *r, tt_ring_rx_t *m, char *why, size_t whylen) {
    zmq_msg_t hm;
    zmq_msg_init(&hm);
    if (zmq_msg_recv(&hm, r->pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&hm);
        if (zmq_errno() == EAGAIN || zmq_errno() == EINTR)
            return 0;
        snprintf(why, whylen, "recv");
        return TT_ESYS;
    }
    int more = zmq_msg_more(&hm);
    snprintf(why, whylen, "missing body frame");
    int rc = tt_collseq_decode(zmq_msg_data(&hm), zmq_msg_size(&hm), &m->h, why, whylen);
    zmq_msg_close(&hm);
    zmq_msg_init(&m->body);
    m->slot = -1;
    m->has_side = 0;
    m->data = NULL;
    m->len = 0;
    if (more && zmq_msg_recv(&m->body, r->pull, 0) >= 0)
        rc = read_rest(r, m, rc, why, whylen);
    else if (rc == TT_OK)
        rc = TT_EPROTO;
    if (rc == TT_OK)
        return 1;
    zmq_msg_close(&m->body);
    return rc;
}

int tt_ring_msg_payload(tt_ring_rx_t *m, char *why, size_t whylen) {
    if (m->h.aux >= 0) { /* slots are named by notes only */
        zmq_msg_close(&m->body);
        snprintf(why, whylen, "a shared-memory slot named over the socket");
        return TT_EPROTO;
    }
    m->data = zmq_msg_data(&m->body);
    m->len = zmq_msg_size(&m->body);
    return TT_OK;
}

/* A note's unit, checked as a message from another process must be: the
 * header decodes, it is DATA of this ring from the left, and it names a
 * published slot that holds its length. */
static int from_note(tt_ring_t *r, const tt_shmpool_note_t *n, tt_ring_rx_t *m, char *why,
                     size_t whylen) {
    int rc = tt_collseq_decode(n->hdr, sizeof(n->hdr), &m->h, why, whylen);
    const char *bad = NULL;
    if (rc != TT_OK)
        return rc;
    if (m->h.kind != TT_COLLSEQ_DATA || m->h.generation != r->gen || m->h.job != r->job ||
        m->h.src != r->left)
        bad = "a note that is not this ring's data from the left";
    else if (m->h.aux != n->slot || !tt_shmpool_ready(r->rx, n->slot))
        bad = "a note naming a slot that was not filled";
    else if (n->len > tt_shmpool_slot_bytes(r->rx))
        bad = "a note longer than a slot";
    if (bad != NULL) {
        snprintf(why, whylen, "%s", bad);
        return TT_EPROTO;
    }
    zmq_msg_init(&m->body);
    m->slot = n->slot;
    m->data = tt_shmpool_slot(r->rx, n->slot);
    m->len = (size_t)n->len;
    m->has_side = (m->h.flags & TT_COLLSEQ_F_SIDE) != 0;
    m->side = n->side;
    return 1;
}

/* A DATA message of this ring: on a noted link its place in the order is
 * its note's. */
static int ours(const tt_ring_t *r, const tt_ring_rx_t *m) {
    return m->h.kind == TT_COLLSEQ_DATA && m->h.generation == r->gen && m->h.job == r->job;
}

/* A unit's note is posted before its payload's first frame is sent, but
 * the reader may have looked at the queue before that: a payload read from
 * the socket is matched against a fresh look. If notes of earlier units
 * (in slots) are ahead of its own, it waits in the stash until its note
 * comes up; with no note at all it is a peer off the protocol. */
int tt_ring_msg_next(tt_ring_t *r, tt_ring_rx_t *m, char *why, size_t whylen) {
    tt_shmpool_note_t n;
    int got = tt_shmpool_peek(r->rx, &n), rc = 1;
    if (got == 1 && n.slot < 0 && r->stashed) {
        tt_shmpool_pop(r->rx);
        tt_ring_msg_move(m, &r->stash);
        r->stashed = 0;
        return 1;
    }
    if (got == 0 || (got == 1 && n.slot < 0)) {
        rc = tt_ring_msg_read(r, m, why, whylen);
        if (rc != 1 || !ours(r, m))
            return rc; /* control, stale or foreign: the caller's to judge */
        got = tt_shmpool_peek(r->rx, &n);
        if (got == 1 && n.slot >= 0 && !r->stashed) {
            tt_ring_msg_move(&r->stash, m);
            r->stashed = 1;
        } else if (got != 1 || n.slot >= 0) {
            zmq_msg_close(&m->body);
            got = -1;
        }
    }
    if (got < 0) {
        snprintf(why, whylen, "a payload over the socket without its note, or a corrupt queue");
        return TT_EPROTO;
    }
    tt_shmpool_pop(r->rx);
    return n.slot >= 0 ? from_note(r, &n, m, why, whylen) : rc;
}

void tt_ring_msg_wait(tt_ring_t *r, int64_t tmo) {
    tt_shmpool_note_t n;
    int got = r->shm_rx ? tt_shmpool_peek(r->rx, &n) : 0;
    if (!r->shm_rx || (got == 1 && n.slot < 0 && !r->stashed)) {
        tt_ring_net_poll(r, tmo); /* what comes next comes over the socket */
        return;
    }
    if (got == 0)
        tt_shmpool_wait(r->rx, (int)(tmo < NOTE_POLL_MS ? tmo : NOTE_POLL_MS));
    tt_ring_net_poll(r, 0);
}
