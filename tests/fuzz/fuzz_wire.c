/* fuzz_wire: fuzzes tt_wire_decode(), the envelope decoder every byte from
 * the network passes through. An input is
 *   [n: 1 byte][n x payload frame length: u32 little-endian][envelope bytes]
 * with n taken modulo 8 (an input too short for its lengths counts as n = 0),
 * so the fuzzer also explores frame counts and sizes that disagree with the
 * header. Whatever the decoder accepts must re-encode and decode again with
 * the same frames, and the scope check and body name must cope with it; a
 * broken invariant aborts on purpose.
 * fuzz-requires: common/tt_wire.c */
#include "tt_fuzz.h"
#include "tt_fuzz_pb.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_FRAMES 8

static size_t split_input(const uint8_t **data, size_t *size, size_t *lens) {
    if (*size == 0)
        return 0;
    size_t n = (*data)[0] % FUZZ_MAX_FRAMES;
    if (*size < 1 + 4 * n)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = *data + 1 + 4 * i;
        lens[i] = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
    }
    *data += 1 + 4 * n;
    *size -= 1 + 4 * n;
    return n;
}

static void check_round_trip(const tt_env_t *env, const size_t *lens, size_t n) {
    uint8_t *buf = NULL;
    size_t len = 0;
    if (tt_wire_encode(env, &buf, &len) != TT_OK)
        abort();
    char err[256];
    tt_env_t *again = NULL;
    if (tt_wire_decode(buf, len, lens, n, NULL, &again, err, sizeof(err)) != TT_OK ||
        again->body_case != env->body_case || again->generation != env->generation)
        abort();
    tt_wire_free(&again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t lens[FUZZ_MAX_FRAMES];
    size_t n = split_input(&data, &size, lens);
    char err[256];
    tt_env_t *env = NULL;
    if (tt_wire_decode(data, size, lens, n, NULL, &env, err, sizeof(err)) != TT_OK) {
        if (env != NULL || strnlen(err, sizeof(err)) == 0)
            abort(); /* a rejection leaves nothing behind and says why */
        return 0;
    }
    (void)tt_wire_check_scope(env, "mnist", 3, err, sizeof(err));
    if (tt_wire_body_name((int)env->body_case) == NULL)
        abort();
    if (!tt_fuzz_pb_has_unknown(&env->base))
        check_round_trip(env, lens, n);
    tt_wire_free(&env);
    return 0;
}

/* Storage for one example of every body kind, all borrowed by seeds. */
typedef struct {
    Tether__JobSettings settings;
    Tether__JoinRequest join;
    Tether__Member member[2];
    Tether__Member *members[2];
    Tether__Generation gen;
    Tether__JoinReply join_reply;
    Tether__Heartbeat hb;
    Tether__HeartbeatReply hb_reply;
    Tether__ReportFailure failure;
    Tether__Leave leave;
    Tether__Ack ack;
    Tether__Error error;
    Tether__StatusRequest status;
    Tether__JobStatus job;
    Tether__JobStatus *jobs[1];
    Tether__StatusReply status_reply;
    Tether__MembersRequest members_req;
    Tether__MemberStatus mstat;
    Tether__MemberStatus *mstats[1];
    Tether__MembersReply members_reply;
    /* Bodies whose empty form is refused: a valid example gives the fuzzer
     * a start inside the accepted set. */
    Tether__ChunkOffset chunk;
    Tether__ChunkOffset *chunks[1];
    Tether__WriteChunks write;
    Tether__CkptRange range;
    Tether__CkptRange *ranges[1];
    Tether__CkptPart part;
    Tether__ChunksWritten written;
} seed_bodies_t;

static void fill_membership(seed_bodies_t *b) {
    tether__job_settings__init(&b->settings);
    b->settings.min_workers = 2;
    b->settings.max_workers = 4;
    b->settings.global_batch = 256;
    tether__join_request__init(&b->join);
    b->join.settings = &b->settings;
    b->join.worker_id = "w-alpha";
    b->join.host = "127.0.0.1";
    b->join.endpoint = "tcp://127.0.0.1:7800";
    b->join.last_step = -1;
    for (int i = 0; i < 2; i++) {
        tether__member__init(&b->member[i]);
        b->member[i].rank = (uint32_t)i;
        b->member[i].worker_id = i ? "w-beta" : "w-alpha";
        b->member[i].endpoint = i ? "tcp://127.0.0.1:7801" : "tcp://127.0.0.1:7800";
        b->members[i] = &b->member[i];
    }
    tether__generation__init(&b->gen);
    b->gen.generation = 3;
    b->gen.world_size = 2;
    b->gen.n_members = 2;
    b->gen.members = b->members;
    tether__join_reply__init(&b->join_reply);
    b->join_reply.generation = &b->gen;
    b->join_reply.rank = 1;
}

static void fill_control(seed_bodies_t *b) {
    tether__heartbeat__init(&b->hb);
    b->hb.completed_step = 41;
    tether__heartbeat_reply__init(&b->hb_reply);
    b->hb_reply.generation = 3;
    b->hb_reply.regroup_after_step = -1;
    tether__report_failure__init(&b->failure);
    b->failure.reason = "peer closed the ring connection";
    tether__leave__init(&b->leave);
    b->leave.reason = "drained";
    tether__ack__init(&b->ack);
    tether__error__init(&b->error);
    b->error.code = TT_ESTALE;
    b->error.message = "message of generation 2, current is 3";
}

static void fill_queries(seed_bodies_t *b) {
    tether__status_request__init(&b->status);
    tether__job_status__init(&b->job);
    b->job.job_id = "mnist";
    b->job.generation = 3;
    b->job.settings = &b->settings;
    b->jobs[0] = &b->job;
    tether__status_reply__init(&b->status_reply);
    b->status_reply.n_jobs = 1;
    b->status_reply.jobs = b->jobs;
    tether__members_request__init(&b->members_req);
    tether__member_status__init(&b->mstat);
    b->mstat.worker_id = "w-alpha";
    b->mstat.heartbeat_age_ms = 120;
    b->mstats[0] = &b->mstat;
    tether__members_reply__init(&b->members_reply);
    b->members_reply.generation = 3;
    b->members_reply.n_members = 1;
    b->members_reply.members = b->mstats;
}

static void fill_shard_ckpt(seed_bodies_t *b) {
    tether__chunk_offset__init(&b->chunk);
    b->chunk.chunk = 2;
    b->chunk.offset = 32768;
    b->chunks[0] = &b->chunk;
    tether__write_chunks__init(&b->write);
    b->write.dir = "/ck/step-000000006";
    b->write.file = "ps-0.bin";
    b->write.step = 5;
    b->write.check_step = 1;
    b->write.n_chunks = 1;
    b->write.chunks = b->chunks;
    tether__ckpt_range__init(&b->range);
    b->range.offset = 131072;
    b->range.length = 65536;
    b->ranges[0] = &b->range;
    tether__ckpt_part__init(&b->part);
    b->part.file = "ps-0.bin";
    b->part.kind = 1;
    b->part.size = 131144;
    b->part.crc32c = 0x8617668du;
    b->part.n_ranges = 1;
    b->part.ranges = b->ranges;
    b->part.planes = 2;
    tether__chunks_written__init(&b->written);
    b->written.part = &b->part;
}

/* Prefixes the encoded envelope with the frame lengths its header names. */
static int emit_env(tt_fuzz_emit_fn emit, void *ctx, const tt_env_t *env) {
    uint8_t *enc = NULL;
    size_t len = 0;
    int rc = tt_wire_encode(env, &enc, &len);
    size_t n = env->n_payload_sizes, head = 1 + 4 * n;
    uint8_t *in = rc == TT_OK ? malloc(head + len) : NULL;
    if (in != NULL) {
        in[0] = (uint8_t)n;
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < 4; k++)
                in[1 + 4 * i + k] = (uint8_t)(env->payload_sizes[i] >> (8 * k));
        memcpy(in + head, enc, len);
        rc = emit(ctx, tt_wire_body_name((int)env->body_case), in, head + len);
    } else if (rc == TT_OK) {
        rc = TT_ENOMEM;
    }
    free(in);
    free(enc);
    return rc;
}

