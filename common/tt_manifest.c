/* tt_manifest: the in-memory manifest and its validation. Encoding and
 * file I/O live in tt_manifest_io.c. Why so strict: the manifest is the
 * only thing a loader trusts about a checkpoint's layout, and a rule broken
 * here (an extent past the end of a part, a tensor byte covered twice or
 * not at all) would otherwise surface as silently wrong parameters after a
 * resume, far from its cause. */
#include "tt_manifest.h"
#include "tt_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSET_ERR(err, errlen, ...)                                                                 \
    do {                                                                                           \
        if ((err) != NULL && (errlen) > 0)                                                         \
            snprintf((err), (errlen), __VA_ARGS__);                                                \
    } while (0)

typedef unsigned long long ull;

size_t tt_dtype_size(uint32_t dtype) {
    static const size_t sizes[] = {0, 4, 8, 2, 2, 4, 8, 1};
    return dtype < sizeof(sizes) / sizeof(sizes[0]) ? sizes[dtype] : 0;
}

const char *tt_dtype_name(uint32_t dtype) {
    static const char *const names[] = {"?", "f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
    return dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

const char *tt_state_name(uint32_t state) {
    static const char *const names[] = {"params", "momentum", "adam_m", "adam_v"};
    return state < TT_STATE_COUNT ? names[state] : "?";
}

uint64_t tt_mf_tensor_bytes(const tt_mf_tensor_t *t) {
    uint64_t n = tt_dtype_size(t->dtype);
    if (n == 0 || t->ndim > TT_MF_MAX_DIMS)
        return 0;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0 || n > UINT64_MAX / t->shape[d])
            return 0;
        n *= t->shape[d];
    }
    return n;
}

static int id_ok(const char *s) {
    size_t n = strnlen(s, TT_MF_ID_MAX);
    return n > 0 && n < TT_MF_ID_MAX && tt_ckpt_name_ok(s);
}

static int check_header(const tt_manifest_t *m, char *err, size_t errlen) {
    if (m->version != TT_MANIFEST_VERSION) {
        MSET_ERR(err, errlen, "manifest version %u, this build reads %u", m->version,
                 TT_MANIFEST_VERSION);
        return TT_EVERSION;
    }
    if (!id_ok(m->id) || !id_ok(m->job_id)) {
        MSET_ERR(err, errlen,
                 "checkpoint id and job id must be 1..%u characters of "
                 "[A-Za-z0-9._-], not starting with '.'",
                 TT_MF_ID_MAX - 1);
        return TT_EINVAL;
    }
    if (m->nparts == 0 || m->nparts > TT_MF_MAX_PARTS || m->ntensors == 0 ||
        m->ntensors > TT_MF_MAX_TENSORS || (m->nparts > 0 && m->parts == NULL) ||
        (m->ntensors > 0 && m->tensors == NULL)) {
        MSET_ERR(err, errlen, "manifest lists %u parts (1..%u) and %u tensors (1..%u)", m->nparts,
                 TT_MF_MAX_PARTS, m->ntensors, TT_MF_MAX_TENSORS);
        return TT_EINVAL;
    }
    return TT_OK;
}

/* Payload bytes a part of this size holds, or UINT64_MAX when the size
 * cannot hold the header, range table and trailer. */
static uint64_t part_payload(const tt_mf_part_t *p) {
    uint64_t pre =
        TT_CKPT_HEADER_BYTES + (uint64_t)p->nranges * TT_CKPT_RANGE_BYTES + TT_CKPT_TRAILER_BYTES;
    return p->size < pre ? UINT64_MAX : p->size - pre;
}

static int check_part(const tt_manifest_t *m, uint32_t i, int *trainers, char *err, size_t errlen) {
    const tt_mf_part_t *p = &m->parts[i];
    char why[256] = "";
    if (!tt_ckpt_name_ok(p->file) || strcmp(p->file, TT_MANIFEST_FILE) == 0) {
        MSET_ERR(err, errlen, "part %u: file name '%.64s' is not a plain part name", i, p->file);
        return TT_EINVAL;
    }
    for (uint32_t k = 0; k < i; k++) {
        if (strcmp(m->parts[k].file, p->file) == 0) {
            MSET_ERR(err, errlen, "part %s is listed twice (entries %u and %u)", p->file, k, i);
            return TT_EINVAL;
        }
    }
    uint64_t payload = part_payload(p);
    tt_ckpt_part_opts_t o = {".", p->file, p->kind, p->ranges, p->nranges, p->planes, payload, 0};
    if (payload == UINT64_MAX || (p->nranges > 0 && p->ranges == NULL) ||
        tt_ckpt_part_opts_check(&o, why, sizeof(why)) != TT_OK) {
        MSET_ERR(err, errlen, "part %s: size %llu disagrees with its layout%s%s", p->file,
                 (ull)p->size, why[0] ? ": " : "", why);
        return TT_EINVAL;
    }
    if (p->kind == TT_CKPT_KIND_TRAINER && ++*trainers > 1) {
        MSET_ERR(err, errlen, "part %s is a second trainer-state part", p->file);
        return TT_EINVAL;
    }
    return TT_OK;
}

