/* tt_ps: one request engine drives every operation. An operation is a set
 * of items (chunks, or shards for the setup), each sent to its shard as one
 * request and finished by one reply; at most `credits` items per shard are
 * in flight, the rest wait their turn. Request ids carry the operation's
 * number in the high bits, so a late reply to an abandoned operation is
 * recognised and dropped. Refusals a shard may answer in normal work or
 * after a restart (busy, not set up, a duplicate, an older round still
 * open) and lost connections are tt_ps_recover.c's. tt_ps_interrupt (any
 * thread) raises a tt_wake the waits poll, so a call stuck on a shard that
 * is gone ends as soon as the generation does.
 * Zero-copy: chunk payloads point into the caller's buffer; a counter of
 * frames ZeroMQ still references (decremented from its I/O thread) must
 * reach zero before a call returns. The result of a push can only arrive
 * after the shard received the whole push, so writing results in place
 * never races with ZeroMQ reading the same bytes; requests sent again are
 * copied, so no second frame can alias a result being written. */
#include "tt_ps_internal.h"

#include "tt_clock.h"
#include "tt_log.h"
#include "tt_status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ZC_MIN_BYTES  ((size_t)32 << 10) /* below this a copy is cheaper */
#define LINK_EVENTS   (ZMQ_EVENT_DISCONNECTED | TT_ZMQ_REACH_EVENTS)
#define PEER_CHECK_MS 20 /* how often a waiting call asks peer_gone and gen_over */

/* ZeroMQ runs zero-copy free callbacks on its I/O thread after a hand-off
 * TSan cannot see (tests/sanitizers/tsan.supp): the counter's address is
 * released before each such send and acquired in the callback. */
#include "tt_tsan.h"

void tt_ps_layout_free(tt_ps_layout_t *l) {
    if (l == NULL)
        return;
    for (size_t i = 0; l->endpoints != NULL && i < l->place.nshards; i++)
        free(l->endpoints[i]);
    free(l->endpoints);
    tt_placement_free(&l->place);
    l->endpoints = NULL;
}

static int layout_copy(const tt_ps_layout_t *src, tt_ps_layout_t *out) {
    memset(out, 0, sizeof(*out));
    if (tt_placement_copy(&src->place, &out->place) != TT_OK)
        return TT_ENOMEM;
    out->endpoints = calloc(src->place.nshards + 1, sizeof(char *));
    for (size_t i = 0; out->endpoints != NULL && i < src->place.nshards; i++) {
        if ((out->endpoints[i] = strdup(src->endpoints[i])) == NULL)
            break;
    }
    for (size_t i = 0; i < src->place.nshards; i++) {
        if (out->endpoints == NULL || out->endpoints[i] == NULL) {
            tt_ps_layout_free(out);
            return TT_ENOMEM;
        }
    }
    return TT_OK;
}

static const char *check_opts(const tt_ps_opts_t *o) {
    if (o == NULL)
        return "no options";
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return "rank must be in [0, world)";
    if (o->layout == NULL || o->layout->place.nshards == 0 || o->layout->place.nchunks == 0 ||
        o->layout->endpoints == NULL)
        return "no placement (fetch it with tt_ps_layout_fetch)";
    if (o->layout->place.nchunks >= PS_SETUP_ITEM)
        return "placement has too many chunks";
    if (o->job_id == NULL || strlen(o->job_id) > TT_WIRE_MAX_ID || o->deadline_ms < 0 ||
        o->credits < 0 || o->mode > TT_PS_OPTIMIZER || o->optim > TT_PS_ADAMW)
        return "bad job id, deadline, credits, mode or optimizer";
    return NULL;
}

/* ---- the request engine ---- */

static void zc_release(void *data, void *hint) {
    tt_ps_t *p = hint;
    (void)data;
    TT_TSAN_ACQUIRE((void *)&p->zc_out);
    atomic_fetch_sub(&p->zc_out, 1);
}

const tt_place_chunk_t *ps_chunk(const tt_ps_t *p, size_t i) {
    return &p->lay.place.chunks[i];
}

size_t ps_item_shard(const tt_ps_t *p, const ps_op_t *op, size_t i) {
    return op->kind == PS_OP_SETUP || op->kind == PS_OP_WRITE ? i : ps_chunk(p, i)->shard;
}

