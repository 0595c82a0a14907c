/* tt_buckets: bucket layout and per-step readiness (see the header). For
 * each bucket we precompute how many tensors overlap it; grad_ready
 * decrements the counter of every bucket its tensor overlaps, so a bucket
 * completes exactly when the counter reaches zero, once per step, whatever
 * order the gradients arrive in. The layout (each bucket's span, each
 * tensor's first and last bucket) is computed once at finalize. */
#include "tt_buckets.h"

#include "tt_status.h"

#include <stdlib.h>
#include <string.h>

struct tt_buckets {
    size_t elem, bucket_elems, first_elems;
    int finalized;
    size_t ntensors, tcap, total;
    size_t *toff, *tcount;
    size_t *tlo, *thi; /* first and last bucket of each tensor */
    unsigned char *tready;
    size_t nbuckets;
    size_t *bstart, *bcount; /* element span of each bucket */
    size_t *bdeps;           /* tensors overlapping each bucket */
    size_t *bpending;        /* this step's remaining tensors per bucket */
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
    free(x->tlo);
    free(x->thi);
    free(x->bstart);
    free(x->bcount);
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

/* The layout walk, from the last tensor back to the first. Buckets end at
 * tensor boundaries: a bucket is closed before a tensor that does not fit
 * in what is left of it, because a bucket that ends inside a tensor
 * completes only when that whole tensor is ready, and so would wait as
 * long as the next bucket while making the step pay one more collective.
 * Only a tensor larger than an empty bucket is cut, into pieces of the
 * bucket size from its end. Returns the number of buckets. */
static size_t walk(tt_buckets_t *b) {
    size_t nb = 0, cap = b->first_elems, cur = 0, end = b->total;
    for (size_t t = b->ntensors; t-- > 0;) {
        size_t left = b->tcount[t];
        b->tlo[t] = nb;
        while (left > 0) {
            size_t take = left <= cap - cur ? left : cur == 0 ? cap : 0;
            if (take == 0 && b->tlo[t] == nb)
                b->tlo[t] = nb + 1; /* t starts in the next bucket */
            cur += take;
            left -= take;
            if (left > 0 || cur == cap) { /* close the bucket */
                b->bstart[nb] = end - cur;
                b->bcount[nb++] = cur;
                end -= cur;
                cap = b->bucket_elems;
                cur = 0;
            }
        }
        b->thi[t] = cur > 0 ? nb : nb - 1;
    }
    if (cur > 0) {
        b->bstart[nb] = end - cur;
        b->bcount[nb++] = cur;
    }
    return nb;
}

int tt_buckets_finalize(tt_buckets_t *b) {
    if (b->finalized)
        return TT_EBUSY;
    /* At most one bucket closed early per tensor, plus the full ones. */
    size_t most = b->ntensors + b->total / b->bucket_elems + 2;
    b->tlo = calloc(b->ntensors + 1, sizeof(size_t));
    b->thi = calloc(b->ntensors + 1, sizeof(size_t));
    b->bstart = calloc(most, sizeof(size_t));
    b->bcount = calloc(most, sizeof(size_t));
    b->bdeps = calloc(most, sizeof(size_t));
    b->bpending = calloc(most, sizeof(size_t));
    b->tready = calloc(b->ntensors + 1, 1);
    if (b->tlo == NULL || b->thi == NULL || b->bstart == NULL || b->bcount == NULL ||
        b->bdeps == NULL || b->bpending == NULL || b->tready == NULL)
        return TT_ENOMEM;
    b->nbuckets = walk(b);
    for (size_t t = 0; t < b->ntensors; t++)
        for (size_t k = b->tlo[t]; k <= b->thi[t]; k++)
            b->bdeps[k]++;
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
    *off = b->bstart[bucket];
    *count = b->bcount[bucket];
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
    for (size_t k = b->tlo[tensor]; k <= b->thi[tensor]; k++) {
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