/* A tensor's shape, dtype, flat position and state kinds; `flat` is where
 * the previous tensor ended. */
static int check_tensor_head(const tt_manifest_t *m, uint32_t i, uint64_t flat, char *err,
                             size_t errlen) {
    const tt_mf_tensor_t *t = &m->tensors[i];
    size_t nlen = strnlen(t->name, TT_MF_NAME_MAX);
    if (nlen == 0 || nlen >= TT_MF_NAME_MAX) {
        MSET_ERR(err, errlen, "tensor %u: name empty or longer than %u bytes", i,
                 TT_MF_NAME_MAX - 1);
        return TT_EINVAL;
    }
    if (tt_dtype_size(t->dtype) == 0 || t->ndim > TT_MF_MAX_DIMS || tt_mf_tensor_bytes(t) == 0) {
        MSET_ERR(err, errlen, "tensor %s: dtype %u (%s) with %u dims is not a valid shape", t->name,
                 t->dtype, tt_dtype_name(t->dtype), t->ndim);
        return TT_EINVAL;
    }
    if (t->flat_offset + tt_mf_tensor_bytes(t) < t->flat_offset) {
        MSET_ERR(err, errlen, "tensor %s: flat range wraps around", t->name);
        return TT_EINVAL;
    }
    if (t->flat_offset != flat) {
        MSET_ERR(err, errlen, "tensor %s: flat offset %llu, the previous tensor ends at %llu",
                 t->name, (ull)t->flat_offset, (ull)flat);
        return TT_EINVAL;
    }
    const tt_mf_tensor_t *t0 = &m->tensors[0];
    if (t->nstates == 0 || t->nstates > TT_STATE_COUNT || t->states == NULL ||
        t->nstates != t0->nstates) {
        MSET_ERR(err, errlen, "tensor %s: %u state kinds, tensor %s has %u", t->name, t->nstates,
                 t0->name, t0->nstates);
        return TT_EINVAL;
    }
    for (uint32_t s = 0; s < t->nstates; s++) {
        if (t->states[s].state >= TT_STATE_COUNT || t->states[s].state != t0->states[s].state ||
            (s > 0 && t->states[s].state <= t->states[s - 1].state)) {
            MSET_ERR(err, errlen,
                     "tensor %s: state %u is %u (%s); kinds must increase and match "
                     "tensor %s",
                     t->name, s, t->states[s].state, tt_state_name(t->states[s].state), t0->name);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

/* The extent's flat bytes must lie inside the part's declared ranges;
 * it may cross from one range into the next only where they touch. */
static int in_part_range(const tt_mf_part_t *p, uint64_t flat, uint64_t len) {
    uint32_t r = 0;
    while (r < p->nranges && p->ranges[r].offset + p->ranges[r].length <= flat)
        r++;
    if (r == p->nranges || p->ranges[r].offset > flat)
        return 0;
    uint64_t end = flat + len;
    for (; r < p->nranges; r++) {
        uint64_t rend = p->ranges[r].offset + p->ranges[r].length;
        if (end <= rend)
            return 1;
        if (r + 1 < p->nranges && p->ranges[r + 1].offset != rend)
            return 0;
    }
    return 0;
}

static int check_extent(const tt_manifest_t *m, const tt_mf_tensor_t *t, const tt_mf_state_t *st,
                        uint32_t e, uint64_t at, char *err, size_t errlen) {
    const tt_mf_extent_t *x = &st->extents[e];
    const char *sn = tt_state_name(st->state);
    if (x->offset != at || x->length == 0 || x->offset + x->length < x->offset) {
        MSET_ERR(err, errlen,
                 "tensor %s %s: extent %u covers [%llu, +%llu) but bytes from %llu "
                 "are next (%s)",
                 t->name, sn, e, (ull)x->offset, (ull)x->length, (ull)at,
                 x->offset < at ? "overlap" : "gap");
        return TT_EINVAL;
    }
    if (x->part >= m->nparts || m->parts[x->part].kind != TT_CKPT_KIND_SHARD) {
        MSET_ERR(err, errlen, "tensor %s %s: extent %u names part %u, not a shard part", t->name,
                 sn, e, x->part);
        return TT_EINVAL;
    }
    const tt_mf_part_t *p = &m->parts[x->part];
    uint64_t payload = part_payload(p);
    if (x->part_offset > payload || x->length > payload - x->part_offset ||
        !in_part_range(p, t->flat_offset + x->offset, x->length)) {
        MSET_ERR(err, errlen,
                 "tensor %s %s: extent %u ([%llu, +%llu) at part offset %llu) lies "
                 "outside part %s's payload (%llu bytes) or declared ranges",
                 t->name, sn, e, (ull)x->offset, (ull)x->length, (ull)x->part_offset, p->file,
                 (ull)payload);
        return TT_EINVAL;
    }
    return TT_OK;
}

static int check_states(const tt_manifest_t *m, const tt_mf_tensor_t *t, uint64_t *nall, char *err,
                        size_t errlen) {
    uint64_t bytes = tt_mf_tensor_bytes(t);
    for (uint32_t s = 0; s < t->nstates; s++) {
        const tt_mf_state_t *st = &t->states[s];
        if (st->nextents == 0 || st->nextents > TT_MF_MAX_EXTENTS || st->extents == NULL) {
            MSET_ERR(err, errlen, "tensor %s %s: %u extents (1..%u)", t->name,
                     tt_state_name(st->state), st->nextents, TT_MF_MAX_EXTENTS);
            return TT_EINVAL;
        }
        uint64_t at = 0;
        for (uint32_t e = 0; e < st->nextents; e++) {
            int rc = check_extent(m, t, st, e, at, err, errlen);
            if (rc != TT_OK)
                return rc;
            at += st->extents[e].length;
        }
        if (at != bytes) {
            MSET_ERR(err, errlen,
                     "tensor %s %s: extents cover %llu bytes, shape and dtype say "
                     "%llu (%s)",
                     t->name, tt_state_name(st->state), (ull)at, (ull)bytes,
                     at < bytes ? "missing bytes" : "too many bytes");
            return TT_EINVAL;
        }
        *nall += st->nextents;
    }
    return TT_OK;
}

typedef struct span {
    uint32_t part;
    uint64_t off, len;
} span_t;

static int cmp_span(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const tt_mf_tensor_t *const *)a)->name,
                  (*(const tt_mf_tensor_t *const *)b)->name);
}