/* The part of chunk i inside [op->offset, op->offset + op->count). */
static void chunk_range(const tt_ps_t *p, const ps_op_t *op, size_t i, size_t *lo, size_t *hi) {
    const tt_place_chunk_t *c = ps_chunk(p, i);
    size_t a = (size_t)c->offset, b = (size_t)(c->offset + c->count);
    *lo = op->offset > a ? op->offset : a;
    *hi = op->offset + op->count < b ? op->offset + op->count : b;
}

static void payload_of(tt_ps_t *p, const void *data, size_t len, int copy, tt_zmq_payload_t *pl) {
    pl->data = data;
    pl->len = len;
    pl->free_fn = NULL;
    pl->hint = NULL;
    if (len >= ZC_MIN_BYTES && !copy) {
        atomic_fetch_add(&p->zc_out, 1);
        TT_TSAN_RELEASE((void *)&p->zc_out);
        pl->free_fn = zc_release;
        pl->hint = p;
    }
}

static int build_setup(tt_ps_t *p, size_t shard, ps_msg_t *m) {
    Tether__PsSetup *s = &m->b.setup;
    tether__ps_setup__init(s);
    s->mode = (uint32_t)p->o.mode;
    s->optim = (uint32_t)p->o.optim;
    s->momentum = p->o.sgd.momentum;
    s->nesterov = p->o.sgd.nesterov != 0;
    s->weight_decay = p->o.optim == TT_PS_ADAMW ? p->o.adamw.weight_decay : p->o.sgd.weight_decay;
    s->beta1 = p->o.adamw.beta1;
    s->beta2 = p->o.adamw.beta2;
    s->eps = p->o.adamw.eps;
    s->deterministic = p->o.deterministic != 0;
    s->placement_version = p->lay.place.version;
    s->park_timeout_ms = p->o.park_timeout_ms;
    size_t n = p->lay.place.nchunks, k = 0;
    m->specs = calloc(n, sizeof(*m->specs));
    m->spec_ptrs = calloc(n, sizeof(*m->spec_ptrs));
    if (m->specs == NULL || m->spec_ptrs == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (ps_chunk(p, i)->shard != shard)
            continue;
        tether__ps_chunk_spec__init(&m->specs[k]);
        m->specs[k].chunk = (uint32_t)i;
        m->specs[k].count = ps_chunk(p, i)->count;
        m->spec_ptrs[k] = &m->specs[k];
        k++;
    }
    s->n_chunks = k;
    s->chunks = m->spec_ptrs;
    m->env.body_case = TETHER__ENVELOPE__BODY_PS_SETUP;
    m->env.ps_setup = s;
    return TT_OK;
}

/* A push of this step's input, or with PS_F_REFILL of the previous step's
 * saved input, or with PS_F_PULL a request for the result. */
static void build_push(tt_ps_t *p, const ps_op_t *op, size_t i, ps_msg_t *m) {
    Tether__PushChunk *b = &m->b.push;
    const tt_place_chunk_t *c = ps_chunk(p, i);
    uint8_t f = op->flags[i - op->first];
    int refill = (f & PS_F_REFILL) != 0;
    if (f & PS_F_PULL) {
        tether__pull_chunk__init(&m->b.pull);
        m->b.pull.chunk = (uint32_t)i;
        m->b.pull.step = op->step;
        m->env.body_case = TETHER__ENVELOPE__BODY_PULL_CHUNK;
        m->env.pull_chunk = &m->b.pull;
        return;
    }
    tether__push_chunk__init(b);
    b->chunk = (uint32_t)i;
    b->step = refill ? op->step - 1 : op->step;
    b->rank = (uint32_t)p->o.rank;
    b->world = (uint32_t)p->o.world;
    b->examples = refill ? p->saved_examples[i] : op->local_count;
    b->lr = p->lr;
    b->want_result = 1;
    m->env.body_case = TETHER__ENVELOPE__BODY_PUSH_CHUNK;
    m->env.push_chunk = b;
    payload_of(p, (refill ? p->saved : op->buf) + c->offset, (size_t)c->count * sizeof(float),
               f & (PS_F_RESENT | PS_F_REFILL), &m->pl);
    m->npl = 1;
}

