/* tt_manifest_io: conversion between tt_manifest_t and the protobuf
 * CkptManifest (through tt_wire, the only protobuf-c caller), and the
 * MANIFEST file. Why a conversion instead of handing the generated structs
 * around: loaders and the coordinator get fixed-width counts and
 * NUL-terminated bounded strings, and nothing outside tt_wire depends on
 * protobuf-c's memory layout. Every count is bounded before anything is
 * allocated from it, so a hostile file cannot make us allocate more than a
 * small multiple of its own size. The file ends in an 8-byte trailer
 * ("TTMF" + CRC-32C of the encoding before it, little-endian): a flipped
 * byte inside a size or CRC field still decodes as valid protobuf, and
 * without its own checksum the manifest would blame an intact part. */
#include "tt_crc32c.h"
#include "tt_fsutil.h"
#include "tt_manifest.h"
#include "tt_status.h"
#include "tt_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

/* ---- protobuf -> C ---- */

static int copy_str(char *dst, size_t cap, const char *src) {
    size_t n = src ? strnlen(src, cap) : 0;
    if (n >= cap)
        return TT_ECORRUPT;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
    return TT_OK;
}

static void *alloc_n(size_t n, size_t size) {
    return calloc(n > 0 ? n : 1, size);
}

static int from_part(tt_mf_part_t *d, const Tether__CkptPart *s) {
    if (copy_str(d->file, sizeof(d->file), s->file) != TT_OK || s->n_ranges > TT_CKPT_MAX_RANGES)
        return TT_ECORRUPT;
    d->kind = s->kind;
    d->size = s->size;
    d->crc32c = s->crc32c;
    d->planes = s->planes;
    d->nranges = (uint32_t)s->n_ranges;
    d->ranges = alloc_n(s->n_ranges, sizeof(*d->ranges));
    if (d->ranges == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < s->n_ranges; i++)
        d->ranges[i] = (tt_ckpt_range_t){s->ranges[i]->offset, s->ranges[i]->length};
    return TT_OK;
}

static int from_state(tt_mf_state_t *d, const Tether__CkptTensorState *s) {
    if (s->n_extents > TT_MF_MAX_EXTENTS)
        return TT_ECORRUPT;
    d->state = s->state;
    d->nextents = (uint32_t)s->n_extents;
    d->extents = alloc_n(s->n_extents, sizeof(*d->extents));
    if (d->extents == NULL)
        return TT_ENOMEM;
    for (size_t i = 0; i < s->n_extents; i++) {
        const Tether__CkptExtent *x = s->extents[i];
        d->extents[i] = (tt_mf_extent_t){x->offset, x->length, x->part, x->part_offset};
    }
    return TT_OK;
}

static int from_tensor(tt_mf_tensor_t *d, const Tether__CkptTensor *s) {
    if (copy_str(d->name, sizeof(d->name), s->name) != TT_OK || s->n_shape > TT_MF_MAX_DIMS ||
        s->n_states > TT_STATE_COUNT)
        return TT_ECORRUPT;
    d->ndim = (uint32_t)s->n_shape;
    if (s->n_shape > 0) /* protobuf-c leaves an empty repeated field NULL */
        memcpy(d->shape, s->shape, s->n_shape * sizeof(uint64_t));
    d->dtype = s->dtype;
    d->flat_offset = s->flat_offset;
    d->states = alloc_n(s->n_states, sizeof(*d->states));
    if (d->states == NULL)
        return TT_ENOMEM;
    d->nstates = (uint32_t)s->n_states; /* set after the allocation: free walks it */
    int rc = TT_OK;
    for (size_t i = 0; rc == TT_OK && i < s->n_states; i++)
        rc = from_state(&d->states[i], s->states[i]);
    return rc;
}

static int from_pb(tt_manifest_t *m, const tt_manifest_pb_t *pb) {
    if (copy_str(m->id, sizeof(m->id), pb->checkpoint_id) != TT_OK ||
        copy_str(m->job_id, sizeof(m->job_id), pb->job_id) != TT_OK ||
        pb->n_parts > TT_MF_MAX_PARTS || pb->n_tensors > TT_MF_MAX_TENSORS)
        return TT_ECORRUPT;
    m->version = pb->version;
    m->step = pb->step;
    m->epoch = pb->epoch;
    m->created_unix_ms = pb->created_unix_ms;
    m->duration_ms = pb->duration_ms;
    m->parts = alloc_n(pb->n_parts, sizeof(*m->parts));
    m->tensors = alloc_n(pb->n_tensors, sizeof(*m->tensors));
    if (m->parts == NULL || m->tensors == NULL)
        return TT_ENOMEM;
    m->nparts = (uint32_t)pb->n_parts;
    m->ntensors = (uint32_t)pb->n_tensors;
    int rc = TT_OK;
    for (size_t i = 0; rc == TT_OK && i < pb->n_parts; i++)
        rc = from_part(&m->parts[i], pb->parts[i]);
    for (size_t i = 0; rc == TT_OK && i < pb->n_tensors; i++)
        rc = from_tensor(&m->tensors[i], pb->tensors[i]);
    return rc;
}