/* With no overlap, the covered bytes of a part are the sum of its spans;
 * every shard payload byte must belong to some tensor. This is also what
 * rejects a manifest cut short inside its tensor list. */
static int check_part_coverage(const tt_manifest_t *m, const span_t *sp, size_t n, char *err,
                               size_t errlen) {
    size_t k = 0;
    for (uint32_t i = 0; i < m->nparts; i++) {
        uint64_t covered = 0;
        for (; k < n && sp[k].part == i; k++)
            covered += sp[k].len;
        if (m->parts[i].kind == TT_CKPT_KIND_SHARD && covered != part_payload(&m->parts[i])) {
            MSET_ERR(err, errlen, "part %s: %llu payload bytes, tensor extents cover %llu",
                     m->parts[i].file, (ull)part_payload(&m->parts[i]), (ull)covered);
            return TT_EINVAL;
        }
    }
    return TT_OK;
}

/* No two extents of any tensor or state may read the same part bytes. */
static int check_part_overlap(const tt_manifest_t *m, uint64_t nall, char *err, size_t errlen) {
    span_t *sp = malloc((size_t)(nall + 1) * sizeof(*sp));
    if (sp == NULL)
        return TT_ENOMEM;
    size_t n = 0;
    for (uint32_t i = 0; i < m->ntensors; i++)
        for (uint32_t s = 0; s < m->tensors[i].nstates; s++)
            for (uint32_t e = 0; e < m->tensors[i].states[s].nextents; e++) {
                const tt_mf_extent_t *x = &m->tensors[i].states[s].extents[e];
                sp[n++] = (span_t){x->part, x->part_offset, x->length};
            }
    qsort(sp, n, sizeof(*sp), cmp_span);
    int rc = TT_OK;
    for (size_t k = 1; k < n && rc == TT_OK; k++) {
        if (sp[k].part == sp[k - 1].part && sp[k].off < sp[k - 1].off + sp[k - 1].len) {
            MSET_ERR(err, errlen, "part %s: payload bytes [%llu, %llu) belong to two extents",
                     m->parts[sp[k].part].file, (ull)sp[k].off,
                     (ull)(sp[k - 1].off + sp[k - 1].len));
            rc = TT_EINVAL;
        }
    }
    if (rc == TT_OK)
        rc = check_part_coverage(m, sp, n, err, errlen);
    free(sp);
    return rc;
}