static void build_params(tt_ps_t *p, const ps_op_t *op, size_t i, ps_msg_t *m) {
    size_t lo, hi;
    chunk_range(p, op, i, &lo, &hi);
    size_t in_chunk = lo - (size_t)ps_chunk(p, i)->offset;
    if (op->kind == PS_OP_SET) {
        tether__set_params__init(&m->b.set);
        m->b.set.chunk = (uint32_t)i;
        m->b.set.offset = in_chunk;
        m->b.set.part = (uint32_t)op->part;
        m->b.set.optim_step = op->optim_step;
        m->env.body_case = TETHER__ENVELOPE__BODY_SET_PARAMS;
        m->env.set_params = &m->b.set;
        payload_of(p, op->src + (lo - op->offset), (hi - lo) * sizeof(float),
                   op->flags[i - op->first] & PS_F_RESENT, &m->pl);
        m->npl = 1;
        return;
    }
    tether__get_params__init(&m->b.get);
    m->b.get.chunk = (uint32_t)i;
    m->b.get.offset = in_chunk;
    m->b.get.count = hi - lo;
    m->b.get.part = (uint32_t)op->part;
    m->env.body_case = TETHER__ENVELOPE__BODY_GET_PARAMS;
    m->env.get_params = &m->b.get;
}

/* Sends item i to shard s, or with i == PS_SETUP_ITEM the PsSetup that must
 * precede the next requests to a restarted shard. TT_EAGAIN: not
 * connected yet (ZMQ_IMMEDIATE), try later. */
static int send_item(tt_ps_t *p, ps_op_t *op, size_t s, size_t i) {
    ps_msg_t m;
    memset(&m, 0, sizeof(m));
    uint64_t req = (p->op_seq << PS_ITEM_BITS) | i;
    tt_wire_env_init(&m.env, p->job, p->sender, p->o.generation, req);
    int rc = TT_OK;
    if (op->kind == PS_OP_SETUP || i == PS_SETUP_ITEM)
        rc = build_setup(p, s, &m);
    else if (op->kind == PS_OP_PUSH)
        build_push(p, op, i, &m);
    else if (op->kind == PS_OP_WRITE)
        rc = ps_build_write(p, op, s, op->written[s].file, &m);
    else
        build_params(p, op, i, &m);
    if (rc == TT_OK)
        rc = tt_zmq_send(p->socks[s], NULL, 0, &m.env, &m.pl, m.npl, 1);
    free(m.specs);
    free(m.spec_ptrs);
    free(m.offsets);
    free(m.offset_ptrs);
    if (rc == TT_OK && i == PS_SETUP_ITEM) {
        p->link[s].resetup = 0;
        p->link[s].setup_pending = 1;
    } else if (rc == TT_OK && op->no_reply) {
        op->state[i - op->first] = PS_DONE;
        op->remaining--;
    } else if (rc == TT_OK) {
        op->state[i - op->first] = PS_FLIGHT;
        p->inflight[s]++;
    } else if (rc != TT_EAGAIN) {
        PS_ERR(p, "sending %s of item %zu to shard %s failed: %s",
               tt_wire_body_name(m.env.body_case), i, p->lay.place.shard_ids[s], tt_strerror(rc));
    }
    return rc;
}

int ps_send_refills(tt_ps_t *p, size_t s, size_t *sent) {
    uint8_t state = PS_SEND, flags = PS_F_REFILL;
    ps_op_t op = {.kind = PS_OP_PUSH, .nitems = 1, .state = &state, .flags = &flags};
    int rc = p->link[s].resetup ? send_item(p, &op, s, PS_SETUP_ITEM) : TT_OK;
    *sent = 0;
    for (size_t i = 0; rc == TT_OK && i < p->lay.place.nchunks; i++) {
        if (ps_chunk(p, i)->shard != s || p->saved_step[i] == UINT64_MAX)
            continue;
        op.first = i;
        op.step = p->saved_step[i] + 1; /* build_push refills op.step - 1 */
        if ((rc = send_item(p, &op, s, i)) == TT_OK)
            (*sent)++;
    }
    /* Their answers carry this op_seq: the next call drops them. */
    p->inflight[s] = 0;
    p->link[s].setup_pending = 0;
    return rc;
}

