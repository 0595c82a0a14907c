/* tt_ps_place: the PS backend's one exchange with the coordinator: declare
 * the job's tensor table and/or fetch the placement, turning the
 * PlacementReply into a tt_ps_layout_t. A short-lived DEALER of its own
 * (tt_zreq) keeps this independent of the membership client's socket. */
#include "tt_ps.h"

#include "tt_clock.h"
#include "tt_status.h"
#include "tt_wire.h"
#include "tt_zreq.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

static int to_layout(const Tether__PlacementReply *r, tt_ps_layout_t *out) {
    tt_placement_t *p = &out->place;
    p->version = r->version;
    p->chunk_bytes = r->chunk_bytes;
    p->total_elems = r->total_elems;
    p->nchunks = r->n_chunks;
    p->nshards = r->n_shard_ids;
    p->chunks = calloc(r->n_chunks, sizeof(*p->chunks));
    p->shard_ids = calloc(r->n_shard_ids, sizeof(*p->shard_ids));
    p->shard_bytes = calloc(r->n_shard_ids, sizeof(*p->shard_bytes));
    out->endpoints = calloc(r->n_shard_ids + 1, sizeof(char *));
    if (p->chunks == NULL || p->shard_ids == NULL || p->shard_bytes == NULL ||
        out->endpoints == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < r->n_chunks; i++) {
        p->chunks[i].offset = r->chunks[i]->offset;
        p->chunks[i].count = r->chunks[i]->count;
        p->chunks[i].shard = r->chunks[i]->shard;
        p->shard_bytes[p->chunks[i].shard] += r->chunks[i]->count * sizeof(float);
    }
    for (size_t s = 0; s < r->n_shard_ids; s++) {
        snprintf(p->shard_ids[s], TT_PLACE_ID_MAX, "%s", r->shard_ids[s] ? r->shard_ids[s] : "");
        out->endpoints[s] = strdup(r->shard_endpoints[s] ? r->shard_endpoints[s] : "");
        if (out->endpoints[s] == NULL)
            return TT_ENOMEM;
    }
    return TT_OK;
}

/* The chunking the PS backend relies on: uniform chunks of chunk_bytes. */
static int check_uniform(const Tether__PlacementReply *r, char *err, size_t errlen) {
    uint64_t per = r->chunk_bytes / sizeof(float);
    for (size_t i = 0; per > 0 && i < r->n_chunks; i++) {
        if (r->chunks[i]->offset != i * per || (i + 1 < r->n_chunks && r->chunks[i]->count != per))
            per = 0;
    }
    if (per != 0)
        return TT_OK;
    PSET_ERR(err, errlen, "placement chunks are not uniform %llu-byte chunks",
             (unsigned long long)r->chunk_bytes);
    return TT_EPROTO;
}

/* One declare-or-fetch exchange; TT_OK with rx holding a PlacementReply,
 * or the coordinator's refusal (TT_EAGAIN: no live shard yet). */
static int ask(tt_zreq_t *z, const tt_ps_fetch_opts_t *o, uint64_t rid, int timeout_ms,
               tt_zmq_rx_t *rx, char *err, size_t errlen) {
    tt_env_t env;
    tt_wire_env_init(&env, o->job_id, o->sender_id, 0, rid);
    Tether__PlacementRequest pr = TETHER__PLACEMENT_REQUEST__INIT;
    Tether__DeclareTensors d = TETHER__DECLARE_TENSORS__INIT;
    Tether__TensorSpec *specs = calloc(o->ntensors + 1, sizeof(*specs));
    Tether__TensorSpec **ptrs = calloc(o->ntensors + 1, sizeof(*ptrs));
    if (specs == NULL || ptrs == NULL) {
        free(specs);
        free(ptrs);
        return TT_ENOMEM;
    }
    for (size_t i = 0; i < o->ntensors; i++) {
        tether__tensor_spec__init(&specs[i]);
        specs[i].name = (char *)o->tensors[i].name;
        specs[i].count = o->tensors[i].count;
        ptrs[i] = &specs[i];
    }
    d.n_tensors = o->ntensors;
    d.tensors = ptrs;
    d.chunk_bytes = o->chunk_bytes;
    d.min_shards = o->min_shards;
    if (o->ntensors > 0) {
        env.body_case = TETHER__ENVELOPE__BODY_DECLARE_TENSORS;
        env.declare_tensors = &d;
    } else {
        env.body_case = TETHER__ENVELOPE__BODY_PLACEMENT;
        env.placement = &pr;
    }
    int rc =
        tt_zreq_call_want(z, &env, NULL, 0, (uint32_t)timeout_ms,
                          TETHER__ENVELOPE__BODY_PLACEMENT_REPLY, "placement", rx, err, errlen);
    free(specs);
    free(ptrs);
    return rc;
}

/* Shard servers and workers start independently (systemd, Kubernetes, the
 * launcher): a job may form before any shard has registered, and the
 * coordinator then answers TT_EAGAIN. That is waited out, asking again with
 * a growing pause, until the fetch's own timeout. A coordinator that dies
 * holding the request never answers it, and its successor (restarted on
 * the same endpoint) never saw it: each ask waits at most ASK_MS, then the
 * request goes again (an answer to an earlier one is skipped). Every other
 * answer is final. */
#define ASK_MS 2000

static int request_until_placed(tt_zreq_t *z, const tt_ps_fetch_opts_t *o, tt_zmq_rx_t *rx,
                                char *err, size_t errlen) {
    int timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    uint64_t end = tt_clock_mono_ms() + (uint64_t)timeout_ms;
    int pause_ms = 20;
    for (uint64_t rid = 1;; rid++) {
        if (o->gen_over != NULL && o->gen_over(o->gen_ctx, o->generation)) {
            PSET_ERR(err, errlen,
                     "generation %" PRIu64 " ended while waiting for the shards' placement",
                     o->generation);
            return TT_EMEMBERSHIP;
        }
        uint64_t now = tt_clock_mono_ms();
        uint64_t left = now < end ? end - now : 0;
        int rc = ask(z, o, rid, (int)(left < ASK_MS ? left : ASK_MS), rx, err, errlen);
        if (rc != TT_EAGAIN && rc != TT_ETIMEDOUT)
            return rc;
        now = tt_clock_mono_ms();
        if (now + (rc == TT_EAGAIN ? (uint64_t)pause_ms : 0) >= end)
            return rc;
        if (rc == TT_EAGAIN) {
            tt_clock_sleep_ms((uint64_t)pause_ms);
            pause_ms = pause_ms < 400 ? pause_ms * 2 : 500;
        }
    }
}

int tt_ps_layout_fetch(const tt_ps_fetch_opts_t *o, tt_ps_layout_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (o == NULL || o->coordinator == NULL || o->job_id == NULL || o->job_id[0] == '\0') {
        PSET_ERR(err, errlen, "tt_ps_layout_fetch needs a coordinator endpoint and a job id");
        return TT_EINVAL;
    }
    tt_zreq_t *z = NULL;
    tt_zmq_rx_t rx;
    int rc = tt_zreq_open(&z, o->coordinator, o->key, "place", o->sender_id ? o->sender_id : "ps",
                          err, errlen);
    if (rc == TT_OK && (rc = request_until_placed(z, o, &rx, err, errlen)) == TT_OK) {
        rc = check_uniform(rx.env->placement_reply, err, errlen);
        if (rc == TT_OK && (rc = to_layout(rx.env->placement_reply, out)) != TT_OK)
            tt_ps_layout_free(out);
        tt_zmq_rx_close(&rx);
    }
    tt_zreq_close(&z);
    return rc;
}
