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
    case TETHER__ENVELOPE__BODY_BOUNDARY:
    case TETHER__ENVELOPE__BODY_CONTINUE_:
    case TETHER__ENVELOPE__BODY_REGROUP_NOTICE:
        return TT_OK;
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

static int check_state(const tt_coord_state_pb_t *st, char *err, size_t errlen) {
    if (st->version != TT_WIRE_VERSION) {
        WIRE_SET_ERR(err, errlen, "state file version %u, this build reads %u", st->version,
                     TT_WIRE_VERSION);
        return TT_EVERSION;
    }
    for (size_t i = 0; i < st->n_jobs; i++) {
        const Tether__CoordJobRecord *j = st->jobs[i];
        if (j == NULL || j->job_id == NULL || j->job_id[0] == '\0' ||
            !str_ok(j->job_id, TT_WIRE_MAX_ID) || !str_ok(j->failure, TT_WIRE_MAX_TEXT) ||
            j->settings == NULL || j->n_members > 65536) {
            WIRE_SET_ERR(err, errlen, "state file job record %zu is malformed", i);
            return TT_ECORRUPT;
        }
        for (size_t k = 0; k < j->n_members; k++) {
            if (check_member(j->members[k], err, errlen) != TT_OK)
                return TT_ECORRUPT;
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