/* Fills every shard's credit window. Returns TT_OK, or a send failure. */
static int send_more(tt_ps_t *p, ps_op_t *op, uint64_t now, int *blocked) {
    *blocked = 0;
    if (now < op->retry_at) {
        *blocked = 1;
        return TT_OK;
    }
    size_t end = op->first + op->nitems;
    for (size_t s = 0; s < p->lay.place.nshards; s++) {
        size_t i = p->cursor[s] > op->first ? p->cursor[s] : op->first;
        if (p->link[s].down) {
            *blocked = 1; /* until it connects again: see ps_watch_link */
            continue;
        }
        for (; i < end && p->inflight[s] < (size_t)p->o.credits; i++) {
            if (ps_item_shard(p, op, i) != s || op->state[i - op->first] != PS_SEND)
                continue;
            int rc = p->link[s].resetup ? send_item(p, op, s, PS_SETUP_ITEM) : TT_OK;
            if (rc == TT_OK)
                rc = send_item(p, op, s, i);
            if (rc == TT_EAGAIN) {
                *blocked = 1;
                break;
            }
            if (rc != TT_OK)
                return rc;
        }
        p->cursor[s] = i;
    }
    return TT_OK;
}

/* "... missing: 2 5" in a shard's timeout sentence names the suspects. */
static void note_suspect(tt_ps_t *p, const char *msg) {
    const char *m = msg ? strstr(msg, "missing:") : NULL;
    if (m != NULL)
        p->suspect = atoi(m + 8);
}

static int on_error_reply(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, const Tether__Error *e,
                          uint64_t now) {
    int rc;
    if (ps_recover_error(p, op, i, s, e, now, &rc))
        return rc;
    if (e->code == TT_ETIMEDOUT)
        note_suspect(p, e->message);
    PS_ERR(p, "shard %s refused %s item %zu: %s (%s)", p->lay.place.shard_ids[s],
           op->kind == PS_OP_PUSH ? "push" : "request", i, e->message ? e->message : "",
           tt_status_name(e->code));
    return e->code < 0 ? e->code : TT_EREMOTE;
}

static int expect_frame(tt_ps_t *p, const tt_zmq_rx_t *rx, size_t elems, size_t i) {
    if (rx->npayload == 1 && zmq_msg_size((zmq_msg_t *)&rx->payload[0]) == elems * sizeof(float))
        return TT_OK;
    PS_ERR(p, "reply for item %zu carries %zu frame(s), expected one of %zu floats", i,
           rx->npayload, elems);
    return TT_ESIZE;
}

static int on_push_result(tt_ps_t *p, ps_op_t *op, size_t i, tt_zmq_rx_t *rx) {
    const Tether__ChunkResult *r = rx->env->chunk_result;
    const tt_place_chunk_t *c = ps_chunk(p, i);
    if (r->chunk != i || r->step != op->step) {
        PS_ERR(p, "result for chunk %u step %" PRIu64 ", expected chunk %zu step %" PRIu64,
               r->chunk, r->step, i, op->step);
        return TT_EPROTO;
    }
    int rc = expect_frame(p, rx, (size_t)c->count, i);
    if (rc != TT_OK)
        return rc;
    if (op->have_total && r->total_examples != op->total) {
        PS_ERR(p,
               "chunk %zu reports %" PRIu64 " examples in all, chunk %zu reported %" PRIu64
               " (shards disagree on the ranks' counts)",
               i, r->total_examples, op->first, op->total);
        return TT_EDESYNC;
    }
    op->total = r->total_examples;
    op->have_total = 1;
    ps_save_input(p, op, i);
    memcpy(op->buf + c->offset, zmq_msg_data(&rx->payload[0]), (size_t)c->count * sizeof(float));
    return TT_OK;
}

static int on_get_result(tt_ps_t *p, ps_op_t *op, size_t i, tt_zmq_rx_t *rx) {
    size_t lo, hi;
    chunk_range(p, op, i, &lo, &hi);
    int rc = expect_frame(p, rx, hi - lo, i);
    if (rc != TT_OK)
        return rc;
    memcpy(op->buf + (lo - op->offset), zmq_msg_data(&rx->payload[0]), (hi - lo) * sizeof(float));
    if (!op->have_optim_step) {
        op->got_optim_step = rx->env->params_reply->optim_step;
        op->have_optim_step = 1;
    }
    return TT_OK;
}

