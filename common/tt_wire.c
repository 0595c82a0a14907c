/* tt_wire: packing, unpacking and validation of envelopes and of the
 * coordinator state file (the shard and parameter-server bodies are checked
 * in tt_wire_ps.c). Validation is table-free on purpose: one small
 * checker per body kind keeps each rule next to the field it guards. */
#include "tt_wire.h"
#include "tt_wire_int.h"
#include "tt_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_wire_limits_default(tt_wire_limits_t *lim) {
    lim->max_envelope = 1u << 20;
    lim->max_payload_frames = 64;
    lim->max_payload_bytes = (size_t)1 << 30;
    lim->max_members = 65536;
}

/* NULL counts as empty: protobuf-c leaves unset submessage strings NULL. */
int tt_wire_str_ok(const char *s, size_t max) {
    return s == NULL || strnlen(s, max + 1) <= max;
}

int tt_wire_check_str(const char *what, const char *s, size_t max, char *err, size_t errlen) {
    if (tt_wire_str_ok(s, max))
        return TT_OK;
    WIRE_SET_ERR(err, errlen, "%s longer than %zu bytes", what, max);
    return TT_EPROTO;
}

static int check_member(const Tether__Member *m, char *err, size_t errlen) {
    if (m == NULL) {
        WIRE_SET_ERR(err, errlen, "member entry missing");
        return TT_EPROTO;
    }
    int rc = tt_wire_check_str("member worker_id", m->worker_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("member host", m->host, TT_WIRE_MAX_TEXT, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("member endpoint", m->endpoint, TT_WIRE_MAX_TEXT, err, errlen);
    return rc;
}

int tt_wire_shrink_ok(uint64_t generation, uint64_t shrink_of, const uint32_t *exclude, size_t n) {
    if (shrink_of == 0)
        return n == 0;
    if (shrink_of >= generation || n == 0 || n > TT_WIRE_MAX_SHRINK)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if (exclude[i] <= exclude[i - 1])
            return 0;
    }
    return 1;
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
    if (!tt_wire_shrink_ok(g->generation, g->shrink_of, g->shrink_exclude, g->n_shrink_exclude)) {
        WIRE_SET_ERR(err, errlen,
                     "generation %llu: bad shrink of generation %llu (%zu excluded ranks, "
                     "at most %u, ascending)",
                     (unsigned long long)g->generation, (unsigned long long)g->shrink_of,
                     g->n_shrink_exclude, TT_WIRE_MAX_SHRINK);
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
    int rc = tt_wire_check_str("join worker_id", j->worker_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("join host", j->host, TT_WIRE_MAX_TEXT, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("join endpoint", j->endpoint, TT_WIRE_MAX_TEXT, err, errlen);
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

static int check_ckpt_failure(const Tether__CheckpointFailure *f, const char *what, char *err,
                              size_t errlen);

static int check_status_reply(const Tether__StatusReply *s, const tt_wire_limits_t *lim, char *err,
                              size_t errlen) {
    if (s->n_jobs > lim->max_members) {
        WIRE_SET_ERR(err, errlen, "status reply lists %zu jobs", s->n_jobs);
        return TT_EPROTO;
    }
    for (size_t i = 0; i < s->n_jobs; i++) {
        const Tether__JobStatus *j = s->jobs[i];
        int rc =
            j ? tt_wire_check_str("job id", j->job_id, TT_WIRE_MAX_ID, err, errlen) : TT_EPROTO;
        if (rc == TT_OK)
            rc = tt_wire_check_str("job failure", j->failure, TT_WIRE_MAX_TEXT, err, errlen);
        if (rc == TT_OK)
            rc = tt_wire_check_str("rank 0 id", j->comm_id_from, TT_WIRE_MAX_ID, err, errlen);
        if (rc == TT_OK && j->checkpoint_failure != NULL)
            rc = check_ckpt_failure(j->checkpoint_failure, "job's checkpoint failure", err, errlen);
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
        if (sh == NULL || !tt_wire_str_ok(sh->shard_id, TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(sh->endpoint, TT_WIRE_MAX_TEXT)) {
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
        if (s == NULL || !tt_wire_str_ok(s->worker_id, TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(s->host, TT_WIRE_MAX_TEXT) ||
            !tt_wire_str_ok(s->endpoint, TT_WIRE_MAX_TEXT)) {
            WIRE_SET_ERR(err, errlen, "members reply entry %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* ---- helpers shared with tt_wire_ps.c ---- */

/* Bodies that carry a tensor announce exactly one frame of whole float32s. */
int tt_wire_check_one_float_frame(const tt_env_t *e, const char *what, int allow_empty, char *err,
                                  size_t errlen) {
    if (e->n_payload_sizes != 1 || e->payload_sizes[0] % 4 != 0 ||
        (!allow_empty && e->payload_sizes[0] == 0)) {
        WIRE_SET_ERR(err, errlen, "%s needs one payload frame of whole float32s (%zu frames%s)",
                     what, e->n_payload_sizes, e->n_payload_sizes == 1 ? ", bad size" : "");
        return TT_ESIZE;
    }
    return TT_OK;
}

int tt_wire_check_no_frames(const tt_env_t *e, const char *what, char *err, size_t errlen) {
    if (e->n_payload_sizes == 0)
        return TT_OK;
    WIRE_SET_ERR(err, errlen, "%s carries no payload, %zu frames arrived", what,
                 e->n_payload_sizes);
    return TT_ESIZE;
}

/* ---- flight-recorder dumps ---- */

/* A worker's dump text; the coordinator's reply holds one per member and
 * must still fit the 1 MiB envelope, so sections are capped too. */
#define TT_WIRE_MAX_DUMP_TEXT ((size_t)64 << 10)

static int check_dump_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err,
                           size_t errlen) {
    if (e->n_payload_sizes != 0)
        return tt_wire_check_no_frames(e, "dump", err, errlen);
    if (e->body_case == TETHER__ENVELOPE__BODY_DUMP_REPORT) {
        const Tether__DumpReport *r = e->dump_report;
        if (r->rank < -1)
            WIRE_SET_ERR(err, errlen, "dump report from rank %d", (int)r->rank);
        return r->rank < -1
                   ? TT_EPROTO
                   : tt_wire_check_str("dump text", r->text, TT_WIRE_MAX_DUMP_TEXT, err, errlen);
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
        if (s == NULL || !tt_wire_str_ok(s->worker_id, TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(s->text, TT_WIRE_MAX_DUMP_TEXT)) {
            WIRE_SET_ERR(err, errlen, "dump reply section %zu is malformed", i);
            return TT_EPROTO;
        }
    }
    return TT_OK;
}

/* ---- coordinated checkpoints ---- */

static int check_ckpt_record(const Tether__CheckpointRecord *r) {
    return r != NULL && r->checkpoint_id != NULL && r->checkpoint_id[0] != '\0' &&
           tt_wire_str_ok(r->checkpoint_id, TT_WIRE_MAX_ID) &&
           tt_wire_str_ok(r->dir, TT_WIRE_MAX_TEXT);
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

/* A failed attempt names its checkpoint; the worker id is empty in a
 * report (the envelope names the sender) and set in a reply. */
static int check_ckpt_failure(const Tether__CheckpointFailure *f, const char *what, char *err,
                              size_t errlen) {
    if (f->checkpoint_id == NULL || f->checkpoint_id[0] == '\0') {
        WIRE_SET_ERR(err, errlen, "%s names no checkpoint", what);
        return TT_EPROTO;
    }
    int rc =
        tt_wire_check_str("failed checkpoint id", f->checkpoint_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("checkpoint failure reason", f->reason, TT_WIRE_MAX_TEXT, err,
                               errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("failed checkpoint's worker", f->worker_id, TT_WIRE_MAX_ID, err,
                               errlen);
    return rc;
}

static int check_ckpt_reply(const Tether__CheckpointsReply *r, const tt_wire_limits_t *lim,
                            char *err, size_t errlen) {
    int rc =
        check_ckpt_records(r->checkpoints, r->n_checkpoints, lim, "checkpoints reply", err, errlen);
    if (rc == TT_OK && r->last_failure != NULL)
        rc = check_ckpt_failure(r->last_failure, "checkpoints reply's last failure", err, errlen);
    return rc;
}

/* A commit carries the manifest as its one frame; everything else none. */
static int check_ckpt_body(const tt_env_t *e, const tt_wire_limits_t *lim, char *err,
                           size_t errlen) {
    if (e->body_case != TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT) {
        int rc = tt_wire_check_no_frames(e, tt_wire_body_name(e->body_case), err, errlen);
        if (rc == TT_OK && e->body_case == TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY)
            rc = check_ckpt_reply(e->checkpoints_reply, lim, err, errlen);
        if (rc == TT_OK && e->body_case == TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE)
            rc = check_ckpt_failure(e->checkpoint_failure, "checkpoint failure", err, errlen);
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
    return tt_wire_check_str("checkpoint root", root, TT_WIRE_MAX_TEXT, err, errlen);
}

/* A collective bootstrap id: opaque bytes of a bounded size, no frames. */
static int check_comm_id_body(const tt_env_t *e, char *err, size_t errlen) {
    int rc = tt_wire_check_no_frames(e, tt_wire_body_name(e->body_case), err, errlen);
    const ProtobufCBinaryData *id = NULL;
    if (e->body_case == TETHER__ENVELOPE__BODY_COMM_ID_OFFER)
        id = &e->comm_id_offer->id;
    else if (e->body_case == TETHER__ENVELOPE__BODY_COMM_ID_REPLY)
        id = &e->comm_id_reply->id;
    if (rc == TT_OK && id != NULL && id->len > TT_WIRE_MAX_COMM_ID) {
        WIRE_SET_ERR(err, errlen, "%s: an id of %zu bytes (at most %u)",
                     tt_wire_body_name(e->body_case), id->len, TT_WIRE_MAX_COMM_ID);
        rc = TT_ESIZE;
    }
    if (rc == TT_OK && e->body_case == TETHER__ENVELOPE__BODY_COMM_ID_REPLY)
        rc = tt_wire_check_str("rank 0's worker id", e->comm_id_reply->rank0_worker, TT_WIRE_MAX_ID,
                               err, errlen);
    if (rc == TT_OK && e->body_case == TETHER__ENVELOPE__BODY_COMM_ID_REPLY)
        rc = tt_wire_check_str("rank 0's host", e->comm_id_reply->rank0_host, TT_WIRE_MAX_TEXT, err,
                               errlen);
    return rc;
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
        return tt_wire_check_str("failure reason", e->report_failure->reason, TT_WIRE_MAX_TEXT, err,
                                 errlen);
    case TETHER__ENVELOPE__BODY_LEAVE:
        return tt_wire_check_str("leave reason", e->leave->reason, TT_WIRE_MAX_TEXT, err, errlen);
    case TETHER__ENVELOPE__BODY_DRAIN:
        return tt_wire_check_str("drained worker id", e->drain->worker_id, TT_WIRE_MAX_ID, err,
                                 errlen);
    case TETHER__ENVELOPE__BODY_COMM_ID_OFFER:
    case TETHER__ENVELOPE__BODY_COMM_ID_REQUEST:
    case TETHER__ENVELOPE__BODY_COMM_ID_REPLY:
        return check_comm_id_body(e, err, errlen);
    case TETHER__ENVELOPE__BODY_ERROR:
        return tt_wire_check_str("error message", e->error->message, TT_WIRE_MAX_TEXT, err, errlen);
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
        return tt_wire_check_ps_body(e, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_DUMP:
    case TETHER__ENVELOPE__BODY_DUMP_REPORT:
    case TETHER__ENVELOPE__BODY_DUMP_REPLY:
        return check_dump_body(e, lim, err, errlen);
    case TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST:
    case TETHER__ENVELOPE__BODY_CHECKPOINT_REQUEST_REPLY:
    case TETHER__ENVELOPE__BODY_CHECKPOINT_COMMIT:
    case TETHER__ENVELOPE__BODY_CHECKPOINTS:
    case TETHER__ENVELOPE__BODY_CHECKPOINTS_REPLY:
    case TETHER__ENVELOPE__BODY_CHECKPOINT_FAILURE:
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
    int rc = tt_wire_check_str("job id", e->job_id, TT_WIRE_MAX_ID, err, errlen);
    if (rc == TT_OK)
        rc = tt_wire_check_str("sender id", e->sender_id, TT_WIRE_MAX_ID, err, errlen);
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
            !tt_wire_str_ok(f->worker_id, TT_WIRE_MAX_ID) || f->n_evicted_unix_ms > 32)
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
            !tt_wire_str_ok(f->job_id, TT_WIRE_MAX_ID)) {
            WIRE_SET_ERR(err, errlen, "state file forgotten job %zu is malformed", i);
            return TT_ECORRUPT;
        }
    }
    for (size_t i = 0; i < st->n_jobs; i++) {
        const Tether__CoordJobRecord *j = st->jobs[i];
        if (j == NULL || j->job_id == NULL || j->job_id[0] == '\0' ||
            !tt_wire_str_ok(j->job_id, TT_WIRE_MAX_ID) ||
            !tt_wire_str_ok(j->failure, TT_WIRE_MAX_TEXT) || j->settings == NULL ||
            j->n_members > 65536 || j->n_checkpoints > 65536 || !check_history(j) ||
            j->comm_id.len > TT_WIRE_MAX_COMM_ID ||
            !tt_wire_shrink_ok(j->formed_generation, j->shrink_of, j->shrink_exclude,
                               j->n_shrink_exclude)) {
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