/* The filled-in example of the body type `d`, or NULL when seed_bodies_t
 * has none (a body kind added to the proto after this file). */
static void *example_body(seed_bodies_t *b, const ProtobufCMessageDescriptor *d) {
    void *bodies[] = {&b->join,        &b->join_reply,    &b->hb,    &b->hb_reply, &b->failure,
                      &b->leave,       &b->ack,           &b->error, &b->status,   &b->status_reply,
                      &b->members_req, &b->members_reply, &b->write, &b->written};
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        if (((ProtobufCMessage *)bodies[i])->descriptor == d)
            return bodies[i];
    return NULL;
}

/* Points the envelope's oneof at its `i`-th body field (in descriptor order),
 * using the example body or else `spare`, an empty message of that type, so
 * every body kind gets a seed without this file knowing it. Returns 0 past
 * the last body field, -1 when `spare` is too small. */
static int set_body(tt_env_t *env, seed_bodies_t *b, int i, void *spare, size_t spare_len) {
    const ProtobufCMessageDescriptor *ed = &tether__envelope__descriptor;
    int seen = -1;
    for (unsigned k = 0; k < ed->n_fields; k++) {
        const ProtobufCFieldDescriptor *f = &ed->fields[k];
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) || ++seen != i)
            continue;
        const ProtobufCMessageDescriptor *bd = f->descriptor;
        void *body = example_body(b, bd);
        if (body == NULL) {
            if (bd->sizeof_message > spare_len)
                return -1;
            protobuf_c_message_init(bd, spare);
            body = spare;
        }
        env->body_case = (Tether__Envelope__BodyCase)f->id;
        *(void **)((char *)env + f->offset) = body;
        return 1;
    }
    return 0;
}

int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    seed_bodies_t b;
    fill_membership(&b);
    fill_control(&b);
    fill_queries(&b);
    fill_shard_ckpt(&b);
    uint64_t sizes[2] = {1024, 12};
    _Alignas(max_align_t) unsigned char spare[1024];
    int rc = TT_OK;
    for (int i = 0; rc == TT_OK; i++) {
        tt_env_t env;
        tt_wire_env_init(&env, "mnist", "w-alpha", 3, 1000 + (uint64_t)i);
        int set = set_body(&env, &b, i, spare, sizeof(spare));
        if (set <= 0) {
            rc = set < 0 ? TT_EINTERNAL : TT_OK;
            break;
        }
        if (env.body_case == TETHER__ENVELOPE__BODY_HEARTBEAT) {
            env.n_payload_sizes = 2; /* a body followed by raw tensor frames */
            env.payload_sizes = sizes;
        }
        rc = emit_env(emit, ctx, &env);
    }
    return rc;
}
