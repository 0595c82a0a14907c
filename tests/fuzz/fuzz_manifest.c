/* fuzz_manifest: fuzzes tt_manifest_decode(), the loader of a checkpoint's
 * MANIFEST, read from disk at resume and by `tetherctl checkpoint verify`,
 * where a corrupt or hostile file must be rejected with a sentence, never
 * crash or allocate without bound. Whatever it accepts has passed every
 * validation rule, so it must encode and decode again to the same bytes;
 * a failure there aborts on purpose. Seeds come from tt_manifest_encode.
 * fuzz-requires: common/tt_manifest.c common/tt_manifest_io.c */
#include "tt_fuzz.h"
#include "tt_manifest.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    tt_manifest_t m;
    if (tt_manifest_decode(data, size, &m, err, sizeof(err)) != TT_OK) {
        if (m.parts != NULL || m.tensors != NULL)
            abort(); /* a rejected file must leave nothing behind */
        return 0;
    }
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    tt_manifest_t again;
    if (tt_manifest_encode(&m, &a, &alen, err, sizeof(err)) != TT_OK ||
        tt_manifest_decode(a, alen, &again, err, sizeof(err)) != TT_OK ||
        tt_manifest_encode(&again, &b, &blen, err, sizeof(err)) != TT_OK || alen != blen ||
        memcmp(a, b, alen) != 0)
        abort();
    tt_manifest_free(&again);
    tt_manifest_free(&m);
    free(a);
    free(b);
    return 0;
}

/* `nshards` shard parts holding 48-byte chunks round robin, params (+
 * momentum when `planes` is 2), and a trainer part. */
static int build(tt_manifest_t *m, uint32_t nshards, uint32_t planes) {
    static const uint32_t kinds[] = {TT_STATE_PARAMS, TT_STATE_MOMENTUM};
    static const uint64_t dims[][2] = {{8, 3}, {8, 0}, {2, 8}, {2, 0}};
    const uint64_t total = 4 * (24 + 8 + 16 + 2), chunk = 48;
    memset(m, 0, sizeof(*m));
    *m = (tt_manifest_t){.version = TT_MANIFEST_VERSION,
                         .step = 77,
                         .epoch = 3,
                         .created_unix_ms = 1700000000000ull,
                         .duration_ms = 12};
    snprintf(m->id, sizeof(m->id), "step-77");
    snprintf(m->job_id, sizeof(m->job_id), "fuzz");
    m->parts = calloc(nshards + 1, sizeof(*m->parts));
    m->tensors = calloc(4, sizeof(*m->tensors));
    if (m->parts == NULL || m->tensors == NULL)
        return TT_ENOMEM;
    m->nparts = nshards + 1;
    m->ntensors = 4;
    for (uint32_t s = 0; s < nshards; s++) {
        tt_mf_part_t *p = &m->parts[s];
        snprintf(p->file, sizeof(p->file), "shard-%u.bin", s);
        p->kind = TT_CKPT_KIND_SHARD;
        p->planes = planes;
        p->ranges = calloc(total / chunk + 1, sizeof(*p->ranges));
        if (p->ranges == NULL)
            return TT_ENOMEM;
        uint64_t sum = 0;
        for (uint64_t off = s * chunk; off < total; off += nshards * chunk) {
            uint64_t len = total - off < chunk ? total - off : chunk;
            p->ranges[p->nranges++] = (tt_ckpt_range_t){off, len};
            sum += len;
        }
        p->size = TT_CKPT_HEADER_BYTES + p->nranges * TT_CKPT_RANGE_BYTES + planes * sum + 8;
        p->crc32c = 0xabc00000u + s;
    }
    snprintf(m->parts[nshards].file, TT_CKPT_NAME_MAX, "trainer.bin");
    m->parts[nshards].kind = TT_CKPT_KIND_TRAINER;
    m->parts[nshards].size = TT_CKPT_HEADER_BYTES + 8 + 64;
    uint64_t flat = 0;
    for (uint32_t i = 0; i < 4; i++) {
        tt_mf_tensor_t *t = &m->tensors[i];
        snprintf(t->name, sizeof(t->name), "layer%u.%s", i / 2, i % 2 ? "bias" : "weight");
        t->ndim = dims[i][1] ? 2 : 1;
        t->shape[0] = dims[i][0];
        t->shape[1] = dims[i][1];
        t->dtype = TT_DTYPE_F32;
        t->flat_offset = flat;
        flat += tt_mf_tensor_bytes(t);
    }
    return tt_manifest_fill_extents(m, kinds, planes, NULL, 0);
}

static int emit_one(tt_fuzz_emit_fn emit, void *ctx, const char *name, uint32_t nshards,
                    uint32_t planes) {
    tt_manifest_t m;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = build(&m, nshards, planes);
    if (rc == TT_OK)
        rc = tt_manifest_encode(&m, &buf, &len, NULL, 0);
    if (rc == TT_OK)
        rc = emit(ctx, name, buf, len);
    else
        rc = rc == TT_ENOMEM ? rc : TT_EINTERNAL;
    free(buf);
    tt_manifest_free(&m);
    return rc;
}

int tt_fuzz_seeds(tt_fuzz_emit_fn emit, void *ctx) {
    int rc = emit_one(emit, ctx, "one-shard-params", 1, 1);
    if (rc == TT_OK)
        rc = emit_one(emit, ctx, "two-shards-momentum", 2, 2);
    if (rc == TT_OK)
        rc = emit_one(emit, ctx, "three-shards-momentum", 3, 2);
    return rc;
}
