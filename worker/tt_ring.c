/* tt_ring: ring collectives over ZeroMQ TCP for one generation: the
 * algorithms, the handshake, deadlines, WAIT/ABORT and what a received
 * message means. How a message travels is tt_ring_msg.c's (sockets,
 * shared-memory notes); the sockets' life cycle tt_ring_net.c's.
 *
 * Sockets. Each rank binds one PULL (from its left neighbour) and connects
 * one PUSH to its right. A ring sends one way, so PUSH/PULL fits exactly:
 * with one peer a PUSH never round-robins and never drops (unlike a ROUTER
 * without ROUTER_MANDATORY), and it queues before the peer has bound, so
 * ranks may start in any order. High-water marks are off because the
 * algorithms bound what is in flight (one unit sent per unit received, plus
 * RING_AHEAD segments up front; a broadcast root waits for a token that comes back
 * around the ring), and with no HWM a send never blocks, so full queues can
 * never deadlock the ring. ZMTP heartbeats are off: liveness inside a
 * collective is the deadline plus WAIT frames, and a killed peer shows at
 * once as ZMQ_EVENT_DISCONNECTED on a socket monitor. The common/tt_zmq
 * factory makes ROUTER/DEALER sockets with protobuf envelopes, which the
 * bulk path wants neither of, so tt_ring_net.c sets these two up with the
 * same rules (linger, bounded message size).
 *
 * Messages: [64-byte tt_collseq header][payload]. DATA units are buffer
 * segments (large ones zero-copy; a collective returns only once ZeroMQ has
 * released every frame; all-gather and broadcast pass a received frame on
 * before copying it into place). Between ranks of one host a DATA unit
 * travels instead as a note in the sender's shared-memory pool (the same
 * header, naming a slot that holds the payload; tt_ring_msg.c): the bytes
 * skip the kernel's TCP path and the unit its three thread wake-ups, while
 * deadlines, WAIT/ABORT and disconnect detection stay those of the ZeroMQ
 * sockets (see the handshake for when a ring does this). WAIT: sent right
 * while blocked, carrying the sender's suspect, so a chain of waiting ranks
 * blames the one silent rank, not each its own left neighbour. ABORT: the
 * failure text, forwarded around the ring to its origin, so every rank
 * fails with the original sentence. All state hangs off the tt_ring_t; its
 * life cycle and sockets are tt_ring_net.c's. */
#include "tt_ring.h"
#include "tt_ring_int.h"

#include "tt_clock.h"
#include "tt_flight.h"
#include "tt_log.h"
#include "tt_ring_reduce.h"
#include "tt_ring_sched.h"
#include "tt_status.h"
#include "tt_zmq.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define SUBSYS "ring"
#define ERRLEN TT_RING_ERRLEN

typedef tt_ring_rx_t rx_t;

/* One collective in progress. */
typedef struct coll {
    tt_ring_t *r;
    tt_coll_fp_t fp;
    uint64_t seq, flight_id;
    uint64_t start_ms, deadline_at;
    size_t esize;
    int sends_left;                        /* units this rank has yet to send */
    int left_suspect;                      /* from the last WAIT of the left */
    uint64_t left_wait_ms, last_wait_sent; /* times of WAITs in and out */
    /* tt_ring_allreduce_side: the caller's int64 (own value in, sum out),
     * this rank's value and the running sum it passes on; nseg: units per
     * step, to tell which units carry it */
    int64_t *side, side_own, side_acc;
    size_t nseg;
} coll_t;

static void fill_hdr(const coll_t *c, tt_collseq_hdr_t *h, int kind, uint32_t unit) {
    memset(h, 0, sizeof(*h));
    h->kind = (uint8_t)kind;
    h->src = c->r->rank;
    h->aux = -1;
    h->generation = c->r->gen;
    h->job = c->r->job;
    h->seq = c->seq;
    h->unit = unit;
    h->fp = c->fp;
}

static void send_abort(tt_ring_t *r, const coll_t *c, int origin, int status, int suspect,
                       const char *text) {
    tt_collseq_hdr_t h;
    fill_hdr(c, &h, TT_COLLSEQ_ABORT, 0);
    h.src = origin;
    h.status = status;
    h.aux = suspect;
    if (tt_ring_msg_send(r, &h, text, strlen(text), NULL, NULL) != TT_OK)
        TT_DEBUG(SUBSYS, "rank %d could not forward abort to rank %d", r->rank, r->right);
}

static int64_t since(uint64_t then, uint64_t now) {
    return (int64_t)(now - then);
}

/* Whom this rank blames while blocked: the silent rank its left neighbour
 * is itself waiting for, when the left is alive enough to say so. */