static int expected_body(const ps_op_t *op) {
    if (op->kind == PS_OP_WRITE && op->phase == 1)
        return TETHER__ENVELOPE__BODY_ACK; /* the shard copied its chunks */
    switch (op->kind) {
    case PS_OP_PUSH:
        return TETHER__ENVELOPE__BODY_CHUNK_RESULT;
    case PS_OP_GET:
        return TETHER__ENVELOPE__BODY_PARAMS_REPLY;
    case PS_OP_WRITE:
        return TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN;
    default:
        return TETHER__ENVELOPE__BODY_ACK;
    }
}

/* One reply from shard s. Late replies of other operations are dropped. */
static int on_reply(tt_ps_t *p, ps_op_t *op, size_t s, tt_zmq_rx_t *rx, uint64_t now) {
    uint64_t req = rx->env->request_id;
    size_t i = (size_t)(req & PS_SETUP_ITEM);
    if ((req >> PS_ITEM_BITS) & PS_SIDE_SEQ)
        return ps_side_reply(p, s, rx);
    if ((req >> PS_ITEM_BITS) != p->op_seq)
        return TT_OK;
    if (i == PS_SETUP_ITEM)
        return ps_resetup_reply(p, s, rx);
    if (i < op->first || i >= op->first + op->nitems || ps_item_shard(p, op, i) != s ||
        op->state[i - op->first] != PS_FLIGHT)
        return TT_OK;
    int rc = TT_OK;
    if (rx->env->body_case == TETHER__ENVELOPE__BODY_ERROR)
        return on_error_reply(p, op, i, s, rx->env->error, now);
    if ((int)rx->env->body_case != expected_body(op)) {
        PS_ERR(p, "shard %s answered item %zu with '%s'", p->lay.place.shard_ids[s], i,
               tt_wire_body_name(rx->env->body_case));
        return TT_EPROTO;
    }
    if (op->kind == PS_OP_PUSH && (op->flags[i - op->first] & PS_F_REFILL))
        return ps_refill_result(p, op, i, s, rx); /* not done: this step's push follows */
    if (op->kind == PS_OP_PUSH)
        rc = on_push_result(p, op, i, rx);
    else if (op->kind == PS_OP_GET)
        rc = on_get_result(p, op, i, rx);
    else if (op->kind == PS_OP_WRITE && op->phase != 1)
        rc = ps_on_written(p, &op->written[i], i, rx);
    if (rc == TT_OK) {
        op->state[i - op->first] = PS_DONE;
        op->remaining--;
        p->inflight[s]--;
    }
    return rc;
}

int ps_drain(tt_ps_t *p, ps_op_t *op, size_t s, uint64_t now) {
    for (;;) {
        tt_zmq_rx_t rx;
        char err[256] = "";
        int rc = tt_zmq_recv(p->socks[s], 0, 1, NULL, &rx, err, sizeof(err));
        if (rc == TT_EAGAIN)
            return TT_OK;
        if (rc != TT_OK) {
            PS_ERR(p, "bad message from shard %s: %s", p->lay.place.shard_ids[s], err);
            return rc;
        }
        rc = on_reply(p, op, s, &rx, now);
        tt_zmq_rx_close(&rx);
        if (rc != TT_OK)
            return rc;
    }
}

/* Replies first, then connection events (tt_ps_recover.c says why). The
 * last poll item is the interrupt's eventfd: it only cuts the sleep short,
 * run_op reads the flag. */
static int wait_replies(tt_ps_t *p, ps_op_t *op, uint64_t deadline, int blocked) {
    size_t n = p->lay.place.nshards;
    zmq_pollitem_t *items = p->polls;
    for (size_t s = 0; s < n; s++) {
        items[s] = (zmq_pollitem_t){p->socks[s], 0, ZMQ_POLLIN, 0};
        items[n + s] = (zmq_pollitem_t){p->link[s].mon, 0, ZMQ_POLLIN, 0};
    }
    items[2 * n] = (zmq_pollitem_t){NULL, tt_wake_fd(&p->wake), ZMQ_POLLIN, 0};
    uint64_t now = tt_clock_mono_ms();
    long tmo = deadline > now ? (long)(deadline - now) : 0;
    if (blocked && tmo > 1)
        tmo = 1;
    if ((p->o.peer_gone != NULL || p->o.gen_over != NULL) && tmo > PEER_CHECK_MS)
        tmo = PEER_CHECK_MS;
    if (zmq_poll(items, (int)(2 * n + 1), tmo) < 0 && errno != EINTR) {
        PS_ERR(p, "zmq_poll: %s", zmq_strerror(errno));
        return TT_ESYS;
    }
    now = tt_clock_mono_ms();
    int rc = TT_OK;
    for (size_t s = 0; rc == TT_OK && s < n; s++)
        rc = (items[s].revents & ZMQ_POLLIN) ? ps_drain(p, op, s, now) : TT_OK;
    for (size_t s = 0; rc == TT_OK && s < n; s++)
        rc = (items[n + s].revents & ZMQ_POLLIN) ? ps_watch_link(p, op, s, now) : TT_OK;
    return rc;
}

