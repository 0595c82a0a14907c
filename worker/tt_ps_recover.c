/* tt_ps_recover: what the PS engine does when a shard server is lost. A
 * shard that dies is restarted by its supervisor on the same endpoint and
 * comes back empty; within one call this rank then
 *  - learns of it from a socket monitor (the connection dropped) or from
 *    the shard's "job not set up" answer, sends what was in flight again
 *    once a connection is made again, and in aggregate mode sets the job
 *    up again first (a PsSetup ahead of the requests on the same
 *    connection, which the shard handles in order);
 *  - asks for the result instead (PullChunk) when a push it sent again is
 *    already held or final there (the connection dropped, not the shard);
 *  - refills the shard from its own copy of the previous step's input when
 *    the shard says that step is still open: the shard died after some
 *    ranks had that step's result and before others did, so the ranks
 *    behind re-push it and the ranks ahead must contribute again. This
 *    rests on deterministic (rank-order) sums, which make the re-made
 *    result the bits the ranks ahead already applied; without them the
 *    call fails rather than let the replicas differ.
 * In optimizer mode a restarted shard has lost parameters that only the
 * library can upload again (tt_ps_set_params), so it is never set up
 * again here: its "not set up" answer fails the call.
 * It owns the saved inputs (allocated by ps_keep_inputs, freed by
 * tt_ps_destroy); the engine, sockets and items are tt_ps.c's. */
#include "tt_ps_internal.h"

#include "tt_log.h"
#include "tt_status.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RECOVERY 16 /* lost connections and re-setups per call */

int ps_keep_inputs(tt_ps_t *p) {
    size_t n = p->lay.place.nchunks;
    if (p->o.mode != TT_PS_AGGREGATE || !p->o.deterministic)
        return TT_OK;
    p->saved = malloc(p->lay.place.total_elems * sizeof(float) + 1);
    p->saved_step = malloc(n * sizeof(uint64_t));
    p->saved_examples = calloc(n, sizeof(uint64_t));
    if (p->saved == NULL || p->saved_step == NULL || p->saved_examples == NULL)
        return TT_ENOMEM;
    memset(p->saved_step, 0xff, n * sizeof(uint64_t)); /* UINT64_MAX: none */
    return TT_OK;
}

/* Why it is safe to overwrite the previous step's copy: this step's
 * result for the chunk exists only once every rank pushed this step,
 * which each did after it had the previous step's result. */
void ps_save_input(tt_ps_t *p, const ps_op_t *op, size_t i) {
    if (p->saved == NULL)
        return;
    const tt_place_chunk_t *c = ps_chunk(p, i);
    memcpy(p->saved + c->offset, op->buf + c->offset, (size_t)c->count * sizeof(float));
    p->saved_step[i] = op->step;
    p->saved_examples[i] = op->local_count;
}

/* Item i goes to shard s again (it left PS_FLIGHT) with `flags`. */
static void send_again(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, uint8_t flags) {
    op->state[i - op->first] = PS_SEND;
    op->flags[i - op->first] = flags;
    p->inflight[s]--;
    p->cursor[s] = p->cursor[s] < i ? p->cursor[s] : i;
}

/* Counts one lost connection or re-setup; a shard that keeps failing
 * within one call is given up on. */
static int recovered(tt_ps_t *p, ps_op_t *op, size_t s) {
    if (++op->recoveries <= MAX_RECOVERY)
        return TT_OK;
    PS_ERR(p,
           "shard %s lost its connection or the job %d times within one call "
           "(generation %" PRIu64 ", step %" PRIu64 "): giving up",
           p->lay.place.shard_ids[s], MAX_RECOVERY, p->o.generation, op->step);
    return TT_EUNREACHABLE;
}

/* The shard has the previous step of chunk i open (TT_EAGAIN): contribute
 * our saved input to it once, then wait for this step's turn. */