static int current_suspect(const coll_t *c, uint64_t now) {
    if (c->left_wait_ms != 0 && since(c->left_wait_ms, now) <= 3 * c->r->wait_ivl_ms &&
        c->left_suspect >= 0 && c->left_suspect != c->r->rank)
        return c->left_suspect;
    return c->r->left;
}

static void send_wait(coll_t *c, uint64_t now) {
    tt_collseq_hdr_t h;
    fill_hdr(c, &h, TT_COLLSEQ_WAIT, 0);
    h.aux = current_suspect(c, now);
    if (tt_ring_msg_send(c->r, &h, NULL, 0, NULL, NULL) == TT_OK)
        c->last_wait_sent = now;
}

static void log_flight(tt_ring_t *r) {
    char *text = tt_ring_dump(r, TT_FLIGHT_LOG_RECORDS);
    if (text != NULL)
        TT_WARN(SUBSYS, "%s", text);
    free(text);
}

/* Poisons the ring with the first failure, logs it with the flight record,
 * passes it on to the right (unless the right neighbour started it) and
 * makes the caller's buffer safe to reuse. Returns the status. */
static int ring_fail(coll_t *c, int status, int suspect, int origin, const char *text) {
    tt_ring_t *r = c->r;
    if (r->failed)
        return r->failed;
    r->failed = status;
    r->suspect = suspect;
    snprintf(r->err, ERRLEN, "%s", text);
    tt_flight_finish(r->flight, c->flight_id, tt_clock_mono_ns(), status);
    TT_WARN(SUBSYS, "gen=%llu rank %d: %s (%s)", (unsigned long long)r->gen, r->rank, r->err,
            tt_status_name(status));
    log_flight(r);
    if (r->world > 1 && r->right != origin)
        send_abort(r, c, origin, status, suspect, r->err);
    tt_ring_msg_release_all(r);
    return status;
}

/* Whether DATA unit `unit` carries the running sum of an
 * all-reduce-with-count: the first unit of each reduce-scatter step. Each
 * rank adds its own value to what came from the left and passes it on, so
 * after the W-1 steps every rank holds the sum (a scalar all-reduce that
 * costs no message of its own). */
static int side_unit(const coll_t *c, uint32_t unit) {
    return c->side != NULL && unit % c->nseg == 0 && unit / c->nseg < (uint32_t)(c->r->world - 1);
}

/* DATA unit from `data` or, if fwd is set, the received unit *fwd (borrowed). */
static int send_unit(coll_t *c, uint32_t unit, const void *data, size_t len, rx_t *fwd) {
    tt_collseq_hdr_t h;
    char text[ERRLEN];
    fill_hdr(c, &h, TT_COLLSEQ_DATA, unit);
    c->sends_left--;
    const int64_t *side = NULL;
    if (side_unit(c, unit))
        side = unit == 0 ? &c->side_own : &c->side_acc;
    int rc = tt_ring_msg_send(c->r, &h, data, len, fwd, side);
    if (rc == TT_OK)
        return TT_OK;
    snprintf(text, sizeof(text), "rank %d cannot queue data to rank %d: %s", c->r->rank,
             c->r->right, zmq_strerror(zmq_errno()));
    return ring_fail(c, TT_EUNREACHABLE, c->r->right, c->r->rank, text);
}

static void describe_op(const coll_t *c, char *buf, size_t len) {
    int n =
        snprintf(buf, len, "%s #%llu", tt_collseq_op_name(c->fp.op), (unsigned long long)c->seq);
    if (c->r->step >= 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", step %lld", (long long)c->r->step);
}

static int fail_timeout(coll_t *c, int suspect, const char *what) {
    char op[96], text[ERRLEN];
    describe_op(c, op, sizeof(op));
    snprintf(text, sizeof(text), "timed out after %d ms waiting for rank %d%s (%s)",
             c->r->deadline_ms, suspect, what, op);
    return ring_fail(c, TT_ETIMEDOUT, suspect, c->r->rank, text);
}

static int fail_gone(coll_t *c, int who) {
    char op[96], text[ERRLEN];
    describe_op(c, op, sizeof(op));
    snprintf(text, sizeof(text), "rank %d disconnected from rank %d (%s)", who, c->r->rank, op);
    return ring_fail(c, TT_EUNREACHABLE, who, c->r->rank, text);
}

/* tt_ring_interrupt was called: the generation has ended, so nothing more
 * can complete on this ring; the ABORT tells the neighbours at once. */
static int fail_interrupted(coll_t *c) {
    char op[96], text[ERRLEN];
    describe_op(c, op, sizeof(op));
    snprintf(text, sizeof(text), "generation %llu ended while rank %d was in %s",
             (unsigned long long)c->r->gen, c->r->rank, op);
    return ring_fail(c, TT_EMEMBERSHIP, -1, c->r->rank, text);
}