static int check_unique_names(const tt_manifest_t *m, char *err, size_t errlen) {
    const tt_mf_tensor_t **v = malloc(((size_t)m->ntensors + 1) * sizeof(*v));
    if (v == NULL)
        return TT_ENOMEM;
    for (uint32_t i = 0; i < m->ntensors; i++)
        v[i] = &m->tensors[i];
    qsort(v, m->ntensors, sizeof(*v), cmp_name);
    int rc = TT_OK;
    for (uint32_t i = 1; i < m->ntensors && rc == TT_OK; i++) {
        if (strcmp(v[i]->name, v[i - 1]->name) == 0) {
            MSET_ERR(err, errlen, "tensor name %s is used twice", v[i]->name);
            rc = TT_EINVAL;
        }
    }
    free(v);
    return rc;
}

int tt_manifest_validate(const tt_manifest_t *m, char *err, size_t errlen) {
    int rc = check_header(m, err, errlen), trainers = 0;
    for (uint32_t i = 0; rc == TT_OK && i < m->nparts; i++)
        rc = check_part(m, i, &trainers, err, errlen);
    uint64_t flat = 0, nall = 0;
    for (uint32_t i = 0; rc == TT_OK && i < m->ntensors; i++) {
        rc = check_tensor_head(m, i, flat, err, errlen);
        if (rc == TT_OK)
            rc = check_states(m, &m->tensors[i], &nall, err, errlen);
        if (rc == TT_OK && nall > TT_MF_MAX_ALL_EXTENTS) {
            MSET_ERR(err, errlen, "more than %u extents in all", TT_MF_MAX_ALL_EXTENTS);
            rc = TT_EINVAL;
        }
        flat += tt_mf_tensor_bytes(&m->tensors[i]);
    }
    if (rc == TT_OK)
        rc = check_unique_names(m, err, errlen);
    if (rc == TT_OK)
        rc = check_part_overlap(m, nall, err, errlen);
    return rc;
}

uint64_t tt_manifest_flat_bytes(const tt_manifest_t *m) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < m->ntensors; i++)
        n += tt_mf_tensor_bytes(&m->tensors[i]);
    return n;
}

int tt_manifest_find_part(const tt_manifest_t *m, const char *file) {
    for (uint32_t i = 0; i < m->nparts; i++) {
        if (strcmp(m->parts[i].file, file) == 0)
            return (int)i;
    }
    return -1;
}

static const tt_mf_state_t *find_state(const tt_mf_tensor_t *t, uint32_t state) {
    for (uint32_t s = 0; s < t->nstates; s++) {
        if (t->states[s].state == state)
            return &t->states[s];
    }
    return NULL;
}

int tt_manifest_layout(const tt_manifest_t *m, uint32_t state, tt_reshard_seg_t **segs,
                       size_t *nsegs) {
    *segs = NULL;
    *nsegs = 0;
    size_t n = 0;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const tt_mf_state_t *st = find_state(&m->tensors[i], state);
        if (st == NULL)
            return TT_ENOTFOUND;
        n += st->nextents;
    }
    if (n == 0)
        return TT_ENOTFOUND;
    tt_reshard_seg_t *v = malloc(n * sizeof(*v));
    if (v == NULL)
        return TT_ENOMEM;
    size_t k = 0;
    for (uint32_t i = 0; i < m->ntensors; i++) {
        const tt_mf_state_t *st = find_state(&m->tensors[i], state);
        for (uint32_t e = 0; st != NULL && e < st->nextents; e++) {
            const tt_mf_extent_t *x = &st->extents[e];
            v[k++] = (tt_reshard_seg_t){m->tensors[i].flat_offset + x->offset, x->length, x->part,
                                        x->part_offset};
        }
    }
    *segs = v;
    *nsegs = n;
    return TT_OK;
}

void tt_manifest_free(tt_manifest_t *m) {
    if (m == NULL)
        return;
    for (uint32_t i = 0; m->parts != NULL && i < m->nparts; i++)
        free(m->parts[i].ranges);
    for (uint32_t i = 0; m->tensors != NULL && i < m->ntensors; i++) {
        for (uint32_t s = 0; m->tensors[i].states != NULL && s < m->tensors[i].nstates; s++)
            free(m->tensors[i].states[s].extents);
        free(m->tensors[i].states);
    }
    free(m->parts);
    free(m->tensors);
    memset(m, 0, sizeof(*m));
}

static int cmp_seg(const void *a, const void *b) {
    const tt_reshard_seg_t *x = a, *y = b;
    return x->logical_offset < y->logical_offset ? -1 : x->logical_offset > y->logical_offset;
}