static int refill_or_wait(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, uint64_t now) {
    uint8_t f = op->flags[i - op->first];
    if (f & PS_F_REFILLED) {
        send_again(p, op, i, s, f);
        op->retry_at = now + PS_RETRY_MS;
        return TT_OK;
    }
    if (p->saved == NULL || op->step == 0 || p->saved_step[i] != op->step - 1) {
        PS_ERR(p,
               "shard %s still has step %" PRIu64 " of chunk %zu open (it restarted) and "
               "rank %d cannot contribute to it again: %s",
               p->lay.place.shard_ids[s], op->step - 1, i, p->o.rank,
               p->saved == NULL ? "only deterministic aggregate mode keeps the input, and "
                                  "without rank-order sums the result could differ in its bits"
                                : "its saved input is of another step");
        return TT_EDESYNC;
    }
    TT_WARN(PS_SUBSYS,
            "rank %d generation %" PRIu64 ": shard %s restarted with step %" PRIu64
            " of chunk %zu unfinished; contributing to it again from this rank's copy",
            p->o.rank, p->o.generation, p->lay.place.shard_ids[s], op->step - 1, i);
    send_again(p, op, i, s, (uint8_t)((f & ~PS_F_PULL) | PS_F_REFILL)); /* its round was dropped */
    return TT_OK;
}

/* A refill is done when its round finished, or when the shard already
 * holds our contribution or the final result. */
static void refill_done(tt_ps_t *p, ps_op_t *op, size_t i, size_t s) {
    uint8_t f = op->flags[i - op->first];
    send_again(p, op, i, s, (uint8_t)((f & ~PS_F_REFILL) | PS_F_REFILLED));
}

int ps_recover_error(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, const Tether__Error *e,
                     uint64_t now, int *rc) {
    uint8_t f = op->flags[i - op->first];
    int code = e->code, push = op->kind == PS_OP_PUSH;
    *rc = TT_OK;
    if (code == TT_EBUSY) {
        send_again(p, op, i, s, f);
        op->retry_at = now + PS_RETRY_MS;
    } else if (code == TT_ENOTFOUND && p->o.mode == TT_PS_AGGREGATE && op->kind != PS_OP_SETUP) {
        send_again(p, op, i, s, PS_F_RESENT); /* not set up: it restarted */
        if (!p->link[s].setup_pending) {      /* else that setup is ahead of the next copy */
            p->link[s].resetup = 1;
            *rc = recovered(p, op, s);
        }
    } else if (code == TT_ENOTFOUND && op->kind != PS_OP_SETUP) {
        /* Optimizer mode: the state lived there; say what the operator does. */
        PS_ERR(p,
               "shard %s restarted and lost the job's parameters and optimizer state (the "
               "update runs on the shard servers): resume from the last checkpoint "
               "(tether-train --resume auto)",
               p->lay.place.shard_ids[s]);
        *rc = TT_ESTALE;
    } else if (push && (f & PS_F_REFILL) && (code == TT_EEXIST || code == TT_ESTALE)) {
        refill_done(p, op, i, s);
    } else if (push && (f & PS_F_RESENT) && !(f & PS_F_PULL) &&
               (code == TT_EEXIST || code == TT_ESTALE)) {
        send_again(p, op, i, s, PS_F_RESENT | PS_F_PULL);
    } else if (push && code == TT_EAGAIN && !(f & PS_F_REFILL)) {
        *rc = refill_or_wait(p, op, i, s, now);
    } else {
        return 0;
    }
    return 1;
}

int ps_refill_result(tt_ps_t *p, ps_op_t *op, size_t i, size_t s, const tt_zmq_rx_t *rx) {
    const Tether__ChunkResult *r = rx->env->chunk_result;
    if (r->chunk != i || r->step + 1 != op->step) {
        PS_ERR(p, "refill of chunk %zu step %" PRIu64 " answered for chunk %u step %" PRIu64, i,
               op->step - 1, r->chunk, r->step);
        return TT_EPROTO;
    }
    refill_done(p, op, i, s);
    return TT_OK;
}