/* Blocks until input may be ready, a deadline or a grace period expires;
 * sends WAIT frames while blocked. 0 to try reading again, <0 failed. */
static int wait_input(coll_t *c) {
    tt_ring_t *r = c->r;
    uint64_t now = tt_clock_mono_ms();
    if (tt_wake_raised(&r->wake))
        return fail_interrupted(c);
    if (now >= c->deadline_at)
        return fail_timeout(c, current_suspect(c, now), "");
    int gone = tt_ring_net_gone(r, now, TT_RING_LEFT | (c->sends_left > 0 ? TT_RING_RIGHT : 0));
    if (gone >= 0)
        return fail_gone(c, gone);
    if (since(c->last_wait_sent, now) >= r->wait_ivl_ms)
        send_wait(c, now);
    int64_t tmo = (int64_t)(c->deadline_at - now);
    if (tmo > r->wait_ivl_ms)
        tmo = r->wait_ivl_ms;
    if ((r->left_gone_ms || r->right_gone_ms) && tmo > 50)
        tmo = 50;
    if (r->idle != NULL && tmo > TT_RING_IDLE_MS)
        tmo = TT_RING_IDLE_MS;
    tt_ring_msg_wait(r, tmo);
    if (r->idle != NULL)
        r->idle(r->idle_ctx);
    return TT_OK;
}

static int fail_proto(coll_t *c, int status, const char *why) {
    char text[ERRLEN];
    snprintf(text, sizeof(text), "rank %d got a malformed ring message from rank %d: %s",
             c->r->rank, c->r->left, why);
    return ring_fail(c, status, c->r->left, c->r->rank, text);
}

/* The next message without blocking: 1 read, 0 none yet, <0 failed. */
static int read_msg(coll_t *c, rx_t *m) {
    char why[128] = "";
    tt_ring_t *r = c->r;
    int rc = r->shm_rx ? tt_ring_msg_next(r, m, why, sizeof(why))
                       : tt_ring_msg_read(r, m, why, sizeof(why));
    return rc >= 0 ? rc : fail_proto(c, rc, why);
}

/* A message of another job: a rank of a job that uses the same endpoint
 * (a port the host gave to both, a job restarted with a stale member list)
 * reached this ring. Its generation numbers mean nothing here, and an
 * ABORT from it must not end this ring's collective; dropped, said once. */
static int foreign(tt_ring_t *r, rx_t *m) {
    if (m->h.job == r->job)
        return 0;
    if (r->dropped_foreign++ == 0)
        TT_WARN(SUBSYS,
                "gen=%llu rank %d: dropped a ring message of another job (tag %016llx, this "
                "job's %016llx): a rank of another job reaches this rank's endpoint",
                (unsigned long long)r->gen, r->rank, (unsigned long long)m->h.job,
                (unsigned long long)r->job);
    zmq_msg_close(&m->body);
    return 1;
}

static int take_abort(coll_t *c, rx_t *m) {
    char text[ERRLEN];
    size_t n = zmq_msg_size(&m->body);
    n = n < sizeof(text) - 1 ? n : sizeof(text) - 1;
    memcpy(text, zmq_msg_data(&m->body), n);
    text[n] = '\0';
    zmq_msg_close(&m->body);
    int status = m->h.status < 0 && m->h.status >= TT_EINTERNAL ? m->h.status : TT_EREMOTE;
    return ring_fail(c, status, m->h.aux, m->h.src, text);
}

static int take_wait(coll_t *c, rx_t *m) {
    char text[ERRLEN];
    zmq_msg_close(&m->body);
    if (m->h.seq != c->seq)
        return 0; /* a WAIT from an earlier collective */
    if (tt_collseq_check(&m->h, c->r->rank, c->seq, &c->fp, text, sizeof(text)) != TT_OK)
        return ring_fail(c, TT_EDESYNC, -1, c->r->rank, text);
    c->left_suspect = m->h.aux;
    c->left_wait_ms = tt_clock_mono_ms();
    return 0;
}

/* A socket message's payload: its body (a noted unit's is its slot). */
static int payload(coll_t *c, rx_t *m) {
    char why[128] = "";
    if (m->slot >= 0)
        return TT_OK;
    int rc = tt_ring_msg_payload(m, why, sizeof(why));
    return rc == TT_OK ? rc : fail_proto(c, rc, why);
}

/* The running sum on a unit that must carry one (and none elsewhere: the
 * ranks called different functions, which is a desync like any other).
 * The last reduce-scatter step's sum plus this rank's own is the total. */
