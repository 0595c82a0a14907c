/* tt_wire: packing, unpacking and validation of envelopes and of the
 * coordinator state file. Validation is table-free on purpose: one small
 * checker per body kind keeps each rule next to the field it guards. */
#include "tt_wire.h"
#include "tt_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIRE_SET_ERR(err, errlen, ...)                                                             \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

void tt_wire_limits_default(tt_wire_limits_t *lim) {
    lim->max_envelope = 1u << 20;
    lim->max_payload_frames = 64;
    lim->max_payload_bytes = (size_t)1 << 30;
    lim->max_members = 65536;
}

/* NULL counts as empty: protobuf-c leaves unset submessage strings NULL. */
static int str_ok(const char *s, size_t max) {
    return s == NULL || strnlen(s, max + 1) <= max;
}

static int check_str(const char *what, const char *s, size_t max, char *err, size_t errlen) {
    if (str_ok(s, max))
        return TT_OK;
    WIRE_SET_ERR(err, errlen, "%s longer than %zu bytes", what, max);
    return TT_EPROTO;
}

static int check_member(const Tether__Member *m, char *err, size_t errlen) {
    if (m == NULL) {
        WIRE_SET_ERR(err, errlen, "member entry missing");
        return TT_EPROTO;
    }
    int rc = check_str("member worker_id", m->worker_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = check_str("member host", m->host, TT_WIRE_MAX_TEXT, err, errlen);
    if (rc == TT_OK)
        rc = check_str("member endpoint", m->endpoint, TT_WIRE_MAX_TEXT, err, errlen);
    return rc;
}

/* Members are listed by strictly increasing rank, all below world_size.
 * Small worlds list everyone; large ones only the addressee's ring
 * neighbours (see docs/protocol.md). */
static int check_generation(const Tether__Generation *g, const tt_wire_limits_t *lim, char *err,
                            size_t errlen) {
    if (g == NULL) {
        WIRE_SET_ERR(err, errlen, "join reply without a generation");
        return TT_EPROTO;
    }
    if (g->n_members > lim->max_members || g->n_members > g->world_size || g->n_members == 0) {
        WIRE_SET_ERR(err, errlen, "generation lists %zu members for world size %u", g->n_members,
                     g->world_size);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < g->n_members; i++) {
        int rc = check_member(g->members[i], err, errlen);
        if (rc != TT_OK)
            return rc;
        uint32_t r = g->members[i]->rank;
        if (r >= g->world_size || (i > 0 && r <= g->members[i - 1]->rank)) {
            WIRE_SET_ERR(err, errlen,
                         "generation member %zu has rank %u (ranks must increase, below %u)", i, r,
                         g->world_size);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

static int check_join(const Tether__JoinRequest *j, char *err, size_t errlen) {
    if (j->settings == NULL) {
        WIRE_SET_ERR(err, errlen, "join without job settings");
        return TT_EPROTO;
    }
    if (j->worker_id == NULL || j->worker_id[0] == '\0') {
        WIRE_SET_ERR(err, errlen, "join without a worker id");
        return TT_EPROTO;
    }
    int rc = check_str("join worker_id", j->worker_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = check_str("join host", j->host, TT_WIRE_MAX_TEXT, err, errlen);
    if (rc == TT_OK)
        rc = check_str("join endpoint", j->endpoint, TT_WIRE_MAX_TEXT, err, errlen);
    return rc;
}

static int check_join_reply(const Tether__JoinReply *r, const tt_wire_limits_t *lim, char *err,
                            size_t errlen) {
    int rc = check_generation(r->generation, lim, err, errlen);
    if (rc == TT_OK && r->rank >= r->generation->world_size) {
        WIRE_SET_ERR(err, errlen, "join reply rank %u outside world size %u", r->rank,
                     r->generation->world_size);
        rc = TT_EPROTO;
    }
    return rc;
}

static int check_status_reply(const Tether__StatusReply *s, const tt_wire_limits_t *lim, char *err,
                              size_t errlen) {
    if (s->n_jobs > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "status reply lists %zu jobs", s->n_jobs);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < s->n_jobs; i++) {
        const Tether__JobStatus *j = s->jobs[i];
        int rc = j ? check_str("job id", j->job_id, TT_WIRE_MAX_ID, err, errlen) : TT_EPROTO;
        if (rc == TT_OK)
            rc = check_str("job failure", j->failure, TT_WIRE_MAX_TEXT, err, errlen);
        if (rc != TT_OK) {
            WIRE_SET_ERR(err, errlen, "status reply job %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    if (s->n_shards > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "status reply lists %zu shards", s->n_shards);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < s->n_shards; i++) {
        const Tether__ShardInfo *sh = s->shards[i];
        if (sh == NULL || !str_ok(sh->shard_id, TT_WIRE_MAX_ID) ||
            !str_ok(sh->endpoint, TT_WIRE_MAX_TEXT)) {
            WIRE_SET_ERR(err, errlen, "status reply shard %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

static int check_members_reply(const Tether__MembersReply *m, const tt_wire_limits_t *lim,
                               char *err, size_t errlen) {
    if (m->n_members > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "members reply lists %zu members", m->n_members);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < m->n_members; i++) {
        const Tether__MemberStatus *s = m->members[i];
        if (s == NULL || !str_ok(s->worker_id, TT_WIRE_MAX_ID) ||
            !str_ok(s->host, TT_WIRE_MAX_TEXT) || !str_ok(s->endpoint, TT_WIRE_MAX_TEXT)) {
            WIRE_SET_ERR(err, errlen, "members reply entry %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* ---- shard and parameter-server bodies ---- */

/* Bodies that carry a tensor announce exactly one frame of whole float32s. */
static int check_one_float_frame(const tt_env_t *e, const char *what, int allow_empty, char *err,
                                 size_t errlen) {
    if (e->n_payload_sizes != 1 || e->payload_sizes[0] % 4 != 0 ||
        (!allow_empty && e->payload_sizes[0] == 0)) {
        WIRE_SET_ERR(err, errlen, "%s needs one payload frame of whole float32s (%zu frames%s)",
                     what, e->n_payload_sizes, e->n_payload_sizes == 1 ? ", bad size" : "");
        return TT_ESIZE;
    }
    return TT_OK;
}

static int check_no_frames(const tt_env_t *e, const char *what, char *err, size_t errlen) {
    if (e->n_payload_sizes == 0)
        return TT_OK;
    WIRE_SET_ERR(err, errlen, "%s carries no payload, %zu frames arrived", what,
                 e->n_payload_sizes);
    return TT_ESIZE;
}

static int check_shard_hb(const Tether__ShardHeartbeat *h, char *err, size_t errlen) {
    if (h->shard_id == NULL || h->shard_id[0] == '\0' || h->endpoint == NULL ||
        h->endpoint[0] == '\0') {
        WIRE_SET_ERR(err, errlen, "shard heartbeat without a shard id or endpoint");
        return TT_EPROTO;
    }
    int rc = check_str("shard id", h->shard_id, TT_WIRE_MAX_ID, err, errlen);
    return rc == TT_OK ? check_str("shard endpoint", h->endpoint, TT_WIRE_MAX_TEXT, err, errlen)
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
        if (s == NULL || !str_ok(s->shard_id, TT_WIRE_MAX_ID) ||
            !str_ok(s->endpoint, TT_WIRE_MAX_TEXT)) {
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
        if (t == NULL || !str_ok(t->name, TT_WIRE_MAX_TEXT) || t->count == 0 || t->dtype != 0 ||
            t->count > TT_WIRE_MAX_ELEMS || (total += t->count) > TT_WIRE_MAX_ELEMS) {
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
        if (!str_ok(p->shard_ids[i], TT_WIRE_MAX_ID) ||
            !str_ok(p->shard_endpoints[i], TT_WIRE_MAX_TEXT)) {
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
    return check_one_float_frame(e, "push", 0, err, errlen);
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
    if (w->dir == NULL || w->dir[0] != '/' || !str_ok(w->dir, WIRE_MAX_PATH) || w->file == NULL ||
        w->file[0] == '\0' || !str_ok(w->file, WIRE_MAX_NAME) || w->n_chunks == 0 ||
        w->n_chunks > lim->max_members || !all_set((void *const *)w->chunks, w->n_chunks)) {
        WIRE_SET_ERR(err, errlen,
                     "write chunks needs an absolute dir, a file name and 1..%zu chunks (got %zu)",
                     lim->max_members, w->n_chunks);
        return TT_EPROTO;
    }
    return TT_OK;
}

static int check_chunks_written(const Tether__ChunksWritten *c, const tt_wire_limits_t *lim,
                                char *err, size_t errlen) {
    const Tether__CkptPart *p = c->part;
    if (p == NULL || p->file == NULL || !str_ok(p->file, WIRE_MAX_NAME) ||
        p->n_ranges > lim->max_members || !all_set((void *const *)p->ranges, p->n_ranges)) {
        WIRE_SET_ERR(err, errlen, "chunks written without a part, or a malformed one");
        return TT_EPROTO;
    }
    return TT_OK;
}

static int check_ps_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err, size_t errlen) {
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
        return check_no_frames(e, "pull", err, errlen);
    case TETHER__ENVELOPE__BODY_CHUNK_RESULT:
        return check_one_float_frame(e, "chunk result", 0, err, errlen);
    case TETHER__ENVELOPE__BODY_SET_PARAMS:
        rc = check_part(e->set_params->part, err, errlen);
        return rc == TT_OK ? check_one_float_frame(e, "set params", 0, err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_GET_PARAMS:
        rc = check_part(e->get_params->part, err, errlen);
        return rc == TT_OK ? check_no_frames(e, "get params", err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_PARAMS_REPLY:
        rc = check_part(e->params_reply->part, err, errlen);
        return rc == TT_OK ? check_one_float_frame(e, "params reply", 1, err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_WRITE_CHUNKS:
        rc = check_write_chunks(e->write_chunks, lim, err, errlen);
        return rc == TT_OK ? check_no_frames(e, "write chunks", err, errlen) : rc;
    case TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN:
        rc = check_chunks_written(e->chunks_written, lim, err, errlen);
        return rc == TT_OK ? check_no_frames(e, "chunks written", err, errlen) : rc;
    default: /* shards, placement: empty requests */
        return check_no_frames(e, tt_wire_body_name((int)e->body_case), err, errlen);
    }
}

/* ---- flight-recorder dumps ---- */

/* A worker's dump text; the coordinator's reply holds one per member and
 * must still fit the 1 MiB envelope, so sections are capped too. */
#define TT_WIRE_MAX_DUMP_TEXT ((size_t)64 << 10)

static int check_dump_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err,
                           size_t errlen) {
    if (e->n_payload_sizes != 0)
        return check_no_frames(e, "dump", err, errlen);
    if (e->body_case == TETHER__ENVELOPE__BODY_DUMP_REPORT) {
        const Tether__DumpReport *r = e->dump_report;
        if (r->rank < -1)
            WIRE_SET_ERR(err, errlen, "dump report from rank %d", (int)r->rank);
        return r->rank < -1 ? TT_EPROTO
                            : check_str("dump text", r->text, TT_WIRE_MAX_DUMP_TEXT, err, errlen);
    }
    if (e->body_case != TETHER__ENVELOPE__BODY_DUMP_REPLY)
        return TT_OK;
    const Tether__DumpReply *d = e->dump_reply;
    if (d->n_sections > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "dump reply with %zu sections", d->n_sections);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < d->n_sections; i++) {
        const Tether__DumpSection *s = d->sections[i];
        if (s == NULL || !str_ok(s->worker_id, TT_WIRE_MAX_ID) ||
            !str_ok(s->text, TT_WIRE_MAX_DUMP_TEXT)) {
            WIRE_SET_ERR(err, errlen, "dump reply section %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* ---- coordinated checkpoints ---- */

static int check_ckpt_record(const Tether__CheckpointRecord *r) {
    return r != NULL && r->checkpoint_id != NULL && r->checkpoint_id[0] != '\0' &&
           str_ok(r->checkpoint_id, TT_WIRE_MAX_ID) && str_ok(r->dir, TT_WIRE_MAX_TEXT);
}

static int check_ckpt_records(Tether__CheckpointRecord *const *v, size_t n,
                              const tt_wire_limits_t *lim, const char *what, char *err,
                              size_t errlen) {
    if (n > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "%s lists %zu checkpoints", what, n);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < n; i++) {
        if (!check_ckpt_record(v[i])) {
            WIRE_SET_ERR(err, errlen, "%s checkpoint %zu is malformed", what, i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* A commit carries the manifest as its one frame; everything else none. */
static int check_ckpt_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err,
                           size_t errlen) {
    if (e->body_case != TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT) {
        int rc = check_no_frames(e, tt_wire_body_name(e->body_case), err, errlen);
        if (rc == TT_OK && e->body_case == TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY)
            rc = check_ckpt_records(e->checkpoints_reply->checkpoints,
                                    e->checkpoints_reply->n_checkpoints, lim, "checkpoints reply",
                                    err, errlen);
        return rc;
    }
    if (e->n_payload_sizes != 1 || e->payload_sizes[0] == 0 ||
        e->payload_sizes[0] > TT_WIRE_MAX_MANIFEST) {
        WIRE_SET_ERR(err, errlen,
                     "checkpoint commit needs one manifest frame of 1..%zu bytes (%zu frames)",
                     TT_WIRE_MAX_MANIFEST, e->n_payload_sizes);
        return TT_ESIZE;
    }
    const char *root = e->checkpoint_commit->root;
    if (root == NULL || root[0] != '/') {
        WIRE_SET_ERR(err, errlen, "checkpoint commit needs an absolute root directory");
        return TT_EPROTO;
    }
    return check_str("checkpoint root", root, TT_WIRE_MAX_TEXT, err, errlen);
}

/* protobuf-c sets the oneof case only with the submessage, but a decoder
 * that trusts that is one refactor away from a NULL dereference. */
static int body_present(const tt_env_t *e) {
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(
        &tether__envelope__descriptor, (unsigned)e->body_case);
    if (f == NULL)
        return 0;
    const void *const *slot = (const void *const *)((const char *)e + f->offset);
    return *slot != NULL;
}

static int check_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err, size_t errlen) {
    if (!body_present(e)) {
        WIRE_SET_ERR(err, errlen, "envelope has no body or an unknown body kind %d",
                     (int)e->body_case);
        return TT_EPROTO;
    }
    switch (e->body_case) {
    case TETHER__ENVELOPE__BODY_JOIN:
        return check_join(e->join, err, errlen);
    case TETHER__ENVELOPE__BODY_JOIN_REPLY:
        return check_join_reply(e->join_reply, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_REPORT_FAILURE:
        return check_str("failure reason", e->report_failure->reason, TT_WIRE_MAX_TEXT, err,
                         errlen);
    case TETHER__ENVELOPE__BODY_LEAVE:
        return check_str("leave reason", e->leave->reason, TT_WIRE_MAX_TEXT, err, errlen);
    case TETHER__ENVELOPE__BODY_ERROR:
        return check_str("error message", e->error->message, TT_WIRE_MAX_TEXT, err, errlen);
    case TETHER__ENVELOPE__BODY_STATUS_REPLY:
        return check_status_reply(e->status_reply, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_MEMBERS_REPLY:
        return check_members_reply(e->members_reply, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_HEARTBEAT:
    case TETHER__ENVELOPE__BODY_HEARTBEAT_REPLY:
    case TETHER__ENVELOPE__BODY_ACK:
    case TETHER__ENVELOPE__BODY_STATUS:
    case TETHER__ENVELOPE__BODY_MEMBERS:
    case TETHER__ENVELOPE__BODY_FORGET:
    case TETHER__ENVELOPE__BODY_BOUNDARY:
    case TETHER__ENVELOPE__BODY_CONTINUE_:
    case TETHER__ENVELOPE__BODY_REGROUP_NOTICE:
        return TT_OK;
    case TETHER__ENVELOPE__BODY_SHARD_HEARTBEAT:
    case TETHER__ENVELOPE__BODY_SHARDS:
    case TETHER__ENVELOPE__BODY_SHARDS_REPLY:
    case TETHER__ENVELOPE__BODY_DECLARE_TENSORS:
    case TETHER__ENVELOPE__BODY_PLACEMENT:
    case TETHER__ENVELOPE__BODY_PLACEMENT_REPLY:
    case TETHER__ENVELOPE__BODY_SHARD_STALL:
    case TETHER__ENVELOPE__BODY_PS_SETUP:
    case TETHER__ENVELOPE__BODY_PUSH_CHUNK:
    case TETHER__ENVELOPE__BODY_PULL_CHUNK:
    case TETHER__ENVELOPE__BODY_CHUNK_RESULT:
    case TETHER__ENVELOPE__BODY_SET_PARAMS:
    case TETHER__ENVELOPE__BODY_GET_PARAMS:
    case TETHER__ENVELOPE__BODY_PARAMS_REPLY:
    case TETHER__ENVELOPE__BODY_WRITE_CHUNKS:
    case TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN:
        return check_ps_body(e, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_DUMP:
    case TETHER__ENVELOPE__BODY_DUMP_REPORT:
    case TETHER__ENVELOPE__BODY_DUMP_REPLY:
        return check_dump_body(e, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST:
    case TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST_REPLY:
    case TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT:
    case TETHER__ENVELOPE__BODY_CHECKPOINTS:
    case TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY:
        return check_ckpt_body(e, lim, err, errlen);
    default:
        WIRE_SET_ERR(err, errlen, "envelope has no body or an unknown body kind %d",
                     (int)e->body_case);
        return TT_EPROTO;
    }
}

static int check_payloads(const tt_env_t *e, const size_t *lens, size_t n,
                          const tt_wire_limits_t *lim, char *err, size_t errlen) {
    if (n > lim->max_payload_frames) {
        WIRE_SET_ERR(err, errlen, "%zu payload frames, limit %zu", n, lim->max_payload_frames);
        return TT_ETOOBIG;
    }
    if (e->n_payload_sizes != n) {
        WIRE_SET_ERR(err, errlen, "header announces %zu payload frames but %zu arrived",
                     e->n_payload_sizes, n);
        return TT_ESIZE;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (e->payload_sizes[i] != lens[i]) {
            WIRE_SET_ERR(err, errlen, "payload frame %zu holds %zu bytes, header says %llu", i,
                         lens[i], (unsigned long long)e->payload_sizes[i]);
            return TT_ESIZE;
        }
        total += lens[i];
        if (total > lim->max_payload_bytes) {
            WIRE_SET_ERR(err, errlen, "payload of more than %zu bytes", lim->max_payload_bytes);
            return TT_ETOOBIG;
        }
    }
    return TT_OK;
}

static int check_envelope(const tt_env_t *e, const size_t *lens, size_t n,
                          const tt_wire_limits_t *lim, char *err, size_t errlen) {
    if (e->version != TT_WIRE_VERSION) {
        WIRE_SET_ERR(err, errlen, "protocol version %u, this build speaks %u", e->version,
                     TT_WIRE_VERSION);
        return TT_EVERSION;
    }
    int rc = check_str("job id", e->job_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = check_str("sender id", e->sender_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = check_payloads(e, lens, n, lim, err, errlen);
    if (rc == TT_OK)
        rc = check_body(e, lim, err, errlen);
    return rc;
}

int tt_wire_decode(const void *data, size_t len, const size_t *payload_lens, size_t npayloads,
                   const tt_wire_limits_t *lim, tt_env_t **out, char *err, size_t errlen) {
    tt_wire_limits_t def;
    if (lim == NULL) {
        tt_wire_limits_default(&def);
        lim = &def;
    }
    *out = NULL;
    if (len == 0 || data == NULL) {
        WIRE_SET_ERR(err, errlen, "empty envelope frame");
        return TT_EPROTO;
    }
    if (len > lim->max_envelope) {
        WIRE_SET_ERR(err, errlen, "envelope of %zu bytes, limit %zu", len, lim->max_envelope);
        return TT_ETOOBIG;
    }
    tt_env_t *e = tether__envelope__unpack(NULL, len, data);
    if (e == NULL) {
        WIRE_SET_ERR(err, errlen, "envelope of %zu bytes does not parse (truncated or garbage)",
                     len);
        return TT_EPROTO;
    }
    int rc = check_envelope(e, payload_lens, npayloads, lim, err, errlen);
    if (rc != TT_OK) {
        tether__envelope__free_unpacked(e, NULL);
        return rc;
    }
    *out = e;
    return TT_OK;
}

int tt_wire_check_scope(const tt_env_t *env, const char *job_id, uint64_t current_gen, char *err,
                        size_t errlen) {
    const char *job = env->job_id ? env->job_id : "";
    if (job_id != NULL && strcmp(job, job_id) != 0) {
        WIRE_SET_ERR(err, errlen, "message for job '%s', expected '%s'", job, job_id);
        return TT_EJOB;
    }
    if (env->generation < current_gen) {
        WIRE_SET_ERR(err, errlen, "message of generation %llu, current is %llu",
                     (unsigned long long)env->generation, (unsigned long long)current_gen);
        return TT_ESTALE;
    }
    return TT_OK;
}

void tt_wire_free(tt_env_t **env) {
    if (env == NULL || *env == NULL)
        return;
    tether__envelope__free_unpacked(*env, NULL);
    *env = NULL;
}

void tt_wire_env_init(tt_env_t *env, const char *job_id, const char *sender_id, uint64_t generation,
                      uint64_t request_id) {
    tether__envelope__init(env);
    env->version = TT_WIRE_VERSION;
    env->job_id = (char *)(job_id ? job_id : "");
    env->sender_id = (char *)(sender_id ? sender_id : "");
    env->generation = generation;
    env->request_id = request_id;
}

static int pack_any(const ProtobufCMessage *m, uint8_t **out, size_t *outlen) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL)
        return TT_ENOMEM;
    *outlen = protobuf_c_message_pack(m, buf);
    *out = buf;
    return TT_OK;
}

int tt_wire_encode(const tt_env_t *env, uint8_t **out, size_t *outlen) {
    return pack_any(&env->base, out, outlen);
}

const char *tt_wire_body_name(int body_case) {
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&tether__envelope__descriptor, (unsigned)body_case);
    return f ? f->name : "none";
}

/* A job's guard-rail memory: at most one time per allowed regroup and 32
 * evictions per worker id (server/coordinator/rdzv.h). */
static int check_history(const Tether__CoordJobRecord *j) {
    if (j->n_regroup_unix_ms > 100000 || j->n_flaps > ((size_t)1 << 20))
        return 0;
    for (size_t k = 0; k < j->n_flaps; k++) {
        const Tether__FlapRecord *f = j->flaps[k];
        if (f == NULL || f->worker_id == NULL || f->worker_id[0] == '\0' ||
            !str_ok(f->worker_id, TT_WIRE_MAX_ID) || f->n_evicted_unix_ms > 32)
            return 0;
    }
    return 1;
}

static int check_state(const tt_coord_state_pb_t *st, char *err, size_t errlen) {
    if (st->version != TT_WIRE_VERSION) {
        WIRE_SET_ERR(err, errlen, "state file version %u, this build reads %u", st->version,
                     TT_WIRE_VERSION);
        return TT_EVERSION;
    }
    for (size_t i = 0; i < st->n_forgotten; i++) {
        const Tether__ForgottenJob *f = st->forgotten[i];
        if (f == NULL || f->job_id == NULL || f->job_id[0] == '\0' ||
            !str_ok(f->job_id, TT_WIRE_MAX_ID)) {
            WIRE_SET_ERR(err, errlen, "state file forgotten job %zu is malformed", i);
            return TT_ECORRUPT;
        }
    }
    for (size_t i = 0; i < st->n_jobs; i++) {
        const Tether__CoordJobRecord *j = st->jobs[i];
        if (j == NULL || j->job_id == NULL || j->job_id[0] == '\0' ||
            !str_ok(j->job_id, TT_WIRE_MAX_ID) || !str_ok(j->failure, TT_WIRE_MAX_TEXT) ||
            j->settings == NULL || j->n_members > 65536 || j->n_checkpoints > 65536 ||
            !check_history(j)) {
            WIRE_SET_ERR(err, errlen, "state file job record %zu is malformed", i);
            return TT_ECORRUPT;
        }
        for (size_t k = 0; k < j->n_members; k++) {
            if (check_member(j->members[k], err, errlen) != TT_OK)
                return TT_ECORRUPT;
        }
        for (size_t k = 0; k < j->n_checkpoints; k++) {
            if (!check_ckpt_record(j->checkpoints[k])) {
                WIRE_SET_ERR(err, errlen, "state file job record %zu: checkpoint %zu is malformed",
                             i, k);
                return TT_ECORRUPT;
            }
        }
    }
    return TT_OK;
}

int tt_wire_state_decode(const void *data, size_t len, tt_coord_state_pb_t **out, char *err,
                         size_t errlen) {
    *out = NULL;
    if (len > ((size_t)64 << 20)) {
        WIRE_SET_ERR(err, errlen, "state file of %zu bytes is implausibly large", len);
        return TT_ETOOBIG;
    }
    tt_coord_state_pb_t *st = tether__coord_state__unpack(NULL, len, data);
    if (st == NULL) {
        WIRE_SET_ERR(err, errlen, "state file of %zu bytes does not parse", len);
        return TT_ECORRUPT;
    }
    int rc = check_state(st, err, errlen);
    if (rc != TT_OK) {
        tether__coord_state__free_unpacked(st, NULL);
        return rc;
    }
    *out = st;
    return TT_OK;
}

int tt_wire_state_encode(const tt_coord_state_pb_t *st, uint8_t **out, size_t *outlen) {
    return pack_any(&st->base, out, outlen);
}

void tt_wire_state_free(tt_coord_state_pb_t **st) {
    if (st == NULL || *st == NULL)
        return;
    tether__coord_state__free_unpacked(*st, NULL);
    *st = NULL;
}

int tt_wire_manifest_decode(const void *data, size_t len, tt_manifest_pb_t **out, char *err,
                            size_t errlen) {
    *out = NULL;
    if (len > TT_WIRE_MAX_MANIFEST) {
        WIRE_SET_ERR(err, errlen, "manifest of %zu bytes exceeds %zu", len, TT_WIRE_MAX_MANIFEST);
        return TT_ETOOBIG;
    }
    *out = tether__ckpt_manifest__unpack(NULL, len, data);
    if (*out == NULL) {
        WIRE_SET_ERR(err, errlen, "manifest of %zu bytes does not parse", len);
        return TT_ECORRUPT;
    }
    return TT_OK;
}

int tt_wire_manifest_encode(const tt_manifest_pb_t *m, uint8_t **out, size_t *outlen) {
    return pack_any(&m->base, out, outlen);
}

void tt_wire_manifest_free(tt_manifest_pb_t **m) {
    if (m == NULL || *m == NULL)
        return;
    tether__ckpt_manifest__free_unpacked(*m, NULL);
    *m = NULL;
}
