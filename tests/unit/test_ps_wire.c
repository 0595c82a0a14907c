/* Unit tests of the wire validation of the shard / parameter-server bodies
 * (common/tt_wire check_ps_body): each body kind is accepted when well
 * formed and refused, with the right code, when its payload frames, sizes,
 * counts or strings are wrong. */
#include "tt_cunit.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stdlib.h>
#include <string.h>

/* Encodes `env` announcing `n` frames of `lens`, then decodes it with the
 * frames as they "arrived" (same sizes). Returns the decoder's status. */
static int round_trip(tt_env_t *env, const size_t *lens, size_t n) {
    uint64_t sizes[4];
    for (size_t i = 0; i < n; i++)
        sizes[i] = lens[i];
    env->n_payload_sizes = n;
    env->payload_sizes = n ? sizes : NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(tt_wire_encode(env, &buf, &len), TT_OK);
    tt_env_t *out = NULL;
    char err[256] = "";
    int rc = tt_wire_decode(buf, len, lens, n, NULL, &out, err, sizeof(err));
    if (rc == TT_OK)
        CU_ASSERT_EQUAL(out->body_case, env->body_case);
    tt_wire_free(&out);
    free(buf);
    return rc;
}

static void ps_wire_push_needs_one_float_frame(void) {
    tt_env_t env;
    Tether__PushChunk p = TETHER__PUSH_CHUNK__INIT;
    tt_wire_env_init(&env, "job", "w0", 1, 1);
    env.body_case = TETHER__ENVELOPE__BODY_PUSH_CHUNK;
    env.push_chunk = &p;
    p.world = 2;
    p.rank = 1;
    size_t ok[1] = {400}, odd[1] = {401}, zero[1] = {0}, two[2] = {400, 400};
    CU_ASSERT_EQUAL(round_trip(&env, ok, 1), TT_OK);
    CU_ASSERT_EQUAL(round_trip(&env, odd, 1), TT_ESIZE);
    CU_ASSERT_EQUAL(round_trip(&env, zero, 1), TT_ESIZE);
    CU_ASSERT_EQUAL(round_trip(&env, two, 2), TT_ESIZE);
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_ESIZE);
    p.rank = 2; /* outside world */
    CU_ASSERT_EQUAL(round_trip(&env, ok, 1), TT_EPROTO);
    p.world = 0;
    p.rank = 0;
    CU_ASSERT_EQUAL(round_trip(&env, ok, 1), TT_EPROTO);
}

static void ps_wire_requests_carry_no_frames(void) {
    tt_env_t env;
    Tether__PullChunk pull = TETHER__PULL_CHUNK__INIT;
    Tether__GetParams get = TETHER__GET_PARAMS__INIT;
    Tether__PlacementRequest place = TETHER__PLACEMENT_REQUEST__INIT;
    size_t one[1] = {4};
    tt_wire_env_init(&env, "job", "w0", 1, 1);
    env.body_case = TETHER__ENVELOPE__BODY_PULL_CHUNK;
    env.pull_chunk = &pull;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(round_trip(&env, one, 1), TT_ESIZE);
    env.body_case = TETHER__ENVELOPE__BODY_GET_PARAMS;
    env.get_params = &get;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    get.part = 3;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    env.body_case = TETHER__ENVELOPE__BODY_PLACEMENT;
    env.placement = &place;
    CU_ASSERT_EQUAL(round_trip(&env, one, 1), TT_ESIZE);
}