static int take_side(coll_t *c, rx_t *m, uint32_t unit) {
    char text[ERRLEN], op[96];
    int want = side_unit(c, unit);
    if (m->has_side != want) {
        describe_op(c, op, sizeof(op));
        snprintf(text, sizeof(text),
                 "rank %d sent %s %s the step's example count but rank %d expected it %s",
                 (int)m->h.src, op, m->has_side ? "with" : "without", c->r->rank,
                 want ? "with it" : "without");
        tt_ring_msg_done(c->r, m);
        return ring_fail(c, TT_EDESYNC, -1, c->r->rank, text);
    }
    if (want) {
        c->side_acc = (int64_t)((uint64_t)m->side + (uint64_t)c->side_own);
        if (unit / c->nseg == (uint32_t)(c->r->world - 2))
            *c->side = c->side_acc;
    }
    return 1;
}

/* Dispatches one message: 1 when it is the awaited DATA unit of `bytes`
 * bytes (body kept in m), 0 when it was something else, <0 failed. */
static int take(coll_t *c, rx_t *m, uint32_t unit, size_t bytes) {
    char text[ERRLEN];
    if (foreign(c->r, m))
        return 0;
    if (m->h.generation != c->r->gen) {
        c->r->dropped_stale++;
        TT_DEBUG(SUBSYS, "rank %d dropped a gen %llu message (current %llu)", c->r->rank,
                 (unsigned long long)m->h.generation, (unsigned long long)c->r->gen);
        zmq_msg_close(&m->body);
        return 0;
    }
    if (m->h.kind == TT_COLLSEQ_ABORT)
        return take_abort(c, m);
    if (m->h.kind == TT_COLLSEQ_WAIT)
        return take_wait(c, m);
    if (m->h.kind == TT_COLLSEQ_HELLO || m->h.kind == TT_COLLSEQ_READY) {
        zmq_msg_close(&m->body); /* late copies of the handshake */
        return 0;
    }
    if (tt_collseq_check(&m->h, c->r->rank, c->seq, &c->fp, text, sizeof(text)) != TT_OK) {
        zmq_msg_close(&m->body);
        return ring_fail(c, TT_EDESYNC, -1, c->r->rank, text);
    }
    int rc = payload(c, m);
    if (rc < 0)
        return rc;
    if (m->h.unit != unit || m->len != bytes) {
        snprintf(text, sizeof(text),
                 "rank %d sent unit %u of %zu bytes but rank %d expected unit %u of %zu bytes "
                 "(ranks configured with different segment sizes?)",
                 (int)m->h.src, m->h.unit, m->len, c->r->rank, unit, bytes);
        tt_ring_msg_done(c->r, m);
        return ring_fail(c, TT_ESIZE, -1, c->r->rank, text);
    }
    return take_side(c, m, unit);
}

/* ---- handshake: proof that every link reaches this generation's ring ----
 *
 * Why: a rank's endpoint is the same in every generation, so a new PUSH may
 * connect to the neighbour's previous PULL while that rank still finishes
 * its failed collective; what it writes there is lost when that socket
 * closes, and ZeroMQ does not resend. Rank 0 therefore sends HELLO every
 * HELLO_IVL_MS until one comes back around (every other rank forwards each
 * HELLO it gets), then READY, which every rank awaits and forwards before
 * its first DATA. A healthy ring pays one round trip. While it waits a
 * disconnect is not a failure (the old socket closing looks like one); the
 * deadline and tt_ring_interrupt are.
 *
 * The same round trip decides, link by link, where the payloads go. Each
 * HELLO carries its sender's pool offer and one bit per rank, "rank k
 * mapped its left neighbour's pool", set by the ranks it has passed: each
 * rank maps its left's pool from the offer, sets its bit when it could and
 * passes on its own offer. When the HELLO is back, rank 0 (which maps the
 * last rank's) holds every bit, and READY carries them to all, so both
 * ends of a link read the same bit: a rank sends through shared memory
 * only to a right neighbour whose bit is set, and takes slots from its left
 * only when its own is. Ranks on one host talk through shared memory, the
 * links between hosts over TCP; a peer without pools (or of an older
 * version: empty bodies) leaves its bit clear. */
#define HELLO_IVL_MS 20

static size_t links_bytes(const tt_ring_t *r) {
    return ((size_t)r->world + 7) / 8;
}

static int link_bit(const tt_ring_t *r, int k) {
    return (r->links[k / 8] >> (k % 8)) & 1;
}

/* Takes the bits a HELLO or READY brought (none from a body of another
 * shape). */
static void take_links(tt_ring_t *r, zmq_msg_t *body, size_t at) {
    size_t n = links_bytes(r);
    if (zmq_msg_size(body) == at + n)
        memcpy(r->links, (const uint8_t *)zmq_msg_data(body) + at, n);
    else
        memset(r->links, 0, n);
}

static int send_ctl(coll_t *c, int kind, const void *body, size_t len) {
    tt_collseq_hdr_t h;
    fill_hdr(c, &h, kind, 0);
    return tt_ring_msg_send(c->r, &h, body, len, NULL, NULL);
}