int ps_resetup_reply(tt_ps_t *p, size_t s, const tt_zmq_rx_t *rx) {
    p->link[s].setup_pending = 0;
    if (rx->env->body_case == TETHER__ENVELOPE__BODY_ACK) {
        TT_INFO(PS_SUBSYS, "rank %d generation %" PRIu64 ": job set up again on shard %s",
                p->o.rank, p->o.generation, p->lay.place.shard_ids[s]);
        return TT_OK;
    }
    const Tether__Error *e =
        rx->env->body_case == TETHER__ENVELOPE__BODY_ERROR ? rx->env->error : NULL;
    PS_ERR(p, "setting the job up again on shard %s (it restarted) failed: %s (%s)",
           p->lay.place.shard_ids[s], e && e->message ? e->message : "unexpected answer",
           tt_status_name(e ? e->code : TT_EPROTO));
    return e && e->code < 0 ? e->code : TT_EPROTO;
}

/* What a dropped connection to shard s means for the link, in a call or
 * between calls; n requests were in flight. A connection that never
 * completed a handshake (a peer that is no shard can take a request, as
 * ZMTP 1.0 did, before it fails) is not told as a loss each time:
 * ps_check_links names that shard once. */
static void link_lost(tt_ps_t *p, size_t s, size_t n) {
    p->inflight[s] = 0;
    p->link[s].resetup = p->o.mode == TT_PS_AGGREGATE;
    p->link[s].setup_pending = 0;
    p->link[s].refill_due = p->saved != NULL;
    if (p->link[s].reach.met)
        TT_WARN(PS_SUBSYS,
                "rank %d generation %" PRIu64 ": connection to shard %s lost; %zu request(s) "
                "in flight go again once it is back",
                p->o.rank, p->o.generation, p->lay.place.shard_ids[s], n);
}

/* The connection to shard s dropped. Its replies that arrived before the
 * drop are taken first (ZeroMQ queues them before it reports the drop),
 * so that an item already answered is not sent again; the rest of what
 * was in flight goes again, behind a fresh setup in aggregate mode. A
 * pull or refill starts over as a push: a restarted shard knows neither. */
static int shard_lost(tt_ps_t *p, ps_op_t *op, size_t s, uint64_t now) {
    int rc = ps_drain(p, op, s, now);
    /* A checkpoint part can only come from the state the shard held: one
     * that restarts in optimizer mode holds none, so waiting is pointless. */
    if (rc == TT_OK && op->kind == PS_OP_WRITE && op->state[s] != PS_DONE) {
        p->inflight[s] = 0;
        PS_ERR(p,
               "shard %s lost while it wrote its checkpoint part: the checkpoint cannot "
               "complete",
               p->lay.place.shard_ids[s]);
        return TT_EUNREACHABLE;
    }
    size_t n = 0;
    for (size_t k = 0; rc == TT_OK && k < op->nitems; k++) {
        if (op->state[k] == PS_FLIGHT && ps_item_shard(p, op, op->first + k) == s) {
            op->state[k] = PS_SEND;
            op->flags[k] = PS_F_RESENT;
            n++;
        }
    }
    p->cursor[s] = op->first;
    link_lost(p, s, n);
    if (rc == TT_OK && !p->link[s].reach.met)
        return TT_OK; /* nothing was lost: the call's deadline bounds the tries */
    return rc == TT_OK ? recovered(p, op, s) : rc;
}

/* In order: a disconnect is handled, and the link stays down until a
 * connection is made again. Why wait for that: ZeroMQ reports the drop
 * before it discards the dropped connection's queue, so a request sent in
 * between would vanish without an answer. */
