/* Unit tests of tt_manifest: round trip through the encoder and the file,
 * extent filling from shard ranges, the flat layout, and one test per
 * validation rule (each breaks exactly one thing in a valid manifest and
 * expects the rejection to name it), for validate() and for decode(). */
#include "tt_cunit.h"
#include "tt_manifest.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An MLP 3 -> 4 -> 2: w0[4,3] b0[4] w1[2,4] b1[2], float32, 104 flat bytes,
 * in 32-byte chunks over two shards (params + momentum) plus trainer state. */
static const tt_ckpt_range_t r0[] = {{0, 32}, {64, 32}}, r1[] = {{32, 32}, {96, 8}};
static const uint32_t kinds[] = {TT_STATE_PARAMS, TT_STATE_MOMENTUM};

static void set_tensor(tt_mf_tensor_t *t, const char *name, uint64_t d0, uint64_t d1,
                       uint64_t flat) {
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->dtype = TT_DTYPE_F32;
    t->flat_offset = flat;
}

static void set_part(tt_mf_part_t *p, const char *file, const tt_ckpt_range_t *r, uint32_t n) {
    snprintf(p->file, sizeof(p->file), "%s", file);
    p->kind = TT_CKPT_KIND_SHARD;
    p->planes = 2;
    p->nranges = n;
    p->ranges = malloc(n * sizeof(*r));
    memcpy(p->ranges, r, n * sizeof(*r));
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += r[i].length;
    p->size = TT_CKPT_HEADER_BYTES + n * TT_CKPT_RANGE_BYTES + 2 * sum + TT_CKPT_TRAILER_BYTES;
    p->crc32c = 0x1000u + n;
}

static void make(tt_manifest_t *m) {
    memset(m, 0, sizeof(*m));
    m->version = TT_MANIFEST_VERSION;
    snprintf(m->id, sizeof(m->id), "step-000120");
    snprintf(m->job_id, sizeof(m->job_id), "mnist");
    m->step = 120;
    m->epoch = 2;
    m->created_unix_ms = 1700000000000ull;
    m->duration_ms = 850;
    m->nparts = 3;
    m->parts = calloc(3, sizeof(*m->parts));
    set_part(&m->parts[0], "shard-0.bin", r0, 2);
    set_part(&m->parts[1], "shard-1.bin", r1, 2);
    snprintf(m->parts[2].file, TT_CKPT_NAME_MAX, "trainer.bin");
    m->parts[2].kind = TT_CKPT_KIND_TRAINER;
    m->parts[2].size = TT_CKPT_HEADER_BYTES + TT_CKPT_TRAILER_BYTES + 100;
    m->ntensors = 4;
    m->tensors = calloc(4, sizeof(*m->tensors));
    set_tensor(&m->tensors[0], "layer0.weight", 4, 3, 0);
    set_tensor(&m->tensors[1], "layer0.bias", 4, 0, 48);
    set_tensor(&m->tensors[2], "layer1.weight", 2, 4, 64);
    set_tensor(&m->tensors[3], "layer1.bias", 2, 0, 96);
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_manifest_fill_extents(m, kinds, 2, err, sizeof(err)), TT_OK);
}

static void manifest_fill_extents_follows_plane_convention(void) {
    tt_manifest_t m;
    make(&m);
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_manifest_validate(&m, err, sizeof(err)), TT_OK);
    /* layer0.bias (flat 48..64) straddles chunks: [48,64) in shard-1 at 16. */
    const tt_mf_state_t *st = &m.tensors[1].states[0];
    CU_ASSERT_EQUAL(m.tensors[0].states[0].nextents, 2); /* 32 in s0, 16 in s1 */
    CU_ASSERT_EQUAL(st->nextents, 1);
    CU_ASSERT_EQUAL(st->extents[0].part, 1);
    CU_ASSERT_EQUAL(st->extents[0].part_offset, 16);
    /* layer1.weight's momentum: shard-0 plane 1 (64 bytes per plane) + 32. */
    st = &m.tensors[2].states[1];
    CU_ASSERT_EQUAL(st->state, TT_STATE_MOMENTUM);
    CU_ASSERT_EQUAL(st->extents[0].part, 0);
    CU_ASSERT_EQUAL(st->extents[0].part_offset, 64 + 32);
    tt_reshard_seg_t *segs = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(tt_manifest_layout(&m, TT_STATE_MOMENTUM, &segs, &n), TT_OK);
    CU_ASSERT_EQUAL(tt_reshard_check(segs, n, 104, NULL, 0), TT_OK);
    CU_ASSERT_EQUAL(tt_manifest_flat_bytes(&m), 104);
    free(segs);
    CU_ASSERT_EQUAL(tt_manifest_layout(&m, TT_STATE_ADAM_V, &segs, &n), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_manifest_find_part(&m, "trainer.bin"), 2);
    CU_ASSERT_EQUAL(tt_manifest_find_part(&m, "nope"), -1);
    tt_manifest_free(&m);
}