static int send_hello(coll_t *c) {
    tt_ring_t *r = c->r;
    size_t n = TT_SHMPOOL_OFFER_SIZE + links_bytes(r);
    uint8_t *b = calloc(1, n);
    tt_shmpool_offer_t o = {0};
    if (b == NULL)
        return TT_ENOMEM;
    if (r->tx != NULL)
        tt_shmpool_offer(r->tx, &o);
    tt_shmpool_offer_encode(&o, b);
    memcpy(b + TT_SHMPOOL_OFFER_SIZE, r->links, links_bytes(r));
    int rc = send_ctl(c, TT_COLLSEQ_HELLO, b, n);
    free(b);
    return rc;
}

/* Maps the left's pool from the offer in its HELLO (once per offer); 1
 * when this rank can read it. */
static int map_left(tt_ring_t *r, zmq_msg_t *body) {
    tt_shmpool_offer_t o;
    char why[256] = "";
    if (zmq_msg_size(body) < TT_SHMPOOL_OFFER_SIZE ||
        tt_shmpool_offer_decode(zmq_msg_data(body), TT_SHMPOOL_OFFER_SIZE, &o) != TT_OK ||
        o.nslots == 0 || r->tcp_only)
        return 0;
    if (tt_shmpool_is(r->rx, &o))
        return 1;
    tt_shmpool_destroy(&r->rx);
    if (tt_shmpool_map(&r->rx, &o, why, sizeof(why)) == TT_OK)
        return 1;
    TT_INFO(SUBSYS, "gen=%llu rank %d: cannot map rank %d's shared memory (%s): TCP from it",
            (unsigned long long)r->gen, r->rank, r->left, why);
    return 0;
}

/* One message during the handshake: 1 done, 0 go on, <0 failed. */
static int take_hello(coll_t *c, rx_t *m) {
    tt_ring_t *r = c->r;
    if (foreign(r, m))
        return 0;
    int kind = m->h.kind, same_gen = m->h.generation == r->gen;
    if (same_gen && kind == TT_COLLSEQ_ABORT)
        return take_abort(c, m);
    if (same_gen && kind == TT_COLLSEQ_HELLO) {
        take_links(r, &m->body, TT_SHMPOOL_OFFER_SIZE);
        if (map_left(r, &m->body))
            r->links[r->rank / 8] |= (uint8_t)(1u << (r->rank % 8));
    } else if (same_gen && kind == TT_COLLSEQ_READY) {
        take_links(r, &m->body, 0);
    }
    zmq_msg_close(&m->body);
    if (!same_gen) {
        r->dropped_stale++;
        return 0;
    }
    if (kind == TT_COLLSEQ_DATA)
        return fail_proto(c, TT_EPROTO, "data before the ring of this generation was ready");
    if (kind == TT_COLLSEQ_HELLO && r->rank == 0)
        return 1;
    if (kind == TT_COLLSEQ_HELLO)
        send_hello(c); /* a lost copy is resent by rank 0 */
    if (kind != TT_COLLSEQ_READY || r->rank == 0)
        return 0;
    if (r->right != 0)
        send_ctl(c, TT_COLLSEQ_READY, r->links, links_bytes(r));
    return 1;
}

/* Rank 0 says how the ring's links came out. */
static void log_links(const tt_ring_t *r) {
    int n = 0;
    for (int k = 0; k < r->world; k++)
        n += link_bit(r, k);
    TT_INFO(SUBSYS, "gen=%llu: ring payloads go through shared memory on %d of %d link(s)%s",
            (unsigned long long)r->gen, n, r->world,
            n == r->world ? " (every rank on this host)"
            : n == 0      ? ", over TCP on all"
                          : ", over TCP on the others");
}

/* The right neighbour's advertised address has not reached it (no
 * ZeroMQ handshake on the PUSH): into buf, or "" once it has. */
static void right_why(const tt_ring_t *r, uint64_t now, char *buf, size_t len) {
    char who[32];
    snprintf(who, sizeof(who), "rank %d", r->right);
    tt_zmq_reach_why(&r->right_reach, who, r->right_ep, "its advertised endpoint", now, buf, len);
}

/* Warns once (tt_zmq_reach_warn_after) of a right neighbour the PUSH
 * has not reached: it has not opened this generation's ring yet, or its
 * address does not reach it from here. */
static void warn_unreached(coll_t *c, uint64_t start, uint64_t now) {
    tt_ring_t *r = c->r;
    uint64_t after = tt_zmq_reach_warn_after(r->deadline_ms);
    if (r->right_warned || r->right_reach.met || now < start + after)
        return;
    char why[ERRLEN];
    right_why(r, now, why, sizeof(why));
    TT_WARN(SUBSYS,
            "gen=%llu rank %d: %s (it may not have opened this generation's ring yet; trying on "
            "until the deadline, %d ms)",
            (unsigned long long)r->gen, r->rank, why, r->deadline_ms);
    r->right_warned = 1;
}

