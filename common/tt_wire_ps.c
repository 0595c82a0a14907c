/* tt_wire_ps: validation of the shard-server and parameter-server bodies
 * of an envelope (shard heartbeats and listings, tensor declarations,
 * placements, stall reports, PS setup, pushes, pulls, parameter moves and
 * the shards' checkpoint parts): what the protobuf decoder cannot know
 * about counts, sizes, ids and frames. tt_wire_decode calls it for those
 * body kinds. */
#include "tt_status.h"
#include "tt_wire.h"
#include "tt_wire_int.h"

#include <stdio.h>
#include <string.h>

static int check_shard_hb(const Tether__ShardHeartbeat *h, char *err, size_t errlen) {
    if (h->shard_id == NULL || h->shard_id[0] == '\0' || h->endpoint == NULL ||
        h->endpoint[0] == '\0') {
        WIRE_SET_ERR(err, errlen, "shard heartbeat without a shard id or endpoint");
        return TT_EPROTO;
    }
    int rc = tt_wire_check_str("shard id", h->shard_id, TT_WIRE_MAX_ID, err, errlen);
    return rc == TT_OK
               ? tt_wire_check_str("shard endpoint", h->endpoint, TT_WIRE_MAX_TEXT, err, errlen)
               : rc;
}

static int check_shards_reply(const Tether__ShardsReply *r, const tt_wire_limits_t *lim, char *err,
                              size_t errlen) {
    if (r->n_shards > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "shards reply lists %zu shards", r->n_shards);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < r->n_shards; i++) {
        const Tether__ShardInfo *s = r->shards[i];
        if (s == NULL || !tt_wire_str_ok(s->shard_id, TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(s->endpoint, TT_WIRE_MAX_TEXT)) {
            WIRE_SET_ERR(err, errlen, "shards reply entry %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

#define TT_WIRE_MAX_ELEMS ((uint64_t)1 << 40)

static int check_declare(const Tether__DeclareTensors *d, const tt_wire_limits_t *lim, char *err,
                         size_t errlen) {
    if (d->n_tensors == 0 || d->n_tensors > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "tensor table of %zu entries", d->n_tensors);
        return TT_EPROTO;
    }
    if (d->chunk_bytes != 0 && (d->chunk_bytes % 4 != 0 || d->chunk_bytes > ((uint64_t)1 << 30))) {
        WIRE_SET_ERR(err, errlen, "chunk size %llu is not a multiple of 4 up to 1 GiB",
                     (unsigned long long)d->chunk_bytes);
        return TT_EPROTO;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < d->n_tensors; i++) {
        const Tether__TensorSpec *t = d->tensors[i];
        if (t == NULL || !tt_wire_str_ok(t->name, TT_WIRE_MAX_TEXT) || t->count == 0 ||
            t->dtype != 0 || t->count > TT_WIRE_MAX_ELEMS ||
            (total += t->count) > TT_WIRE_MAX_ELEMS) {
            WIRE_SET_ERR(err, errlen,
                         "tensor %zu is malformed (needs a name, 1..2^40 elements, dtype 0 = "
                         "float32)",
                         i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

static int check_place_shards(const Tether__PlacementReply *p, const tt_wire_limits_t *lim,
                              char *err, size_t errlen) {
    if (p->n_shard_ids != p->n_shard_endpoints || p->n_shard_ids == 0 ||
        p->n_shard_ids > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "placement lists %zu shard ids and %zu endpoints", p->n_shard_ids,
                     p->n_shard_endpoints);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < p->n_shard_ids; i++) {
        if (!tt_wire_str_ok(p->shard_ids[i], TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(p->shard_endpoints[i], TT_WIRE_MAX_TEXT)) {
            WIRE_SET_ERR(err, errlen, "placement shard %zu has an over-long id or endpoint", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* Chunks tile [0, total_elems) in order, each on a listed shard. */
static int check_placement(const Tether__PlacementReply *p, const tt_wire_limits_t *lim, char *err,
                           size_t errlen) {
    int rc = check_place_shards(p, lim, err, errlen);
    if (rc != TT_OK)
        return rc;
    if (p->n_chunks == 0 || p->n_chunks > lim->max_members || p->total_elems > TT_WIRE_MAX_ELEMS) {
        WIRE_SET_ERR(err, errlen, "placement of %zu chunks over %llu elements", p->n_chunks,
                     (unsigned long long)p->total_elems);
        return TT_EPROTO;
    }
    uint64_t next = 0;
    for (size_t i = 0; i < p->n_chunks; i++) {
        const Tether__ChunkPlace *c = p->chunks[i];
        if (c == NULL || c->shard >= p->n_shard_ids || c->offset != next || c->count == 0 ||
            c->count > p->total_elems - next) {
            WIRE_SET_ERR(err, errlen, "placement chunk %zu does not continue the flat space", i);
            return TT_EPROTO;
        }
        next += c->count;
    }
    if (next != p->total_elems) {
        WIRE_SET_ERR(err, errlen, "placement chunks cover %llu of %llu elements",
                     (unsigned long long)next, (unsigned long long)p->total_elems);
        return TT_EPROTO;
    }
    return TT_OK;
}

static int check_stall(const Tether__ShardStall *s, const tt_wire_limits_t *lim, char *err,
                       size_t errlen) {
    if (s->n_missing_ranks > lim->max_members || s->n_missing_ranks > s->world) {
        WIRE_SET_ERR(err, errlen, "stall report lists %zu missing ranks of %u", s->n_missing_ranks,
                     s->world);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < s->n_missing_ranks; i++) {
        if (s->missing_ranks[i] >= s->world) {
            WIRE_SET_ERR(err, errlen, "stall report names rank %u of world %u", s->missing_ranks[i],
                         s->world);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

static int check_ps_setup(const Tether__PsSetup *s, const tt_wire_limits_t *lim, char *err,
                          size_t errlen) {
    if (s->mode > TETHER__PS_MODE__PS_OPTIMIZER || s->optim > TETHER__PS_OPTIM__PS_ADAMW ||
        s->n_chunks > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "ps setup with mode %u, optimizer %u, %zu chunks", s->mode,
                     s->optim, s->n_chunks);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < s->n_chunks; i++) {
        const Tether__PsChunkSpec *c = s->chunks[i];
        if (c == NULL || c->count == 0 || c->count > ((uint64_t)1 << 28) ||
            (i > 0 && c->chunk <= s->chunks[i - 1]->chunk)) {
            WIRE_SET_ERR(err, errlen,
                         "ps setup chunk entry %zu is malformed (ids must increase, 1..2^28 "
                         "elements)",
                         i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

static int check_push(const tt_env_t *e, char *err, size_t errlen) {
    const Tether__PushChunk *p = e->push_chunk;
    if (p->world == 0 || p->rank >= p->world) {
        WIRE_SET_ERR(err, errlen, "push from rank %u of world %u", p->rank, p->world);
        return TT_EPROTO;
    }
    return tt_wire_check_one_float_frame(e, "push", 0, err, errlen);
}

static int check_part(uint32_t part, char *err, size_t errlen) {
    if (part <= TETHER__PARAM_PART__PART_STATE2)
        return TT_OK;
    WIRE_SET_ERR(err, errlen, "parameter part %u is not params|state1|state2", part);
    return TT_EPROTO;
}

/* Paths: the checkpoint directory (TT_CKPT_PATH_MAX in tt_ckpt_dir.h) and
 * a part's file name (TT_CKPT_NAME_MAX); the shard checks the name's
 * characters itself when it opens the part. */
#define WIRE_MAX_PATH 4095u
#define WIRE_MAX_NAME 127u

/* Whether n entries are all set (a message built by hand may have holes;
 * a decoded one never does). */
static int all_set(void *const *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v[i] == NULL)
            return 0;
    return 1;
}

static int check_write_chunks(const Tether__WriteChunks *w, const tt_wire_limits_t *lim, char *err,
                              size_t errlen) {
    if (w->dir == NULL || w->dir[0] != '/' || !tt_wire_str_ok(w->dir, WIRE_MAX_PATH) ||
        w->file == NULL || w->file[0] == '\0' || !tt_wire_str_ok(w->file, WIRE_MAX_NAME) ||
        w->n_chunks == 0 || w->n_chunks > lim->max_members ||
        !all_set((void *const *)w->chunks, w->n_chunks) || w->phase > 2) {
        WIRE_SET_ERR(err, errlen,
                     "write chunks needs an absolute dir, a file name, 1..%zu chunks (got %zu) "
                     "and phase 0..2 (got %u)",
                     lim->max_members, w->n_chunks, w->phase);
        return TT_EPROTO;
    }
    return TT_OK;
}

static int check_chunks_written(const Tether__ChunksWritten *c, const tt_wire_limits_t *lim,
                                char *err, size_t errlen) {
    const Tether__CkptPart *p = c->part;
    if (p == NULL || p->file == NULL || !tt_wire_str_ok(p->file, WIRE_MAX_NAME) ||
        p->n_ranges > lim->max_members || !all_set((void *const *)p->ranges, p->n_ranges)) {
        WIRE_SET_ERR(err, errlen, "chunks written without a part, or a malformed one");
        return TT_EPROTO;
    }
    return TT_OK;
}

int tt_wire_check_ps_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err,
                          size_t errlen) {
    int rc;
    switch (e->body_case) {
    case TETHER__ENVELOPE__BODY_SHARD_HEARTBEAT:
        return check_shard_hb(e->shard_heartbeat, err, errlen);
    case TETHER__ENVELOPE__BODY_SHARDS_REPLY:
        return check_shards_reply(e->shards_reply, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_DECLARE_TENSORS:
        return check_declare(e->declare_tensors, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_PLACEMENT_REPLY:
        return check_placement(e->placement_reply, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_SHARD_STALL:
        return check_stall(e->shard_stall, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_PS_SETUP:
        return check_ps_setup(e->ps_setup, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_PUSH_CHUNK:
        return check_push(e, err, errlen);
    case TETHER__ENVELOPE__BODY_PULL_CHUNK:
        return tt_wire_check_no_frames(e, "pull", err, errlen);
    case TETHER__ENVELOPE__BODY_CHUNK_RESULT:
        return tt_wire_check_one_float_frame(e, "chunk result", 0, err, errlen);
    case TETHER__ENVELOPE__BODY_SET_PARAMS:
        rc = check_part(e->set_params->part, err, errlen);
        return rc == TT_OK ? tt_wire_check_one_float_frame(e, "set params", 0, err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_GET_PARAMS:
        rc = check_part(e->get_params->part, err, errlen);
        return rc == TT_OK ? tt_wire_check_no_frames(e, "get params", err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_PARAMS_REPLY:
        rc = check_part(e->params_reply->part, err, errlen);
        return rc == TT_OK ? tt_wire_check_one_float_frame(e, "params reply", 1, err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_WRITE_CHUNKS:
        rc = check_write_chunks(e->write_chunks, lim, err, errlen);
        return rc == TT_OK ? tt_wire_check_no_frames(e, "write chunks", err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN:
        rc = check_chunks_written(e->chunks_written, lim, err, errlen);
        return rc == TT_OK ? tt_wire_check_no_frames(e, "chunks written", err, errlen) : rc;
    default: /* shards, placement: empty requests */
        return tt_wire_check_no_frames(e, tt_wire_body_name((int)e->body_case), err, errlen);
    }
}