static int same_manifest(const tt_manifest_t *a, const tt_manifest_t *b) {
    int ok = a->version == b->version && strcmp(a->id, b->id) == 0 &&
             strcmp(a->job_id, b->job_id) == 0 && a->step == b->step && a->epoch == b->epoch &&
             a->created_unix_ms == b->created_unix_ms && a->duration_ms == b->duration_ms &&
             a->nparts == b->nparts && a->ntensors == b->ntensors;
    for (uint32_t i = 0; ok && i < a->nparts; i++) {
        const tt_mf_part_t *x = &a->parts[i], *y = &b->parts[i];
        ok =
            strcmp(x->file, y->file) == 0 && x->kind == y->kind && x->size == y->size &&
            x->crc32c == y->crc32c && x->planes == y->planes && x->nranges == y->nranges &&
            (x->nranges == 0 || memcmp(x->ranges, y->ranges, x->nranges * sizeof(*x->ranges)) == 0);
    }
    for (uint32_t i = 0; ok && i < a->ntensors; i++) {
        const tt_mf_tensor_t *x = &a->tensors[i], *y = &b->tensors[i];
        ok = strcmp(x->name, y->name) == 0 && x->ndim == y->ndim && x->dtype == y->dtype &&
             memcmp(x->shape, y->shape, sizeof(x->shape)) == 0 &&
             x->flat_offset == y->flat_offset && x->nstates == y->nstates;
        for (uint32_t s = 0; ok && s < x->nstates; s++)
            ok = x->states[s].state == y->states[s].state &&
                 x->states[s].nextents == y->states[s].nextents &&
                 memcmp(x->states[s].extents, y->states[s].extents,
                        x->states[s].nextents * sizeof(tt_mf_extent_t)) == 0;
    }
    return ok;
}