/* The handshake's deadline passed: a right neighbour never reached is
 * the cause to name, else the left, whose HELLO or READY did not come. */
static int fail_handshake(coll_t *c, uint64_t now) {
    char why[ERRLEN - 128], op[96], text[ERRLEN];
    right_why(c->r, now, why, sizeof(why));
    if (why[0] == '\0')
        return fail_timeout(c, c->r->left, " to join the ring of this generation");
    describe_op(c, op, sizeof(op));
    snprintf(text, sizeof(text), "timed out after %d ms joining the ring (%s): %s",
             c->r->deadline_ms, op, why);
    return ring_fail(c, TT_ETIMEDOUT, c->r->right, c->r->rank, text);
}

static int handshake(coll_t *c) {
    tt_ring_t *r = c->r;
    uint64_t last_hello = 0, start = tt_clock_mono_ms();
    for (;;) {
        uint64_t now = tt_clock_mono_ms();
        if (tt_wake_raised(&r->wake))
            return fail_interrupted(c);
        if (now >= c->deadline_at)
            return fail_handshake(c, now);
        warn_unreached(c, start, now);
        if (r->rank == 0 && since(last_hello, now) >= HELLO_IVL_MS) {
            send_hello(c);
            last_hello = now;
        }
        rx_t m;
        int rc = read_msg(c, &m);
        if (rc == 1 && (rc = take_hello(c, &m)) == 1)
            break;
        if (rc < 0)
            return rc;
        if (rc == 0) {
            int64_t tmo = (int64_t)(c->deadline_at - now);
            tt_ring_net_poll(r, tmo < HELLO_IVL_MS ? tmo : HELLO_IVL_MS);
            if (r->idle != NULL)
                r->idle(r->idle_ctx);
        }
    }
    r->ready = 1;
    r->left_gone_ms = r->right_gone_ms = 0; /* the old sockets' closes */
    r->shm_tx = link_bit(r, r->right) && r->tx != NULL;
    r->shm_rx = link_bit(r, r->rank) && r->rx != NULL;
    if (r->rank == 0 && send_ctl(c, TT_COLLSEQ_READY, r->links, links_bytes(r)) != TT_OK)
        return ring_fail(c, TT_EUNREACHABLE, r->right, r->rank, "cannot queue READY");
    if (r->rank == 0)
        log_links(r);
    return TT_OK;
}

/* Waits for DATA unit `unit` from the left; on success *u holds it (give
 * it back with tt_ring_msg_done). */
static int await_unit(coll_t *c, uint32_t unit, size_t bytes, rx_t *u) {
    for (;;) {
        rx_t m;
        int rc = read_msg(c, &m);
        if (rc == 1) {
            rc = take(c, &m, unit, bytes);
            if (rc == 1) {
                tt_ring_msg_move(u, &m);
                return TT_OK;
            }
        } else if (rc == 0) {
            rc = wait_input(c);
        }
        if (rc < 0)
            return rc;
    }
}

/* Returns once ZeroMQ has released every zero-copy frame of this call, so
 * the caller may reuse its buffer; fails on the deadline or a lost right
 * neighbour. Does not read the data socket: what arrives now belongs to the
 * next collective. */
static int wait_released(coll_t *c) {
    tt_ring_t *r = c->r;
    while (atomic_load(&r->zc_pending) > 0) {
        uint64_t now = tt_clock_mono_ms(), v;
        if (now >= c->deadline_at)
            return fail_timeout(c, r->right, " to take its data");
        if (tt_ring_net_gone(r, now, TT_RING_RIGHT) >= 0)
            return fail_gone(c, r->right);
        if (tt_wake_raised(&r->wake))
            return fail_interrupted(c);
        zmq_pollitem_t it[3] = {{NULL, r->evfd, ZMQ_POLLIN, 0},
                                {r->mon_push, 0, ZMQ_POLLIN, 0},
                                {NULL, tt_wake_fd(&r->wake), ZMQ_POLLIN, 0}};
        int64_t tmo = (int64_t)(c->deadline_at - now);
        zmq_poll(it, 3, (long)(tmo < 50 ? tmo : 50));
        if (it[0].revents && read(r->evfd, &v, sizeof(v)) < 0)
            v = 0; /* EAGAIN: another wake-up raced us; the loop re-checks */
        if (it[1].revents)
            tt_ring_net_drain(r->mon_push, &r->right_gone_ms, NULL, &r->right_reach);
    }
    return TT_OK;
}

