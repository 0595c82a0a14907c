/* tt_buckets: bucket layout and per-step readiness (see the header). For
 * each bucket we precompute how many tensors overlap it; grad_ready
 * decrements the counter of every bucket its tensor overlaps, so a bucket
 * completes exactly when the counter reaches zero, once per step, whatever
 * order the gradients arrive in. A tensor's buckets are found by arithmetic
 * on the end-anchored layout, not by search. */
#include "tt_buckets.h"

#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

struct tt_buckets {
    size_t elem, bucket_elems, first_elems;
    int finalized;
    size_t ntensors, tcap, total;
    size_t *toff, *tcount;
    unsigned char *tready;
    size_t nbuckets;
    size_t *bdeps;    /* tensors overlapping each bucket */
    size_t *bpending; /* this step's remaining tensors per bucket */
};

int tt_buckets_create(tt_buckets_t **out, const tt_buckets_opts_t *opts) {
    if (out == NULL)
        return TT_EINVAL;
    *out = NULL;
    tt_buckets_opts_t o = {0, 0, 0};
    if (opts != NULL)
        o = *opts;
    size_t elem = o.elem_size ? o.elem_size : 4;
    size_t bb = o.bucket_bytes ? o.bucket_bytes : TT_BUCKETS_DEFAULT_BYTES;
    size_t fb = o.first_bucket_bytes ? o.first_bucket_bytes : TT_BUCKETS_DEFAULT_FIRST_BYTES;
    if (o.first_bucket_bytes == 0 && fb > bb)
        fb = bb;
    if (bb < elem || fb < elem || fb > bb)
        return TT_EINVAL;
    tt_buckets_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return TT_ENOMEM;
    b->elem = elem;
    b->bucket_elems = bb / elem;
    b->first_elems = fb / elem;
    *out = b;
    return TT_OK;
}

void tt_buckets_destroy(tt_buckets_t **b) {
    if (b == NULL || *b == NULL)
        return;
    tt_buckets_t *x = *b;
    free(x->toff);
    free(x->tcount);
    free(x->tready);
    free(x->bdeps);
    free(x->bpending);
    free(x);
    *b = NULL;
}

static int grow(tt_buckets_t *b) {
    size_t cap = b->tcap ? b->tcap * 2 : 16;
    size_t *o = realloc(b->toff, cap * sizeof(*o));
    if (o == NULL)
        return TT_ENOMEM;
    b->toff = o;
    size_t *c = realloc(b->tcount, cap * sizeof(*c));
    if (c == NULL)
        return TT_ENOMEM;
    b->tcount = c;
    b->tcap = cap;
    return TT_OK;
}

int tt_buckets_add(tt_buckets_t *b, size_t count, size_t *tensor) {
    if (b->finalized)
        return TT_EBUSY;
    if (count == 0)
        return TT_EINVAL;
    if (b->ntensors == b->tcap && grow(b) != TT_OK)
        return TT_ENOMEM;
    b->toff[b->ntensors] = b->total;
    b->tcount[b->ntensors] = count;
    b->total += count;
    if (tensor != NULL)
        *tensor = b->ntensors;
    b->ntensors++;
    return TT_OK;
}

/* Bucket holding element index `e` (e < total), given the end anchoring. */
static size_t bucket_of(const tt_buckets_t *b, size_t e) {
    size_t from_end = b->total - 1 - e;
    if (from_end < b->first_elems)
        return 0;
    return 1 + (from_end - b->first_elems) / b->bucket_elems;
}

int tt_buckets_finalize(tt_buckets_t *b) {
    if (b->finalized)
        return TT_EBUSY;
    size_t rest = b->total > b->first_elems ? b->total - b->first_elems : 0;
    b->nbuckets = b->total == 0 ? 0 : 1 + (rest + b->bucket_elems - 1) / b->bucket_elems;
    b->bdeps = calloc(b->nbuckets + 1, sizeof(size_t));
    b->bpending = calloc(b->nbuckets + 1, sizeof(size_t));
    b->tready = calloc(b->ntensors + 1, 1);
    if (b->bdeps == NULL || b->bpending == NULL || b->tready == NULL)
        return TT_ENOMEM;
    for (size_t t = 0; t < b->ntensors; t++) {
        size_t hi = bucket_of(b, b->toff[t]);
        size_t lo = bucket_of(b, b->toff[t] + b->tcount[t] - 1);
        for (size_t k = lo; k <= hi; k++)
            b->bdeps[k]++;
    }
    b->finalized = 1;
    tt_buckets_reset(b);
    return TT_OK;
}

size_t tt_buckets_total(const tt_buckets_t *b) {
    return b->total;
}
size_t tt_buckets_count(const tt_buckets_t *b) {
    return b->nbuckets;
}
size_t tt_buckets_ntensors(const tt_buckets_t *b) {
    return b->ntensors;
}

int tt_buckets_tensor_span(const tt_buckets_t *b, size_t tensor, size_t *off, size_t *count) {
    if (tensor >= b->ntensors)
        return TT_ENOTFOUND;
    *off = b->toff[tensor];
    *count = b->tcount[tensor];
    return TT_OK;
}

int tt_buckets_bucket_span(const tt_buckets_t *b, size_t bucket, size_t *off, size_t *count) {
    if (!b->finalized || bucket >= b->nbuckets)
        return TT_ENOTFOUND;
    size_t end_from_end = bucket == 0 ? 0 : b->first_elems + (bucket - 1) * b->bucket_elems;
    size_t size = bucket == 0 ? b->first_elems : b->bucket_elems;
    size_t end = b->total - end_from_end;
    *count = size < end ? size : end;
    *off = end - *count;
    return TT_OK;
}

int tt_buckets_grad_ready(tt_buckets_t *b, size_t tensor, size_t *done, size_t *ndone) {
    *ndone = 0;
    if (!b->finalized)
        return TT_EBUSY;
    if (tensor >= b->ntensors)
        return TT_ENOTFOUND;
    if (b->tready[tensor])
        return TT_EEXIST;
    b->tready[tensor] = 1;
    size_t hi = bucket_of(b, b->toff[tensor]);
    size_t lo = bucket_of(b, b->toff[tensor] + b->tcount[tensor] - 1);
    for (size_t k = lo; k <= hi; k++) {
        if (--b->bpending[k] == 0)
            done[(*ndone)++] = k;
    }
    return TT_OK;
}

void tt_buckets_reset(tt_buckets_t *b) {
    if (!b->finalized)
        return;
    memcpy(b->bpending, b->bdeps, b->nbuckets * sizeof(size_t));
    memset(b->tready, 0, b->ntensors);
}