/* Plane-0 layout of all shard parts; *plane_bytes[i] is part i's bytes per
 * plane. */
static int shard_segments(const tt_manifest_t *m, uint32_t nstates, tt_reshard_seg_t **segs,
                          size_t *nsegs, uint64_t *plane_bytes, char *err, size_t errlen) {
    size_t n = 0, k = 0;
    for (uint32_t i = 0; i < m->nparts; i++)
        n += m->parts[i].kind == TT_CKPT_KIND_SHARD ? m->parts[i].nranges : 0;
    tt_reshard_seg_t *v = malloc((n + 1) * sizeof(*v));
    if (v == NULL)
        return TT_ENOMEM;
    for (uint32_t i = 0; i < m->nparts; i++) {
        const tt_mf_part_t *p = &m->parts[i];
        plane_bytes[i] = 0;
        if (p->kind != TT_CKPT_KIND_SHARD)
            continue;
        if (p->planes != nstates) {
            MSET_ERR(err, errlen, "part %s has %u planes for %u state kinds", p->file, p->planes,
                     nstates);
            free(v);
            return TT_EINVAL;
        }
        for (uint32_t r = 0; r < p->nranges; r++) {
            v[k++] =
                (tt_reshard_seg_t){p->ranges[r].offset, p->ranges[r].length, i, plane_bytes[i]};
            plane_bytes[i] += p->ranges[r].length;
        }
    }
    qsort(v, n, sizeof(*v), cmp_seg);
    *segs = v;
    *nsegs = n;
    return TT_OK;
}

static int fill_state(tt_mf_state_t *st, uint32_t kind, uint32_t plane, const tt_reshard_read_t *rd,
                      size_t nrd, const uint64_t *plane_bytes) {
    st->state = kind;
    st->extents = calloc(nrd, sizeof(*st->extents));
    if (st->extents == NULL)
        return TT_ENOMEM;
    st->nextents = (uint32_t)nrd;
    for (size_t i = 0; i < nrd; i++)
        st->extents[i] =
            (tt_mf_extent_t){rd[i].dest_offset, rd[i].length, rd[i].part,
                             (uint64_t)plane * plane_bytes[rd[i].part] + rd[i].part_offset};
    return TT_OK;
}

static int fill_tensor(tt_mf_tensor_t *t, const tt_reshard_seg_t *segs, size_t nsegs,
                       const uint32_t *states, uint32_t nstates, const uint64_t *plane_bytes,
                       char *err, size_t errlen) {
    tt_reshard_read_t *rd = NULL;
    size_t nrd = 0;
    for (uint32_t s = 0; t->states != NULL && s < t->nstates; s++)
        free(t->states[s].extents);
    free(t->states);
    t->nstates = 0;
    int rc =
        tt_reshard_plan(segs, nsegs, t->flat_offset, tt_mf_tensor_bytes(t), &rd, &nrd, err, errlen);
    if (rc != TT_OK)
        return rc == TT_ENOMEM ? rc : TT_EINVAL;
    t->states = calloc(nstates, sizeof(*t->states));
    rc = t->states == NULL ? TT_ENOMEM : TT_OK;
    for (uint32_t k = 0; rc == TT_OK && k < nstates; k++) {
        t->nstates = k + 1;
        rc = fill_state(&t->states[k], states[k], k, rd, nrd, plane_bytes);
    }
    free(rd);
    return rc;
}

int tt_manifest_fill_extents(tt_manifest_t *m, const uint32_t *states, uint32_t nstates, char *err,
                             size_t errlen) {
    if (nstates == 0 || nstates > TT_STATE_COUNT) {
        MSET_ERR(err, errlen, "%u state kinds (1..%u)", nstates, (unsigned)TT_STATE_COUNT);
        return TT_EINVAL;
    }
    tt_reshard_seg_t *segs = NULL;
    size_t nsegs = 0;
    uint64_t *plane_bytes = calloc((size_t)m->nparts + 1, sizeof(*plane_bytes));
    if (plane_bytes == NULL)
        return TT_ENOMEM;
    int rc = shard_segments(m, nstates, &segs, &nsegs, plane_bytes, err, errlen);
    if (rc == TT_OK)
        rc = tt_reshard_check(segs, nsegs, tt_manifest_flat_bytes(m), err, errlen);
    for (uint32_t i = 0; rc == TT_OK && i < m->ntensors; i++)
        rc = fill_tensor(&m->tensors[i], segs, nsegs, states, nstates, plane_bytes, err, errlen);
    free(segs);
    free(plane_bytes);
    return rc;
}