/* Waits until ZeroMQ has released every zero-copy frame, up to `ms`. */
static int wait_released(tt_ps_t *p, uint64_t ms) {
    uint64_t until = tt_clock_mono_ms() + ms;
    while (atomic_load(&p->zc_out) > 0) {
        if (tt_clock_mono_ms() >= until)
            return TT_ETIMEDOUT;
        tt_clock_sleep_us(50);
    }
    return TT_OK;
}

/* The call's deadline passed: how many items are unanswered, and why
 * when a shard that holds some was never reached. */
static int timed_out(tt_ps_t *p, const ps_op_t *op, uint64_t now) {
    char why[PS_ERRLEN] = "";
    for (size_t k = 0; k < op->nitems && why[0] == '\0'; k++) {
        if (op->state[k] != PS_DONE)
            ps_link_why(p, ps_item_shard(p, op, op->first + k), now, why, sizeof(why));
    }
    PS_ERR(p,
           "%zu of %zu %s item(s) unanswered after %d ms (generation %" PRIu64 ", step %" PRIu64
           ")%s%s",
           op->remaining, op->nitems, op->kind == PS_OP_PUSH ? "chunk" : "request",
           p->o.deadline_ms, p->o.generation, op->step, why[0] ? ": " : "", why);
    return TT_ETIMEDOUT;
}

int ps_run_op(tt_ps_t *p, ps_op_t *op) {
    size_t n = p->lay.place.nshards;
    uint8_t *state = calloc(op->nitems ? 2 * op->nitems : 1, 1);
    if (state == NULL)
        return TT_ENOMEM;
    op->state = state;
    op->flags = state + op->nitems;
    op->remaining = op->nitems;
    p->op_seq++;
    memset(p->inflight, 0, n * sizeof(size_t));
    memset(p->cursor, 0, n * sizeof(size_t));
    for (size_t s = 0; s < n; s++) {
        p->link[s].setup_pending = 0; /* answers to older calls are dropped */
        if (op->kind == PS_OP_PUSH)
            p->link[s].refill_due = 0; /* this call refills what it must itself */
    }
    uint64_t start = tt_clock_mono_ms(), deadline = start + (uint64_t)p->o.deadline_ms;
    int rc = TT_OK, blocked = 0;
    for (size_t s = 0; rc == TT_OK && s < n; s++)
        rc = ps_watch_link(p, op, s, start); /* a shard lost between calls */
    while (rc == TT_OK && op->remaining > 0) {
        uint64_t now = tt_clock_mono_ms();
        if (tt_wake_raised(&p->wake) ||
            (p->o.gen_over != NULL && p->o.gen_over(p->o.gen_ctx, p->o.generation))) {
            PS_ERR(p, "generation %" PRIu64 " ended while rank %d waited for %zu of %zu item(s)",
                   p->o.generation, p->o.rank, op->remaining, op->nitems);
            rc = TT_EMEMBERSHIP;
            break;
        }
        int gone = p->o.peer_gone != NULL ? p->o.peer_gone(p->o.peer_ctx) : -1;
        if (gone >= 0) {
            PS_ERR(p,
                   "rank %d disconnected from rank %d while it waited for %zu of %zu item(s) "
                   "(generation %" PRIu64 ", step %" PRIu64 "): the round cannot complete",
                   gone, p->o.rank, op->remaining, op->nitems, p->o.generation, op->step);
            p->suspect = gone;
            rc = TT_EUNREACHABLE;
            break;
        }
        if (now >= deadline) {
            rc = timed_out(p, op, now);
            break;
        }
        ps_check_links(p, now);
        rc = send_more(p, op, now, &blocked);
        if (rc == TT_OK && op->remaining > 0)
            rc = wait_replies(p, op, deadline, blocked);
    }
    if (wait_released(p, rc == TT_OK ? (uint64_t)p->o.deadline_ms : 1000) != TT_OK && rc == TT_OK)
        rc = TT_ETIMEDOUT;
    free(state);
    op->state = op->flags = NULL;
    return rc;
}