int tt_manifest_decode(const void *data, size_t len, tt_manifest_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    tt_manifest_pb_t *pb = NULL;
    int rc = tt_wire_manifest_decode(data, len, &pb, err, errlen);
    if (rc != TT_OK)
        return rc;
    rc = from_pb(out, pb);
    tt_wire_manifest_free(&pb);
    if (rc == TT_ECORRUPT)
        MSET_ERR(err, errlen, "manifest has an over-long string or an absurd count");
    if (rc == TT_OK) {
        rc = tt_manifest_validate(out, err, errlen);
        if (rc == TT_EINVAL)
            rc = TT_ECORRUPT;
    }
    if (rc != TT_OK)
        tt_manifest_free(out);
    return rc;
}

/* ---- C -> protobuf: every pointer borrows from `m` or from `pool` ---- */

typedef struct pb_pool {
    Tether__CkptPart *parts, **pparts;
    Tether__CkptRange *ranges, **pranges;
    Tether__CkptTensor *tensors, **ptensors;
    Tether__CkptTensorState *states, **pstates;
    Tether__CkptExtent *extents, **pextents;
} pb_pool_t;

static void pool_free(pb_pool_t *p) {
    free(p->parts);
    free(p->pparts);
    free(p->ranges);
    free(p->pranges);
    free(p->tensors);
    free(p->ptensors);
    free(p->states);
    free(p->pstates);
    free(p->extents);
    free(p->pextents);
}

static int pool_alloc(pb_pool_t *p, const tt_manifest_t *m) {
    size_t nr = 0, ns = 0, nx = 0;
    for (uint32_t i = 0; i < m->nparts; i++)
        nr += m->parts[i].nranges;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        ns += m->tensors[i].nstates;
        for (uint32_t s = 0; s < m->tensors[i].nstates; s++)
            nx += m->tensors[i].states[s].nextents;
    }
    p->parts = alloc_n(m->nparts, sizeof(*p->parts));
    p->pparts = alloc_n(m->nparts, sizeof(*p->pparts));
    p->ranges = alloc_n(nr, sizeof(*p->ranges));
    p->pranges = alloc_n(nr, sizeof(*p->pranges));
    p->tensors = alloc_n(m->ntensors, sizeof(*p->tensors));
    p->ptensors = alloc_n(m->ntensors, sizeof(*p->ptensors));
    p->states = alloc_n(ns, sizeof(*p->states));
    p->pstates = alloc_n(ns, sizeof(*p->pstates));
    p->extents = alloc_n(nx, sizeof(*p->extents));
    p->pextents = alloc_n(nx, sizeof(*p->pextents));
    return p->parts && p->pparts && p->ranges && p->pranges && p->tensors && p->ptensors &&
                   p->states && p->pstates && p->extents && p->pextents
               ? TT_OK
               : TT_ENOMEM;
}

static void to_parts(pb_pool_t *p, const tt_manifest_t *m) {
    size_t r = 0;
    for (uint32_t i = 0; i < m->nparts; i++) {
        const tt_mf_part_t *s = &m->parts[i];
        Tether__CkptPart *d = &p->parts[i];
        tether__ckpt_part__init(d);
        d->file = (char *)s->file;
        d->kind = s->kind;
        d->size = s->size;
        d->crc32c = s->crc32c;
        d->planes = s->planes;
        d->n_ranges = s->nranges;
        d->ranges = &p->pranges[r];
        for (uint32_t k = 0; k < s->nranges; k++, r++) {
            tether__ckpt_range__init(&p->ranges[r]);
            p->ranges[r].offset = s->ranges[k].offset;
            p->ranges[r].length = s->ranges[k].length;
            p->pranges[r] = &p->ranges[r];
        }
        p->pparts[i] = d;
    }
}

static void to_state(pb_pool_t *p, size_t si, size_t *x, const tt_mf_state_t *s) {
    Tether__CkptTensorState *d = &p->states[si];
    tether__ckpt_tensor_state__init(d);
    d->state = s->state;
    d->n_extents = s->nextents;
    d->extents = &p->pextents[*x];
    for (uint32_t e = 0; e < s->nextents; e++, (*x)++) {
        Tether__CkptExtent *xe = &p->extents[*x];
        tether__ckpt_extent__init(xe);
        xe->offset = s->extents[e].offset;
        xe->length = s->extents[e].length;
        xe->part = s->extents[e].part;
        xe->part_offset = s->extents[e].part_offset;
        p->pextents[*x] = xe;
    }
    p->pstates[si] = d;
}