static void ps_wire_declare_checks_table(void) {
    tt_env_t env;
    Tether__DeclareTensors d = TETHER__DECLARE_TENSORS__INIT;
    Tether__TensorSpec t0 = TETHER__TENSOR_SPEC__INIT, t1 = TETHER__TENSOR_SPEC__INIT;
    Tether__TensorSpec *ts[2] = {&t0, &t1};
    t0.name = "w";
    t0.count = 10;
    t1.name = "b";
    t1.count = 3;
    d.tensors = ts;
    d.n_tensors = 2;
    tt_wire_env_init(&env, "job", "w0", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_DECLARE_TENSORS;
    env.declare_tensors = &d;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    t1.count = 0;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    t1.count = 3;
    t1.dtype = 1; /* only float32 */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    t1.dtype = 0;
    d.chunk_bytes = 6; /* not whole floats */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    d.chunk_bytes = 0;
    d.n_tensors = 0;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
}

static void ps_wire_placement_must_tile_space(void) {
    tt_env_t env;
    Tether__PlacementReply r = TETHER__PLACEMENT_REPLY__INIT;
    Tether__ChunkPlace c0 = TETHER__CHUNK_PLACE__INIT, c1 = TETHER__CHUNK_PLACE__INIT;
    Tether__ChunkPlace *cs[2] = {&c0, &c1};
    char *ids[2] = {"s0", "s1"}, *eps[2] = {"tcp://a:1", "tcp://b:2"};
    c0.count = 8;
    c1.offset = 8;
    c1.count = 2;
    c1.shard = 1;
    r.chunks = cs;
    r.n_chunks = 2;
    r.total_elems = 10;
    r.shard_ids = ids;
    r.shard_endpoints = eps;
    r.n_shard_ids = r.n_shard_endpoints = 2;
    tt_wire_env_init(&env, "job", "coordinator", 0, 1);
    env.body_case = TETHER__ENVELOPE__BODY_PLACEMENT_REPLY;
    env.placement_reply = &r;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    c1.offset = 9; /* a gap */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    c1.offset = 8;
    c1.shard = 2; /* no such shard */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    c1.shard = 1;
    r.total_elems = 11; /* chunks cover less */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    r.total_elems = 10;
    r.n_shard_endpoints = 1;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
}

static void ps_wire_setup_and_stall_are_checked(void) {
    tt_env_t env;
    Tether__PsSetup s = TETHER__PS_SETUP__INIT;
    Tether__PsChunkSpec a = TETHER__PS_CHUNK_SPEC__INIT, b = TETHER__PS_CHUNK_SPEC__INIT;
    Tether__PsChunkSpec *cs[2] = {&a, &b};
    a.chunk = 3;
    a.count = 10;
    b.chunk = 5;
    b.count = 10;
    s.chunks = cs;
    s.n_chunks = 2;
    tt_wire_env_init(&env, "job", "w0", 1, 1);
    env.body_case = TETHER__ENVELOPE__BODY_PS_SETUP;
    env.ps_setup = &s;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    b.chunk = 3; /* ids must increase */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    b.chunk = 5;
    s.mode = 2;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);

    Tether__ShardStall st = TETHER__SHARD_STALL__INIT;
    uint32_t miss[2] = {1, 4};
    st.missing_ranks = miss;
    st.n_missing_ranks = 2;
    st.world = 5;
    env.body_case = TETHER__ENVELOPE__BODY_SHARD_STALL;
    env.shard_stall = &st;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    st.world = 4; /* rank 4 outside world */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
}

static void ps_wire_shard_heartbeat_needs_id_and_endpoint(void) {
    tt_env_t env;
    Tether__ShardHeartbeat h = TETHER__SHARD_HEARTBEAT__INIT;
    tt_wire_env_init(&env, "", "s0", 0, 0);
    env.body_case = TETHER__ENVELOPE__BODY_SHARD_HEARTBEAT;
    env.shard_heartbeat = &h;
    h.shard_id = "s0";
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO); /* no endpoint */
    h.endpoint = "tcp://127.0.0.1:7700";
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    char longid[200];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    h.shard_id = longid;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
}

static void ps_wire_checkpoint_bodies_are_checked(void) {
    tt_env_t env;
    Tether__ChunkOffset c0 = TETHER__CHUNK_OFFSET__INIT;
    Tether__ChunkOffset *cs[1] = {&c0};
    Tether__WriteChunks w = TETHER__WRITE_CHUNKS__INIT;
    size_t one[1] = {4};
    tt_wire_env_init(&env, "job", "w0", 1, 1);
    env.body_case = TETHER__ENVELOPE__BODY_WRITE_CHUNKS;
    env.write_chunks = &w;
    w.dir = "/ck/step-000000005";
    w.file = "ps-0.bin";
    w.n_chunks = 1;
    w.chunks = cs;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(round_trip(&env, one, 1), TT_ESIZE);
    w.dir = "relative/dir"; /* the shard's working directory is nobody's business */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    w.dir = "/ck";
    w.file = "";
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    w.file = "ps-0.bin";
    w.n_chunks = 0;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);
    w.n_chunks = 1;
    w.phase = 2; /* the result of a two-phase write */
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
    w.phase = 3;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO);

    Tether__CkptRange r0 = TETHER__CKPT_RANGE__INIT;
    Tether__CkptRange *rs[1] = {&r0};
    Tether__CkptPart part = TETHER__CKPT_PART__INIT;
    Tether__ChunksWritten cw = TETHER__CHUNKS_WRITTEN__INIT;
    env.body_case = TETHER__ENVELOPE__BODY_CHUNKS_WRITTEN;
    env.chunks_written = &cw;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_EPROTO); /* no part */
    cw.part = &part;
    part.file = "ps-0.bin";
    part.n_ranges = 1;
    part.ranges = rs;
    CU_ASSERT_EQUAL(round_trip(&env, NULL, 0), TT_OK);
}

static const tt_cunit_test_t tests[] = {
    {"ps_wire_push_needs_one_float_frame", ps_wire_push_needs_one_float_frame},
    {"ps_wire_checkpoint_bodies_are_checked", ps_wire_checkpoint_bodies_are_checked},
    {"ps_wire_requests_carry_no_frames", ps_wire_requests_carry_no_frames},
    {"ps_wire_declare_checks_table", ps_wire_declare_checks_table},
    {"ps_wire_placement_must_tile_space", ps_wire_placement_must_tile_space},
    {"ps_wire_setup_and_stall_are_checked", ps_wire_setup_and_stall_are_checked},
    {"ps_wire_shard_heartbeat_needs_id_and_endpoint",
     ps_wire_shard_heartbeat_needs_id_and_endpoint},
    {NULL, NULL},
};

TT_CUNIT_MAIN("ps_wire", tests)