/* Step 0 is paced: own segments go out only RING_AHEAD ahead of those
 * received, which are then reduced while in cache. Wire order = receive
 * order, so step-1 units wait until the last step-0 unit is out. */
#define RING_AHEAD 4

typedef struct pace {
    tt_ring_span_t send0, recv0; /* step-0 chunks */
    size_t nseg, sent0, fwd;     /* units sent so far, step 0 and step 1 */
} pace_t;

/* Step-0 units below `upto`; once all are out, step-1 units below `done`. */
static int pace(coll_t *c, pace_t *p, char *buf, size_t upto, size_t done) {
    size_t es = c->esize;
    int rc = TT_OK;
    for (; rc == TT_OK && p->sent0 < p->nseg && p->sent0 < upto; p->sent0++) {
        tt_ring_span_t s = tt_ring_sched_segment(p->send0, p->nseg, p->sent0);
        rc = send_unit(c, (uint32_t)p->sent0, buf + s.off * es, s.count * es, NULL);
    }
    for (; rc == TT_OK && p->sent0 == p->nseg && p->fwd < done; p->fwd++) {
        tt_ring_span_t s = tt_ring_sched_segment(p->recv0, p->nseg, p->fwd);
        rc = send_unit(c, (uint32_t)(p->nseg + p->fwd), buf + s.off * es, s.count * es, NULL);
    }
    return rc;
}

/* Reduce-scatter + all-gather, streamed segment by segment: a segment is
 * forwarded as soon as it has been reduced, so sending, receiving (on the
 * I/O threads) and reducing overlap. fn NULL: barrier (empty units). */
static int allreduce_units(coll_t *c, char *buf, size_t count, tt_ring_red_fn fn) {
    tt_ring_t *r = c->r;
    int w = r->world, nsteps = tt_ring_sched_nsteps(w), rc = TT_OK;
    size_t es = c->esize, nseg = tt_ring_sched_nseg(count, w, es, r->seg_bytes);
    pace_t p = {tt_ring_sched_chunk(count, w, tt_ring_sched_send_chunk(r->rank, w, 0)),
                tt_ring_sched_chunk(count, w, tt_ring_sched_recv_chunk(r->rank, w, 0)), nseg, 0, 0};
    c->sends_left = nsteps * (int)nseg;
    c->nseg = nseg;
    rc = pace(c, &p, buf, RING_AHEAD, 0);
    for (int g = 0; g < nsteps && rc == TT_OK; g++) {
        int red = tt_ring_sched_is_reduce(w, g);
        tt_ring_span_t ch = tt_ring_sched_chunk(count, w, tt_ring_sched_recv_chunk(r->rank, w, g));
        for (size_t j = 0; j < nseg && rc == TT_OK; j++) {
            tt_ring_span_t s = tt_ring_sched_segment(ch, nseg, j);
            char *dst = buf + s.off * es;
            rx_t u;
            uint32_t next = (uint32_t)((g + 1) * nseg + j);
            if ((rc = await_unit(c, (uint32_t)(g * nseg + j), s.count * es, &u)) != TT_OK)
                break;
            if (s.count > 0 && red)
                tt_ring_reduce_into(fn, dst, u.data, s.count, es);
            else if (!red && g + 1 < nsteps) /* all-gather: pass it on, then copy */
                rc = send_unit(c, next, NULL, 0, &u);
            if (s.count > 0 && !red)
                memcpy(dst, u.data, s.count * es);
            tt_ring_msg_done(r, &u);
            if (g == 0 && rc == TT_OK)
                rc = pace(c, &p, buf, j + 1 + RING_AHEAD, j + 1);
            else if (g + 1 < nsteps && red && rc == TT_OK)
                rc = send_unit(c, next, dst, s.count * es, NULL);
        }
    }
    return rc == TT_OK ? wait_released(c) : rc;
}

/* Pipelined ring broadcast root -> root+1 -> ... -> root-1, which then
 * returns an empty completion unit to the root, so that the root, too,
 * learns of a failure and cannot run ahead of the ring. */