static void to_tensors(pb_pool_t *p, const tt_manifest_t *m) {
    size_t si = 0, x = 0;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const tt_mf_tensor_t *s = &m->tensors[i];
        Tether__CkptTensor *d = &p->tensors[i];
        tether__ckpt_tensor__init(d);
        d->name = (char *)s->name;
        d->n_shape = s->ndim;
        d->shape = (uint64_t *)s->shape;
        d->dtype = s->dtype;
        d->flat_offset = s->flat_offset;
        d->n_states = s->nstates;
        d->states = &p->pstates[si];
        for (uint32_t k = 0; k < s->nstates; k++, si++)
            to_state(p, si, &x, &s->states[k]);
        p->ptensors[i] = d;
    }
}

int tt_manifest_encode(const tt_manifest_t *m, uint8_t **out, size_t *outlen, char *err,
                       size_t errlen) {
    *out = NULL;
    *outlen = 0;
    int rc = tt_manifest_validate(m, err, errlen);
    if (rc != TT_OK)
        return rc;
    pb_pool_t pool = {0};
    tt_manifest_pb_t pb;
    TT_CHECK_GOTO(pool_alloc(&pool, m), rc, out);
    to_parts(&pool, m);
    to_tensors(&pool, m);
    tether__ckpt_manifest__init(&pb);
    pb.version = m->version;
    pb.checkpoint_id = (char *)m->id;
    pb.job_id = (char *)m->job_id;
    pb.step = m->step;
    pb.epoch = m->epoch;
    pb.created_unix_ms = m->created_unix_ms;
    pb.duration_ms = m->duration_ms;
    pb.n_parts = m->nparts;
    pb.parts = pool.pparts;
    pb.n_tensors = m->ntensors;
    pb.tensors = pool.ptensors;
    rc = tt_wire_manifest_encode(&pb, out, outlen);
out:
    pool_free(&pool);
    return rc;
}

/* ---- the MANIFEST file ---- */

#define MF_TRAILER_MAGIC "TTMF"
#define MF_TRAILER_BYTES 8u

/* Checks and strips the trailer: the protobuf bytes are buf[0..*body). */
static int check_trailer(const uint8_t *buf, size_t len, size_t *body, char *err, size_t errlen) {
    if (len < MF_TRAILER_BYTES || memcmp(buf + len - MF_TRAILER_BYTES, MF_TRAILER_MAGIC, 4) != 0) {
        MSET_ERR(err, errlen, "no checksum trailer (truncated, or not a MANIFEST)");
        return TT_ECORRUPT;
    }
    const uint8_t *t = buf + len - 4;
    uint32_t want =
        (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    uint32_t got = tt_crc32c(0, buf, len - MF_TRAILER_BYTES);
    if (got != want) {
        MSET_ERR(err, errlen,
                 "checksum mismatch (crc32c 0x%08x, trailer says 0x%08x): the manifest itself "
                 "is damaged",
                 got, want);
        return TT_ECORRUPT;
    }
    *body = len - MF_TRAILER_BYTES;
    return TT_OK;
}

/* Appends the trailer to a malloc'd encoding (realloc). */
static int add_trailer(uint8_t **buf, size_t *len) {
    uint8_t *b = realloc(*buf, *len + MF_TRAILER_BYTES);
    if (b == NULL)
        return TT_ENOMEM;
    uint32_t crc = tt_crc32c(0, b, *len);
    memcpy(b + *len, MF_TRAILER_MAGIC, 4);
    for (int i = 0; i < 4; i++)
        b[*len + 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    *buf = b;
    *len += MF_TRAILER_BYTES;
    return TT_OK;
}

int tt_manifest_load(const char *dir, tt_manifest_t *out, char *err, size_t errlen) {
    char path[4200];
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof(*out));
    snprintf(path, sizeof(path), "%s/%s", dir, TT_MANIFEST_FILE);
    int rc = tt_fs_read_all(path, TT_WIRE_MAX_MANIFEST, &buf, &len, err, errlen);
    if (rc != TT_OK)
        return rc;
    char why[400] = "";
    size_t body = 0;
    rc = check_trailer(buf, len, &body, why, sizeof(why));
    if (rc == TT_OK)
        rc = tt_manifest_decode(buf, body, out, why, sizeof(why));
    if (rc != TT_OK)
        MSET_ERR(err, errlen, "%s: %s", path, why);
    free(buf);
    return rc;
}

int tt_manifest_store(const char *dir, const tt_manifest_t *m, char *err, size_t errlen) {
    char path[4200];
    uint8_t *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, TT_MANIFEST_FILE);
    int rc = tt_manifest_encode(m, &buf, &len, err, errlen);
    if (rc == TT_OK)
        rc = add_trailer(&buf, &len);
    if (rc == TT_OK)
        rc = tt_fs_write_atomic(path, buf, len, err, errlen);
    free(buf);
    return rc;
}
