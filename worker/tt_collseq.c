/* tt_collseq: sequence numbers, fingerprints, the ring header and the
 * desync sentence (see the header). The header is written field by field in
 * little-endian order rather than as a packed struct so that it means the
 * same on every compiler and host; decode rejects anything it does not
 * fully understand, because a misread header would be a silent corruption.
 * Layout (64 bytes): magic u32 | version u8 | kind u8 | op u8 | dtype u8 |
 * redop u8 | flags u8 | 2 pad | src i32 | aux i32 | status i32 | root i32 |
 * unit u32 | generation u64 | seq u64 | count u64 | job u64. */
#include "tt_collseq.h"

#include "tt_status.h"

#include <stdio.h>
#include <string.h>

uint64_t tt_collseq_next(uint64_t *counter) {
    return ++*counter;
}

size_t tt_collseq_dtype_size(int dtype) {
    switch (dtype) {
    case TT_DT_FLOAT32:
        return 4;
    case TT_DT_FLOAT64:
    case TT_DT_INT64:
        return 8;
    default:
        return 0;
    }
}

const char *tt_collseq_dtype_name(int dtype) {
    static const char *const names[] = {"?", "float32", "float64", "int64"};
    return dtype >= 1 && dtype <= 3 ? names[dtype] : names[0];
}

const char *tt_collseq_op_name(int op) {
    static const char *const names[] = {"?", "allreduce", "broadcast", "barrier"};
    return op >= 1 && op <= 3 ? names[op] : names[0];
}

const char *tt_collseq_redop_name(int redop) {
    static const char *const names[] = {"none", "sum", "min", "max"};
    return redop >= 0 && redop <= 3 ? names[redop] : "?";
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void tt_collseq_encode(const tt_collseq_hdr_t *h, uint8_t out[TT_COLLSEQ_HDR_SIZE]) {
    memset(out, 0, TT_COLLSEQ_HDR_SIZE);
    put32(out, TT_COLLSEQ_MAGIC);
    out[4] = TT_COLLSEQ_VERSION;
    out[5] = h->kind;
    out[6] = h->fp.op;
    out[7] = h->fp.dtype;
    out[8] = h->fp.redop;
    out[9] = h->flags;
    put32(out + 12, (uint32_t)h->src);
    put32(out + 16, (uint32_t)h->aux);
    put32(out + 20, (uint32_t)h->status);
    put32(out + 24, (uint32_t)h->fp.root);
    put32(out + 28, h->unit);
    put64(out + 32, h->generation);
    put64(out + 40, h->seq);
    put64(out + 48, h->fp.count);
    put64(out + 56, h->job);
}

uint64_t tt_collseq_job_tag(const char *job_id) {
    if (job_id == NULL || job_id[0] == '\0')
        return 0;
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)job_id; *p != '\0'; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

static int reject(char *err, size_t errlen, int rc, const char *what, unsigned v) {
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "bad ring header: %s %u", what, v);
    return rc;
}

int tt_collseq_decode(const void *buf, size_t len, tt_collseq_hdr_t *out, char *err,
                      size_t errlen) {
    const uint8_t *p = buf;
    if (len != TT_COLLSEQ_HDR_SIZE)
        return reject(err, errlen, TT_EPROTO, "length", (unsigned)len);
    if (get32(p) != TT_COLLSEQ_MAGIC)
        return reject(err, errlen, TT_EPROTO, "magic", get32(p));
    if (p[4] != TT_COLLSEQ_VERSION)
        return reject(err, errlen, TT_EVERSION, "version", p[4]);
    if (p[5] < TT_COLLSEQ_DATA || p[5] > TT_COLLSEQ_READY)
        return reject(err, errlen, TT_EPROTO, "kind", p[5]);
    if (p[6] < TT_COLL_ALLREDUCE || p[6] > TT_COLL_BARRIER)
        return reject(err, errlen, TT_EPROTO, "op", p[6]);
    if (p[7] > TT_DT_INT64 || p[8] > TT_RED_MAX)
        return reject(err, errlen, TT_EPROTO, "dtype/redop", (unsigned)p[7] << 8 | p[8]);
    if ((p[9] & ~TT_COLLSEQ_F_SIDE) || (p[9] && p[5] != TT_COLLSEQ_DATA))
        return reject(err, errlen, TT_EPROTO, "flags", p[9]);
    out->kind = p[5];
    out->fp.op = p[6];
    out->fp.dtype = p[7];
    out->fp.redop = p[8];
    out->flags = p[9];
    out->src = (int32_t)get32(p + 12);
    out->aux = (int32_t)get32(p + 16);
    out->status = (int32_t)get32(p + 20);
    out->fp.root = (int32_t)get32(p + 24);
    out->unit = get32(p + 28);
    out->generation = get64(p + 32);
    out->seq = get64(p + 40);
    out->fp.count = get64(p + 48);
    out->job = get64(p + 56);
    return 0;
}

char *tt_collseq_describe(const tt_coll_fp_t *fp, uint64_t seq, char *buf, size_t len) {
    const char *op = tt_collseq_op_name(fp->op);
    const char *dt = tt_collseq_dtype_name(fp->dtype);
    unsigned long long n = (unsigned long long)fp->count;
    unsigned long long s = (unsigned long long)seq;
    if (fp->op == TT_COLL_BARRIER)
        snprintf(buf, len, "%s #%llu", op, s);
    else if (fp->op == TT_COLL_BROADCAST)
        snprintf(buf, len, "%s #%llu (%s x %llu, root %d)", op, s, dt, n, (int)fp->root);
    else if (fp->redop != TT_RED_SUM)
        snprintf(buf, len, "%s #%llu (%s x %llu, %s)", op, s, dt, n,
                 tt_collseq_redop_name(fp->redop));
    else
        snprintf(buf, len, "%s #%llu (%s x %llu)", op, s, dt, n);
    return buf;
}

static int fp_equal(const tt_coll_fp_t *a, const tt_coll_fp_t *b) {
    return a->op == b->op && a->dtype == b->dtype && a->redop == b->redop && a->root == b->root &&
           a->count == b->count;
}

int tt_collseq_check(const tt_collseq_hdr_t *got, int self_rank, uint64_t expect_seq,
                     const tt_coll_fp_t *expect, char *err, size_t errlen) {
    if (got->seq == expect_seq && fp_equal(&got->fp, expect))
        return 0;
    if (err != NULL && errlen > 0) {
        char a[128], b[128];
        snprintf(err, errlen, "rank %d sent %s but rank %d expected %s", (int)got->src,
                 tt_collseq_describe(&got->fp, got->seq, a, sizeof(a)), self_rank,
                 tt_collseq_describe(expect, expect_seq, b, sizeof(b)));
    }
    return TT_EDESYNC;
}