/* ---- life cycle and calls ---- */

static int fail(tt_ps_t *p, int rc) {
    if (rc != TT_OK && rc != TT_EINVAL) {
        p->failed = rc;
        TT_WARN(PS_SUBSYS, "rank %d generation %" PRIu64 ": %s (%s)", p->o.rank, p->o.generation,
                p->err, tt_status_name(rc));
    }
    return rc;
}

static int open_sockets(tt_ps_t *p, char *err, size_t errlen) {
    size_t n = p->lay.place.nshards;
    int io = p->o.io_threads > 0 ? p->o.io_threads : (int)(n < 4 ? n : 4);
    p->zctx = zmq_ctx_new();
    p->socks = calloc(n, sizeof(void *));
    p->link = calloc(n, sizeof(*p->link));
    p->inflight = calloc(n, sizeof(size_t));
    p->cursor = calloc(n, sizeof(size_t));
    p->polls = calloc(2 * n + 1, sizeof(zmq_pollitem_t));
    if (p->zctx == NULL || p->socks == NULL || p->link == NULL || p->inflight == NULL ||
        p->cursor == NULL || p->polls == NULL)
        return TT_ENOMEM;
    if (tt_wake_open(&p->wake) != TT_OK) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "eventfd: %s", strerror(errno));
        return TT_ESYS;
    }
    zmq_ctx_set(p->zctx, ZMQ_IO_THREADS, io);
    tt_zmq_opts_t zo;
    tt_zmq_opts_default(&zo);
    zo.max_msg = (int64_t)p->lay.place.chunk_bytes + (1 << 20);
    /* Credits bound the queue; the marks only need to sit above them. */
    zo.sndhwm = zo.rcvhwm = 4 * p->o.credits + 16;
    zo.key = p->o.key;
    zo.key_kind = TT_ZAUTH_BULK;
    for (size_t s = 0; s < n; s++) {
        tt_zmq_reach_init(&p->link[s].reach, tt_clock_mono_ms());
        int rc = tt_zmq_dealer_watched(p->zctx, p->lay.endpoints[s], &zo, LINK_EVENTS, &p->socks[s],
                                       &p->link[s].mon, err, errlen);
        if (rc != TT_OK)
            return rc;
    }
    return TT_OK;
}

int tt_ps_create(tt_ps_t **out, const tt_ps_opts_t *opts, char *err, size_t errlen) {
    *out = NULL;
    const char *why = check_opts(opts);
    if (why != NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "tt_ps_create: %s", why);
        return TT_EINVAL;
    }
    tt_ps_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return TT_ENOMEM;
    p->o = *opts;
    p->o.deadline_ms = opts->deadline_ms ? opts->deadline_ms : TT_PS_DEADLINE_DEFAULT_MS;
    p->o.credits = opts->credits ? opts->credits : TT_PS_CREDITS_DEFAULT;
    p->seq = opts->first_step;
    p->suspect = -1;
    atomic_init(&p->zc_out, 0);
    tt_wake_init(&p->wake);
    snprintf(p->job, sizeof(p->job), "%s", opts->job_id);
    snprintf(p->sender, sizeof(p->sender), "%s", opts->sender_id ? opts->sender_id : "");
    int rc;
    TT_CHECK_GOTO(layout_copy(opts->layout, &p->lay), rc, fail);
    p->o.layout = &p->lay;
    TT_CHECK_GOTO(ps_keep_inputs(p), rc, fail);
    TT_CHECK_GOTO(open_sockets(p, err, errlen), rc, fail);
    ps_op_t op = {.kind = PS_OP_SETUP, .first = 0, .nitems = p->lay.place.nshards};
    rc = ps_run_op(p, &op);
    if (rc != TT_OK) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "setting the job up on the shards: %s", p->err);
        goto fail;
    }
    *out = p;
    return TT_OK;
fail:
    tt_ps_destroy(&p);
    return rc;
}