static int bcast_units(coll_t *c, char *buf, size_t count, int root) {
    tt_ring_t *r = c->r;
    size_t es = c->esize, nseg = tt_ring_sched_bcast_nseg(count, es, r->seg_bytes);
    tt_ring_span_t whole = {0, count};
    int last = r->right == root, rc = TT_OK;
    rx_t u;
    if (r->rank == root) {
        c->sends_left = (int)nseg;
        for (size_t j = 0; j < nseg && rc == TT_OK; j++) {
            tt_ring_span_t s = tt_ring_sched_segment(whole, nseg, j);
            rc = send_unit(c, (uint32_t)j, buf + s.off * es, s.count * es, NULL);
        }
        if (rc == TT_OK && (rc = await_unit(c, (uint32_t)nseg, 0, &u)) == TT_OK)
            tt_ring_msg_done(r, &u);
        return rc == TT_OK ? wait_released(c) : rc;
    }
    c->sends_left = last ? 1 : (int)nseg;
    for (size_t j = 0; j < nseg && rc == TT_OK; j++) {
        tt_ring_span_t s = tt_ring_sched_segment(whole, nseg, j);
        if ((rc = await_unit(c, (uint32_t)j, s.count * es, &u)) != TT_OK)
            break;
        if (!last) /* pass it on first: the copy overlaps the next hop */
            rc = send_unit(c, (uint32_t)j, NULL, 0, &u);
        if (s.count > 0)
            memcpy(buf + s.off * es, u.data, s.count * es);
        tt_ring_msg_done(r, &u);
    }
    if (rc == TT_OK && last)
        rc = send_unit(c, (uint32_t)nseg, NULL, 0, NULL);
    return rc == TT_OK ? wait_released(c) : rc;
}

static void coll_begin(coll_t *c, tt_ring_t *r, tt_coll_fp_t fp) {
    memset(c, 0, sizeof(*c));
    c->r = r;
    c->fp = fp;
    c->seq = tt_collseq_next(&r->seq_counter);
    c->esize = tt_collseq_dtype_size(fp.dtype);
    if (c->esize == 0)
        c->esize = 1;
    c->start_ms = tt_clock_mono_ms();
    c->deadline_at = c->start_ms + (uint64_t)r->deadline_ms;
    c->last_wait_sent = c->start_ms;
    c->left_suspect = -1;
    r->err[0] = '\0';
    uint64_t now_ns = tt_clock_mono_ns();
    tt_flight_rec_t rec = {.generation = r->gen,
                           .seq = c->seq,
                           .op = fp.op,
                           .dtype = fp.dtype,
                           .redop = fp.redop,
                           .bytes = fp.count * tt_collseq_dtype_size(fp.dtype),
                           .peer = r->left,
                           .t_queued_ns = now_ns};
    c->flight_id = tt_flight_begin(r->flight, &rec);
    tt_flight_started(r->flight, c->flight_id, now_ns);
}

static int coll_end(coll_t *c, int rc) {
    if (rc == TT_OK)
        tt_flight_finish(c->r->flight, c->flight_id, tt_clock_mono_ns(), rc);
    return rc;
}

int tt_ring_allreduce_side(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, tt_redop_t op,
                           int64_t *side) {
    tt_ring_red_fn fn = tt_ring_reduce_fn((int)dtype, (int)op);
    if (r == NULL || fn == NULL || (buf == NULL && count > 0))
        return TT_EINVAL;
    if (r->failed)
        return r->failed;
    coll_t c;
    coll_begin(&c, r, (tt_coll_fp_t){TT_COLL_ALLREDUCE, (uint8_t)dtype, (uint8_t)op, -1, count});
    c.side = side;
    c.side_own = side != NULL ? *side : 0;
    int rc = r->world == 1 ? TT_OK : r->ready ? TT_OK : handshake(&c);
    return coll_end(&c, rc != TT_OK || r->world == 1 ? rc : allreduce_units(&c, buf, count, fn));
}

int tt_ring_allreduce(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, tt_redop_t op) {
    return tt_ring_allreduce_side(r, buf, count, dtype, op, NULL);
}

int tt_ring_broadcast(tt_ring_t *r, void *buf, size_t count, tt_dtype_t dtype, int root) {
    if (r == NULL || tt_collseq_dtype_size((int)dtype) == 0 || (buf == NULL && count > 0) ||
        root < 0 || root >= r->world)
        return TT_EINVAL;
    if (r->failed)
        return r->failed;
    coll_t c;
    coll_begin(&c, r, (tt_coll_fp_t){TT_COLL_BROADCAST, (uint8_t)dtype, TT_RED_NONE, root, count});
    int rc = r->world == 1 ? TT_OK : r->ready ? TT_OK : handshake(&c);
    return coll_end(&c, rc != TT_OK || r->world == 1 ? rc : bcast_units(&c, buf, count, root));
}

int tt_ring_barrier(tt_ring_t *r) {
    if (r == NULL)
        return TT_EINVAL;
    if (r->failed)
        return r->failed;
    coll_t c;
    coll_begin(&c, r, (tt_coll_fp_t){TT_COLL_BARRIER, 0, TT_RED_NONE, -1, 0});
    char token = 0; /* a barrier is an all-reduce of nothing */
    int rc = r->world == 1 ? TT_OK : r->ready ? TT_OK : handshake(&c);
    return coll_end(&c, rc != TT_OK || r->world == 1 ? rc : allreduce_units(&c, &token, 0, NULL));
}