static void manifest_round_trip(void) {
    tt_manifest_t m, back;
    make(&m);
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(tt_manifest_encode(&m, &buf, &len, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_manifest_decode(buf, len, &back, err, sizeof(err)), TT_OK);
    CU_ASSERT(same_manifest(&m, &back));
    CU_ASSERT_EQUAL(tt_manifest_encode(&back, &buf2, &len2, err, sizeof(err)), TT_OK);
    CU_ASSERT(len == len2 && memcmp(buf, buf2, len) == 0);
    free(buf);
    free(buf2);
    tt_manifest_free(&back);
    tt_manifest_free(&m);
    tt_manifest_free(NULL);
}

static void manifest_file_store_and_load(void) {
    char dir[] = "/tmp/tt_manifest_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    tt_manifest_t m, back;
    make(&m);
    char err[512] = "";
    CU_ASSERT_EQUAL(tt_manifest_load(dir, &back, err, sizeof(err)), TT_ENOTFOUND);
    CU_ASSERT_EQUAL(tt_manifest_store(dir, &m, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL_FATAL(tt_manifest_load(dir, &back, err, sizeof(err)), TT_OK);
    CU_ASSERT(same_manifest(&m, &back));
    tt_manifest_free(&back);
    m.parts[0].size += 1; /* an invalid manifest is never stored */
    CU_ASSERT_EQUAL(tt_manifest_store(dir, &m, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_EQUAL(tt_manifest_load(dir, &back, err, sizeof(err)), TT_OK);
    tt_manifest_free(&back);
    tt_manifest_free(&m);
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, TT_MANIFEST_FILE);
    /* Every single flipped byte is caught by the trailer, even where the
     * protobuf would still decode (a size or CRC field). */
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    int caught = 0;
    for (long at = 0; at < len; at++) {
        int c;
        fseek(f, at, SEEK_SET);
        c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x10, f);
        fflush(f);
        err[0] = '\0';
        caught += tt_manifest_load(dir, &back, err, sizeof(err)) == TT_ECORRUPT &&
                  strstr(err, TT_MANIFEST_FILE) != NULL;
        fseek(f, at, SEEK_SET);
        fputc(c, f);
        fflush(f);
    }
    CU_ASSERT_EQUAL(caught, len);
    CU_ASSERT(len > 8 && truncate(path, len - 3) == 0); /* a torn write */
    CU_ASSERT_EQUAL(tt_manifest_load(dir, &back, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "trailer"));
    fclose(f);
    unlink(path);
    rmdir(dir);
}

/* ---- validation: one broken rule each ---- */

typedef void (*breaker_fn)(tt_manifest_t *m);

/* Breaks a fresh manifest, expects `want` and `needle` in the message. */
static void expect_invalid(breaker_fn brk, int want, const char *needle) {
    tt_manifest_t m;
    make(&m);
    brk(&m);
    char err[512] = "";
    int rc = tt_manifest_validate(&m, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, want);
    if (strstr(err, needle) == NULL)
        printf("\n    expected '%s' in: %s\n", needle, err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    uint8_t *buf = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(tt_manifest_encode(&m, &buf, &len, NULL, 0), want);
    CU_ASSERT_PTR_NULL(buf);
    tt_manifest_free(&m);
}

static void b_version(tt_manifest_t *m) {
    m->version = 2;
}
static void b_id(tt_manifest_t *m) {
    snprintf(m->id, sizeof(m->id), "../etc");
}
static void b_job(tt_manifest_t *m) {
    m->job_id[0] = '\0';
}
static void b_noparts(tt_manifest_t *m) {
    for (uint32_t i = 0; i < m->nparts; i++)
        free(m->parts[i].ranges);
    m->nparts = 0;
}
static void b_dup_part(tt_manifest_t *m) {
    snprintf(m->parts[1].file, 16, "shard-0.bin");
}
static void b_slash(tt_manifest_t *m) {
    snprintf(m->parts[1].file, 16, "a/b");
}
static void b_size(tt_manifest_t *m) {
    m->parts[0].size -= 4;
}
static void b_kind(tt_manifest_t *m) {
    m->parts[1].kind = 9;
}
static void b_two_trainers(tt_manifest_t *m) {
    free(m->parts[1].ranges);
    m->parts[1] = m->parts[2];
    m->parts[1].file[0] = 'u';
}
static void b_trainer_ranges(tt_manifest_t *m) {
    m->parts[2].planes = 1;
}
static void b_range_overlap(tt_manifest_t *m) {
    m->parts[0].ranges[1].offset = 16;
}
static void b_dtype(tt_manifest_t *m) {
    m->tensors[1].dtype = 99;
}
static void b_zero_dim(tt_manifest_t *m) {
    m->tensors[0].shape[1] = 0;
}
static void b_dims(tt_manifest_t *m) {
    m->tensors[0].ndim = 9;
}
static void b_flat_gap(tt_manifest_t *m) {
    m->tensors[2].flat_offset = 68;
}
static void b_dup_name(tt_manifest_t *m) {
    snprintf(m->tensors[3].name, 16, "layer0.bias");
}
static void b_no_name(tt_manifest_t *m) {
    m->tensors[3].name[0] = '\0';
}
static void b_state_kind(tt_manifest_t *m) {
    m->tensors[0].states[1].state = 7;
}
static void b_state_mismatch(tt_manifest_t *m) {
    m->tensors[2].states[1].state = TT_STATE_ADAM_V;
}
static void b_missing(tt_manifest_t *m) {
    m->tensors[0].states[0].extents[0].length = 28;
}
static void b_overlap(tt_manifest_t *m) {
    m->tensors[0].states[0].extents[1].offset = 28;
}
static void b_part_index(tt_manifest_t *m) {
    m->tensors[3].states[0].extents[0].part = 7;
}
static void b_into_trainer(tt_manifest_t *m) {
    m->tensors[3].states[0].extents[0].part = 2;
}
static void b_past_payload(tt_manifest_t *m) {
    m->tensors[3].states[1].extents[0].part_offset = 76;
}
static void b_outside_range(tt_manifest_t *m) {
    m->tensors[3].states[0].extents[0].part = 0;
}
static void b_shared_bytes(tt_manifest_t *m) {
    /* layer1.bias momentum reads the bytes of layer1.bias params. */
    m->tensors[3].states[1].extents[0].part_offset = m->tensors[3].states[0].extents[0].part_offset;
}

static void manifest_rejects_bad_header(void) {
    expect_invalid(b_version, TT_EVERSION, "version 2");
    expect_invalid(b_id, TT_EINVAL, "checkpoint id");
    expect_invalid(b_job, TT_EINVAL, "job id");
    expect_invalid(b_noparts, TT_EINVAL, "0 parts");
}

static void manifest_rejects_bad_parts(void) {
    expect_invalid(b_dup_part, TT_EINVAL, "listed twice");
    expect_invalid(b_slash, TT_EINVAL, "not a plain part name");
    expect_invalid(b_size, TT_EINVAL, "shard-0.bin: size 228 disagrees");
    expect_invalid(b_kind, TT_EINVAL, "kind 9");
    expect_invalid(b_two_trainers, TT_EINVAL, "second trainer-state part");
    expect_invalid(b_trainer_ranges, TT_EINVAL, "trainer part has no ranges");
    expect_invalid(b_range_overlap, TT_EINVAL, "overlaps");
}

static void manifest_rejects_bad_tensors(void) {
    expect_invalid(b_dtype, TT_EINVAL, "layer0.bias: dtype 99");
    expect_invalid(b_zero_dim, TT_EINVAL, "not a valid shape");
    expect_invalid(b_dims, TT_EINVAL, "9 dims");
    expect_invalid(b_flat_gap, TT_EINVAL, "flat offset 68");
    expect_invalid(b_dup_name, TT_EINVAL, "used twice");
    expect_invalid(b_no_name, TT_EINVAL, "name empty");
    expect_invalid(b_state_kind, TT_EINVAL, "is 7");
    expect_invalid(b_state_mismatch, TT_EINVAL, "must increase and match");
}

static void manifest_rejects_bad_extents(void) {
    expect_invalid(b_missing, TT_EINVAL, "gap");
    expect_invalid(b_overlap, TT_EINVAL, "overlap");
    expect_invalid(b_part_index, TT_EINVAL, "names part 7");
    expect_invalid(b_into_trainer, TT_EINVAL, "not a shard part");
    expect_invalid(b_past_payload, TT_EINVAL, "outside part shard-1.bin");
    expect_invalid(b_outside_range, TT_EINVAL, "outside part shard-0.bin");
    expect_invalid(b_shared_bytes, TT_EINVAL, "belong to two extents");
}

/* Short total: the last extent ends early, so bytes are missing at the end. */
static void b_short_tail(tt_manifest_t *m) {
    tt_mf_state_t *st = &m->tensors[3].states[0];
    st->extents[st->nextents - 1].length -= 4;
}

static void b_no_tensors(tt_manifest_t *m) {
    tt_manifest_free(&(tt_manifest_t){.ntensors = m->ntensors, .tensors = m->tensors});
    m->ntensors = 0;
    m->tensors = NULL;
}

/* Extents that tile their tensors but leave part bytes unreferenced: the
 * last tensor shrinks by one element and its flat range no longer reaches
 * the end of shard-1's second range. */
static void b_uncovered(tt_manifest_t *m) {
    m->tensors[3].shape[0] = 1;
    for (uint32_t s = 0; s < 2; s++)
        m->tensors[3].states[s].extents[0].length = 4;
}

static void manifest_rejects_missing_tail_bytes(void) {
    expect_invalid(b_short_tail, TT_EINVAL, "missing bytes");
    expect_invalid(b_no_tensors, TT_EINVAL, "0 tensors");
    expect_invalid(b_uncovered, TT_EINVAL,
                   "shard-1.bin: 80 payload bytes, tensor extents cover 72");
}

static void manifest_fill_rejects_untiled_ranges(void) {
    tt_manifest_t m;
    make(&m);
    m.parts[1].ranges[1].length = 4; /* bytes [100, 104) in no part */
    char err[256] = "";
    CU_ASSERT_EQUAL(tt_manifest_fill_extents(&m, kinds, 2, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "104"));
    m.parts[1].ranges[1].length = 8;
    CU_ASSERT_EQUAL(tt_manifest_fill_extents(&m, kinds, 1, err, sizeof(err)), TT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "2 planes for 1 state"));
    tt_manifest_free(&m);
}

/* Encodes `m` through the raw protobuf path so decode sees a broken file. */
static int decode_after(void (*mut)(tt_manifest_pb_t *), char *err, size_t errlen) {
    tt_manifest_t m, out;
    make(&m);
    uint8_t *buf = NULL, *raw = NULL;
    size_t len = 0, rawlen = 0;
    CU_ASSERT_EQUAL_FATAL(tt_manifest_encode(&m, &buf, &len, NULL, 0), TT_OK);
    tt_manifest_pb_t *pb = NULL;
    CU_ASSERT_EQUAL_FATAL(tt_wire_manifest_decode(buf, len, &pb, NULL, 0), TT_OK);
    mut(pb);
    CU_ASSERT_EQUAL_FATAL(tt_wire_manifest_encode(pb, &raw, &rawlen), TT_OK);
    int rc = tt_manifest_decode(raw, rawlen, &out, err, errlen);
    CU_ASSERT(rc == TT_OK || (out.parts == NULL && out.tensors == NULL));
    tt_manifest_free(&out);
    tt_wire_manifest_free(&pb);
    tt_manifest_free(&m);
    free(buf);
    free(raw);
    return rc;
}

static void p_dtype(tt_manifest_pb_t *pb) {
    pb->tensors[0]->dtype = 0;
}
static void p_overlap(tt_manifest_pb_t *pb) {
    pb->tensors[0]->states[0]->extents[1]->offset = 8;
}
static void p_dims(tt_manifest_pb_t *pb) {
    pb->tensors[0]->n_shape = 2;
    pb->tensors[0]->shape[1] = 5;
}
static void p_nothing(tt_manifest_pb_t *pb) {
    (void)pb;
}

static void manifest_decode_rejects_broken_files(void) {
    char err[512] = "";
    CU_ASSERT_EQUAL(decode_after(p_nothing, err, sizeof(err)), TT_OK);
    CU_ASSERT_EQUAL(decode_after(p_dtype, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "dtype 0"));
    CU_ASSERT_EQUAL(decode_after(p_overlap, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_EQUAL(decode_after(p_dims, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "shape and dtype say"));
    tt_manifest_t out;
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    CU_ASSERT_EQUAL(tt_manifest_decode(junk, sizeof(junk), &out, err, sizeof(err)), TT_ECORRUPT);
    CU_ASSERT_EQUAL(tt_manifest_decode("", 0, &out, err, sizeof(err)), TT_EVERSION);
    /* Every truncation of a valid manifest is rejected, never crashes. */
    tt_manifest_t m;
    make(&m);
    uint8_t *buf = NULL;
    size_t len = 0, accepted = 0;
    CU_ASSERT_EQUAL_FATAL(tt_manifest_encode(&m, &buf, &len, NULL, 0), TT_OK);
    for (size_t cut = 0; cut < len; cut++) {
        if (tt_manifest_decode(buf, cut, &out, NULL, 0) == TT_OK) {
            accepted++;
            tt_manifest_free(&out);
        }
    }
    CU_ASSERT_EQUAL(accepted, 0);
    free(buf);
    tt_manifest_free(&m);
}

static void manifest_names(void) {
    CU_ASSERT_EQUAL(tt_dtype_size(TT_DTYPE_BF16), 2);
    CU_ASSERT_EQUAL(tt_dtype_size(42), 0);
    CU_ASSERT_STRING_EQUAL(tt_dtype_name(TT_DTYPE_F32), "f32");
    CU_ASSERT_STRING_EQUAL(tt_state_name(TT_STATE_ADAM_V), "adam_v");
    CU_ASSERT_STRING_EQUAL(tt_state_name(99), "?");
    tt_mf_tensor_t t = {.ndim = 2, .shape = {UINT64_MAX / 2, 3}, .dtype = TT_DTYPE_F32};
    CU_ASSERT_EQUAL(tt_mf_tensor_bytes(&t), 0); /* overflow */
}

static const tt_cunit_test_t tests[] = {
    {"manifest_fill_extents_follows_plane_convention",
     manifest_fill_extents_follows_plane_convention},
    {"manifest_round_trip", manifest_round_trip},
    {"manifest_file_store_and_load", manifest_file_store_and_load},
    {"manifest_rejects_bad_header", manifest_rejects_bad_header},
    {"manifest_rejects_bad_parts", manifest_rejects_bad_parts},
    {"manifest_rejects_bad_tensors", manifest_rejects_bad_tensors},
    {"manifest_rejects_bad_extents", manifest_rejects_bad_extents},
    {"manifest_rejects_missing_tail_bytes", manifest_rejects_missing_tail_bytes},
    {"manifest_fill_rejects_untiled_ranges", manifest_fill_rejects_untiled_ranges},
    {"manifest_decode_rejects_broken_files", manifest_decode_rejects_broken_files},
    {"manifest_names", manifest_names},
    {NULL, NULL},
};

TT_CUNIT_MAIN("manifest", tests)