void tt_ps_destroy(tt_ps_t **pp) {
    if (pp == NULL || *pp == NULL)
        return;
    tt_ps_t *p = *pp;
    *pp = NULL;
    for (size_t s = 0; p->socks != NULL && s < p->lay.place.nshards; s++) {
        if (p->link != NULL)
            tt_zmq_monitor_close(p->socks[s], &p->link[s].mon);
        tt_zmq_close(&p->socks[s]);
    }
    if (p->zctx != NULL)
        zmq_ctx_term(p->zctx); /* returns once every frame is released */
    free(p->socks);
    free(p->link);
    free(p->saved);
    free(p->saved_step);
    free(p->saved_examples);
    ps_side_free(p);
    free(p->inflight);
    free(p->cursor);
    free(p->polls);
    tt_wake_close(&p->wake);
    tt_ps_layout_free(&p->lay);
    free(p);
}

void tt_ps_interrupt(tt_ps_t *p) {
    if (p == NULL)
        return;
    tt_wake_raise(&p->wake);
}

int tt_ps_allreduce(tt_ps_t *p, float *buf, size_t count, uint64_t local_count,
                    uint64_t *total_count) {
    if (p == NULL)
        return TT_EINVAL;
    if (p->failed)
        return p->failed;
    if (buf == NULL || count != p->lay.place.total_elems) {
        PS_ERR(p, "all-reduce of %zu elements, the placement covers %" PRIu64, count,
               p->lay.place.total_elems);
        return TT_EINVAL;
    }
    ps_op_t op = {.kind = PS_OP_PUSH,
                  .buf = buf,
                  .count = count,
                  .local_count = local_count,
                  .step = p->seq,
                  .first = 0,
                  .nitems = p->lay.place.nchunks};
    int rc = ps_run_op(p, &op);
    p->seq++;
    if (rc == TT_OK && total_count != NULL)
        *total_count = op.total;
    return fail(p, rc);
}

void tt_ps_set_step(tt_ps_t *p, uint64_t step) {
    p->seq = step;
}

void tt_ps_set_lr(tt_ps_t *p, float lr) {
    p->lr = lr;
}

/* Items (chunks) a flat range touches. */
static int range_items(tt_ps_t *p, size_t offset, size_t count, ps_op_t *op) {
    const tt_placement_t *pl = &p->lay.place;
    if (count == 0 || offset > pl->total_elems || count > pl->total_elems - offset) {
        PS_ERR(p, "range [%zu, +%zu) outside the %" PRIu64 "-element space", offset, count,
               pl->total_elems);
        return TT_EINVAL;
    }
    size_t per = (size_t)(pl->chunk_bytes / sizeof(float));
    op->offset = offset;
    op->count = count;
    op->first = offset / per;
    op->nitems = (offset + count - 1) / per - op->first + 1;
    return TT_OK;
}

int tt_ps_set_params(tt_ps_t *p, tt_ps_part_t part, const float *src, size_t offset, size_t count,
                     uint64_t optim_step) {
    if (p == NULL || src == NULL || part > TT_PS_STATE2)
        return TT_EINVAL;
    if (p->failed)
        return p->failed;
    ps_op_t op = {.kind = PS_OP_SET, .src = src, .part = part, .optim_step = optim_step};
    int rc = range_items(p, offset, count, &op);
    return rc == TT_OK ? ps_run_op(p, &op) : rc;
}

int tt_ps_get_params(tt_ps_t *p, tt_ps_part_t part, float *dst, size_t offset, size_t count,
                     uint64_t *optim_step) {
    if (p == NULL || dst == NULL || part > TT_PS_STATE2)
        return TT_EINVAL;
    if (p->failed)
        return p->failed;
    ps_op_t op = {.kind = PS_OP_GET, .buf = dst, .part = part};
    int rc = range_items(p, offset, count, &op);
    if (rc == TT_OK)
        rc = ps_run_op(p, &op);
    if (rc == TT_OK && optim_step != NULL)
        *optim_step = op.got_optim_step;
    return rc;
}

int tt_ps_status(const tt_ps_t *p) {
    return p->failed;
}

const char *tt_ps_last_error(const tt_ps_t *p) {
    return p->err;
}

int tt_ps_suspect(const tt_ps_t *p) {
    return p->suspect;
}