static void link_event(tt_ps_t *p, size_t s, uint16_t ev, int32_t val, int *lost) {
    ps_link_t *l = &p->link[s];
    tt_zmq_reach_event(&l->reach, ev, val);
    if (ev == ZMQ_EVENT_CONNECTED || ev == ZMQ_EVENT_DISCONNECTED) {
        l->down = ev == ZMQ_EVENT_DISCONNECTED;
        /* Before any handshake nothing was queued (ZMQ_IMMEDIATE); a
         * request counted in flight all the same is treated as lost. */
        *lost |= l->down && (l->reach.met || p->inflight[s] > 0);
    }
}

/* Reads every pending connection event of shard s's link; `down` follows
 * the last one. 1 when a connection that carried requests dropped since
 * the last read. */
static int read_link_events(tt_ps_t *p, size_t s) {
    uint16_t ev = 0;
    int32_t val = 0;
    int lost = 0, rc;
    while ((rc = tt_zmq_monitor_read(p->link[s].mon, &ev, &val)) != TT_EAGAIN) {
        if (rc == TT_OK)
            link_event(p, s, ev, val, &lost);
    }
    return lost;
}

int ps_watch_link(tt_ps_t *p, ps_op_t *op, size_t s, uint64_t now) {
    return read_link_events(p, s) ? shard_lost(p, op, s, now) : TT_OK;
}

/* Why a lost shard is refilled even when this rank's last call finished:
 * the shard may have died after answering this rank and before answering
 * another, which then pushes that step again to the restarted shard and
 * waits there, while this rank waits for it in the next plain collective
 * (the metrics at an epoch's end). Nothing in a later push call could
 * break that; only this rank contributing again can. A refill the shard
 * does not need is refused (final, or held already) and dropped. */
void tt_ps_tend(tt_ps_t *p) {
    if (p == NULL || p->saved == NULL || p->failed)
        return;
    for (size_t s = 0; s < p->lay.place.nshards; s++) {
        ps_link_t *l = &p->link[s];
        if (read_link_events(p, s))
            link_lost(p, s, 0);
        if (!l->refill_due || l->down)
            continue;
        size_t sent = 0;
        int rc = ps_send_refills(p, s, &sent);
        if (rc == TT_EAGAIN)
            continue; /* not connected yet after all: next time */
        l->refill_due = 0;
        if (rc != TT_OK)
            TT_WARN(PS_SUBSYS, "rank %d generation %" PRIu64 ": %s", p->o.rank, p->o.generation,
                    p->err);
        else if (sent > 0)
            TT_WARN(PS_SUBSYS,
                    "rank %d generation %" PRIu64 ": shard %s is back between calls; "
                    "contributing to it again this rank's input of the last step for %zu "
                    "chunk(s), for ranks that may still wait on that step",
                    p->o.rank, p->o.generation, p->lay.place.shard_ids[s], sent);
    }
}

void ps_link_why(const tt_ps_t *p, size_t s, uint64_t now, char *buf, size_t len) {
    char who[TT_WIRE_MAX_ID + 8];
    snprintf(who, sizeof(who), "shard %s", p->lay.place.shard_ids[s]);
    tt_zmq_reach_why(&p->link[s].reach, who, p->lay.endpoints[s], "its advertised address", now,
                     buf, len);
}

void ps_check_links(tt_ps_t *p, uint64_t now) {
    uint64_t after = tt_zmq_reach_warn_after(p->o.deadline_ms);
    for (size_t s = 0; s < p->lay.place.nshards; s++) {
        ps_link_t *l = &p->link[s];
        if (l->reach.met || l->warned || now < l->reach.since_ms + after)
            continue;
        char why[PS_ERRLEN];
        ps_link_why(p, s, now, why, sizeof(why));
        TT_WARN(PS_SUBSYS,
                "rank %d generation %" PRIu64 ": %s (trying on until the call's deadline, "
                "%d ms)",
                p->o.rank, p->o.generation, why, p->o.deadline_ms);
        l->warned = 1;
    }
}
